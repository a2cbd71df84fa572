"""Shape, assembly and contraction kernels for the CPU (re-exported by ``funcgrad.kernels.cpu``).

Owns the compute behind the primitives of :mod:`funcgrad.ops.numpy_shape`: axis
permutations (``swapaxes``, ``moveaxis``, ``rollaxis``), ``atleast_*d``, ``tile``,
``repeat``, ``roll``, ``rot90``, ``flip``, ``pad``, the ``*stack`` family, pieces of
``split``, ``diag``/``diagonal``/``tril``/``triu``, ``kron``, ``inner``, ``einsum``,
``take_along_axis``, ``np.gradient`` along one axis, and the adjoint (transpose) of
each of them.

Guarantee: every name in ``__all__`` is callable from plain Python on NumPy arrays
(where it is NumPy's own function, or a few lines over it) *and* from inside
``numba.njit`` code through a ``numba.extending.overload`` that generates a
nopython implementation per argument types at typing time, with the same values.
Arguments that change the structure of the result (axes, the pad mode, einsum
subscripts, the ``kind`` of a stack) must be constants in compiled code; sizes
(shifts, repeats, pad widths, ``k`` of ``rot90``/``diag``/``tril``) may be runtime
values. Compiled results are C-contiguous arrays (a variable rebound in a loop
keeps one type). A structural argument that is not a constant, or a form Numba
cannot express, raises ``TypeError`` while typing, which the caller reports at the
user's line.
"""
from __future__ import annotations

import string as _string

import numpy as np
import functools as _functools

from numba import types
from numba.core.errors import TypingError as _TypingError
from numba.extending import overload as _overload, register_jitable
from numba.np import numpy_support

from ..errors import REFUSAL_MARK, UNSUPPORTED_MARK

__all__ = [
    "swapaxes", "moveaxis", "rollaxis", "unrollaxis", "reshape_like", "atleast_1d", "atleast_2d", "atleast_3d",
    "tile", "untile", "repeat", "unrepeat", "roll", "roll_back", "rot90", "flip", "pad", "unpad", "pad_mask",
    "hstack", "vstack", "dstack", "column_stack", "unjoin", "split_piece", "unsplit_piece",
    "diag", "undiag", "diagonal", "undiagonal", "tril", "triu", "kron", "kron_dx", "kron_dy",
    "inner", "inner_dx", "inner_dy", "einsum", "einsum_vjp", "einsum_tangent", "einsum_tangent_vjp", "einsum_tangent2", "take_along_axis", "untake_along_axis", "put_along_axis", "written_along_axis",
    "gradient_along", "ungradient_along", "cross", "cross_dx", "cross_dy", "list_promote", "tape_promote", "pick", "join_rows",
    "unjoin_rows",
    "astype", "asarray_dtype", "cast_like",
]


# ----------------------------------------------------------------------------- helpers
def overload(fn, **kwargs):
    """``numba.extending.overload`` whose typing function reports what it refuses as a typing error (so a
    whole-function compile fails the way funcgrad reports at the user's line, instead of a raw exception)."""
    def deco(typer):
        @_functools.wraps(typer)
        def wrapped(*args, **kw):
            try:
                return typer(*args, **kw)
            except (TypeError, ValueError) as e:
                raise _TypingError(f"{fn.__name__}: {e}") from None
        return _overload(fn, **kwargs)(wrapped)
    return deco


def _compile(src, name="impl", env=None):
    ns = {"np": np}
    ns.update(env or {})
    exec(compile(src, f"<funcgrad.kernels.cpu_shape:{name}>", "exec"), ns)
    return ns[name]


def _is_scalar(t):
    return isinstance(t, (types.Number, types.Boolean))


def _nd(t):
    """The ndim of a numba type (0 for a scalar)."""
    return t.ndim if isinstance(t, types.Array) else 0


def _lit(v, what):
    """The Python value of a constant argument seen while typing (or of its default)."""
    if v is None or isinstance(v, (bool, int, str, tuple)):
        return v
    if isinstance(v, types.Omitted):
        return v.value
    if isinstance(v, types.NoneType):
        return None
    if isinstance(v, types.Literal):
        return v.literal_value
    if isinstance(v, types.BaseTuple):
        return tuple(_lit(t, what) for t in v.types)
    raise TypeError(f"{what} must be a constant inside compiled code, got {v}")


def _axis(a, nd, what="axis"):
    if not isinstance(a, (int, np.integer)) or isinstance(a, bool):
        raise TypeError(f"{what} must be an integer, got {a!r}")
    if not -nd <= a < nd:
        raise ValueError(f"{what} {a} is out of bounds for an array of dimension {nd}")
    return int(a) % nd


def _axes(a, nd, what="axis"):
    if isinstance(a, (tuple, list)):
        out = tuple(_axis(v, nd, what) for v in a)
        if len(set(out)) != len(out):
            raise ValueError(f"repeated {what}")
        return out
    return (_axis(a, nd, what),)


def _dtype_of(t):
    if isinstance(t, types.Array):
        return numpy_support.as_dtype(t.dtype)
    if isinstance(t, types.Literal):
        return np.result_type(t.literal_value)
    return numpy_support.as_dtype(t)


def _at(ax, expr):
    """An index that selects ``expr`` on axis ``ax`` and everything on the others: ``:, :, expr``."""
    return ":, " * ax + expr


def _shape_src(parts):
    return "(" + "".join(f"{p}, " for p in parts) + ")"


def _scalar_like(r, like):
    """``r`` as a NumPy scalar where ``like`` (the value ``r`` is the cotangent of) is not an array."""
    return r if isinstance(like, np.ndarray) else np.asarray(r)[()]


