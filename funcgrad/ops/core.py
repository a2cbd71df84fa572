"""NumPy's differentiable functions as primitives: forward and VJP template side by side.

Each ``@primitive(np.f)`` declares the forward (its signature is the
primitive's; its body calls ``K.<name>``) and each ``@vjp(np.f)`` the adjoint
template the reverse pass fills in. Templates use only primitives, operators
and ``.shape``, so the adjoint is itself differentiable. Broadcasting is undone
by ``unbroadcast`` and reductions by ``unreduce``, both primitives themselves.
"""
from __future__ import annotations

import math

import numpy as np

import funcgrad.kernels.cpu as K
from . import samples as S
from .registry import alias, d, primitive, vjp

# --------------------------------------------------------------------- helpers
# (primitives with no NumPy key: generated code and templates use them)


def _sample_unbroadcast(draw, dt, st, array, shapes):
    gs = shapes(draw, 0, 3)
    xs = [1 if draw(st.booleans()) else n for n in gs[draw(st.integers(0, len(gs))):]]
    return (array(draw, gs, dt), array(draw, tuple(xs), dt)), {}


@primitive(sample=S.custom(_sample_unbroadcast))
def unbroadcast(g, x):
    """Sum ``g`` down to the shape of ``x``: the adjoint of NumPy broadcasting."""
    return K.unbroadcast(g, x)


@primitive(sample=S.custom(lambda draw, dt, st, array, shapes: (
    lambda sh, ax, kd: ((array(draw, np.sum(np.zeros(sh), axis=ax, keepdims=kd).shape, dt), array(draw, sh, dt)),
                        {"axis": ax, "keepdims": kd}))(
    (2, 3), draw(st.sampled_from([None, 0, 1, -1, (0, 1)])), draw(st.booleans()))))
def unreduce(g, x, axis=None, keepdims=False):
    """Broadcast a reduction's cotangent ``g`` back to the shape of ``x``."""
    return K.unreduce(g, x, axis, keepdims)


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


@primitive(sample=_sample_product_d(_matmul_shapes, np.matmul))
def matmul_dx(g, x, y):
    """Cotangent of ``x`` in ``x @ y`` (NumPy's rules: 1-D operands promoted, batch axes broadcast)."""
    return K.matmul_dx(g, x, y)


@primitive(sample=_sample_product_d(_matmul_shapes, np.matmul))
def matmul_dy(g, x, y):
    """Cotangent of ``y`` in ``x @ y`` (NumPy's rules: 1-D operands promoted, batch axes broadcast)."""
    return K.matmul_dy(g, x, y)


@primitive(sample=_sample_product_d(_dot_shapes, np.dot))
def dot_dx(g, x, y):
    """Cotangent of ``x`` in ``np.dot(x, y)``."""
    return K.dot_dx(g, x, y)


@primitive(sample=_sample_product_d(_dot_shapes, np.dot))
def dot_dy(g, x, y):
    """Cotangent of ``y`` in ``np.dot(x, y)``."""
    return K.dot_dy(g, x, y)


@primitive(sample=_sample_product_d(_tensordot_case, np.tensordot))
def tensordot_dx(g, x, y, axes=2):
    """Cotangent of ``x`` in ``np.tensordot(x, y, axes)``."""
    return K.tensordot_dx(g, x, y, axes)


@primitive(sample=_sample_product_d(_tensordot_case, np.tensordot))
def tensordot_dy(g, x, y, axes=2):
    """Cotangent of ``y`` in ``np.tensordot(x, y, axes)``."""
    return K.tensordot_dy(g, x, y, axes)


@vjp(unbroadcast)
def _unbroadcast_vjp(y, g, x):
    d[g] = np.broadcast_to(d[y], np.shape(g))


@vjp(unreduce)
def _unreduce_vjp(y, g, x, axis=None, keepdims=False):
    d[g] = np.sum(d[y], axis=axis, keepdims=keepdims)


@vjp(matmul_dx)
def _matmul_dx_vjp(r, g, x, y):
    d[g] = d[r] @ y
    d[y] = matmul_dy(g, d[r], y)


