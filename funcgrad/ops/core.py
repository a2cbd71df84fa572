"""NumPy's differentiable functions as primitives, each declared once.

``@defvjp(np.f, sample=..., elementwise=...)`` over ``def f(y, x, ...)``
declares a primitive: the template body (``d[x] = ...``) is the VJP the
reverse pass fills in, the forward is the backend kernel ``K.f`` of the same
name. Templates use only primitives, operators and ``.shape``, so the adjoint
is itself differentiable. Broadcasting is undone by ``unbroadcast`` and
reductions by ``unreduce``, both primitives themselves. Indexing keeps the
two-part form (``@primitive`` + ``@vjp``): its forward is Python indexing.
"""
from __future__ import annotations

import math

import numpy as np

import funcgrad.kernels.cpu as K
from . import samples as S
from .registry import alias, d, defvjp, nondiff, primitive, t, vjp

# --------------------------------------------------------------------- helpers
# (primitives with no NumPy key: generated code and templates use them)


def _sample_unbroadcast(draw, dt, st, array, shapes):
    gs = shapes(draw, 0, 3)
    xs = [1 if draw(st.booleans()) else n for n in gs[draw(st.integers(0, len(gs))):]]
    return (array(draw, gs, dt), array(draw, tuple(xs), dt)), {}


@defvjp(None, sample=S.custom(_sample_unbroadcast))
def unbroadcast(y, g, x):
    """Sum ``g`` down to the shape of ``x``: the adjoint of NumPy broadcasting."""
    d[g] = np.broadcast_to(d[y], np.shape(g))
    d[x] = None                  # read for its shape only
    t[y] = unbroadcast(t[g], x)


@defvjp(None, sample=S.custom(lambda draw, dt, st, array, shapes: (
    lambda sh, ax, kd: ((array(draw, np.sum(np.zeros(sh), axis=ax, keepdims=kd).shape, dt), array(draw, sh, dt)),
                        {"axis": ax, "keepdims": kd}))(
    (2, 3), draw(st.sampled_from([None, 0, 1, -1, (0, 1)])), draw(st.booleans()))))
def unreduce(y, g, x, axis=None, keepdims=False):
    """Broadcast a reduction's cotangent ``g`` back to the shape of ``x``."""
    d[g] = np.sum(d[y], axis=axis, keepdims=keepdims)
    d[x] = None                  # read for its shape only
    t[y] = unreduce(t[g], x, axis, keepdims)


def _matmul_shapes(draw, st):
    """Operand shapes for np.matmul: 1-D and 2-D operands, and N-D ones with broadcast batch axes."""
    n, k, m, b, c = (draw(st.integers(1, 3)) for _ in range(5))
    kind = draw(st.sampled_from(["mm", "vm", "mv", "vv", "bmm", "bm", "mb", "bcast", "vb", "bv"]))
    return {"mm": ((n, k), (k, m)), "vm": ((k,), (k, m)), "mv": ((n, k), (k,)), "vv": ((k,), (k,)),
            "bmm": ((b, n, k), (b, k, m)), "bm": ((b, n, k), (k, m)), "mb": ((n, k), (b, k, m)),
            "bcast": ((c, 1, n, k), (b, k, m)), "vb": ((k,), (b, k, m)), "bv": ((b, c, n, k), (k,))}[kind]


def _dot_shapes(draw, st):
    """Operand shapes for np.dot: those of matmul's 1-D and 2-D cases, N-D ones, scalar with array."""
    n, k, m, b = (draw(st.integers(1, 3)) for _ in range(4))
    kind = draw(st.sampled_from(["mm", "vm", "mv", "vv", "nd", "ndnd", "ndv", "vnd", "sa", "as"]))
    return {"mm": ((n, k), (k, m)), "vm": ((k,), (k, m)), "mv": ((n, k), (k,)), "vv": ((k,), (k,)),
            "nd": ((b, n, k), (k, m)), "ndnd": ((b, k), (n, k, m)), "ndv": ((b, n, k), (k,)),
            "vnd": ((k,), (b, k, m)), "sa": ((), (n, m)), "as": ((b, n, k), ())}[kind]


