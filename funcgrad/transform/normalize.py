"""Normalize: desugar the user's function into flat, explicit primitive code.

Input: a parsed function plus the structure of each argument (pytree
structure and, per leaf, array/scalar/static). Output (:class:`Lowered`): one
``ast.FunctionDef`` whose parameters are the argument *leaves* and the captured
free variables, and whose body guarantees:

* every differentiable operation is a call ``K.<primitive>(...)`` whose
  arguments are bound to the primitive's signature (operators, methods such as
  ``x.sum(axis=1)``, ``x.T`` and NumPy functions under any alias all become
  such calls, resolved by object, not by name);
* pytree reads by constant key/index/attribute, tuple unpacking, tuple and
  dict results, and calls to the user's own helper functions (same module,
  other modules, nested ``def``) are resolved statically: helpers are inlined
  with fresh names, containers disappear into their leaves;
* ``+=`` and friends are plain assignments; in-place writes are
  ``x[idx] = value`` statements;
* free variables (captured arrays and numbers) are parameters, so a captured
  value that changes takes effect at the next call without recompiling;
  modules, functions and other static objects are resolved now;
* non-differentiable NumPy calls (``np.zeros``, ``np.arange``, ...) are kept as
  ``np.<name>(...)``; anything else that cannot be differentiated is reported
  by the reverse pass if a differentiated value flows into it.

Control flow (``for``/``while``/``if``) is kept as statements with lowered
bodies; the reverse pass handles it.
"""
from __future__ import annotations

import ast
import builtins
import copy
import inspect
import math
import operator
import types
from dataclasses import dataclass, field

import numpy as np

from ..custom import CustomVJPFunction
from ..errors import NoDerivativeError, UnsupportedSyntaxError
from ..ops.core import getitem as _getitem
from ..ops.registry import Primitive, lookup
from .fence import check as fence_check, error
from .parse import MISSING, Parsed, parse
from .specs import scalar_kind
from .structure import RET, StructureError, lift_returns, single_exit, structure_loops
from .values import Dyn, Static, Struct, leaves as _leaves, map_struct as _map_struct

@dataclass
class LocalFunction:
    """A nested ``def`` (closing over its defining scope)."""
    node: ast.FunctionDef
    scope: "Scope"
    parsed: Parsed


@dataclass
class CustomVJP:
    """Marker for funcgrad.custom_vjp functions (see api.custom_vjp)."""
    fn: object


@dataclass
class Lowered:
    node: ast.FunctionDef
    params: list                 # output names of argument leaves (in flatten order)
    captured: list               # (output name, python object) of captured runtime values
    output: object               # value tree of the return (Struct / Dyn / Static)
    externals: dict              # extra globals the generated module needs
    static_key: tuple            # captured static values that the compiled code depends on
    has_loops: bool
    filename: str
    ranks: dict = field(default_factory=dict)
    kinds: dict = field(default_factory=dict)


# ---------------------------------------------------------------- method map
_METHODS = {
    "sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod,
    "copy": np.copy, "dot": np.dot, "clip": np.clip, "squeeze": np.squeeze,
    "transpose": np.transpose, "reshape": np.reshape, "ravel": None, "flatten": None,
    "astype": None, "any": np.any, "all": np.all, "argmax": np.argmax, "argmin": np.argmin,
    "cumsum": np.cumsum,
}
_OPS = {ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply, ast.Div: np.divide,
        ast.Pow: np.power, ast.MatMult: np.matmul}
_NONDIFF_OPS = (ast.FloorDiv, ast.Mod, ast.BitAnd, ast.BitOr, ast.BitXor, ast.LShift, ast.RShift)
_BUILTIN_MAP = {abs: np.absolute, max: np.maximum, min: np.minimum}


class Names:
    def __init__(self):
        self.used = set()

    def fresh(self, base):
        base = "".join(c if (c.isalnum() or c == "_") else "_" for c in str(base)) or "v"
        if base[0].isdigit():
            base = "v" + base
        if base in ("K", "np", "math", "g_out") or base.startswith("d_") or base.startswith("_t"):
            base = base + "_"
        name, i = base, 1
        while name in self.used:
            name = f"{base}_{i}"
            i += 1
        self.used.add(name)
        return name


class Scope:
    def __init__(self, parsed: Parsed, parent: "Scope | None" = None, prefix=""):
        self.parsed = parsed
        self.parent = parent
        self.vars: dict = {}
        self.prefix = prefix


class _Return(Exception):
    pass


