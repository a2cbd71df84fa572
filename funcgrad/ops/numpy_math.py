"""NumPy's elementwise functions, statistics, scans and sorting as primitives, each declared once.

Conventions (autograd's, which central differences agree with): ``fmax``/``fmin``
(and ``maximum``/``minimum`` in :mod:`.core`) split a tie evenly between the two
operands; ``median`` and the sorting functions route each output's cotangent to
the input element it was read from; ``std`` where the spread is zero (a constant
group) has derivative zero, as ``np.sign`` at 0. ``prod``'s and ``cumprod``'s first
derivatives are computed without division (right where an input is zero); their
second derivatives divide by the input.

The cotangent helpers (``cumsum_t``, ``cumprod_t``, ``diff_t``, ``unpermute``,
``permute_like``, ``align_weights``...) are primitives too, so every VJP here is
itself differentiable. Their kernels are in :mod:`funcgrad.kernels.cpu_math`.

Signatures are NumPy's minus what cannot be honoured, so those calls are refused where they are
written (``np.diff(..., prepend=)``, ``np.var(..., dtype=)``: "bad arguments"); ``np.average(...,
returned=True)`` is refused when it runs. ``np.nan_to_num(x, copy=False)`` returns a new array (the
input is left as it was). ``np.msort`` is gone from NumPy 2.
"""
from __future__ import annotations

import math

import numpy as np

import funcgrad.kernels.cpu as K
from . import samples as S
from .core import mask, tie_weight, unbroadcast, unreduce  # noqa: F401  (primitives the templates call)
from .registry import RUNTIME, d, define, defvjp, nondiff, t


# --------------------------------------------------------------------- unary elementwise
@defvjp(np.arcsinh, sample=S.unary(), elementwise=True, also=[math.asinh])
def arcsinh(y, x):
    d[x] = d[y] / np.sqrt(x * x + 1)
    t[y] = t[x] / np.sqrt(x * x + 1)


@defvjp(np.arccosh, sample=S.unary((1.2, 3.0)), elementwise=True, also=[math.acosh])
def arccosh(y, x):
    d[x] = d[y] / np.sqrt(x * x - 1)
    t[y] = t[x] / np.sqrt(x * x - 1)


@defvjp(np.arctanh, sample=S.unary("unit"), elementwise=True, also=[math.atanh])
def arctanh(y, x):
    d[x] = d[y] / (1 - x * x)
    t[y] = t[x] / (1 - x * x)


@defvjp(np.exp2, sample=S.unary(), elementwise=True, also=[math.exp2] if hasattr(math, "exp2") else [])
def exp2(y, x):
    d[x] = d[y] * y * 0.6931471805599453          # ln 2
    t[y] = t[x] * y * 0.6931471805599453


@defvjp(np.log2, sample=S.unary("positive"), elementwise=True, also=[math.log2])
def log2(y, x):
    d[x] = d[y] / (x * 0.6931471805599453)
    t[y] = t[x] / (x * 0.6931471805599453)


@defvjp(np.log10, sample=S.unary("positive"), elementwise=True, also=[math.log10])
def log10(y, x):
    d[x] = d[y] / (x * 2.302585092994046)          # ln 10
    t[y] = t[x] / (x * 2.302585092994046)


@defvjp(np.deg2rad, sample=S.unary(), elementwise=True, also=[np.radians, math.radians])
def deg2rad(y, x):
    d[x] = d[y] * 0.017453292519943295             # pi / 180
    t[y] = t[x] * 0.017453292519943295


@defvjp(np.rad2deg, sample=S.unary(), elementwise=True, also=[np.degrees, math.degrees])
def rad2deg(y, x):
    d[x] = d[y] * 57.29577951308232                # 180 / pi
    t[y] = t[x] * 57.29577951308232


@defvjp(np.fabs, sample=S.unary(distinct=True), elementwise=True, also=[math.fabs])
def fabs(y, x):
    d[x] = d[y] * np.sign(x)
    t[y] = t[x] * np.sign(x)


