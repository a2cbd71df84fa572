"""Scalarisation: small 1-D arrays of a compiled function held as one scalar per element.

Loops over small arrays are where compiled NumPy code is slowest: every ``v = a - b`` of 3-vectors
allocates a heap array, every row or slice is a view whose reference count Numba updates atomically,
and the adjoint doubles both. When the arguments' shapes are known (the first call's, guarded at run
time), a 1-D array whose length is a small constant can be held as its elements instead:
``rot = cam[0:3]`` becomes ``rot_0 = cams[i, 0]``, ``rot_1 = cams[i, 1]``, ``rot_2 = cams[i, 2]``, and
``x = rot * 2.0`` three scalar multiplications. The reverse pass then differentiates scalar code, whose
adjoint needs no arrays either.

Input: a function in A-normal form (:mod:`.anf`), the shapes and dtypes of its array parameters, and the
values of the integer constants it captures. Output: the same function with the statements over such
arrays written element by element, and the facts the new code depends on (guards: a parameter's
dimension, a captured integer's value), which the caller checks before running it.

What is held as elements (a *vector*): float64 (or int64, for indexing only) 1-D arrays of at most
:data:`MAXLEN` elements that are a 1-D argument (its elements read once where the function starts) or
whose every definition is one of: a row of a 2-D float64/int64 argument ``A[i]`` (``A[i, a:b]``), a
slice with constant bounds or a copy of a vector, arithmetic (``+ - * / **`` and unary minus) of
vectors of one length and real scalars, an elementwise NumPy function of them, ``np.array([a, b, c])``
of float scalars, ``np.concatenate`` of vectors, ``np.cross`` of 3-vectors, ``np.zeros(k)`` or
``np.ones(k)`` of a constant ``k``. Read from vectors element by element: ``v[k]`` with a constant
``k``, ``np.sum``, ``np.mean``, ``np.dot``, ``np.linalg.norm``. Any other use of a vector reads an array
made from its elements once where the vector is defined (the row itself, or ``np.stack`` of the
elements); ``v.shape`` and ``len(v)`` are such uses (the analysis knows the length, but the code never
holds it as a constant: Numba would prune branches on it, and a tape of a pruned branch has no type). Nothing is scalarised through names that are written in place
(``a[i] = v``, ``a += v``) or may alias such names, nor names the function returns.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

from . import annotations as A
from ..ops.registry import by_name
from .astutil import kernel as _K
from .naming import names_in
from .astutil import ast_walk

MAXLEN = 16   # the most elements a vector may have (each element a scalar variable of the generated code)

# elementwise functions applied to one element at a time (their kernels take scalars; rules exist for scalars)
_ELEMENTWISE = frozenset("""sqrt exp log sin cos tan tanh sinh cosh arcsin arccos arctan arcsinh arccosh arctanh
absolute log1p expm1 square exp2 log2 log10 negative arctan2 maximum minimum hypot power cbrt fabs sign
""".split())
_KEEPS_INTEGERS = frozenset("power maximum minimum square absolute sign".split())   # of integers: an integer
_ARITH = frozenset("add subtract multiply divide power".split())   # Python's operators (K.add: a + b)
_INT_OPS = {"add": lambda a, b: a + b, "subtract": lambda a, b: a - b, "multiply": lambda a, b: a * b,
            "floor_divide": lambda a, b: a // b, "remainder": lambda a, b: a % b}
# calls whose result is a new array (never a view of an argument)
_FRESH = _ELEMENTWISE | _ARITH | frozenset("sum mean dot cross stack concatenate copy prod var std".split())
_REAL_KINDS = frozenset(["f8", "f8w", "i", "iw"])


@dataclass(frozen=True)
class Vec:
    n: int
    kind: str   # "f": float64, "i": int64


@dataclass(frozen=True)
class Rows:
    m: int
    kind: str
    param: str


@dataclass(frozen=True)
class Int:
    v: int


_TOP = None
_BOT = "bot"


def _walk_stmts(stmts):
    for s in stmts:
        yield s
        for field in ("body", "orelse"):
            sub = getattr(s, field, None)
            if isinstance(sub, list):
                yield from _walk_stmts(sub)


def _call_name(e):
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and isinstance(e.func.value, ast.Name) \
            and e.func.value.id == "K" and A.has(e, A.PRIM):
        return A.get(e, A.PRIM).name
    return None


class _UF:
    def __init__(self):
        self.parent = {}

    def find(self, x):
        p = self.parent.setdefault(x, x)
        while p != self.parent.setdefault(p, p):
            p = self.parent[p]
        self.parent[x] = p
        return p

    def union(self, a, b):
        self.parent[self.find(a)] = self.find(b)


def _names(node):
    """The names an expression reads as values: not ``K``, nor the module or function a call names
    (``np`` of ``np.zeros(3)``)."""
    out = set()
    for n in ast_walk(node):
        if isinstance(n, ast.Call):
            out |= set().union(*(_names(a) for a in [*n.args, *(k.value for k in n.keywords)]))
        elif isinstance(n, ast.Name) and n.id != "K" and not _called(node, n):
            out.add(n.id)
    return out


def _all_names(node):
    """Every name an expression mentions (``a`` of ``a.fill(0)`` too), ``K`` aside: what a statement or a call
    funcgrad does not know may write."""
    return {n.id for n in ast_walk(node) if isinstance(n, ast.Name) and n.id != "K"}


def _called(root, name):
    """Whether ``name`` is (part of) the function of a call within ``root``."""
    for n in ast_walk(root):
        if isinstance(n, ast.Call) and any(x is name for x in ast_walk(n.func)):
            return True
    return False


def _banned_names(stmts, outputs):
    """Names that may not be held as elements: written in place, possibly aliased with such a name, passed to
    code funcgrad does not know, or returned."""
    uf = _UF()
    mutated = set(outputs)
    for s in _walk_stmts(stmts):
        if isinstance(s, ast.Assign):
            for t in s.targets:
                if isinstance(t, ast.Subscript):
                    base = t.value
                    while isinstance(base, ast.Subscript):
                        base = base.value
                    mutated |= _all_names(base)
                elif not isinstance(t, ast.Name):
                    mutated |= _all_names(t)
            if len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
                t, v = s.targets[0].id, s.value
                if A.get(s, A.AUGMENTED, False):   # x += v: in place when x is an array, into the array x holds
                    mutated.add(t)
                    mutated |= _names(v.args[0]) if isinstance(v, ast.Call) and v.args else _all_names(v)
                if isinstance(v, (ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.Constant)):
                    continue
                name = _call_name(v)
                if name is not None and name in _FRESH:
                    if v.keywords:   # out=..., where=...: whatever is named there may be written
                        mutated |= {n for k in v.keywords for n in _all_names(k.value)}
                    continue
                if isinstance(v, ast.Call) and name is None:   # not a primitive: whatever it does to its arguments
                    mutated |= _all_names(v)
                if isinstance(v, ast.Subscript) and isinstance(v.value, ast.Attribute) and v.value.attr == "shape":
                    continue   # a size
                if name == "getitem":   # a view of the array indexed (not of the integers indexing it)
                    v = v.args[0]
                for n in _names(v):   # a view, or a call that may return one
                    uf.union(t, n)
        elif isinstance(s, ast.AugAssign):
            mutated |= _all_names(s.target)
        elif isinstance(s, ast.For):
            it = s.iter
            if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id in ("range", "enumerate", "zip"):
                it = ast.Tuple(elts=list(it.args), ctx=ast.Load())   # (a view of what they iterate)
            for n in _names(it):
                for t in _names(s.target):
                    uf.union(t, n)
        elif isinstance(s, (ast.Expr, ast.Return)):
            mutated |= _all_names(s)
    roots = {uf.find(m) for m in mutated}
    return {n for n in list(uf.parent) if uf.find(n) in roots} | mutated


class _Scalarizer:
    def __init__(self, fdef, shapes, consts, outputs, ranks, kinds, maxlen):
        self.fdef = fdef
        self.ranks = ranks
        self.kinds = kinds
        self.maxlen = maxlen
        self.taken = names_in(fdef)
        self.banned = _banned_names(fdef.body, outputs)
        self.init = {}
        for p, (shape, dtype) in shapes.items():
            if p in self.banned or dtype not in ("<f8", "<i8"):
                continue
            kind = "f" if dtype == "<f8" else "i"
            if len(shape) == 2 and 0 < shape[1] <= maxlen:
                self.init[p] = Rows(shape[1], kind, p)
            elif len(shape) == 1 and 0 < shape[0] <= maxlen:   # a small vector argument: its elements, read once
                self.init[p] = Vec(shape[0], kind)
        self.shapes = shapes
        for c, v in consts.items():
            self.init[c] = Int(v)
        self.guards = set()
        self.used_init = set()
        self.parts = {}
        self.origins = {}

    # ------------------------------------------------------------------ abstract values
    def atom(self, e, vals):
        if isinstance(e, ast.Constant):
            if type(e.value) is int:
                return Int(e.value)
            return "scalar" if type(e.value) is float else _TOP
        if isinstance(e, ast.Name):
            if e.id in self.init:
                self.used_init.add(e.id)
                return self.init[e.id]
            return vals.get(e.id, _BOT)
        return _TOP

    def scalar(self, e, vals, kinds=_REAL_KINDS):
        """A real number (not an array): a constant, a known integer, a scalar this analysis found, or a name
        inferred rank 0 of a real kind."""
        v = self.atom(e, vals)
        if isinstance(v, Int) or v in ("scalar", "iscalar"):
            return kinds is _REAL_KINDS or (v == "scalar") == ("f8" in kinds)
        if isinstance(e, ast.Name) and not isinstance(v, (Vec, Rows)) and self.ranks.get(e.id) == 0 and \
                self.kinds.get(e.id) in kinds:
            return True
        return False

    def scalar_kind(self, e, vals):
        """"scalar" (float64), "iscalar" (integer) or None."""
        if self.scalar(e, vals, ("f8", "f8w")):
            return "scalar"
        if self.scalar(e, vals, ("i", "iw")):
            return "iscalar"
        return None

    def const_int(self, e, vals):
        if e is None:
            return None, True
        v = self.atom(e, vals)
        if isinstance(v, Int):
            return v.v, True
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub) and isinstance(e.operand, ast.Constant) \
                and type(e.operand.value) is int:
            return -e.operand.value, True
        return None, False

    def index_int(self, e, vals):
        """An integer scalar index (run-time or constant)."""
        return self.scalar_kind(e, vals) == "iscalar"

    def elems(self, idx, n):
        """The element positions ``v[idx]`` selects of an ``n``-vector (a list), an int for one element, or
        None when not known here."""
        if isinstance(idx, ast.Slice):
            lo, ok1 = self.const_int(idx.lower, self._vals)
            hi, ok2 = self.const_int(idx.upper, self._vals)
            st, ok3 = self.const_int(idx.step, self._vals)
            if not (ok1 and ok2 and ok3) or st == 0:
                return None
            return list(range(*slice(lo, hi, st).indices(n)))
        k, ok = self.const_int(idx, self._vals)
        if ok and k is not None and -n <= k < n:
            return k % n
        return None

    def value(self, e, vals):
        """The abstract value of an assignment's right side: Vec, Int, "scalar", "iscalar", _BOT (not known
        yet) or _TOP."""
        self._vals = vals
        if any(vals.get(n) == _BOT for n in _names(e) if n not in self.init):
            return _BOT
        if isinstance(e, (ast.Name, ast.Constant)):
            v = self.atom(e, vals)
            if isinstance(v, (Vec, Int)) or v == _BOT:
                return v
            return self.scalar_kind(e, vals) or _TOP
        if isinstance(e, ast.Subscript) and isinstance(e.value, ast.Attribute) and e.value.attr == "shape":
            k, ok = self.const_int(e.slice, vals)
            obj = self.atom(e.value.value, vals)
            if obj == _BOT:
                return _BOT
            if ok and k is not None and isinstance(obj, Vec) and k in (0, -1):
                return Int(obj.n)
            return _TOP
        if self.filled(e, vals) is not None:
            return Vec(e.args[0].value, "f")
        name = _call_name(e)
        if name is None or e.keywords:
            return _TOP
        args = e.args
        if any(self.atom(a, vals) == _BOT for a in args if isinstance(a, ast.Name)):
            return _BOT
        if name == "norm" and len(args) == 1:   # np.linalg.norm(v): NumPy's sqrt(dot(v, v)) of a real vector
            v = self.atom(args[0], vals)
            return "scalar" if isinstance(v, Vec) and v.kind == "f" else _TOP
        if name in _INT_OPS and len(args) == 2:
            a, b = self.atom(args[0], vals), self.atom(args[1], vals)
            if isinstance(a, Int) and isinstance(b, Int):
                try:
                    return Int(_INT_OPS[name](a.v, b.v))
                except ZeroDivisionError:
                    return _TOP
        if name == "negative" and len(args) == 1 and isinstance(self.atom(args[0], vals), Int):
            return Int(-self.atom(args[0], vals).v)
        if name in _ARITH or name in _INT_OPS or name in _ELEMENTWISE:
            kinds = [self.scalar_kind(a, vals) for a in args]
            if all(kinds):   # scalars: a float, unless of integers only
                if all(k == "iscalar" for k in kinds):
                    if name in ("add", "subtract", "multiply", "negative", "floor_divide", "remainder"):
                        return "iscalar"
                    if name in _KEEPS_INTEGERS:
                        return _TOP
                return "scalar" if name in _ARITH or name in _ELEMENTWISE else _TOP
            if name in _ARITH or name in _ELEMENTWISE:
                return self.elementwise(args, vals)
            return _TOP
        if name == "getitem" and len(args) == 2:
            base, idx = self.atom(args[0], vals), args[1]
            if isinstance(base, Rows):
                if self.index_int(idx, vals):
                    return Vec(base.m, base.kind)
                if isinstance(idx, ast.Tuple) and len(idx.elts) == 2 and self.index_int(idx.elts[0], vals):
                    sel = self.elems(idx.elts[1], base.m)
                    if isinstance(sel, list) and sel:
                        return Vec(len(sel), base.kind)
                    if self.index_int(idx.elts[1], vals):   # one element
                        return "scalar" if base.kind == "f" else "iscalar"
                return _TOP
            if isinstance(base, Vec):
                sel = self.elems(idx, base.n)
                if isinstance(sel, list) and sel:
                    return Vec(len(sel), base.kind)
                if isinstance(sel, int) or self.index_int(idx, vals):   # one element (read from the array form)
                    return "scalar" if base.kind == "f" else "iscalar"
                return _TOP
            arg = self.shapes.get(args[0].id) if isinstance(args[0], ast.Name) and args[0].id not in self.rebound \
                else None
            ix = idx.elts if isinstance(idx, ast.Tuple) else [idx]
            if arg is not None and len(ix) == len(arg[0]) and all(self.index_int(x, vals) for x in ix):
                return {"<f8": "scalar", "<i8": "iscalar"}.get(arg[1], _TOP)   # an element of an argument
            return _TOP
        if name in ("sum", "mean") and len(args) == 1:
            v = self.atom(args[0], vals)
            return "scalar" if isinstance(v, Vec) and v.kind == "f" else _TOP
        if name == "dot" and len(args) == 2:
            a, b = self.atom(args[0], vals), self.atom(args[1], vals)
            return "scalar" if isinstance(a, Vec) and a == b and a.kind == "f" else _TOP
        if name == "copy" and len(args) == 1:
            v = self.atom(args[0], vals)
            return v if isinstance(v, Vec) else _TOP
        if name == "cross" and len(args) == 2:
            a, b = self.atom(args[0], vals), self.atom(args[1], vals)
            return Vec(3, "f") if a == Vec(3, "f") and b == Vec(3, "f") else _TOP
        if name in ("stack", "concatenate") and len(args) == 1 and isinstance(args[0], ast.Tuple) and args[0].elts:
            elts = args[0].elts
            if any(self.atom(x, vals) == _BOT for x in elts):
                return _BOT
            if name == "stack":
                if len(elts) <= self.maxlen and all(self.scalar_kind(x, vals) == "scalar" for x in elts) and \
                        not all(isinstance(x, ast.Constant) for x in elts):   # (constants: see np.zeros)
                    return Vec(len(elts), "f")
                return _TOP
            vs = [self.atom(x, vals) for x in elts]
            if all(isinstance(v, Vec) and v.kind == "f" for v in vs):
                n = sum(v.n for v in vs)
                return Vec(n, "f") if n <= self.maxlen else _TOP
        return _TOP

    def filled(self, e, vals):
        """``np.zeros(k)`` / ``np.ones(k)`` of a small constant length: the value of its elements, or None."""
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and isinstance(e.func.value, ast.Name) \
                and e.func.value.id == "np" and e.func.attr in ("zeros", "ones") and len(e.args) == 1 \
                and not e.keywords and isinstance(e.args[0], ast.Constant) and type(e.args[0].value) is int \
                and 0 < e.args[0].value <= self.maxlen:
            return 0.0 if e.func.attr == "zeros" else 1.0
        return None

    def elementwise(self, operands, vals):
        vs = [self.atom(x, vals) for x in operands]
        if _BOT in vs:
            return _BOT
        vecs = [v for v in vs if isinstance(v, Vec)]
        if not vecs or any(v.kind != "f" or v.n != vecs[0].n for v in vecs):
            return _TOP
        if not all(isinstance(v, Vec) or self.scalar(x, vals) for x, v in zip(operands, vs)):
            return _TOP
        return Vec(vecs[0].n, "f")

    # ------------------------------------------------------------------ analysis
    def analyse(self):
        defs = {}
        other = set()
        for s in _walk_stmts(self.fdef.body):
            if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
                defs.setdefault(s.targets[0].id, []).append(s)
            elif isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For)):
                tgts = s.targets if isinstance(s, ast.Assign) else [s.target]
                for t in tgts:
                    other |= {n.id for n in ast_walk(t) if isinstance(n, ast.Name)}
        vals = {}
        for n in other | self.banned:
            vals[n] = _TOP
        self.rebound = {p for p in self.shapes if p in defs or p in other}
        for p in list(self.init):
            if p in defs or p in other:   # a parameter rebound: not the argument's shape
                self.init.pop(p, None)
        for p, v in self.init.items():
            if isinstance(v, Vec):
                vals[p] = v
        for n in names_in(self.fdef):   # parameters, globals: what they are is not this analysis' to know
            if n not in self.init and n not in defs:
                vals.setdefault(n, _TOP)
        for s in _walk_stmts(self.fdef.body):   # range loops count in integers
            if isinstance(s, ast.For) and isinstance(s.target, ast.Name) and isinstance(s.iter, ast.Call) and \
                    isinstance(s.iter.func, ast.Name) and s.iter.func.id == "range" and s.target.id not in defs \
                    and s.target.id not in self.banned:
                vals[s.target.id] = "iscalar"
        for _ in range(100):
            changed = False
            for n, ds in defs.items():
                if n in other or n in self.banned:
                    continue
                got = _BOT
                if len(ds) == 1 and self.filled(ds[0].value, vals) is not None:
                    # zeros never updated: constants Numba would prune branches on (np.zeros is an array to it)
                    vals[n] = _TOP
                    continue
                for s in ds:
                    v = self.value(s.value, vals)
                    if v == _BOT:
                        continue
                    if got == _BOT:
                        got = v
                    elif got != v:
                        got = _TOP
                    if got is _TOP:
                        break
                if isinstance(got, Vec) and got.n > self.maxlen:
                    got = _TOP
                if got != _BOT and vals.get(n, _BOT) != got:
                    if vals.get(n, _BOT) != _BOT:   # changed after being known: give up on it (monotone)
                        got = _TOP
                    if vals.get(n) != got:
                        vals[n] = got
                        changed = True
            if not changed:
                break
        self.vals = {n: (v if v != _BOT else _TOP) for n, v in vals.items()}
        return any(isinstance(v, Vec) for v in self.vals.values())

    # ------------------------------------------------------------------ rewriting
    def fresh(self, base):
        name, i = base, 0
        while name in self.taken:
            i += 1
            name = f"{base}_{i}"
        self.taken.add(name)
        return name

    def parts_of(self, name):
        if name not in self.parts:
            v = self.vals[name]
            self.parts[name] = [self.fresh(f"{name}_{k}") for k in range(v.n)]
            if isinstance(self.init.get(name), Vec):   # an argument: read where the function starts
                self.guards.add((name, 0, v.n))
            for k, p in enumerate(self.parts[name]):
                self.origins[p] = (name, k)
        return self.parts[name]

    def is_vec(self, e):
        return isinstance(e, ast.Name) and isinstance(self.vals.get(e.id), Vec)

    def elem(self, e, k):
        """Element ``k`` of operand ``e`` (a vector's part, or the scalar itself)."""
        if self.is_vec(e):
            return ast.Name(self.parts_of(e.id)[k], ast.Load())
        return e

    def rewrite(self, s):
        """Statements replacing assignment ``s`` (element by element), or None to keep it as it is."""
        t = s.targets[0].id
        e = s.value
        tv = self.vals.get(t)
        self._vals = self.vals
        if isinstance(tv, Vec):
            if _call_name(e) == "cross":
                return self.cross(t, e, s) if all(self.is_vec(a) for a in e.args) else None
            exprs = self.vector_exprs(e, tv)
            if exprs is None:
                return None
            return [self.assign(p, x, s) for p, x in zip(self.parts_of(t), exprs)]
        x = self.scalar_expr(e)
        return None if x is None else x(s, t)

    def assign(self, name, value, src):
        a = ast.Assign(targets=[ast.Name(name, ast.Store())], value=value)
        A.put(a, A.SRC, A.get(src, A.SRC, None))
        for ann in (A.FILE,):
            if A.has(src, ann):
                A.put(a, ann, A.get(src, ann))
        return ast.copy_location(a, src)

    def call(self, name, args, like=None):
        c = ast.Call(func=_K(name), args=list(args), keywords=[])
        A.put(c, A.PRIM, by_name(name))
        if like is not None and A.has(like, A.SRC):
            A.put(c, A.SRC, A.get(like, A.SRC))
        return c

    def operands_known(self, args):
        """Every operand a vector or a real scalar under the final values (a name the analysis never settled is
        neither: its statement stays as it is)."""
        return all(self.is_vec(a) or self.scalar_kind(a, self.vals) for a in args)

    def vector_exprs(self, e, tv):
        n = tv.n
        if isinstance(e, ast.Name):
            return [self.elem(e, k) for k in range(n)] if self.is_vec(e) else None
        fill = self.filled(e, self.vals)
        if fill is not None:
            return [ast.Constant(fill) for _ in range(n)]
        name = _call_name(e)
        args = e.args
        if name in _ARITH or name in _ELEMENTWISE:
            if not self.operands_known(args):
                return None
            return [self.call(name, [self.elem(a, k) for a in args], e) for k in range(n)]
        if name == "getitem":
            base = self.atom(args[0], self.vals)
            idx = args[1]
            if isinstance(base, Rows):
                if not self.index_int(idx.elts[0] if isinstance(idx, ast.Tuple) else idx, self.vals):
                    return None
                self.guards.add((base.param, 1, base.m))
                if isinstance(idx, ast.Tuple):
                    row, sel = idx.elts[0], self.elems(idx.elts[1], base.m)
                else:
                    row, sel = idx, list(range(base.m))
                return [self.call("getitem", [ast.Name(base.param, ast.Load()),
                                              ast.Tuple(elts=[row, ast.Constant(k)], ctx=ast.Load())], e)
                        for k in sel]
            if not isinstance(base, Vec):
                return None
            return [self.elem(args[0], k) for k in self.elems(idx, base.n)]
        if name == "copy":
            return [self.elem(args[0], k) for k in range(n)] if self.is_vec(args[0]) else None
        if name == "stack":
            elts = args[0].elts
            return list(elts) if all(self.scalar_kind(x, self.vals) == "scalar" for x in elts) else None
        if name == "concatenate":
            if not all(self.is_vec(x) for x in args[0].elts):
                return None
            out = []
            for x in args[0].elts:
                out += [self.elem(x, k) for k in range(self.vals[x.id].n)]
            return out
        return None

    def cross(self, t, e, s):
        a, b = e.args
        out = []
        parts = self.parts_of(t)
        for k, (i, j) in enumerate(((1, 2), (2, 0), (0, 1))):
            p, q = self.fresh(f"{parts[k]}_a"), self.fresh(f"{parts[k]}_b")
            out.append(self.assign(p, self.call("multiply", [self.elem(a, i), self.elem(b, j)], e), s))
            out.append(self.assign(q, self.call("multiply", [self.elem(a, j), self.elem(b, i)], e), s))
            out.append(self.assign(parts[k], self.call("subtract", [ast.Name(p, ast.Load()), ast.Name(q, ast.Load())],
                                                      e), s))
        return out

    def scalar_expr(self, e):
        """For a scalar-valued statement reading vectors: a function (src, target) -> statements, or None."""
        name = _call_name(e)
        if name is None or e.keywords:
            return None
        args = e.args
        if name == "getitem" and self.is_vec(args[0]):
            k = self.elems(args[1], self.vals[args[0].id].n)
            if isinstance(k, int):
                return lambda s, t: [self.assign(t, self.elem(args[0], k), s)]
            return None
        if name in ("sum", "mean") and len(args) == 1 and self.is_vec(args[0]) and self.vals[args[0].id].kind == "f":
            n = self.vals[args[0].id].n
            terms = [self.elem(args[0], k) for k in range(n)]
            return lambda s, t: self.chain(t, terms, s, e, divide=n if name == "mean" else None)
        if name == "norm" and len(args) == 1 and self.is_vec(args[0]) and self.vals[args[0].id].kind == "f":
            def norm(s, t):
                sq = self.fresh(f"{t}_sq")
                return self.dot(sq, args[0], args[0], s, e) + [
                    self.assign(t, self.call("sqrt", [ast.Name(sq, ast.Load())], e), s)]
            return norm
        if name == "dot" and len(args) == 2 and all(self.is_vec(a) and self.vals[a.id].kind == "f" for a in args) \
                and self.vals[args[0].id].n == self.vals[args[1].id].n:
            return lambda s, t: self.dot(t, args[0], args[1], s, e)
        return None

    def dot(self, t, a, b, s, e):
        """``t = a[0] * b[0] + a[1] * b[1] + ...`` of two vectors, one operation per statement."""
        out, terms = [], []
        for k in range(self.vals[a.id].n):
            p = self.fresh(f"{t}_p{k}")
            out.append(self.assign(p, self.call("multiply", [self.elem(a, k), self.elem(b, k)], e), s))
            terms.append(ast.Name(p, ast.Load()))
        return out + self.chain(t, terms, s, e)

    def chain(self, t, terms, s, e, divide=None):
        """``t = terms[0] + terms[1] + ...`` (left to right, as NumPy adds a few numbers), one operation per
        statement; ``/ divide`` last for a mean."""
        out = []
        if len(terms) == 1:
            terms = [terms[0], ast.Constant(0.0)]
        acc = terms[0]
        for k, x in enumerate(terms[1:], 1):
            last = k == len(terms) - 1 and divide is None
            name = t if last else self.fresh(f"{t}_s{k}")
            out.append(self.assign(name, self.call("add", [acc, x], e), s))
            acc = ast.Name(name, ast.Load())
        if divide is not None:
            out.append(self.assign(t, self.call("divide", [acc, ast.Constant(float(divide))], e), s))
        return out

    def materialize(self, t, s):
        """The array form of vector ``t`` right after its definition ``s`` (for uses read as an array)."""
        e = s.value
        if _call_name(e) == "getitem" and isinstance(self.atom(e.args[0], self.vals), Rows):
            return [s]   # the row (a view of the argument) itself
        elts = [ast.Name(p, ast.Load()) for p in self.parts_of(t)]
        return [self.assign(t, self.call("stack", [ast.Tuple(elts=elts, ctx=ast.Load())], e), s)]

    def run(self):
        if not self.analyse():
            return None
        new = {}
        for s in _walk_stmts(self.fdef.body):
            if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
                r = self.rewrite(s)
                if r is not None:
                    new[id(s)] = r
        # vectors read as arrays somewhere (a statement kept as it is): made into arrays where defined
        as_array = set()
        for s in _walk_stmts(self.fdef.body):
            if id(s) in new:
                continue
            parts = []   # every expression of the statement (its nested statements are visited on their own)
            for _, val in ast.iter_fields(s):
                for x in (val if isinstance(val, list) else [val]):
                    if isinstance(x, ast.expr) and not (isinstance(s, ast.Assign) and isinstance(x, ast.Name)
                                                        and x in s.targets):
                        parts.append(x)
            for p in parts:
                for n in ast_walk(p):
                    if isinstance(n, ast.Name) and isinstance(self.vals.get(n.id), Vec):
                        as_array.add(n.id)
        # a vector whose definition is kept as it is has no parts: its readers need it as an array (rewrite
        # again without it)
        kept = {s.targets[0].id for s in _walk_stmts(self.fdef.body)
                if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
                and id(s) not in new and isinstance(self.vals.get(s.targets[0].id), Vec)}
        if kept:   # (not expected: the analysis and the rewriting know the same forms) again, with them arrays
            self.banned |= kept
            self.parts.clear()
            self.guards.clear()
            self.origins.clear()
            self.taken = names_in(self.fdef)
            return self.run()
        if not new:
            return None

        def block(stmts):
            out = []
            for s in stmts:
                if id(s) in new:
                    out += new[id(s)]
                    t = s.targets[0].id
                    if t in as_array and isinstance(self.vals.get(t), Vec):
                        out += self.materialize(t, s)
                    continue
                for field in ("body", "orelse"):
                    sub = getattr(s, field, None)
                    if isinstance(sub, list) and sub and isinstance(sub[0], ast.stmt):
                        setattr(s, field, block(sub) or [ast.Pass()])
                out.append(s)
            return out

        body = block(self.fdef.body)
        loads = []
        for p, parts in self.parts.items():
            if isinstance(self.init.get(p), Vec):
                src = self.fdef.body[0] if self.fdef.body else self.fdef
                loads += [self.assign(q, self.call("getitem", [ast.Name(p, ast.Load()), ast.Constant(k)]), src)
                          for k, q in enumerate(parts)]
        return loads + body


def scalarize(fdef, shapes, consts, outputs, ranks, kinds, maxlen=None):
    """Rewrite ``fdef`` (ANF, changed in place) with its small vectors held as elements; returns ``(guards,
    origins)`` or None when nothing was rewritten. ``guards``: ``(parameter, axis, size)`` for each argument
    dimension and ``(name, None, value)`` for each captured integer the new code assumes; ``origins``: each new
    name -> (vector name, element)."""
    sc = _Scalarizer(fdef, shapes, consts, outputs, ranks, kinds, MAXLEN if maxlen is None else maxlen)
    body = sc.run()
    if body is None:
        return None
    fdef.body = body
    # every argument shape and captured integer the analysis read is checked (its conclusions may rest on it
    # where no element is read: a length folded to a constant)
    guards = set(sc.guards)
    for n in sc.used_init:
        v = sc.init.get(n)
        if isinstance(v, Int):
            guards.add((n, None, v.v))
        elif isinstance(v, Rows):
            guards.add((n, 1, v.m))
        elif isinstance(v, Vec):
            guards.add((n, 0, v.n))
    return sorted(guards, key=repr), sc.origins