class Normalizer:
    def __init__(self, root: Parsed, allow_control_flow: bool):
        self.root = root
        self.names = Names()
        self.captured: dict = {}       # id(obj) or (scope, name) -> (outname, obj)
        self.captured_list: list = []
        self.externals: dict = {}
        self.static_key: list = []
        self.allow_control_flow = allow_control_flow
        self.has_loops = False
        self.depth = 0
        self.inline_stack: list = []
        self.tmp_count = 0
        self.param_ranks: dict = {}    # output name -> ndim of argument leaves and captured values
        self.param_kinds: dict = {}    # output name -> scalar kind ("f8", "i", ...) of leaves
        self._owned_structs: dict = {}  # (scope, variable) -> the container whose leaves it owns

    # ------------------------------------------------------------ entry
    def lower(self, arg_values_for) -> Lowered:
        p = self.root
        fence_check(p, allow_control_flow=self.allow_control_flow)
        scope = Scope(p)
        params, leaves_out = [], []
        body: list = []
        bound = arg_values_for(self)  # list of (argname, value tree) with Dyn leaves named
        for name, val in bound:
            scope.vars[name] = val
        for name, val in bound:
            for leaf in _leaves(val):
                if isinstance(leaf, Dyn):
                    params.append(leaf.expr.id)
        self.body = body
        out = self.block(self.structured(p, p.node), scope, body, top=True)
        if out is None:
            raise error(p, p.node, "the function returns nothing", "return the value to differentiate",
                        cls=UnsupportedSyntaxError)
        out = self.materialize(out, body, p.node)
        tag_file(body, p.filename)
        fdef = ast.FunctionDef(name=_safe(p.node.name), args=_arguments(params + [c[0] for c in self.captured_list]),
                               body=body or [ast.Pass()], decorator_list=[], returns=None)
        ast.fix_missing_locations(fdef)
        self.lowered_ranks = self.param_ranks
        return Lowered(node=fdef, params=params, captured=list(self.captured_list), output=out, ranks=self.param_ranks, kinds=self.param_kinds,
                       externals=self.externals, static_key=tuple(self.static_key),
                       has_loops=self.has_loops, filename=p.filename)

    def snapshot(self, val, scope, out, node):
        """``val`` with every runtime leaf bound to a fresh name, so later rebinding cannot change it."""
        if isinstance(val, Struct):
            if val.kind == "dict":
                return Struct("dict", {k: self.snapshot(v, scope, out, node) for k, v in val.items.items()})
            return Struct(val.kind, [self.snapshot(v, scope, out, node) for v in val.items], val.cls)
        if isinstance(val, Dyn) and not isinstance(val.expr, ast.Constant):
            n = self.names.fresh("_tup")
            out.append(ast.copy_location(ast.Assign(targets=[ast.Name(n, ast.Store())], value=val.expr), node))
            return Dyn(ast.Name(n, ast.Load()))
        return val

    def materialize(self, val, body, node):
        """Bind every computed output leaf to a name (``out``), so outputs are names or constants."""
        if isinstance(val, Struct):
            if val.kind == "dict":
                return Struct("dict", {k: self.materialize(v, body, node) for k, v in val.items.items()})
            return Struct(val.kind, [self.materialize(v, body, node) for v in val.items], val.cls)
        if isinstance(val, Dyn) and not isinstance(val.expr, (ast.Name, ast.Constant)):
            n = self.names.fresh("out")
            body.append(ast.copy_location(ast.Assign(targets=[ast.Name(n, ast.Store())], value=val.expr), node))
            return Dyn(ast.Name(n, ast.Load()))
        return val

    def structured(self, parsed, fdef):
        """The function body with single exit and loops without break/continue (see structure)."""
        body = fdef.body
        has_cf = any(isinstance(n, (ast.If, ast.For, ast.While)) for s in body for n in ast.walk(s))
        if not has_cf:
            return body
        try:
            new = single_exit(structure_loops(lift_returns(body)))
        except StructureError as e:
            raise error(parsed, e.node, e.msg, e.hint) from None
        ret = ast.Return(value=ast.Name(RET, ast.Load()))
        ast.copy_location(ret, body[-1])
        if not any(isinstance(n, ast.Name) and n.id == RET for s in new for n in ast.walk(s)):
            return new
        return new + [ret]

    # ------------------------------------------------------------ statements
    def block(self, stmts, scope, out, top=False):
        """Lower statements into ``out``; return the value of a final ``return`` (or None)."""
        for i, s in enumerate(stmts):
            ret = self.stmt(s, scope, out)
            if ret is not None:
                if i != len(stmts) - 1:
                    raise error(scope.parsed, stmts[i + 1], "code after 'return' is unreachable",
                                "remove it")
                return ret
        return None

    def stmt(self, s, scope, out):
        P = scope.parsed
        if isinstance(s, ast.Return):
            if s.value is None:
                raise error(P, s, "'return' without a value", "return the value to differentiate")
            return self.expr(s.value, scope, out)
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant):
            return None
        if isinstance(s, ast.Pass):
            return None
        if isinstance(s, ast.Assign):
            val = self.expr(s.value, scope, out)
            if len(s.targets) > 1 or not isinstance(s.targets[0], ast.Name):
                # Python evaluates the whole right side before binding any target (`a, b = b, a + b`,
                # `x = y = f(x)`): bind every computed leaf to a fresh name first
                val = self.snapshot(val, scope, out, s)
            for t in s.targets:
                self.assign(t, val, scope, out, s)
            return None
        if isinstance(s, ast.AnnAssign):
            if s.value is not None:
                self.assign(s.target, self.expr(s.value, scope, out), scope, out, s)
            return None
        if isinstance(s, ast.AugAssign):
            op = ast.BinOp(left=_load(s.target), op=s.op, right=s.value)
            ast.copy_location(op, s)
            for n in ast.walk(op):
                ast.copy_location(n, s)
            val = self.expr(op, scope, out)
            self.assign(s.target, val, scope, out, s)
            return None
        if isinstance(s, ast.FunctionDef):
            scope.vars[s.name] = LocalFunction(s, scope, scope.parsed)
            return None
        if isinstance(s, (ast.For, ast.While, ast.If, ast.Break, ast.Continue)):
            return self.control(s, scope, out)
        raise error(P, s, f"unsupported statement '{type(s).__name__}'", None)

    # ------------------------------------------------------------ control flow
    def prepare_cf(self, stmts, scope, out, node):
        """Give every variable assigned in ``stmts`` one runtime name before a branch or loop."""
        for name in _assigned(stmts):
            cur = scope.vars.get(name)
            if isinstance(cur, Dyn) and isinstance(cur.expr, ast.Name) and self.owns(cur.expr.id, name, scope):
                continue
            if isinstance(cur, Struct):  # a tuple/dict of arrays: each leaf gets a runtime name of its own
                if self._owned_structs.get((id(scope), name)) is not cur:
                    scope.vars[name] = self.own_struct(name, cur, scope, out, node)
                continue
            if isinstance(cur, LocalFunction) or (isinstance(cur, Static) and not isinstance(
                    cur.obj, (int, float, bool, np.number))):
                raise error(scope.parsed, node, f"'{name}' holds a {type(cur).__name__.lower()} value and is "
                                                f"reassigned inside a loop or branch",
                            "only arrays and numbers can change inside loops and branches; give the container "
                            "another name")
            outname = self.var_name(name, scope)
            if cur is not None:
                out.append(ast.copy_location(ast.Assign(targets=[ast.Name(outname, ast.Store())],
                                                        value=self.as_expr(cur, scope, node)), node))
            scope.vars[name] = Dyn(ast.Name(outname, ast.Load()))

    def own_struct(self, name, val, scope, out, node, template=None):
        """A copy of container ``val`` whose runtime leaves are names owned by variable ``name``
        (assigned from ``val``'s leaves now), so loops and branches can rebind them leaf by leaf."""
        def own(v, path):
            if isinstance(v, Struct):
                if v.kind == "dict":
                    return Struct("dict", {k: own(x, path + (k,)) for k, x in v.items.items()})
                return Struct(v.kind, [own(x, path + (i,)) for i, x in enumerate(v.items)], v.cls)
            if isinstance(v, Static) and not isinstance(v.obj, (int, float, bool, np.number)) or \
                    isinstance(v, Static) and isinstance(v.obj, bool):
                return v  # None, strings, flags: fixed, and must stay the same
            if not isinstance(v, (Dyn, Static)):
                raise error(scope.parsed, node, f"'{name}' holds a function inside a container that changes in a "
                                                "loop or branch", "keep functions out of containers that change")
            outname = self.names.fresh(scope.prefix + name + "".join(f"_{_safe(str(k))}" for k in path))
            expr = self.as_expr(v, scope, node)
            out.append(ast.copy_location(ast.Assign(targets=[ast.Name(outname, ast.Store())], value=expr), node))
            return Dyn(ast.Name(outname, ast.Load()))
        new = own(val, ())
        self._owned_structs[(id(scope), name)] = new
        return new

    def assign_struct(self, name, val, scope, out, stmt):
        """``name = <container>`` inside a loop or branch: rebind the owned leaves one by one."""
        cur = scope.vars.get(name)
        if self._owned_structs.get((id(scope), name)) is not cur:
            scope.vars[name] = self.own_struct(name, val, scope, out, stmt)
            return
        val = self.snapshot(val, scope, out, stmt)  # the right side may read the leaves it replaces

        def bind(c, v, path):
            if isinstance(c, Struct):
                if not isinstance(v, Struct) or c.kind != v.kind or (
                        c.kind == "dict" and list(c.items) != list(v.items)) or len(c.values()) != len(v.values()):
                    raise error(scope.parsed, stmt, f"'{name}' is given containers of different structure in "
                                                    "a loop or on different branches ({} and {})".format(
                                                        _describe(c), _describe(v)),
                                "give it the same structure (the same keys, the same length) everywhere")
                for k, (cc, vv) in enumerate(zip(c.values(), v.values())):
                    bind(cc, vv, path + (k,))
                return
            if isinstance(c, Static):
                if not (isinstance(v, Static) and v.obj is c.obj or (isinstance(v, Static) and v.obj == c.obj)):
                    raise error(scope.parsed, stmt, f"'{name}' holds {c.obj!r} in one place and another value in a "
                                                    "loop or branch", "use the same value, or an array")
                return
            out.append(ast.copy_location(ast.Assign(targets=[ast.Name(c.expr.id, ast.Store())],
                                                    value=self.as_expr(v, scope, stmt)), stmt))
        bind(cur, val, ())

    def owns(self, outname, name, scope):
        return getattr(self, "_owned", {}).get(outname) == ("var", id(scope), name)

    def control(self, s, scope, out):
        P = scope.parsed
        if isinstance(s, ast.If):
            test = self.expr(s.test, scope, out)
            if isinstance(test, Static):  # decided now (e.g. `if b is None`): only one branch exists
                self.block_cf(s.body if test.obj else s.orelse, scope, out, dynamic=False)
                return None
            self.prepare_cf(s.body + s.orelse, scope, out, s)
            body, orelse = [], []
            self.block_cf(s.body, scope, body)
            self.block_cf(s.orelse, scope, orelse)
            out.append(ast.copy_location(ast.If(test=self.as_expr(test, scope, s), body=body or [ast.Pass()],
                                                orelse=orelse), s))
            return None
        if isinstance(s, ast.While):
            self.has_loops = True
            self.prepare_cf(s.body, scope, out, s)
            test = self.expr(s.test, scope, out)
            body = []
            self.block_cf(s.body, scope, body)
            out.append(ast.copy_location(ast.While(test=self.as_expr(test, scope, s), body=body or [ast.Pass()],
                                                   orelse=[]), s))
            return None
        if isinstance(s, ast.For):
            return self.for_loop(s, scope, out)
        if isinstance(s, ast.Break):
            out.append(ast.copy_location(ast.Break(), s))
            return None
        raise error(P, s, f"unsupported statement '{type(s).__name__}'", None)

    def block_cf(self, stmts, scope, out, dynamic=True):
        self.cf_depth = getattr(self, "cf_depth", 0) + (1 if dynamic else 0)
        try:
            ret = self.block(stmts, scope, out)
        finally:
            self.cf_depth -= (1 if dynamic else 0)
        if ret is not None:  # pragma: no cover - structure() removed returns from branches
            raise error(scope.parsed, stmts[-1], "'return' inside a branch or loop", None)

    def for_loop(self, s, scope, out):
        P = scope.parsed
        it = self.expr(s.iter, scope, out)
        # a loop over a container known now (a list of layers, a tuple of params): unrolled
        if isinstance(it, (Struct, Static)) and not isinstance(it, _Range):
            items = it.values() if isinstance(it, Struct) else [Static(v) for v in it.obj]
            if _contains(s.body, (ast.Break,)) or any(isinstance(n, ast.Name) and n.id.startswith("__brk")
                                                        for n in ast.walk(ast.Module(body=s.body, type_ignores=[]))):
                raise error(P, s, "'break' in a loop over a Python list/tuple is not supported",
                            "loop over range(len(...)) instead")
            for v in items:
                self.assign(s.target, v, scope, out, s)
                self.block(s.body, scope, out)
            return None
        if isinstance(it, _Iter) and all(isinstance(a, (Struct, Static)) for a in it.args):
            if it.fn is enumerate:
                seq = it.args[0]
                items = seq.values() if isinstance(seq, Struct) else [Static(v) for v in seq.obj]
                pairs = [Struct("tuple", [Static(i), v]) for i, v in enumerate(items)]
            else:
                cols = [a.values() if isinstance(a, Struct) else [Static(v) for v in a.obj] for a in it.args]
                pairs = [Struct("tuple", list(t)) for t in zip(*cols)]
            for v in pairs:
                self.assign(s.target, v, scope, out, s)
                self.block(s.body, scope, out)
            return None
        self.has_loops = True
        if isinstance(it, _Range):
            rng = ast.Call(func=ast.Name("range", ast.Load()), args=it.args, keywords=[])
            target = s.target
            if not isinstance(target, ast.Name):
                raise error(P, s, "a range loop needs a single loop variable", None)
            self.prepare_cf([ast.Assign(targets=[target], value=ast.Constant(0))] + s.body, scope, out, s)
            tname = scope.vars[target.id].expr.id
            body = []
            self.block_cf(s.body, scope, body)
            out.append(ast.copy_location(ast.For(target=ast.Name(tname, ast.Store()), iter=rng, body=body or [ast.Pass()],
                                                 orelse=[]), s))
            return None
        # enumerate / zip / rows of an array: a range loop over the shortest length
        inner_zip = isinstance(it, _Iter) and it.fn is enumerate and isinstance(it.args[0], _Iter) \
            and it.args[0].fn is zip
        if inner_zip:  # enumerate(zip(a, b, ...))
            seqs = it.args[0].args
        elif isinstance(it, _Iter):
            seqs = it.args if it.fn is zip else [it.args[0]]
        elif isinstance(it, Dyn):
            seqs = [it]
        else:
            raise error(P, s, "cannot loop over this value", "loop over range(...), an array, enumerate or zip")
        lens = []
        for q in seqs:
            if isinstance(q, Struct):
                lens.append(ast.Constant(len(q.values())))
            elif isinstance(q, _Range):
                raise error(P, s, "range() inside zip/enumerate is not supported", "index with the loop counter")
            else:
                lens.append(ast.Subscript(value=ast.Attribute(value=self.as_expr(q, scope, s), attr="shape",
                                                              ctx=ast.Load()), slice=ast.Constant(0), ctx=ast.Load()))
        n = lens[0] if len(lens) == 1 else ast.Call(func=ast.Name("min", ast.Load()), args=lens, keywords=[])
        idx = self.names.fresh("_i")
        self.prepare_cf(s.body, scope, out, s)
        for t in _target_names(s.target):
            if t not in scope.vars or not isinstance(scope.vars[t], Dyn):
                self.prepare_cf([ast.Assign(targets=[ast.Name(t, ast.Store())], value=ast.Constant(0))], scope, out, s)
        body = []
        self.cf_depth = getattr(self, "cf_depth", 0) + 1
        try:
            ival = Dyn(ast.Name(idx, ast.Load()))
            elems = [self.subscript_dyn(q, ival, scope, body, s) for q in seqs]
            if inner_zip:
                val = Struct("tuple", [ival, Struct("tuple", elems)])
            elif isinstance(it, _Iter) and it.fn is enumerate:
                val = Struct("tuple", [ival, elems[0]])
            elif isinstance(it, _Iter):
                val = Struct("tuple", elems)
            else:
                val = elems[0]
            self.assign(s.target, val, scope, body, s)
            self.block(s.body, scope, body)
        finally:
            self.cf_depth -= 1
        rng = ast.Call(func=ast.Name("range", ast.Load()), args=[n], keywords=[])
        out.append(ast.copy_location(ast.For(target=ast.Name(idx, ast.Store()), iter=rng, body=body, orelse=[]), s))
        return None

    def subscript_dyn(self, q, ival, scope, out, node):
        if isinstance(q, Struct):
            raise error(scope.parsed, node, "zip/enumerate over a Python list mixed with arrays is not supported",
                        "stack the list into an array first")
        return self.call_prim(lookup_getitem(), [q, ival], {}, scope, out, node)

    def assign(self, target, val, scope, out, stmt):
        P = scope.parsed
        if isinstance(target, ast.Name):
            if getattr(self, "cf_depth", 0) and isinstance(val, Static) and isinstance(
                    val.obj, (int, float, bool, np.number)):
                val = Dyn(ast.Constant(val.obj.item() if isinstance(val.obj, np.generic) else val.obj))
            elif getattr(self, "cf_depth", 0) and isinstance(val, Struct):
                self.assign_struct(target.id, val, scope, out, stmt)
                return
            elif getattr(self, "cf_depth", 0) and not isinstance(val, Dyn):
                raise error(P, stmt, f"'{_user_name(target.id)}' is bound to a "
                                     f"{'function' if callable(getattr(val, 'obj', None)) or isinstance(val, LocalFunction) else 'value'}"
                                     " that cannot change inside a loop or branch",
                            "only arrays, numbers and containers of them can be assigned inside loops and branches")
            if isinstance(val, Dyn):
                outname = self.var_name(target.id, scope)
                a = ast.Assign(targets=[ast.Name(outname, ast.Store())], value=val.expr)
                ast.copy_location(a, stmt)
                out.append(a)
                scope.vars[target.id] = Dyn(ast.Name(outname, ast.Load()))
            else:
                scope.vars[target.id] = val
            return
        if isinstance(target, (ast.Tuple, ast.List)):
            items = self.unpack(val, len(target.elts), scope, out, stmt)
            for t, v in zip(target.elts, items):
                self.assign(t, v, scope, out, stmt)
            return
        if isinstance(target, ast.Subscript):
            base = self.expr(target.value, scope, out)
            if not isinstance(base, Dyn) or not isinstance(base.expr, ast.Name):
                raise error(P, target, "in-place assignment is only supported on array variables",
                            "build a new array (np.where, np.concatenate) instead")
            idx = self.index(target.slice, scope, out)
            v = self.as_expr(val, scope, target)
            a = ast.Assign(targets=[ast.Subscript(value=ast.Name(base.expr.id, ast.Load()), slice=idx, ctx=ast.Store())],
                           value=v)
            ast.copy_location(a, stmt)
            out.append(a)
            return
        if isinstance(target, ast.Attribute):
            raise error(P, target, "assigning to an attribute is not supported in a pure function",
                        "return a new value (NamedTuple._replace is not supported either: build a new one)")
        raise error(P, target, "unsupported assignment target", None)

    def unpack(self, val, n, scope, out, node):
        if isinstance(val, Struct):
            items = val.values()
            if len(items) != n:
                raise error(scope.parsed, node, f"cannot unpack {len(items)} values into {n} names", None,
                            cls=UnsupportedSyntaxError)
            return items
        if isinstance(val, Static) and isinstance(val.obj, tuple):
            if len(val.obj) != n:
                raise error(scope.parsed, node, f"cannot unpack {len(val.obj)} values into {n} names", None)
            return [Static(v) for v in val.obj]
        if isinstance(val, Dyn):
            # unpack a runtime tuple (e.g. x.shape) or the rows of an array
            return [Dyn(ast.Subscript(value=copy.deepcopy(val.expr), slice=ast.Constant(i), ctx=ast.Load()))
                    for i in range(n)] if not _is_array_producing(val.expr) else [
                self.call_prim(lookup_getitem(), [val, Static(i)], {}, scope, out, node) for i in range(n)]
        raise error(scope.parsed, node, "cannot unpack this value", "unpack a tuple")

    def var_name(self, name, scope):
        key = ("var", id(scope), name)
        cur = scope.vars.get(name)
        if isinstance(cur, Dyn) and isinstance(cur.expr, ast.Name) and getattr(self, "_owned", {}).get(
                cur.expr.id) == key:
            return cur.expr.id
        outname = self.names.fresh(scope.prefix + name)
        self._owned = getattr(self, "_owned", {})
        self._owned[outname] = key
        return outname

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

    def external(self, obj):
        for k, v in self.externals.items():
            if v is obj:
                return ast.Name(k, ast.Load())
        name = f"_ext{len(self.externals)}_{_safe(getattr(obj, '__name__', type(obj).__name__))}"
        self.externals[name] = obj
        return ast.Name(name, ast.Load())

    def lookup_name(self, name, scope, node):
        s = scope
        while s is not None:
            if name in s.vars:
                return s.vars[name]
            s = s.parent
        # free variable of the function that defined this scope
        owner = scope
        while owner.parent is not None and owner.parsed is owner.parent.parsed:
            owner = owner.parent
        obj = owner.parsed.lookup(name)
        if obj is MISSING:
            raise error(scope.parsed, node, f"name '{name}' is not defined", None, cls=UnsupportedSyntaxError)
        return self.capture(name, obj, owner)

    def capture(self, name, obj, scope, getter=None):
        """A free variable's value: runtime values become parameters read at every call."""
        if getter is None:
            getter = _free_getter(scope.parsed.fn, name)
        if isinstance(obj, np.ndarray) or (isinstance(obj, (float, int, np.number)) and not isinstance(obj, bool)):
            key = (id(scope.parsed.fn), name, getattr(getter, "_path", ()))
            if key not in self.captured:
                outname = self.names.fresh(name)
                self.param_ranks[outname] = np.ndim(obj)
                self.param_kinds[outname] = scalar_kind(obj)
                self.captured[key] = outname
                self.captured_list.append((outname, getter))
            return Dyn(ast.Name(self.captured[key], ast.Load()))
        if isinstance(obj, (tuple, list, dict)) and not _is_static_tree(obj):
            # a captured pytree of arrays: each leaf becomes a captured runtime value
            return _map_struct(obj, lambda path, leaf: self.capture(
                name + "".join(f"_{k}" for k in path), leaf, scope, _path_getter(getter, path)))
        # a value fixed into the generated code (a function, a module, a flag, a tuple of sizes): the
        # compiled code is rebuilt when the name is rebound (identity) or a static tree changes (equality)
        self.static_key.append((getter, obj))
        return Static(obj)

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

    # ------------------------------------------------------------ calls
    def call(self, node, scope, out):
        P = scope.parsed
        fval = self.expr(node.func, scope, out)
        args = [self.expr(a, scope, out) for a in node.args]
        kwargs = {k.arg: self.expr(k.value, scope, out) for k in node.keywords}
        if isinstance(fval, _BoundMethod):
            return self.method(fval, args, kwargs, scope, out, node)
        if isinstance(fval, LocalFunction):
            return self.inline(fval.node, fval.parsed, fval.scope, args, kwargs, out, node)
        if not isinstance(fval, Static):
            raise error(P, node, "only functions known when the function is transformed can be called",
                        "call a module-level function, a nested def, or a NumPy function")
        fn = fval.obj
        return self.call_object(fn, args, kwargs, scope, out, node)

    def call_object(self, fn, args, kwargs, scope, out, node):
        P = scope.parsed
        fn = _BUILTIN_MAP.get(fn, fn) if isinstance(fn, types.BuiltinFunctionType) and len(args) != 1 or fn is abs else fn
        if isinstance(fn, CustomVJPFunction):
            return self.custom_vjp_call(fn, args, kwargs, scope, out, node)
        prim = lookup(fn)
        if prim is not None:
            if all(isinstance(a, Static) for a in list(args) + list(kwargs.values())) and prim.name != "stop_gradient":
                try:
                    return Static(fn(*[a.obj for a in args], **{k: v.obj for k, v in kwargs.items()}))
                except Exception:
                    pass
            return self.call_prim(prim, args, kwargs, scope, out, node)
        if fn is slice and all(isinstance(a, Static) for a in args):
            return Static(slice(*[a.obj for a in args]))
        if fn is range:
            return _Range([self.as_expr(a, scope, node) for a in args])
        if fn in (enumerate, zip):
            return _Iter(fn, args)
        if fn is len:
            (a,) = args
            if isinstance(a, Struct):
                return Static(len(a.values()))
            if isinstance(a, Static):
                return Static(len(a.obj))
            return Dyn(ast.Subscript(value=ast.Attribute(value=self.as_expr(a, scope, node), attr="shape",
                                                         ctx=ast.Load()), slice=ast.Constant(0), ctx=ast.Load()))
        if fn in (float, int, bool):
            (a,) = args
            if isinstance(a, Static):
                return Static(fn(a.obj))
            if fn is float:
                return a
            return Dyn(ast.Call(func=ast.Name(fn.__name__, ast.Load()), args=[self.as_expr(a, scope, node)],
                                keywords=[]))
        if fn in (tuple, list) and len(args) == 1 and isinstance(args[0], Struct):
            return Struct(fn.__name__, args[0].values())
        if fn is dict:
            return Struct("dict", dict(kwargs))
        if isinstance(fn, type) and issubclass(fn, tuple) and hasattr(fn, "_fields"):
            vals = list(args) + [kwargs[f] for f in fn._fields[len(args):] if f in kwargs]
            return Struct("namedtuple", vals, fn)
        if fn in (np.array, np.asarray, np.asanyarray, np.ascontiguousarray) and len(args) == 1:
            a = args[0]
            if isinstance(a, Struct) and all(isinstance(v, Static) for v in _leaves(a)):
                return Static(fn(_static_value(a)))  # a constant array (index lists, coefficients)
            if isinstance(a, Struct):
                return self.call_prim(lookup(np.stack), [a], {}, scope, out, node)
            if isinstance(a, Dyn):
                return a
        if isinstance(fn, types.FunctionType) and getattr(fn, "__module__", "").split(".")[0] != "numpy":
            return self.inline_function(fn, args, kwargs, out, node, scope)
        # a non-differentiable call (np.zeros, np.arange, math.floor, ...): kept as is
        if _is_numpy_callable(fn) or fn in (math.floor, math.ceil, round, math.isnan, math.isfinite):
            fexpr = self.func_expr(fn)
            call = ast.Call(func=fexpr, args=[self.as_expr(a, scope, node) for a in args],
                            keywords=[ast.keyword(arg=k, value=self.as_expr(v, scope, node)) for k, v in kwargs.items()])
            ast.copy_location(call, node)
            call._funcgrad_nondiff = getattr(fn, "__name__", repr(fn))
            call._funcgrad_src = (P.filename, getattr(node, "lineno", None))
            return Dyn(call)
        raise error(P, node, f"'{getattr(fn, '__qualname__', fn)}' has no derivative rule and is not a Python "
                             f"function funcgrad can read",
                    "wrap it with funcgrad.custom_vjp to give it a rule, or register a primitive",
                    cls=NoDerivativeError)

    def func_expr(self, fn):
        if isinstance(fn, np.ufunc) or getattr(np, getattr(fn, "__name__", ""), None) is fn:
            return _np_attr(fn.__name__)
        return self.external(fn)

    def method(self, m: "_BoundMethod", args, kwargs, scope, out, node):
        P = scope.parsed
        name = m.name
        if name in ("reshape", "transpose") and len(args) > 1:
            args = [Struct("tuple", list(args))]
        if name == "transpose" and not args:
            args = []
        if name in ("ravel", "flatten"):
            return self.call_prim(lookup(np.reshape), [m.base, Static((-1,))], {}, scope, out, node)
        if name == "astype":
            (dt,) = args
            return Dyn(ast.Call(func=ast.Attribute(value=m.base.expr, attr="astype", ctx=ast.Load()),
                                args=[self.as_expr(dt, scope, node)], keywords=[]))
        fn = _METHODS.get(name)
        if fn is None:
            raise error(P, node, f"array method '.{name}()' is not supported",
                        "call the NumPy function instead (np.<name>(x, ...))")
        return self.call_object(fn, [m.base] + list(args), kwargs, scope, out, node)

    def call_prim(self, prim: Primitive, args, kwargs, scope, out, node):
        P = scope.parsed
        try:
            ba = prim.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise error(P, node, f"bad arguments to {prim.name}: {e}", None, cls=UnsupportedSyntaxError) from None
        pos, kws = [], []
        params = list(prim.signature.parameters.values())
        for p in params:
            if p.name in ba.arguments:
                v = ba.arguments[p.name]
                e = self.as_expr(v, scope, node) if not isinstance(v, Struct) else ast.Tuple(
                    elts=[self.as_expr(x, scope, node) for x in v.values()], ctx=ast.Load())
                if p.default is p.empty:
                    pos.append(e)
                else:
                    kws.append(ast.keyword(arg=p.name, value=e))
        call = ast.Call(func=ast.Attribute(value=ast.Name("K", ast.Load()), attr=prim.name, ctx=ast.Load()),
                        args=pos, keywords=kws)
        call._funcgrad_prim = prim
        ast.copy_location(call, node)
        call._funcgrad_src = (P.filename, getattr(node, "lineno", None))
        return Dyn(call)

    def custom_vjp_call(self, cv, args, kwargs, scope, out, node):
        if kwargs:
            raise error(scope.parsed, node, "custom_vjp functions take positional arguments only", None)
        fname = self.external(cv)
        call = ast.Call(func=fname, args=[self.as_expr(a, scope, node) for a in args], keywords=[])
        call._funcgrad_custom = cv
        ast.copy_location(call, node)
        return Dyn(call)

    def inline_function(self, fn, args, kwargs, out, node, scope):
        if fn.__code__ in self.inline_stack:
            raise error(scope.parsed, node, f"recursive call of '{fn.__qualname__}' is not supported",
                        "write the recursion as a loop")
        p = parse(fn)
        fence_check(p, allow_control_flow=self.allow_control_flow)
        return self.inline(p.node, p, None, args, kwargs, out, node, code=fn.__code__, defaults=fn)

    def inline(self, fdef, parsed, parent_scope, args, kwargs, out, node, code=None, defaults=None):
        if parent_scope is not None:
            fence_check(parsed, node=fdef, allow_control_flow=self.allow_control_flow)
        self.depth += 1
        if self.depth > 50:
            raise error(parsed, node, "helper calls nest too deeply (recursion?)", "write the recursion as a loop")
        self.inline_stack.append(code)
        scope = Scope(parsed, parent_scope, prefix=f"{fdef.name}_" if fdef.name != "<lambda>" else "")
        a = fdef.args
        names = [x.arg for x in a.posonlyargs + a.args]
        if len(args) > len(names):
            raise error(scope.parsed, node, f"{fdef.name}() takes {len(names)} positional arguments but "
                                            f"{len(args)} were given", None)
        bound = dict(zip(names, args))
        for k, v in kwargs.items():
            if k in bound:
                raise error(scope.parsed, node, f"{fdef.name}() got multiple values for argument '{k}'", None)
            bound[k] = v
        # defaults
        pos_defaults = a.defaults
        dnames = names[len(names) - len(pos_defaults):]
        outer = parent_scope
        for n_, dnode in list(zip(dnames, pos_defaults)) + [(k.arg, dv) for k, dv in zip(a.kwonlyargs, a.kw_defaults)]:
            if n_ not in bound:
                if defaults is not None:
                    dv_obj = _default_value(defaults, n_)
                    if dv_obj is MISSING:
                        bound[n_] = self.expr(dnode, scope, out)
                    elif isinstance(dv_obj, np.ndarray):  # bound when the def ran: read that object
                        bound[n_] = self.capture(n_, dv_obj, scope, getter=lambda v=dv_obj: v)
                    else:
                        bound[n_] = Static(dv_obj)
                else:
                    bound[n_] = self.expr(dnode, outer, out)
        for n_ in names + [k.arg for k in a.kwonlyargs]:
            if n_ not in bound:
                raise error(scope.parsed, node, f"{fdef.name}() missing required argument '{n_}'", None)
        for k, v in bound.items():
            if isinstance(v, Dyn) and not isinstance(v.expr, (ast.Name, ast.Constant)):
                tmp = self.names.fresh(scope.prefix + k)
                out.append(ast.copy_location(ast.Assign(targets=[ast.Name(tmp, ast.Store())], value=v.expr), node))
                v = Dyn(ast.Name(tmp, ast.Load()))
            scope.vars[k] = v
        body = self.structured(parsed, fdef)
        start = len(out)
        ret = self.block(body, scope, out)
        tag_file(out[start:], parsed.filename)
        self.inline_stack.pop()
        self.depth -= 1
        if ret is None:
            raise error(parsed, fdef, f"helper '{fdef.name}' returns nothing", "return a value")
        return ret


