"""NumPy math kernels for the CPU: elementwise functions, statistics, scans, sorting (see funcgrad.ops.numpy_math).

Owns the compute behind the primitives of :mod:`funcgrad.ops.numpy_math` and the
cotangent helpers their VJP templates call (``cumsum_t``, ``diff_t``,
``unpermute``...). Re-exported by :mod:`funcgrad.kernels.cpu`.

Guarantee: every name in ``__all__`` is callable from plain Python on NumPy
arrays and scalars with NumPy's own results (the Python side *is* NumPy where
NumPy has the function), and from inside ``@njit`` code with the same values:

* NumPy's ufuncs that nopython mode supports are used directly (``arcsinh = np.arcsinh``);
* statistics with ``axis``/``keepdims`` (``var``, ``median``, ``nanmean``...) and
  operations along an axis (scans, ``diff``, ``sort``) get an ``overload``
  generated per (rank, axis, keepdims) at typing time (``axis`` arrives as a
  constant): the axes move last, the array is viewed as rows and an ``@njit``
  row kernel runs (:func:`_rows_impl`);
* ``partition`` runs NumPy's own through ``numba.objmode`` (NumPy's introselect
  arrangement is part of the result; Numba's differs).

Permutation cotangents (``unpermute``, ``permute_like``) match values, not
algorithms: ``y`` (a sort or a partition of ``x`` along ``axis``) holds the k-th
smallest element of ``x`` where the stable argsort of ``y`` says, so the cotangent
of ``y`` goes back to the position of the same rank in ``x`` whatever arranged it.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from numba import njit, types
from numba.extending import overload

from .cpu_util import _compile, _is_scalar_type, _literal, _norm_axes

__all__ = [
    # elementwise (NumPy's ufuncs)
    "arcsinh", "arccosh", "arctanh", "exp2", "log2", "log10", "deg2rad", "rad2deg", "fabs", "cbrt", "sinc",
    "logaddexp", "logaddexp2", "hypot", "copysign", "arctan2", "fmax", "fmin", "remainder", "fmod",
    "sinc_deriv", "nan_to_num", "tie_weight",
    # statistics
    "var", "std", "ptp", "nansum", "nanmean", "median", "average", "dof_scale", "median_weights",
    "prod_others", "align_weights", "unalign_weights",
    # scans, differences, sorting
    "cumsum", "cumprod", "cumsum_t", "cumprod_t", "cumprod_jvp", "diff", "diff_t", "sort", "partition",
    "unpermute", "permute_like",
]

_ndarray = np.ndarray

# ----------------------------------------------------------------------------- elementwise
arcsinh = np.arcsinh
arccosh = np.arccosh
arctanh = np.arctanh
exp2 = np.exp2
log2 = np.log2
log10 = np.log10
deg2rad = np.deg2rad
rad2deg = np.rad2deg
fabs = np.fabs
cbrt = np.cbrt
sinc = np.sinc
logaddexp = np.logaddexp
logaddexp2 = np.logaddexp2
hypot = np.hypot
copysign = np.copysign
arctan2 = np.arctan2
fmax = np.fmax
fmin = np.fmin
remainder = np.remainder
fmod = np.fmod


def _tie_scalar(x, y, z):   # branch-free: 5x faster than the if/else form here
    return (x == z) * (1.0 - 0.5 * (x == y))


_TIE = []


def _tie(x, y, z, **kw):
    """The ufunc of _tie_scalar, built at its first use (an eager ``numba.vectorize`` costs seconds at
    ``import funcgrad``, loading Numba's target context)."""
    if not _TIE:
        _TIE.append(numba.vectorize(["float64(float64, float64, float64)", "float32(float32, float32, float32)"],
                                    cache=True)(_tie_scalar))
    return _TIE[0](x, y, z, **kw)


@njit(cache=True, nogil=True)
def _tie_flat_scalar(x, y, z, out):
    """``tie_weight`` over flat arrays, ``y`` a scalar: one compiled pass (the ufunc with a scalar operand
    runs ~10x slower, NumPy's buffered broadcasting of it)."""
    one, half, zero = out.dtype.type(1.0), out.dtype.type(0.5), out.dtype.type(0.0)
    for i in range(x.size):
        xi = x[i]
        out[i] = (half if xi == y else one) if xi == z[i] else zero


@njit(cache=True, nogil=True)
def _tie_flat(x, y, z, out):
    """``tie_weight`` over flat arrays of one length: one compiled pass."""
    one, half, zero = out.dtype.type(1.0), out.dtype.type(0.5), out.dtype.type(0.0)
    for i in range(x.size):
        xi = x[i]
        out[i] = (half if xi == y[i] else one) if xi == z[i] else zero


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def tie_weight(x, y, z):
    """The share of operand ``x`` in ``z = maximum(x, y)`` (or minimum, fmax, fmin): 1 where z is x alone,
    0.5 where x == y (a tie), 0 where z is y (or NaN from y). Shaped like z, in z's dtype (one pass)."""
    if type(z) is _ndarray:
        dt = z.dtype
        if type(x) is _ndarray and x.dtype == dt and dt in _FLOATS and x.shape == z.shape and \
                x.flags.c_contiguous and z.flags.c_contiguous and z.size >= 64:   # ReLU's backward: one pass
            out = np.empty(z.shape, dt)
            if type(y) is _ndarray and y.dtype == dt and y.shape == z.shape and y.flags.c_contiguous:
                _tie_flat(x.reshape(-1), y.reshape(-1), z.reshape(-1), out.reshape(-1))
                return out
            if type(y) in (float, int) or (isinstance(y, np.generic) and y.dtype.kind in "fiu"):
                _tie_flat_scalar(x.reshape(-1), dt.type(y), z.reshape(-1), out.reshape(-1))
                return out
        r = _tie(x, y, z, dtype=dt) if dt.kind == "f" and dt.itemsize in (4, 8) else _tie(x, y, z)
        return r if r.shape == z.shape else np.broadcast_to(r, z.shape).copy()
    return (0.5 if x == y else 1.0) if x == z else 0.0


@overload(tie_weight)
def _tie_weight_ov(x, y, z):
    if _is_scalar_type(z):
        return lambda x, y, z: (0.5 if x == y else 1.0) if x == z else 0.0
    dt = z.dtype
    return lambda x, y, z: ((x == z) * (1.0 - 0.5 * (x == y))).astype(dt)


def _is_none(t):
    """A numba argument type that is None (passed, or an omitted argument whose default is None)."""
    return t is None or isinstance(t, types.NoneType) or (isinstance(t, types.Omitted) and t.value is None)


def _scalar_like(r, x):
    """``r`` as a scalar where ``x`` is a Python or NumPy scalar (NumPy's functions return 0-d arrays)."""
    return r if isinstance(x, np.ndarray) else r[()]


# sinc^(n): a Taylor series near 0 (sum_k (-1)^k pi^2k x^(2k-n) / ((2k+1) (2k-n)!)), elsewhere the
# recurrence from x f(x) = sin(pi x) / pi: x f^(m) + m f^(m-1) = pi^(m-1) sin(pi x + m pi / 2)
_SINC_SERIES_MAX = 1.5


def sinc_deriv(x, n=1):
    """The ``n``-th derivative of ``np.sinc`` (``sin(pi x) / (pi x)``), exact at 0 too."""
    xa = np.asarray(x)
    dt = xa.dtype if xa.dtype.kind == "f" else np.dtype(np.float64)
    xf = xa.astype(np.float64)
    out = np.empty(xf.shape)
    small = np.abs(xf) < _SINC_SERIES_MAX
    xs = xf[small]
    acc = np.zeros(xs.shape)
    for k in range((n + 1) // 2, 26 + n):
        acc += (-1.0) ** k * math.pi ** (2 * k) * xs ** (2 * k - n) / ((2 * k + 1) * math.factorial(2 * k - n))
    out[small] = acc
    xl = xf[~small]
    f = np.sinc(xl)
    for m in range(1, n + 1):
        f = (math.pi ** (m - 1) * np.sin(math.pi * xl + m * math.pi / 2) - m * f) / xl
    out[~small] = f
    return _scalar_like(out.astype(dt), x)


@njit(cache=True)
def _sinc_deriv1(x, n):
    if abs(x) < _SINC_SERIES_MAX:
        acc = 0.0
        for k in range((n + 1) // 2, 26 + n):
            fac = 1.0
            for j in range(2, 2 * k - n + 1):
                fac *= j
            sgn = -1.0 if k % 2 else 1.0
            acc += sgn * math.pi ** (2 * k) * x ** (2 * k - n) / ((2 * k + 1) * fac)
        return acc
    f = np.sinc(x)
    for m in range(1, n + 1):
        f = (math.pi ** (m - 1) * math.sin(math.pi * x + m * math.pi / 2) - m * f) / x
    return f


@overload(sinc_deriv)
def _sinc_deriv_ov(x, n=1):
    if _is_scalar_type(x):
        return lambda x, n=1: _sinc_deriv1(float(x), n)
    dt = x.dtype

    def impl(x, n=1):
        xr = x.ravel()
        out = np.empty(xr.size, dt)
        for i in range(xr.size):
            out[i] = _sinc_deriv1(float(xr[i]), n)
        return out.reshape(x.shape)
    return impl


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """``np.nan_to_num`` (always on a copy: the differentiated input stays as it was)."""
    return np.nan_to_num(x, copy=True, nan=nan, posinf=posinf, neginf=neginf)


@overload(nan_to_num)
def _nan_to_num_ov(x, copy=True, nan=0.0, posinf=None, neginf=None):
    dt = x.dtype if isinstance(x, types.Array) else x
    if not isinstance(dt, types.Float):
        return None
    big = repr(float(np.finfo(np.dtype(str(dt))).max))
    hi = big if _is_none(posinf) else "posinf"
    lo = f"-{big}" if _is_none(neginf) else "neginf"
    one = f"(nan if v != v else ({hi} if v == np.inf else ({lo} if v == -np.inf else v)))"
    if _is_scalar_type(x):
        return _compile(f"def impl(x, copy=True, nan=0.0, posinf=None, neginf=None):\n    v = x\n"
                        f"    return {one}\n", "impl")
    src = f"""
def impl(x, copy=True, nan=0.0, posinf=None, neginf=None):
    xr = x.ravel()
    out = np.empty(xr.size, x.dtype)
    for i in range(xr.size):
        v = xr[i]
        out[i] = {one}
    return out.reshape(x.shape)
"""
    return _compile(src, "impl")


# ----------------------------------------------------------------------------- rows along axes
def _perm(ndim, axes):
    """The permutation moving ``axes`` last (in order), and its inverse."""
    kept = [i for i in range(ndim) if i not in axes]
    perm = tuple(kept) + tuple(axes)
    inv = tuple(int(i) for i in np.argsort(perm))
    return kept, perm, inv


def _rows_impl(sig, arrays, ndim, axes, call, out, keepdims=False, env=None, pre=(), floats=()):
    """Nopython source: each of ``arrays`` (same rank) with ``axes`` moved last and viewed as rows
    ``<a>2`` of shape (m, n); ``call`` (an expression over them) computes the rows of the result.

    ``out`` is ``"rows"`` (one axis: the result's rows may have a new length; several axes: the
    same shape) or ``"reduce"`` (``call`` gives one value per row; ``keepdims`` as NumPy's). The arrays
    named in ``floats`` are converted to float64 first (statistics of integers are floats).
    """
    kept, perm, inv = _perm(ndim, axes)
    nk = len(kept)
    first = arrays[0]
    lines = [f"def impl({sig}):"] + [f"    {p}" for p in pre]
    lines.append("    m = " + (" * ".join(f"{first}.shape[{k}]" for k in kept) or "1"))
    for a in arrays:
        n = " * ".join(f"{a}.shape[{k}]" for k in axes) or "1"
        cast = ".astype(np.float64)" if a in floats else ""
        lines.append(f"    {a}2 = np.ascontiguousarray(np.transpose({a}, {perm})){cast}.reshape((m, {n}))")
    lines.append(f"    r2 = {call}")
    if out == "reduce":
        if keepdims:
            shape = "(" + "".join("1, " if i in axes else f"{first}.shape[{i}], " for i in range(ndim)) + ")"
        else:
            shape = "(" + "".join(f"{first}.shape[{i}], " for i in kept) + ")"
        lines.append("    return r2[0]" if (not keepdims and not kept) else f"    return r2.reshape({shape})")
    else:
        last = "r2.shape[1], " if len(axes) == 1 else "".join(f"{first}.shape[{k}], " for k in axes)
        shape = "(" + "".join(f"{first}.shape[{k}], " for k in kept) + last + ")"
        lines.append(f"    return np.ascontiguousarray(np.transpose(r2.reshape({shape}), {inv}))")
    return _compile("\n".join(lines) + "\n", "impl", env)


def _axis1(axis, ndim, what):
    """One axis as a non-negative int (``axis`` a literal), or None."""
    ax = _literal(axis, what)
    if ax is None:
        return None
    if not isinstance(ax, int):
        raise TypeError(f"{what} takes one axis (an int), got {ax!r}")
    if not -ndim <= ax < ndim:
        raise ValueError(f"axis {ax} is out of bounds for an array of dimension {ndim}")
    return ax % ndim


def _moved_rows(x, axes):
    """``x`` (NumPy) with ``axes`` moved last and viewed as (m, n) rows, and a function putting
    same-shaped rows back."""
    kept, perm, inv = _perm(np.ndim(x), axes)
    xt = np.transpose(x, perm)
    m = int(np.prod(xt.shape[:len(kept)], dtype=np.int64))
    n = int(np.prod(xt.shape[len(kept):], dtype=np.int64))
    return np.reshape(xt, (m, n)), lambda r2: np.transpose(np.reshape(r2, xt.shape), inv)


# ----------------------------------------------------------------------------- statistics
def _count(x, axis):
    sh = np.shape(x)
    n = 1
    for a in _norm_axes(axis, len(sh)):
        n *= sh[a]
    return n


def dof_scale(x, axis=None, ddof=0, keepdims=False):
    """``1 / (n - ddof)`` for the ``n`` elements each output of a reduction over ``axis`` combines (inf when
    ``n <= ddof``, where NumPy's var is nan or inf). ``keepdims`` is var's, unused."""
    d = _count(x, axis) - ddof
    return 1.0 / d if d > 0 else np.inf


@overload(dof_scale, prefer_literal=True)
def _dof_scale_ov(x, axis=None, ddof=0, keepdims=False):
    if _is_scalar_type(x):
        return lambda x, axis=None, ddof=0, keepdims=False: 1.0 / (1 - ddof) if 1 - ddof > 0 else np.inf
    axes = _norm_axes(_literal(axis, "axis"), x.ndim)
    n = " * ".join(f"x.shape[{a}]" for a in axes) or "1"
    return _compile(f"def impl(x, axis=None, ddof=0, keepdims=False):\n    d = {n} - ddof\n"
                    "    return 1.0 / d if d > 0 else np.inf\n", "impl")


def var(x, axis=None, ddof=0, keepdims=False):
    return np.var(x, axis=axis, ddof=ddof, keepdims=keepdims)


def std(x, axis=None, ddof=0, keepdims=False):
    return np.std(x, axis=axis, ddof=ddof, keepdims=keepdims)


def ptp(x, axis=None, keepdims=False):
    return np.ptp(x, axis=axis, keepdims=keepdims)


def nansum(x, axis=None, keepdims=False):
    return np.nansum(x, axis=axis, keepdims=keepdims)


def nanmean(x, axis=None, keepdims=False):
    return np.nanmean(x, axis=axis, keepdims=keepdims)


# one value per row of x2 (m, n): the groups a reduction over some axes combines
@njit(cache=True)
def _rows_var(x2, ddof):
    m, n = x2.shape
    out = np.empty(m, x2.dtype)
    d = n - ddof
    for i in range(m):
        s = 0.0
        for j in range(n):
            s += x2[i, j]
        mu = s / n
        q = 0.0
        for j in range(n):
            q += (x2[i, j] - mu) * (x2[i, j] - mu)
        out[i] = q / d if d > 0 else q * np.inf
    return out


@njit(cache=True)
def _rows_std(x2, ddof):
    return np.sqrt(_rows_var(x2, ddof))


@njit(cache=True)
def _rows_ptp(x2):
    m, n = x2.shape
    out = np.empty(m, x2.dtype)
    for i in range(m):
        hi = x2[i, 0]
        lo = x2[i, 0]
        for j in range(1, n):
            v = x2[i, j]
            if v != v or hi != hi:
                hi = v if v != v else hi
                lo = hi
            elif v > hi:
                hi = v
            elif v < lo:
                lo = v
        out[i] = hi - lo
    return out


@njit(cache=True)
def _rows_nansum(x2):
    m, n = x2.shape
    out = np.empty(m, x2.dtype)
    for i in range(m):
        s = 0.0
        for j in range(n):
            if x2[i, j] == x2[i, j]:
                s += x2[i, j]
        out[i] = s
    return out


@njit(cache=True)
def _rows_nanmean(x2):
    m, n = x2.shape
    out = np.empty(m, x2.dtype)
    for i in range(m):
        s = 0.0
        c = 0
        for j in range(n):
            if x2[i, j] == x2[i, j]:
                s += x2[i, j]
                c += 1
        out[i] = s / c if c else np.nan
    return out


@njit(cache=True)
def _rows_sum(x2):
    m, n = x2.shape
    out = np.empty(m, x2.dtype)
    for i in range(m):
        s = 0.0
        for j in range(n):
            s += x2[i, j]
        out[i] = s
    return out


@njit(cache=True)
def _rows_mean(x2):
    out = _rows_sum(x2)
    n = x2.shape[1]
    for i in range(out.shape[0]):
        out[i] = out[i] / n
    return out


@njit(cache=True)
def _rows_wmean(a2, w2):
    m, n = a2.shape
    out = np.empty(m, a2.dtype)
    for i in range(m):
        s = 0.0
        sw = 0.0
        for j in range(n):
            s += a2[i, j] * w2[i, j]
            sw += w2[i, j]
        out[i] = s / sw
    return out


def _reduce_src(name, rows, x, axis, keepdims, sig, args=""):
    """An overload's implementation of a statistic of ``x`` over ``axis``: the row kernel ``rows`` per group."""
    if _is_scalar_type(x):   # one group of one element
        return _compile(f"def impl({sig}):\n    return rows(np.full((1, 1), np.float64(x)){args})[0]\n", "impl",
                        {"rows": rows})
    if not isinstance(x, types.Array):
        return None
    axes = _norm_axes(_literal(axis, f"{name}(axis=...)"), x.ndim)
    kd = bool(_literal(keepdims, f"{name}(keepdims=...)"))
    return _rows_impl(sig, ["x"], x.ndim, axes, f"rows(x2{args})", "reduce", kd, {"rows": rows},
                      floats=_not_float(x, "x"))


def _not_float(t, name):
    """``(name,)`` when the numba array type ``t`` holds integers or booleans (their statistics are floats)."""
    return () if isinstance(t.dtype, types.Float) else (name,)


@overload(var, prefer_literal=True)
def _var_ov(x, axis=None, ddof=0, keepdims=False):
    return _reduce_src("var", _rows_var, x, axis, keepdims, "x, axis=None, ddof=0, keepdims=False", ", ddof")


@overload(std, prefer_literal=True)
def _std_ov(x, axis=None, ddof=0, keepdims=False):
    return _reduce_src("std", _rows_std, x, axis, keepdims, "x, axis=None, ddof=0, keepdims=False", ", ddof")


@overload(ptp, prefer_literal=True)
def _ptp_ov(x, axis=None, keepdims=False):
    return _reduce_src("ptp", _rows_ptp, x, axis, keepdims, "x, axis=None, keepdims=False")


@overload(nansum, prefer_literal=True)
def _nansum_ov(x, axis=None, keepdims=False):
    return _reduce_src("nansum", _rows_nansum, x, axis, keepdims, "x, axis=None, keepdims=False")


@overload(nanmean, prefer_literal=True)
def _nanmean_ov(x, axis=None, keepdims=False):
    return _reduce_src("nanmean", _rows_nanmean, x, axis, keepdims, "x, axis=None, keepdims=False")


def _sum_keep(x, axis):
    """``np.sum(x, axis, keepdims=True)`` (a helper of the overloads below)."""
    return np.sum(x, axis=axis, keepdims=True)


@overload(_sum_keep, prefer_literal=True)
def _sum_keep_ov(x, axis):
    return _reduce_src("sum", _rows_sum, x, axis, True, "x, axis")


def median(x, axis=None, keepdims=False):
    return np.median(x, axis=axis, keepdims=keepdims)


@njit(cache=True)
def _rows_median(x2):
    out = np.empty(x2.shape[0], x2.dtype)
    for i in range(x2.shape[0]):
        out[i] = np.median(x2[i])
    return out


@overload(median, prefer_literal=True)
def _median_ov(x, axis=None, keepdims=False):
    if _is_scalar_type(x):
        return lambda x, axis=None, keepdims=False: x + 0.0
    if not isinstance(x, types.Array):
        return None
    axes = _norm_axes(_literal(axis, "median(axis=...)"), x.ndim)
    kd = bool(_literal(keepdims, "median(keepdims=...)"))
    return _rows_impl("x, axis=None, keepdims=False", ["x"], x.ndim, axes, "rows(x2)", "reduce", kd,
                      {"rows": _rows_median}, floats=_not_float(x, "x"))


def median_weights(x, axis=None):
    """Where ``np.median(x, axis)`` reads: 1 at each group's middle element (0.5 at each of the two middle
    elements of an even group), 0 elsewhere; shaped like ``x`` (ties: the stable argsort's choice)."""
    if np.ndim(x) == 0:
        return _scalar_like(np.ones_like(np.asarray(x, dtype=np.result_type(x, 1.0))), x)
    rows, back = _moved_rows(np.asarray(x), _norm_axes(axis, np.ndim(x)))
    n = rows.shape[1]
    w = np.zeros(rows.shape, dtype=np.result_type(rows.dtype, 1.0))
    if n:
        order = np.argsort(rows, axis=1, kind="stable")
        idx = np.arange(rows.shape[0])
        if n % 2:
            w[idx, order[:, n // 2]] = 1.0
        else:
            w[idx, order[:, n // 2 - 1]] = 0.5
            w[idx, order[:, n // 2]] = 0.5
    return back(w)


@njit(cache=True)
def _rows_median_weights(x2):
    m, n = x2.shape
    w = np.zeros((m, n), np.float64)
    for i in range(m):
        if n == 0:
            continue
        order = np.argsort(x2[i], kind="mergesort")
        if n % 2:
            w[i, order[n // 2]] = 1.0
        else:
            w[i, order[n // 2 - 1]] = 0.5
            w[i, order[n // 2]] = 0.5
    return w


@overload(median_weights, prefer_literal=True)
def _median_weights_ov(x, axis=None):
    if _is_scalar_type(x):
        return lambda x, axis=None: 1.0
    axes = _norm_axes(_literal(axis, "axis"), x.ndim)
    dt = x.dtype
    return _rows_impl("x, axis=None", ["x"], x.ndim, axes, "rows(x2).astype(dt)", "rows",
                      env={"rows": _rows_median_weights, "dt": dt})


def prod_others(x, axis=None):
    """For each element of ``x``, the product of the other elements of its group in ``np.prod(x, axis)``
    (computed without division: right where ``x`` has zeros). Shaped like ``x``."""
    if np.ndim(x) == 0:
        return _scalar_like(np.ones_like(np.asarray(x, dtype=np.result_type(x, 1.0))), x)
    rows, back = _moved_rows(np.asarray(x), _norm_axes(axis, np.ndim(x)))
    one = np.ones((rows.shape[0], 1), rows.dtype)
    before = np.concatenate([one, np.cumprod(rows, axis=1)[:, :-1]], axis=1)
    after = np.concatenate([np.cumprod(rows[:, ::-1], axis=1)[:, :-1][:, ::-1], one], axis=1)
    return back(before * after)


@njit(cache=True)
def _rows_prod_others(x2):
    m, n = x2.shape
    out = np.empty((m, n), x2.dtype)
    for i in range(m):
        acc = 1.0
        for j in range(n):
            out[i, j] = acc
            acc *= x2[i, j]
        acc = 1.0
        for j in range(n - 1, -1, -1):
            out[i, j] *= acc
            acc *= x2[i, j]
    return out


@overload(prod_others, prefer_literal=True)
def _prod_others_ov(x, axis=None):
    if _is_scalar_type(x):
        return lambda x, axis=None: 1.0
    axes = _norm_axes(_literal(axis, "axis"), x.ndim)
    return _rows_impl("x, axis=None", ["x"], x.ndim, axes, "rows(x2)", "rows", env={"rows": _rows_prod_others})


# weights of np.average: the same shape as a, or shaped like a's axes (in the order given), broadcast along them
def _weights_axes(axis, ndim):
    ax = (axis,) if isinstance(axis, int) else tuple(axis)
    out = []
    for a in ax:
        if not -ndim <= a < ndim:
            raise ValueError(f"axis {a} is out of bounds for an array of dimension {ndim}")
        out.append(a % ndim)
    return tuple(out)


def _weights_plan(ws, as_, axis):
    """(perm, shape): weights shaped ``ws`` transposed by perm and reshaped to shape broadcast against ``as_``."""
    if axis is None:
        raise TypeError("np.average: axis must be specified when shapes of a and weights differ")
    axes = _weights_axes(axis, len(as_))
    if tuple(ws) != tuple(as_[a] for a in axes):
        raise ValueError("np.average: shape of weights must be consistent with shape of a along specified axis")
    perm = tuple(int(i) for i in np.argsort(axes))
    shape = tuple(n if i in axes else 1 for i, n in enumerate(as_))
    return perm, shape


def align_weights(w, a, axis=None):
    """The weights of ``np.average(a, axis, weights=w)`` broadcast to the shape of ``a`` (ones for None)."""
    if w is None:
        return np.ones_like(np.asarray(a, dtype=np.result_type(a, 1.0))) if np.ndim(a) else 1.0
    ws, as_ = np.shape(w), np.shape(a)
    if ws == as_:
        return w
    perm, shape = _weights_plan(ws, as_, axis)
    return np.broadcast_to(np.reshape(np.transpose(w, perm), shape), as_)


def unalign_weights(g, w, a, axis=None):
    """The adjoint of :func:`align_weights` in ``w``: ``g`` (shaped like ``a``) summed back to the shape of ``w``."""
    ws, as_ = np.shape(w), np.shape(a)
    if ws == as_:
        return g
    perm, _ = _weights_plan(ws, as_, axis)
    axes = _weights_axes(axis, len(as_))
    other = tuple(i for i in range(len(as_)) if i not in axes)
    s = np.sum(g, axis=other) if other else np.asarray(g)
    return np.transpose(s, tuple(int(i) for i in np.argsort(perm)))


@overload(align_weights, prefer_literal=True)
def _align_weights_ov(w, a, axis=None):
    if _is_none(w):
        if _is_scalar_type(a):
            return lambda w, a, axis=None: 1.0
        return lambda w, a, axis=None: np.ones(a.shape, np.float64)
    if _is_scalar_type(a):
        return lambda w, a, axis=None: w
    ax = _literal(axis, "np.average(axis=...)")
    same = "np.ascontiguousarray(w)"
    if ax is None or w.ndim != len(_weights_axes(ax, a.ndim)):   # weights shaped like a (or refused by shape)
        if not isinstance(w, types.Array) or w.ndim != a.ndim:
            raise TypeError("np.average: axis must be specified when shapes of a and weights differ")
        return _compile(f"def impl(w, a, axis=None):\n    return {same}\n", "impl")
    axes = _weights_axes(ax, a.ndim)
    perm = tuple(int(i) for i in np.argsort(axes))
    shape = "(" + "".join(f"a.shape[{i}], " if i in axes else "1, " for i in range(a.ndim)) + ")"
    along = (f"np.ascontiguousarray(np.broadcast_to(np.ascontiguousarray(np.transpose(w, {perm})).reshape({shape}), "
             "a.shape))")
    if w.ndim != a.ndim:
        return _compile(f"def impl(w, a, axis=None):\n    return {along}\n", "impl")
    # as many weights axes as a's (axis names them all): NumPy takes w as shaped like a when the shapes are equal
    return _compile(f"def impl(w, a, axis=None):\n    if w.shape == a.shape:\n        return {same}\n"
                    f"    return {along}\n", "impl")


@overload(unalign_weights, prefer_literal=True)
def _unalign_weights_ov(g, w, a, axis=None):
    if _is_scalar_type(a):
        return lambda g, w, a, axis=None: g
    ax = _literal(axis, "np.average(axis=...)")
    same = "np.ascontiguousarray(g)"
    if ax is None or w.ndim != len(_weights_axes(ax, a.ndim)):
        return _compile(f"def impl(g, w, a, axis=None):\n    return {same}\n", "impl")
    axes = _weights_axes(ax, a.ndim)
    other = tuple(i for i in range(a.ndim) if i not in axes)
    inv = tuple(int(i) for i in np.argsort(np.argsort(axes)))
    sshape = "(" + "".join(f"a.shape[{i}], " for i in sorted(axes)) + ")"
    sg = f"sum_keep(g, {other!r})" if other else "g"
    along = f"np.ascontiguousarray(np.transpose(np.ascontiguousarray({sg}).reshape({sshape}), {inv}))"
    if w.ndim != a.ndim:
        return _compile(f"def impl(g, w, a, axis=None):\n    return {along}\n", "impl", {"sum_keep": _sum_keep})
    return _compile(f"def impl(g, w, a, axis=None):\n    if w.shape == a.shape:\n        return {same}\n"
                    f"    return {along}\n", "impl", {"sum_keep": _sum_keep})


def average(a, axis=None, weights=None, returned=False, keepdims=False):
    if returned:
        raise ValueError("np.average(..., returned=True) is not supported in a differentiated function: "
                         "compute np.sum(weights, axis) separately")
    return np.average(a, axis=axis, weights=weights, keepdims=keepdims)


@overload(average, prefer_literal=True)
def _average_ov(a, axis=None, weights=None, returned=False, keepdims=False):
    if isinstance(returned, types.Boolean) and not isinstance(returned, types.Literal) or \
            _literal(returned, "np.average(returned=...)"):   # refused at the user's line: "average has no
        return None                                            # nopython implementation for (..., returned=True)"
    if _is_scalar_type(a):
        return lambda a, axis=None, weights=None, returned=False, keepdims=False: a + 0.0
    sig = "a, axis=None, weights=None, returned=False, keepdims=False"
    ax = _literal(axis, "np.average(axis=...)")
    kd = bool(_literal(keepdims, "np.average(keepdims=...)"))
    axes = _norm_axes(ax, a.ndim)
    if _is_none(weights):
        return _rows_impl(sig, ["a"], a.ndim, axes, "rows(a2)", "reduce", kd, {"rows": _rows_mean},
                          floats=_not_float(a, "a"))
    return _rows_impl(sig, ["a", "w"], a.ndim, axes, "rows(a2, w2)", "reduce", kd,
                      {"rows": _rows_wmean, "align": align_weights}, pre=[f"w = align(weights, a, {ax!r})"],
                      floats=_not_float(a, "a") + ("w",))


# ----------------------------------------------------------------------------- scans and differences
def cumsum(x, axis=None):
    return np.cumsum(x, axis=axis)


def cumprod(x, axis=None):
    return np.cumprod(x, axis=axis)


@njit(cache=True)
def _rows_cumsum(x2):
    out = np.empty(x2.shape, x2.dtype)
    for i in range(x2.shape[0]):
        acc = 0.0
        for j in range(x2.shape[1]):
            acc += x2[i, j]
            out[i, j] = acc
    return out


@njit(cache=True)
def _rows_cumprod(x2):
    out = np.empty(x2.shape, x2.dtype)
    for i in range(x2.shape[0]):
        acc = 1.0
        for j in range(x2.shape[1]):
            acc *= x2[i, j]
            out[i, j] = acc
    return out


@njit(cache=True)
def _rows_rcumsum(g2):
    out = np.empty(g2.shape, g2.dtype)
    for i in range(g2.shape[0]):
        acc = 0.0
        for j in range(g2.shape[1] - 1, -1, -1):
            acc += g2[i, j]
            out[i, j] = acc
    return out


def _scan_ov(rows, npfn):
    def ov(x, axis=None):
        if _is_scalar_type(x):
            return lambda x, axis=None: npfn(np.full(1, x))
        if not isinstance(x, types.Array):
            return None
        ax = _axis1(axis, x.ndim, "axis")
        if isinstance(x.dtype, types.Boolean) or isinstance(x.dtype, types.Integer) and x.dtype.bitwidth < 64:
            # NumPy scans booleans and small ints as int64 (np.cumsum(x > 0, axis=1) counts); the row kernels
            # keep the input's dtype: scan the widened array
            again = cumsum if npfn is np.cumsum else cumprod
            wide = "np.uint64" if isinstance(x.dtype, types.Integer) and not x.dtype.signed else "np.int64"
            return _compile(f"def impl(x, axis=None):\n    return _again(x.astype({wide}), {ax!r})\n", "impl",
                            {"_again": again})
        if ax is None:
            return lambda x, axis=None: npfn(x)
        return _rows_impl("x, axis=None", ["x"], x.ndim, (ax,), "rows(x2)", "rows", env={"rows": rows})
    return ov


overload(cumsum, prefer_literal=True)(_scan_ov(_rows_cumsum, np.cumsum))
overload(cumprod, prefer_literal=True)(_scan_ov(_rows_cumprod, np.cumprod))


def cumsum_t(g, x, axis=None):
    """The adjoint of ``np.cumsum(x, axis)``: sums of ``g`` from each position to the end (``axis=None``:
    over the flattened array), shaped like ``x``."""
    g = np.asarray(g)
    if axis is None:
        r = np.cumsum(g.reshape(-1)[::-1])[::-1]
        return _scalar_like(np.reshape(r, np.shape(x)), x)
    ax = axis % g.ndim
    return np.flip(np.cumsum(np.flip(g, ax), axis=ax), ax)


@overload(cumsum_t, prefer_literal=True)
def _cumsum_t_ov(g, x, axis=None):
    ax = _axis1(axis, _nd(x), "axis")
    if ax is None:
        if _is_scalar_type(x):
            return lambda g, x, axis=None: g[0]
        return lambda g, x, axis=None: _rows_rcumsum(np.ascontiguousarray(g).reshape((1, g.size))).reshape(x.shape)
    return _rows_impl("g, x, axis=None", ["g"], g.ndim, (ax,), "rows(g2)", "rows", env={"rows": _rows_rcumsum})


def _nd(t):
    return t.ndim if isinstance(t, types.Array) else 0


def cumprod_t(g, x, axis=None):
    """The adjoint of ``np.cumprod(x, axis)`` at ``x`` applied to ``g``: ``sum_{j>=i} g_j prod_{k<=j, k!=i} x_k``,
    computed without division (right where ``x`` has zeros). Shaped like ``x``."""
    g = np.asarray(g)
    xa = np.asarray(x)
    if axis is None:
        r = _cumprod_t_rows(g.reshape(1, -1), xa.reshape(1, -1))[0]
        return _scalar_like(np.reshape(r, np.shape(x)), x)
    ax = axis % xa.ndim
    gm, xm = np.moveaxis(g, ax, -1), np.moveaxis(xa, ax, -1)
    return np.moveaxis(_cumprod_t_rows(gm, xm), -1, ax)


def _cumprod_t_rows(g, x):
    """(NumPy) the cumprod adjoint along the last axis: before_i * S_i, S_i = g_i + x_{i+1} S_{i+1}."""
    n = x.shape[-1]
    if n == 0:
        return np.zeros(np.broadcast_shapes(g.shape, x.shape), np.result_type(g, x))
    one = np.ones(x.shape[:-1] + (1,), x.dtype)
    before = np.concatenate([one, np.cumprod(x, axis=-1)[..., :-1]], axis=-1)
    s = np.empty(np.broadcast_shapes(g.shape, x.shape), np.result_type(g, x))
    s[..., n - 1] = g[..., n - 1]
    for i in range(n - 2, -1, -1):
        s[..., i] = g[..., i] + x[..., i + 1] * s[..., i + 1]
    return before * s


@njit(cache=True)
def _rows_cumprod_t(g2, x2):
    m, n = x2.shape
    out = np.empty((m, n), x2.dtype)
    for i in range(m):
        s = 0.0
        for j in range(n - 1, -1, -1):
            s = g2[i, j] + (x2[i, j + 1] * s if j + 1 < n else 0.0)
            out[i, j] = s
        before = 1.0
        for j in range(n):
            out[i, j] *= before
            before *= x2[i, j]
    return out


@overload(cumprod_t, prefer_literal=True)
def _cumprod_t_ov(g, x, axis=None):
    ax = _axis1(axis, _nd(x), "axis")
    if ax is None:
        if _is_scalar_type(x):
            return lambda g, x, axis=None: g[0]
        return lambda g, x, axis=None: _rows_cumprod_t(np.ascontiguousarray(g).reshape((1, g.size)),
                                                        np.ascontiguousarray(x).reshape((1, x.size))).reshape(x.shape)
    return _rows_impl("g, x, axis=None", ["g", "x"], x.ndim, (ax,), "rows(g2, x2)", "rows",
                      env={"rows": _rows_cumprod_t})


def cumprod_jvp(v, x, axis=None):
    """The derivative of ``np.cumprod(x, axis)`` along ``v``: ``sum_{i<=j} v_i prod_{k<=j, k!=i} x_k``,
    computed without division (right where ``x`` has zeros). Shaped like ``np.cumprod(x, axis)``."""
    v = np.asarray(v)
    xa = np.asarray(x)
    if axis is None:
        return _cumprod_jvp_rows(v.reshape(1, -1), xa.reshape(1, -1))[0]
    ax = axis % xa.ndim
    return np.moveaxis(_cumprod_jvp_rows(np.moveaxis(v, ax, -1), np.moveaxis(xa, ax, -1)), -1, ax)


def _cumprod_jvp_rows(v, x):
    """(NumPy) along the last axis: q_j = x_j q_{j-1} + v_j prod_{k<j} x_k."""
    n = x.shape[-1]
    q = np.empty(np.broadcast_shapes(v.shape, x.shape), np.result_type(v, x))
    if n == 0:
        return q
    before = np.ones(x.shape[:-1], x.dtype)
    acc = np.zeros(q.shape[:-1], q.dtype)
    for j in range(n):
        acc = x[..., j] * acc + v[..., j] * before
        q[..., j] = acc
        before = before * x[..., j]
    return q


@njit(cache=True)
def _rows_cumprod_jvp(v2, x2):
    m, n = x2.shape
    out = np.empty((m, n), x2.dtype)
    for i in range(m):
        acc = 0.0
        before = 1.0
        for j in range(n):
            acc = x2[i, j] * acc + v2[i, j] * before
            out[i, j] = acc
            before *= x2[i, j]
    return out


@overload(cumprod_jvp, prefer_literal=True)
def _cumprod_jvp_ov(v, x, axis=None):
    if _is_scalar_type(x):
        return lambda v, x, axis=None: np.full(1, v)
    ax = _axis1(axis, x.ndim, "axis")
    if ax is None:
        return lambda v, x, axis=None: _rows_cumprod_jvp(np.ascontiguousarray(v).reshape((1, v.size)),
                                                          np.ascontiguousarray(x).reshape((1, x.size)))[0]
    return _rows_impl("v, x, axis=None", ["v", "x"], x.ndim, (ax,), "rows(v2, x2)", "rows",
                      env={"rows": _rows_cumprod_jvp})


def diff(x, n=1, axis=-1):
    return np.diff(x, n=n, axis=axis)


@njit(cache=True)
def _rows_diff(x2, n):
    m, L = x2.shape
    k = L - n if L > n else 0
    out = np.empty((m, k), x2.dtype)
    buf = np.empty(L, x2.dtype)
    for i in range(m):
        for j in range(L):
            buf[j] = x2[i, j]
        ln = L
        for _ in range(n):
            if ln == 0:
                break
            for j in range(ln - 1):
                buf[j] = buf[j + 1] - buf[j]
            ln -= 1
        for j in range(k):
            out[i, j] = buf[j]
    return out


@overload(diff, prefer_literal=True)
def _diff_ov(x, n=1, axis=-1):
    if not isinstance(x, types.Array):
        return None
    ax = _axis1(axis, x.ndim, "diff(axis=...)")
    return _rows_impl("x, n=1, axis=-1", ["x"], x.ndim, (ax,), "rows(x2, n)", "rows", env={"rows": _rows_diff})


def diff_t(g, x, n=1, axis=-1):
    """The adjoint of ``np.diff(x, n, axis)`` applied to ``g``, shaped like ``x``."""
    g = np.asarray(g)
    ax = axis % np.ndim(x)
    for _ in range(n):
        if g.shape[ax] == 0:
            shape = list(g.shape)
            shape[ax] = 1
            g = np.zeros(shape, g.dtype)
            continue
        first = np.take(g, [0], axis=ax)
        last = np.take(g, [-1], axis=ax)
        g = np.concatenate([-first, -np.diff(g, axis=ax), last], axis=ax)
    if g.shape != np.shape(x):   # n larger than the axis: diff's result was empty
        return np.zeros(np.shape(x), g.dtype)
    return g


@njit(cache=True)
def _rows_diff_t(g2, n, L):
    m, k = g2.shape
    out = np.zeros((m, L), g2.dtype)
    if k + n != L:
        return out
    buf = np.empty(L, g2.dtype)
    for i in range(m):
        for j in range(k):
            buf[j] = g2[i, j]
        ln = k
        for _ in range(n):   # [-g0, g0 - g1, ..., g_{l-2} - g_{l-1}, g_{l-1}] (zero when empty)
            if ln == 0:
                buf[0] = 0.0
                ln = 1
                continue
            buf[ln] = buf[ln - 1]
            for j in range(ln - 1, 0, -1):
                buf[j] = buf[j - 1] - buf[j]
            buf[0] = -buf[0]
            ln += 1
        for j in range(L):
            out[i, j] = buf[j]
    return out


@overload(diff_t, prefer_literal=True)
def _diff_t_ov(g, x, n=1, axis=-1):
    ax = _axis1(axis, x.ndim, "diff(axis=...)")
    return _rows_impl("g, x, n=1, axis=-1", ["g"], g.ndim, (ax,), f"rows(g2, n, x.shape[{ax}])", "rows",
                      env={"rows": _rows_diff_t})


# ----------------------------------------------------------------------------- sorting
def sort(x, axis=-1, kind=None):
    return np.sort(x, axis=axis, kind=kind)


@njit(cache=True)
def _rows_sort(x2):
    out = np.empty(x2.shape, x2.dtype)
    for i in range(x2.shape[0]):
        out[i] = np.sort(x2[i])
    return out


@overload(sort, prefer_literal=True)
def _sort_ov(x, axis=-1, kind=None):
    if not isinstance(x, types.Array):
        return None
    ax = _axis1(axis, x.ndim, "sort(axis=...)")
    if ax is None:
        return lambda x, axis=-1, kind=None: np.sort(x.ravel())
    return _rows_impl("x, axis=-1, kind=None", ["x"], x.ndim, (ax,), "rows(x2)", "rows", env={"rows": _rows_sort})


def partition(x, kth, axis=-1):
    return np.partition(x, kth, axis=axis)


partition.uncacheable = True   # its nopython version calls NumPy through numba.objmode (see pipeline)


@overload(partition, prefer_literal=True)
def _partition_ov(x, kth, axis=-1):
    if not isinstance(x, types.Array):
        return None
    ax = _literal(axis, "partition(axis=...)")
    nd = 1 if ax is None else x.ndim
    spec = f"{x.dtype}[{', '.join([':'] * nd)}]"
    return _compile(f"def impl(x, kth, axis=-1):\n"
                    f"    with numba.objmode(out={spec!r}):\n"
                    f"        out = np.ascontiguousarray(np.partition(x, kth, axis={ax!r}))\n"
                    f"    return out\n", "impl", {"numba": numba})


def _ranks(x, y, axis):
    """(px, py, axis): the stable argsorts of ``x`` and ``y`` along ``axis`` (``None``: x flattened)."""
    xa, ya = np.asarray(x), np.asarray(y)
    if axis is None:
        xa, ya, axis = xa.reshape(-1), ya.reshape(-1), 0
    return np.argsort(xa, axis=axis, kind="stable"), np.argsort(ya, axis=axis, kind="stable"), axis


def unpermute(g, x, y, axis=-1):
    """The cotangent of ``x`` from ``g``, the cotangent of ``y`` (a permutation of ``x`` along ``axis`` such as
    its sort or partition): each element of ``g`` goes back to the element of ``x`` of the same rank."""
    px, py, ax = _ranks(x, y, axis)
    out = np.zeros(px.shape, np.result_type(g))
    np.put_along_axis(out, px, np.take_along_axis(np.reshape(g, py.shape), py, axis=ax), axis=ax)
    return _scalar_like(np.reshape(out, np.shape(x)), x)


def permute_like(h, x, y, axis=-1):
    """``h`` (shaped like ``x``) arranged as ``y`` arranges ``x``: the adjoint of :func:`unpermute` in ``g``."""
    px, py, ax = _ranks(x, y, axis)
    out = np.zeros(py.shape, np.result_type(h))
    np.put_along_axis(out, py, np.take_along_axis(np.reshape(h, px.shape), px, axis=ax), axis=ax)
    return np.reshape(out, np.shape(y))


@njit(cache=True)
def _rows_unpermute(g2, x2, y2):
    out = np.empty(x2.shape, g2.dtype)
    for i in range(x2.shape[0]):
        px = np.argsort(x2[i], kind="mergesort")
        py = np.argsort(y2[i], kind="mergesort")
        for k in range(px.size):
            out[i, px[k]] = g2[i, py[k]]
    return out


@njit(cache=True)
def _rows_permute_like(h2, x2, y2):
    out = np.empty(y2.shape, h2.dtype)
    for i in range(x2.shape[0]):
        px = np.argsort(x2[i], kind="mergesort")
        py = np.argsort(y2[i], kind="mergesort")
        for k in range(px.size):
            out[i, py[k]] = h2[i, px[k]]
    return out


def _permute_ov(rows, first, shape_of):
    sig = f"{first}, x, y, axis=-1"

    def ov(*args):
        a, x, y = args[:3]
        axis = args[3] if len(args) > 3 else None
        if not isinstance(x, types.Array):
            return None
        ax = _axis1(axis, x.ndim, "axis")
        if ax is None:
            return _compile(f"def impl({sig}):\n"
                            f"    r = rows(np.ascontiguousarray({first}).reshape((1, {first}.size)), "
                            "np.ascontiguousarray(x).reshape((1, x.size)), "
                            "np.ascontiguousarray(y).reshape((1, y.size)))\n"
                            f"    return r.reshape({shape_of}.shape)\n", "impl", {"rows": rows})
        return _rows_impl(sig, [first, "x", "y"], x.ndim, (ax,), f"rows({first}2, x2, y2)", "rows", env={"rows": rows})
    return ov


@overload(unpermute, prefer_literal=True)
def _unpermute_ov(g, x, y, axis=-1):
    return _permute_ov(_rows_unpermute, "g", "x")(g, x, y, axis)


@overload(permute_like, prefer_literal=True)
def _permute_like_ov(h, x, y, axis=-1):
    return _permute_ov(_rows_permute_like, "h", "y")(h, x, y, axis)
