"""The CPU kernel namespace ``K`` that generated code calls.

Owns the compute behind every primitive on the CPU. Every name here is
callable from plain Python (NumPy arrays in, NumPy arrays out) *and* from
inside ``numba.njit`` code with the same results:

* where NumPy's function already does the job in both worlds, the name is
  NumPy's own function (``K.exp is np.exp``): no wrapper, no overhead;
* where nopython NumPy lacks a feature (``axis``/``keepdims`` reductions,
  broadcasting undone, transposes with axes), the name is a small Python
  function over NumPy plus a ``numba.extending.overload`` that generates a
  specialised nopython implementation per (ndim, axis, keepdims) at typing
  time (``axis`` arrives as a literal: generated code writes constants);
* loop kernels (conv, pools: :mod:`funcgrad.kernels.cpu_nn`) are
  ``@njit(cache=True)`` dispatchers.

``python_namespace()`` gives the same names with every Numba dispatcher
replaced by its uncompiled Python (``FUNCGRAD_DISABLE_JIT=1`` / ``jit=False``).
"""
from __future__ import annotations

import builtins as _builtins
import math
import operator as _operator
import types as _pytypes

import numpy as np
from numba import njit, types
from numba.core import errors
from numba.extending import overload, register_jitable
from numba.np import numpy_support

from .cpu_util import _compile, _is_scalar_type, _literal, _norm_axes

#: Options of the overloads that index with the user's own index arrays (``np.take``, ``x[idx]`` by name): an
#: index out of range raises IndexError as NumPy does, where unchecked compiled code would read past the array
_CHECKED = {"boundscheck": True}

# ----------------------------------------------------------------------------
# NumPy's own functions, used directly (supported identically by nopython mode)
exp = np.exp
log = np.log
log1p = np.log1p
expm1 = np.expm1
sqrt = np.sqrt
sin = np.sin
cos = np.cos
tan = np.tan
tanh = np.tanh
sinh = np.sinh
cosh = np.cosh
arctan = np.arctan
arcsin = np.arcsin
arccos = np.arccos
absolute = np.abs
sign = np.sign
negative = np.negative
square = np.square
reciprocal = np.reciprocal
add = np.add
subtract = np.subtract
multiply = np.multiply
divide = np.divide
power = np.power
where = np.where
outer = np.outer
equal = np.equal
logical_not = np.logical_not
# Python's operators, for backends whose generated code spells them as calls (operators_as_syntax=False)
op_eq, op_ne, op_lt, op_le, op_gt, op_ge = (_operator.eq, _operator.ne, _operator.lt, _operator.le, _operator.gt,
                                            _operator.ge)
op_and, op_or, op_invert, op_mod, op_floordiv = (_operator.and_, _operator.or_, _operator.invert, _operator.mod,
                                                 _operator.floordiv)

_FUNCS_WITH_OVERLOADS = []
_ndarray = np.ndarray


@njit(cache=True, nogil=True)
def _maximum_flat_scalar(x, y, out):
    for i in range(x.size):
        xi = x[i]
        out[i] = xi if (xi > y or xi != xi) else y


@njit(cache=True, nogil=True)
def _minimum_flat_scalar(x, y, out):
    for i in range(x.size):
        xi = x[i]
        out[i] = xi if (xi < y or xi != xi) else y


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _flat_with_scalar(x, y):
    """x's dtype when ``ufunc(x, y)`` can take one compiled pass: x a C-contiguous float array of some size
    and y a number that NumPy casts to x's dtype (a Python float or small int, or a scalar of x's dtype)."""
    if type(x) is _ndarray and x.dtype in _FLOATS and x.size >= 64 and x.flags.c_contiguous:
        ty = type(y)
        if ty is float or (ty is int and -2 ** 24 <= y <= 2 ** 24) or ty is x.dtype.type:
            return x.dtype
    return None


def _ufunc_with_number(ufunc, flat_kernel, x1, x2, args, kwargs):
    """``ufunc(x1, x2, ...)``, as one compiled pass of ``flat_kernel`` when x1 is a contiguous float array and x2
    a number (see :func:`_flat_with_scalar`)."""
    if not args and not kwargs:
        dt = _flat_with_scalar(x1, x2)
        if dt is not None:
            out = np.empty(x1.shape, dt)
            flat_kernel(x1.reshape(-1), dt.type(x2), out.reshape(-1))
            return out
    return ufunc(x1, x2, *args, **kwargs)


def maximum(x1, x2, *args, **kwargs):
    """``np.maximum``; ReLU's ``maximum(x, 0.0)`` on a contiguous float array is one compiled pass (NumPy's
    ufunc takes ~6x as long there: 20 us vs 3 us on a 128x512 float32 array). NaN propagates and an equal
    pair gives the second operand, as NumPy's vectorised loop does."""
    return _ufunc_with_number(np.maximum, _maximum_flat_scalar, x1, x2, args, kwargs)


def minimum(x1, x2, *args, **kwargs):
    """``np.minimum``, with :func:`maximum`'s compiled pass for an array and a number."""
    return _ufunc_with_number(np.minimum, _minimum_flat_scalar, x1, x2, args, kwargs)


def weak(like, x):
    """``x``, a Python number, as NumPy 2 treats it beside ``like`` (NEP 50: it takes ``like``'s float dtype).
    In Python that is ``x`` itself; compiled code (funcgrad.transform.weak wraps numbers for Numba, which would
    make them float64) gets ``x`` cast to float32 when ``like`` is a float32 or complex64 array or scalar."""
    return x


@overload(weak)
def _weak_ov(like, x):
    dt = like.dtype if isinstance(like, types.Array) else like
    if isinstance(x, (types.Integer, types.Float)) and not isinstance(x, types.Boolean) and \
            dt in (types.float32, types.complex64):
        return lambda like, x: np.float32(x)
    return lambda like, x: x


def accumulated(acc, c):
    """``c``, a contribution to the cotangent ``acc`` (``acc + accumulated(acc, c)``): itself in Python; in
    compiled code cast to float32 (complex64) when ``acc`` is float32 (complex64) and ``c`` is not, so a loop's
    cotangent keeps its type (funcgrad.transform.weak)."""
    return c


@overload(accumulated)
def _accumulated_ov(acc, c):
    da = acc.dtype if isinstance(acc, types.Array) else acc
    dc = c.dtype if isinstance(c, types.Array) else c
    if da in (types.float32, types.complex64) and dc != da and isinstance(dc, (types.Float, types.Complex)):
        to = np.float32 if da == types.float32 else np.complex64
        if isinstance(c, types.Array):
            return lambda acc, c: c.astype(to)
        return lambda acc, c: to(c)
    return lambda acc, c: c


@overload(maximum)
def _maximum_ov(x1, x2):
    return lambda x1, x2: np.maximum(x1, x2)


@overload(minimum)
def _minimum_ov(x1, x2):
    return lambda x1, x2: np.minimum(x1, x2)


def _register(fn):
    _FUNCS_WITH_OVERLOADS.append(fn.__name__)
    return fn


# ----------------------------------------------------------------------------
# Reductions with axis/keepdims
_REDUCE_INIT = {"sum": "0", "prod": "1", "max": "-np.inf", "min": "np.inf", "mean": "0"}
_REDUCE_STEP = {"sum": "acc += v", "mean": "acc += v", "prod": "acc *= v",   # max/min: a NaN wins, as NumPy's
                "max": "acc = v if (v > acc or v != v) else acc", "min": "acc = v if (v < acc or v != v) else acc"}


def _reduce_impl(op, ndim, axis, keepdims, dtype=None):
    axes = _norm_axes(axis, ndim)
    kept = [i for i in range(ndim) if i not in axes]
    if not axes:
        return _compile("def impl(x, axis=None, keepdims=False):\n    return x.copy()\n", "impl")
    if ndim == 1 and not keepdims and isinstance(dtype, types.Float):
        # a vector to one number (the reductions a loop over small arrays makes): the loop below with no
        # reshape, no output array, a fraction of the compile; the same additions in the same order
        first = "x[0]" if op in ("max", "min") else _REDUCE_INIT[op]
        start = "1" if op in ("max", "min") else "0"
        fin = "acc / n" if op == "mean" else "acc"
        src = f"""
def impl(x, axis=None, keepdims=False):
    n = x.shape[0]
    acc = {first}
    for j in range({start}, n):
        v = x[j]
        {_REDUCE_STEP[op]}
    return DT({fin})
"""
        return _compile(src, "impl", env={"DT": numpy_support.as_dtype(dtype).type})
    perm = tuple(kept) + tuple(axes)
    outer = " * ".join(f"s[{i}]" for i in kept) or "1"
    inner = " * ".join(f"s[{i}]" for i in axes)
    if keepdims:
        shape = "(" + "".join(("1, " if i in axes else f"s[{i}], ") for i in range(ndim)) + ")"
    else:
        shape = "(" + "".join(f"s[{i}], " for i in kept) + ")"
    first = "x2[i, 0]" if op in ("max", "min") else _REDUCE_INIT[op]
    start = "1" if op in ("max", "min") else "0"
    fin = "acc / n" if op == "mean" else "acc"
    scalar_out = (not keepdims) and not kept
    # (no np.transpose where the order is kept, as in every full reduction: compiling it costs seconds cold)
    src = f"""
def impl(x, axis=None, keepdims=False):
    s = x.shape
    m = {outer}
    n = {inner}
    x2 = {"np.ascontiguousarray(x)" if perm == tuple(range(ndim)) else f"np.ascontiguousarray(np.transpose(x, {perm}))"}.reshape((m, n))
    out = np.empty(m, dtype=x.dtype)
    for i in range(m):
        acc = {first}
        for j in range({start}, n):
            v = x2[i, j]
            {_REDUCE_STEP[op]}
        out[i] = {fin}
    {"return out[0]" if scalar_out else f"return out.reshape({shape})"}
"""
    return _compile(src, "impl")


# NumPy's add.reduce over the leading or trailing axes of an array whose other axes are many runs one inner
# loop per output row or column: 266 us for (1000, 10, 10) summed over its last axis here, 43 us over its first,
# 1.7-2.2 ms for (100000, 3) over either, against 17, 8.3, 61 and 91 us as one BLAS matrix-vector product with
# a vector of ones (np.dot). So a float32/float64 C-contiguous array of at least _SUM_BLAS_MIN elements summed
# over its leading or its trailing axes (not all of them) goes to np.dot; the result has NumPy's dtype and
# shape, its roundings may differ (BLAS adds in its own order).
_SUM_BLAS_MIN = 1024
_SUM_BLAS_DTYPES = (np.dtype(np.float64), np.dtype(np.float32))
_ONES = {}


def _ones(m, dt):
    v = _ONES.get((m, dt))
    if v is None:
        v = np.ones(m, dtype=dt)
        v.flags.writeable = False
        if m <= 1 << 16:
            _ONES[(m, dt)] = v
    return v