@dataclass
class _BoundMethod:
    base: Dyn
    name: str
    node: ast.AST


@dataclass
class _Range:
    args: list


@dataclass
class _Iter:
    fn: object
    args: list


def lookup_getitem():
    return lookup(_getitem)


def _np_attr(name):
    return ast.Attribute(value=ast.Name("np", ast.Load()), attr=name, ctx=ast.Load())


def _is_numpy_callable(fn):
    mod = getattr(fn, "__module__", None) or ""
    return isinstance(fn, np.ufunc) or mod.startswith("numpy") or (
        getattr(np, getattr(fn, "__name__", "_"), None) is fn)


def _is_metadata(e):
    while isinstance(e, ast.Subscript):
        e = e.value
    return isinstance(e, ast.Attribute) and e.attr in ("shape", "ndim", "dtype", "size")


def _is_array_producing(e):
    return isinstance(e, (ast.Name, ast.Call)) and not _is_metadata(e)


def _default_value(fn, name):
    try:
        p = inspect.signature(fn).parameters[name]
    except (KeyError, ValueError):
        return MISSING
    return MISSING if p.default is p.empty else p.default


def _describe(v):
    return f"a {v.kind} of {len(v.values())}" if isinstance(v, Struct) else "a single value"


def _user_name(name):
    """A variable name as the user wrote it (``__ret`` is the function's result)."""
    return "the returned value" if name == "__ret" else name


