"""Inference of what each generated name holds: its ndim (ranks) and its scalar kind.

Guarantees: ``infer_ranks`` maps every name of an A-normal-form body to its
ndim where it can be known from the argument specs and the primitives' rules,
and to ``None`` where not (a name whose rank differs between assignments is
``None``); ``infer_kinds`` maps names to "f8", "i", "b" or ``None``. Loops
are iterated to a fixpoint. The reverse pass uses ranks to drop ``unbroadcast``
between scalars and kinds to preallocate float64 tapes.
"""
from __future__ import annotations

import ast
from . import annotations as A

_REDUCTIONS = {"sum", "mean", "max", "min", "prod", "var", "std", "ptp", "nansum", "nanmean", "median",
               "average"}


_FILLED = frozenset(["ones", "zeros", "empty", "full"])
_LIKE = frozenset(["empty_like", "zeros_like", "ones_like", "full_like"])
_SCALAR_TYPES = frozenset(["float64", "float32", "int64", "int32", "intp", "bool_", "complex128"])


def infer_ranks(stmts, ranks):
    """ndim of every name where it can be known (None where not); loops iterate to a fixpoint."""
    def rk(e):
        if isinstance(e, ast.Constant):
            return 0 if isinstance(e.value, (int, float, bool)) else None
        if isinstance(e, ast.Name):
            return ranks.get(e.id)
        return None

    def rhs(e):
        if isinstance(e, (ast.Name, ast.Constant)):
            return rk(e)
        if isinstance(e, (ast.Compare, ast.BoolOp, ast.UnaryOp)):
            vals = [rk(x) for x in ast.iter_child_nodes(e) if isinstance(x, (ast.Name, ast.Constant))]
            return None if any(v is None for v in vals) else max(vals, default=0)
        if isinstance(e, ast.BinOp):  # integer arithmetic kept as operators
            a, b = rk(e.left), rk(e.right)
            return None if a is None or b is None else max(a, b)
        if isinstance(e, ast.Subscript) or isinstance(e, ast.Attribute):
            node = e
            while isinstance(node, ast.Subscript):
                node = node.value
            if isinstance(node, ast.Attribute) and node.attr in ("ndim", "size"):
                return 0
            if isinstance(node, ast.Attribute) and node.attr == "shape":
                return 0 if isinstance(e, ast.Subscript) else None
            return None
        if isinstance(e, ast.Call):
            prim = A.get(e, A.PRIM, None)
            if prim is None:
                if isinstance(e.func, ast.Name) and e.func.id in ("int", "float", "len", "min", "max", "abs"):
                    return 0
                if isinstance(e.func, ast.Attribute) and isinstance(e.func.value, ast.Name) and \
                        e.func.value.id == "np" and e.args:
                    f, a0 = e.func.attr, e.args[0]
                    if f in _FILLED:   # np.ones((2, 3)): the shape's length
                        if isinstance(a0, ast.Tuple):
                            return len(a0.elts)
                        return 1 if rk(a0) == 0 else None
                    if f in _SCALAR_TYPES and len(e.args) == 1:   # np.float64(a) keeps an array an array
                        return rk(a0)
                    if f in _LIKE and not any(k.arg == "shape" for k in e.keywords):   # np.empty_like(a)
                        return rk(a0)
                return None
            args = [rk(a) for a in e.args]
            kw = {k.arg: k.value for k in e.keywords}
            if prim.elementwise:
                return None if any(a is None for a in args) else max(args, default=0)
            if prim.name in _REDUCTIONS:
                r = args[0]
                if r is None:
                    return None
                axis = kw.get("axis", ast.Constant(None))
                keep = kw.get("keepdims", ast.Constant(False))
                if not isinstance(keep, ast.Constant):
                    return None
                if keep.value:
                    return r
                if isinstance(axis, ast.Constant):
                    return 0 if axis.value is None else r - 1
                if isinstance(axis, ast.Tuple):
                    return r - len(axis.elts)
                return None
            if prim.name in ("matmul", "dot"):
                a, b = args
                if a is None or b is None:
                    return None
                if prim.name == "dot":  # the last axis of a with the second-to-last of b; scalars multiply
                    return max(a, b) if a == 0 or b == 0 else a + b - 2
                if a == 1 and b == 1:  # matmul: a 1-D operand's promoted axis is removed again
                    return 0
                return max(a, b) - 1 if a == 1 or b == 1 else max(a, b)
            if prim.name == "getitem":
                r = args[0]
                idx = e.args[1]
                parts = idx.elts if isinstance(idx, ast.Tuple) else [idx]
                if r is None:
                    return None
                n_int = 0
                for p in parts:
                    if isinstance(p, ast.Slice) or (isinstance(p, ast.Constant) and p.value is Ellipsis):
                        continue
                    if isinstance(p, ast.Constant) and p.value is None:   # np.newaxis: one more axis
                        n_int -= 1
                    elif isinstance(p, ast.Constant) and isinstance(p.value, int) and not isinstance(p.value, bool):
                        n_int += 1
                    elif isinstance(p, ast.Name) and ranks.get(p.id) == 0:
                        n_int += 1
                    else:
                        return None
                return r - n_int
            if prim.name == "outer":
                return 2
            if prim.name == "reshape" and len(e.args) == 2:   # the new shape's length
                shape = e.args[1]
                if isinstance(shape, ast.Tuple) and not any(isinstance(x, ast.Starred) for x in shape.elts):
                    return len(shape.elts)
                if isinstance(shape, ast.Constant) and type(shape.value) is int:
                    return 1
                return None
            if prim.name in ("copy", "stop_gradient", "negative", "zeros_like", "transpose", "swapaxes", "moveaxis"):
                return args[0]
            if prim.name == "pick":    # a if c else b: items of one rank
                return args[1] if args[1] == args[2] else None
            if prim.name == "broadcast_like":   # forward mode: a tangent shaped like its primal
                return args[1]
            return None
        return None

    def walk(ss):
        changed = False
        for st in ss:
            if isinstance(st, (ast.For, ast.While, ast.If)):
                if isinstance(st, ast.For) and ranks.get(st.target.id) != 0:
                    ranks[st.target.id] = 0
                    changed = True
                changed |= walk(st.body)
                changed |= walk(st.orelse)
            elif isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name):
                n = st.targets[0].id
                r = rhs(st.value)
                if n in ranks and ranks[n] != r:
                    if ranks[n] is not None:
                        ranks[n] = None
                        changed = True
                elif n not in ranks:
                    ranks[n] = r
                    changed = True
        return changed

    for _ in range(10):
        if not walk(stmts):
            break
    return ranks