@vjp(matmul_dy)
def _matmul_dy_vjp(r, g, x, y):
    d[g] = x @ d[r]
    d[x] = matmul_dx(g, x, d[r])


# Each cotangent of a bilinear product P is linear in g and in the other operand, and its own
# cotangents are P and P's other cotangent again (as for matmul_dx and matmul_dy above).
@vjp(dot_dx)
def _dot_dx_vjp(r, g, x, y):
    d[g] = np.dot(d[r], y)
    d[y] = dot_dy(g, d[r], y)


@vjp(dot_dy)
def _dot_dy_vjp(r, g, x, y):
    d[g] = np.dot(x, d[r])
    d[x] = dot_dx(g, x, d[r])


@vjp(tensordot_dx)
def _tensordot_dx_vjp(r, g, x, y, axes=2):
    d[g] = np.tensordot(d[r], y, axes)
    d[y] = tensordot_dy(g, d[r], y, axes)


@vjp(tensordot_dy)
def _tensordot_dy_vjp(r, g, x, y, axes=2):
    d[g] = np.tensordot(x, d[r], axes)
    d[x] = tensordot_dx(g, x, d[r], axes)


@primitive(sample=S.unary())
def stop_gradient(x):
    """The identity whose derivative is zero: treat ``x`` as a constant."""
    return K.stop_gradient(x)


@vjp(stop_gradient)
def _stop_gradient_vjp(y, x):
    pass




# --------------------------------------------------------------------- unary
@primitive(np.negative, sample=S.unary(), elementwise=True, operator="neg")
def negative(x):
    return K.negative(x)


@vjp(np.negative)
def _negative_vjp(y, x):
    d[x] = -d[y]


@primitive(np.absolute, name="absolute", sample=S.unary(distinct=True), elementwise=True)
def absolute(x):
    return K.absolute(x)


@vjp(np.absolute)
def _absolute_vjp(y, x):
    d[x] = d[y] * np.sign(x)


@primitive(np.sign, sample=S.unary(distinct=True), elementwise=True)
def sign(x):
    return K.sign(x)


@vjp(np.sign)
def _sign_vjp(y, x):
    pass  # piecewise constant: zero derivative


@primitive(np.square, sample=S.unary(), elementwise=True)
def square(x):
    return K.square(x)


@vjp(np.square)
def _square_vjp(y, x):
    d[x] = d[y] * 2 * x


@primitive(np.reciprocal, sample=S.unary("positive"), elementwise=True)
def reciprocal(x):
    return K.reciprocal(x)


@vjp(np.reciprocal)
def _reciprocal_vjp(y, x):
    d[x] = -d[y] * y * y


@primitive(np.exp, sample=S.unary(), elementwise=True)
def exp(x):
    return K.exp(x)


@vjp(np.exp)
def _exp_vjp(y, x):
    d[x] = d[y] * y


@primitive(np.log, sample=S.unary("positive"), elementwise=True)
def log(x):
    return K.log(x)


@vjp(np.log)
def _log_vjp(y, x):
    d[x] = d[y] / x


@primitive(np.log1p, sample=S.unary("positive"), elementwise=True)
def log1p(x):
    return K.log1p(x)


@vjp(np.log1p)
def _log1p_vjp(y, x):
    d[x] = d[y] / (1 + x)


@primitive(np.expm1, sample=S.unary(), elementwise=True)
def expm1(x):
    return K.expm1(x)


@vjp(np.expm1)
def _expm1_vjp(y, x):
    d[x] = d[y] * (y + 1)


@primitive(np.sqrt, sample=S.unary("positive"), elementwise=True)
def sqrt(x):
    return K.sqrt(x)


@vjp(np.sqrt)
def _sqrt_vjp(y, x):
    d[x] = d[y] * 0.5 / y


@primitive(np.sin, sample=S.unary(), elementwise=True)
def sin(x):
    return K.sin(x)


@vjp(np.sin)
def _sin_vjp(y, x):
    d[x] = d[y] * np.cos(x)


@primitive(np.cos, sample=S.unary(), elementwise=True)
def cos(x):
    return K.cos(x)