def _tensordot_case(draw, st):
    """Operand shapes and an ``axes`` for np.tensordot: an int (0, 1, 2) or a pair of lists in any order."""
    free_a = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 2)))]
    free_b = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 2)))]
    summed = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(0 if free_a and free_b else 1, 2)))]
    if not summed or draw(st.booleans()):
        return tuple(free_a + summed), tuple(summed + free_b), len(summed)
    pa = draw(st.permutations(range(len(free_a) + len(summed))))   # where each of a's axes goes
    pb = draw(st.permutations(range(len(summed) + len(free_b))))
    sa, sb = [0] * len(pa), [0] * len(pb)
    for i, n in enumerate(free_a + summed):
        sa[pa[i]] = n
    for i, n in enumerate(summed + free_b):
        sb[pb[i]] = n
    axes = ([pa[len(free_a) + j] for j in range(len(summed))], [pb[j] for j in range(len(summed))])
    return tuple(sa), tuple(sb), axes


def _sample_product_d(shapes_of, product):
    """Samples ``(g, x, y)`` for the cotangent primitives of a product of x and y."""
    def fn(draw, dt, st, array, shapes):
        case = shapes_of(draw, st)
        xs, ys, kw = case[0], case[1], ({"axes": case[2]} if len(case) > 2 else {})
        gs = np.shape(product(np.zeros(xs), np.zeros(ys), **kw))
        return (array(draw, gs, dt), array(draw, xs, dt), array(draw, ys, dt)), kw
    return S.custom(fn)


@defvjp(None, sample=_sample_product_d(_matmul_shapes, np.matmul))
def matmul_dx(r, g, x, y):
    """Cotangent of ``x`` in ``x @ y`` (NumPy's rules: 1-D operands promoted, batch axes broadcast)."""
    d[g] = d[r] @ y
    d[y] = matmul_dy(g, d[r], y)
    d[x] = None                  # read for its shape only
    t[r] = matmul_dx(t[g], x, y) + matmul_dx(g, x, t[y])


@defvjp(None, sample=_sample_product_d(_matmul_shapes, np.matmul))
def matmul_dy(r, g, x, y):
    """Cotangent of ``y`` in ``x @ y`` (NumPy's rules: 1-D operands promoted, batch axes broadcast)."""
    d[g] = x @ d[r]
    d[x] = matmul_dx(g, x, d[r])
    d[y] = None                  # read for its shape only
    t[r] = matmul_dy(t[g], x, y) + matmul_dy(g, t[x], y)


# Each cotangent of a bilinear product P is linear in g and in the other operand, and its own
# cotangents are P and P's other cotangent again (as for matmul_dx and matmul_dy above).
@defvjp(None, sample=_sample_product_d(_dot_shapes, np.dot))
def dot_dx(r, g, x, y):
    """Cotangent of ``x`` in ``np.dot(x, y)``."""
    d[g] = np.dot(d[r], y)
    d[y] = dot_dy(g, d[r], y)
    d[x] = None                  # read for its shape only
    t[r] = dot_dx(t[g], x, y) + dot_dx(g, x, t[y])


@defvjp(None, sample=_sample_product_d(_dot_shapes, np.dot))
def dot_dy(r, g, x, y):
    """Cotangent of ``y`` in ``np.dot(x, y)``."""
    d[g] = np.dot(x, d[r])
    d[x] = dot_dx(g, x, d[r])
    d[y] = None                  # read for its shape only
    t[r] = dot_dy(t[g], x, y) + dot_dy(g, t[x], y)


@defvjp(None, sample=_sample_product_d(_tensordot_case, np.tensordot))
def tensordot_dx(r, g, x, y, axes=2):
    """Cotangent of ``x`` in ``np.tensordot(x, y, axes)``."""
    d[g] = np.tensordot(d[r], y, axes)
    d[y] = tensordot_dy(g, d[r], y, axes)
    d[x] = None                  # read for its shape only
    t[r] = tensordot_dx(t[g], x, y, axes) + tensordot_dx(g, x, t[y], axes)


@defvjp(None, sample=_sample_product_d(_tensordot_case, np.tensordot))
def tensordot_dy(r, g, x, y, axes=2):
    """Cotangent of ``y`` in ``np.tensordot(x, y, axes)``."""
    d[g] = np.tensordot(x, d[r], axes)
    d[x] = tensordot_dx(g, x, d[r], axes)
    d[y] = None                  # read for its shape only
    t[r] = tensordot_dy(t[g], x, y, axes) + tensordot_dy(g, t[x], y, axes)