def tag_file(stmts, filename):
    """Record the user's file on statements that do not know theirs yet (for errors at file:line)."""
    for st in stmts:
        for n in ast.walk(st):
            if isinstance(n, ast.stmt) and not hasattr(n, "_funcgrad_file"):
                n._funcgrad_file = filename


def _static_value(val):
    """The Python object of a container whose leaves are all static."""
    if isinstance(val, Struct):
        if val.kind == "dict":
            return {k: _static_value(v) for k, v in val.items.items()}
        return type([])([_static_value(v) for v in val.values()]) if val.kind == "list" else tuple(
            _static_value(v) for v in val.values())
    return val.obj


def _is_static_tree(obj):
    if isinstance(obj, (tuple, list)):
        return all(_is_static_tree(x) for x in obj)
    if isinstance(obj, dict):
        return all(_is_static_tree(x) for x in obj.values())
    return isinstance(obj, (bool, int, float, str, type(None), slice))


def _free_getter(fn, name):
    """Read the current value of free variable ``name`` of ``fn`` (closure cell, global, builtin)."""
    code = getattr(fn, "__code__", None)
    if code is not None and fn.__closure__ and name in code.co_freevars:
        cell = fn.__closure__[code.co_freevars.index(name)]
        return lambda: cell.cell_contents
    g = getattr(fn, "__globals__", {})
    return lambda: g[name] if name in g else getattr(builtins, name)