def _axes_list(axis, nd):
    """``axis`` (an int or a tuple of ints) as a sorted list of distinct axes of an ``nd``-dimensional array, or None
    where it is not one (out of range, repeated, not integers, empty: NumPy's own reduction then decides)."""
    try:
        axes = sorted(_operator.index(a) % nd if -nd <= _operator.index(a) < nd else None
                      for a in (axis if isinstance(axis, tuple) else (axis,)))
    except TypeError:
        return None
    if not axes or None in axes or len(set(axes)) != len(axes):
        return None
    return axes


def _sum_blas(x, axis, keepdims):
    """``np.sum(x, axis, keepdims=keepdims)`` as one BLAS matrix-vector product where that pays (see above),
    else None. ``x`` is an ndarray."""
    if x.dtype not in _SUM_BLAS_DTYPES or x.size < _SUM_BLAS_MIN or not x.flags.c_contiguous or axis is None:
        return None
    nd = x.ndim
    axes = _axes_list(axis, nd)
    if axes is None or len(axes) == nd:
        return None
    k = len(axes)
    sh = x.shape
    if axes == list(range(k)):                       # leading axes: ones @ (m, rest)
        m = 1
        for v in sh[:k]:
            m *= v
        r = np.dot(_ones(m, x.dtype), x.reshape(m, -1))
    elif axes == list(range(nd - k, nd)):            # trailing axes: (rest, m) @ ones
        m = 1
        for v in sh[nd - k:]:
            m *= v
        r = np.dot(x.reshape(-1, m), _ones(m, x.dtype))
    else:
        return None
    return r.reshape(tuple(1 if i in axes else n for i, n in enumerate(sh)) if keepdims else
                     tuple(n for i, n in enumerate(sh) if i not in axes))


# max and min over the trailing axes of a C-contiguous array whose rows are short run one inner loop per row
# too (56 us for (1000, 10) over axis 1 here, logsumexp's row maxima); reduced over the leading axis of the
# transposed copy, the same comparisons in a different order (the same result, NaN included), 6 us.
_MINMAX_ROW_MAX = 64


def _trailing_axes(x, axis):
    """(rows, row length) when ``axis`` names the trailing axes of ``x`` (not all of them), else None."""
    nd = x.ndim
    axes = _axes_list(axis, nd)
    k = len(axes) if axes is not None else 0
    if not k or k >= nd or axes != list(range(nd - k, nd)):
        return None
    m = 1
    for v in x.shape[nd - k:]:
        m *= v
    return axes, m


def _minmax_rows(reduce, x, axis, keepdims):
    if x.size < _SUM_BLAS_MIN or not x.flags.c_contiguous or axis is None or x.dtype.kind not in "fiu":
        return None
    ta = _trailing_axes(x, axis)
    if ta is None or ta[1] > _MINMAX_ROW_MAX or ta[1] == 0:
        return None
    axes, m = ta
    r = reduce(np.ascontiguousarray(x.reshape(-1, m).T), axis=0)
    sh = x.shape
    return r.reshape(tuple(1 if i in axes else n for i, n in enumerate(sh)) if keepdims else
                     tuple(n for i, n in enumerate(sh) if i not in axes))


def _make_reduction(op, npfn, ufunc=None):
    # an ndarray goes to the ufunc's reduce directly: np.sum & co. add 2 us of dispatch per
    # call (3.2 us against 1.2 us for a 32x1 array here), which adds up in small models' steps
    if ufunc is None:
        def pyimpl(x, axis=None, keepdims=False):
            return npfn(x, axis=axis, keepdims=keepdims)
    else:
        reduce = ufunc.reduce

        fast = _sum_blas if op == "sum" else \
            (lambda x, axis, keepdims: _minmax_rows(reduce, x, axis, keepdims)) if op in ("max", "min") else None

        def pyimpl(x, axis=None, keepdims=False):
            if type(x) is _ndarray:
                if fast is not None and axis is not None and x.size >= _SUM_BLAS_MIN:
                    r = fast(x, axis, keepdims)
                    if r is not None:
                        return r
                return reduce(x, axis=axis, keepdims=keepdims)
            return npfn(x, axis=axis, keepdims=keepdims)

    pyimpl.__name__ = op
    pyimpl.__qualname__ = op

    @overload(pyimpl, prefer_literal=True)
    def _ov(x, axis=None, keepdims=False):
        if _is_scalar_type(x):
            return lambda x, axis=None, keepdims=False: x
        if not isinstance(x, types.Array):
            return None
        ax = _literal(axis, f"{op}(axis=...)")
        kd = bool(_literal(keepdims, f"{op}(keepdims=...)"))
        small = isinstance(x.dtype, types.Boolean) or isinstance(x.dtype, types.Integer) and (
            x.dtype.bitwidth < 64 or op == "mean")
        if op in ("sum", "prod", "mean") and small:
            # NumPy adds booleans and small ints as int64 (np.sum(a > 0) counts; a bool accumulator stopped at
            # True), and means them in float64: reduce the cast array
            wide = "np.float64" if op == "mean" else \
                "np.uint64" if isinstance(x.dtype, types.Integer) and not x.dtype.signed else "np.int64"
            return _compile(f"def impl(x, axis=None, keepdims=False):\n"
                            f"    return _again(x.astype({wide}), {ax!r}, {kd!r})\n", "impl", {"_again": pyimpl})
        return _reduce_impl(op, x.ndim, ax, kd, x.dtype)

    _FUNCS_WITH_OVERLOADS.append(op)
    return pyimpl


sum = _make_reduction("sum", np.sum, np.add)  # noqa: A001
mean = _make_reduction("mean", np.mean)
max = _make_reduction("max", np.max, np.maximum)  # noqa: A001
min = _make_reduction("min", np.min, np.minimum)  # noqa: A001
prod = _make_reduction("prod", np.prod, np.multiply)


@_register
def reduced_count(x, axis=None):
    """How many elements of ``x`` each output of a reduction over ``axis`` combines."""
    sh = np.shape(x)
    n = 1
    for a in _norm_axes(axis, len(sh)):
        n *= sh[a]
    return n


@overload(reduced_count, prefer_literal=True)
def _reduced_count_ov(x, axis=None):
    if _is_scalar_type(x):
        return lambda x, axis=None: 1
    axes = _norm_axes(_literal(axis, "axis"), x.ndim)
    expr = " * ".join(f"s[{a}]" for a in axes) or "1"
    return _compile(f"def impl(x, axis=None):\n    s = x.shape\n    return {expr}\n", "impl")


# ----------------------------------------------------------------------------
# Broadcasting undone / reductions undone
@_register
def unbroadcast(g, x):
    """Sum ``g`` down to the shape of ``x`` (undo NumPy broadcasting)."""
    gs = g.shape if type(g) is _ndarray else np.shape(g)
    xs = x.shape if type(x) is _ndarray else np.shape(x)
    if gs == xs:
        return g
    if not xs:
        return np.sum(g).astype(np.result_type(g)) if isinstance(x, np.ndarray) else np.sum(g)
    lead = len(gs) - len(xs)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(xs) if n == 1 and gs[lead + i] != 1)
    if type(g) is _ndarray:
        r = _sum_blas(g, axes, False) if g.size >= _SUM_BLAS_MIN else None
        return (np.add.reduce(g, axis=axes) if r is None else r).reshape(xs)
    return np.sum(g, axis=axes).reshape(xs)


@overload(unbroadcast)
def _unbroadcast_ov(g, x):
    if _is_scalar_type(g):
        return lambda g, x: g
    if not isinstance(g, types.Array):
        return None
    if _is_scalar_type(x):
        return lambda g, x: g.sum()
    if x.ndim == 0:
        return lambda g, x: g.sum()
    G, X = g.ndim, x.ndim
    lead = G - X
    lines = ["def impl(g, x):", "    gs = g.shape", "    xs = x.shape"]
    if lead == 0:   # g itself, as in Python (a C-ordered g already has the result's type; Numba's
        # np.ascontiguousarray copies even those: a heap array per call in a loop's adjoint)
        same = "g" if g.layout == "C" else "np.ascontiguousarray(g)"
        lines.append(f"    if gs == xs:\n        return {same}")
    lines.append("    out = np.zeros(xs, dtype=g.dtype)")
    ind = "    "
    for i in range(G):
        lines.append(f"{ind}for i{i} in range(gs[{i}]):")
        ind += "    "
    idx = ", ".join(f"(i{lead + j} if xs[{j}] != 1 else 0)" for j in range(X))
    gidx = ", ".join(f"i{i}" for i in range(G))
    lines.append(f"{ind}out[{idx},] += g[{gidx}]")
    lines.append("    return out")
    return _compile("\n".join(lines) + "\n", "impl")


@_register
def unreduce(g, x, axis=None, keepdims=False):
    """Broadcast the reduced ``g`` back to the shape of ``x`` (undo a reduction).

    Small results are written out (``np.broadcast_to`` alone costs 3.8 us here, an
    allocation and a fill 1 us); large ones stay a read-only broadcast view."""
    xs = x.shape if type(x) is _ndarray else np.shape(x)
    if not keepdims and axis is not None:
        axes = _norm_axes(axis, len(xs))
        g = np.reshape(g, tuple(1 if i in axes else n for i, n in enumerate(xs)))
    n = 1
    for v in xs:
        n *= v
    if n <= _UNREDUCE_COPY_MAX:
        if type(g) is _ndarray and g.ndim == len(xs):
            out = np.empty(xs, dtype=g.dtype)
            out[...] = g
            return out
        if type(g) is float or isinstance(g, np.generic):
            return np.full(xs, g)
    return np.broadcast_to(g, xs)


#: Largest result (elements) unreduce writes out instead of returning a broadcast view.
_UNREDUCE_COPY_MAX = 1 << 15


@overload(unreduce, prefer_literal=True)
def _unreduce_ov(g, x, axis=None, keepdims=False):
    if _is_scalar_type(x):
        return lambda g, x, axis=None, keepdims=False: g
    ax = _literal(axis, "axis")
    kd = bool(_literal(keepdims, "keepdims"))
    nd = x.ndim
    axes = _norm_axes(ax, nd)
    shape = "(" + "".join(("1, " if i in axes else f"xs[{i}], ") for i in range(nd)) + ")"
    if _is_scalar_type(g):
        body = "    return np.full(xs, g)\n"
    elif kd or ax is None and g.ndim == nd:
        body = "    return np.ascontiguousarray(np.broadcast_to(g, xs))\n"
    else:
        body = (f"    g2 = np.ascontiguousarray(g).reshape({shape})\n"
                "    return np.ascontiguousarray(np.broadcast_to(g2, xs))\n")
    return _compile("def impl(g, x, axis=None, keepdims=False):\n    xs = x.shape\n" + body, "impl")