@defvjp(None, sample=S.unary())
def stop_gradient(y, x):
    """The identity whose derivative is zero: treat ``x`` as a constant."""
    pass


# --------------------------------------------------------------------- unary
@defvjp(np.negative, sample=S.unary(), elementwise=True, operator="neg")
def negative(y, x):
    d[x] = -d[y]
    t[y] = -t[x]


@defvjp(np.absolute, name="absolute", sample=S.unary(distinct=True), elementwise=True)
def absolute(y, x):
    d[x] = d[y] * csign(x)                         # csign: np.sign for real x, conj(x)/|x| for complex x
    t[y] = match_complex(t[x] * csign(x), y)


@defvjp(np.sign, sample=S.unary(distinct=True), elementwise=True)
def sign(y, x):
    pass  # piecewise constant: zero derivative


@defvjp(np.square, sample=S.unary(), elementwise=True)
def square(y, x):
    d[x] = d[y] * 2 * x
    t[y] = t[x] * 2 * x


@defvjp(np.reciprocal, sample=S.unary("positive"), elementwise=True)
def reciprocal(y, x):
    d[x] = -d[y] * y * y
    t[y] = -t[x] * y * y


@defvjp(np.exp, sample=S.unary(), elementwise=True)
def exp(y, x):
    d[x] = d[y] * y
    t[y] = t[x] * y


@defvjp(np.log, sample=S.unary("positive"), elementwise=True)
def log(y, x):
    d[x] = d[y] / x
    t[y] = t[x] / x


@defvjp(np.log1p, sample=S.unary("positive"), elementwise=True)
def log1p(y, x):
    d[x] = d[y] / (1 + x)
    t[y] = t[x] / (1 + x)


@defvjp(np.expm1, sample=S.unary(), elementwise=True)
def expm1(y, x):
    d[x] = d[y] * (y + 1)
    t[y] = t[x] * (y + 1)


@defvjp(np.sqrt, sample=S.unary("positive"), elementwise=True)
def sqrt(y, x):
    d[x] = d[y] * 0.5 / y
    t[y] = t[x] * 0.5 / y


@defvjp(np.sin, sample=S.unary(), elementwise=True)
def sin(y, x):
    d[x] = d[y] * np.cos(x)
    t[y] = t[x] * np.cos(x)


@defvjp(np.cos, sample=S.unary(), elementwise=True)
def cos(y, x):
    d[x] = -d[y] * np.sin(x)
    t[y] = -t[x] * np.sin(x)


@defvjp(np.tan, sample=S.unary("unit"), elementwise=True)
def tan(y, x):
    d[x] = d[y] * (1 + y * y)
    t[y] = t[x] * (1 + y * y)


@defvjp(np.tanh, sample=S.unary(), elementwise=True)
def tanh(y, x):
    d[x] = d[y] * (1 - y * y)
    t[y] = t[x] * (1 - y * y)


@defvjp(np.sinh, sample=S.unary(), elementwise=True)
def sinh(y, x):
    d[x] = d[y] * np.cosh(x)
    t[y] = t[x] * np.cosh(x)


@defvjp(np.cosh, sample=S.unary(), elementwise=True)
def cosh(y, x):
    d[x] = d[y] * np.sinh(x)
    t[y] = t[x] * np.sinh(x)


@defvjp(np.arcsin, sample=S.unary("unit"), elementwise=True, also=[math.asin])
def arcsin(y, x):
    d[x] = d[y] / np.sqrt(1 - x * x)
    t[y] = t[x] / np.sqrt(1 - x * x)


@defvjp(np.arccos, sample=S.unary("unit"), elementwise=True, also=[math.acos])
def arccos(y, x):
    d[x] = -d[y] / np.sqrt(1 - x * x)
    t[y] = -t[x] / np.sqrt(1 - x * x)


@defvjp(np.arctan, sample=S.unary(), elementwise=True)
def arctan(y, x):
    d[x] = d[y] / (1 + x * x)
    t[y] = t[x] / (1 + x * x)


@defvjp(np.copy, sample=S.unary())
def copy(y, x):
    d[x] = d[y]
    t[y] = np.copy(t[x])


# --------------------------------------------------------------------- binary
@defvjp(np.add, sample=S.binary(), elementwise=True, operator="+")
def add(z, x, y):
    d[x] = unbroadcast(d[z], x)
    d[y] = unbroadcast(d[z], y)
    t[z] = t[x] + t[y]