@defvjp(np.cbrt, sample=S.unary("positive"), elementwise=True, also=[math.cbrt] if hasattr(math, "cbrt") else [])
def cbrt(y, x):
    d[x] = d[y] / (3 * y * y)
    t[y] = t[x] / (3 * y * y)


@defvjp(np.sinc, sample=S.unary(), elementwise=True)
def sinc(y, x):
    d[x] = d[y] * sinc_deriv(x, 1)
    t[y] = t[x] * sinc_deriv(x, 1)


def _sample_sinc_deriv(draw, dt, st, array, shapes):
    x = array(draw, shapes(draw), dt)
    if isinstance(x, np.ndarray) and x.size and draw(st.booleans()):
        x.reshape(-1)[0] = 0.0                      # the removable singularity, exactly
    return (x, draw(st.integers(1, 3))), {}


@defvjp(None, sample=S.custom(_sample_sinc_deriv), elementwise=True)
def sinc_deriv(y, x, n=1):
    """The ``n``-th derivative of ``np.sinc`` (a series near 0: exact there too)."""
    d[x] = d[y] * sinc_deriv(x, n + 1)
    t[y] = t[x] * sinc_deriv(x, n + 1)


def _sample_nan_to_num(draw, dt, st, array, shapes):
    """Infinities only with finite replacements (the default, the largest float, overflows the test's sums)."""
    x = array(draw, shapes(draw, 1), dt)
    flat = x.reshape(-1)
    kw = {"nan": 0.5, "posinf": 9.0, "neginf": -9.0} if draw(st.booleans()) else {}
    for v in (np.nan, np.inf, -np.inf) if kw else (np.nan,):
        if draw(st.booleans()):
            flat[draw(st.integers(0, flat.size - 1))] = v
    return (x,), kw


@defvjp(np.nan_to_num, sample=S.custom(_sample_nan_to_num))
def nan_to_num(y, x, copy=True, nan=0.0, posinf=None, neginf=None):
    """Finite elements pass through (derivative 1); NaN and infinities become constants (derivative 0)."""
    d[x] = d[y] * mask(np.isfinite(x), d[y])
    t[y] = t[x] * mask(np.isfinite(x), y)


# --------------------------------------------------------------------- binary elementwise
@defvjp(np.logaddexp, sample=S.binary(), elementwise=True)
def logaddexp(z, x, y):
    d[x] = unbroadcast(d[z] * np.exp(x - z), x)
    d[y] = unbroadcast(d[z] * np.exp(y - z), y)
    t[z] = t[x] * np.exp(x - z) + t[y] * np.exp(y - z)


@defvjp(np.logaddexp2, sample=S.binary(), elementwise=True)
def logaddexp2(z, x, y):
    d[x] = unbroadcast(d[z] * np.exp2(x - z), x)
    d[y] = unbroadcast(d[z] * np.exp2(y - z), y)
    t[z] = t[x] * np.exp2(x - z) + t[y] * np.exp2(y - z)


def _sample_copysign(draw, dt, st, array, shapes):
    """Magnitudes of either sign, away from 0 (the kink of |x|; y's sign flips there)."""
    sx, sy = S.broadcastable_shapes(draw)
    out = []
    for sh in (sx, sy):
        a = np.asarray(array(draw, sh, dt, "positive"))
        flip = np.random.default_rng(draw(st.integers(0, 2**31 - 1))).integers(0, 2, a.shape) * 2 - 1
        out.append((a * flip).astype(dt))
    return tuple(out), {}


@defvjp(np.copysign, sample=S.custom(_sample_copysign), elementwise=True, also=[math.copysign])
def copysign(z, x, y):
    """|x| with y's sign: d/dx is sign(x) * (y's sign), which is sign(x) * sign(z) where x != 0; 0 in y."""
    d[x] = unbroadcast(d[z] * np.sign(x) * np.sign(z), x)
    d[y] = np.zeros_like(y)
    t[z] = t[x] * np.sign(x) * np.sign(z) + 0.0 * t[y]