# ----------------------------------------------------------------------------
# Shapes
@_register
def transpose(x, axes=None):
    return np.transpose(x, axes)


@overload(transpose, prefer_literal=True)
def _transpose_ov(x, axes=None):
    ax = _literal(axes, "axes")
    if ax is None:
        return lambda x, axes=None: np.transpose(x)
    ax = tuple(a % x.ndim for a in ax)
    return _compile(f"def impl(x, axes=None):\n    return np.transpose(x, {ax})\n", "impl")


@_register
def untranspose(g, axes=None):
    """The inverse permutation of ``transpose(x, axes)`` applied to ``g``."""
    if axes is None:
        return np.transpose(g)
    return np.transpose(g, np.argsort([a % np.ndim(g) for a in axes]))


@overload(untranspose, prefer_literal=True)
def _untranspose_ov(g, axes=None):
    ax = _literal(axes, "axes")
    if ax is None:
        return lambda g, axes=None: np.transpose(g)
    inv = tuple(int(i) for i in np.argsort([a % g.ndim for a in ax]))
    return _compile(f"def impl(g, axes=None):\n    return np.transpose(g, {inv})\n", "impl")


@_register
def reshape(x, shape):
    return np.reshape(x, shape)


@overload(reshape)
def _reshape_ov(x, shape):
    if _is_scalar_type(x):   # one element: every dimension is 1 (-1 included, as NumPy infers it)
        n = len(shape) if isinstance(shape, types.BaseTuple) else 1
        ones = "(" + "1, " * n + ")"
        check = ("    for d in shape:\n        if d != 1 and d != -1:\n"
                 "            raise ValueError('cannot reshape an array of size 1 into that shape')\n"
                 if isinstance(shape, types.BaseTuple) else
                 "    if shape != 1 and shape != -1:\n"
                 "        raise ValueError('cannot reshape an array of size 1 into that shape')\n")
        return _compile(f"def impl(x, shape):\n{check}    return np.full({ones}, x)\n", "impl")
    return lambda x, shape: np.ascontiguousarray(x).reshape(shape)


@_register
def expand_dims(x, axis):
    return np.expand_dims(x, axis)


@overload(expand_dims, prefer_literal=True)
def _expand_dims_ov(x, axis):
    ax = _literal(axis, "axis")
    nd = (0 if _is_scalar_type(x) else x.ndim)
    axes = (ax,) if isinstance(ax, int) else tuple(ax)
    out_nd = nd + len(axes)
    axes = sorted(a % out_nd for a in axes)
    parts, j = [], 0
    for i in range(out_nd):
        if i in axes:
            parts.append("1, ")
        else:
            parts.append(f"s[{j}], ")
            j += 1
    if nd == 0:
        return _compile(f"def impl(x, axis):\n    return np.full(({''.join(parts)}), x)\n", "impl")
    return _compile("def impl(x, axis):\n    s = x.shape\n"
                    f"    return np.ascontiguousarray(x).reshape(({''.join(parts)}))\n", "impl")


@_register
def squeeze(x, axis=None):
    return np.squeeze(x, axis)


@overload(squeeze, prefer_literal=True)
def _squeeze_ov(x, axis=None):
    ax = _literal(axis, "axis")
    if ax is None:
        raise TypeError("squeeze() inside compiled code needs an explicit axis")
    axes = _norm_axes(ax, x.ndim)
    parts = "".join(f"s[{i}], " for i in range(x.ndim) if i not in axes)
    if not parts:
        return _compile("def impl(x, axis=None):\n    return x.ravel()[0]\n", "impl")
    return _compile(f"def impl(x, axis=None):\n    s = x.shape\n    return np.ascontiguousarray(x).reshape(({parts}))\n",
                    "impl")


@_register
def broadcast_to(x, shape):
    return np.broadcast_to(x, shape)


@overload(broadcast_to)
def _broadcast_to_ov(x, shape):
    if _is_scalar_type(x) and isinstance(shape, types.BaseTuple) and len(shape) == 0:
        # to the shape of a scalar (the cotangent of unbroadcast(g, s) for a scalar g): the scalar, not a 0-d
        # array, which compiled arithmetic with scalars does not take (+= of a float and a 0-d array)
        return lambda x, shape: x
    if _is_scalar_type(x):
        return lambda x, shape: np.full(shape, x)
    return lambda x, shape: np.ascontiguousarray(np.broadcast_to(x, shape))


# The kernels below run hundreds of times in one call of generated code over a loop (GMM's lower-triangular
# matrices built column by column: 367 copies, 80 zeros_like per gradient), where NumPy's Python-level
# wrappers cost more than the work: np.copy 1.2 us against 0.15 us for ndarray.copy, np.zeros_like 3.8 us
# against 0.56 us for np.zeros (measured here, 10x10). An exact ndarray takes the method; anything else
# NumPy's function.
@_register
def copy(x):
    if type(x) is _ndarray:
        return x.copy(order="K")
    return np.copy(x)


@overload(copy)
def _copy_ov(x):
    if _is_scalar_type(x):
        return lambda x: x
    return lambda x: x.copy()


@_register
def zeros_like(x):
    """Zeros with the shape and dtype of ``x`` (a scalar of its type for scalars)."""
    if type(x) is _ndarray:
        return np.zeros(x.shape, x.dtype, order="F" if x.flags.f_contiguous and not x.flags.c_contiguous else "C")
    if isinstance(x, np.ndarray):
        return np.zeros_like(x)
    return type(x)(0) if isinstance(x, (float, int, complex, np.generic)) else np.zeros_like(x)


@overload(zeros_like)
def _zeros_like_ov(x):
    if _is_scalar_type(x):
        return lambda x: x * 0
    if isinstance(x, types.Array) and x.ndim >= 1:   # Numba's np.zeros_like fills element by element: 2.5x
        return lambda x: np.zeros(x.shape, x.dtype)   # np.zeros on a 3-vector
    return lambda x: np.zeros_like(x)


# ----------------------------------------------------------------------------
# Products: matmul, dot, tensordot and the cotangent of each operand
#
# Plain Python: NumPy's own functions, any rank. Compiled: two operands of rank <= 2
# take one BLAS call (np.dot on contiguous arrays); N-D matmul (``@`` included) loops
# over the broadcast batch with one 2-D np.dot per item; N-D dot and tensordot become
# transposes + reshapes around one 2-D np.dot, generated per (ranks, axes) at typing time.
def _common(*arrs):
    """The common NumPy dtype of numba array/scalar types (np.dot needs equal dtypes)."""
    return np.result_type(*[numpy_support.as_dtype(a.dtype if isinstance(a, types.Array) else a) for a in arrs])


def _nd(t):
    """The ndim of a numba type (0 for a scalar)."""
    return t.ndim if isinstance(t, types.Array) else 0


@njit(cache=True)
def _dot(a, b):
    return np.dot(np.ascontiguousarray(a), np.ascontiguousarray(b))


def _dot_impl(x, y, tx="x", ty="y"):
    """Source of ``np.dot`` on two arrays of possibly different dtype/layout (rank 1 or 2)."""
    dt = _common(x, y)
    cx = f"np.ascontiguousarray({tx}).astype(dt)" if x.dtype != dt else f"np.ascontiguousarray({tx})"
    cy = f"np.ascontiguousarray({ty}).astype(dt)" if y.dtype != dt else f"np.ascontiguousarray({ty})"
    if x.ndim == 1 and y.ndim == 1:  # Numba's inner product of float32 vectors is a float64
        return dt, f"dt.type(np.dot({cx}, {cy}))"
    return dt, f"np.dot({cx}, {cy})"


def _tup(parts):
    """Source of a tuple expression from source parts (``()`` when empty)."""
    return "(" + "".join(f"{p}, " for p in parts) + ")"


def _mm_promote(g, x, y):
    """``x``, ``y`` and the cotangent ``g`` of ``x @ y`` with 1-D operands promoted as np.matmul does."""
    xn, yn = np.ndim(x), np.ndim(y)
    xp = np.reshape(x, (1, -1)) if xn == 1 else x
    yp = np.reshape(y, (-1, 1)) if yn == 1 else y
    gp = np.asarray(g)
    if yn == 1:
        gp = gp[..., None]
    if xn == 1:
        gp = gp[..., None, :]
    return gp, xp, yp


def _bmm_impl(kind, g, x, y):
    """Compiled N-D matmul under NumPy's rules (1-D operands promoted, batch axes broadcast):
    ``impl(x, y)`` for kind "mm", the cotangent of ``x`` ("dx") or of ``y`` ("dy") as
    ``impl(g, x, y)``, summed over the batch axes that operand was broadcast along. The batch is
    flattened: each operand becomes 3-D, index maps say which of its items each batch item uses,
    and one 2-D np.dot runs per batch item (integer code only besides: quick to compile)."""
    X, Y = x.ndim, y.ndim
    bx, by = _builtins.max(X, 2) - 2, _builtins.max(Y, 2) - 2
    nb = _builtins.max(bx, by)
    dt = _common(x, y) if kind == "mm" else _common(g, y) if kind == "dx" else _common(x, g)
    xps = ["1", "xs[0]"] if X == 1 else [f"xs[{i}]" for i in range(X)]
    yps = ["ys[0]", "1"] if Y == 1 else [f"ys[{i}]" for i in range(Y)]
    n, k, m = xps[-2], xps[-1], yps[-1]
    xb, yb = xps[:bx], yps[:by]
    xpad, ypad = ["1"] * (nb - bx) + xb, ["1"] * (nb - by) + yb
    px, py = " * ".join(xb) or "1", " * ".join(yb) or "1"
    L = [f"def impl({'x, y' if kind == 'mm' else 'g, x, y'}):", "    xs = x.shape", "    ys = y.shape"]
    for j in range(nb):
        xd, yd = xpad[j], ypad[j]
        if xd == "1" or yd == "1":
            L.append(f"    b{j} = {yd if xd == '1' else xd}")
        else:
            L.append(f"    b{j} = {xd} if {yd} == 1 else {yd}")
            L.append(f"    if {xd} != {yd} and {xd} != 1 and {yd} != 1:")
            L.append("        raise ValueError('matmul: the batch dimensions of the operands do not broadcast')")
    full = [f"b{j}" for j in range(nb)]
    nbatch = " * ".join(full) or "1"
    L.append(f"    if {k} != {yps[-2]}:")
    L.append("        raise ValueError('matmul: the contracted dimensions of the operands differ')")
    for name, t, p, pad, r, c in (("x", x, px, xpad, n, k), ("y", y, py, ypad, k, m)):
        if kind != ("dx" if name == "x" else "dy"):  # the operand itself takes part in the products
            cast = ".astype(dtc)" if t.dtype != dt else ""
            L.append(f"    {name}3 = np.ascontiguousarray({name}){cast}.reshape(({p}, {r}, {c}))")
    # index maps: the item of x and of y that each item of the flattened batch multiplies
    L.append(f"    nbatch = {nbatch}")
    L.append("    ix = np.empty(nbatch, np.int64)")
    L.append("    iy = np.empty(nbatch, np.int64)")
    L.append("    for f in range(nbatch):")
    L.append("        r = f")
    L.append("        jx = 0")
    L.append("        jy = 0")
    L.append("        sx = 1")
    L.append("        sy = 1")
    for j in reversed(range(nb)):
        L.append(f"        i = r % b{j}")
        L.append(f"        r //= b{j}")
        for name, pad in (("x", xpad), ("y", ypad)):
            if pad[j] != "1":
                L.append(f"        if {pad[j]} != 1:")
                L.append(f"            j{name} += i * s{name}")
                L.append(f"        s{name} *= {pad[j]}")
    L.append("        ix[f] = jx")
    L.append("        iy[f] = jy")
    if kind == "mm":
        L.append(f"    out = np.empty((nbatch, {n}, {m}), dtc)")
        L.append("    for f in range(nbatch):")
        L.append("        np.dot(x3[ix[f]], y3[iy[f]], out[f])")
        shape = full + ([n] if X > 1 else []) + ([m] if Y > 1 else [])
        L.append(f"    return out.reshape({_tup(shape)})")
    else:
        cast = ".astype(dtc)" if g.dtype != dt else ""
        L.append(f"    g3 = np.ascontiguousarray(g){cast}.reshape((nbatch, {n}, {m}))")
        if kind == "dx":  # summed where x was broadcast
            L.append(f"    acc = np.zeros(({px}, {n}, {k}), dtc)")
            L.append(f"    tmp = np.empty(({n}, {k}), dtc)")
            L.append("    for f in range(nbatch):")
            L.append("        np.dot(g3[f], y3[iy[f]].T, tmp)")
            L.append("        acc[ix[f]] += tmp")
            L.append("    return acc.reshape(xs)")
        else:
            L.append(f"    acc = np.zeros(({py}, {k}, {m}), dtc)")
            L.append(f"    tmp = np.empty(({k}, {m}), dtc)")
            L.append("    for f in range(nbatch):")
            L.append("        np.dot(x3[ix[f]].T, g3[f], tmp)")
            L.append("        acc[iy[f]] += tmp")
            L.append("    return acc.reshape(ys)")
    return _compile("\n".join(L) + "\n", "impl", {"dtc": dt.type})