@defvjp(np.subtract, sample=S.binary(), elementwise=True, operator="-")
def subtract(z, x, y):
    d[x] = unbroadcast(d[z], x)
    d[y] = unbroadcast(-d[z], y)
    t[z] = t[x] - t[y]


@defvjp(np.multiply, sample=S.binary(), elementwise=True, operator="*")
def multiply(z, x, y):
    d[x] = unbroadcast(d[z] * y, x)
    d[y] = unbroadcast(d[z] * x, y)
    t[z] = t[x] * y + x * t[y]


@defvjp(np.divide, sample=S.binary("real", "positive"), elementwise=True, operator="/")
def divide(z, x, y):
    d[x] = unbroadcast(d[z] / y, x)
    d[y] = unbroadcast(-d[z] * z / y, y)
    t[z] = t[x] / y - t[y] * z / y


@defvjp(np.power, sample=S.binary("positive", "real"), elementwise=True, operator="**")
def power(z, x, y):
    """Where ``y == 0`` the x-derivative is 0 (``0 * x ** -1`` would be nan at x = 0), where ``x == 0`` the
    y-derivative is 0 (``0 * log 0``); a negative base has an x-derivative for any exponent NumPy accepts."""
    d[x] = unbroadcast(d[z] * y * x ** (y - 1 + (y == 0)), x)
    d[y] = unbroadcast(d[z] * z * np.log(match_complex(x + (x == 0), z)), y)
    t[z] = t[x] * y * x ** (y - 1 + (y == 0)) + t[y] * z * np.log(match_complex(x + (x == 0), z))


def _sample_tie_weight(draw, dt, st, array, shapes):
    (x, y), _ = S.binary()(draw, dt)
    if draw(st.booleans()):   # ties where y copies x
        y = np.broadcast_to(x, np.broadcast_shapes(np.shape(x), np.shape(y))).copy() if np.ndim(y) else float(
            np.ravel(x)[0])
    return (x, y, np.maximum(x, y) if draw(st.booleans()) else np.minimum(x, y)), {}


@defvjp(None, sample=S.custom(_sample_tie_weight))
def tie_weight(w, x, y, z):
    """The share of ``x`` in ``z = maximum(x, y)`` (minimum, fmax, fmin): 1, 0.5 at a tie, or 0; piecewise constant."""
    pass


def _sample_written_cast(draw, dt, st, array, shapes):
    sh = shapes(draw, 0)
    into = array(draw, sh, dt)
    if draw(st.booleans()):   # an integer array: the written value is cast, no derivative
        into = np.round(np.real(into) * 3).astype(np.int64)
    return (array(draw, sh, dt), into), {}


@defvjp(None, sample=S.custom(_sample_written_cast))
def written_cast(y, g, x):
    """``g``, the derivative of a value written into array ``x`` (``x[i] = v``), or zero where ``x`` holds integers
    or booleans: the write casts the value to them, a piecewise constant."""
    d[x] = None   # read for its dtype only
    d[g] = written_cast(d[y], x)
    t[y] = written_cast(t[g], x)


# a tie splits the cotangent evenly between the operands (autograd's convention; central differences agree)
@defvjp(np.maximum, sample=S.binary(distinct=True), elementwise=True)
def maximum(z, x, y):
    d[x] = unbroadcast(d[z] * tie_weight(x, y, z), x)
    d[y] = unbroadcast(d[z] * tie_weight(y, x, z), y)
    t[z] = t[x] * tie_weight(x, y, z) + t[y] * tie_weight(y, x, z)


@defvjp(np.minimum, sample=S.binary(distinct=True), elementwise=True)
def minimum(z, x, y):
    d[x] = unbroadcast(d[z] * tie_weight(x, y, z), x)
    d[y] = unbroadcast(d[z] * tie_weight(y, x, z), y)
    t[z] = t[x] * tie_weight(x, y, z) + t[y] * tie_weight(y, x, z)


def _sample_where(draw, dt, st, array, shapes):
    sc, sx, sy = S.broadcastable_shapes(draw, 3)
    c = array(draw, sc, np.float64) > 0
    return (c, array(draw, sx, dt), array(draw, sy, dt)), {}