@vjp(np.cos)
def _cos_vjp(y, x):
    d[x] = -d[y] * np.sin(x)


@primitive(np.tan, sample=S.unary("unit"), elementwise=True)
def tan(x):
    return K.tan(x)


@vjp(np.tan)
def _tan_vjp(y, x):
    d[x] = d[y] * (1 + y * y)


@primitive(np.tanh, sample=S.unary(), elementwise=True)
def tanh(x):
    return K.tanh(x)


@vjp(np.tanh)
def _tanh_vjp(y, x):
    d[x] = d[y] * (1 - y * y)


@primitive(np.sinh, sample=S.unary(), elementwise=True)
def sinh(x):
    return K.sinh(x)


@vjp(np.sinh)
def _sinh_vjp(y, x):
    d[x] = d[y] * np.cosh(x)


@primitive(np.cosh, sample=S.unary(), elementwise=True)
def cosh(x):
    return K.cosh(x)


@vjp(np.cosh)
def _cosh_vjp(y, x):
    d[x] = d[y] * np.sinh(x)


@primitive(np.arctan, sample=S.unary(), elementwise=True)
def arctan(x):
    return K.arctan(x)


@vjp(np.arctan)
def _arctan_vjp(y, x):
    d[x] = d[y] / (1 + x * x)


@primitive(np.copy, sample=S.unary())
def copy(x):
    return K.copy(x)


@vjp(np.copy)
def _copy_vjp(y, x):
    d[x] = d[y]


# --------------------------------------------------------------------- binary
@primitive(np.add, sample=S.binary(), elementwise=True, operator="+")
def add(x, y):
    return K.add(x, y)


@vjp(np.add)
def _add_vjp(z, x, y):
    d[x] = unbroadcast(d[z], x)
    d[y] = unbroadcast(d[z], y)


@primitive(np.subtract, sample=S.binary(), elementwise=True, operator="-")
def subtract(x, y):
    return K.subtract(x, y)


@vjp(np.subtract)
def _subtract_vjp(z, x, y):
    d[x] = unbroadcast(d[z], x)
    d[y] = unbroadcast(-d[z], y)


@primitive(np.multiply, sample=S.binary(), elementwise=True, operator="*")
def multiply(x, y):
    return K.multiply(x, y)


@vjp(np.multiply)
def _multiply_vjp(z, x, y):
    d[x] = unbroadcast(d[z] * y, x)
    d[y] = unbroadcast(d[z] * x, y)


@primitive(np.divide, sample=S.binary("real", "positive"), elementwise=True, operator="/")
def divide(x, y):
    return K.divide(x, y)


@vjp(np.divide)
def _divide_vjp(z, x, y):
    d[x] = unbroadcast(d[z] / y, x)
    d[y] = unbroadcast(-d[z] * z / y, y)


@primitive(np.power, sample=S.binary("positive", "real"), elementwise=True, operator="**")
def power(x, y):
    return K.power(x, y)


@vjp(np.power)
def _power_vjp(z, x, y):
    d[x] = unbroadcast(d[z] * y * x ** (y - 1), x)
    d[y] = unbroadcast(d[z] * z * np.log(x), y)


@primitive(np.maximum, sample=S.binary(distinct=True), elementwise=True)
def maximum(x, y):
    return K.maximum(x, y)


@vjp(np.maximum)
def _maximum_vjp(z, x, y):
    d[x] = unbroadcast(d[z] * mask(x >= y, d[z]), x)
    d[y] = unbroadcast(d[z] * mask(x < y, d[z]), y)


@primitive(np.minimum, sample=S.binary(distinct=True), elementwise=True)
def minimum(x, y):
    return K.minimum(x, y)


@vjp(np.minimum)
def _minimum_vjp(z, x, y):
    d[x] = unbroadcast(d[z] * mask(x <= y, d[z]), x)
    d[y] = unbroadcast(d[z] * mask(x > y, d[z]), y)


def _sample_where(draw, dt, st, array, shapes):
    sc, sx, sy = S.broadcastable_shapes(draw, 3)
    c = array(draw, sc, np.float64) > 0
    return (c, array(draw, sx, dt), array(draw, sy, dt)), {}