@_register
def matmul(x, y):
    return np.matmul(x, y)


@overload(matmul)
def _matmul_ov(x, y):
    if not (isinstance(x, types.Array) and isinstance(y, types.Array)):
        return None
    if x.ndim > 2 or y.ndim > 2:
        return _bmm_impl("mm", None, x, y)
    dt, e = _dot_impl(x, y)
    return _compile(f"def impl(x, y):\n    return {e}\n", "impl", {"dt": dt})


@overload(_operator.matmul)
def _matmul_operator_ov(x, y):
    """``x @ y`` in compiled code where Numba's own ``@`` refuses: an operand of rank 3 or more, or two of
    different dtypes (float32 @ float64: NumPy promotes)."""
    if isinstance(x, types.Array) and isinstance(y, types.Array) and x.ndim >= 1 and y.ndim >= 1 and \
            (x.ndim > 2 or y.ndim > 2 or x.dtype != y.dtype):
        return lambda x, y: matmul(x, y)
    return None


@_register
def matmul_dx(g, x, y):
    """Cotangent of ``x`` in ``x @ y`` (NumPy's matmul rules: 1-D operands, broadcast batch axes)."""
    xn, yn = np.ndim(x), np.ndim(y)
    if xn > 2 or yn > 2:
        gp, xp, yp = _mm_promote(g, x, y)
        return unbroadcast(np.matmul(gp, np.swapaxes(yp, -1, -2)), xp).reshape(np.shape(x))
    if yn == 1:
        return np.outer(g, y) if xn == 2 else g * y
    return g @ y.T if xn == 2 else y @ g


@overload(matmul_dx)
def _matmul_dx_ov(g, x, y):
    if x.ndim > 2 or y.ndim > 2:
        return _bmm_impl("dx", g, x, y)
    if y.ndim == 1:
        if x.ndim == 2:
            return lambda g, x, y: np.outer(g, y)
        return lambda g, x, y: g * y
    if x.ndim == 2:
        dt, e = _dot_impl(g, y, "g", "y.T")
    else:
        dt, e = _dot_impl(y, g, "y", "g")
    return _compile(f"def impl(g, x, y):\n    return {e}\n", "impl", {"dt": dt})


@_register
def matmul_dy(g, x, y):
    """Cotangent of ``y`` in ``x @ y`` (NumPy's matmul rules: 1-D operands, broadcast batch axes)."""
    xn, yn = np.ndim(x), np.ndim(y)
    if xn > 2 or yn > 2:
        gp, xp, yp = _mm_promote(g, x, y)
        return unbroadcast(np.matmul(np.swapaxes(xp, -1, -2), gp), yp).reshape(np.shape(y))
    if xn == 1:
        return np.outer(x, g) if yn == 2 else g * x
    return x.T @ g


@overload(matmul_dy)
def _matmul_dy_ov(g, x, y):
    if x.ndim > 2 or y.ndim > 2:
        return _bmm_impl("dy", g, x, y)
    if x.ndim == 1:
        if y.ndim == 2:
            return lambda g, x, y: np.outer(x, g)
        return lambda g, x, y: g * x
    dt, e = _dot_impl(x, g, "x.T", "g")
    return _compile(f"def impl(g, x, y):\n    return {e}\n", "impl", {"dt": dt})


def _td_axes(axes, na, nb):
    """``tensordot``'s ``axes`` (an int, or a pair of ints / sequences) as two lists of axes >= 0."""
    if isinstance(axes, (int, np.integer)):
        n = int(axes)
        if n < 0 or n > na or n > nb:
            raise ValueError(f"tensordot: axes={n} does not fit operands of rank {na} and {nb}")
        return list(range(na - n, na)), list(range(n))
    ia, ib = axes
    ia = [ia] if isinstance(ia, (int, np.integer)) else list(ia)
    ib = [ib] if isinstance(ib, (int, np.integer)) else list(ib)
    if len(ia) != len(ib):
        raise ValueError(f"tensordot: axes {axes} pair {len(ia)} axes of the first operand with {len(ib)}")
    for a, n in [(a, na) for a in ia] + [(b, nb) for b in ib]:
        if not -n <= a < n:
            raise ValueError(f"tensordot: axis {a} is out of bounds for an operand of rank {n}")
    return [int(a) % na for a in ia], [int(b) % nb for b in ib]


def _free(n, contracted):
    return [i for i in range(n) if i not in contracted]


def _dot_axes(xn, yn):
    """np.dot as a tensordot: the last axis of ``x`` with the second-to-last of ``y`` (scalars: none)."""
    if xn == 0 or yn == 0:
        return [], []
    return [xn - 1], [_builtins.max(yn - 2, 0)]


def _inverse(perm):
    return [int(i) for i in np.argsort(perm)]


def _tensordot_src(a, b, ta, tb, ca, fa, cb, fb, dt, out="r"):
    """Source lines computing the tensordot of ``a`` (contracted axes ``ca``, free ``fa``) and ``b``
    (``cb``, ``fb``) into ``out``: both transposed to (free, contracted) / (contracted, free) and
    reshaped to 2-D around one (disk-cached) np.dot. Axes are ints or source expressions (runtime values)."""
    na, nb = _nd(ta), _nd(tb)
    if na == 0 or nb == 0:  # a scalar operand: nothing is contracted, the product is elementwise
        xa = f"{a}.astype(dtc)" if na and ta.dtype != dt else f"dtc({a})" if not na else a
        xb = f"{b}.astype(dtc)" if nb and tb.dtype != dt else f"dtc({b})" if not nb else b
        return [f"    {out} = {xa} * {xb}"]
    L = [f"    {a}_s = {a}.shape", f"    {b}_s = {b}.shape"]
    for p, q in zip(ca, cb):
        L.append(f"    if {a}_s[{p}] != {b}_s[{q}]:")
        L.append("        raise ValueError('tensordot: shape mismatch for sum')")

    def flat(name, t, perm):
        e = name if perm == list(range(len(perm))) else f"np.transpose({name}, {_tup(perm)})"
        return f"np.ascontiguousarray({e})" + (".astype(dtc)" if t.dtype != dt else "")

    prod = lambda name, ax: " * ".join(f"{name}_s[{i}]" for i in ax) or "1"  # noqa: E731
    M, K, N = prod(a, fa), prod(a, ca), prod(b, fb)
    L.append(f"    {out}2 = _dot({flat(a, ta, list(fa) + list(ca))}.reshape(({M}, {K})), "
             f"{flat(b, tb, list(cb) + list(fb))}.reshape(({K}, {N})))")
    shape = [f"{a}_s[{i}]" for i in fa] + [f"{b}_s[{i}]" for i in fb]
    L.append(f"    {out} = {out}2.reshape({_tup(shape)})" if shape else f"    {out} = {out}2[0, 0]")
    return L


def _runtime_axes_src(X, Y, nc, first, second):
    """Source lines turning runtime axes (``first``/``second``: source of the ``t``-th axis of each
    operand, ``{t}`` in them) into int arrays ``ia``/``ib``/``fa``/``fb`` (contracted, then free axes
    of x and y, checked and made non-negative) and the helper orderings the cotangents need."""
    L = [f"    ia = np.empty({nc}, np.int64)", f"    ib = np.empty({nc}, np.int64)"]
    for t in range(nc):
        for arr, e, n in (("ia", first.format(t=t), X), ("ib", second.format(t=t), Y)):
            L.append(f"    if {e} < -{n} or {e} >= {n}:")
            L.append("        raise ValueError('tensordot: an axis is out of bounds')")
            L.append(f"    {arr}[{t}] = {e} % {n}")
    for arr, c, n in (("fa", "ia", X), ("fb", "ib", Y)):
        L += [f"    {arr} = np.empty({n - nc}, np.int64)", "    j = 0", f"    for i in range({n}):",
              f"        if not np.any({c} == i):", "            if j == " + str(n - nc) + ":",
              "                raise ValueError('tensordot: repeated axis')",
              f"            {arr}[j] = i", "            j += 1"]
    return L