@defvjp(np.hypot, sample=S.binary("positive", "real"), elementwise=True, also=[math.hypot])
def hypot(z, x, y):
    d[x] = unbroadcast(d[z] * x / z, x)
    d[y] = unbroadcast(d[z] * y / z, y)
    t[z] = (t[x] * x + t[y] * y) / z


@defvjp(np.arctan2, sample=S.binary("real", "positive"), elementwise=True, also=[math.atan2])
def arctan2(z, x1, x2):
    """``arctan2(x1, x2)``: the angle of the point (x2, x1)."""
    d[x1] = unbroadcast(d[z] * x2 / (x1 * x1 + x2 * x2), x1)
    d[x2] = unbroadcast(-d[z] * x1 / (x1 * x1 + x2 * x2), x2)
    t[z] = (t[x1] * x2 - t[x2] * x1) / (x1 * x1 + x2 * x2)


# a tie splits the cotangent evenly (as central differences and autograd do); NaN operands:
# fmax/fmin return the other operand, which then gets the whole cotangent
@defvjp(np.fmax, sample=S.binary(distinct=True), elementwise=True)
def fmax(z, x, y):
    d[x] = unbroadcast(d[z] * tie_weight(x, y, z), x)
    d[y] = unbroadcast(d[z] * tie_weight(y, x, z), y)
    t[z] = t[x] * tie_weight(x, y, z) + t[y] * tie_weight(y, x, z)


@defvjp(np.fmin, sample=S.binary(distinct=True), elementwise=True)
def fmin(z, x, y):
    d[x] = unbroadcast(d[z] * tie_weight(x, y, z), x)
    d[y] = unbroadcast(d[z] * tie_weight(y, x, z), y)
    t[z] = t[x] * tie_weight(x, y, z) + t[y] * tie_weight(y, x, z)


def _sample_mod(draw, dt, st, array, shapes):
    """Operands with ``x / y`` away from integers (where ``mod`` jumps): |x| < |y| / 1.2, x not near 0."""
    sx, sy = S.broadcastable_shapes(draw)
    x = array(draw, sx, dt, (0.1, 0.9))
    y = array(draw, sy, dt, (1.1, 1.9))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    x = x * np.where(rng.random(np.shape(x)) < 0.5, -1.0, 1.0)
    y = y * np.where(rng.random(np.shape(y)) < 0.5, -1.0, 1.0)
    x = float(x) if np.ndim(x) == 0 else x.astype(dt)
    y = float(y) if np.ndim(y) == 0 else y.astype(dt)
    return (x, y), {}


@defvjp(np.remainder, sample=S.custom(_sample_mod), elementwise=True)
def remainder(z, x, y):
    """``np.mod``/``np.remainder``/``x % y``: ``x - floor(x / y) * y``."""
    d[x] = unbroadcast(d[z], x)
    d[y] = unbroadcast(-d[z] * np.floor(x / y), y)
    t[z] = t[x] - t[y] * np.floor(x / y)


@defvjp(np.fmod, sample=S.custom(_sample_mod), elementwise=True, also=[math.fmod])
def fmod(z, x, y):
    """C's fmod: ``x - trunc(x / y) * y`` (the sign of x)."""
    d[x] = unbroadcast(d[z], x)
    d[y] = unbroadcast(-d[z] * np.trunc(x / y), y)
    t[z] = t[x] - t[y] * np.trunc(x / y)


# --------------------------------------------------------------------- statistics
def _reduction_kw(draw, st, shape):
    nd = len(shape)
    kind = draw(st.sampled_from(["none", "int", "tuple"]))
    if kind == "none":
        axis = None
    elif kind == "int":
        axis = draw(st.integers(-nd, nd - 1))
    else:
        axis = tuple(sorted(draw(st.sets(st.integers(0, nd - 1), min_size=1))))
    return axis, draw(st.booleans())


def _count(shape, axis):
    return int(np.prod([shape[a] for a in K._norm_axes(axis, len(shape))], dtype=np.int64))