@defvjp(np.where, sample=S.custom(_sample_where))
def where(z, condition, x, y):
    d[x] = unbroadcast(d[z] * mask(condition, d[z]), x)
    d[y] = unbroadcast(d[z] * mask(np.logical_not(condition), d[z]), y)
    d[condition] = None          # piecewise constant in the condition
    t[z] = np.where(condition, t[x], t[y])


def _sample_clip(draw, dt, st, array, shapes):
    x = array(draw, shapes(draw, 0), dt, distinct=True)
    kind = draw(st.sampled_from(["scalars", "array_lo", "array_hi", "crossed"]))
    if kind == "array_lo" and np.ndim(x):      # an array bound broadcast against x
        return (x, (-0.73 + 0.1 * np.arange(np.shape(x)[-1])).astype(dt), 0.61), {}
    if kind == "array_hi":
        return (x, -0.73, np.full(np.shape(x), 0.61, dtype=dt)), {}
    if kind == "crossed":       # lo > hi: NumPy's clip gives hi everywhere
        return (x, 0.61, -0.73), {}
    return (x, -0.73, 0.61), {}


@defvjp(np.clip, sample=S.custom(_sample_clip))
def clip(y, a, a_min, a_max):  # NumPy's parameter names: np.clip(x, a_min=0.1, a_max=1.1)
    # np.minimum(np.maximum(a, a_min), a_max), with their conventions at ties: a keeps the cotangent where
    # a_min <= a <= a_max, a_min takes it where a < a_min (when a_min <= a_max), a_max where max(a, a_min) > a_max
    d[a] = unbroadcast(d[y] * in_range(a, a_min, a_max), a)
    d[a_min] = unbroadcast(d[y] * mask(a < a_min, d[y]) * mask(a_min <= a_max, d[y]), a_min)
    d[a_max] = unbroadcast(d[y] * mask(np.maximum(a, a_min) > a_max, d[y]), a_max)
    t[y] = (t[a] * in_range(a, a_min, a_max) + t[a_min] * mask(a < a_min, y) * mask(a_min <= a_max, y)
            + t[a_max] * mask(np.maximum(a, a_min) > a_max, y))


@defvjp(None, sample=S.custom(lambda draw, dt, st, array, shapes: ((array(draw, shapes(draw), dt), -0.5, 0.5), {})))
def in_range(y, x, lo, hi):
    """1 where ``lo <= x <= hi`` else 0, in x's dtype (not differentiable: piecewise constant)."""
    pass


@defvjp(None, sample=S.custom(lambda draw, dt, st, array, shapes: (
    lambda s: ((array(draw, s, np.float64) > 0, array(draw, s, dt)), {}))(shapes(draw))))
def mask(y, c, like):
    """A boolean condition as 1/0 in the dtype of ``like`` (piecewise constant)."""
    pass


@defvjp(np.logical_not, sample=S.custom(lambda draw, dt, st, array, shapes: (
    (array(draw, shapes(draw), np.float64) > 0,), {})))
def logical_not(y, x):
    pass


@defvjp(np.zeros_like, sample=S.unary())
def zeros_like(y, x):
    pass


# --------------------------------------------------------------------- reductions
@defvjp(np.sum, sample=S.reduction())
def sum(y, x, axis=None, keepdims=False):  # noqa: A001
    d[x] = unreduce(d[y], x, axis, keepdims)
    t[y] = np.sum(t[x], axis=axis, keepdims=keepdims)


@defvjp(np.mean, sample=S.reduction())
def mean(y, x, axis=None, keepdims=False):
    d[x] = unreduce(d[y], x, axis, keepdims) / K.reduced_count(x, axis)
    t[y] = np.mean(t[x], axis=axis, keepdims=keepdims)


@defvjp(np.max, sample=S.reduction(distinct=True))
def max(y, x, axis=None, keepdims=False):  # noqa: A001
    m = mask(x == unreduce(y, x, axis, keepdims), x)
    d[x] = unreduce(d[y], x, axis, keepdims) * m / unreduce(np.sum(m, axis=axis, keepdims=keepdims), x, axis, keepdims)
    t[y] = np.sum(t[x] * m, axis=axis, keepdims=keepdims) / np.sum(m, axis=axis, keepdims=keepdims)