def _attr_getter(obj, attr):
    return lambda: getattr(obj, attr)


def _path_getter(getter, path):
    def get():
        v = getter()
        for k in path:
            v = v[k]
        return v
    get._path = tuple(path)
    return get


def _load(target):
    t = copy.deepcopy(target)
    for n in ast.walk(t):
        if hasattr(n, "ctx"):
            n.ctx = ast.Load()
    return t


def _safe(name):
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return name or "f"


def _arguments(names):
    return ast.arguments(posonlyargs=[], args=[ast.arg(arg=n) for n in names], vararg=None, kwonlyargs=[],
                         kw_defaults=[], kwarg=None, defaults=[])


def _target_names(t):
    if isinstance(t, ast.Name):
        return [t.id]
    if isinstance(t, (ast.Tuple, ast.List)):
        return [n for e in t.elts for n in _target_names(e)]
    return []


def _assigned(stmts):
    """Names assigned (rebound) anywhere in ``stmts``, in first-seen order (not in nested defs)."""
    names = []
    for s in stmts:
        for n in ast.walk(s):
            tgts = []
            if isinstance(n, ast.Assign):
                tgts = n.targets
            elif isinstance(n, (ast.AugAssign, ast.AnnAssign)):
                tgts = [n.target]
            elif isinstance(n, ast.For):
                tgts = [n.target]
            for t in tgts:
                for nm in _target_names(t):
                    if nm not in names:
                        names.append(nm)
    return names