def _td_plan(kind, X, Y, ia, ib, nc=None):
    """How tensordot(x, y, (ia, ib)) (kind "td"), the cotangent of x ("dx": a tensordot of g and y,
    then a transpose) or of y ("dy": of x and g, then a transpose) is computed: ``(lines before,
    contracted and free axes of the left operand, the same of the right one, final permutation)``.
    With ``nc`` given, the axes are runtime values (``ia``/``ib``: sources with ``{t}``) of which only
    the count is static, and everything is source expressions over arrays computed at run time."""
    if nc is None:
        fa, fb = _free(X, ia), _free(Y, ib)
        nfa, nfb = len(fa), len(fb)
        if kind == "td":
            return [], ia, fa, ib, fb, None
        if kind == "dx":
            rest = [ia[j] for j in np.argsort(ib, kind="stable")]  # y's axes left, in y's order
            return [], list(range(nfa, nfa + nfb)), list(range(nfa)), fb, sorted(ib), _inverse(fa + rest)
        rest = [ib[j] for j in np.argsort(ia, kind="stable")]  # x's axes left, in x's order
        return [], fa, sorted(ia), list(range(nfa)), list(range(nfa, nfa + nfb)), _inverse(rest + fb)
    L = _runtime_axes_src(X, Y, nc, ia, ib)
    nfa, nfb = X - nc, Y - nc
    v = lambda arr, n: [f"{arr}[{t}]" for t in range(n)]  # noqa: E731
    if kind == "td":
        return L, v("ia", nc), v("fa", nfa), v("ib", nc), v("fb", nfb), None
    if kind == "dx":
        L += ["    sib = np.sort(ib)", "    inv = np.argsort(np.concatenate((fa, ia[np.argsort(ib)])))"]
        return L, list(range(nfa, nfa + nfb)), list(range(nfa)), v("fb", nfb), v("sib", nc), v("inv", X)
    L += ["    sia = np.sort(ia)", "    inv = np.argsort(np.concatenate((ib[np.argsort(ia)], fb)))"]
    return L, v("fa", nfa), v("sia", nc), list(range(nfa)), list(range(nfa, nfa + nfb)), v("inv", Y)


def _tensordot_overload(kind, sig, a, b, ta, tb, X, Y, axes, dt):
    """An impl of ``sig`` computing the tensordot of ``a`` and ``b`` of plan ``kind`` (see _td_plan)
    for the axes of x and y ``axes``: ``(ia, ib)`` lists, or ``("runtime", nc, first, second)``."""
    if axes[0] == "runtime":
        pre, ca, fa, cb, fb, perm = _td_plan(kind, X, Y, axes[2], axes[3], nc=axes[1])
    else:
        pre, ca, fa, cb, fb, perm = _td_plan(kind, X, Y, *axes)
    L = [f"def impl({sig}):"] + pre + _tensordot_src(a, b, ta, tb, ca, fa, cb, fb, dt)
    if perm is None or perm == list(range(len(perm))):
        L.append("    return r")
    else:
        L.append(f"    return np.ascontiguousarray(np.transpose(r, {_tup(perm)}))")
    return _compile("\n".join(L) + "\n", "impl", {"dtc": dt.type, "_dot": _dot})


def _td_axes_type(axes, X, Y):
    """``axes`` of tensordot at typing time, for ranks X and Y: ``(ia, ib)`` lists when its values are
    known (a literal int, a pair of literal ints, constant lists or flat literal tuples), else
    ``("runtime", count, source of x's t-th axis, of y's)`` for a pair of int tuples whose values
    Numba does not keep (it types a nested constant such as ``((1, 0), (0, 1))`` by its shape only)."""
    def known(t):
        if isinstance(t, (int, tuple, list)):
            return t
        if isinstance(t, types.Omitted):
            return t.value
        if isinstance(t, types.IntegerLiteral):
            return t.literal_value
        if isinstance(t, types.List) and getattr(t, "initial_value", None) is not None:
            return list(t.initial_value)
        if isinstance(t, types.BaseTuple) and all(isinstance(e, types.IntegerLiteral) for e in t.types):
            return tuple(e.literal_value for e in t.types)
        return None

    v = known(axes)
    if v is None and isinstance(axes, types.BaseTuple) and len(axes.types) == 2:
        parts = [known(t) for t in axes.types]
        if all(p is not None for p in parts):
            v = tuple(parts)
        else:
            counts, srcs = [], []
            for k, t in enumerate(axes.types):
                if isinstance(t, types.Integer):
                    counts.append(1)
                    srcs.append(f"axes[{k}]")
                elif isinstance(t, types.BaseTuple) and all(isinstance(e, types.Integer) for e in t.types):
                    counts.append(len(t.types))
                    srcs.append(f"axes[{k}][{{t}}]")
                else:
                    counts = None
                    break
            if counts and counts[0] == counts[1] and counts[0] <= _builtins.min(X, Y):
                return ("runtime", counts[0], srcs[0], srcs[1])
    if v is None:
        raise errors.TypingError(
            f"tensordot(axes=...) must be a constant inside compiled code: an int or a pair of sequences "
            f"of ints such as axes=([1, 0], [0, 1]); got {axes}")
    return _td_axes(v, X, Y)


@_register
def tensordot(a, b, axes=2):
    return np.tensordot(a, b, axes)


@overload(tensordot, prefer_literal=True)
def _tensordot_ov(a, b, axes=2):
    X, Y = _nd(a), _nd(b)
    return _tensordot_overload("td", "a, b, axes=2", "a", "b", a, b, X, Y, _td_axes_type(axes, X, Y), _common(a, b))


def _scalar_like(r, x):
    """``r`` as a scalar where ``x`` (the operand it is the cotangent of) is a Python or NumPy scalar."""
    return r if isinstance(x, np.ndarray) else r[()]


def _td_python(kind, g, x, y, axes):
    X, Y = np.ndim(x), np.ndim(y)
    _, ca, fa, cb, fb, perm = _td_plan(kind, X, Y, *_td_axes(axes, X, Y))
    left, right = (g, y) if kind == "dx" else (x, g)
    r = np.transpose(np.tensordot(left, right, (ca, cb)), perm)
    return _scalar_like(r, x if kind == "dx" else y)


@_register
def tensordot_dx(g, x, y, axes=2):
    """Cotangent of ``x`` in ``np.tensordot(x, y, axes)``: itself a tensordot, then a transpose."""
    return _td_python("dx", g, x, y, axes)


@overload(tensordot_dx, prefer_literal=True)
def _tensordot_dx_ov(g, x, y, axes=2):
    X, Y = _nd(x), _nd(y)
    return _tensordot_overload("dx", "g, x, y, axes=2", "g", "y", g, y, X, Y, _td_axes_type(axes, X, Y),
                               _common(g, y))


@_register
def tensordot_dy(g, x, y, axes=2):
    """Cotangent of ``y`` in ``np.tensordot(x, y, axes)``: itself a tensordot, then a transpose."""
    return _td_python("dy", g, x, y, axes)


@overload(tensordot_dy, prefer_literal=True)
def _tensordot_dy_ov(g, x, y, axes=2):
    X, Y = _nd(x), _nd(y)
    return _tensordot_overload("dy", "g, x, y, axes=2", "x", "g", x, g, X, Y, _td_axes_type(axes, X, Y),
                               _common(x, g))


@_register
def dot(x, y):
    return np.dot(x, y)


@overload(dot)
def _dot_ov(x, y):
    X, Y = _nd(x), _nd(y)
    if X == 1 and Y == 1 and x.dtype == y.dtype and isinstance(x.dtype, types.Float):
        dt, e = _dot_impl(x, y)   # short vectors (3-vectors in a loop): a loop, not a BLAS call (180 ns)
        src = (f"def impl(x, y):\n    n = x.shape[0]\n    if n <= {_DOT_LOOP_MAX} and y.shape[0] == n:\n"
               f"        s = dt.type(0)\n        for i in range(n):\n            s += x[i] * y[i]\n        return s\n"
               f"    return {e}\n")
        return _compile(src, "impl", {"dt": dt})
    if 1 <= X <= 2 and 1 <= Y <= 2:
        dt, e = _dot_impl(x, y)
        return _compile(f"def impl(x, y):\n    return {e}\n", "impl", {"dt": dt})
    return _tensordot_overload("td", "x, y", "x", "y", x, y, X, Y, _dot_axes(X, Y), _common(x, y))


#: Longest vectors whose inner product the compiled dot takes in a loop instead of a BLAS call.
_DOT_LOOP_MAX = 16


@_register
def dot_dx(g, x, y):
    """Cotangent of ``x`` in ``np.dot(x, y)`` (N-D: the last axis of x with the second-to-last of y)."""
    X, Y = np.ndim(x), np.ndim(y)
    if 1 <= X <= 2 and 1 <= Y <= 2:
        return matmul_dx(g, x, y)
    return tensordot_dx(g, x, y, _dot_axes(X, Y))


@overload(dot_dx)
def _dot_dx_ov(g, x, y):
    X, Y = _nd(x), _nd(y)
    if 1 <= X <= 2 and 1 <= Y <= 2:
        return _matmul_dx_ov(g, x, y)
    return _tensordot_overload("dx", "g, x, y", "g", "y", g, y, X, Y, _dot_axes(X, Y), _common(g, y))


@_register
def dot_dy(g, x, y):
    """Cotangent of ``y`` in ``np.dot(x, y)`` (N-D: the last axis of x with the second-to-last of y)."""
    X, Y = np.ndim(x), np.ndim(y)
    if 1 <= X <= 2 and 1 <= Y <= 2:
        return matmul_dy(g, x, y)
    return tensordot_dy(g, x, y, _dot_axes(X, Y))


@overload(dot_dy)
def _dot_dy_ov(g, x, y):
    X, Y = _nd(x), _nd(y)
    if 1 <= X <= 2 and 1 <= Y <= 2:
        return _matmul_dy_ov(g, x, y)
    return _tensordot_overload("dy", "g, x, y", "x", "g", x, g, X, Y, _dot_axes(X, Y), _common(x, g))


@_register
def concatenate(arrays, axis=0):
    return np.concatenate(arrays, axis)


@overload(concatenate, prefer_literal=True)
def _concatenate_ov(arrays, axis=0):
    ax = _literal(axis, "axis")
    return _compile(f"def impl(arrays, axis=0):\n    return np.concatenate(arrays, axis={ax})\n", "impl")


@_register
def unconcatenate(g, arrays, axis=0):
    """Split ``g`` into pieces shaped like ``arrays`` along ``axis`` (a list)."""
    ax = axis % (g.ndim if type(g) is _ndarray else np.ndim(g))
    out, start = [], 0
    for a in arrays:
        n = (a.shape if type(a) is _ndarray else np.shape(a))[ax]
        idx = (slice(None),) * ax + (slice(start, start + n),)
        out.append(np.ascontiguousarray(g[idx]))
        start += n
    return out