@defvjp(np.min, sample=S.reduction(distinct=True))
def min(y, x, axis=None, keepdims=False):  # noqa: A001
    m = mask(x == unreduce(y, x, axis, keepdims), x)
    d[x] = unreduce(d[y], x, axis, keepdims) * m / unreduce(np.sum(m, axis=axis, keepdims=keepdims), x, axis, keepdims)
    t[y] = np.sum(t[x] * m, axis=axis, keepdims=keepdims) / np.sum(m, axis=axis, keepdims=keepdims)


def _sample_prod_others(draw, dt, st, array, shapes):
    shape = shapes(draw, 1, 3)
    axis = draw(st.sampled_from([None] + list(range(-len(shape), len(shape))) + [tuple(range(len(shape)))]))
    return (array(draw, shape, dt),), {"axis": axis}


@defvjp(None, sample=S.custom(_sample_prod_others))
def prod_others(y, x, axis=None):
    """For each element, the product of the other elements of its group in ``np.prod(x, axis)``, shaped like
    ``x`` (no division: right where x has zeros; its own derivative divides by x)."""
    d[x] = (unreduce(np.sum(d[y] * y, axis=axis, keepdims=True), x, axis, True) - d[y] * y) / x
    t[y] = y * (unreduce(np.sum(t[x] / x, axis=axis, keepdims=True), x, axis, True) - t[x] / x)


@defvjp(np.prod, sample=S.reduction())
def prod(y, x, axis=None, keepdims=False):
    """The product of the other elements (no division: right where x has zeros)."""
    d[x] = unreduce(d[y], x, axis, keepdims) * prod_others(x, axis)
    t[y] = np.sum(t[x] * prod_others(x, axis), axis=axis, keepdims=keepdims)


# --------------------------------------------------------------------- linear algebra
def _sample_product(shapes_of):
    def fn(draw, dt, st, array, shapes):
        case = shapes_of(draw, st)
        return (array(draw, case[0], dt), array(draw, case[1], dt)), ({"axes": case[2]} if len(case) > 2 else {})
    return S.custom(fn)


@defvjp(np.matmul, sample=_sample_product(_matmul_shapes), operator="@")
def matmul(z, x, y):
    d[x] = matmul_dx(d[z], x, y)
    d[y] = matmul_dy(d[z], x, y)
    t[z] = t[x] @ y + x @ t[y]


@defvjp(np.dot, sample=_sample_product(_dot_shapes))
def dot(z, x, y):
    """``np.dot``: for N-D operands the last axis of x with the second-to-last of y (not matmul's rules)."""
    d[x] = dot_dx(d[z], x, y)
    d[y] = dot_dy(d[z], x, y)
    t[z] = np.dot(t[x], y) + np.dot(x, t[y])


@defvjp(np.tensordot, sample=_sample_product(_tensordot_case))
def tensordot(z, a, b, axes=2):
    d[a] = tensordot_dx(d[z], a, b, axes)
    d[b] = tensordot_dy(d[z], a, b, axes)
    t[z] = np.tensordot(t[a], b, axes) + np.tensordot(a, t[b], axes)


def _sample_outer(draw, dt, st, array, shapes):
    return (array(draw, (draw(st.integers(1, 4)),), dt), array(draw, (draw(st.integers(1, 4)),), dt)), {}


@defvjp(np.outer, sample=S.custom(_sample_outer))
def outer(z, x, y):
    d[x] = d[z] @ y
    d[y] = x @ d[z]
    t[z] = np.outer(t[x], y) + np.outer(x, t[y])


# --------------------------------------------------------------------- shapes
def _sample_transpose(draw, dt, st, array, shapes):
    sh = shapes(draw, 1, 3)
    axes = None if draw(st.booleans()) else tuple(draw(st.permutations(range(len(sh)))))
    return (array(draw, sh, dt),), {"axes": axes}


@defvjp(np.transpose, sample=S.custom(_sample_transpose))
def transpose(y, x, axes=None):
    d[x] = untranspose(d[y], axes)
    t[y] = np.transpose(t[x], axes)


@defvjp(None, sample=S.custom(_sample_transpose))
def untranspose(y, g, axes=None):
    """The inverse permutation of ``np.transpose(x, axes)``."""
    d[g] = np.transpose(d[y], axes)
    t[y] = untranspose(t[g], axes)