def _sample_var(draw, dt, st, array, shapes):
    shape = shapes(draw, 1, 3)
    axis, keepdims = _reduction_kw(draw, st, shape)
    ddof = draw(st.integers(0, 2))
    if _count(shape, axis) <= ddof:
        ddof = 0
    return (array(draw, shape, dt),), {"axis": axis, "ddof": ddof, "keepdims": keepdims}


@defvjp(None, sample=S.custom(_sample_var))
def dof_scale(y, x, axis=None, ddof=0, keepdims=False):
    """``1 / (n - ddof)`` for the ``n`` elements each output of a reduction over ``axis`` combines (inf when
    ``n <= ddof``): reads only the shape of x."""
    pass


@defvjp(np.var, sample=S.custom(_sample_var))
def var(y, x, axis=None, ddof=0, keepdims=False):
    """Of complex x, the mean of ``|x - mean|**2`` (real): its cotangent pairs with ``conj(x - mean)``."""
    dev = x - np.mean(x, axis=axis, keepdims=True)
    s = dof_scale(x, axis, ddof)
    d[x] = unreduce(d[y], x, axis, keepdims) * np.conj(dev) * (2 * s)
    t[y] = np.real(np.sum(t[x] * np.conj(dev), axis=axis, keepdims=keepdims)) * (2 * s)


@defvjp(np.std, sample=S.custom(_sample_var))
def std(y, x, axis=None, ddof=0, keepdims=False):
    """Where the spread is zero (a constant group) the derivative is zero (the subgradient)."""
    dev = x - np.mean(x, axis=axis, keepdims=True)
    s = dof_scale(x, axis, ddof)
    d[x] = unreduce(d[y] / (y + (y == 0)), x, axis, keepdims) * np.conj(dev) * s
    t[y] = np.real(np.sum(t[x] * np.conj(dev), axis=axis, keepdims=keepdims)) * s / (y + (y == 0))


@defvjp(np.ptp, sample=S.reduction(distinct=True))
def ptp(y, x, axis=None, keepdims=False):
    """``max - min``; ties share the cotangent evenly, as max's and min's do."""
    hi = mask(x == np.max(x, axis=axis, keepdims=True), x)
    lo = mask(x == np.min(x, axis=axis, keepdims=True), x)
    w = hi / np.sum(hi, axis=axis, keepdims=True) - lo / np.sum(lo, axis=axis, keepdims=True)
    d[x] = unreduce(d[y], x, axis, keepdims) * w
    t[y] = np.sum(t[x] * w, axis=axis, keepdims=keepdims)


def _sample_nan_reduction(draw, dt, st, array, shapes):
    shape = shapes(draw, 1, 3)
    axis, keepdims = _reduction_kw(draw, st, shape)
    x = array(draw, shape, dt)
    if _count(shape, axis) >= 2 and draw(st.booleans()):   # one NaN; every group keeps a number
        x.reshape(-1)[draw(st.integers(0, x.size - 1))] = np.nan
    return (x,), {"axis": axis, "keepdims": keepdims}


@defvjp(np.nansum, sample=S.custom(_sample_nan_reduction))
def nansum(y, x, axis=None, keepdims=False):
    d[x] = unreduce(d[y], x, axis, keepdims) * mask(x == x, x)
    t[y] = np.sum(t[x] * mask(x == x, x), axis=axis, keepdims=keepdims)


@defvjp(np.nanmean, sample=S.custom(_sample_nan_reduction))
def nanmean(y, x, axis=None, keepdims=False):
    m = mask(x == x, x)
    c = np.sum(m, axis=axis, keepdims=keepdims)
    d[x] = unreduce(d[y] / c, x, axis, keepdims) * m
    t[y] = np.sum(t[x] * m, axis=axis, keepdims=keepdims) / c