_UNARY_SAME = {"negative", "absolute", "square", "copy", "stop_gradient", "sign"}


def _promote(ks):
    if any(k is None for k in ks):
        return None
    if any(k == "f4" for k in ks):
        return None  # float32 scalars promote differently in NumPy and Numba: no fast path
    if any(k in ("f8", "f8w") for k in ks):
        return "f8"
    if all(k in ("i", "iw", "b") for k in ks):
        return "i"
    return None


def infer_kinds(stmts, kinds):
    """Scalar kind of each name: "f8" (float64), "i" (integer), "b" (bool), or None (unknown/array dtype)."""
    def kd(e):
        if isinstance(e, ast.Constant):
            v = e.value
            return "b" if isinstance(v, bool) else "iw" if isinstance(v, int) else "f8w" if isinstance(v, float) else None
        if isinstance(e, ast.Name):
            return kinds.get(e.id)
        return None

    def rhs(e):
        if isinstance(e, (ast.Name, ast.Constant)):
            k = kd(e)
            return {"iw": "i", "f8w": "f8"}.get(k, k)
        if isinstance(e, (ast.Compare, ast.BoolOp)) or (isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not)):
            return "b"
        if isinstance(e, ast.BinOp):
            k = _promote([kd(e.left), kd(e.right)])
            return k if k == "i" else None
        if isinstance(e, (ast.Subscript, ast.Attribute)):
            node = e
            while isinstance(node, ast.Subscript):
                node = node.value
            if isinstance(node, ast.Attribute) and node.attr in ("shape", "ndim", "size"):
                return "i"
            return None
        if isinstance(e, ast.Call):
            prim = A.get(e, A.PRIM, None)
            if prim is None:
                if isinstance(e.func, ast.Name) and e.func.id in ("int", "len"):
                    return "i"
                if isinstance(e.func, ast.Name) and e.func.id == "float":
                    return "f8"
                return None
            ks = [kd(a) for a in e.args]
            if prim.name == "getitem":
                return kinds.get(e.args[0].id) if isinstance(e.args[0], ast.Name) else None
            if prim.name in ("sum", "max", "min", "prod"):
                k = {"iw": "i", "f8w": "f8"}.get(ks[0], ks[0])
                # NumPy sums and multiplies bools as integers (np.sum(a > 0) counts): a tape of this kind
                # stored the count 4 as True
                return "i" if k == "b" and prim.name in ("sum", "prod") else k
            if prim.name == "mean":
                return "f8" if ks[:1] == ["b"] or _promote(ks[:1]) in ("f8", "i") else None
            if prim.name in _UNARY_SAME:
                k = ks[0]
                return {"iw": "i", "f8w": "f8"}.get(k, k)
            if prim.name in ("add", "subtract", "multiply", "maximum", "minimum", "matmul", "dot", "where",
                             "remainder", "fmod", "fmax", "fmin"):
                return _promote(ks[-2:] if prim.name == "where" else ks)
            if prim.elementwise:  # transcendental and true division: float results
                k = _promote(ks)
                return "f8" if k in ("f8", "i") else None
            return None
        return None

    def merge(a, b):
        if a == b:
            return a
        if {a, b} == {"i", "f8"}:
            return "f8"  # Numba and Python both widen an int rebound to a float
        return None

    def walk(ss):
        changed = False
        for st in ss:
            if isinstance(st, (ast.For, ast.While, ast.If)):
                if isinstance(st, ast.For) and kinds.get(st.target.id) != "i":
                    kinds[st.target.id] = "i"
                    changed = True
                changed |= walk(st.body)
                changed |= walk(st.orelse)
            elif isinstance(st, ast.Assign) and isinstance(st.targets[0], ast.Name):
                n = st.targets[0].id
                k = rhs(st.value)
                new = k if n not in kinds else merge(kinds[n], k)
                if n not in kinds or new != kinds[n]:
                    kinds[n] = new
                    changed = True
        return changed

    for _ in range(10):
        if not walk(stmts):
            break
    return kinds
