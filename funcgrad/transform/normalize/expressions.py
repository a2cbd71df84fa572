"""Expressions: names, operators, attributes, subscripts and conditional expressions as values
(static, dynamic or struct); operators become primitive calls."""
from __future__ import annotations

import ast
import types

import numpy as np

from ...ops.registry import lookup
from ..fence import error
from ..parse import MISSING
from ..values import Dyn, Static, Struct
from .common import (CustomVJP, LocalFunction, _BoundMethod, _OPS, _attr_getter, _is_metadata, _np_attr,
                     lookup_getitem)
from .constants import (_const_binop, _const_compare, _const_unary)


class Expressions:
    # ------------------------------------------------------------ expressions
    def as_expr(self, val, scope, node):
        """A value as an AST expression of the output code (static values become constants)."""
        if isinstance(val, Dyn):
            return val.expr
        if isinstance(val, Static):
            o = val.obj
            if isinstance(o, (bool, int, float, complex, str)) or o is None:
                return ast.Constant(o)
            if isinstance(o, np.generic):
                return ast.Constant(o.item())
            if isinstance(o, tuple) and all(isinstance(x, (bool, int, float, type(None))) for x in o):
                return ast.Tuple(elts=[ast.Constant(x) for x in o], ctx=ast.Load())
            if isinstance(o, slice):
                return ast.Call(func=ast.Name("slice", ast.Load()),
                                args=[ast.Constant(o.start), ast.Constant(o.stop), ast.Constant(o.step)], keywords=[])
            if isinstance(o, type) and issubclass(o, np.generic) or isinstance(o, np.dtype):
                return _np_attr(np.dtype(o).type.__name__)
            return self.external(o)
        if isinstance(val, Struct):
            if val.kind in ("tuple", "list"):
                return ast.Tuple(elts=[self.as_expr(v, scope, node) for v in val.items], ctx=ast.Load())
            raise error(scope.parsed, node, f"a {val.kind} cannot be used as an array value here",
                        "index the container to get an array")
        if isinstance(val, (LocalFunction, CustomVJP)):
            raise error(scope.parsed, node, "a function cannot be used as a value here", "call it")
        raise error(scope.parsed, node, f"unsupported value {val!r}", None)

    def expr(self, node, scope, out):
        P = scope.parsed
        if isinstance(node, ast.Constant):
            return Static(node.value)
        if isinstance(node, ast.Name):
            return self.lookup_name(node.id, scope, node)
        if isinstance(node, ast.Attribute):
            base = self.expr(node.value, scope, out)
            return self.attribute(base, node, scope, out)
        if isinstance(node, (ast.Tuple, ast.List)):
            return Struct("tuple" if isinstance(node, ast.Tuple) else "list",
                          [self.expr(e, scope, out) for e in node.elts])
        if isinstance(node, ast.Dict):
            items = {}
            for k, v in zip(node.keys, node.values):
                kv = self.expr(k, scope, out)
                if not isinstance(kv, Static):
                    raise error(P, k, "dict keys must be constants", None)
                items[kv.obj] = self.expr(v, scope, out)
            return Struct("dict", items)
        if isinstance(node, ast.BinOp):
            left = self.expr(node.left, scope, out)
            right = self.expr(node.right, scope, out)
            if isinstance(left, Static) and isinstance(right, Static):
                return Static(_const_binop(node.op, left.obj, right.obj, P, node))
            if isinstance(left, Struct) or isinstance(right, Struct):
                if isinstance(node.op, ast.Add) and isinstance(left, Struct) and isinstance(right, Struct):
                    return Struct("tuple", left.values() + right.values())
                raise error(P, node, "arithmetic on a tuple/list/dict is not supported",
                            "use arrays (np.stack the values first)")
            fn = _OPS.get(type(node.op))
            if fn is None:
                return Dyn(ast.BinOp(left=self.as_expr(left, scope, node), op=node.op,
                                     right=self.as_expr(right, scope, node)))
            return self.call_prim(lookup(fn), [left, right], {}, scope, out, node)
        if isinstance(node, ast.UnaryOp):
            v = self.expr(node.operand, scope, out)
            if isinstance(v, Static):
                return Static(_const_unary(node.op, v.obj))
            if isinstance(node.op, ast.USub):
                return self.call_prim(lookup(np.negative), [v], {}, scope, out, node)
            if isinstance(node.op, ast.UAdd):
                return v
            return Dyn(ast.UnaryOp(op=node.op, operand=self.as_expr(v, scope, node)))
        if isinstance(node, ast.Compare):
            vals = [self.expr(node.left, scope, out)] + [self.expr(c, scope, out) for c in node.comparators]
            if all(isinstance(v, Static) for v in vals) and len(vals) == 2:
                return Static(_const_compare(node.ops[0], vals[0].obj, vals[1].obj))
            if len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)):
                a, b = vals
                if isinstance(b, Static) and b.obj is None:
                    res = isinstance(a, Static) and a.obj is None
                    return Static(res if isinstance(node.ops[0], ast.Is) else not res)
            return Dyn(ast.Compare(left=self.as_expr(vals[0], scope, node), ops=node.ops,
                                   comparators=[self.as_expr(v, scope, node) for v in vals[1:]]))
        if isinstance(node, ast.BoolOp):
            vals = [self.expr(v, scope, out) for v in node.values]
            if all(isinstance(v, Static) for v in vals):
                r = vals[0].obj
                for v in vals[1:]:
                    r = (r and v.obj) if isinstance(node.op, ast.And) else (r or v.obj)
                return Static(r)
            return Dyn(ast.BoolOp(op=node.op, values=[self.as_expr(v, scope, node) for v in vals]))
        if isinstance(node, ast.Subscript):
            base = self.expr(node.value, scope, out)
            return self.subscript(base, node, scope, out)
        if isinstance(node, ast.Call):
            return self.call(node, scope, out)
        if isinstance(node, ast.IfExp):
            return self.ifexp(node, scope, out)
        if isinstance(node, ast.Slice):
            return Dyn(self.index(node, scope, out))
        raise error(P, node, f"unsupported expression '{type(node).__name__}'", None)

    def ifexp(self, node, scope, out):
        test = self.expr(node.test, scope, out)
        if isinstance(test, Static):
            return self.expr(node.body if test.obj else node.orelse, scope, out)
        tmp = self.names.fresh("_ifx")
        body, orelse = [], []
        self.cf_depth = getattr(self, "cf_depth", 0) + 1
        try:
            for branch, lst in ((node.body, body), (node.orelse, orelse)):
                v = self.expr(branch, scope, lst)
                lst.append(ast.copy_location(ast.Assign(targets=[ast.Name(tmp, ast.Store())],
                                                        value=self.as_expr(v, scope, node)), node))
        finally:
            self.cf_depth -= 1
        out.append(ast.copy_location(ast.If(test=self.as_expr(test, scope, node), body=body, orelse=orelse), node))
        return Dyn(ast.Name(tmp, ast.Load()))

    def attribute(self, base, node, scope, out):
        P = scope.parsed
        attr = node.attr
        if isinstance(base, Static):
            obj = getattr(base.obj, attr, MISSING)
            if obj is MISSING:
                raise error(P, node, f"{getattr(base.obj, '__name__', base.obj)!r} has no attribute '{attr}'", None)
            if isinstance(obj, (np.ndarray, float, int, np.number)) and not isinstance(obj, bool) and not isinstance(
                    base.obj, type):
                # a module's or an object's array or number (``cfg.lr``): read at every call
                return self.capture(attr, obj, scope, _attr_getter(base.obj, attr))
            if not isinstance(base.obj, types.ModuleType) and not callable(obj) and not isinstance(obj, type):
                self.static_key.append((_attr_getter(base.obj, attr), obj))  # ``cfg.n_layers``: rebuilt if changed
            return Static(obj)
        if isinstance(base, Struct):
            if base.kind == "namedtuple" or base.kind == "dict":
                fields = base.cls._fields if base.kind == "namedtuple" else None
                if fields and attr in fields:
                    return base.items[fields.index(attr)]
            raise error(P, node, f"{base.kind} has no attribute '{attr}' here", None)
        if isinstance(base, Dyn):
            if attr == "T":
                return self.call_prim(lookup(np.transpose), [base], {}, scope, out, node)
            if attr in ("shape", "ndim", "dtype", "size"):
                return Dyn(ast.Attribute(value=base.expr, attr=attr, ctx=ast.Load()))
            return _BoundMethod(base, attr, node)
        raise error(P, node, f"cannot take attribute '{attr}' of this value", None)

    def subscript(self, base, node, scope, out):
        P = scope.parsed
        if isinstance(base, Struct):
            key = self.expr(node.slice, scope, out)
            if not isinstance(key, Static):
                raise error(P, node, "a tuple/list/dict argument can only be indexed by a constant",
                            "index with a literal key or number")
            try:
                if base.kind == "dict":
                    return base.items[key.obj]
                r = base.items[key.obj]
                return Struct(base.kind if base.kind != "namedtuple" else "tuple", r) if isinstance(key.obj, slice) else r
            except (KeyError, IndexError, TypeError):
                raise error(P, node, f"key {key.obj!r} is not in this {base.kind}", None) from None
        if isinstance(base, Static):
            key = self.expr(node.slice, scope, out)
            if isinstance(key, Static):
                return Static(base.obj[key.obj])
            if isinstance(base.obj, (tuple, list)):
                return Dyn(ast.Subscript(value=self.as_expr(base, scope, node),
                                         slice=self.as_expr(key, scope, node), ctx=ast.Load()))
        if isinstance(base, Dyn):
            if _is_metadata(base.expr):  # x.shape[0]
                return Dyn(ast.Subscript(value=base.expr, slice=self.index(node.slice, scope, out), ctx=ast.Load()))
            idx = self.index(node.slice, scope, out)
            return self.call_prim(lookup_getitem(), [base, Dyn(idx)], {}, scope, out, node)
        raise error(P, node, "cannot index this value", None)

    def index(self, sl, scope, out):
        """An index expression for the output code (constants, names, slices, tuples of them)."""
        if isinstance(sl, ast.Slice):
            parts = []
            for p in (sl.lower, sl.upper, sl.step):
                parts.append(None if p is None else self.as_expr(self.expr(p, scope, out), scope, sl))
            return ast.Slice(lower=parts[0], upper=parts[1], step=parts[2])
        if isinstance(sl, ast.Tuple):
            return ast.Tuple(elts=[self.index(e, scope, out) for e in sl.elts], ctx=ast.Load())
        v = self.expr(sl, scope, out)
        if isinstance(v, Static) and v.obj is None:
            return ast.Constant(None)
        if isinstance(v, Struct):
            return ast.Tuple(elts=[self.as_expr(x, scope, sl) for x in v.values()], ctx=ast.Load())
        return self.as_expr(v, scope, sl)