@defvjp(np.median, sample=S.reduction(distinct=True))
def median(y, x, axis=None, keepdims=False):
    """The cotangent goes to the middle element (half to each of the two middle ones of an even group)."""
    w = median_weights(x, axis)
    d[x] = unreduce(d[y], x, axis, keepdims) * w
    t[y] = np.sum(t[x] * w, axis=axis, keepdims=keepdims)


def _sample_axis_of(draw, dt, st, array, shapes, distinct=False):
    shape = shapes(draw, 1, 3)
    axis, _ = _reduction_kw(draw, st, shape)
    return (array(draw, shape, dt, distinct=distinct),), {"axis": axis}


@defvjp(None, sample=S.custom(lambda draw, dt, st, array, shapes: _sample_axis_of(draw, dt, st, array, shapes, True)))
def median_weights(y, x, axis=None):
    """Where ``np.median(x, axis)`` reads (1, or 0.5 each for an even group), shaped like x; piecewise constant."""
    pass


def _sample_average(draw, dt, st, array, shapes):
    """(a, axis, weights) positionally (weights a parameter of the test's function), keepdims."""
    shape = shapes(draw, 1, 3)
    nd = len(shape)
    kind = draw(st.sampled_from(["none", "same", "axis", "axes"]))
    kw = {"keepdims": draw(st.booleans())}
    a = array(draw, shape, dt)
    if kind in ("none", "same"):
        axis = draw(st.sampled_from([None] + list(range(-nd, nd))))
        return (a, axis, None if kind == "none" else array(draw, shape, dt, "positive")), kw
    if kind == "axis":
        ax = draw(st.integers(-nd, nd - 1))
        return (a, ax, array(draw, (shape[ax],), dt, "positive")), kw
    axes = tuple(draw(st.permutations(range(nd)))[:draw(st.integers(1, nd))])
    return (a, axes, array(draw, tuple(shape[i] for i in axes), dt, "positive")), kw


@defvjp(np.average, sample=S.custom(_sample_average))
def average(y, a, axis=None, weights=None, returned=False, keepdims=False):
    """Differentiable in ``a`` and in ``weights`` (the same shape as a, or a's shape along ``axis``)."""
    w = align_weights(weights, a, axis)
    sw = np.sum(w, axis=axis, keepdims=keepdims)
    d[a] = unreduce(d[y] / sw, a, axis, keepdims) * w
    d[weights] = unalign_weights(unreduce(d[y] / sw, a, axis, keepdims) * (a - unreduce(y, a, axis, keepdims)),
                                 weights, a, axis)
    t[y] = (np.sum(t[a] * w, axis=axis, keepdims=keepdims) + np.sum(
        align_weights(t[weights], a, axis) * (a - unreduce(y, a, axis, keepdims)), axis=axis, keepdims=keepdims)) / sw


def _sample_align(draw, dt, st, array, shapes):
    (a, axis, w), _ = _sample_average(draw, dt, st, array, shapes)
    if w is None:
        w = array(draw, np.shape(a), dt)
    return (w, a), {"axis": axis}


@defvjp(None, sample=S.custom(_sample_align))
def align_weights(y, w, a, axis=None):
    """The weights of ``np.average(a, axis, weights=w)`` broadcast to the shape of ``a`` (ones for None)."""
    d[a] = None   # read for its shape (or ranks, or kind) only
    d[w] = unalign_weights(d[y], w, a, axis)
    t[y] = align_weights(t[w], a, axis)


def _sample_unalign(draw, dt, st, array, shapes):
    (w, a), kw = _sample_align(draw, dt, st, array, shapes)
    return (array(draw, np.shape(a), dt), w, a), kw


@defvjp(None, sample=S.custom(_sample_unalign))
def unalign_weights(y, g, w, a, axis=None):
    """``g`` (shaped like ``a``) summed back to the shape of the weights ``w``: the adjoint of align_weights."""
    d[w] = None   # read for its shape (or ranks, or kind) only
    d[a] = None   # read for its shape (or ranks, or kind) only
    d[g] = align_weights(d[y], a, axis)
    t[y] = unalign_weights(t[g], w, a, axis)