@primitive(np.where, sample=S.custom(_sample_where))
def where(condition, x, y):
    return K.where(condition, x, y)


@vjp(np.where)
def _where_vjp(z, condition, x, y):
    d[x] = unbroadcast(d[z] * mask(condition, d[z]), x)
    d[y] = unbroadcast(d[z] * mask(np.logical_not(condition), d[z]), y)


def _sample_clip(draw, dt, st, array, shapes):
    x = array(draw, shapes(draw, 0), dt, distinct=True)
    return (x, -0.73, 0.61), {}


@primitive(np.clip, sample=S.custom(_sample_clip))
def clip(x, lo, hi):
    return K.clip(x, lo, hi)


@vjp(np.clip)
def _clip_vjp(y, x, lo, hi):
    d[x] = d[y] * in_range(x, lo, hi)


@primitive(sample=S.custom(lambda draw, dt, st, array, shapes: ((array(draw, shapes(draw), dt), -0.5, 0.5), {})))
def in_range(x, lo, hi):
    """1 where ``lo <= x <= hi`` else 0, in x's dtype (not differentiable: piecewise constant)."""
    return K.in_range(x, lo, hi)


@vjp(in_range)
def _in_range_vjp(y, x, lo, hi):
    pass


@primitive(sample=S.custom(lambda draw, dt, st, array, shapes: (
    lambda s: ((array(draw, s, np.float64) > 0, array(draw, s, dt)), {}))(shapes(draw))))
def mask(c, like):
    """A boolean condition as 1/0 in the dtype of ``like`` (piecewise constant)."""
    return K.mask(c, like)


@vjp(mask)
def _mask_vjp(y, c, like):
    pass


@primitive(np.logical_not, sample=S.custom(lambda draw, dt, st, array, shapes: (
    (array(draw, shapes(draw), np.float64) > 0,), {})))
def logical_not(x):
    return K.logical_not(x)


@vjp(np.logical_not)
def _logical_not_vjp(y, x):
    pass


@primitive(np.zeros_like, sample=S.unary())
def zeros_like(x):
    return K.zeros_like(x)


@vjp(np.zeros_like)
def _zeros_like_vjp(y, x):
    pass


# --------------------------------------------------------------------- reductions
@primitive(np.sum, sample=S.reduction())
def sum(x, axis=None, keepdims=False):  # noqa: A001
    return K.sum(x, axis, keepdims)


@vjp(np.sum)
def _sum_vjp(y, x, axis=None, keepdims=False):
    d[x] = unreduce(d[y], x, axis, keepdims)


@primitive(np.mean, sample=S.reduction())
def mean(x, axis=None, keepdims=False):
    return K.mean(x, axis, keepdims)


@vjp(np.mean)
def _mean_vjp(y, x, axis=None, keepdims=False):
    d[x] = unreduce(d[y], x, axis, keepdims) / K.reduced_count(x, axis)


@primitive(np.max, sample=S.reduction(distinct=True))
def max(x, axis=None, keepdims=False):  # noqa: A001
    return K.max(x, axis, keepdims)


@vjp(np.max)
def _max_vjp(y, x, axis=None, keepdims=False):
    m = mask(x == unreduce(y, x, axis, keepdims), x)
    d[x] = unreduce(d[y], x, axis, keepdims) * m / unreduce(np.sum(m, axis=axis, keepdims=keepdims), x, axis, keepdims)


@primitive(np.min, sample=S.reduction(distinct=True))
def min(x, axis=None, keepdims=False):  # noqa: A001
    return K.min(x, axis, keepdims)


@vjp(np.min)
def _min_vjp(y, x, axis=None, keepdims=False):
    m = mask(x == unreduce(y, x, axis, keepdims), x)
    d[x] = unreduce(d[y], x, axis, keepdims) * m / unreduce(np.sum(m, axis=axis, keepdims=keepdims), x, axis, keepdims)


@primitive(np.prod, sample=S.reduction("positive"))
def prod(x, axis=None, keepdims=False):
    return K.prod(x, axis, keepdims)


