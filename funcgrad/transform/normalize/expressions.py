"""Expressions: names, operators, attributes, subscripts and conditional expressions as values
(static, dynamic or struct); operators become primitive calls."""
from __future__ import annotations

import ast
import inspect
import types

import numpy as np

from ...ops.numpy_shape import pick
from ...ops.registry import lookup
from .. import annotations as A
from ..fence import error
from ..parse import MISSING
from ..values import ContentsOf, Dyn, Obj, Splat, Static, Struct, VSElement
from .common import (CustomVJP, LocalFunction, Scope, _BoundMethod, _DictView, _Iter, _OPS, _Partial, _Range, _attr_getter,
                     _is_metadata, _is_static_tree, _np_attr, _static_value, generated_file, lookup_getitem,
                     primitive_method,
                     reverse_mode_file)
from .constants import (_const_binop, _const_compare_chain, _const_unary)
from .lowerings import index_concat
from .lists import RList, RListPop
from ..astutil import ast_walk


def _view_index(idx):
    """Whether the index expression ``idx`` (a slice, or a tuple with one) makes NumPy return a view."""
    return isinstance(idx, ast.Slice) or isinstance(idx, ast.Tuple) and any(isinstance(e, ast.Slice) for e in idx.elts)


class Expressions:
    # ------------------------------------------------------------ expressions
    def as_expr(self, val, scope, node):
        """A value as an AST expression of the output code (static values become constants)."""
        if isinstance(val, Dyn):
            if isinstance(val, Splat):   # f(*x.shape) passed on to a call that runs as it is
                return ast.Starred(value=val.expr, ctx=ast.Load())
            return val.expr
        if isinstance(val, Static):
            o = val.obj
            if isinstance(o, (bool, int, float, complex, str)) or o is None or o is Ellipsis:  # x[..., 0]
                return ast.Constant(o)
            if isinstance(o, np.generic):
                return ast.Constant(o.item())
            if isinstance(o, tuple) and _const_tuple(o):   # also nested: pad widths ((1, 2), (0, 1))
                return ast.Tuple(elts=[self.as_expr(Static(x), scope, node) for x in o], ctx=ast.Load())
            if isinstance(o, slice):
                return ast.Call(func=ast.Name("slice", ast.Load()),
                                args=[ast.Constant(o.start), ast.Constant(o.stop), ast.Constant(o.step)], keywords=[])
            if isinstance(o, type) and issubclass(o, np.generic) or isinstance(o, np.dtype):
                return _np_attr(np.dtype(o).type.__name__)
            if isinstance(o, np.ndarray) and o.ndim == 1 and 0 < o.size <= 256 and o.dtype.kind in "iub":
                # a small constant index array (x[[0, 2, 2]]): written into the code, readable, and Numba
                # does not have to compare global arrays
                call = ast.Call(func=_np_attr("array"), args=[ast.List(elts=[ast.Constant(v.item()) for v in o],
                                                                       ctx=ast.Load())],
                                keywords=[ast.keyword(arg="dtype", value=_np_attr(o.dtype.type.__name__))])
                A.put(call, A.NONDIFF, np.array)
                return call
            return self.external(o)
        if isinstance(val, Struct):
            if val.kind == "slice":   # a slice object made at run time, as a value: slice(lo, hi, step)
                return ast.Call(func=ast.Name("slice", ast.Load()),
                                args=[self.as_expr(v, scope, node) for v in val.items], keywords=[])
            if val.kind in ("tuple", "list"):
                return ast.Tuple(elts=[self.as_expr(v, scope, node) for v in val.items], ctx=ast.Load())
            raise error(scope.parsed, node, f"a {val.kind} cannot be used as an array value here",
                        "index the container to get an array")
        if isinstance(val, RList):   # the list as NumPy reads it: the array of its elements
            return self.runtime_list_array(val, scope, None, node).expr
        if isinstance(val, (LocalFunction, CustomVJP)):
            raise error(scope.parsed, node, "a function cannot be used as a value here", "call it")
        if isinstance(val, Obj):
            raise error(scope.parsed, node, f"a '{val.cls.__name__}' object cannot be used as an array value here",
                        "use its attributes, or call its methods")
        what = {"_DictView": "a dict's keys, values or items", "_Range": "a range", "_Iter": "a zip or enumerate",
                "_Partial": "a functools.partial", "_BoundMethod": "a method"}.get(type(val).__name__, "this value")
        raise error(scope.parsed, node, f"{what} cannot be used as an array value here",
                    "convert it (list(...), np.array(...)) or index it")

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
            return self.binop(node.op, left, right, scope, out, node)
        if isinstance(node, ast.UnaryOp):
            v = self.expr(node.operand, scope, out)
            if isinstance(v, Static):
                return Static(_const_unary(node.op, v.obj))
            if isinstance(node.op, ast.USub):
                return self.call_prim(lookup(np.negative), [v], {}, scope, out, node)
            if isinstance(node.op, ast.UAdd):
                return v
            return Dyn(ast.UnaryOp(op=node.op, operand=self.as_expr(v, scope, node)))
        if isinstance(node, ast.JoinedStr):
            return _fstring(self, node, scope, out)
        if isinstance(node, ast.Compare):
            vals = [self.expr(node.left, scope, out)] + [self.expr(c, scope, out) for c in node.comparators]
            # a tuple or list display of constants (`mode not in ("a", "b")`) compares as the Python object
            vals = [_known_container(v) for v in vals]
            if all(isinstance(v, Static) for v in vals):
                # a chain too (`0 < 1 < 0.5`): left unevaluated, a chain of literals reached the generated code,
                # where Numba prunes the branch it guards and the gradient's lists kept there have no type
                res = _const_compare_chain(node.ops, [v.obj for v in vals])
                if res is not None or len(vals) == 2:
                    return Static(res)
            if len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)) and isinstance(vals[0], Static) \
                    and (isinstance(vals[1], Struct) and vals[1].kind == "dict" or
                         isinstance(vals[1], _DictView) and vals[1].attr == "keys"):
                # `"w" in d` (d.keys()): a dict's keys are known while transforming, whatever its values hold
                keys = vals[1].items if isinstance(vals[1], Struct) else vals[1].struct.items
                try:
                    res = vals[0].obj in keys
                except TypeError:   # an unhashable key: Python raises
                    raise error(scope.parsed, node, f"unhashable type: '{type(vals[0].obj).__name__}'", None) \
                        from None
                return Static(res if isinstance(node.ops[0], ast.In) else not res)
            if len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)):
                a, b = vals
                if isinstance(b, Static) and b.obj is None:
                    res = isinstance(a, Static) and a.obj is None
                    return Static(res if isinstance(node.ops[0], ast.Is) else not res)
            return Dyn(ast.Compare(left=self.as_expr(vals[0], scope, node), ops=node.ops,
                                   comparators=[self.as_expr(v, scope, node) for v in vals[1:]]))
        if isinstance(node, ast.BoolOp):
            return self.boolop(node, scope, out)
        if isinstance(node, ast.Subscript):
            base = self.expr(node.value, scope, out)
            return self.subscript(base, node, scope, out)
        if isinstance(node, ast.Call):
            return self.call(node, scope, out)
        if isinstance(node, ast.IfExp):
            return self.ifexp(node, scope, out)
        if isinstance(node, ast.Slice):
            parts = [None if q is None else self.expr(q, scope, out) for q in (node.lower, node.upper, node.step)]
            if all(q is None or isinstance(q, Static) for q in parts):
                return Static(slice(*[None if q is None else q.obj for q in parts]))
            return Dyn(self.index(node, scope, out))
        if isinstance(node, ast.Lambda):
            fdef = ast.FunctionDef(name="<lambda>", args=node.args, body=[ast.copy_location(ast.Return(value=node.body),
                                                                                            node.body)],
                                   decorator_list=[], returns=None, type_params=[])
            ast.copy_location(fdef, node)
            return self.local_function(fdef, scope, out)
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.DictComp, ast.SetComp)):
            return self.comprehension(node, scope, out)
        raise error(P, node, f"unsupported expression '{type(node).__name__}'", None)

    def comprehension(self, node, scope, out):
        """A comprehension over containers and ranges known now, unrolled into a list, tuple or dict."""
        P = scope.parsed
        if isinstance(node, ast.SetComp):
            raise error(P, node, "set comprehensions are not supported", "use a list or an array")
        start = len(out)
        try:
            return self.static_comprehension(node, scope, out)
        except _RuntimeIterable:
            del out[start:]
            return self.runtime_comprehension(node, scope, out)

    def static_comprehension(self, node, scope, out):
        P = scope.parsed
        results = []

        def run(gens, sc):
            if not gens:
                if isinstance(node, ast.DictComp):
                    k = self.expr(node.key, sc, out)
                    if not isinstance(k, Static):
                        raise error(P, node.key, "dict keys must be known before the function runs", None)
                    results.append((k.obj, self.expr(node.value, sc, out)))
                else:
                    results.append(self.expr(node.elt, sc, out))
                return
            g = gens[0]
            it = self.expr(g.iter, sc, out)
            if self.is_runtime_iterable(it):
                raise _RuntimeIterable()
            items = self.static_items(it, g.iter, sc)
            for v in items:
                inner = sc   # one scope for the whole comprehension, its names rebound per item (Python's: a
                # lambda made in it reads the names' last values when called)
                self.assign_static_target(g.target, v, inner, out, g)
                keep = True
                for cond in g.ifs:
                    c = self.expr(cond, inner, out)
                    if not isinstance(c, Static):
                        raise error(P, cond, "a comprehension's 'if' depends on array values",
                                    "filter with a mask instead (np.where, boolean indexing)")
                    keep = keep and bool(c.obj)
                if keep:
                    run(gens[1:], inner)

        run(node.generators, Scope(scope.parsed, scope, prefix=scope.prefix))
        if isinstance(node, ast.DictComp):
            return Struct("dict", dict(results))
        return Struct("list", results)

    def static_items(self, it, node, scope):
        """The elements of an iterable known now (a container, a constant range, zip/enumerate of those)."""
        P = scope.parsed
        if isinstance(it, RList):
            self.refuse_runtime_list(it, "unpacking or '*' of", scope, node, "index it, or loop over it")
        if isinstance(it, Struct):
            return it.values() if it.kind != "dict" else [Static(k) for k in it.items]  # a dict: its keys
        if isinstance(it, _Range):
            if all(isinstance(a, ast.Constant) for a in it.args):
                r = range(*[a.value for a in it.args])
                if len(r) > 10000:
                    raise error(P, node, f"a comprehension over {len(r)} values is unrolled, up to 10,000",
                                "use an array expression instead")
                return [Static(i) for i in r]
        if isinstance(it, _Iter):
            cols = [self.static_items(a, node, scope) for a in it.args]
            if it.fn is enumerate:
                start = it.start if it.start is not None else Static(0)
                return [Struct("tuple", [Static(i + start.obj) if isinstance(start, Static) else
                                         self.binop(ast.Add(), start, Static(i), scope, [], node), v])
                        for i, v in enumerate(cols[0])]
            return [Struct("tuple", list(t)) for t in zip(*cols)]
        if isinstance(it, _DictView):
            return it.items()
        if isinstance(it, Static):
            try:
                return [Static(v) for v in it.obj]
            except TypeError:
                pass
        raise error(P, node, "a comprehension or unpacking over values only known when the function runs "
                             "(an array's rows, a range of runtime length) is not supported",
                    "write a for loop that writes into a preallocated array, or use an array expression")

    def assign_static_target(self, target, v, scope, out, node):
        if isinstance(target, ast.Name):
            scope.vars[target.id] = v
            return
        if isinstance(target, (ast.Tuple, ast.List)):
            items = self.unpack(v, len(target.elts), scope, out, node)
            for t, x in zip(target.elts, items):
                self.assign_static_target(t, x, scope, out, node)
            return
        raise error(scope.parsed, node, "unsupported comprehension target", None)

    def boolop(self, node, scope, out):
        """``a and b`` / ``a or b`` as Python evaluates them: left to right, stopping at the first operand that
        decides (falsy for ``and``, truthy for ``or``), whose value (not a bool) is the result. Operands known
        now fold away; comparisons that need no statements stay one expression (``i < n and s > 0``);
        anything else becomes ``t = a`` then ``if t: t = b`` (``if not t:`` for ``or``), so ``b`` runs only
        when Python runs it (``i < n and x[i] > 0`` reads ``x[i]`` only when ``i < n``) and ``x and a[0]``
        is ``a[0]``, derivative included."""
        is_and = isinstance(node.op, ast.And)
        ops = list(node.values)
        val = self.expr(ops[0], scope, out)
        i = 1
        while isinstance(val, Static) and i < len(ops):
            if bool(val.obj) != is_and:   # and: a falsy operand decides; or: a truthy one
                return val
            val = self.expr(ops[i], scope, out)
            i += 1
        if i == len(ops):
            return val
        rest, scratch = [], []
        for o in ops[i:]:
            rest.append(self.expr(o, scope, scratch))
            if scratch:
                break
        exprs = [self.as_expr(v, scope, node) for v in [val] + rest]
        if not scratch and all(_boolean_valued(e) for e in exprs) and all(_cannot_fail(e) for e in exprs[1:]):
            return Dyn(ast.BoolOp(op=node.op, values=exprs))
        tmp = self.names.fresh("_bool")
        out.append(ast.copy_location(ast.Assign(targets=[ast.Name(tmp, ast.Store())], value=exprs[0]), node))
        where, depth = out, 0
        try:
            for o in ops[i:]:
                self.enter_cf(scope)
                depth += 1
                inner = []
                v = self.expr(o, scope, inner)
                inner.append(ast.copy_location(ast.Assign(targets=[ast.Name(tmp, ast.Store())],
                                                          value=self.as_expr(v, scope, node)), o))
                test = ast.Name(tmp, ast.Load()) if is_and else ast.UnaryOp(op=ast.Not(), operand=ast.Name(
                    tmp, ast.Load()))
                where.append(ast.copy_location(ast.If(test=test, body=inner, orelse=[]), o))
                where = inner   # the next operand runs only when this one did not decide: nested inside
        finally:
            for _ in range(depth):
                self.leave_cf()
        return Dyn(ast.Name(tmp, ast.Load()))

    def ifexp(self, node, scope, out):
        test = self.expr(node.test, scope, out)
        if isinstance(test, Static):
            return self.expr(node.body if test.obj else node.orelse, scope, out)
        if all(isinstance(b, (ast.Name, ast.Attribute)) for b in (node.body, node.orelse)):
            # `act = np.tanh if n > 2 else np.sin`: a function (a string, None) chosen by a value known only
            # when the function runs. Its test usually reads an int argument: that becomes a specialization key
            # (StaticArgumentNeeded) and the choice is made while transforming; else it is refused
            picks = [self.expr(b, scope, []) for b in (node.body, node.orelse)]
            if all(isinstance(v, Static) and (callable(v.obj) or isinstance(v.obj, str) or v.obj is None)
                   for v in picks) or any(isinstance(v, LocalFunction) for v in picks):
                self.promote_int_argument()
                raise error(scope.parsed, node, "choosing a function (or a string, or None) by a value known "
                                                "only when the function runs is not supported",
                            "choose it outside and pass it in, or decide on an int argument")
        tmp = self.names.fresh("_ifx")
        body, orelse = [], []
        self.enter_cf(scope)
        try:
            for branch, lst in ((node.body, body), (node.orelse, orelse)):
                v = self.expr(branch, scope, lst)
                lst.append(ast.copy_location(ast.Assign(targets=[ast.Name(tmp, ast.Store())],
                                                        value=self.as_expr(v, scope, node)), node))
        finally:
            self.leave_cf()
        out.append(ast.copy_location(ast.If(test=self.as_expr(test, scope, node), body=body, orelse=orelse), node))
        return Dyn(ast.Name(tmp, ast.Load()))

    def attribute(self, base, node, scope, out):
        P = scope.parsed
        attr = node.attr
        if isinstance(base, Static):
            obj = getattr(base.obj, attr, MISSING)
            if obj is MISSING:
                raise error(P, node, f"{getattr(base.obj, '__name__', base.obj)!r} has no attribute '{attr}'", None)
            if (isinstance(obj, (np.ndarray, float, int, complex, np.number)) and not isinstance(obj, bool) or isinstance(
                    obj, (list, tuple, dict)) and not _is_static_tree(obj)) and not isinstance(base.obj, type):
                # a module's or an object's array, number or container of arrays (``cfg.lr``, ``self.layers``):
                # read at every call
                return self.capture(attr, obj, scope, _attr_getter(base.obj, attr))
            if isinstance(obj, types.MethodType) and not isinstance(base.obj, types.ModuleType):
                return Static(obj)
            if not isinstance(base.obj, types.ModuleType) and not callable(obj) and not isinstance(obj, type):
                self.static_key.append((_attr_getter(base.obj, attr),   # ``cfg.n_layers``: rebuilt if changed
                                        ContentsOf(obj) if isinstance(obj, (list, dict, tuple)) else obj))
            return Static(obj)
        if isinstance(base, Struct):
            if base.kind == "namedtuple" or base.kind == "dict":
                fields = base.cls._fields if base.kind == "namedtuple" else None
                if fields and attr in fields:
                    return base.items[fields.index(attr)]
            if base.kind == "dict" and attr in ("items", "keys", "values", "get"):
                return _DictView(base, attr)
            if base.kind == "namedtuple" and attr == "_replace":
                return _DictView(base, attr)
            if base.kind == "list" and attr == "pop":
                return RListPop(base)
            raise error(P, node, f"{base.kind} has no attribute '{attr}' here", None)
        if isinstance(base, Obj):
            return self.object_attribute(base, node, scope, out)
        if isinstance(base, VSElement):   # a method of the user's space made a primitive: called with the value
            meth = primitive_method(base.cls, attr)
            if meth is not None:
                return _Partial(Static(meth), [base], {})
            raise self.refuse_vspace(base, scope, node, f"reads .{attr} of")
        if isinstance(base, Dyn):
            if attr == "T":
                return self.call_prim(lookup(np.transpose), [base], {}, scope, out, node)
            if attr in ("real", "imag"):
                return self.call_prim(lookup(getattr(np, attr)), [base], {}, scope, out, node)
            if attr in ("shape", "ndim", "dtype", "size"):
                known = self.known_metadata(base, attr)
                if known is not None:
                    return known
                return Dyn(ast.Attribute(value=base.expr, attr=attr, ctx=ast.Load()))
            return _BoundMethod(base, attr, node)
        if isinstance(base, RList) and attr == "pop":
            return RListPop(base)
        raise error(P, node, f"cannot take attribute '{attr}' of this value", None)

    def known_metadata(self, base, attr):
        """``x.ndim`` of an argument (its rank is part of the signature), and ``.shape``, ``.size`` and
        ``.dtype`` of a scalar argument (a float is a 0-d value, as autograd boxes it), as constants; None
        otherwise."""
        if not isinstance(base.expr, ast.Name):
            return None
        rank = self.param_ranks.get(base.expr.id)
        if rank is None and attr == "ndim":   # a value computed by primitives (norm_jvp's x, read back): inferred
            sp = self._spec_of(base.expr)
            return Static(sp[2]) if sp is not None and sp[0] == "a" else None
        if rank is None:
            return None
        if attr == "ndim":
            return Static(rank)
        if rank != 0:
            return None
        if attr == "shape":
            return Static(())
        if attr == "size":
            return Static(1)
        dt = {"f8": np.dtype(np.float64), "f4": np.dtype(np.float32)}.get(self.param_kinds.get(base.expr.id))
        return Static(dt) if attr == "dtype" and dt is not None else None

    def binop(self, op, left, right, scope, out, node):
        """``left <op> right`` of values already evaluated (a BinOp, or ``operator.add(a, b)`` called)."""
        P = scope.parsed
        if isinstance(left, Static) and isinstance(right, Static):
            return Static(_const_binop(op, left.obj, right.obj, P, node))
        for v in (left, right):
            if isinstance(v, RList):
                self.refuse_runtime_list(v, f"'{type(op).__name__}' (Python's list arithmetic) on", scope, node,
                                         f"np.stack({v.name}) first for array arithmetic; extend or append to grow it")
        if isinstance(left, Struct) or isinstance(right, Struct):
            seq = [v if isinstance(v, Struct) else Struct(type(v.obj).__name__, [Static(x) for x in v.obj])
                   if isinstance(v, Static) and type(v.obj) in (tuple, list) else v for v in (left, right)]
            if isinstance(op, ast.Add) and all(isinstance(v, Struct) and v.kind != "dict" for v in seq):
                kind = seq[0].kind if seq[0].kind == seq[1].kind == "list" else "tuple"
                return Struct(kind, seq[0].values() + seq[1].values())
            if isinstance(op, ast.Mult):   # (x,) * 3, 2 * [a]: repeated (the count known now)
                box, k = (seq[0], seq[1]) if isinstance(seq[0], Struct) else (seq[1], seq[0])
                if box.kind in ("tuple", "list") and isinstance(k, Static) and isinstance(k.obj, (int, np.integer)) \
                        and not isinstance(k.obj, bool):
                    return Struct(box.kind if box.kind == "list" else "tuple", box.values() * max(int(k.obj), 0))
                if box.kind == "list" and len(box.values()) == 1 and isinstance(k, Dyn) and \
                        self._number(box.values()[0]) and self._int_count(k):
                    # [0.0] * n, n known when the function runs: a list of n numbers that can grow (numbers are
                    # immutable: Python's n references to one number are n equal items)
                    cnt = self.names.fresh(scope.prefix + "_repeat")
                    out.append(ast.copy_location(ast.Assign(targets=[ast.Name(cnt, ast.Store())], value=ast.Call(
                        func=ast.Name("max", ast.Load()), args=[ast.Constant(0), self.as_expr(k, scope, node)],
                        keywords=[])), node))
                    arr = self.call_object(np.full, [Dyn(ast.Name(cnt, ast.Load())), box.values()[0]], {}, scope,
                                           out, node)
                    return self.runtime_list_of_rows(arr, scope, out, node)
            raise error(P, node, "arithmetic on a tuple/list/dict is not supported",
                        "use arrays (np.stack the values first)")
        fn = _OPS.get(type(op))
        if fn is None or isinstance(left, Static) and isinstance(left.obj, (str, bytes)):  # "%d" % n: formatting
            return Dyn(ast.BinOp(left=self.as_expr(left, scope, node), op=op, right=self.as_expr(right, scope, node)))
        return self.call_prim(lookup(fn), [left, right], {}, scope, out, node)

    def _number(self, v):
        """Whether ``v`` is a number (a constant, or a float/int argument or value known to be one)."""
        if isinstance(v, Static):
            return isinstance(v.obj, (int, float, np.number)) and not isinstance(v.obj, (bool, np.bool_))
        return isinstance(v, Dyn) and isinstance(v.expr, ast.Name) and self.param_kinds.get(v.expr.id) in ("f8", "i")

    def _int_count(self, k):
        """Whether runtime value ``k`` is an int (an int argument, or ``len(...)``/a shape read)."""
        e = k.expr
        if isinstance(e, ast.Name):
            return self.param_kinds.get(e.id) == "i"
        return isinstance(e, ast.Subscript) and isinstance(e.value, ast.Attribute) and e.value.attr == "shape"

    def object_attribute(self, obj, node, scope, out):
        """``obj.attr`` of an object made inside the function: its own attribute, else the class's (a method
        bound to the object, a property's value, a static or class method, a class constant), as Python looks
        it up."""
        attr = node.attr
        if obj.after is not None:   # super(): the next class's attribute, bound to the object itself
            mro = obj.cls.__mro__
            found = next((vars(c)[attr] for c in mro[mro.index(obj.after) + 1:] if attr in vars(c)), MISSING)
            if found is object.__init__:
                return Static(_object_init)
            if not isinstance(found, types.FunctionType):
                raise error(scope.parsed, node, f"super().{attr} is supported for methods of your own classes",
                            None)
            return _Partial(Static(found), [obj.of], {})
        if attr in obj.attrs:
            return obj.attrs[attr]
        found = inspect.getattr_static(obj.cls, attr, MISSING)
        if found is MISSING or attr.startswith("__") and attr.endswith("__") and attr != "__call__":
            raise error(scope.parsed, node, f"'{obj.cls.__name__}' object has no attribute '{attr}' here"
                        if found is MISSING else f"'{obj.cls.__name__}.{attr}' of an object made inside the "
                        "function is not supported", None)
        if isinstance(found, staticmethod):
            return Static(found.__func__)
        if isinstance(found, classmethod):
            return _Partial(Static(found.__func__), [Static(obj.cls)], {})
        if isinstance(found, property):
            if found.fget is None:
                raise error(scope.parsed, node, f"property '{attr}' of '{obj.cls.__name__}' has no getter", None)
            return self.call_value(Static(found.fget), [obj], {}, scope, out, node)
        if isinstance(found, types.FunctionType):
            return _Partial(Static(found), [obj], {})
        return self.attribute(Static(obj.cls), node, scope, out)   # a class attribute (a constant, a tuple)

    def pin_holders(self, name, scope, out, node):
        """Before the variable whose generated name is ``name`` is given a new value under that same name (a
        variable keeps its name, in loops too): every container reachable from the variables now that holds
        ``name`` as an item gets the current value under a name of its own, so it keeps the object it was
        given (``d = {"k": w}; w = w * 3`` leaves ``d["k"]``; an in-place ``w *= 3`` is seen, as in Python)."""
        seen, pinned = set(), []

        def visit(v):
            if isinstance(v, (Struct, Obj)) and id(v) not in seen:
                seen.add(id(v))
                items = v.attrs if isinstance(v, Obj) else v.items
                for k in (list(items) if isinstance(items, dict) else range(len(items))):
                    x = items[k]
                    if type(x) is Dyn and isinstance(x.expr, ast.Name) and x.expr.id == name:
                        if not pinned:
                            n = self.names.fresh("_item")
                            out.append(ast.copy_location(ast.Assign(targets=[ast.Name(n, ast.Store())],
                                                                    value=ast.Name(name, ast.Load())), node))
                            self.remember_spec(n, ast.Name(name, ast.Load()))
                            pinned.append(Dyn(ast.Name(n, ast.Load())))
                        items[k] = pinned[0]
                    else:
                        visit(x)

        sc = scope
        while sc is not None:
            for v in list(sc.vars.values()):
                visit(v)
            sc = sc.parent

    def runtime_position(self, base, key, scope, out, node, checked=True):
        """The name of ``i``'s position in the tuple or list ``base`` known while transforming, ``i`` known when
        the code runs: ``np.arange(len(seq))[i]``, so a negative ``i`` counts from the end and one out of range
        raises IndexError, as Python does (``checked=False``: ``i`` itself, known to be a position)."""
        at = self.call_prim(lookup_getitem(), [Static(np.arange(len(base.items))), key], {}, scope, out, node) \
            if checked else key
        idx = self.names.fresh("_at")
        out.append(ast.copy_location(ast.Assign(targets=[ast.Name(idx, ast.Store())],
                                                value=self.as_expr(at, scope, node)), node))
        return idx

    def pick_tree(self, cond, a, b, base, scope, out, node):
        """``a if cond else b`` for a flag known when the code runs; containers picked leaf by leaf (they must
        have the same structure)."""
        if isinstance(a, Struct) or isinstance(b, Struct):
            if not (isinstance(a, Struct) and isinstance(b, Struct) and a.kind == b.kind and (
                    a.items.keys() == b.items.keys() if a.kind == "dict" else len(a.items) == len(b.items))):
                raise error(scope.parsed, node, f"indexing this {base.kind} by a value known only when the function "
                            "runs needs items of one structure (the same containers, keys and lengths)",
                            "index with a number known before the function runs, or make the items alike")
            if a.kind == "dict":
                return Struct("dict", {k: self.pick_tree(cond, a.items[k], b.items[k], base, scope, out, node)
                                       for k in a.items}, a.cls)
            return Struct(a.kind, [self.pick_tree(cond, x, y, base, scope, out, node)
                                   for x, y in zip(a.items, b.items)], a.cls)
        for v in (a, b):
            if isinstance(v, RList) or not isinstance(v, (Dyn, Static)) or isinstance(v, Static) and not \
                    isinstance(v.obj, (bool, int, float, complex, np.number, np.bool_, np.ndarray)):
                raise error(scope.parsed, node, f"indexing this {base.kind} by a value known only when the function "
                            "runs is supported for items that are numbers, arrays or containers of them",
                            "index with a number known before the function runs")
        return self.call_prim(lookup(pick), [cond, a, b], {}, scope, out, node)

    def runtime_item(self, base, key, scope, out, node, checked=True):
        """``seq[i]`` of a tuple or list known while transforming, ``i`` known when the code runs: each item
        picked by comparing its position with ``i`` (:meth:`runtime_position`; ``pick``: the items may differ in
        shape)."""
        items = base.values()
        idx = self.runtime_position(base, key, scope, out, node, checked)
        val = items[-1]
        for k in range(len(items) - 2, -1, -1):
            val = self.pick_tree(_position_is(idx, k), items[k], val, base, scope, out, node)
        return val

    def subscript(self, base, node, scope, out):
        P = scope.parsed
        if isinstance(base, RList):
            key = self.as_static_capture(self.expr(node.slice, scope, out))
            return self.runtime_list_item(base, key, scope, out, node)
        if isinstance(base, _Range) and all(isinstance(a, ast.Constant) for a in base.args):
            base = Static(range(*[a.value for a in base.args]))
        if isinstance(base, Static) and isinstance(base.obj, range):
            key = self.expr(node.slice, scope, out)
            if isinstance(key, Static):
                r = base.obj[key.obj]
                return _Range([ast.Constant(r.start), ast.Constant(r.stop), ast.Constant(r.step)]) \
                    if isinstance(r, range) else Static(r)
        if isinstance(base, Struct):
            key = self.as_static_capture(self.expr(node.slice, scope, out))
            if not isinstance(key, Static) and base.kind != "dict" and base.items:
                # a tape of values known now (the loop that pushed it was written out) read back by a loop that
                # runs indexes it in range: no check there
                return self.runtime_item(base, key, scope, out, node, checked=not (
                    base.kind == "list" and generated_file(P.filename)))
            if not isinstance(key, Static):
                raise error(P, node, "a dict can only be indexed by a key known before the function runs",
                            "index with a literal key, or keep the values in an array indexed by number")
            try:
                if base.kind == "dict":
                    return base.items[key.obj]
                r = base.items[key.obj]
                return Struct(base.kind if base.kind != "namedtuple" else "tuple", r) if isinstance(key.obj, slice) else r
            except (KeyError, IndexError, TypeError):
                raise error(P, node, f"key {key.obj!r} is not in this {base.kind}", None) from None
        if isinstance(base, Static) and (base.obj is np.r_ or base.obj is np.c_):
            return index_concat(self, base.obj, node, scope, out)
        if isinstance(base, Static):
            key = self.expr(node.slice, scope, out)
            if isinstance(key, Static):
                return Static(base.obj[key.obj])
            if isinstance(base.obj, (tuple, list)):
                return Dyn(ast.Subscript(value=self.as_expr(base, scope, node),
                                         slice=self.as_expr(key, scope, node), ctx=ast.Load()))
            if isinstance(base.obj, np.ndarray):   # a captured array indexed by values known when it runs (a
                # gradient's code read back indexes E[:, :3] of a global E with bounds it computed)
                return self.call_prim(lookup_getitem(), [base, Dyn(self.index(node.slice, scope, out))], {}, scope,
                                      out, node)
        if isinstance(base, Dyn):
            if _is_metadata(base.expr):  # x.shape[0]
                return Dyn(ast.Subscript(value=base.expr, slice=self.index(node.slice, scope, out), ctx=ast.Load()))
            idx = self.index(node.slice, scope, out)
            if isinstance(idx, ast.Tuple) and not idx.elts:   # x[()]: the value itself (a 0-d array's number)
                return base
            val = self.call_prim(lookup_getitem(), [base, Dyn(idx)], {}, scope, out, node)
            if reverse_mode_file(P.filename) and _view_index(idx):
                # a gradient's code read back: it keeps the slices it reads (views) and restores the array before
                # reading them again in its reverse loop; as values, they are the slice when it was read (not in
                # forward-mode code: there a write through a view is the user's, and shows in the other name)
                val = self.call_prim(lookup(np.copy), [val], {}, scope, out, node)
            return val
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
        if isinstance(v, Struct) and v.kind == "list":
            # x[[0, 2, 2]]: a list is an integer-array index (a tuple would index several axes)
            if all(isinstance(x, Static) for x in v.values()):
                return self.as_expr(Static(np.array([x.obj for x in v.values()])), scope, sl)
            call = ast.Call(func=_np_attr("array"), args=[ast.List(elts=[self.as_expr(x, scope, sl)
                                                                         for x in v.values()], ctx=ast.Load())],
                            keywords=[])
            A.put(call, A.NONDIFF, np.array)
            return call
        if isinstance(v, Struct) and v.kind == "slice":   # idx = slice(lo, hi); x[idx]
            return self.slice_index(v, scope, sl)
        if isinstance(v, Struct):
            return ast.Tuple(elts=[self.slice_index(x, scope, sl) if isinstance(x, Struct) and x.kind == "slice"
                                   else self.as_expr(x, scope, sl) for x in v.values()], ctx=ast.Load())
        if isinstance(v, Static) and isinstance(v.obj, list):
            return self.as_expr(Static(np.array(v.obj)), scope, sl)
        return self.as_expr(v, scope, sl)


    def slice_index(self, v, scope, sl):
        """A slice made at run time (``slice(i * b, (i + 1) * b)``) as the index ``lo:hi:step``."""
        parts = [None if isinstance(q, Static) and q.obj is None else self.as_expr(q, scope, sl) for q in v.items]
        return ast.Slice(lower=parts[0], upper=parts[1], step=parts[2])