# --------------------------------------------------------------------- scans and differences
def _sample_scan(draw, dt, st, array, shapes, domain="real"):
    shape = shapes(draw, 0, 3)
    axis = None if not shape or draw(st.booleans()) else draw(st.integers(-len(shape), len(shape) - 1))
    return (array(draw, shape, dt, domain),), {"axis": axis}


@defvjp(np.cumsum, sample=S.custom(_sample_scan))
def cumsum(y, x, axis=None):
    """``axis=None``: the flattened array's running sum."""
    d[x] = cumsum_t(d[y], x, axis)
    t[y] = np.cumsum(t[x], axis=axis)


def _sample_scan_t(draw, dt, st, array, shapes):
    (x,), kw = _sample_scan(draw, dt, st, array, shapes)
    return (array(draw, np.shape(np.cumsum(x, axis=kw["axis"])), dt), x), kw


@defvjp(None, sample=S.custom(_sample_scan_t))
def cumsum_t(r, g, x, axis=None):
    """The adjoint of ``np.cumsum(x, axis)``: reversed running sums of ``g``, shaped like ``x``."""
    d[x] = None   # read for its shape (or ranks, or kind) only
    d[g] = np.cumsum(d[r], axis=axis)
    t[r] = cumsum_t(t[g], x, axis)


@defvjp(np.cumprod, sample=S.custom(_sample_scan))
def cumprod(y, x, axis=None):
    d[x] = cumprod_t(d[y], x, axis)
    t[y] = cumprod_jvp(t[x], x, axis)


def _sample_scan_v(draw, dt, st, array, shapes):
    (x,), kw = _sample_scan(draw, dt, st, array, shapes)
    return (array(draw, np.shape(x), dt), x), kw


@defvjp(None, sample=S.custom(_sample_scan_v))
def cumprod_jvp(r, v, x, axis=None):
    """The derivative of ``np.cumprod(x, axis)`` at ``x`` along ``v``: ``sum_{i<=j} v_i prod_{k<=j, k!=i} x_k``
    (no division: right at zeros); its own derivative in ``x`` divides by ``x``."""
    d[v] = cumprod_t(d[r], x, axis)
    d[x] = cumprod_t(d[r] * np.cumsum(v / x, axis=axis), x, axis) - cumsum_t(d[r] * np.cumprod(x, axis=axis), x,
                                                                             axis) * v / (x * x)
    t[r] = cumprod_jvp(t[v], x, axis) + cumprod_jvp(t[x], x, axis) * np.cumsum(v / x, axis=axis) - np.cumprod(
        x, axis=axis) * np.cumsum(v * t[x] / (x * x), axis=axis)


@defvjp(None, sample=S.custom(_sample_scan_t))
def cumprod_t(r, g, x, axis=None):
    """The adjoint of ``np.cumprod(x, axis)`` at ``x`` applied to ``g`` (no division: right at zeros); its own
    derivative in ``x`` divides by ``x``."""
    d[g] = np.cumprod(x, axis=axis) * np.cumsum(d[r] / x, axis=axis)
    d[x] = cumprod_t(g * np.cumsum(d[r] / x, axis=axis), x, axis) - d[r] * r / x
    t[r] = cumprod_t(t[g], x, axis) + cumsum_t(g * cumprod_jvp(t[x], x, axis), x, axis) / x - r * t[x] / x


def _sample_diff(draw, dt, st, array, shapes):
    shape = list(shapes(draw, 1, 3))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    n = draw(st.integers(1, 3))
    shape[axis] = max(shape[axis], n + 1)
    return (array(draw, tuple(shape), dt),), {"n": n, "axis": axis}


@defvjp(np.diff, sample=S.custom(_sample_diff))
def diff(y, x, n=1, axis=-1):
    d[x] = diff_t(d[y], x, n, axis)
    t[y] = np.diff(t[x], n, axis)