def _sample_reshape(draw, dt, st, array, shapes):
    sh = shapes(draw, 1, 3)
    n = int(np.prod(sh))
    target = draw(st.sampled_from([(n,), (1, n), (n, 1), (-1,)]))
    return (array(draw, sh, dt), target), {}


@defvjp(np.reshape, sample=S.custom(_sample_reshape))
def reshape(y, x, shape):
    d[x] = np.reshape(d[y], np.shape(x))
    t[y] = np.reshape(t[x], shape)


def _sample_expand(draw, dt, st, array, shapes):
    sh = shapes(draw, 0, 2)
    return (array(draw, sh, dt), draw(st.integers(-len(sh) - 1, len(sh)))), {}


@defvjp(np.expand_dims, sample=S.custom(_sample_expand))
def expand_dims(y, x, axis):
    d[x] = np.reshape(d[y], np.shape(x))
    t[y] = np.expand_dims(t[x], axis)


def _sample_squeeze(draw, dt, st, array, shapes):
    sh = list(shapes(draw, 0, 2))
    pos = draw(st.integers(0, len(sh)))
    sh.insert(pos, 1)
    return (array(draw, tuple(sh), dt),), {"axis": pos}


@defvjp(np.squeeze, sample=S.custom(_sample_squeeze))
def squeeze(y, x, axis=None):
    d[x] = np.reshape(d[y], np.shape(x))
    t[y] = np.squeeze(t[x], axis)


def _sample_broadcast_to(draw, dt, st, array, shapes):
    sx, = S.broadcastable_shapes(draw, 1)
    target = tuple([draw(st.integers(1, 3))] + [n if n != 1 else draw(st.integers(1, 3)) for n in sx])
    return (array(draw, sx, dt), target), {}


@defvjp(np.broadcast_to, sample=S.custom(_sample_broadcast_to))
def broadcast_to(y, x, shape):
    d[x] = unbroadcast(d[y], x)
    t[y] = np.broadcast_to(t[x], shape)


def _sample_concat(draw, dt, st, array, shapes):
    n = draw(st.integers(1, 3))
    base = list(shapes(draw, 1, 2))
    axis = draw(st.integers(0, len(base) - 1))
    arrays = []
    for _ in range(n):
        s = list(base)
        s[axis] = draw(st.integers(1, 3))
        arrays.append(array(draw, tuple(s), dt))
    return (tuple(arrays),), {"axis": axis}


@defvjp(np.concatenate, sample=S.custom(_sample_concat))
def concatenate(y, arrays, axis=0):
    d[arrays] = unconcatenate(d[y], arrays, axis)
    t[y] = np.concatenate(t[arrays], axis)


@primitive(tested_via=np.concatenate)
def unconcatenate(g, arrays, axis=0):
    """Split ``g`` into pieces shaped like ``arrays`` (the VJP of concatenate; linear)."""
    return K.unconcatenate(g, arrays, axis)


def _sample_stack(draw, dt, st, array, shapes):
    n = draw(st.integers(1, 3))
    base = shapes(draw, 1, 2)
    axis = draw(st.integers(-len(base) - 1, len(base)))
    return (tuple(array(draw, base, dt) for _ in range(n)),), {"axis": axis}


@defvjp(np.stack, sample=S.custom(_sample_stack))
def stack(y, arrays, axis=0):
    d[arrays] = unstack(d[y], arrays, axis)
    t[y] = np.stack(t[arrays], axis)


@primitive(tested_via=np.stack)
def unstack(g, arrays, axis=0):
    """Split ``g`` along ``axis`` (the VJP of stack; linear)."""
    return K.unstack(g, arrays, axis)


# --------------------------------------------------------------------- aliases
if np.abs is not np.absolute:
    alias(np.abs, np.absolute)
for _k, _t in ((np.amax, np.max), (np.amin, np.min)):
    if _k is not _t:
        alias(_k, _t)
alias(math.exp, np.exp)
alias(math.log, np.log)
alias(math.log1p, np.log1p)
alias(math.expm1, np.expm1)
alias(math.sqrt, np.sqrt)
alias(math.sin, np.sin)
alias(math.cos, np.cos)
alias(math.tan, np.tan)
alias(math.tanh, np.tanh)
alias(math.sinh, np.sinh)
alias(math.cosh, np.cosh)
alias(math.atan, np.arctan)
alias(math.pow, np.power)
alias(abs, np.absolute)