@vjp(np.prod)
def _prod_vjp(y, x, axis=None, keepdims=False):
    d[x] = unreduce(d[y] * y, x, axis, keepdims) / x


# --------------------------------------------------------------------- linear algebra
def _sample_product(shapes_of):
    def fn(draw, dt, st, array, shapes):
        case = shapes_of(draw, st)
        return (array(draw, case[0], dt), array(draw, case[1], dt)), ({"axes": case[2]} if len(case) > 2 else {})
    return S.custom(fn)


@primitive(np.matmul, sample=_sample_product(_matmul_shapes), operator="@")
def matmul(x, y):
    return K.matmul(x, y)


@vjp(np.matmul)
def _matmul_vjp(z, x, y):
    d[x] = matmul_dx(d[z], x, y)
    d[y] = matmul_dy(d[z], x, y)


@primitive(np.dot, sample=_sample_product(_dot_shapes))
def dot(x, y):
    """``np.dot``: for N-D operands the last axis of x with the second-to-last of y (not matmul's rules)."""
    return K.dot(x, y)


@vjp(np.dot)
def _dot_vjp(z, x, y):
    d[x] = dot_dx(d[z], x, y)
    d[y] = dot_dy(d[z], x, y)


@primitive(np.tensordot, sample=_sample_product(_tensordot_case))
def tensordot(a, b, axes=2):
    return K.tensordot(a, b, axes)


@vjp(np.tensordot)
def _tensordot_vjp(z, a, b, axes=2):
    d[a] = tensordot_dx(d[z], a, b, axes)
    d[b] = tensordot_dy(d[z], a, b, axes)


def _sample_outer(draw, dt, st, array, shapes):
    return (array(draw, (draw(st.integers(1, 4)),), dt), array(draw, (draw(st.integers(1, 4)),), dt)), {}


@primitive(np.outer, sample=S.custom(_sample_outer))
def outer(x, y):
    return K.outer(x, y)


@vjp(np.outer)
def _outer_vjp(z, x, y):
    d[x] = d[z] @ y
    d[y] = x @ d[z]


# --------------------------------------------------------------------- shapes
def _sample_transpose(draw, dt, st, array, shapes):
    sh = shapes(draw, 1, 3)
    axes = None if draw(st.booleans()) else tuple(draw(st.permutations(range(len(sh)))))
    return (array(draw, sh, dt),), {"axes": axes}


@primitive(np.transpose, sample=S.custom(_sample_transpose))
def transpose(x, axes=None):
    return K.transpose(x, axes)


@vjp(np.transpose)
def _transpose_vjp(y, x, axes=None):
    d[x] = untranspose(d[y], axes)


@primitive(sample=S.custom(_sample_transpose))
def untranspose(g, axes=None):
    """The inverse permutation of ``np.transpose(x, axes)``."""
    return K.untranspose(g, axes)


@vjp(untranspose)
def _untranspose_vjp(y, g, axes=None):
    d[g] = np.transpose(d[y], axes)


def _sample_reshape(draw, dt, st, array, shapes):
    sh = shapes(draw, 1, 3)
    n = int(np.prod(sh))
    target = draw(st.sampled_from([(n,), (1, n), (n, 1), (-1,)]))
    return (array(draw, sh, dt), target), {}


@primitive(np.reshape, sample=S.custom(_sample_reshape))
def reshape(x, shape):
    return K.reshape(x, shape)


@vjp(np.reshape)
def _reshape_vjp(y, x, shape):
    d[x] = np.reshape(d[y], np.shape(x))


def _sample_expand(draw, dt, st, array, shapes):
    sh = shapes(draw, 0, 2)
    return (array(draw, sh, dt), draw(st.integers(-len(sh) - 1, len(sh)))), {}


@primitive(np.expand_dims, sample=S.custom(_sample_expand))
def expand_dims(x, axis):
    return K.expand_dims(x, axis)


@vjp(np.expand_dims)
def _expand_dims_vjp(y, x, axis):
    d[x] = np.reshape(d[y], np.shape(x))


def _sample_squeeze(draw, dt, st, array, shapes):
    sh = list(shapes(draw, 0, 2))
    pos = draw(st.integers(0, len(sh)))
    sh.insert(pos, 1)
    return (array(draw, tuple(sh), dt),), {"axis": pos}