class _RuntimeIterable(Exception):
    """A comprehension iterates over a value only known at run time: lowered as a runtime loop instead."""


def _const_tuple(o):
    """A tuple of numbers, None and strings (nested tuples of them too): written into the code as it is."""
    return all(isinstance(x, (bool, int, float, str, type(None))) or isinstance(x, tuple) and _const_tuple(x)
               for x in o)


def _boolean_valued(e):
    """An expression whose value is a bool whatever its operands hold (a comparison, ``not``, a literal bool)."""
    if isinstance(e, ast.Compare) or isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
        return True
    if isinstance(e, ast.BoolOp):
        return all(_boolean_valued(v) for v in e.values)
    return isinstance(e, ast.Constant) and isinstance(e.value, bool)


_SAFE_NODES = (ast.Name, ast.Constant, ast.Compare, ast.BoolOp, ast.UnaryOp, ast.Attribute, ast.expr_context,
               ast.cmpop, ast.boolop, ast.unaryop)


def _cannot_fail(e):
    """Evaluating ``e`` early can neither raise nor cost anything: names, literals, attributes
    (``a.shape``) and comparisons of them. An index (``x[i]``), a call or arithmetic (``x / y``) is kept for
    when Python evaluates it."""
    return all(isinstance(n, _SAFE_NODES) for n in ast_walk(e))