# --------------------------------------------------------------------- indexing
def _sample_getitem(draw, dt, st, array, shapes):
    sh = shapes(draw, 1, 3)
    parts = []
    for n in sh[:draw(st.integers(1, len(sh)))]:
        kind = draw(st.sampled_from(["int", "neg", "slice", "full"]))
        if kind == "int":
            parts.append(draw(st.integers(0, n - 1)))
        elif kind == "neg":
            parts.append(-draw(st.integers(1, n)))
        elif kind == "slice":
            a = draw(st.integers(0, n - 1))
            parts.append(slice(a, draw(st.integers(a + 1, n)), draw(st.sampled_from([None, 1, 2]))))
        else:
            parts.append(slice(None))
    return (array(draw, sh, dt), tuple(parts)), {}


@primitive(sample=S.custom(_sample_getitem), operator="[]")
def getitem(x, idx):
    """``x[idx]`` with ints, slices, negative indices and tuples of them."""
    return x[idx]


@vjp(getitem)
def _getitem_vjp(y, x, idx):
    d[x] = untake(d[y], x, idx)
    t[y] = t[x][idx]


@defvjp(None, sample=S.custom(lambda draw, dt, st, array, shapes: (
    lambda a: ((array(draw, np.shape(a[0][a[1]]), dt), a[0], a[1]), {}))(_sample_getitem(draw, dt, st, array, shapes)[0])))
def untake(y, g, x, idx):
    """Zeros shaped like ``x`` with ``g`` added at ``idx`` (the VJP of indexing)."""
    d[g] = d[y][idx]
    d[x] = None                  # read for its shape only
    t[y] = untake(t[g], x, idx)


def _sample_take(draw, dt, st, array, shapes):
    sh = shapes(draw, 1, 3)
    axis = draw(st.sampled_from([None] + list(range(-len(sh), len(sh)))))
    n = int(np.prod(sh)) if axis is None else sh[axis]
    idx = np.array(draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=5)))  # repeats included
    return (array(draw, sh, dt), idx), {"axis": axis}


@defvjp(np.take, sample=S.custom(_sample_take))
def take(y, x, indices, axis=None):
    """``np.take``: elements (``axis=None``, of the flattened array) or slices along ``axis``."""
    d[x] = untake_along(d[y], x, indices, axis)
    t[y] = np.take(t[x], indices, axis=axis)


@defvjp(None, sample=S.custom(lambda draw, dt, st, array, shapes: (
    lambda a, kw: ((array(draw, np.take(a[0], a[1], **kw).shape, dt), a[0], a[1]), kw))(*_sample_take(
        draw, dt, st, array, shapes))))
def untake_along(y, g, x, indices, axis=None):
    """Zeros shaped like ``x`` with ``g`` added where ``np.take(x, indices, axis)`` read (repeats add up)."""
    d[g] = np.take(d[y], indices, axis=axis)
    d[x] = None                  # read for its shape only
    t[y] = untake_along(t[g], x, indices, axis)




# --------------------------------------------------------------------- no derivative
# piecewise constant in their inputs (or reading only shapes): a differentiated value may flow in,
# and contributes nothing to the gradient
nondiff(np.ndarray.astype)   # x.astype(int): a cast to integers or booleans is piecewise constant
nondiff(np.argmax, np.argmin, np.argsort, np.floor, np.ceil, np.round, np.around, np.rint, np.trunc, np.fix,
        np.isnan, np.isfinite, np.isinf, np.any, np.all, np.nonzero, np.shape, np.size, np.ndim, np.zeros_like,
        np.ones_like, np.empty_like, np.full_like, np.count_nonzero, np.searchsorted, np.digitize, np.equal, np.not_equal,
        np.less, np.less_equal, np.greater, np.greater_equal, np.logical_and, np.logical_or, np.logical_not,
        np.logical_xor, np.heaviside, np.isclose, np.allclose, np.array_equal, np.floor_divide, np.signbit,
        np.argwhere, np.flatnonzero, math.floor, math.ceil, math.trunc, math.isnan, math.isinf, math.isfinite,
        round, len,
        # casts to integers and bools (np.int64(x) of an array: indices from data)
        np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.bool_,
        np.iscomplexobj, np.isrealobj, np.iscomplex, np.isreal)


from .complex import csign, match_complex  # noqa: E402  (np.abs of complex values; autograd's convention)