def _contains(stmts, kinds):
    return any(isinstance(n, kinds) for s in stmts for n in ast.walk(s))


_CONST_BIN = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
              ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
              ast.Pow: lambda a, b: a ** b}


def _const_binop(op, a, b, P, node):
    f = _CONST_BIN.get(type(op))
    if f is None:
        raise error(P, node, f"unsupported operator on constants: {type(op).__name__}", None)
    return f(a, b)


def _const_unary(op, a):
    return {ast.USub: lambda: -a, ast.UAdd: lambda: +a, ast.Not: lambda: not a, ast.Invert: lambda: ~a}[type(op)]()


def _const_compare(op, a, b):
    o = operator
    m = {ast.Eq: o.eq, ast.NotEq: o.ne, ast.Lt: o.lt, ast.LtE: o.le, ast.Gt: o.gt, ast.GtE: o.ge,
         ast.Is: o.is_, ast.IsNot: o.is_not, ast.In: lambda x, y: x in y, ast.NotIn: lambda x, y: x not in y}
    return m[type(op)](a, b)


def normalize(parsed: Parsed, arg_values_for, allow_control_flow=False) -> Lowered:
    """Lower ``parsed`` into flat primitive code (see the module docstring)."""
    return Normalizer(parsed, allow_control_flow).lower(arg_values_for)