@primitive(np.squeeze, sample=S.custom(_sample_squeeze))
def squeeze(x, axis=None):
    return K.squeeze(x, axis)


@vjp(np.squeeze)
def _squeeze_vjp(y, x, axis=None):
    d[x] = np.reshape(d[y], np.shape(x))


def _sample_broadcast_to(draw, dt, st, array, shapes):
    sx, = S.broadcastable_shapes(draw, 1)
    target = tuple([draw(st.integers(1, 3))] + [n if n != 1 else draw(st.integers(1, 3)) for n in sx])
    return (array(draw, sx, dt), target), {}


@primitive(np.broadcast_to, sample=S.custom(_sample_broadcast_to))
def broadcast_to(x, shape):
    return K.broadcast_to(x, shape)


@vjp(np.broadcast_to)
def _broadcast_to_vjp(y, x, shape):
    d[x] = unbroadcast(d[y], x)


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


@primitive(np.concatenate, sample=S.custom(_sample_concat))
def concatenate(arrays, axis=0):
    return K.concatenate(arrays, axis)


@vjp(np.concatenate)
def _concatenate_vjp(y, arrays, axis=0):
    d[arrays] = unconcatenate(d[y], arrays, axis)


@primitive(tested_via=np.concatenate)
def unconcatenate(g, arrays, axis=0):
    """Split ``g`` into pieces shaped like ``arrays`` (the VJP of concatenate; linear)."""
    return K.unconcatenate(g, arrays, axis)


def _sample_stack(draw, dt, st, array, shapes):
    n = draw(st.integers(1, 3))
    base = shapes(draw, 1, 2)
    axis = draw(st.integers(-len(base) - 1, len(base)))
    return (tuple(array(draw, base, dt) for _ in range(n)),), {"axis": axis}


@primitive(np.stack, sample=S.custom(_sample_stack))
def stack(arrays, axis=0):
    return K.stack(arrays, axis)


@vjp(np.stack)
def _stack_vjp(y, arrays, axis=0):
    d[arrays] = unstack(d[y], arrays, axis)


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


@primitive(sample=S.custom(lambda draw, dt, st, array, shapes: (
    lambda a: ((array(draw, np.shape(a[0][a[1]]), dt), a[0], a[1]), {}))(_sample_getitem(draw, dt, st, array, shapes)[0])))
def untake(g, x, idx):
    """Zeros shaped like ``x`` with ``g`` added at ``idx`` (the VJP of indexing)."""
    return K.untake(g, x, idx)


@vjp(untake)
def _untake_vjp(y, g, x, idx):
    d[g] = d[y][idx]


def _sample_take(draw, dt, st, array, shapes):
    sh = shapes(draw, 1, 3)
    axis = draw(st.sampled_from([None] + list(range(-len(sh), len(sh)))))
    n = int(np.prod(sh)) if axis is None else sh[axis]
    idx = np.array(draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=5)))  # repeats included
    return (array(draw, sh, dt), idx), {"axis": axis}


@primitive(np.take, sample=S.custom(_sample_take))
def take(x, indices, axis=None):
    """``np.take``: elements (``axis=None``, of the flattened array) or slices along ``axis``."""
    return K.take(x, indices, axis)


@vjp(np.take)
def _take_vjp(y, x, indices, axis=None):
    d[x] = untake_along(d[y], x, indices, axis)


@primitive(sample=S.custom(lambda draw, dt, st, array, shapes: (
    lambda a, kw: ((array(draw, np.take(a[0], a[1], **kw).shape, dt), a[0], a[1]), kw))(*_sample_take(
        draw, dt, st, array, shapes))))
def untake_along(g, x, indices, axis=None):
    """Zeros shaped like ``x`` with ``g`` added where ``np.take(x, indices, axis)`` read (repeats add up)."""
    return K.untake_along(g, x, indices, axis)


@vjp(untake_along)
def _untake_along_vjp(y, g, x, indices, axis=None):
    d[g] = np.take(d[y], indices, axis=axis)