def _sample_diff_t(draw, dt, st, array, shapes):
    (x,), kw = _sample_diff(draw, dt, st, array, shapes)
    return (array(draw, np.shape(np.diff(x, **kw)), dt), x), kw


@defvjp(None, sample=S.custom(_sample_diff_t))
def diff_t(r, g, x, n=1, axis=-1):
    """The adjoint of ``np.diff(x, n, axis)`` applied to ``g``, shaped like ``x``."""
    d[x] = None   # read for its shape (or ranks, or kind) only
    d[g] = np.diff(d[r], n, axis)
    t[r] = diff_t(t[g], x, n, axis)


# --------------------------------------------------------------------- sorting
def _sample_sort(draw, dt, st, array, shapes):
    shape = shapes(draw, 1, 3)
    axis = draw(st.sampled_from([None] + list(range(-len(shape), len(shape)))))
    return (array(draw, shape, dt, distinct=True),), {"axis": axis}


@defvjp(np.sort, sample=S.custom(_sample_sort))
def sort(y, x, axis=-1, kind=None):
    """Each output's cotangent goes back to the element it was (``axis=None``: of the flattened array)."""
    d[x] = unpermute(d[y], x, y, axis)
    t[y] = permute_like(t[x], x, y, axis)


def _sample_partition(draw, dt, st, array, shapes):
    shape = shapes(draw, 1, 3)
    axis = draw(st.sampled_from([None] + list(range(-len(shape), len(shape)))))
    n = int(np.prod(shape)) if axis is None else shape[axis]
    kth = draw(st.integers(-n, n - 1)) if draw(st.booleans()) else tuple(sorted(
        draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=3))))
    return (array(draw, shape, dt, distinct=True), kth), {"axis": axis}


@defvjp(np.partition, sample=S.custom(_sample_partition))
def partition(y, x, kth, axis=-1):
    """Each output's cotangent goes back to the element it was, whatever the arrangement NumPy chose."""
    d[x] = unpermute(d[y], x, y, axis)
    t[y] = permute_like(t[x], x, y, axis)


def _sample_permuted(draw, dt, st, array, shapes):
    (x,), kw = _sample_sort(draw, dt, st, array, shapes)
    if kw["axis"] is not None and draw(st.booleans()):
        n = np.shape(x)[kw["axis"]]
        y = np.partition(x, draw(st.integers(0, n - 1)), axis=kw["axis"])
    else:
        y = np.sort(x, axis=kw["axis"])
    return x, y, kw


@defvjp(None, sample=S.custom(lambda draw, dt, st, array, shapes: (
    lambda x, y, kw: ((array(draw, np.shape(y), dt), x, y), kw))(*_sample_permuted(draw, dt, st, array, shapes))))
def unpermute(r, g, x, y, axis=-1):
    """The cotangent of ``x`` from ``g``, the cotangent of ``y`` (``x`` permuted along ``axis``: its sort or a
    partition): each element of g goes back to the element of x of the same rank. Linear in g."""
    d[x] = None   # read for its shape (or ranks, or kind) only
    d[y] = None   # read for its shape (or ranks, or kind) only
    d[g] = permute_like(d[r], x, y, axis)
    t[r] = unpermute(t[g], x, y, axis)


@defvjp(None, sample=S.custom(lambda draw, dt, st, array, shapes: (
    lambda x, y, kw: ((array(draw, np.shape(x), dt), x, y), kw))(*_sample_permuted(draw, dt, st, array, shapes))))
def permute_like(r, h, x, y, axis=-1):
    """``h`` (shaped like ``x``) arranged as ``y`` arranges ``x``: the adjoint of unpermute. Linear in h."""
    d[x] = None   # read for its shape (or ranks, or kind) only
    d[y] = None   # read for its shape (or ranks, or kind) only
    d[h] = unpermute(d[r], x, y, axis)
    t[r] = permute_like(t[h], x, y, axis)


# shape-only kernel helpers the templates call: a differentiated value flowing in contributes nothing
nondiff(K.reduced_count)