def _is_int_like(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


# ----------------------------------------------------------------------------- axis permutations
def _moveaxis_perm(nd, source, destination):
    src, dst = _axes(source, nd, "source"), _axes(destination, nd, "destination")
    if len(src) != len(dst):
        raise ValueError("`source` and `destination` arguments must have the same number of elements")
    order = [n for n in range(nd) if n not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return tuple(order)


def _rollaxis_perm(nd, axis, start):
    axis = _axis(axis, nd)
    if start < 0:
        start += nd
    if not 0 <= start < nd + 1:
        raise ValueError(f"start {start} is out of bounds for an array of dimension {nd}")
    if axis < start:
        start -= 1
    order = [i for i in range(nd) if i != axis]
    order.insert(start, axis)
    return tuple(order)


def _swap_perm(nd, a, b):
    a, b = _axis(a, nd, "axis1"), _axis(b, nd, "axis2")
    p = list(range(nd))
    p[a], p[b] = p[b], p[a]
    return tuple(p)


def _transpose_impl(sig, perm):
    return _compile(f"def impl({sig}):\n    return np.ascontiguousarray(np.transpose(x, {perm}))\n")


def swapaxes(x, axis1, axis2):
    return np.swapaxes(x, axis1, axis2)


@overload(swapaxes, prefer_literal=True)
def _swapaxes_ov(x, axis1, axis2):
    return _transpose_impl("x, axis1, axis2", _swap_perm(_nd(x), _lit(axis1, "axis1"), _lit(axis2, "axis2")))


@_functools.lru_cache(maxsize=256)
def _moveaxis_perm_cached(nd, source, destination):
    return _moveaxis_perm(nd, source, destination)


def moveaxis(x, source, destination):
    # np.moveaxis normalizes its axes in Python each call (9 us against 0.1 us for the transpose it makes,
    # measured here): an ndarray with int (or tuple) axes takes the cached permutation
    if type(x) is np.ndarray and type(source) in (int, tuple) and type(destination) in (int, tuple):
        try:
            perm = _moveaxis_perm_cached(x.ndim, source, destination)
        except (ValueError, TypeError, IndexError):
            perm = None   # np.moveaxis raises NumPy's own message
        if perm is not None:
            return x.transpose(perm)
    return np.moveaxis(x, source, destination)


@overload(moveaxis, prefer_literal=True)
def _moveaxis_ov(x, source, destination):
    perm = _moveaxis_perm(_nd(x), _lit(source, "source"), _lit(destination, "destination"))
    return _transpose_impl("x, source, destination", perm)


def rollaxis(x, axis, start=0):
    return np.rollaxis(x, axis, start)


@overload(rollaxis, prefer_literal=True)
def _rollaxis_ov(x, axis, start=0):
    perm = _rollaxis_perm(_nd(x), _lit(axis, "axis"), _lit(start, "start"))
    return _transpose_impl("x, axis, start=0", perm)


def unrollaxis(g, axis, start=0):
    """The inverse permutation of ``np.rollaxis(x, axis, start)`` applied to ``g``."""
    return np.transpose(g, np.argsort(_rollaxis_perm(np.ndim(g), axis, start)))


@overload(unrollaxis, prefer_literal=True)
def _unrollaxis_ov(g, axis, start=0):
    perm = _rollaxis_perm(_nd(g), _lit(axis, "axis"), _lit(start, "start"))
    inv = tuple(int(i) for i in np.argsort(perm))
    return _compile(f"def impl(g, axis, start=0):\n    return np.ascontiguousarray(np.transpose(g, {inv}))\n")


# ----------------------------------------------------------------------------- lists grown at run time
def _promoted(buf_dt, v_dt):
    return np.result_type(buf_dt, v_dt)


def _rows_promoter(ragged, exc):
    """A kernel ``(buf, v) -> buf`` for the rows of a list grown at run time, raising ``exc(ragged)`` when ``v`` is
    not of the rows' shape, and its Numba overload."""
    def promote(buf, v):
        if type(v) is np.ndarray and v.dtype == buf.dtype and v.shape == buf.shape[1:]:
            return buf   # the common case, without NumPy's Python-level shape and dtype helpers
        if np.shape(v) != buf.shape[1:]:   # writing it into a row would broadcast it, or fail with NumPy's words
            raise exc(ragged + f" (this item's shape is {np.shape(v)}, the items before it {buf.shape[1:]})")
        dt = _promoted(buf.dtype, np.asarray(v).dtype)
        return buf if dt == buf.dtype else buf.astype(dt)

    def ov(buf, v):
        dt = _promoted(_dtype_of(buf), _dtype_of(v))
        vnd = v.ndim if isinstance(v, types.Array) else 0
        if vnd != buf.ndim - 1:
            return _compile("def impl(buf, v):\n    raise _exc(_msg)\n", env={"_msg": ragged, "_exc": exc})
        same = "np.shape(v) != buf.shape[1:]" if vnd else "False"
        cast = "buf" if dt == _dtype_of(buf) else "buf.astype(_dt)"
        return _compile(f"def impl(buf, v):\n    if {same}:\n        raise _exc(_msg)\n    return {cast}\n",
                        env={"_dt": dt.type, "_msg": ragged, "_exc": exc})
    return promote, ov


_RAGGED = ("a list that grows at run time holds items of one shape: funcgrad keeps it as the rows of one array, and "
           "this item's shape differs from the items before it; build an array that changes shape with "
           "np.concatenate instead of a list")
# the same rows, when they are a gradient's record of a loop (a gradient taken inside a function that is itself
# differentiated): the array the loop records changes shape between trips. A refusal (errors.REFUSAL_MARK):
# reported as funcgrad's NoDerivativeError at the user's call of that gradient
_RAGGED_TAPE = (REFUSAL_MARK + "differentiating this gradient again: the gradient taken here records an array at every trip of a "
                "loop, and that array changes shape from one trip to the next (it is rebuilt by np.concatenate, "
                "np.append, a slice or a reshape), which funcgrad cannot differentiate again; keep the array's shape "
                "fixed in the loop (allocate it before the loop and write its items, y[i] = ...)")

list_promote, _list_promote_ov = _rows_promoter(UNSUPPORTED_MARK + _RAGGED, AssertionError)
list_promote.__name__ = list_promote.__qualname__ = "list_promote"
list_promote.__doc__ = """``buf`` (the rows of a list grown at run time) with a dtype that also holds ``v``, the next item:
    ``buf`` itself when its dtype does (no copy), else ``buf`` cast to NumPy's promoted dtype (a list of
    ints that receives a float holds floats from then on, as ``np.stack`` of the Python list would)."""
tape_promote, _tape_promote_ov = _rows_promoter(_RAGGED_TAPE, AssertionError)
tape_promote.__name__ = tape_promote.__qualname__ = "tape_promote"
tape_promote.__doc__ = "``list_promote`` of a gradient's record of a loop, read back to differentiate it again."
overload(list_promote)(_list_promote_ov)
overload(tape_promote)(_tape_promote_ov)


# ----------------------------------------------------------------------------- items of a list argument
def pick(c, a, b):
    """``a if c else b``: the item of a list of arrays (of one dtype and rank) that a runtime loop over the list
    reads at this step (``for seq in sequences:`` runs as a loop, not once per item written out)."""
    return a if c else b


@overload(pick)
def _pick_ov(c, a, b):
    if isinstance(a, types.Array) and isinstance(b, types.Array) and (a.dtype != b.dtype or a.ndim != b.ndim):
        raise TypeError("the items of the list differ in dtype or rank")
    return lambda c, a, b: a if c else b


# ----------------------------------------------------------------------------- stacks of a list grown at run time
_ROW_KINDS = ("vstack", "hstack", "column_stack")


def _row_kind(kind):
    if kind not in _ROW_KINDS:
        raise ValueError(f"np.{kind} of a list whose length is only known at run time is not supported")
    return kind


def _rows_perm(kind, nd):
    """How ``np.<kind>`` of the rows of an array of ndim ``nd`` is that array rearranged: (permutation or None,
    whether the result is ``a.T``). hstack (and column_stack) of rows with ndim >= 2 joins along axis 1."""
    if kind in ("hstack", "column_stack") and nd >= 3:
        return (1, 0) + tuple(range(2, nd))
    return None


def _rows_shape(kind, shape):
    """The shape of ``np.<kind>`` of the rows of an array of ``shape`` (Python ints or source strings)."""
    nd = len(shape)
    n = shape[0]
    if kind == "vstack":
        return [n, 1] if nd == 1 else [shape[0], shape[1]] if nd == 2 else [f"{n} * {shape[1]}", *shape[2:]]
    if nd >= 3:   # joined along axis 1
        return [shape[1], f"{n} * {shape[2]}", *shape[3:]]
    if kind == "column_stack":
        return [1, n] if nd == 1 else [shape[1], n]
    return [n] if nd == 1 else [f"{n} * {shape[1]}"]


def join_rows(a, kind):
    """``np.<kind>(lst)`` (vstack, hstack, column_stack) of a list grown at run time whose items are the rows of
    ``a`` (the list's buffer): ``a`` reshaped or transposed."""
    kind = _row_kind(kind)
    if np.ndim(a) == 0 or np.shape(a)[0] == 0:
        raise ValueError("need at least one array to concatenate")
    return getattr(np, kind)(list(a))


def unjoin_rows(g, a, kind):
    """The VJP of :func:`join_rows` (linear in ``g``): ``g`` rearranged back into the rows of ``a``."""
    kind = _row_kind(kind)
    nd = np.ndim(a)
    perm = _rows_perm(kind, nd)
    if perm is not None:
        sh = np.shape(a)
        return np.ascontiguousarray(np.transpose(np.reshape(g, (sh[1], sh[0]) + tuple(sh[2:])), perm))
    if kind == "column_stack" and nd == 2:
        return np.ascontiguousarray(np.transpose(g))
    return np.reshape(g, np.shape(a)).copy()


def _shape_src(parts):
    return "(" + ", ".join(str(p) for p in parts) + ",)"


@overload(join_rows, prefer_literal=True)
def _join_rows_ov(a, kind):
    k = _row_kind(_lit(kind, "kind"))
    nd = _nd(a)
    if nd == 0:
        raise TypeError("the list's items must be numbers or arrays")
    dims = [f"a.shape[{i}]" for i in range(nd)]
    perm = _rows_perm(k, nd)
    src = ("def impl(a, kind):\n    if a.shape[0] == 0:\n"
           "        raise ValueError('need at least one array to concatenate')\n")
    if perm is not None:
        src += f"    return np.ascontiguousarray(np.transpose(a, {perm})).reshape({_shape_src(_rows_shape(k, dims))})\n"
    elif k == "column_stack" and nd == 2:
        src += "    return np.ascontiguousarray(np.transpose(a))\n"
    else:
        src += f"    return np.ascontiguousarray(a).reshape({_shape_src(_rows_shape(k, dims))}).copy()\n"
    return _compile(src)


@overload(unjoin_rows, prefer_literal=True)
def _unjoin_rows_ov(g, a, kind):
    k = _row_kind(_lit(kind, "kind"))
    nd = _nd(a)
    perm = _rows_perm(k, nd)
    if perm is not None:
        src = ("def impl(g, a, kind):\n"
               f"    h = np.ascontiguousarray(g).reshape({_shape_src(['a.shape[1]', 'a.shape[0]'] + [f'a.shape[{i}]' for i in range(2, nd)])})\n"
               f"    return np.ascontiguousarray(np.transpose(h, {perm}))\n")
    elif k == "column_stack" and nd == 2:
        src = "def impl(g, a, kind):\n    return np.ascontiguousarray(np.transpose(g))\n"
    else:
        src = "def impl(g, a, kind):\n    return np.ascontiguousarray(g).reshape(a.shape).copy()\n"
    return _compile(src)


# ----------------------------------------------------------------------------- dtype casts
def astype(x, dtype):
    """``x.astype(dtype)``: a new array (a NumPy scalar where ``x`` is a scalar)."""
    return x.astype(dtype) if isinstance(x, np.ndarray) else np.asarray(x).astype(dtype)[()]


@overload(astype)
def _astype_ov(x, dtype):
    if isinstance(x, types.Array):
        return lambda x, dtype: x.astype(dtype)
    return lambda x, dtype: dtype(x)


def asarray_dtype(x, dtype):
    """``np.asarray(x, dtype=dtype)``: ``x`` itself where it already has that dtype, else a cast copy."""
    if isinstance(x, np.ndarray) and x.dtype == np.dtype(dtype):
        return x
    return astype(x, dtype)


@overload(asarray_dtype)
def _asarray_dtype_ov(x, dtype):
    if isinstance(x, types.Array) and isinstance(dtype, types.NumberClass) and x.dtype == dtype.instance_type:
        return lambda x, dtype: x
    return _astype_ov(x, dtype)


def cast_like(g, x):
    """``g`` in the dtype of ``x`` (its real part where ``x`` is real): the cotangent of a cast's input."""
    dt = np.asarray(x).dtype
    if np.iscomplexobj(g) and dt.kind != "c":
        g = np.real(g)
    r = np.asarray(g).astype(dt)
    return r if isinstance(g, np.ndarray) else r[()]


@overload(cast_like)
def _cast_like_ov(g, x):
    dt = x.dtype if isinstance(x, types.Array) else x
    gdt = g.dtype if isinstance(g, types.Array) else g
    real = isinstance(gdt, types.Complex) and not isinstance(dt, types.Complex)
    if isinstance(g, types.Array):
        if real:
            return lambda g, x: np.real(g).astype(dt)
        return lambda g, x: g.astype(dt)
    if real:
        return lambda g, x: dt(g.real)
    return lambda g, x: dt(g)


# ----------------------------------------------------------------------------- atleast_*d
def reshape_like(g, x):
    """``g`` reshaped to the shape of ``x``: a scalar where ``x`` is one (the VJP of atleast_*d)."""
    return _scalar_like(np.reshape(g, np.shape(x)), x)


@overload(reshape_like)
def _reshape_like_ov(g, x):
    if _is_scalar(x):
        if _is_scalar(g):
            return lambda g, x: g
        return lambda g, x: np.ascontiguousarray(g).ravel()[0]
    if _is_scalar(g):
        return lambda g, x: np.full(x.shape, g)
    return lambda g, x: np.ascontiguousarray(g).reshape(x.shape)


def atleast_1d(x):
    return np.atleast_1d(x)


def atleast_2d(x):
    return np.atleast_2d(x)


def atleast_3d(x):
    return np.atleast_3d(x)


def _atleast_shape(n, nd):
    """The shape (as source over ``s``) ``atleast_<n>d`` gives an ``nd``-dim array, or None to keep it."""
    if nd >= n:
        return None
    s = [f"s[{i}]" for i in range(nd)]
    if n == 1:
        return ["1"]
    if n == 2:
        return (["1"] * (2 - nd)) + s
    return {0: ["1", "1", "1"], 1: ["1", "s[0]", "1"], 2: ["s[0]", "s[1]", "1"]}[nd]


def _atleast_ov(n):
    def ov(x):
        nd = _nd(x)
        shape = _atleast_shape(n, nd)
        if shape is None:
            return lambda x: x
        if _is_scalar(x):
            return _compile(f"def impl(x):\n    return np.full({_shape_src(shape)}, x)\n")
        return _compile("def impl(x):\n    s = x.shape\n"
                        f"    return np.ascontiguousarray(x).reshape({_shape_src(shape)})\n")
    return ov


overload(atleast_1d)(_atleast_ov(1))
overload(atleast_2d)(_atleast_ov(2))
overload(atleast_3d)(_atleast_ov(3))


# ----------------------------------------------------------------------------- tile
def tile(x, reps):
    return np.tile(x, reps)


def _reps_src(reps):
    """Source expressions for the entries of ``reps`` (an int, or a tuple of ints) seen while typing."""
    if isinstance(reps, (types.Integer, types.IntegerLiteral)):
        return ["reps"]
    if isinstance(reps, types.BaseTuple) and all(isinstance(t, (types.Integer, types.IntegerLiteral))
                                                  for t in reps.types):
        return [f"reps[{i}]" for i in range(len(reps))]
    raise TypeError(f"reps must be an integer or a tuple of integers, got {reps}")


def _tile_dims(nd, rexpr):
    d = max(nd, len(rexpr))
    xs = ["1"] * (d - nd) + [f"s[{i}]" for i in range(nd)]
    rs = ["1"] * (d - len(rexpr)) + list(rexpr)
    return d, xs, rs


@overload(tile)
def _tile_ov(x, reps):
    nd = _nd(x)
    d, xs, rs = _tile_dims(nd, _reps_src(reps))
    inter = _shape_src([v for i in range(d) for v in ("1", xs[i])])
    full = _shape_src([v for i in range(d) for v in (rs[i], xs[i])])
    out = _shape_src([f"{rs[i]} * {xs[i]}" for i in range(d)])
    head = "    s = x.shape\n    xa = np.ascontiguousarray(x).reshape(" + inter + ")\n" if not _is_scalar(x) else \
        f"    xa = np.full({inter}, x)\n"
    return _compile("def impl(x, reps):\n" + head +
                    f"    b = np.ascontiguousarray(np.broadcast_to(xa, {full}))\n"
                    f"    return b.reshape({out})\n")


def untile(g, x, reps):
    """Sum of the tiles of ``g`` (``np.tile(x, reps)``'s cotangent) shaped like ``x`` (the VJP of tile)."""
    xs = np.shape(x)
    r = (int(reps),) if _is_int_like(reps) else tuple(int(v) for v in reps)
    d = max(len(xs), len(r))
    xs2 = (1,) * (d - len(xs)) + tuple(xs)
    r2 = (1,) * (d - len(r)) + r
    inter = tuple(v for i in range(d) for v in (r2[i], xs2[i]))
    out = np.sum(np.reshape(g, inter), axis=tuple(range(0, 2 * d, 2)))
    return _scalar_like(np.reshape(out, xs), x)


@overload(untile)
def _untile_ov(g, x, reps):
    nd = _nd(x)
    d, xs, rs = _tile_dims(nd, _reps_src(reps))
    inter = _shape_src([v for i in range(d) for v in (rs[i], xs[i])])
    lines = ["def impl(g, x, reps):"]
    lines.append("    s = x.shape" if not _is_scalar(x) else "    s = ()")
    lines.append(f"    g2 = np.ascontiguousarray(g).reshape({inter})")
    lines.append(f"    out = np.zeros({_shape_src(xs)}, dtype=g.dtype)")
    ind = "    "
    for i in range(d):
        lines.append(f"{ind}for i{i} in range({rs[i]}):")
        ind += "    "
        lines.append(f"{ind}for j{i} in range({xs[i]}):")
        ind += "    "
    oidx = ", ".join(f"j{i}" for i in range(d))
    gidx = ", ".join(f"i{i}, j{i}" for i in range(d))
    lines.append(f"{ind}out[{oidx},] += g2[{gidx}]")
    lines.append("    return out.reshape(s)" if not _is_scalar(x) else "    return out.sum()")
    return _compile("\n".join(lines) + "\n")


# ----------------------------------------------------------------------------- repeat
def repeat(x, repeats, axis=None):
    return np.repeat(x, repeats, axis)


def _repeat_counts(repeats, n):
    c = np.asarray(repeats)
    if c.ndim > 1 or (c.ndim == 1 and c.shape[0] not in (1, n)):
        raise ValueError(f"operands could not be broadcast together with shape ({n},) {c.shape}")
    return np.broadcast_to(c.astype(np.intp), (n,))


def _counts_src(repeats):
    if isinstance(repeats, (types.Integer, types.IntegerLiteral)):
        return "    counts = np.full(n, repeats, np.intp)\n"
    if isinstance(repeats, types.Array) and isinstance(repeats.dtype, types.Integer) and repeats.ndim <= 1:
        return ("    rr = repeats.ravel()\n"
                "    if rr.shape[0] == n:\n        counts = rr.astype(np.intp)\n"
                "    elif rr.shape[0] == 1:\n        counts = np.full(n, rr[0], np.intp)\n"
                "    else:\n        raise ValueError('operands could not be broadcast together')\n")
    raise TypeError(f"repeats must be an integer or an integer array, got {repeats}")


def _repeat_setup(x, axis):
    """(source lines making ``xa``, the axis, the source shape parts) for repeat/unrepeat."""
    ax = _lit(axis, "axis")
    if ax is None:
        src = "    xa = np.full((1,), x)\n" if _is_scalar(x) else "    xa = np.ascontiguousarray(x).ravel()\n"
        return src, 0, 1
    nd = _nd(x)
    return "    xa = np.ascontiguousarray(x)\n", _axis(ax, nd), nd


@overload(repeat, prefer_literal=True)
def _repeat_ov(x, repeats, axis=None):
    head, ax, nd = _repeat_setup(x, axis)
    shape = _shape_src(["total" if i == ax else f"xa.shape[{i}]" for i in range(nd)])
    src = ("def impl(x, repeats, axis=None):\n" + head +
           f"    n = xa.shape[{ax}]\n" + _counts_src(repeats) +
           "    total = 0\n    for i in range(n):\n"
           "        if counts[i] < 0:\n            raise ValueError('negative dimensions are not allowed')\n"
           "        total += counts[i]\n"
           f"    out = np.empty({shape}, dtype=xa.dtype)\n"
           "    pos = 0\n    for i in range(n):\n        for c in range(counts[i]):\n"
           f"            out[{_at(ax, 'pos')}] = xa[{_at(ax, 'i')}]\n            pos += 1\n"
           "    return out\n")
    return _compile(src)


def unrepeat(g, x, repeats, axis=None):
    """Sum of the copies ``np.repeat(x, repeats, axis)`` made of each element, shaped like ``x``."""
    xs = np.shape(x)
    if axis is None:
        ax, n, shape = 0, int(np.prod(xs, dtype=np.int64)), (int(np.prod(xs, dtype=np.int64)),)
    else:
        ax = axis % len(xs)
        n, shape = xs[ax], tuple(xs)
    counts = _repeat_counts(repeats, n)
    g = np.asarray(g)
    if n and np.all(counts == counts[0]) and counts[0] > 0:
        r = np.sum(np.reshape(g, shape[:ax] + (n, int(counts[0])) + shape[ax + 1:]), axis=ax + 1)
    else:
        r = np.zeros(shape, dtype=g.dtype)
        np.add.at(r, (slice(None),) * ax + (np.repeat(np.arange(n), counts),), g)
    return _scalar_like(np.reshape(r, xs), x)


@overload(unrepeat, prefer_literal=True)
def _unrepeat_ov(g, x, repeats, axis=None):
    ax_lit = _lit(axis, "axis")
    if ax_lit is None:
        head = "    s = ()\n    n = 1\n" if _is_scalar(x) else "    s = x.shape\n    n = x.size\n"
        ax, nd, shape = 0, 1, "(n,)"
    else:
        nd = _nd(x)
        ax = _axis(ax_lit, nd)
        head = f"    s = x.shape\n    n = s[{ax}]\n"
        shape = "s"
    src = ("def impl(g, x, repeats, axis=None):\n" + head + _counts_src(repeats) +
           "    ga = np.ascontiguousarray(g)\n"
           f"    out = np.zeros({shape}, dtype=ga.dtype)\n"
           "    pos = 0\n    for i in range(n):\n        for c in range(counts[i]):\n"
           f"            out[{_at(ax, 'i')}] += ga[{_at(ax, 'pos')}]\n            pos += 1\n")
    src += "    return out[0]\n" if _is_scalar(x) else "    return out.reshape(s)\n"
    return _compile(src)


# ----------------------------------------------------------------------------- roll
def roll(x, shift, axis=None):
    return np.roll(x, shift, axis)


def _negate(shift):
    return -shift if _is_int_like(shift) else tuple(-int(s) for s in shift)


def roll_back(g, shift, axis=None):
    """``np.roll(g, -shift, axis)``: the inverse of ``roll`` (its VJP)."""
    return np.roll(g, _negate(shift), axis)


def _roll_ov(sign):
    def ov(x, shift, axis=None):
        if _is_scalar(x):
            raise TypeError("roll of a scalar is not supported inside compiled code")
        ax = _lit(axis, "axis")
        neg = "-" if sign < 0 else ""
        if ax is None:
            if not isinstance(shift, (types.Integer, types.IntegerLiteral)):
                raise TypeError("roll(axis=None) needs an integer shift inside compiled code")
            return _compile(
                "def impl(x, shift, axis=None):\n"
                "    flat = np.ascontiguousarray(x).ravel()\n    n = flat.size\n    out = np.empty_like(flat)\n"
                f"    if n:\n        s = ({neg}shift) % n\n"
                "        out[s:] = flat[:n - s]\n        out[:s] = flat[n - s:]\n"
                "    return out.reshape(x.shape)\n")
        nd = x.ndim
        axes = list(ax) if isinstance(ax, tuple) else [ax]
        if isinstance(shift, types.BaseTuple):
            shifts = [f"shift[{i}]" for i in range(len(shift))]
        else:
            shifts = ["shift"]
        if len(shifts) == 1:
            shifts = shifts * len(axes)
        if len(axes) == 1:
            axes = axes * len(shifts)
        if len(shifts) != len(axes):
            raise ValueError("'shift' and 'axis' should be scalars or 1D sequences of the same length")
        lines = ["def impl(x, shift, axis=None):", "    y = np.ascontiguousarray(x)"]
        for sh, a in zip(shifts, axes):
            a = _axis(a, nd)
            lines += [f"    n = y.shape[{a}]", "    out = np.empty_like(y)", "    if n:",
                      f"        s = ({neg}{sh}) % n",
                      f"        out[{_at(a, 's:')}] = y[{_at(a, ':n - s')}]",
                      f"        out[{_at(a, ':s')}] = y[{_at(a, 'n - s:')}]",
                      "    y = out"]
        lines.append("    return y")
        return _compile("\n".join(lines) + "\n")
    return ov


overload(roll, prefer_literal=True)(_roll_ov(1))
overload(roll_back, prefer_literal=True)(_roll_ov(-1))


# ----------------------------------------------------------------------------- rot90, flip
def rot90(x, k=1, axes=(0, 1)):
    return np.rot90(x, k, axes)


def _flip_src(var, axes):
    if not axes:
        return var
    hi = max(axes)
    return f"{var}[" + "".join("::-1, " if i in axes else ":, " for i in range(hi + 1)) + "]"


@overload(rot90, prefer_literal=True)
def _rot90_ov(x, k=1, axes=(0, 1)):
    ax = _lit(axes, "axes")
    nd = _nd(x)
    if not isinstance(ax, tuple) or len(ax) != 2:
        raise ValueError("len(axes) must be 2.")
    a0, a1 = _axis(ax[0], nd), _axis(ax[1], nd)
    if a0 == a1:
        raise ValueError("Axes must be different.")
    perm = list(range(nd))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    perm = tuple(perm)
    src = ("def impl(x, k=1, axes=(0, 1)):\n    kk = k % 4\n    xa = np.ascontiguousarray(x)\n"
           "    if kk == 0:\n        return xa.copy()\n"
           f"    if kk == 2:\n        return np.ascontiguousarray({_flip_src('xa', (a0, a1))})\n"
           f"    if kk == 1:\n        return np.ascontiguousarray(np.transpose({_flip_src('xa', (a1,))}, {perm}))\n"
           f"    t = np.transpose(xa, {perm})\n"
           f"    return np.ascontiguousarray({_flip_src('t', (a1,))})\n")
    return _compile(src)


def flip(x, axis=None):
    return np.flip(x, axis)


@overload(flip, prefer_literal=True)
def _flip_ov(x, axis=None):
    if _is_scalar(x):
        return lambda x, axis=None: x
    ax = _lit(axis, "axis")
    axes = tuple(range(x.ndim)) if ax is None else _axes(ax, x.ndim)
    return _compile(f"def impl(x, axis=None):\n    return np.ascontiguousarray({_flip_src('x', axes)})\n")


# ----------------------------------------------------------------------------- pad
PAD_MODES = ("constant", "edge", "reflect", "symmetric", "wrap")


@register_jitable
def _pad_index_edge(n, before, after):
    out = np.empty(n + before + after, np.intp)
    for j in range(out.shape[0]):
        i = j - before
        out[j] = 0 if i < 0 else (n - 1 if i > n - 1 else i)
    return out


@register_jitable
def _pad_index_wrap(n, before, after):
    out = np.empty(n + before + after, np.intp)
    for j in range(out.shape[0]):
        out[j] = (j - before) % n
    return out


@register_jitable
def _pad_index_reflect(n, before, after):
    out = np.empty(n + before + after, np.intp)
    for j in range(out.shape[0]):
        if n == 1:
            out[j] = 0
        else:
            p = (j - before) % (2 * (n - 1))
            out[j] = 2 * (n - 1) - p if p >= n else p
    return out


@register_jitable
def _pad_index_symmetric(n, before, after):
    out = np.empty(n + before + after, np.intp)
    for j in range(out.shape[0]):
        p = (j - before) % (2 * n)
        out[j] = 2 * n - 1 - p if p >= n else p
    return out


_PAD_INDEX = {"edge": _pad_index_edge, "wrap": _pad_index_wrap, "reflect": _pad_index_reflect,
              "symmetric": _pad_index_symmetric}


def _pad_pairs(pad_width, nd):
    pw = np.asarray(pad_width)
    if pw.dtype.kind not in "iu":
        raise TypeError("`pad_width` must be of integral type.")
    pairs = np.broadcast_to(pw, (nd, 2))
    if np.any(pairs < 0):
        raise ValueError("index can't contain negative values")
    return [(int(b), int(a)) for b, a in pairs]


def pad(x, pad_width, mode="constant", constant_values=0):
    if mode not in PAD_MODES:
        raise ValueError(f"pad mode {mode!r} is not supported (use one of {', '.join(PAD_MODES)})")
    if mode == "constant":
        return np.pad(x, pad_width, mode="constant", constant_values=constant_values)
    return np.pad(x, pad_width, mode=mode)


def _pad_width_src(pw, nd):
    """Source expressions (before, after) per axis for a ``pad_width`` of numba type ``pw``."""
    def is_int(t):
        return isinstance(t, (types.Integer, types.IntegerLiteral))
    if is_int(pw):
        return [("pad_width", "pad_width")] * nd
    if isinstance(pw, types.BaseTuple) and all(is_int(t) for t in pw.types):
        if len(pw) == 1:
            return [("pad_width[0]", "pad_width[0]")] * nd
        if len(pw) == 2:
            return [("pad_width[0]", "pad_width[1]")] * nd
    if isinstance(pw, types.BaseTuple) and all(isinstance(t, types.BaseTuple) and all(is_int(u) for u in t.types)
                                               for t in pw.types):
        if len(pw) not in (1, nd):
            raise ValueError(f"pad_width has {len(pw)} entries for an array of dimension {nd}")
        out = []
        for a in range(nd):
            row = 0 if len(pw) == 1 else a
            m = len(pw.types[row])
            if m not in (1, 2):
                raise ValueError("each entry of pad_width is (before, after) or (width,)")
            out.append((f"pad_width[{row}][0]", f"pad_width[{row}][{m - 1}]"))
        return out
    raise TypeError(f"pad_width must be an int, a pair or a tuple of pairs of ints, got {pw}")


@overload(pad, prefer_literal=True)
def _pad_ov(x, pad_width, mode="constant", constant_values=0):
    md = _lit(mode, "mode")
    if md not in PAD_MODES:
        raise ValueError(f"pad mode {md!r} is not supported")
    if _is_scalar(x) or x.ndim == 0:
        raise TypeError("pad of a scalar is not supported inside compiled code")
    nd = x.ndim
    bw = _pad_width_src(pad_width, nd)
    lines = ["def impl(x, pad_width, mode='constant', constant_values=0):", "    xa = np.ascontiguousarray(x)",
             "    s = xa.shape"]
    for a, (b, e) in enumerate(bw):
        lines += [f"    b{a} = {b}", f"    e{a} = {e}",
                  f"    if b{a} < 0 or e{a} < 0:", "        raise ValueError(\"index can't contain negative values\")"]
    if md == "constant":
        if not _is_scalar(constant_values):
            raise TypeError("pad(constant_values=...) inside compiled code takes one number")
        shape = _shape_src([f"s[{a}] + b{a} + e{a}" for a in range(nd)])
        lines.append(f"    out = np.full({shape}, constant_values, dtype=xa.dtype)")
        lines.append("    out[" + ", ".join(f"b{a}:b{a} + s[{a}]" for a in range(nd)) + "] = xa")
        lines.append("    return out")
        return _compile("\n".join(lines) + "\n")
    lines.append("    y = xa")
    for a in range(nd):
        lines.append(f"    y = np.ascontiguousarray(y[{_at(a, f'idx(s[{a}], b{a}, e{a})')}])")
    lines.append("    return y")
    return _compile("\n".join(lines) + "\n", env={"idx": _PAD_INDEX[md]})


def pad_mask(x, pad_width, mode="constant"):
    """1 where ``np.pad(x, pad_width, mode)`` writes the constant (mode "constant"), else 0; x's dtype."""
    r = pad(np.zeros_like(x), pad_width, mode, 1) if mode == "constant" else pad(np.zeros_like(x), pad_width, mode)
    return r


@overload(pad_mask, prefer_literal=True)
def _pad_mask_ov(x, pad_width, mode="constant"):
    md = _lit(mode, "mode")
    if md == "constant":
        return lambda x, pad_width, mode="constant": pad(np.zeros_like(x), pad_width, "constant", 1)
    return lambda x, pad_width, mode="constant": pad(np.zeros_like(x), pad_width, "edge", 0)


def unpad(g, x, pad_width, mode="constant"):
    """The VJP of ``np.pad(x, pad_width, mode)``: every element of ``g`` added back where it was read from."""
    xs = np.shape(x)
    pairs = _pad_pairs(pad_width, len(xs))
    g = np.asarray(g)
    if mode == "constant":
        r = np.array(g[tuple(slice(b, b + n) for (b, _), n in zip(pairs, xs))])
    else:
        r = g
        for ax, ((b, a), n) in enumerate(zip(pairs, xs)):
            acc = np.zeros(r.shape[:ax] + (n,) + r.shape[ax + 1:], dtype=r.dtype)
            np.add.at(acc, (slice(None),) * ax + (_PAD_INDEX[mode](n, b, a),), r)
            r = acc
    return _scalar_like(r, x)


@overload(unpad, prefer_literal=True)
def _unpad_ov(g, x, pad_width, mode="constant"):
    md = _lit(mode, "mode")
    if md not in PAD_MODES:
        raise ValueError(f"pad mode {md!r} is not supported")
    nd = _nd(x)
    bw = _pad_width_src(pad_width, nd)
    lines = ["def impl(g, x, pad_width, mode='constant'):", "    s = x.shape", "    r = np.ascontiguousarray(g)"]
    for a, (b, e) in enumerate(bw):
        lines += [f"    b{a} = {b}", f"    e{a} = {e}"]
    if md == "constant":
        lines.append("    return r[" + ", ".join(f"b{a}:b{a} + s[{a}]" for a in range(nd)) + "].copy()")
        return _compile("\n".join(lines) + "\n")
    for a in range(nd):
        shape = _shape_src([f"s[{a}]" if i == a else f"r.shape[{i}]" for i in range(nd)])
        lines += [f"    m = idx(s[{a}], b{a}, e{a})", f"    acc = np.zeros({shape}, dtype=r.dtype)",
                  "    for j in range(m.shape[0]):", f"        acc[{_at(a, 'm[j]')}] += r[{_at(a, 'j')}]",
                  "    r = acc"]
    lines.append("    return r")
    return _compile("\n".join(lines) + "\n", env={"idx": _PAD_INDEX[md]})


# ----------------------------------------------------------------------------- hstack & co.
JOIN_KINDS = ("hstack", "vstack", "dstack", "column_stack")


def _join_plan(kind, nds):
    """(the axis joined on, per element its ndim-raising rule) for ``np.<kind>`` of arrays of ``nds`` dims."""
    if kind == "hstack":
        first = nds[0] if nds else 1
        return (0 if max(first, 1) == 1 else 1), 1
    if kind == "vstack":
        return 0, 2
    if kind == "dstack":
        return 2, 3
    return 1, "column"


def _joined_shape(rule, shape):
    nd = len(shape)
    if rule == "column":
        return (int(np.prod(shape, dtype=np.int64)), 1) if nd < 2 else tuple(shape)
    if nd >= rule:
        return tuple(shape)
    if rule == 1:
        return (1,)
    if rule == 2:
        return (1,) * (2 - nd) + tuple(shape)
    return {0: (1, 1, 1), 1: (1,) + tuple(shape) + (1,), 2: tuple(shape) + (1,)}[nd]


def hstack(tup):
    return np.hstack(tup)


def vstack(tup):
    return np.vstack(tup)


def dstack(tup):
    return np.dstack(tup)


def column_stack(tup):
    return np.column_stack(tup)


def _joined_shape_src(rule, t, i):
    """Source of the shape element ``tup[i]`` (numba type ``t``) takes before joining."""
    nd = _nd(t)
    s = [f"tup[{i}].shape[{k}]" for k in range(nd)]
    if rule == "column":
        if nd >= 2:
            return s
        return ["1", "1"] if nd == 0 else [s[0], "1"]
    if nd >= rule:
        return s
    if rule == 1:
        return ["1"]
    if rule == 2:
        return ["1"] * (2 - nd) + s
    return {0: ["1", "1", "1"], 1: ["1", s[0] if s else "1", "1"], 2: s + ["1"]}[nd]


def _join_ov(kind):
    def ov(tup):
        if not isinstance(tup, types.BaseTuple) or len(tup) == 0:
            raise TypeError(f"{kind} inside compiled code takes a tuple or list of arrays")
        elems = list(tup.types)
        ax, rule = _join_plan(kind, [_nd(t) for t in elems])
        shapes = [_joined_shape_src(rule, t, i) for i, t in enumerate(elems)]
        nd = len(shapes[0])
        if any(len(s) != nd for s in shapes):
            raise ValueError(f"{kind}: all the input arrays must have the same number of dimensions")
        dt = np.result_type(*[_dtype_of(t) for t in elems])
        lines = ["def impl(tup):", "    total = 0"]
        for i, s in enumerate(shapes):
            lines.append(f"    total += {s[ax]}")
        out_shape = _shape_src(["total" if k == ax else shapes[0][k] for k in range(nd)])
        lines += [f"    out = np.empty({out_shape}, dtype=dt)", "    pos = 0"]
        for i, (t, s) in enumerate(zip(elems, shapes)):
            src = f"np.full({_shape_src(s)}, tup[{i}])" if _is_scalar(t) else \
                f"np.ascontiguousarray(tup[{i}]).reshape({_shape_src(s)})"
            lines += [f"    n = {s[ax]}", f"    out[{_at(ax, 'pos:pos + n')}] = {src}", "    pos += n"]
        lines.append("    return out")
        return _compile("\n".join(lines) + "\n", env={"dt": dt})
    return ov


overload(hstack)(_join_ov("hstack"))
overload(vstack)(_join_ov("vstack"))
overload(dstack)(_join_ov("dstack"))
overload(column_stack)(_join_ov("column_stack"))


def unjoin(g, arrays, kind):
    """Split ``g`` (the cotangent of ``np.<kind>(arrays)``) into pieces shaped like each of ``arrays``."""
    shapes = [np.shape(a) for a in arrays]
    ax, rule = _join_plan(kind, [len(s) for s in shapes])
    out, start = [], 0
    for a, s in zip(arrays, shapes):
        js = _joined_shape(rule, s)
        n = js[ax]
        piece = np.asarray(g)[(slice(None),) * ax + (slice(start, start + n),)]
        out.append(_scalar_like(np.reshape(piece, s).copy(), a))
        start += n
    return out


@overload(unjoin, prefer_literal=True)
def _unjoin_ov(g, arrays, kind):
    kd = _lit(kind, "kind")
    elems = list(arrays.types)
    ax, rule = _join_plan(kd, [_nd(t) for t in elems])
    lines = ["def impl(g, arrays, kind):", "    ga = np.ascontiguousarray(g)", "    pos = 0"]
    names = []
    for i, t in enumerate(elems):
        s = [v.replace("tup[", "arrays[") for v in _joined_shape_src(rule, t, i)]
        lines += [f"    n = {s[ax]}", f"    piece = ga[{_at(ax, 'pos:pos + n')}]", "    pos += n"]
        if _is_scalar(t):
            lines.append(f"    p{i} = piece.ravel()[0]")
        else:
            lines.append(f"    p{i} = np.ascontiguousarray(piece).reshape(arrays[{i}].shape).copy()")
        names.append(f"p{i}")
    lines.append(f"    return ({', '.join(names)},)")
    return _compile("\n".join(lines) + "\n")


# ----------------------------------------------------------------------------- split
SPLIT_KINDS = ("split", "array_split", "hsplit", "vsplit", "dsplit")


def _split_axis(kind, axis, nd):
    if kind == "hsplit":
        if nd == 0:
            raise ValueError("hsplit only works on arrays of 1 or more dimensions")
        return 1 if nd > 1 else 0
    if kind == "vsplit":
        if nd < 2:
            raise ValueError("vsplit only works on arrays of 2 or more dimensions")
        return 0
    if kind == "dsplit":
        if nd < 3:
            raise ValueError("dsplit only works on arrays of 3 or more dimensions")
        return 2
    return _axis(axis, nd)


@register_jitable
def _split_bounds_int(n, sections, index, strict):
    if sections <= 0:
        raise ValueError("number sections must be larger than 0.")
    if strict and n % sections:
        raise ValueError("array split does not result in an equal division")
    each, extras = n // sections, n % sections
    start = index * each + (index if index < extras else extras)
    size = each + 1 if index < extras else each
    return start, start + size


def _split_bounds(n, sections, index, strict):
    if _is_int_like(sections):
        return _split_bounds_int(n, int(sections), index, strict)
    pts = [0] + [int(v) for v in sections] + [n]
    return pts[index], pts[index + 1]


def split_piece(x, sections, index, axis=0, kind="array_split"):
    """Piece ``index`` of ``np.<kind>(x, sections, axis)`` (``kind`` in split, array_split, hsplit, ...)."""
    xs = np.shape(x)
    ax = _split_axis(kind, axis, len(xs))
    a, b = _split_bounds(xs[ax], sections, index, kind != "array_split")
    return np.asarray(x)[(slice(None),) * ax + (slice(a, b),)]


def unsplit_piece(g, x, sections, index, axis=0, kind="array_split"):
    """Zeros shaped like ``x`` with ``g`` where piece ``index`` of the split was read (its VJP)."""
    xs = np.shape(x)
    ax = _split_axis(kind, axis, len(xs))
    a, b = _split_bounds(xs[ax], sections, index, kind != "array_split")
    out = np.zeros(xs, dtype=np.result_type(g))
    out[(slice(None),) * ax + (slice(a, b),)] = g
    return out


def _split_src(x, sections, index, axis, kind):
    kd = _lit(kind, "kind")
    if kd not in SPLIT_KINDS:
        raise ValueError(f"unknown split kind {kd!r}")
    ax = _split_axis(kd, _lit(axis, "axis"), _nd(x))
    sec = _lit(sections, "the number of sections or the split indices") if not isinstance(
        sections, types.Integer) or isinstance(sections, types.IntegerLiteral) else None
    strict = kd != "array_split"
    if isinstance(sections, (types.Integer, types.IntegerLiteral)):
        bounds = f"    a, b = bounds(n, sections, index, {strict})\n"
    elif isinstance(sec, tuple):
        pts = "(0, " + "".join(f"sections[{i}], " for i in range(len(sec))) + "n)"
        bounds = f"    pts = {pts}\n    a = pts[index]\n    b = pts[index + 1]\n"
    else:
        raise TypeError(f"split sections must be an integer or a tuple of indices, got {sections}")
    return ax, f"    n = x.shape[{ax}]\n" + bounds


@overload(split_piece, prefer_literal=True)
def _split_piece_ov(x, sections, index, axis=0, kind="array_split"):
    ax, head = _split_src(x, sections, index, axis, kind)
    return _compile("def impl(x, sections, index, axis=0, kind='array_split'):\n" + head +
                    f"    return np.ascontiguousarray(x[{_at(ax, 'a:b')}])\n",
                    env={"bounds": _split_bounds_int})


@overload(unsplit_piece, prefer_literal=True)
def _unsplit_piece_ov(g, x, sections, index, axis=0, kind="array_split"):
    ax, head = _split_src(x, sections, index, axis, kind)
    return _compile("def impl(g, x, sections, index, axis=0, kind='array_split'):\n" + head +
                    "    out = np.zeros(x.shape, dtype=g.dtype)\n"
                    f"    out[{_at(ax, 'a:b')}] = g\n    return out\n",
                    env={"bounds": _split_bounds_int})


# ----------------------------------------------------------------------------- diag, diagonal, tril, triu
def diag(x, k=0):
    return np.diag(x, k)


@register_jitable
def _diag_len(m, n, k):
    if k >= 0:
        r = n - k if n - k < m else m
    else:
        r = m + k if m + k < n else n
    return r if r > 0 else 0


@overload(diag)
def _diag_ov(x, k=0):
    if _nd(x) == 1:
        def from_vector(x, k=0):
            n = x.shape[0]
            m = n + (k if k >= 0 else -k)
            out = np.zeros((m, m), dtype=x.dtype)
            for i in range(n):
                if k >= 0:
                    out[i, i + k] = x[i]
                else:
                    out[i - k, i] = x[i]
            return out
        return from_vector
    if _nd(x) == 2:
        def from_matrix(x, k=0):
            L = _diag_len(x.shape[0], x.shape[1], k)
            out = np.empty(L, dtype=x.dtype)
            for i in range(L):
                out[i] = x[i, i + k] if k >= 0 else x[i - k, i]
            return out
        return from_matrix
    raise ValueError("Input must be 1- or 2-d.")


def undiag(g, x, k=0):
    """The VJP of ``np.diag(x, k)``: the diagonal of ``g`` (x a vector), or ``g`` placed on it (x a matrix)."""
    if np.ndim(x) == 1:
        return np.diag(g, k).copy()
    out = np.zeros(np.shape(x), dtype=np.result_type(g))
    L = _diag_len(out.shape[0], out.shape[1], k)
    i = np.arange(L)
    if k >= 0:
        out[i, i + k] = g
    else:
        out[i - k, i] = g
    return out


@overload(undiag)
def _undiag_ov(g, x, k=0):
    if _nd(x) == 1:
        def to_vector(g, x, k=0):
            n = x.shape[0]
            out = np.empty(n, dtype=g.dtype)
            for i in range(n):
                out[i] = g[i, i + k] if k >= 0 else g[i - k, i]
            return out
        return to_vector

    def to_matrix(g, x, k=0):
        out = np.zeros(x.shape, dtype=g.dtype)
        for i in range(g.shape[0]):
            if k >= 0:
                out[i, i + k] = g[i]
            else:
                out[i - k, i] = g[i]
        return out
    return to_matrix


def diagonal(x, offset=0, axis1=0, axis2=1):
    return np.diagonal(x, offset, axis1, axis2).copy()


def _diagonal_perm(nd, axis1, axis2):
    a, b = _axis(axis1, nd, "axis1"), _axis(axis2, nd, "axis2")
    if a == b:
        raise ValueError("axis1 and axis2 cannot be the same")
    return tuple(i for i in range(nd) if i not in (a, b)) + (a, b)


@overload(diagonal, prefer_literal=True)
def _diagonal_ov(x, offset=0, axis1=0, axis2=1):
    nd = _nd(x)
    perm = _diagonal_perm(nd, _lit(axis1, "axis1"), _lit(axis2, "axis2"))
    lead = _shape_src([f"t.shape[{i}]" for i in range(nd - 2)] + ["L"])
    src = ("def impl(x, offset=0, axis1=0, axis2=1):\n"
           f"    t = np.ascontiguousarray(np.transpose(x, {perm}))\n"
           f"    m = t.shape[{nd - 2}]\n    n = t.shape[{nd - 1}]\n"
           "    t3 = t.reshape((-1, m, n))\n    L = dlen(m, n, offset)\n"
           "    out = np.empty((t3.shape[0], L), dtype=x.dtype)\n"
           "    for b in range(t3.shape[0]):\n        for i in range(L):\n"
           "            out[b, i] = t3[b, i, i + offset] if offset >= 0 else t3[b, i - offset, i]\n"
           f"    return out.reshape({lead})\n")
    return _compile(src, env={"dlen": _diag_len})


def undiagonal(g, x, offset=0, axis1=0, axis2=1):
    """Zeros shaped like ``x`` with ``g`` on the diagonal ``np.diagonal(x, offset, axis1, axis2)`` read."""
    xs = np.shape(x)
    perm = _diagonal_perm(len(xs), axis1, axis2)
    ts = tuple(xs[p] for p in perm)
    out = np.zeros(ts, dtype=np.result_type(g))
    L = _diag_len(ts[-2], ts[-1], offset)
    i = np.arange(L)
    if offset >= 0:
        out[..., i, i + offset] = g
    else:
        out[..., i - offset, i] = g
    return np.ascontiguousarray(np.transpose(out, np.argsort(perm)))


@overload(undiagonal, prefer_literal=True)
def _undiagonal_ov(g, x, offset=0, axis1=0, axis2=1):
    nd = _nd(x)
    perm = _diagonal_perm(nd, _lit(axis1, "axis1"), _lit(axis2, "axis2"))
    inv = tuple(int(i) for i in np.argsort(perm))
    ts = _shape_src([f"s[{p}]" for p in perm])
    src = ("def impl(g, x, offset=0, axis1=0, axis2=1):\n    s = x.shape\n"
           f"    ts = {ts}\n    m = ts[{nd - 2}]\n    n = ts[{nd - 1}]\n"
           "    out = np.zeros(ts, dtype=g.dtype)\n    o3 = out.reshape((-1, m, n))\n"
           "    L = dlen(m, n, offset)\n    g2 = np.ascontiguousarray(g).reshape((-1, L))\n"
           "    for b in range(o3.shape[0]):\n        for i in range(L):\n"
           "            if offset >= 0:\n                o3[b, i, i + offset] = g2[b, i]\n"
           "            else:\n                o3[b, i - offset, i] = g2[b, i]\n"
           f"    return np.ascontiguousarray(np.transpose(out, {inv}))\n")
    return _compile(src, env={"dlen": _diag_len})


def tril(x, k=0):
    return np.tril(x, k)


def triu(x, k=0):
    return np.triu(x, k)


def _tri_ov(lower):
    cond = "j - i > k" if lower else "j - i < k"

    def ov(x, k=0):
        if _nd(x) < 2:
            raise TypeError("tril/triu inside compiled code need an array of 2 or more dimensions")
        src = ("def impl(x, k=0):\n    out = np.ascontiguousarray(x).copy()\n"
               "    m = out.shape[-2]\n    n = out.shape[-1]\n    o3 = out.reshape((-1, m, n))\n"
               "    for b in range(o3.shape[0]):\n        for i in range(m):\n            for j in range(n):\n"
               f"                if {cond}:\n                    o3[b, i, j] = 0\n    return out\n")
        return _compile(src)
    return ov


overload(tril)(_tri_ov(True))
overload(triu)(_tri_ov(False))


# ----------------------------------------------------------------------------- kron
def kron(a, b):
    return np.kron(a, b)


def _kron_shapes(sa, sb):
    d = max(len(sa), len(sb))
    return (1,) * (d - len(sa)) + tuple(sa), (1,) * (d - len(sb)) + tuple(sb)


def _kron_d(g, x, y, wrt):
    """Cotangent of operand ``wrt`` (0: x, 1: y) of ``np.kron(x, y)`` given ``g``."""
    sa, sb = _kron_shapes(np.shape(x), np.shape(y))
    d = len(sa)
    inter = tuple(v for i in range(d) for v in (sa[i], sb[i]))
    g2 = np.reshape(g, inter)
    if wrt == 0:
        other = np.reshape(y, tuple(v for i in range(d) for v in (1, sb[i])))
        r = np.sum(g2 * other, axis=tuple(range(1, 2 * d, 2)))
        return _scalar_like(np.reshape(r, np.shape(x)), x)
    other = np.reshape(x, tuple(v for i in range(d) for v in (sa[i], 1)))
    r = np.sum(g2 * other, axis=tuple(range(0, 2 * d, 2)))
    return _scalar_like(np.reshape(r, np.shape(y)), y)


def kron_dx(g, x, y):
    """Cotangent of ``x`` in ``np.kron(x, y)``."""
    return _kron_d(g, x, y, 0)


def kron_dy(g, x, y):
    """Cotangent of ``y`` in ``np.kron(x, y)``."""
    return _kron_d(g, x, y, 1)


def _kron_src(ta, tb):
    """Source lines making ``A``, ``B`` (operands raised to one rank) and their shape parts."""
    na, nb = _nd(ta), _nd(tb)
    d = max(na, nb, 1)
    sa = ["1"] * (d - na) + [f"a.shape[{i}]" for i in range(na)]
    sb = ["1"] * (d - nb) + [f"b.shape[{i}]" for i in range(nb)]
    lines = []
    for v, t, s in (("A", ta, sa), ("B", tb, sb)):
        src = v.lower()
        if _is_scalar(t):
            lines.append(f"    {v} = np.full({_shape_src(s)}, {src})")
        else:
            lines.append(f"    {v} = np.ascontiguousarray({src}).reshape({_shape_src(s)})")
    return d, sa, sb, lines


@overload(kron)
def _kron_ov(a, b):
    if _nd(a) == 0 and _nd(b) == 0:
        return lambda a, b: a * b
    d, sa, sb, lines = _kron_src(a, b)
    ia = _shape_src([v for i in range(d) for v in (sa[i], "1")])
    ib = _shape_src([v for i in range(d) for v in ("1", sb[i])])
    out = _shape_src([f"{sa[i]} * {sb[i]}" for i in range(d)])
    body = "\n".join(lines)
    return _compile(f"def impl(a, b):\n{body}\n    p = A.reshape({ia}) * B.reshape({ib})\n"
                    f"    return np.ascontiguousarray(p).reshape({out})\n")


def _kron_d_ov(wrt):
    def ov(g, x, y):
        if _nd(x) == 0 and _nd(y) == 0:
            return _compile(f"def impl(g, x, y):\n    return g * {'y' if wrt == 0 else 'x'}\n")
        d, sa, sb, lines = _kron_src(x, y)
        lines = [ln.replace("(a)", "(x)").replace("(b)", "(y)").replace("a.shape", "x.shape")
                 .replace("b.shape", "y.shape").replace(", a)", ", x)").replace(", b)", ", y)") for ln in lines]
        sa = [v.replace("a.shape", "x.shape") for v in sa]
        sb = [v.replace("b.shape", "y.shape") for v in sb]
        inter = _shape_src([v for i in range(d) for v in (sa[i], sb[i])])
        mine, other = (sa, "B") if wrt == 0 else (sb, "A")
        target = x if wrt == 0 else y
        out = ["def impl(g, x, y):"] + lines + [f"    g2 = np.ascontiguousarray(g).reshape({inter})",
                                                f"    r = np.zeros({_shape_src(mine)}, dtype=g.dtype)"]
        ind = "    "
        for i in range(d):
            out.append(f"{ind}for i{i} in range({sa[i]}):")
            ind += "    "
            out.append(f"{ind}for j{i} in range({sb[i]}):")
            ind += "    "
        gi = ", ".join(f"i{i}, j{i}" for i in range(d))
        ri = ", ".join((f"i{i}" if wrt == 0 else f"j{i}") for i in range(d))
        oi = ", ".join((f"j{i}" if wrt == 0 else f"i{i}") for i in range(d))
        out.append(f"{ind}r[{ri},] += g2[{gi}] * {other}[{oi},]")
        name = "x" if wrt == 0 else "y"
        out.append(f"    return r.sum()" if _is_scalar(target) else f"    return r.reshape({name}.shape)")
        return _compile("\n".join(out) + "\n")
    return ov


overload(kron_dx)(_kron_d_ov(0))
overload(kron_dy)(_kron_d_ov(1))


# ----------------------------------------------------------------------------- inner
def inner(a, b):
    return np.inner(a, b)


def inner_dx(g, x, y):
    """Cotangent of ``x`` in ``np.inner(x, y)`` (the last axes contracted)."""
    if np.ndim(x) == 0 or np.ndim(y) == 0:
        r = np.sum(g * y) if np.ndim(x) == 0 else g * y
        return _scalar_like(r, x)
    k = np.shape(x)[-1]
    g2 = np.reshape(g, (int(np.prod(np.shape(x)[:-1], dtype=np.int64)), -1))
    return np.reshape(g2 @ np.reshape(y, (-1, k)), np.shape(x))


def inner_dy(g, x, y):
    """Cotangent of ``y`` in ``np.inner(x, y)``."""
    if np.ndim(x) == 0 or np.ndim(y) == 0:
        r = np.sum(g * x) if np.ndim(y) == 0 else g * x
        return _scalar_like(r, y)
    k = np.shape(y)[-1]
    g2 = np.reshape(g, (int(np.prod(np.shape(x)[:-1], dtype=np.int64)), -1))
    return np.reshape(g2.T @ np.reshape(x, (-1, k)), np.shape(y))


@overload(inner)
def _inner_ov(a, b):
    na, nb = _nd(a), _nd(b)
    if na == 0 or nb == 0:
        return lambda a, b: a * b
    if na == 1 and nb == 1:
        return lambda a, b: np.dot(np.ascontiguousarray(a), np.ascontiguousarray(b))
    shape = _shape_src([f"a.shape[{i}]" for i in range(na - 1)] + [f"b.shape[{i}]" for i in range(nb - 1)])
    return _compile("def impl(a, b):\n    k = a.shape[-1]\n"
                    "    A = np.ascontiguousarray(a).reshape((-1, k))\n"
                    "    B = np.ascontiguousarray(np.ascontiguousarray(b).reshape((-1, k)).T)\n"
                    f"    return np.dot(A, B).reshape({shape})\n")


def _inner_d_ov(wrt):
    def ov(g, x, y):
        nx, ny = _nd(x), _nd(y)
        if nx == 0 or ny == 0:
            other = "y" if wrt == 0 else "x"
            if (nx == 0) == (wrt == 0):   # the operand differentiated is the scalar
                return _compile(f"def impl(g, x, y):\n    return np.sum(g * {other})\n")
            return _compile(f"def impl(g, x, y):\n    return g * {other}\n")
        if wrt == 0:
            body = ("    k = x.shape[-1]\n    G = np.ascontiguousarray(g).reshape((x.size // k, -1))\n"
                    "    Y = np.ascontiguousarray(y).reshape((-1, k))\n"
                    "    return np.dot(G, Y).reshape(x.shape)\n")
        else:
            body = ("    k = y.shape[-1]\n    G = np.ascontiguousarray(g).reshape((x.size // k, -1))\n"
                    "    X = np.ascontiguousarray(x).reshape((-1, k))\n"
                    "    return np.dot(np.ascontiguousarray(G.T), X).reshape(y.shape)\n")
        return _compile("def impl(g, x, y):\n" + body)
    return ov


overload(inner_dx)(_inner_d_ov(0))
overload(inner_dy)(_inner_d_ov(1))


# ----------------------------------------------------------------------------- einsum
class EinsumSpec:
    """Parsed einsum subscripts: per operand its labels (repeats kept), the output labels, and which of
    them stand for ellipsis dimensions. Labels are ints; ellipsis dims get labels after the letters."""

    def __init__(self, inputs, output, n_ell):
        self.inputs = inputs        # list of label lists (one per operand, one label per axis)
        self.output = output        # label list
        self.n_ell = n_ell
        self._letters = None

    def letters(self):
        """The subscripts as a plain string of letters (ellipses expanded), for np.einsum."""
        if self._letters is None:
            self._letters = self._make_letters()
        return self._letters

    def _make_letters(self):
        names = {}
        for lab in sorted({l for ls in self.inputs + [self.output] for l in ls}):
            names[lab] = _string.ascii_letters[len(names)]
        fmt = lambda ls: "".join(names[v] for v in ls)  # noqa: E731
        return ",".join(fmt(ls) for ls in self.inputs) + "->" + fmt(self.output), names


def parse_einsum(subscripts, ndims=None):
    """Check ``subscripts`` (and, given ``ndims``, the operands' ranks); return an :class:`EinsumSpec`
    (``ndims`` given) or the number of operands the subscripts name. Raises ValueError as NumPy does."""
    s = subscripts.replace(" ", "")
    if s.count("->") > 1 or ("-" in s.replace("->", "")) or (">" in s.replace("->", "")):
        raise ValueError(f"einsum subscripts {subscripts!r}: at most one '->'")
    explicit = "->" in s
    lhs, rhs = s.split("->") if explicit else (s, None)
    terms = lhs.split(",")
    for t in terms + ([rhs] if explicit else []):
        rest = t.replace("...", "", 1)
        if "." in rest:
            raise ValueError(f"einsum subscripts {subscripts!r}: invalid ellipsis in {t!r}")
        for c in rest:
            if c not in _string.ascii_letters:
                raise ValueError(f"einsum subscripts {subscripts!r}: invalid subscript {c!r} "
                                 "(only letters and '...' are allowed)")
    if explicit:
        seen = set()
        for c in rhs.replace("...", ""):
            if c in seen:
                raise ValueError(f"einsum subscripts {subscripts!r}: output subscript {c!r} appears more than once")
            if c not in lhs:
                raise ValueError(f"einsum subscripts {subscripts!r}: output subscript {c!r} does not appear "
                                 "in the inputs")
            seen.add(c)
    if ndims is None:
        return len(terms)
    if len(terms) != len(ndims):
        raise ValueError(f"einsum subscripts {subscripts!r} name {len(terms)} operands, {len(ndims)} were given")
    letter = {c: i for i, c in enumerate(_string.ascii_letters)}
    n_ell = 0
    for t, nd in zip(terms, ndims):
        k = len(t.replace("...", ""))
        if "..." in t:
            if nd < k:
                raise ValueError(f"einsum: operand with subscripts {t!r} has {nd} dimensions")
            n_ell = max(n_ell, nd - k)
        elif nd != k:
            raise ValueError(f"einsum: operand has {nd} dimensions, subscripts {t!r} name {k}")
    ell = [len(letter) + i for i in range(n_ell)]

    def labels(t, nd):
        if "..." not in t:
            return [letter[c] for c in t]
        a, b = t.split("...")
        e = nd - len(a) - len(b)
        return [letter[c] for c in a] + ell[n_ell - e:] + [letter[c] for c in b]

    inputs = [labels(t, nd) for t, nd in zip(terms, ndims)]
    if explicit:
        if "..." in rhs:
            output = labels(rhs, len(rhs) - 3 + n_ell)
        else:
            if any(l in ell for ls in inputs for l in ls):
                raise ValueError("output has more dimensions than subscripts given in einstein sum, but no '...' "
                                 "ellipsis provided to broadcast the extra dimensions.")
            output = [letter[c] for c in rhs]
    else:
        counts = {}
        for c in lhs.replace("...", "").replace(",", ""):
            counts[c] = counts.get(c, 0) + 1
        output = ell + [letter[c] for c in sorted(c for c, n in counts.items() if n == 1)]
    return EinsumSpec(inputs, output, n_ell)


# NumPy's einsum without ``optimize`` (its default) runs every contraction through its own loops (c_einsum), not
# BLAS: 0.68 ms for GMM's "kij,nkj->nki" at n=1000, K=d=10 against 0.075 ms as one batched matmul. A
# two-operand einsum whose labels all agree in size (no label broadcast from size 1), none repeated within an
# operand, with at least one contracted label, in a float or complex dtype, is computed here as NumPy's own
# ``optimize`` path would: each operand summed over the labels only it has, transposed to (batch, kept,
# contracted) / (batch, contracted, kept), reshaped to 3-D, one ``np.matmul``, then reshaped and transposed to
# the output's order (a fresh array; a transposed view of it, as ``optimize=True`` returns). Everything else,
# contractions too small for BLAS to pay (under _BMM_MIN multiply-adds: measured here, c_einsum 3.0 us against
# 4.7 us for 16x16 @ 16x16, 6.1 against 5.2 at 24x24) and batches of dot products ("bi,bi->b": 5.8 us against
# 11.8 us at 1000x10), stays with ``np.einsum``.
_BMM_MIN = 8192
_BMM_DTYPES = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


@_functools.lru_cache(maxsize=1024)
def _spec(subscripts, ndims):
    """:func:`parse_einsum` of ``subscripts`` for operands of these ranks, cached (the result is read only)."""
    return parse_einsum(subscripts, list(ndims))


@_functools.lru_cache(maxsize=1024)
def _bmm_plan(subscripts, shapes):
    """How :func:`_einsum_bmm` computes ``np.einsum(subscripts, a, b)`` for operands of these shapes, or None
    when it does not (``np.einsum`` does)."""
    if len(shapes) != 2 or 0 in shapes[0] or 0 in shapes[1] or not shapes[0] or not shapes[1]:
        return None
    try:
        spec = _spec(subscripts, (len(shapes[0]), len(shapes[1])))
    except ValueError:
        return None   # np.einsum raises its own message
    la, lb = spec.inputs
    out = spec.output
    if len(set(la)) != len(la) or len(set(lb)) != len(lb):
        return None   # a diagonal
    size = {}
    for labs, shp in ((la, shapes[0]), (lb, shapes[1])):
        for l, m in zip(labs, shp):
            if size.setdefault(l, m) != m:
                return None   # broadcast (or a mismatch np.einsum reports)
    bat = [l for l in la if l in lb and l in out]
    con = [l for l in la if l in lb and l not in out]
    akeep = [l for l in la if l not in lb and l in out]
    bkeep = [l for l in lb if l not in la and l in out]
    if not con:
        return None
    prod = lambda ls: int(np.prod([size[l] for l in ls], dtype=np.int64))  # noqa: E731
    if prod(bat) * prod(akeep) * prod(bkeep) * prod(con) < _BMM_MIN or \
            (bat and prod(akeep) == 1 and prod(bkeep) == 1):
        return None   # too small, or a batch of dot products (c_einsum's loop is one already, matmul's is not)
    sum_a = tuple(k for k, l in enumerate(la) if l not in lb and l not in out)
    sum_b = tuple(k for k, l in enumerate(lb) if l not in la and l not in out)
    ra = [l for k, l in enumerate(la) if k not in sum_a]
    rb = [l for k, l in enumerate(lb) if k not in sum_b]
    perm_a = tuple(ra.index(l) for l in bat + akeep + con)
    perm_b = tuple(rb.index(l) for l in bat + con + bkeep)
    shape_a = (prod(bat), prod(akeep), prod(con))
    shape_b = (prod(bat), prod(con), prod(bkeep))
    produced = bat + akeep + bkeep
    shape_ab = tuple(size[l] for l in produced)
    perm_ab = tuple(produced.index(l) for l in out)
    # the output's labels in another order than the matmul makes them: with one label per group, the matmul
    # writes into the permuted view of a C-contiguous result (out_shape, inv_ab), as c_einsum's is
    out_shape = inv_ab = None
    if perm_ab != tuple(range(len(perm_ab))) and len(bat) <= 1 and len(akeep) <= 1 and len(bkeep) <= 1:
        out_shape = tuple(size[l] for l in out)
        inv_ab = tuple(out.index(l) for l in produced)
    return sum_a, perm_a, shape_a, sum_b, perm_b, shape_b, shape_ab, perm_ab, out_shape, inv_ab


def _einsum_bmm(subscripts, operands):
    """``np.einsum(subscripts, *operands)`` through one batched matmul where :func:`_bmm_plan` has a plan (a
    fresh array), else None."""
    if len(operands) != 2:
        return None
    a, b = operands
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
        return None
    dt = np.result_type(a, b)
    if dt not in _BMM_DTYPES:
        return None
    plan = _bmm_plan(subscripts, (a.shape, b.shape))
    if plan is None:
        return None
    sum_a, perm_a, shape_a, sum_b, perm_b, shape_b, shape_ab, perm_ab, out_shape, inv_ab = plan
    if sum_a:
        a = np.sum(a, axis=sum_a)
    if sum_b:
        b = np.sum(b, axis=sum_b)
    a = np.reshape(np.transpose(a.astype(dt, copy=False), perm_a), shape_a)
    b = np.reshape(np.transpose(b.astype(dt, copy=False), perm_b), shape_b)
    if out_shape is not None:
        # a transposed result costs its consumers: (1000, 10, 10) + its transposed view took 122 us here against
        # 36 us for two C-contiguous arrays, and copying it 1.3 ms; writing the matmul into the permuted view of a
        # C-contiguous array costs 44 us more than the view (141 -> 185 us for GMM's contraction)
        r = np.empty(out_shape, dtype=dt)
        np.matmul(a, b, out=np.reshape(np.transpose(r, inv_ab), (shape_a[0], shape_a[1], shape_b[2])))
        return r
    r = np.transpose(np.reshape(np.matmul(a, b), shape_ab), perm_ab)
    return r[()] if r.ndim == 0 else r   # a full contraction: np.einsum's result is a NumPy scalar


def einsum(subscripts, operands, optimize=False):
    """``np.einsum(subscripts, *operands, optimize=optimize)`` (two operands without ``optimize``: through
    BLAS where :func:`_einsum_bmm` can)."""
    if optimize is False:
        r = _einsum_bmm(subscripts, operands)
        if r is not None:
            return r
    return np.einsum(subscripts, *operands, optimize=optimize)


def _broadcast_to(a, shape):
    """``np.broadcast_to(a, shape)``, or ``a`` itself when it has that shape (3 us less per operand)."""
    return a if a.shape == shape else np.broadcast_to(a, shape)


def _einsum_operand_d(g, spec, operands, i, optimize):
    """Cotangent of operand ``i``: an einsum of ``g`` with the other operands, then broadcast back over
    labels only operand ``i`` has, summed over axes it broadcast, and placed on its diagonals."""
    sub, names = spec.letters()
    x = np.asarray(operands[i])
    labs = spec.inputs[i]
    others = [j for j in range(len(operands)) if j != i]
    elsewhere = set(spec.output) | {l for j in others for l in spec.inputs[j]}
    uniq = list(dict.fromkeys(labs))
    kept = [l for l in uniq if l in elsewhere]
    # sizes of every label across the operands and the result (broadcast: the largest)
    size = {}
    for lab_list, arr in [(spec.inputs[j], np.asarray(operands[j])) for j in range(len(operands))] + \
            [(spec.output, np.asarray(g))]:
        for l, n in zip(lab_list, np.shape(arr)):
            cur = size.get(l, 1)
            size[l] = n if cur == 1 else cur   # broadcasting: a 1 takes the other size (0 included)
    fmt = lambda ls: "".join(names[v] for v in ls)  # noqa: E731
    ins = [fmt(spec.output)] + [fmt(spec.inputs[j]) for j in others]
    # broadcast every operand of this einsum to the full label sizes (NumPy's einsum does not broadcast
    # a label whose size is 1 in one operand and n in another consistently across versions)
    arrs = [_broadcast_to(np.asarray(g), tuple(size[l] for l in spec.output))]
    arrs += [_broadcast_to(np.asarray(operands[j]), tuple(size[l] for l in spec.inputs[j])) for j in others]
    sub = ",".join(ins) + "->" + fmt(kept)
    r = _einsum_bmm(sub, arrs) if optimize is False else None
    fresh = r is not None   # r's memory is its own (no input's, no broadcast): returned without a copy
    if r is None:
        r = np.einsum(sub, *arrs, optimize=optimize)
    # labels only this operand has: the result does not depend on them; broadcast over them
    full_shape = []
    for l in uniq:
        pos = labs.index(l)
        full_shape.append(np.shape(x)[pos])
    full_shape = tuple(full_shape)
    r = np.reshape(r, tuple(size[l] if l in kept else 1 for l in uniq))
    # axes this operand broadcast (size 1 here, larger elsewhere): sum back down
    red = tuple(k for k, l in enumerate(uniq) if full_shape[k] == 1 and r.shape[k] != 1)
    if red:
        r = np.sum(r, axis=red, keepdims=True)
        fresh = True
    if r.shape != full_shape:
        r = np.broadcast_to(r, full_shape)
        fresh = False
    dt = np.result_type(g, *operands)
    if len(uniq) == len(labs):   # no label repeated: uniq is labs
        out = r.astype(dt, copy=False) if fresh else np.array(r, dtype=dt)
    else:   # repeated labels: the cotangent lives on the diagonal
        out = np.zeros(np.shape(x), dtype=dt)
        view = np.einsum(fmt(labs) + "->" + fmt(uniq), out)
        view[...] = r
    return _scalar_like(out, operands[i])


def einsum_vjp(g, subscripts, operands, optimize=False):
    """The cotangents of every operand of ``np.einsum(subscripts, *operands)`` given ``g`` (a list)."""
    spec = _spec(subscripts, tuple(np.ndim(o) for o in operands))
    return [_einsum_operand_d(g, spec, operands, i, optimize) for i in range(len(operands))]


def _einsum_loops(spec, op_types, g_type=None):
    """Source lines of a loop nest over every label of ``spec``; returns (lines, indent, index exprs)."""
    labels = list(dict.fromkeys(spec.output + [l for ls in spec.inputs for l in ls]))
    lines = []
    # each label's size: the largest of the axes it names (broadcast), checked for agreement
    for l in labels:
        lines.append(f"    n{l} = 1")
    for j, ls in enumerate(spec.inputs):
        for k, l in enumerate(ls):
            lines += [f"    m = a{j}.shape[{k}]",
                      f"    if m != 1:\n        if n{l} != 1 and n{l} != m:\n"
                      "            raise ValueError('operands could not be broadcast together in einsum')\n"
                      f"        n{l} = m"]
            lines.append(f"    f{j}_{k} = 0 if m == 1 else 1")
    if g_type is not None:
        for k, l in enumerate(spec.output):
            lines += [f"    m = g.shape[{k}]",
                      f"    if m != 1:\n        if n{l} != 1 and n{l} != m:\n"
                      "            raise ValueError('operands could not be broadcast together in einsum')\n"
                      f"        n{l} = m"]
            lines.append(f"    fg_{k} = 0 if m == 1 else 1")
    idx = []
    for j, ls in enumerate(spec.inputs):
        if _is_scalar(op_types[j]) or op_types[j].ndim == 0:
            idx.append(None)
        else:
            idx.append(", ".join(f"i{l} * f{j}_{k}" for k, l in enumerate(ls)))
    return labels, lines, idx


def _einsum_arrays(op_types):
    lines = []
    for j, t in enumerate(op_types):
        if _is_scalar(t):
            lines.append(f"    a{j} = operands[{j}]")
        elif t.ndim == 0:   # a 0-d array: its value (``x[()]`` is not a scalar in nopython code)
            lines.append(f"    a{j} = operands[{j}].item()")
        else:
            lines.append(f"    a{j} = np.ascontiguousarray(operands[{j}])")
    return lines


def _einsum_ref(j, idx):
    return f"a{j}" if idx[j] is None else f"a{j}[{idx[j]},]"


@overload(einsum, prefer_literal=True)
def _einsum_ov(subscripts, operands, optimize=False):
    subs = _lit(subscripts, "einsum subscripts")
    if not isinstance(subs, str):
        raise TypeError("einsum subscripts must be a string")
    op_types = list(operands.types)
    spec = parse_einsum(subs, [_nd(t) for t in op_types])
    dt = np.result_type(*[_dtype_of(t) for t in op_types])
    labels, lines, idx = _einsum_loops(spec, op_types)
    lines = ["def impl(subscripts, operands, optimize=False):"] + _einsum_arrays(op_types) + lines
    out_shape = _shape_src([f"n{l}" for l in spec.output])
    lines.append(f"    out = np.zeros({out_shape if spec.output else '1'}, dtype=dt)")
    ind = "    "
    for l in labels:
        lines.append(f"{ind}for i{l} in range(n{l}):")
        ind += "    "
    prod = " * ".join(_einsum_ref(j, idx) for j in range(len(op_types))) or "1"
    oidx = ", ".join(f"i{l}" for l in spec.output)
    lines.append(f"{ind}out[{oidx + ',' if oidx else '0'}] += {prod}")
    lines.append("    return out" if spec.output else "    return out[0]")
    return _compile("\n".join(lines) + "\n", env={"dt": dt})


@overload(einsum_vjp, prefer_literal=True)
def _einsum_vjp_ov(g, subscripts, operands, optimize=False):
    subs = _lit(subscripts, "einsum subscripts")
    op_types = list(operands.types)
    spec = parse_einsum(subs, [_nd(t) for t in op_types])
    dt = np.result_type(_dtype_of(g), *[_dtype_of(t) for t in op_types])
    labels, lines, idx = _einsum_loops(spec, op_types, g)
    lines = ["def impl(g, subscripts, operands, optimize=False):"] + _einsum_arrays(op_types) + \
        (["    ga = g"] if _is_scalar(g) else ["    ga = g.item()"] if g.ndim == 0 else
         ["    ga = np.ascontiguousarray(g)"]) + lines
    for j, t in enumerate(op_types):
        lines.append(f"    d{j} = 0.0" if idx[j] is None else f"    d{j} = np.zeros(a{j}.shape, dtype=dt)")
    ind = "    "
    for l in labels:
        lines.append(f"{ind}for i{l} in range(n{l}):")
        ind += "    "
    gref = "ga" if _nd(g) == 0 else "ga[" + ", ".join(f"i{l} * fg_{k}" for k, l in enumerate(spec.output)) + ",]"
    lines.append(f"{ind}gv = {gref}")
    for j in range(len(op_types)):
        rest = " * ".join([_einsum_ref(k, idx) for k in range(len(op_types)) if k != j])
        term = f"gv * {rest}" if rest else "gv"
        target = f"d{j}" if idx[j] is None else f"d{j}[{idx[j]},]"
        lines.append(f"{ind}{target} += {term}")
    lines.append("    return (" + "".join(f"d{j}, " for j in range(len(op_types))) + ")")
    return _compile("\n".join(lines) + "\n", env={"dt": dt})


def einsum_tangent(subscripts, operands, tangents, optimize=False):
    """The tangent of ``np.einsum(subscripts, *operands)``: the sum over operands of the einsum with
    that operand's tangent in its place (linear in ``tangents``)."""
    out = None
    for i in range(len(operands)):
        ops = list(operands)
        ops[i] = tangents[i]
        r = np.einsum(subscripts, *ops, optimize=optimize)
        out = r if out is None else out + r
    return out


@overload(einsum_tangent, prefer_literal=True)
def _einsum_tangent_ov(subscripts, operands, tangents, optimize=False):
    n = len(operands)
    terms = []
    for i in range(n):
        ops = "".join((f"tangents[{j}], " if j == i else f"operands[{j}], ") for j in range(n))
        terms.append(f"einsum(subscripts, ({ops}), optimize)")
    return _compile("def impl(subscripts, operands, tangents, optimize=False):\n    return " + " + ".join(terms) + "\n",
                    env={"einsum": einsum})


def einsum_tangent_vjp(g, subscripts, operands, tangents, optimize=False):
    """The cotangents of the operands of ``einsum_tangent(subscripts, operands, tangents)`` for ``g``."""
    n = len(operands)
    out = [None] * n
    for k in range(n):
        ops = list(operands)
        ops[k] = tangents[k]
        cts = einsum_vjp(g, subscripts, tuple(ops), optimize)
        for j in range(n):
            if j != k:
                out[j] = cts[j] if out[j] is None else out[j] + cts[j]
    if any(o is None for o in out):   # one operand: einsum is linear in it, its second derivative is zero
        zero = einsum_vjp(g, subscripts, operands, optimize)
        out = [zero[j] * 0.0 if o is None else o for j, o in enumerate(out)]
    return out


@overload(einsum_tangent_vjp, prefer_literal=True)
def _einsum_tangent_vjp_ov(g, subscripts, operands, tangents, optimize=False):
    n = len(operands)
    subs = repr(_lit(subscripts, "einsum subscripts"))   # written into the code: a literal for einsum_vjp
    lines = ["def impl(g, subscripts, operands, tangents, optimize=False):"]
    for k in range(n):
        ops = "".join((f"tangents[{j}], " if j == k else f"operands[{j}], ") for j in range(n))
        lines.append(f"    c{k} = einsum_vjp(g, {subs}, ({ops}), optimize)")
    outs = []
    for j in range(n):
        terms = [f"c{k}[{j}]" for k in range(n) if k != j]
        outs.append(" + ".join(terms) if terms else f"einsum_vjp(g, {subs}, operands, optimize)[{j}] * 0.0")
    lines.append("    return (" + "".join(f"{o}, " for o in outs) + ")")
    return _compile("\n".join(lines) + "\n", env={"einsum_vjp": einsum_vjp})


def einsum_tangent2(subscripts, operands, tangents, dots, optimize=False):
    """``sum over k != j`` of ``np.einsum`` with ``tangents[k]`` at ``k`` and ``dots[j]`` at ``j``."""
    n = len(operands)
    out = None
    for k in range(n):
        for j in range(n):
            if j == k:
                continue
            ops = list(operands)
            ops[k], ops[j] = tangents[k], dots[j]
            r = np.einsum(subscripts, *ops, optimize=optimize)
            out = r if out is None else out + r
    if out is None:   # one operand: einsum is linear in it, the second derivative is zero
        return np.einsum(subscripts, *operands, optimize=optimize) * 0.0
    return out


@overload(einsum_tangent2, prefer_literal=True)
def _einsum_tangent2_ov(subscripts, operands, tangents, dots, optimize=False):
    n = len(operands)
    subs = repr(_lit(subscripts, "einsum subscripts"))   # written into the code: a literal for einsum
    terms = []
    for k in range(n):
        for j in range(n):
            if j != k:
                ops = "".join((f"tangents[{i}], " if i == k else f"dots[{i}], " if i == j else f"operands[{i}], ")
                              for i in range(n))
                terms.append(f"einsum({subs}, ({ops}), optimize)")
    body = " + ".join(terms) if terms else f"einsum({subs}, operands, optimize) * 0.0"
    return _compile("def impl(subscripts, operands, tangents, dots, optimize=False):\n    return " + body + "\n",
                    env={"einsum": einsum})


# ----------------------------------------------------------------------------- take_along_axis
def take_along_axis(arr, indices, axis=-1):
    return np.take_along_axis(arr, indices, axis)


def _along_setup(nd_arr, nd_idx, axis):
    if axis is None:
        if nd_idx != 1:
            raise ValueError("when axis=None, `indices` must have a single dimension.")
        return None
    if nd_idx != nd_arr:
        raise ValueError("`indices` and `arr` must have the same number of dimensions")
    return _axis(axis, nd_arr)


def _along_loops(nd, ax, what):
    """Loops over the result of take_along_axis (broadcast of arr and indices off ``ax``)."""
    lines = []
    for k in range(nd):
        if k == ax:
            lines.append(f"    n{k} = indices.shape[{k}]")
        else:
            lines += [f"    n{k} = arr.shape[{k}] if arr.shape[{k}] != 1 else indices.shape[{k}]",
                      f"    if indices.shape[{k}] != 1 and indices.shape[{k}] != n{k}:",
                      "        raise ValueError('shape mismatch: indices and arr cannot be broadcast')"]
    ind = "    "
    body = []
    for k in range(nd):
        body.append(f"{ind}for i{k} in range(n{k}):")
        ind += "    "
    iidx = ", ".join(f"(i{k} if indices.shape[{k}] != 1 else 0)" for k in range(nd))
    body.append(f"{ind}j = indices[{iidx},]")
    body.append(f"{ind}if j < 0:\n{ind}    j += arr.shape[{ax}]")
    body.append(f"{ind}if j < 0 or j >= arr.shape[{ax}]:\n{ind}    raise IndexError('index out of bounds in "
                f"take_along_axis/put_along_axis')")
    aidx = ", ".join("j" if k == ax else f"(i{k} if arr.shape[{k}] != 1 else 0)" for k in range(nd))
    oidx = ", ".join(f"i{k}" for k in range(nd))
    body.append(f"{ind}{what.format(a=aidx, o=oidx)}")
    return lines, body


@overload(take_along_axis, prefer_literal=True)
def _take_along_axis_ov(arr, indices, axis=-1):
    ax = _along_setup(_nd(arr), _nd(indices), _lit(axis, "axis"))
    if ax is None:
        return lambda arr, indices, axis=-1: np.ascontiguousarray(arr).ravel()[indices]
    nd = arr.ndim
    lines, body = _along_loops(nd, ax, "out[{o},] = arr[{a},]")
    src = ["def impl(arr, indices, axis=-1):"] + lines + \
        [f"    out = np.empty({_shape_src([f'n{k}' for k in range(nd)])}, dtype=arr.dtype)"] + body + ["    return out"]
    return _compile("\n".join(src) + "\n")


def untake_along_axis(g, arr, indices, axis=-1):
    """Zeros like ``arr`` with ``g`` added where ``np.take_along_axis(arr, indices, axis)`` read."""
    out = np.zeros(np.shape(arr), dtype=np.result_type(g))
    if axis is None:
        np.add.at(out.reshape(-1), indices, g)
        return out
    nd = out.ndim
    ax = axis % nd
    shape = np.broadcast_shapes(tuple(1 if k == ax else n for k, n in enumerate(out.shape)),
                                tuple(1 if k == ax else n for k, n in enumerate(np.shape(indices))))
    idx = []
    for k in range(nd):
        if k == ax:
            idx.append(np.broadcast_to(indices, shape[:ax] + (np.shape(indices)[ax],) + shape[ax + 1:]))
        else:
            r = np.arange(out.shape[k]) if out.shape[k] != 1 else np.zeros(shape[k], dtype=np.intp)
            idx.append(r.reshape((1,) * k + (-1,) + (1,) * (nd - k - 1)))
    np.add.at(out, tuple(idx), g)
    return out


@overload(untake_along_axis, prefer_literal=True)
def _untake_along_axis_ov(g, arr, indices, axis=-1):
    ax = _along_setup(_nd(arr), _nd(indices), _lit(axis, "axis"))
    if ax is None:
        def flat(g, arr, indices, axis=-1):
            out = np.zeros(arr.size, dtype=g.dtype)
            gf = np.ascontiguousarray(g).ravel()
            n = arr.size
            for k in range(indices.shape[0]):
                j = indices[k]
                out[j + n if j < 0 else j] += gf[k]
            return out.reshape(arr.shape)
        return flat
    nd = arr.ndim
    lines, body = _along_loops(nd, ax, "out[{a},] += ga[{o},]")
    src = ["def impl(g, arr, indices, axis=-1):"] + lines + \
        ["    out = np.zeros(arr.shape, dtype=g.dtype)", "    ga = np.ascontiguousarray(g)"] + body + ["    return out"]
    return _compile("\n".join(src) + "\n")


def put_along_axis(arr, indices, values, axis):
    """A copy of ``arr`` with ``np.put_along_axis(copy, indices, values, axis)`` done (a repeated index:
    the last write stays, as in NumPy)."""
    out = np.array(arr, copy=True)
    np.put_along_axis(out, indices, values, axis)
    return out


def _unbroadcast_to(r, shape):
    lead = r.ndim - len(shape)
    if lead > 0:
        r = np.sum(r, axis=tuple(range(lead)))
    red = tuple(k for k, n in enumerate(shape) if n == 1 and r.shape[k] != 1)
    return np.sum(r, axis=red, keepdims=True) if red else r


def written_along_axis(g, indices, values, axis):
    """The cotangent of ``values`` in ``put_along_axis(arr, indices, values, axis)``: ``g`` where each
    element was written, for a repeated position only at its last write, summed down to ``values``' shape."""
    g = np.asarray(g)
    pos_all = np.arange(g.size).reshape(g.shape)
    if axis is None:
        idx = np.asarray(indices)
        pos = pos_all.ravel()[idx]
    else:
        ax = axis % g.ndim
        idx = []
        for k in range(g.ndim):
            if k == ax:
                idx.append(np.asarray(indices))
            else:
                idx.append(np.arange(g.shape[k]).reshape((1,) * k + (-1,) + (1,) * (g.ndim - k - 1)))
        pos = pos_all[tuple(idx)]
    shape = np.broadcast_shapes(pos.shape, np.shape(values))
    pos = np.broadcast_to(pos, shape).ravel()
    piece = g.ravel()[pos]
    _, first_from_end = np.unique(pos[::-1], return_index=True)
    keep = np.zeros(pos.size, dtype=bool)
    keep[pos.size - 1 - first_from_end] = True
    piece = np.where(keep, piece, 0).reshape(shape)
    r = _unbroadcast_to(piece, np.shape(values))
    return _scalar_like(np.reshape(r, np.shape(values)), values)


def _put_loops(nd, ax, vt, body):
    """Loops over the positions ``put_along_axis`` writes (``ax`` None: the flat positions)."""
    lines, ind = [], "    "
    if ax is None:
        lines += ["    n = arr.size", "    for i0 in range(indices.shape[0]):"]
        ind = "        "
        lines += [f"{ind}p = indices[i0]", f"{ind}if p < 0:", f"{ind}    p += n"]
        iters = ["i0"]
        vnd = _nd(vt)
    else:
        for k in range(nd):
            if k == ax:
                lines.append(f"    n{k} = indices.shape[{k}]")
            else:
                lines.append(f"    n{k} = arr.shape[{k}] if arr.shape[{k}] != 1 else indices.shape[{k}]")
        for k in range(nd):
            lines.append(f"{ind}for i{k} in range(n{k}):")
            ind += "    "
        iidx = ", ".join(f"(i{k} if indices.shape[{k}] != 1 else 0)" for k in range(nd))
        lines += [f"{ind}j = indices[{iidx},]", f"{ind}if j < 0:", f"{ind}    j += arr.shape[{ax}]"]
        strides = []
        for k in range(nd):
            strides.append(("j" if k == ax else f"(i{k} if arr.shape[{k}] != 1 else 0)")
                           + "".join(f" * arr.shape[{m}]" for m in range(k + 1, nd)))
        lines.append(f"{ind}p = " + " + ".join(strides))
        iters = [f"i{k}" for k in range(nd)]
        vnd = _nd(vt)
    lead = len(iters) - vnd
    if lead < 0:
        raise ValueError("put_along_axis: values have more dimensions than the positions written")
    vidx = ", ".join(f"({iters[lead + k]} if values.shape[{k}] != 1 else 0)" for k in range(vnd))
    vref = "values" if _is_scalar(vt) else (f"values[{vidx},]" if vnd else "values.item()")
    lines += [ind + line.format(v=vref, vi=vidx) for line in body]
    return lines


@overload(put_along_axis, prefer_literal=True)
def _put_along_axis_ov(arr, indices, values, axis):
    ax_lit = _lit(axis, "axis")
    nd = _nd(arr)
    ax = _along_setup(nd, _nd(indices), ax_lit)
    lines = ["def impl(arr, indices, values, axis):", "    out = np.ascontiguousarray(arr).copy()",
             "    flat = out.reshape(-1)"]
    lines += _put_loops(nd, ax, values, ["flat[p] = {v}"])
    lines.append("    return out")
    return _compile("\n".join(lines) + "\n")


@overload(written_along_axis, prefer_literal=True)
def _written_along_axis_ov(g, indices, values, axis):
    nd = _nd(g)
    ax = _along_setup(nd, _nd(indices), _lit(axis, "axis"))
    scalar = _is_scalar(values) or _nd(values) == 0
    pre = ["def impl(g, indices, values, axis):", "    arr = np.ascontiguousarray(g)", "    gf = arr.reshape(-1)",
           "    last = np.full(gf.size, -1, np.int64)", "    c = 0"]
    first = _put_loops(nd, ax, values, ["last[p] = c", "c += 1"])
    second = _put_loops(nd, ax, values, ["if last[p] == c:", "    acc += gf[p]" if scalar else
                                         "    acc[{vi},] += gf[p]", "c += 1"])
    lines = pre + first + ["    c = 0", "    acc = 0.0" if scalar else
                           "    acc = np.zeros(values.shape, dtype=gf.dtype)"] + second + ["    return acc"]
    return _compile("\n".join(lines) + "\n")


# ----------------------------------------------------------------------------- np.gradient along one axis
def gradient_along(f, axis, edge_order=1):
    """``np.gradient(f, axis=axis, edge_order=edge_order)`` with unit spacing."""
    return np.gradient(f, axis=axis, edge_order=edge_order)


def ungradient_along(g, axis, edge_order=1):
    """The transpose of ``gradient_along`` (linear in ``g``): its VJP."""
    g = np.asarray(g)
    nd = g.ndim
    ax = _axis(axis, nd)
    gm = np.moveaxis(g, ax, 0)
    n = gm.shape[0]
    if n < edge_order + 1:
        raise ValueError("Shape of array too small to calculate a numerical gradient, at least "
                         "(edge_order + 1) elements are required.")
    r = np.zeros(gm.shape, dtype=g.dtype)
    r[2:] += 0.5 * gm[1:-1]
    r[:-2] -= 0.5 * gm[1:-1]
    if edge_order == 1:
        r[1] += gm[0]
        r[0] -= gm[0]
        r[-1] += gm[-1]
        r[-2] -= gm[-1]
    else:
        r[0] -= 1.5 * gm[0]
        r[1] += 2.0 * gm[0]
        r[2] -= 0.5 * gm[0]
        r[-3] += 0.5 * gm[-1]
        r[-2] -= 2.0 * gm[-1]
        r[-1] += 1.5 * gm[-1]
    return np.ascontiguousarray(np.moveaxis(r, 0, ax))


def _gradient_ov(transpose):
    def ov(f, axis, edge_order=1):
        nd = _nd(f)
        ax = _axis(_lit(axis, "axis"), nd)
        eo = _lit(edge_order, "edge_order")
        if eo not in (1, 2):
            raise ValueError("'edge_order' greater than 2 not supported")
        perm = tuple([ax] + [i for i in range(nd) if i != ax])
        inv = tuple(int(i) for i in np.argsort(perm))
        head = ("def impl(f, axis, edge_order=1):\n"
                f"    m = np.ascontiguousarray(np.transpose(f, {perm}))\n    n = m.shape[0]\n"
                f"    if n < {eo + 1}:\n        raise ValueError('Shape of array too small to calculate a numerical "
                "gradient, at least (edge_order + 1) elements are required.')\n"
                "    r = np.zeros(m.shape, dtype=m.dtype)\n")
        if not transpose:
            body = ("    for i in range(1, n - 1):\n        r[i] = 0.5 * (m[i + 1] - m[i - 1])\n")
            body += ("    r[0] = m[1] - m[0]\n    r[n - 1] = m[n - 1] - m[n - 2]\n" if eo == 1 else
                     "    r[0] = -1.5 * m[0] + 2.0 * m[1] - 0.5 * m[2]\n"
                     "    r[n - 1] = 0.5 * m[n - 3] - 2.0 * m[n - 2] + 1.5 * m[n - 1]\n")
        else:
            body = ("    for i in range(1, n - 1):\n        r[i + 1] += 0.5 * m[i]\n        r[i - 1] -= 0.5 * m[i]\n")
            body += ("    r[1] += m[0]\n    r[0] -= m[0]\n    r[n - 1] += m[n - 1]\n    r[n - 2] -= m[n - 1]\n"
                     if eo == 1 else
                     "    r[0] -= 1.5 * m[0]\n    r[1] += 2.0 * m[0]\n    r[2] -= 0.5 * m[0]\n"
                     "    r[n - 3] += 0.5 * m[n - 1]\n    r[n - 2] -= 2.0 * m[n - 1]\n    r[n - 1] += 1.5 * m[n - 1]\n")
        return _compile(head + body + f"    return np.ascontiguousarray(np.transpose(r, {inv}))\n")
    return ov


overload(gradient_along, prefer_literal=True)(_gradient_ov(False))
overload(ungradient_along, prefer_literal=True)(_gradient_ov(True))


# ----------------------------------------------------------------------------- cross
def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    return np.cross(a, b, axisa, axisb, axisc, axis)


def _cross_axes(axisa, axisb, axisc, axis):
    if axis is not None:
        return axis, axis, axis
    return axisa, axisb, axisc


def _cross_d(g, x, y, axisa, axisb, axisc, axis, wrt):
    """Cotangent of ``x`` (wrt 0) or ``y`` (wrt 1) in ``np.cross(x, y, ...)`` (vectors of 2 or 3)."""
    aa, ab, ac = _cross_axes(axisa, axisb, axisc, axis)
    xm = np.moveaxis(np.asarray(x), aa, -1)
    ym = np.moveaxis(np.asarray(y), ab, -1)
    pad3 = lambda v: v if v.shape[-1] == 3 else np.concatenate(  # noqa: E731
        [v, np.zeros(v.shape[:-1] + (1,), v.dtype)], axis=-1)
    x3, y3 = pad3(xm), pad3(ym)
    g = np.asarray(g)
    if xm.shape[-1] == 2 and ym.shape[-1] == 2:    # the result is the z component alone
        g3 = np.stack([np.zeros_like(g), np.zeros_like(g), g], axis=-1)
    else:
        g3 = np.moveaxis(g, ac, -1)
    r = np.cross(y3, g3) if wrt == 0 else np.cross(g3, x3)
    own = xm if wrt == 0 else ym
    r = r[..., :own.shape[-1]]
    lead = own.shape[:-1]
    extra = r.ndim - len(lead) - 1   # broadcast leading axes: sum them away
    r = np.sum(r, axis=tuple(range(extra))) if extra > 0 else r
    r = np.sum(r, axis=tuple(k for k, n in enumerate(lead) if n == 1 and r.shape[k] != 1), keepdims=True)
    return np.ascontiguousarray(np.moveaxis(r, -1, aa if wrt == 0 else ab))


def cross_dx(g, x, y, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """Cotangent of ``x`` in ``np.cross(x, y, ...)``."""
    return _cross_d(g, x, y, axisa, axisb, axisc, axis, 0)


def cross_dy(g, x, y, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """Cotangent of ``y`` in ``np.cross(x, y, ...)``."""
    return _cross_d(g, x, y, axisa, axisb, axisc, axis, 1)


@register_jitable
def _pad3(v):
    """Vectors of 2 along the last axis as vectors of 3 (a zero third component)."""
    n = v.shape[-1]
    if n == 3:
        return np.ascontiguousarray(v)
    if n != 2:
        raise ValueError("incompatible dimensions for cross product (dimension must be 2 or 3)")
    out = np.zeros(v.shape[:-1] + (3,), v.dtype)
    src = np.ascontiguousarray(v).reshape(-1)   # element by element: an array slice assignment would compile
    dst = out.reshape(-1)                       # Numba's shape-mismatch message (its whole string machinery)
    for i in range(src.shape[0] // 2):
        dst[3 * i] = src[2 * i]
        dst[3 * i + 1] = src[2 * i + 1]
    return out


def _cross3_src(a, na, b, nb):
    """Source of the cross product of ``a`` and ``b`` (vectors of 3 along their last axis, broadcast)."""
    at = (lambda k: f"{a}[{k}]") if na == 1 else (lambda k: f"{a}[..., {k}]")
    bt = (lambda k: f"{b}[{k}]") if nb == 1 else (lambda k: f"{b}[..., {k}]")
    c = [f"{at(1)} * {bt(2)} - {at(2)} * {bt(1)}", f"{at(2)} * {bt(0)} - {at(0)} * {bt(2)}",
         f"{at(0)} * {bt(1)} - {at(1)} * {bt(0)}"]
    if max(na, nb) == 1:
        return f"np.array([{c[0]}, {c[1]}, {c[2]}])"
    return f"np.stack(({c[0]}, {c[1]}, {c[2]}), axis=-1)"


def _transposed(expr, perm):
    """Source of ``expr`` transposed by ``perm``, contiguous; no transpose where ``perm`` keeps the order (the
    vector axis already last, as in every 1-d cross product: compiling ``np.transpose`` costs seconds)."""
    if perm == tuple(range(len(perm))):
        return f"np.ascontiguousarray({expr})"
    return f"np.ascontiguousarray(np.transpose({expr}, {perm}))"


def _to_last(name, var, nd, axis):
    return f"    {var} = {_transposed(name, _moveaxis_perm(nd, axis, -1))}"


def _from_last(expr, nd, axis):
    return _transposed(expr, _moveaxis_perm(nd, -1, axis))


def _unbroadcast_lines(r, nr, x, nx, out):
    """Lines summing ``r`` (``nr`` dims) down to the shape of ``x`` (``nx`` dims): NumPy broadcasting undone."""
    lead = nr - nx
    lines = [f"    {out} = np.zeros({x}.shape, dtype={r}.dtype)"]
    ind = "    "
    for i in range(nr):
        lines.append(f"{ind}for i{i} in range({r}.shape[{i}]):")
        ind += "    "
    idx = ", ".join(f"(i{lead + j} if {x}.shape[{j}] != 1 else 0)" for j in range(nx))
    lines.append(f"{ind}{out}[{idx},] += {r}[{', '.join(f'i{i}' for i in range(nr))},]")
    return lines


def _cross_plan(a, b, axisa, axisb, axisc, axis):
    aa, ab, ac = _cross_axes(_lit(axisa, "axisa"), _lit(axisb, "axisb"), _lit(axisc, "axisc"), _lit(axis, "axis"))
    na, nb = _nd(a), _nd(b)
    if na == 0 or nb == 0:
        raise ValueError("np.cross needs arrays of vectors")
    return aa, ab, ac, na, nb, max(na, nb)


_NO_2X2 = ("    if A.shape[-1] == 2 and B.shape[-1] == 2:\n        raise ValueError('np.cross of two arrays of "
           "2-vectors (a result without a vector axis) is not supported inside compiled code')")


def _vectors_of_floats(*ts):
    """True when every type is a 1-d float array: the cross product of two vectors, the case bundle
    adjustment's loop runs once per observation."""
    return all(isinstance(t, types.Array) and t.ndim == 1 and isinstance(t.dtype, types.Float) for t in ts)


# One vector pair, straight-line: the general source (transposes, padding, NumPy's array builder, an unbroadcast
# loop) compiled in about 1 s cold for cross, cross_dx and cross_dy together; this in a fraction of that.
_CROSS_1D = """
def impl({params}):
    n{p} = {p}.shape[0]
    n{q} = {q}.shape[0]
    if (n{p} != 2 and n{p} != 3) or (n{q} != 2 and n{q} != 3):
        raise ValueError("incompatible dimensions for cross product (dimension must be 2 or 3)")
    if n{p} == 2 and n{q} == 2:
        raise ValueError("np.cross of two arrays of 2-vectors (a result without a vector axis) is not supported inside compiled code")
{load}
    out = np.empty({n_out}, DT)
{body}
    return out
"""


def _load3(v, zero, check=False):
    lines = [f"    {v}0 = {v}[0]", f"    {v}1 = {v}[1]", f"    {v}2 = {v}[2] if n{v} == 3 else {zero}"]
    return lines


def _cross1d_src(params, p, q, prod, n_out, g=False):
    """``prod``: the three components, from the names ``<v>0..2``; ``g``: a cotangent ``g`` of 3 read too."""
    load = _load3(p, "ZP") + _load3(q, "ZQ")
    if g:
        load = ["    if g.shape[0] != 3:", "        raise ValueError(\"np.cross: the cotangent has the wrong shape\")",
                "    g0 = g[0]", "    g1 = g[1]", "    g2 = g[2]"] + load
    body = [f"    out[{k}] = {c}" for k, c in enumerate(prod)]
    if isinstance(n_out, str):   # the cotangent of a 2-vector is its first two components
        body = body[:2] + [f"    if {n_out} == 3:", f"        out[2] = {prod[2]}"]
    return _CROSS_1D.format(params=params, p=p, q=q, load="\n".join(load), n_out=n_out, body="\n".join(body))


def _cross3(u, v):
    return [f"{u}1 * {v}2 - {u}2 * {v}1", f"{u}2 * {v}0 - {u}0 * {v}2", f"{u}0 * {v}1 - {u}1 * {v}0"]


def _np_dtype(*ts):
    return np.result_type(*(numpy_support.as_dtype(t.dtype) for t in ts))


@overload(cross, prefer_literal=True)
def _cross_ov(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    aa, ab, ac, na, nb, nc = _cross_plan(a, b, axisa, axisb, axisc, axis)
    if _vectors_of_floats(a, b):   # (a 1-d array's only axis is every axis argument can name)
        src = _cross1d_src("a, b, axisa=-1, axisb=-1, axisc=-1, axis=None", "a", "b", _cross3("a", "b"), 3)
        dt = _np_dtype(a, b)
        return _compile(src, env={"DT": dt, "ZP": numpy_support.as_dtype(a.dtype).type(0),
                                  "ZQ": numpy_support.as_dtype(b.dtype).type(0)})
    lines = ["def impl(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):", _to_last("a", "A", na, aa),
             _to_last("b", "B", nb, ab), _NO_2X2, "    A3 = pad3(A)", "    B3 = pad3(B)",
             f"    c = {_cross3_src('A3', na, 'B3', nb)}", f"    return {_from_last('c', nc, ac)}"]
    return _compile("\n".join(lines) + "\n", env={"pad3": _pad3})


def _cross_d_ov(wrt):
    def ov(g, x, y, axisa=-1, axisb=-1, axisc=-1, axis=None):
        aa, ab, ac, nx, ny, nc = _cross_plan(x, y, axisa, axisb, axisc, axis)
        if _nd(g) != nc:
            raise ValueError("np.cross: the cotangent has the wrong rank")
        if _vectors_of_floats(g, x, y):
            # d x = y x g (the cotangent of x), d y = g x x, each cut to its vector's own length
            own, other = ("x", "y") if wrt == 0 else ("y", "x")
            prod = _cross3("y", "g") if wrt == 0 else _cross3("g", "x")
            src = _cross1d_src("g, x, y, axisa=-1, axisb=-1, axisc=-1, axis=None", "x", "y", prod, f"n{own}", g=True)
            dt = _np_dtype(g, y if wrt == 0 else x)
            return _compile(src, env={"DT": dt, "ZP": numpy_support.as_dtype(x.dtype).type(0),
                                      "ZQ": numpy_support.as_dtype(y.dtype).type(0)})
        own, n_own, ax_own = ("A", nx, aa) if wrt == 0 else ("B", ny, ab)
        prod = _cross3_src("B3", ny, "G", nc) if wrt == 0 else _cross3_src("G", nc, "A3", nx)
        lines = ["def impl(g, x, y, axisa=-1, axisb=-1, axisc=-1, axis=None):", _to_last("x", "A", nx, aa),
                 _to_last("y", "B", ny, ab), _NO_2X2, "    A3 = pad3(A)", "    B3 = pad3(B)",
                 _to_last("g", "G", nc, ac), f"    r = {prod}",
                 f"    r = np.ascontiguousarray(r[..., :{own}.shape[-1]])"]
        lines += _unbroadcast_lines("r", nc, own, n_own, "out")
        lines.append(f"    return {_from_last('out', n_own, ax_own)}")
        return _compile("\n".join(lines) + "\n", env={"pad3": _pad3})
    return ov


overload(cross_dx, prefer_literal=True)(_cross_d_ov(0))
overload(cross_dy, prefer_literal=True)(_cross_d_ov(1))