def _fstring(self, node, scope, out):
    """An f-string of values known now (shapes, sizes, flags, constants: a message): the string."""
    parts = []
    for v in node.values:
        if isinstance(v, ast.Constant):
            parts.append(str(v.value))
            continue
        val = _known_container(self.expr(v.value, scope, out))
        if not isinstance(val, Static):
            raise error(scope.parsed, v, "an f-string of a value known only when the function runs (an array's "
                                         "values) is not supported",
                        "format shapes, sizes or constants; compute a message from values outside the function")
        obj = val.obj
        if v.conversion == ord("r"):
            obj = repr(obj)
        elif v.conversion == ord("s"):
            obj = str(obj)
        elif v.conversion == ord("a"):
            obj = ascii(obj)
        spec = ""
        if v.format_spec is not None:
            sp = self.expr(v.format_spec, scope, out)
            spec = sp.obj if isinstance(sp, Static) else ""
        parts.append(format(obj, spec))
    return Static("".join(parts))


def _static_leaves(v):
    """Whether every leaf of the container ``v`` is known now."""
    if isinstance(v, Struct):
        return all(_static_leaves(x) for x in v.values())
    return isinstance(v, Static)


def _known_container(v):
    """A tuple, list or dict whose leaves are all known now (``("a", "b")``, ``x.shape`` of known sizes) as the Python
    object; anything else as it is."""
    if isinstance(v, Struct) and v.kind in ("tuple", "list", "dict") and _static_leaves(v):
        return Static(_static_value(v))
    return v


def _position_is(name, k):
    """The flag ``name == k`` (a position computed when the code runs, a position known now)."""
    return Dyn(ast.Compare(left=ast.Name(name, ast.Load()), ops=[ast.Eq()], comparators=[ast.Constant(k)]))


def _object_init(*args, **kwargs):
    """``super().__init__()`` reaching ``object.__init__``: nothing to do."""
    return None