@overload(unconcatenate, prefer_literal=True)
def _unconcatenate_ov(g, arrays, axis=0):
    ax = _literal(axis, "axis") % g.ndim
    sl = ":, " * ax
    if isinstance(arrays, types.BaseTuple) and not isinstance(arrays, types.UniTuple):
        # pieces of different dtypes (real and complex) or ranks: unrolled, a tuple cannot be iterated
        lines = ["def impl(g, arrays, axis=0):", "    start = 0"]
        for i in range(len(arrays)):
            lines += [f"    n = arrays[{i}].shape[{ax}]", f"    p{i} = np.ascontiguousarray(g[{sl}start:start + n])",
                      "    start += n"]
        lines.append("    return (" + "".join(f"p{i}, " for i in range(len(arrays))) + ")")
        return _compile("\n".join(lines) + "\n", "impl")
    src = f"""
def impl(g, arrays, axis=0):
    out = []
    start = 0
    for a in arrays:
        n = a.shape[{ax}]
        out.append(np.ascontiguousarray(g[{sl}start:start + n]))
        start += n
    return out
"""
    return _compile(src, "impl")


@_register
def stack(arrays, axis=0):
    return np.stack(arrays, axis)


def _elem_dtype(t):
    if isinstance(t, types.Array):
        return numpy_support.as_dtype(t.dtype)
    if isinstance(t, types.Literal):
        return np.result_type(t.literal_value)
    return numpy_support.as_dtype(t)


@overload(stack, prefer_literal=True)
def _stack_ov(arrays, axis=0):
    ax = _literal(axis, "axis")
    elems = list(arrays.types) if isinstance(arrays, types.BaseTuple) else None
    if elems is None:  # a list of arrays
        return _compile(f"def impl(arrays, axis=0):\n    return np.stack(arrays, axis={ax})\n", "impl")
    # a tuple (of scalars, or of arrays of possibly different layouts): fill one array slot by slot
    dt = np.result_type(*[_elem_dtype(t) for t in elems])
    nd = _builtins.max((t.ndim for t in elems if isinstance(t, types.Array)), default=0)
    first = next((i for i, t in enumerate(elems) if isinstance(t, types.Array)), None)
    shape = "()" if first is None else f"arrays[{first}].shape"
    lines = [f"def impl(arrays, axis=0):", f"    out = np.empty(({len(elems)},) + {shape}, dtype=dt)"]
    for i, t in enumerate(elems):
        lines.append(f"    out[{i}] = arrays[{i}]")
    a = ax % (nd + 1)
    if a:
        perm = tuple(list(range(1, a + 1)) + [0] + list(range(a + 1, nd + 1)))
        lines.append(f"    return np.ascontiguousarray(np.transpose(out, {perm}))")
    else:
        lines.append("    return out")
    return _compile("\n".join(lines) + "\n", "impl", {"dt": dt})


@_register
def unstack(g, arrays, axis=0):
    """Split ``g`` along ``axis`` into ``len(arrays)`` pieces (the VJP of stack)."""
    ax = axis % np.ndim(g)
    return [np.array(np.take(g, i, axis=ax)) for i in range(np.shape(g)[ax])]


@overload(unstack, prefer_literal=True)
def _unstack_ov(g, arrays, axis=0):
    ax = _literal(axis, "axis") % g.ndim
    if g.ndim == 1:  # the pieces are scalars
        return lambda g, arrays, axis=0: [g[i] for i in range(g.shape[0])]
    sl = ":, " * ax
    src = f"""
def impl(g, arrays, axis=0):
    out = []
    for i in range(g.shape[{ax}]):
        out.append(np.ascontiguousarray(g[{sl}i]))
    return out
"""
    return _compile(src, "impl")


@_register
def clip(x, lo, hi):
    return np.clip(x, lo, hi)


@overload(clip)
def _clip_ov(x, lo, hi):
    if _is_scalar_type(x):
        return lambda x, lo, hi: (lo if x < lo else (hi if x > hi else x))
    return lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi)


@_register
def in_range(x, lo, hi):
    """1 where ``lo <= x <= hi`` else 0, in the dtype of ``x`` (the mask of clip's VJP)."""
    r = np.asarray((x >= lo) & (x <= hi)).astype(np.result_type(x))
    return r if isinstance(x, np.ndarray) else r[()]


@overload(in_range)
def _in_range_ov(x, lo, hi):
    if _is_scalar_type(x):
        return lambda x, lo, hi: 1.0 if (x >= lo and x <= hi) else 0.0
    return lambda x, lo, hi: ((x >= lo) & (x <= hi)).astype(x.dtype)


@_register
def mask(c, like):
    """``c`` (a boolean condition) as 1/0 in the dtype of ``like``."""
    r = np.asarray(c).astype(np.result_type(like))
    return r if isinstance(c, np.ndarray) else r[()]


@overload(mask)
def _mask_ov(c, like):
    dt = like.dtype if isinstance(like, types.Array) else like
    if _is_scalar_type(c):
        return lambda c, like: dt(1) if c else dt(0)
    return lambda c, like: c.astype(dt)


@_register
def stop_gradient(x):
    return x


@overload(stop_gradient)
def _stop_gradient_ov(x):
    return lambda x: x


def _basic_index(idx):
    """True for indices NumPy applies as views (ints, slices, None, Ellipsis): no element repeats."""
    if type(idx) is int or type(idx) is slice:
        return True
    parts = idx if isinstance(idx, tuple) else (idx,)
    return all(p is None or p is Ellipsis or isinstance(p, (slice, int, np.integer)) for p in parts)


def _basic_index_type(t):
    parts = t.types if isinstance(t, types.BaseTuple) else (t,)
    return all(isinstance(p, (types.Integer, types.SliceType, types.NoneType, types.EllipsisType)) for p in parts)


@_register
def index_add(out, idx, g):
    """``out[idx] += g`` with ``np.add.at`` semantics: a repeated index accumulates every time. Returns ``out``."""
    if _basic_index(idx):
        out[idx] += g
    else:
        np.add.at(out, idx, g)
    return out


@register_jitable
def _extent(a):
    """[first, last) bytes a 1-d array spans."""
    lo = a.ctypes.data
    span = (a.shape[0] - 1) * a.strides[0]
    if a.shape[0] == 0:
        return lo, lo
    if span < 0:
        return lo + span, lo + a.itemsize
    return lo, lo + span + a.itemsize


@register_jitable
def _add_into_1d(out, start, step, n, g):
    """``out[start::step][:n] += g`` one element at a time (``g``: 1-d, ``n`` or 1 long), as NumPy's ``+=``:
    ``g`` is read as it was before the writes, even where it shares memory with ``out``."""
    if g.shape[0] != n and g.shape[0] != 1:
        raise ValueError("operands could not be broadcast together")
    lo, hi = _extent(out)
    glo, ghi = _extent(g)
    if glo < hi and lo < ghi:
        g = g.copy()
    if g.shape[0] == 1:
        v = g[0]
        for j in range(n):
            out[start + j * step] += v
    else:
        for j in range(n):
            out[start + j * step] += g[j]


def _index_add_loop(out, idx, g):
    """A loop for the basic writes adjoints make most (``d_x[a:b] += g`` on a vector, ``d_x[i] += g`` on a row of
    a matrix), or None. ``out[idx] += g`` compiles NumPy's general slice assignment into every caller (with its
    shape-mismatch message: Numba's string machinery): seconds per program; the loop adds the same numbers."""
    if not isinstance(out, types.Array) or not isinstance(out.dtype, types.Float):
        return None
    same = (isinstance(g, types.Array) and g.ndim == 1 and g.dtype == out.dtype) or g == out.dtype
    if not same:
        return None
    if out.ndim == 1 and isinstance(idx, types.SliceType):
        if isinstance(g, types.Array):
            def slice_vec(out, idx, g):
                start, stop, step = idx.indices(out.shape[0])
                _add_into_1d(out, start, step, len(range(start, stop, step)), g)
                return out
            return slice_vec

        def slice_scalar(out, idx, g):
            start, stop, step = idx.indices(out.shape[0])
            for j in range(len(range(start, stop, step))):
                out[start + j * step] += g
            return out
        return slice_scalar
    if out.ndim == 2 and isinstance(idx, types.Integer) and isinstance(g, types.Array):
        def row_vec(out, idx, g):
            i = idx + out.shape[0] if idx < 0 else idx
            if i < 0 or i >= out.shape[0]:
                raise IndexError("index is out of bounds")
            _add_into_1d(out[i], 0, 1, out.shape[1], g)
            return out
        return row_vec
    return None


@overload(index_add)
def _index_add_ov(out, idx, g):
    loop = _index_add_loop(out, idx, g)
    if loop is not None:
        return loop
    if _basic_index_type(idx):
        def basic(out, idx, g):
            out[idx] += g
            return out
        return basic
    if isinstance(idx, types.Array) and isinstance(idx.dtype, types.Integer) and idx.ndim == 1 and \
            isinstance(g, types.Array) and g.ndim == out.ndim:
        def rows(out, idx, g):  # x[idx] on the first axis (embedding lookups): one row at a time
            n = out.shape[0]
            gb = np.zeros((idx.shape[0],) + out.shape[1:], out.dtype) + g
            for k in range(idx.shape[0]):
                i = idx[k]
                out[i + n if i < 0 else i] += gb[k]
            return out
        return rows

    def general(out, idx, g):  # positions of the selected elements, then one add per occurrence
        pos = np.arange(out.size).reshape(out.shape)[idx]
        gb = np.zeros(pos.shape, out.dtype) + g
        pf = pos.ravel()
        gf = gb.ravel()
        for k in range(pf.size):
            out.flat[pf[k]] += gf[k]
        return out
    return general


def index_put(out, idx, v):
    """``out[idx] = v`` in place; returns ``out`` (generated code spells writes as this call where the backend's
    arrays have no item assignment, and on the CPU where a write replaces a row of a matrix)."""
    out[idx] = v
    return out


@overload(index_put)
def _index_put_ov(out, idx, v):
    """A row of a matrix replaced by a vector, element by element. Numba's ``out[i] = v`` checks the shapes with
    a message that formats them: Numba's whole string machinery, about 1.2 s of an LSTM's cold compile."""
    if isinstance(out, types.Array) and out.ndim == 2 and isinstance(idx, types.Integer) and \
            isinstance(v, types.Array) and v.ndim == 1 and v.dtype == out.dtype:
        def row(out, idx, v):
            i = idx + out.shape[0] if idx < 0 else idx
            if i < 0 or i >= out.shape[0]:
                raise IndexError("index is out of bounds")
            n = out.shape[1]
            if v.shape[0] != n and v.shape[0] != 1:
                raise ValueError("could not broadcast input array into the row's shape")
            r = out[i]
            lo, hi = _extent(r)
            vlo, vhi = _extent(v)
            if vlo < hi and lo < vhi:   # v shares memory with the row: read it before the writes, as NumPy does
                v = v.copy()
            if v.shape[0] == 1:
                x = v[0]
                for j in range(n):
                    r[j] = x
            else:
                for j in range(n):
                    r[j] = v[j]
            return out
        return row

    def basic(out, idx, v):
        out[idx] = v
        return out
    return basic


@_register
def untake(g, x, idx):
    """Zeros like ``x`` with ``g`` added at ``idx`` (the VJP of ``x[idx]``; repeated indices accumulate)."""
    return index_add(np.zeros_like(x), idx, g)