# ----------------------------------------------------------------------------- interp
def _interp_check(x, xp, fp, left=None, right=None, period=None):
    if period is not None:
        return ("np.interp(period=...) is not supported in a differentiated function",
                "map x into one period yourself first (np.mod), then call np.interp without period")
    return None


@define(np.interp, check=_interp_check)
def _interp(x, xp, fp, left=None, right=None, period=None):
    """NumPy's piecewise-linear interpolation over primitives: the segment of each ``x`` found by
    ``searchsorted`` (piecewise constant), then ``fp[i] + w * (fp[i + 1] - fp[i])``. Differentiable in ``x``
    (the segment's slope; zero outside ``xp``'s range), ``fp`` and ``xp`` (the knots of the segment), and in
    ``left``/``right``. A repeated knot divides by nothing (the weight is 0 there)."""
    xp = np.asarray(xp)   # (knots and values written as lists)
    fp = np.asarray(fp)
    n = np.shape(xp)[0]
    last = max(n - 2, 0)
    i = np.clip(np.searchsorted(xp, x, side="right") - 1, 0, last)
    j = np.minimum(i + 1, n - 1)
    x0 = xp[i]
    f0 = fp[i]
    gap = xp[j] - x0
    w = np.where(gap > 0, (x - x0) / np.where(gap > 0, gap, 1.0), 0.0)
    y = f0 + w * (fp[j] - f0)
    lo = fp[0] if left is None else left
    hi = fp[n - 1] if right is None else right
    return np.where(x < xp[0], lo, np.where(x > xp[n - 1], hi, np.where(x == xp[n - 1], fp[n - 1], y)))


# ----------------------------------------------------------------------------- quantile, percentile
def _quantile_check(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
                    weights=None, interpolation=None):
    what = "np.quantile/np.percentile"
    if method != "linear" or interpolation is not None:
        return (f"{what} with method={method if interpolation is None else interpolation!r} is not supported in "
                "a differentiated function; the default, method='linear', is", None)
    if out is not None or weights is not None:
        return (f"{what} with {'out=' if out is not None else 'weights='} is not supported in a differentiated "
                "function", None)
    if axis is RUNTIME or not (axis is None or isinstance(axis, int)):
        return (f"{what} over several axes (or an axis known only when the function runs) is not supported in "
                "a differentiated function", "reshape those axes into one first")
    if axis is not None and (q is RUNTIME or np.ndim(q) != 0):
        return (f"{what} of several quantiles along an axis is not supported in a differentiated function",
                "call it once per quantile, or with axis=None")
    return None


@define(np.quantile, check=_quantile_check)
def _quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False):
    if np.any(np.asarray(q) < 0) or np.any(np.asarray(q) > 1):
        raise ValueError("Quantiles must be in the range [0, 1]")
    return _linear_quantile(a, np.asarray(q), axis, keepdims)


@define(np.percentile, check=_quantile_check)
def _percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False):
    if np.any(np.asarray(q) < 0) or np.any(np.asarray(q) > 100):
        raise ValueError("Percentiles must be in the range [0, 100]")
    return _linear_quantile(a, np.asarray(q) / 100, axis, keepdims)


def _linear_quantile(a, q, axis, keepdims):
    """NumPy's 'linear' quantile over primitives: the sorted values (differentiable: sort routes each
    cotangent back to its element) at the two ranks around ``q * (n - 1)``, weighted by its fraction
    (piecewise linear in q too)."""
    if axis is None:
        s = np.sort(np.reshape(a, (-1,)))
        ax = 0
    else:
        s = np.sort(a, axis=axis)
        ax = axis
    n = np.shape(s)[ax]
    pos = q * (n - 1)
    lo = np.minimum(np.floor(pos), n - 1).astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    v0 = np.take(s, lo, axis=ax)
    r = v0 + (pos - lo) * (np.take(s, hi, axis=ax) - v0)
    if keepdims:
        return np.expand_dims(r, ax) if axis is not None else np.reshape(r, np.shape(r) + (1,) * np.ndim(a))
    return r