@overload(untake)
def _untake_ov(g, x, idx):
    def impl(g, x, idx):
        return index_add(np.zeros_like(x), idx, g)
    return impl


@_register
def getitem(x, idx):
    """``x[idx]`` (generated code writes indexing as indexing; this is the same, by name)."""
    return x[idx]


@overload(getitem, jit_options=_CHECKED)
def _getitem_ov(x, idx):
    return lambda x, idx: x[idx]


# x[mask] with a boolean mask of x's shape and ndim > 1 (x[x > 0], c[c < t] += v): NumPy's flat selection in
# row-major order. Nopython Numba indexes with one 1-D array only, so compiled code (the user's whole function
# under njit) gets these overloads of the [] operator for exactly that case.
def _nd_mask(x, idx):
    return isinstance(x, types.Array) and isinstance(idx, types.Array) and isinstance(idx.dtype, types.Boolean) \
        and idx.ndim > 1 and idx.ndim == x.ndim


@overload(_operator.getitem)
def _nd_mask_getitem_ov(x, idx):
    if _nd_mask(x, idx):
        def impl(x, idx):
            if x.shape != idx.shape:
                raise IndexError("boolean index did not match indexed array")
            out = np.empty(np.count_nonzero(idx), x.dtype)
            k = 0
            for i in np.ndindex(x.shape):
                if idx[i]:
                    out[k] = x[i]
                    k += 1
            return out
        return impl


@overload(_operator.setitem)
def _nd_mask_setitem_ov(x, idx, v):
    if not _nd_mask(x, idx):
        return None
    if isinstance(v, types.Array) and v.ndim == 1:
        def impl(x, idx, v):
            if x.shape != idx.shape:
                raise IndexError("boolean index did not match indexed array")
            if v.size != np.count_nonzero(idx) and v.size != 1:
                raise ValueError("NumPy boolean array indexing assignment cannot assign these values: their "
                                 "number differs from the True entries of the mask")
            k = 0
            for i in np.ndindex(x.shape):
                if idx[i]:
                    x[i] = v[k if v.size != 1 else 0]
                    k += 1
        return impl
    if isinstance(v, (types.Number, types.Boolean)) or isinstance(v, types.Array) and v.ndim == 0:
        def impl(x, idx, v):
            if x.shape != idx.shape:
                raise IndexError("boolean index did not match indexed array")
            val = np.asarray(v).item()
            for i in np.ndindex(x.shape):
                if idx[i]:
                    x[i] = val
        return impl
    return None


@_register
def take(x, indices, axis=None):
    return np.take(x, indices, axis=axis)


def _take_index_src(axis, ndim):
    return "(" + "slice(None), " * axis + "indices,)"


@overload(take, prefer_literal=True, jit_options=_CHECKED)
def _take_ov(x, indices, axis=None):
    ax = _literal(axis, "axis")
    if ax is None:
        return lambda x, indices, axis=None: np.ascontiguousarray(x).ravel()[indices]
    ax %= x.ndim
    return _compile(f"def impl(x, indices, axis=None):\n    return x[{_take_index_src(ax, x.ndim)}]\n", "impl")


@_register
def untake_along(g, x, indices, axis=None):
    """Zeros like ``x`` with ``g`` added where ``np.take(x, indices, axis)`` read (repeated indices add up)."""
    out = np.zeros_like(x)
    if axis is None:
        np.add.at(out.reshape(-1), indices, g)
        return out
    ax = axis % np.ndim(x)
    return index_add(out, (slice(None),) * ax + (indices,), g)


@overload(untake_along, prefer_literal=True)
def _untake_along_ov(g, x, indices, axis=None):
    ax = _literal(axis, "axis")
    if ax is None:
        def flat(g, x, indices, axis=None):
            out = np.zeros(x.size, x.dtype)
            index_add(out, indices, g)
            return out.reshape(x.shape)
        return flat
    ax %= x.ndim
    return _compile(f"def impl(g, x, indices, axis=None):\n"
                    f"    return index_add(np.zeros_like(x), {_take_index_src(ax, x.ndim)}, g)\n", "impl",
                    {"index_add": index_add})


@_register
def written(dx, idx):
    """``dx[idx]`` where each element of ``x`` written by ``x[idx] = v`` counts once: for a repeated index
    only its last occurrence (the write that stays) gets the cotangent, earlier ones get zero."""
    piece = np.array(dx[idx], copy=True)
    if _basic_index(idx):
        return piece
    pos = np.arange(dx.size).reshape(dx.shape)[idx].ravel()
    _, first_from_end = np.unique(pos[::-1], return_index=True)
    keep = np.zeros(pos.size, dtype=bool)
    keep[pos.size - 1 - first_from_end] = True
    piece.reshape(-1)[~keep] = 0
    return piece


@_register
def written_cast(g, x):
    """The cotangent ``g`` of a value written into array ``x`` (``x[idx] = v``), or zero where ``x`` holds integers
    or booleans: the write casts the value to them, a piecewise constant."""
    kind = x.dtype.kind if type(x) is _ndarray or isinstance(x, np.generic) else np.asarray(x).dtype.kind
    if kind in "fc":
        return g
    return np.zeros_like(g) if isinstance(g, np.ndarray) else 0.0 * g


@overload(written_cast)
def _written_cast_ov(g, x):
    dt = x.dtype if isinstance(x, types.Array) else x
    if isinstance(dt, (types.Integer, types.Boolean)):
        if isinstance(g, types.Array):
            return lambda g, x: np.zeros_like(g)
        return lambda g, x: 0.0 * g
    return lambda g, x: g


@overload(written)
def _written_ov(dx, idx):
    parts = idx.types if isinstance(idx, types.BaseTuple) else (idx,)
    if isinstance(dx, types.Array) and len(parts) == dx.ndim and all(isinstance(p, types.Integer) for p in parts):
        return lambda dx, idx: dx[idx]   # one element: a scalar (which has no .copy())
    if _basic_index_type(idx):
        return lambda dx, idx: dx[idx].copy()

    def general(dx, idx):
        piece = dx[idx].copy()
        pos = np.arange(dx.size).reshape(dx.shape)[idx].ravel()
        last = np.full(dx.size, -1, np.int64)
        for k in range(pos.size):
            last[pos[k]] = k
        pf = piece.reshape(-1)
        for k in range(pos.size):
            if last[pos[k]] != k:
                pf[k] = 0
        return piece
    return general


@_register
def index_arg(n):
    """``n`` as an integer argument of ``range``: a float raises TypeError, as Python's range does."""
    return _operator.index(n)


@overload(index_arg)
def _index_arg_ov(n):
    if isinstance(n, (types.Integer, types.Boolean)):
        return lambda n: n
    if isinstance(n, types.Float):
        def impl(n):
            if n == n or n != n:  # always: raise at run time (typed as an int, so range() still types)
                raise TypeError("'float' object cannot be interpreted as an integer")
            return 0
        return impl


# ----------------------------------------------------------------------------
# Tapes (loops)
@njit(cache=True)
def tape_reserve(tape, n):
    """``tape`` with room for at least ``n`` values (grown geometrically, contents kept)."""
    if tape.shape[0] >= n:
        return tape
    m = 2 * tape.shape[0]  # (this module's max/min/sum are the reductions: plain comparisons here)
    if n > m:
        m = n
    new = np.empty(m, dtype=tape.dtype)
    for i in range(tape.shape[0]):   # (a slice assignment compiles Numba's shape-mismatch message: seconds, cold)
        new[i] = tape[i]
    return new


# ----------------------------------------------------------------------------
# Binomial checkpointing (Griewank's revolve) of a loop of n steps with s snapshots: a schedule of actions read
# by a checkpointed loop's generated code, a few at a time. The state is one int64 array:
# [A, B, sp, b, cur, s, n, (sp, b, split) of the last split computed, the split being advanced to, pos[0..s]]:
# the last advance's steps (from A to B), the top of the snapshot stack, the end of the steps still to reverse
# above it, the step the loop state is at (-1: unknown), and the stack of the steps whose states are
# snapshotted. A snapshot at step a with s - 1 - sp snapshots free reverses steps [a, b): by advancing to a split
# point m and snapshotting it (m - a as small as the fewest repetitions allow: steps [m, b) are reversed with one
# snapshot fewer and the same repetition number r, steps [a, m) with r - 1), or with no snapshot free, by
# restoring a and advancing to each step before reversing it. Actions (flags of revolve_next, run in this order
# when one call gives several): drop the last snapshot (8), restore the last snapshot (4), advance from step A to
# B untaped (1), snapshot (2), reverse step b (16: re-run it taped, run its adjoint).
RV_ADVANCE, RV_TAKESHOT, RV_RESTORE, RV_RELEASE, RV_YOUTURN = 1, 2, 4, 8, 16


@register_jitable
def _rv_beta(s, r, cap):
    """C(s + r, s): the steps s snapshots reverse when no step is advanced more than r times (cap + 1 when more
    than cap)."""
    if s <= 0:
        return 1
    c = 1
    for i in range(1, r + 1):
        if c * 1.0 * (s + i) / i > 2.0 * cap:
            return cap + 1
        c = c * (s + i) // i
    return c


@register_jitable
def _rv_split(a, b, s):
    n = b - a
    r = 1
    while _rv_beta(s, r, n) < n:
        r += 1
    m = n - _rv_beta(s - 1, r, n)
    return a + (m if m > 1 else 1)


@register_jitable
def _rv_decide(st):
    """The next action (0 end, 1 advance, 2 snapshot, 3 restore, 4 drop, 5 reverse); changes nothing but the
    split remembered and the advance's target."""
    sp = st[2]
    b = st[3]
    cur = st[4]
    if sp < 0:
        if b > 0 and cur == 0:
            return 2
        return 0
    a = st[11 + sp]
    if b == a:
        return 4
    if cur == b - 1:
        return 5
    free = st[5] - 1 - sp
    if free == 0 or b - a == 1:
        target = b - 1
    elif st[7] == sp and st[8] == b:   # (decided again until its snapshot is taken: restore, advance, snapshot)
        target = st[9]
    else:
        target = _rv_split(a, b, free + 1)
        st[7] = sp
        st[8] = b
        st[9] = target
    if cur < a or cur > target:
        return 3
    if cur < target:
        st[10] = target
        return 1
    return 2


@register_jitable
def _rv_apply(st, act):
    if act == 2:
        st[2] += 1
        st[11 + st[2]] = st[4]
    elif act == 1:
        st[0] = st[4]
        st[1] = st[10]
        st[4] = st[10]
    elif act == 3:
        st[4] = st[11 + st[2]]
    elif act == 4:
        st[2] -= 1
    elif act == 5:
        st[3] -= 1
        st[4] = -1


@register_jitable
def _rv_init(n, s):
    if s > n:   # (this module's max/min are the reductions: plain comparisons here)
        s = n
    if s < 1:
        s = 1
    st = np.zeros(12 + s, dtype=np.int64)
    st[2] = -1
    st[7] = -2
    st[3] = n
    st[5] = s
    st[6] = n
    return st


@register_jitable
def _rv_shot(st):
    while True:
        act = _rv_decide(st)
        if act == 1:
            _rv_apply(st, act)
        elif act == 2:
            _rv_apply(st, act)
            return st[4]
        else:
            return -1


# (the entry points call no other dispatcher: a cached kernel calling one is not cached, "dynamic globals")
@njit(cache=True)
def revolve_init(n, s):
    """The state of a binomial schedule reversing ``n`` steps with ``s`` snapshots (at least 1, at most n used),
    before the forward run: :func:`revolve_shot` gives the steps it snapshots."""
    return _rv_init(n, s)


@njit(cache=True)
def revolve_shot(st):
    """The forward run's next step to snapshot (-1: none left); the run itself does the advances."""
    return _rv_shot(st)


@njit(cache=True)
def revolve_sweep(n, s):
    """The state of the schedule as the reverse sweep starts: the forward run's snapshots taken, the loop state
    unknown (the run went on to step n)."""
    st = _rv_init(n, s)
    while _rv_shot(st) >= 0:
        pass
    st[4] = -1
    return st


@njit(cache=True)
def revolve_next(st):
    """The sweep's next actions, as flags (0: done), to run in this order: 8 drop the last snapshot, 4 restore the
    last snapshot, 1 advance from step st[0] to st[1] (untaped), 2 snapshot, 16 reverse step st[3] (re-run it
    taped, run its adjoint; always the last of a call). One call gives as many as follow each other in that
    order (a kernel call costs more than deciding an action)."""
    ops = 0
    last = -1
    while True:
        act = _rv_decide(st)
        if act == 0:
            return ops
        rank = 2 if act == 1 else 3 if act == 2 else 1 if act == 3 else 0 if act == 4 else 4
        if rank <= last:
            return ops
        _rv_apply(st, act)
        ops |= 1 if act == 1 else 2 if act == 2 else 4 if act == 3 else 8 if act == 4 else 16
        if act == 5:
            return ops
        last = rank


@njit(cache=True)
def revolve_plan(trips, tape, snap, budget):
    """``(steps per segment, snapshots)`` for a loop of ``trips`` trips whose one trip pushes ``tape`` bytes and
    whose state is ``snap`` bytes, within ``budget`` bytes: the two-level scheme (sqrt(trips) trips a segment, a
    snapshot per segment: one more forward run) when it fits; else the segment length (powers of two) and
    snapshots (what the budget leaves) of the binomial schedule with the fewest recomputed trips; when none
    fits, one trip a segment and the fewest snapshots that keep every trip's recomputations under 32."""
    out = np.zeros(2, dtype=np.int64)
    if tape < 1:
        tape = 1
    if snap < 1:
        snap = 1
    if trips <= 0:
        out[0] = 1
        out[1] = 1
        return out
    seg = int(np.sqrt(trips))
    if seg < 1:
        seg = 1
    n = (trips + seg - 1) // seg
    if n * snap + seg * tape <= budget:
        out[0] = seg
        out[1] = n
        return out
    best = -1.0
    seg = 1
    while seg <= trips:
        s = (budget - seg * tape) // snap
        n = (trips + seg - 1) // seg
        if s >= 1:
            if s > n:
                s = n
            r = 1
            while _rv_beta(s, r, n) < n:
                r += 1
            cost = (r * n - _rv_beta(s + 1, r - 1, r * n)) * 1.0 * seg   # (Griewank's minimal count of advances)
            if best < 0 or cost < best:
                best = cost
                out[0] = seg
                out[1] = s
        seg *= 2
    if best < 0:
        s = 1
        while _rv_beta(s, 32, trips) < trips:
            s += 1
        out[0] = 1
        out[1] = s
    return out


@_register
def tape_new(x, n):
    """A tape of ``n`` slots holding values like ``x`` (scalar or array)."""
    return np.empty((n,) + np.shape(x), dtype=np.result_type(x))


@overload(tape_new)
def _tape_new_ov(x, n):
    if _is_scalar_type(x):
        dt = numpy_support.as_dtype(x)
        return lambda x, n: np.empty(n, dtype=dt)
    return lambda x, n: np.empty((n,) + x.shape, dtype=x.dtype)


# ----------------------------------------------------------------------------
try:  # neural-network kernels (conv, pools, activations, losses)
    from .cpu_nn import *  # noqa: F401,F403
    from . import cpu_nn as _cpu_nn
except ImportError as _e:  # pragma: no cover
    if getattr(_e, "name", "") not in ("funcgrad.kernels.cpu_nn",):
        raise
    _cpu_nn = None
from .cpu_shape import *  # noqa: F401,F403,E402  (shape, assembly and contraction kernels)

from .cpu_math import *  # noqa: E402,F401,F403  (NumPy math: elementwise functions, statistics, scans, sorting)
from .cpu_special import *  # noqa: F401,F403,E402  scipy.special / scipy.stats kernels (Python only)


from .cpu_forward import *  # noqa: E402,F401,F403  (kernels of the forward pass's primitives)
from .cpu_linalg import *  # noqa: F401,F403,E402  (numpy.linalg and scipy.linalg kernels)
from .cpu_fft import *  # noqa: E402,F401,F403  (complex numbers, numpy.fft, scipy.signal.convolve)


def python_namespace():
    """This namespace with every Numba dispatcher replaced by its Python source function."""
    ns = _pytypes.SimpleNamespace()
    g = globals()
    for k, v in g.items():
        if k.startswith("__"):
            continue
        setattr(ns, k, getattr(v, "py_func", v))
    return ns


# --------------------------------------------------------------------------- scipy.special in nopython mode
# erf, erfc, expit and logit have Numba implementations (math.erf / math.erfc and SciPy's own formulas for the
# logistic ones), so code calling them compiles whole; SciPy's dtypes: a float32 array or number stays float32,
# integers give float64. Complex arguments have none (jit="auto" runs such code as Python).
def _erf_scalar(x):
    return math.erf(x)


def _erfc_scalar(x):
    return math.erfc(x)


def _expit_scalar(x):
    return 1.0 / (1.0 + math.exp(-x))   # (scipy.special's expit: 1 / (1 + exp(-x)))


def _logit_scalar(x):
    return math.log(x / (1.0 - x))      # (scipy.special's logit: log(x / (1 - x)))


def _special_overload(scalar):
    f = njit(scalar, cache=True)

    def ov(x):
        if isinstance(x, types.Array) and isinstance(x.dtype, (types.Float, types.Integer, types.Boolean)):
            f32 = x.dtype == types.float32

            def impl(x):
                out = np.empty(x.shape, np.float32 if f32 else np.float64)
                flat_in = x.reshape(-1) if x.flags.c_contiguous else x.copy().reshape(-1)
                flat_out = out.reshape(-1)
                for i in range(flat_in.size):
                    flat_out[i] = f(flat_in[i])
                return out
            return impl
        if isinstance(x, types.Float) and x == types.float32:
            return lambda x: np.float32(f(x))
        if isinstance(x, (types.Float, types.Integer, types.Boolean)):
            return lambda x: f(x)
        return None
    return ov


for _fn, _scalar in ((erf, _erf_scalar), (erfc, _erfc_scalar), (expit, _expit_scalar), (logit, _logit_scalar)):
    overload(_fn)(_special_overload(_scalar))


# scipy.special.logsumexp(a, axis, keepdims) without b=: a Numba implementation with SciPy's handling of the
# ends (the maximum, where not finite, is taken as 0: all -inf gives -inf, an inf gives inf, a nan nan), for
# axis None or one axis and keepdims known when compiling; other forms still run as Python
@njit(cache=True)
def _scipy_lse3(x3):
    O, n, I = x3.shape
    out = np.empty((O, I), x3.dtype)
    for o in range(O):
        for k in range(I):
            m = x3[o, 0, k] if n else -np.inf
            for j in range(1, n):
                v = x3[o, j, k]
                if v > m or v != v:
                    m = v
                    if v != v:
                        break
            if not np.isfinite(m):
                m = 0.0
            s = 0.0
            for j in range(n):
                s += math.exp(x3[o, j, k] - m)
            out[o, k] = math.log(s) + m
    return out


def _axis_set_one(shape, ax):
    return tuple(1 if k == ax else s for k, s in enumerate(shape))


if _cpu_nn is not None:
    from numba.np.unsafe.ndarray import to_fixed_tuple as _to_fixed_tuple

    @overload(_axis_set_one)
    def _ov_axis_set_one(shape, ax):
        m = len(shape)

        def impl(shape, ax):
            a = np.empty(m, np.int64)
            for i in range(m):
                a[i] = 1 if i == ax else shape[i]
            return _to_fixed_tuple(a, m)
        return impl

    @overload(scipy_logsumexp, prefer_literal=True)
    def _ov_scipy_logsumexp(a, axis=None, keepdims=False):
        if not isinstance(a, types.Array) or not isinstance(a.dtype, (types.Float, types.Integer, types.Boolean)):
            return None
        if isinstance(keepdims, types.BooleanLiteral):
            keep = keepdims.literal_value
        elif keepdims is False or isinstance(keepdims, types.Omitted):   # (left out: its default, False)
            keep = bool(getattr(keepdims, "value", False))
        else:   # (a flag known only when the function runs: results of two ranks)
            return None
        odt = np.float32 if a.dtype == types.float32 else np.float64
        nd = a.ndim
        ones = (1,) * nd
        axis3, drop = _cpu_nn._axis3, _cpu_nn._drop_axis
        if axis is None or isinstance(axis, (types.NoneType, types.Omitted)):
            if keep:
                return lambda a, axis=None, keepdims=False: np.full(
                    ones, _scipy_lse3(np.ascontiguousarray(a).reshape((1, a.size, 1)).astype(odt))[0, 0], odt)
            return lambda a, axis=None, keepdims=False: _scipy_lse3(
                np.ascontiguousarray(a).reshape((1, a.size, 1)).astype(odt))[0, 0]
        if not isinstance(axis, types.Integer):
            return None

        def impl(a, axis=None, keepdims=False):
            ax, O, n, I = axis3(a.shape, axis)
            r = _scipy_lse3(np.ascontiguousarray(a).reshape((O, n, I)).astype(odt))
            if keep:
                return r.reshape(_axis_set_one(a.shape, ax))
            return r.reshape(drop(a.shape, ax))
        if nd == 1 and not keep:   # (one axis of a vector: a number, as SciPy returns)
            def impl1(a, axis=None, keepdims=False):
                axis3(a.shape, axis)
                return _scipy_lse3(np.ascontiguousarray(a).reshape((1, a.size, 1)).astype(odt))[0, 0]
            return impl1
        return impl
