"""funcgrad.nn: neural-network primitives, losses and stax-style layer combinators.

Owns:

* primitives (forward + VJP template side by side, kernels in
  ``funcgrad.kernels.cpu_nn``): ``conv2d``, ``max_pool2d``, ``avg_pool2d``,
  ``softmax``, ``log_softmax``, ``logsumexp``, ``relu``, ``leaky_relu``,
  ``elu``, ``gelu``, ``sigmoid``, ``softplus``, ``dropout``, ``batch_norm``
  (+ ``batch_norm_stats`` for the running statistics), ``layer_norm``,
  ``embedding``, and the helper primitives their VJPs are made of;
* losses, each one fused primitive: ``mse``, ``huber``, ``cross_entropy``
  (integer labels or probability targets), ``nll``, ``binary_cross_entropy``,
  ``binary_cross_entropy_with_logits``; ``reduction="mean"|"sum"|"none"``;
* layers: ``serial``, ``Dense``, ``Conv2D``, ``MaxPool2D``, ``AvgPool2D``,
  ``Flatten``, ``Relu``, ``Tanh``, ``Dropout``, ``BatchNorm``. Each is a pair
  ``(init_fn(seed, input_shape, dtype=np.float64) -> (output_shape, params),
  apply_fn(params, x, train=False, seed=0) -> y)``. Every apply_fn is a plain
  ``def`` of primitives whose source ``inspect.getsource`` returns: the ones
  with constants (strides, rates) and ``serial``'s straight-line composition
  are generated source, written to a content-hashed file and registered in
  ``linecache``.

Conventions: NCHW activations, OIHW conv weights, class axis last for the
losses; integer labels, shapes, axes, strides, rates, seeds, ``train`` and
``reduction`` are static (never differentiated). Randomness is explicit:
``dropout(x, rate, seed)`` draws its mask from ``(seed, element index)``, so
the VJP reuses exactly the same mask.
"""
from __future__ import annotations

import hashlib
import linecache
import math
import os
import tempfile

import numpy as np

from funcgrad.ops.registry import primitive, vjp, d
from funcgrad.kernels import cpu_nn as K
from funcgrad import initializers

__all__ = [
    # primitives
    "conv2d", "max_pool2d", "avg_pool2d", "softmax", "log_softmax", "logsumexp",
    "relu", "leaky_relu", "elu", "gelu", "sigmoid", "softplus", "dropout",
    "batch_norm", "batch_norm_stats", "layer_norm", "embedding",
    # losses
    "mse", "huber", "cross_entropy", "nll", "binary_cross_entropy", "binary_cross_entropy_with_logits",
    # layers
    "serial", "Dense", "Conv2D", "MaxPool2D", "AvgPool2D", "Flatten", "Relu", "Tanh", "Dropout",
    "BatchNorm", "initializers",
]


# =========================================================================== samples
# sample(draw, dtype) -> (args, kwargs): small inputs where the function is smooth.
# hypothesis is imported only when a sample is drawn (a test-time dependency).

def _st():
    import hypothesis.strategies as st
    return st


def _rng(draw):
    return np.random.default_rng(draw(_st().integers(0, 2**31 - 1)))


def _arr(draw, shape, dtype, lo=-1.0, hi=1.0):
    return _rng(draw).uniform(lo, hi, shape).astype(dtype)


def _away(draw, shape, dtype, at=0.0, gap=0.05):
    """Uniform in [-1, 1] with no value within ``gap`` of the kink ``at``."""
    a = _rng(draw).uniform(-1.0, 1.0, shape)
    a = np.where(np.abs(a - at) < gap, at + np.where(a >= at, 2 * gap, -2 * gap), a)
    return a.astype(dtype)


def _distinct(draw, shape, dtype):
    """Values pairwise >= ~0.02 apart (no ties inside pooling windows), in about [-1, 1]."""
    n = int(np.prod(shape))
    r = _rng(draw)
    v = (r.permutation(n) - n / 2.0) * (2.0 / max(n, 1)) + r.uniform(-0.002, 0.002, n)
    if n > 100:
        v = v * (n / 100.0)    # keep the spacing >= 0.02 for big inputs
    return v.reshape(shape).astype(dtype)


def _sample_conv_geom(draw):
    st = _st()
    N = draw(st.integers(1, 2))
    C = draw(st.integers(1, 3))
    O = draw(st.integers(1, 3))
    KH, KW = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride = draw(st.sampled_from([1, 2, (1, 2), (2, 1)]))
    padding = draw(st.sampled_from([0, 1, (0, 1), (2, 1)]))
    dilation = draw(st.sampled_from([1, 2, (1, 2)]))
    sh, sw = K._pair(stride)
    ph, pw = K._pair(padding)
    dh, dw = K._pair(dilation)
    H = draw(st.integers(max(1, dh * (KH - 1) + 1 - 2 * ph), 6))
    W = draw(st.integers(max(1, dw * (KW - 1) + 1 - 2 * pw), 6))
    OH = (H + 2 * ph - dh * (KH - 1) - 1) // sh + 1
    OW = (W + 2 * pw - dw * (KW - 1) - 1) // sw + 1
    return (N, C, H, W), (O, C, KH, KW), (N, O, OH, OW), stride, padding, dilation


def _sample_conv2d(draw, dtype=np.float64):
    xs, ws, ys, stride, padding, dilation = _sample_conv_geom(draw)
    b = _arr(draw, (ws[0],), dtype) if draw(_st().booleans()) else None
    return (_arr(draw, xs, dtype), _arr(draw, ws, dtype), b, stride, padding, dilation), {}


def _sample_conv2d_input_grad(draw, dtype=np.float64):
    xs, ws, ys, stride, padding, dilation = _sample_conv_geom(draw)
    return (_arr(draw, ys, dtype), _arr(draw, ws, dtype), xs, stride, padding, dilation), {}


def _sample_conv2d_weight_grad(draw, dtype=np.float64):
    xs, ws, ys, stride, padding, dilation = _sample_conv_geom(draw)
    return (_arr(draw, ys, dtype), _arr(draw, xs, dtype), ws, stride, padding, dilation), {}


def _sample_pool_geom(draw):
    st = _st()
    N, C = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    k = draw(st.sampled_from([1, 2, 3, (2, 3), (3, 2)]))
    kh, kw = K._pair(k)
    stride = draw(st.sampled_from([None, 1, 2, (1, 2)]))
    padding = draw(st.sampled_from([0, 1, (0, 1), (1, 0)]))
    ph, pw = K._pair(padding)
    ph, pw = min(ph, kh // 2), min(pw, kw // 2)          # PyTorch's rule: pad <= kernel // 2
    padding = (ph, pw)
    H = draw(st.integers(max(1, kh - 2 * ph), 6))
    W = draw(st.integers(max(1, kw - 2 * pw), 6))
    sh, sw = K._pair(stride if stride is not None else k)
    OH, OW = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    return (N, C, H, W), (N, C, OH, OW), k, stride, padding


def _sample_pool(draw, dtype=np.float64, distinct=True):
    xs, ys, k, stride, padding = _sample_pool_geom(draw)
    x = _distinct(draw, xs, dtype) if distinct else _arr(draw, xs, dtype)
    return (x, k, stride, padding), {}


def _sample_avg_pool(draw, dtype=np.float64):
    return _sample_pool(draw, dtype, distinct=False)


def _sample_max_pool2d_grad(draw, dtype=np.float64):
    xs, ys, k, stride, padding = _sample_pool_geom(draw)
    return (_arr(draw, ys, dtype), _distinct(draw, xs, dtype), k, stride, padding), {}


def _sample_max_pool2d_select(draw, dtype=np.float64):
    xs, ys, k, stride, padding = _sample_pool_geom(draw)
    return (_arr(draw, xs, dtype), _distinct(draw, xs, dtype), k, stride, padding), {}


def _sample_avg_pool2d_grad(draw, dtype=np.float64):
    xs, ys, k, stride, padding = _sample_pool_geom(draw)
    return (_arr(draw, ys, dtype), xs, k, stride, padding), {}


def _shape(draw, min_dims=1, max_dims=3):
    st = _st()
    return tuple(draw(st.integers(1, 4)) for _ in range(draw(st.integers(min_dims, max_dims))))


def _sample_unary(draw, dtype=np.float64):
    return (_arr(draw, _shape(draw), dtype, -2.0, 2.0),), {}


def _sample_unary_kink0(draw, dtype=np.float64):
    return (_away(draw, _shape(draw), dtype) * 2.0,), {}


def _sample_grad_kink0(draw, dtype=np.float64):
    s = _shape(draw)
    return (_arr(draw, s, dtype), _away(draw, s, dtype) * 2.0), {}


def _sample_grad_smooth(draw, dtype=np.float64):
    s = _shape(draw)
    return (_arr(draw, s, dtype), _arr(draw, s, dtype, -2.0, 2.0)), {}


def _sample_sigmoid_grad(draw, dtype=np.float64):
    s = _shape(draw)
    return (_arr(draw, s, dtype), _arr(draw, s, dtype, 0.05, 0.95)), {}


def _sample_leaky(draw, dtype=np.float64):
    return (_away(draw, _shape(draw), dtype) * 2.0, draw(_st().sampled_from([0.01, 0.2]))), {}


def _sample_leaky_grad(draw, dtype=np.float64):
    s = _shape(draw)
    return (_arr(draw, s, dtype), _away(draw, s, dtype) * 2.0, draw(_st().sampled_from([0.01, 0.2]))), {}


def _sample_elu(draw, dtype=np.float64):
    return (_away(draw, _shape(draw), dtype) * 2.0, draw(_st().sampled_from([1.0, 0.5]))), {}


def _sample_elu_grad(draw, dtype=np.float64):
    s = _shape(draw)
    return (_arr(draw, s, dtype), _away(draw, s, dtype) * 2.0, draw(_st().sampled_from([1.0, 0.5]))), {}


def _sample_axis(draw, dtype=np.float64):
    s = _shape(draw)
    axis = draw(_st().integers(-len(s), len(s) - 1))
    return (_arr(draw, s, dtype, -2.0, 2.0), axis), {}


def _sample_softmax_grad(draw, dtype=np.float64):
    s = _shape(draw)
    axis = draw(_st().integers(-len(s), len(s) - 1))
    y = K.softmax(_arr(draw, s, np.float64, -2.0, 2.0), axis).astype(dtype)
    return (_arr(draw, s, dtype), y, axis), {}


def _sample_softmax_grad_y(draw, dtype=np.float64):
    (g, y, axis), _ = _sample_softmax_grad(draw, dtype)
    return (_arr(draw, y.shape, dtype), g, y, axis), {}


def _sample_log_softmax_grad(draw, dtype=np.float64):
    s = _shape(draw)
    axis = draw(_st().integers(-len(s), len(s) - 1))
    y = K.log_softmax(_arr(draw, s, np.float64, -2.0, 2.0), axis).astype(dtype)
    return (_arr(draw, s, dtype), y, axis), {}


def _sample_logsumexp_grad(draw, dtype=np.float64):
    s = _shape(draw)
    axis = draw(_st().integers(-len(s), len(s) - 1))
    x = _arr(draw, s, dtype, -2.0, 2.0)
    y = K.logsumexp(x, axis)
    return (_arr(draw, np.shape(y), dtype), x, y, axis), {}


def _sample_dropout(draw, dtype=np.float64):
    st = _st()
    return (_arr(draw, _shape(draw), dtype), draw(st.sampled_from([0.0, 0.25, 0.5])),
            draw(st.integers(0, 2**31 - 1))), {}


def _sample_bn(draw, dtype=np.float64):
    st = _st()
    N, C = draw(st.integers(2, 4)), draw(st.integers(1, 3))
    shape = (N, C) + tuple(draw(st.integers(1, 3)) for _ in range(draw(st.sampled_from([0, 2]))))
    x = _arr(draw, shape, dtype, -2.0, 2.0)
    gamma, beta = _arr(draw, (C,), dtype, 0.5, 1.5), _arr(draw, (C,), dtype)
    rm, rv = _arr(draw, (C,), dtype), _arr(draw, (C,), dtype, 0.5, 1.5)
    return (x, gamma, beta, rm, rv, draw(st.booleans())), {"eps": 1e-5}


def _sample_bn_grad_input(draw, dtype=np.float64):
    (x, gamma, beta, rm, rv, train), kw = _sample_bn(draw, dtype)
    return (_arr(draw, x.shape, dtype), x, gamma, rm, rv, train, 1e-5), {}


def _sample_bn_grad_gamma(draw, dtype=np.float64):
    (x, gamma, beta, rm, rv, train), kw = _sample_bn(draw, dtype)
    return (_arr(draw, x.shape, dtype), x, rm, rv, train, 1e-5), {}


def _sample_bn_stats(draw, dtype=np.float64):
    (x, gamma, beta, rm, rv, train), kw = _sample_bn(draw, dtype)
    return (x, rm, rv, 0.1), {}


def _sample_ln(draw, dtype=np.float64):
    s = _shape(draw, 1, 3)
    s = s[:-1] + (max(s[-1], 2),)
    D = s[-1]
    return (_arr(draw, s, dtype, -2.0, 2.0), _arr(draw, (D,), dtype, 0.5, 1.5), _arr(draw, (D,), dtype)), {}


def _sample_ln_grad_input(draw, dtype=np.float64):
    (x, gamma, beta), _ = _sample_ln(draw, dtype)
    return (_arr(draw, x.shape, dtype), x, gamma, 1e-5), {}


def _sample_ln_grad_gamma(draw, dtype=np.float64):
    (x, gamma, beta), _ = _sample_ln(draw, dtype)
    return (_arr(draw, x.shape, dtype), x, 1e-5), {}


def _sample_rows_sum(draw, dtype=np.float64):
    return (_arr(draw, _shape(draw, 1, 3), dtype),), {}


def _sample_channel_sum(draw, dtype=np.float64):
    return (_arr(draw, _shape(draw, 2, 4), dtype),), {}


def _sample_channel_broadcast(draw, dtype=np.float64):
    s = _shape(draw, 2, 4)
    return (_arr(draw, (s[1],), dtype), s), {}


def _sample_embedding(draw, dtype=np.float64):
    st = _st()
    V, D = draw(st.integers(1, 5)), draw(st.integers(1, 3))
    ids = _rng(draw).integers(0, V, _shape(draw, 1, 2))
    return (_arr(draw, (V, D), dtype), ids), {}


def _sample_embedding_grad(draw, dtype=np.float64):
    (table, ids), _ = _sample_embedding(draw, dtype)
    return (_arr(draw, ids.shape + (table.shape[1],), dtype), ids, table.shape), {}


def _reduction(draw):
    return draw(_st().sampled_from(["mean", "sum", "none"]))


def _sample_pair_loss(lo_p=-2.0, hi_p=2.0, lo_t=-2.0, hi_t=2.0):
    def sample(draw, dtype=np.float64):
        s = _shape(draw)
        return (_arr(draw, s, dtype, lo_p, hi_p), _arr(draw, s, dtype, lo_t, hi_t)), {"reduction": _reduction(draw)}
    return sample


def _sample_huber(draw, dtype=np.float64):
    s = _shape(draw)
    delta = draw(_st().sampled_from([0.5, 1.0]))
    t = _arr(draw, s, dtype)
    r = _away(draw, s, np.float64, 0.0, 0.0) * 2.0
    r = np.where(np.abs(np.abs(r) - delta) < 0.05, r * 1.2 + np.sign(r) * 0.1, r)    # |r| away from delta
    return (t + r.astype(dtype), t, delta), {"reduction": _reduction(draw)}


def _sample_ce(draw, dtype=np.float64):
    st = _st()
    N, C = draw(st.integers(1, 4)), draw(st.integers(1, 5))
    z = _arr(draw, (N, C), dtype, -2.0, 2.0)
    if draw(st.booleans()):
        y = _rng(draw).integers(0, C, N)
    else:
        p = _arr(draw, (N, C), np.float64, 0.1, 1.0)
        y = (p / p.sum(1, keepdims=True)).astype(dtype)
    return (z, y), {"reduction": _reduction(draw)}


def _sample_nll(draw, dtype=np.float64):
    st = _st()
    N, C = draw(st.integers(1, 4)), draw(st.integers(1, 5))
    return (_arr(draw, (N, C), dtype, -3.0, 0.0), _rng(draw).integers(0, C, N)), {"reduction": _reduction(draw)}


def _loss_grad_sample(fwd_sample, shape_of_g):
    def sample(draw, dtype=np.float64):
        args, kw = fwd_sample(draw, dtype)
        red = kw["reduction"]
        g = _arr(draw, shape_of_g(args), dtype) if red == "none" else float(_arr(draw, (), np.float64))
        return (g,) + tuple(args), kw
    return sample


def _elem_shape(args):
    return np.shape(args[0])


def _row_shape(args):
    return (np.shape(args[0])[0],)


# =========================================================================== convolution
@primitive(sample=_sample_conv2d)
def conv2d(x, w, b=None, stride=1, padding=0, dilation=1):
    """2-D cross-correlation: NCHW ``x``, OIHW ``w``, optional bias ``b`` of shape (O,).

    ``stride``/``padding``/``dilation``: an int or an (h, w) pair; zero padding."""
    return K.conv2d(x, w, b, stride, padding, dilation)


@vjp(conv2d)
def _conv2d_vjp(y, x, w, b=None, stride=1, padding=0, dilation=1):
    # the weight gradient first, while d[y] (just written by the layer above's rule) is warm
    d[w] = conv2d_weight_grad(d[y], x, w.shape, stride, padding, dilation)
    d[b] = channel_sum(d[y])
    d[x] = conv2d_input_grad(d[y], w, x.shape, stride, padding, dilation)


@primitive(sample=_sample_conv2d_input_grad)
def conv2d_input_grad(dy, w, x_shape, stride=1, padding=0, dilation=1):
    """Transposed convolution: the cotangent of conv2d's x, shaped ``x_shape``."""
    return K.conv2d_input_grad(dy, w, tuple(x_shape), stride, padding, dilation)


@vjp(conv2d_input_grad)
def _conv2d_input_grad_vjp(r, dy, w, x_shape, stride=1, padding=0, dilation=1):
    d[dy] = conv2d(d[r], w, None, stride, padding, dilation)
    d[w] = conv2d_weight_grad(dy, d[r], w.shape, stride, padding, dilation)


@primitive(sample=_sample_conv2d_weight_grad)
def conv2d_weight_grad(dy, x, w_shape, stride=1, padding=0, dilation=1):
    """The cotangent of conv2d's w, shaped ``w_shape``."""
    return K.conv2d_weight_grad(dy, x, tuple(w_shape), stride, padding, dilation)


@vjp(conv2d_weight_grad)
def _conv2d_weight_grad_vjp(r, dy, x, w_shape, stride=1, padding=0, dilation=1):
    d[dy] = conv2d(x, d[r], None, stride, padding, dilation)
    d[x] = conv2d_input_grad(dy, d[r], x.shape, stride, padding, dilation)


@primitive(sample=_sample_channel_sum)
def channel_sum(x):
    """Sum over every axis but 1: (N, C, ...) -> (C,) (the bias / beta cotangent)."""
    return K.channel_sum(x)


@vjp(channel_sum)
def _channel_sum_vjp(r, x):
    d[x] = channel_broadcast(d[r], x.shape)


@primitive(sample=_sample_channel_broadcast)
def channel_broadcast(g, shape):
    """(C,) -> ``shape`` with g[c] along axis 1 (adjoint of channel_sum)."""
    return K.channel_broadcast(g, tuple(shape))


@vjp(channel_broadcast)
def _channel_broadcast_vjp(r, g, shape):
    d[g] = channel_sum(d[r])


# =========================================================================== pooling
@primitive(sample=_sample_pool)
def max_pool2d(x, kernel_size, stride=None, padding=0):
    """Max over windows of NCHW ``x``; ``stride`` defaults to ``kernel_size``; padding counts as -inf."""
    return K.max_pool2d(x, kernel_size, stride, padding)


@vjp(max_pool2d)
def _max_pool2d_vjp(y, x, kernel_size, stride=None, padding=0):
    d[x] = max_pool2d_grad(d[y], x, kernel_size, stride, padding)


@primitive(sample=_sample_max_pool2d_grad)
def max_pool2d_grad(dy, x, kernel_size, stride=None, padding=0):
    """dy routed to each window's first maximum of x (shaped like x)."""
    return K.max_pool2d_grad(dy, x, kernel_size, stride, padding)


@vjp(max_pool2d_grad)
def _max_pool2d_grad_vjp(r, dy, x, kernel_size, stride=None, padding=0):
    d[dy] = max_pool2d_select(d[r], x, kernel_size, stride, padding)   # piecewise constant in x


@primitive(sample=_sample_max_pool2d_select)
def max_pool2d_select(g, x, kernel_size, stride=None, padding=0):
    """g read at each window's first maximum of x (adjoint of max_pool2d_grad in dy)."""
    return K.max_pool2d_select(g, x, kernel_size, stride, padding)


@vjp(max_pool2d_select)
def _max_pool2d_select_vjp(r, g, x, kernel_size, stride=None, padding=0):
    d[g] = max_pool2d_grad(d[r], x, kernel_size, stride, padding)


@primitive(sample=_sample_avg_pool)
def avg_pool2d(x, kernel_size, stride=None, padding=0):
    """Mean over windows of NCHW ``x``; zero padding counts in the divisor (count_include_pad)."""
    return K.avg_pool2d(x, kernel_size, stride, padding)


@vjp(avg_pool2d)
def _avg_pool2d_vjp(y, x, kernel_size, stride=None, padding=0):
    d[x] = avg_pool2d_grad(d[y], x.shape, kernel_size, stride, padding)


@primitive(sample=_sample_avg_pool2d_grad)
def avg_pool2d_grad(dy, x_shape, kernel_size, stride=None, padding=0):
    """Adjoint of avg_pool2d (linear), shaped ``x_shape``."""
    return K.avg_pool2d_grad(dy, tuple(x_shape), kernel_size, stride, padding)


@vjp(avg_pool2d_grad)
def _avg_pool2d_grad_vjp(r, dy, x_shape, kernel_size, stride=None, padding=0):
    d[dy] = avg_pool2d(d[r], kernel_size, stride, padding)


# =========================================================================== activations
@primitive(sample=_sample_unary_kink0, elementwise=True)
def relu(x):
    """max(x, 0)."""
    return K.relu(x)


@vjp(relu)
def _relu_vjp(y, x):
    d[x] = relu_grad(d[y], x)


@primitive(sample=_sample_grad_kink0, elementwise=True)
def relu_grad(g, x):
    """g where x > 0, else 0."""
    return K.relu_grad(g, x)


@vjp(relu_grad)
def _relu_grad_vjp(r, g, x):
    d[g] = relu_grad(d[r], x)


@primitive(sample=_sample_leaky, elementwise=True)
def leaky_relu(x, negative_slope=0.01):
    """x if x > 0 else negative_slope * x."""
    return K.leaky_relu(x, negative_slope)


@vjp(leaky_relu)
def _leaky_relu_vjp(y, x, negative_slope=0.01):
    d[x] = leaky_relu_grad(d[y], x, negative_slope)


@primitive(sample=_sample_leaky_grad, elementwise=True)
def leaky_relu_grad(g, x, negative_slope=0.01):
    return K.leaky_relu_grad(g, x, negative_slope)


@vjp(leaky_relu_grad)
def _leaky_relu_grad_vjp(r, g, x, negative_slope=0.01):
    d[g] = leaky_relu_grad(d[r], x, negative_slope)


@primitive(sample=_sample_elu, elementwise=True)
def elu(x, alpha=1.0):
    """x if x > 0 else alpha * (exp(x) - 1)."""
    return K.elu(x, alpha)


@vjp(elu)
def _elu_vjp(y, x, alpha=1.0):
    d[x] = elu_grad(d[y], x, alpha)


@primitive(sample=_sample_elu_grad, elementwise=True)
def elu_grad(g, x, alpha=1.0):
    return K.elu_grad(g, x, alpha)


@vjp(elu_grad)
def _elu_grad_vjp(r, g, x, alpha=1.0):
    d[g] = elu_grad(d[r], x, alpha)
    t = d[r] * g
    d[x] = elu_grad(t, x, alpha) - relu_grad(t, x)      # t * elu''(x): 0 for x > 0, alpha e^x below


@primitive(sample=_sample_unary, elementwise=True)
def gelu(x):
    """x * Phi(x) (exact, erf-based, like PyTorch's default)."""
    return K.gelu(x)


@vjp(gelu)
def _gelu_vjp(y, x):
    d[x] = gelu_grad(d[y], x)


@primitive(sample=_sample_grad_smooth, elementwise=True)
def gelu_grad(g, x):
    return K.gelu_grad(g, x)


@vjp(gelu_grad)
def _gelu_grad_vjp(r, g, x):
    d[g] = gelu_grad(d[r], x)
    d[x] = gelu_grad2(d[r] * g, x)


@primitive(sample=_sample_grad_smooth, elementwise=True, tested_via=gelu)
def gelu_grad2(g, x):
    """g * gelu''(x). No VJP: third derivatives of gelu are not provided."""
    return K.gelu_grad2(g, x)


@primitive(sample=_sample_unary, elementwise=True)
def sigmoid(x):
    """1 / (1 + exp(-x)), stable for large |x|."""
    return K.sigmoid(x)


@vjp(sigmoid)
def _sigmoid_vjp(y, x):
    d[x] = sigmoid_grad(d[y], y)


@primitive(sample=_sample_sigmoid_grad, elementwise=True)
def sigmoid_grad(g, y):
    """g * y * (1 - y)."""
    return K.sigmoid_grad(g, y)


@vjp(sigmoid_grad)
def _sigmoid_grad_vjp(r, g, y):
    d[g] = sigmoid_grad(d[r], y)
    d[y] = d[r] * g * (1.0 - 2.0 * y)


@primitive(sample=_sample_unary, elementwise=True)
def softplus(x):
    """log(1 + exp(x)), stable."""
    return K.softplus(x)


@vjp(softplus)
def _softplus_vjp(y, x):
    d[x] = d[y] * sigmoid(x)


# =========================================================================== softmax family
@primitive(sample=_sample_axis)
def softmax(x, axis=-1):
    """exp(x) / sum(exp(x), axis), stable."""
    return K.softmax(x, axis)


@vjp(softmax)
def _softmax_vjp(y, x, axis=-1):
    d[x] = softmax_grad(d[y], y, axis)


@primitive(sample=_sample_softmax_grad)
def softmax_grad(g, y, axis=-1):
    """y * (g - sum(g * y, axis)) for y = softmax(x, axis)."""
    return K.softmax_grad(g, y, axis)


@vjp(softmax_grad)
def _softmax_grad_vjp(r, g, y, axis=-1):
    d[g] = softmax_grad(d[r], y, axis)           # the softmax Jacobian is symmetric
    d[y] = softmax_grad_y(d[r], g, y, axis)


@primitive(sample=_sample_softmax_grad_y, tested_via=softmax)
def softmax_grad_y(r, g, y, axis=-1):
    """Cotangent of y in softmax_grad(g, y). No VJP (third derivatives of softmax not provided)."""
    return K.softmax_grad_y(r, g, y, axis)


@primitive(sample=_sample_axis)
def log_softmax(x, axis=-1):
    """x - logsumexp(x, axis), stable."""
    return K.log_softmax(x, axis)


@vjp(log_softmax)
def _log_softmax_vjp(y, x, axis=-1):
    d[x] = log_softmax_grad(d[y], y, axis)


@primitive(sample=_sample_log_softmax_grad, tested_via=log_softmax)
def log_softmax_grad(g, y, axis=-1):
    """g - exp(y) * sum(g, axis). No VJP (second derivatives of log_softmax not provided)."""
    return K.log_softmax_grad(g, y, axis)


@primitive(sample=_sample_axis)
def logsumexp(x, axis=-1):
    """log(sum(exp(x), axis)), stable; ``axis`` (an int) is removed from the shape."""
    return K.logsumexp(x, axis)


@vjp(logsumexp)
def _logsumexp_vjp(y, x, axis=-1):
    d[x] = logsumexp_grad(d[y], x, y, axis)


@primitive(sample=_sample_logsumexp_grad, tested_via=logsumexp)
def logsumexp_grad(g, x, y, axis=-1):
    """g * softmax(x, axis) with g, y broadcast along axis. No VJP."""
    return K.logsumexp_grad(g, x, y, axis)


# =========================================================================== dropout, norms, lookup
@primitive(sample=_sample_dropout)
def dropout(x, rate, seed):
    """Zero each element with probability ``rate`` and scale the rest by 1/(1-rate).

    The mask is a pure function of (seed, element index): the same seed gives
    the same mask everywhere (Python, compiled, and the VJP). rate=0 is the identity."""
    return K.dropout(x, rate, seed)


@vjp(dropout)
def _dropout_vjp(y, x, rate, seed):
    d[x] = dropout(d[y], rate, seed)


@primitive(sample=_sample_bn)
def batch_norm(x, gamma, beta, running_mean, running_var, train=True, eps=1e-5):
    """Batch normalization over axis 1 of (N, C) or (N, C, H, W) ``x``.

    train=True normalizes with the batch mean and biased variance; train=False
    with ``running_mean``/``running_var``. The running statistics are never
    differentiated; get the new ones with :func:`batch_norm_stats`."""
    return K.batch_norm(x, gamma, beta, running_mean, running_var, train, eps)


@vjp(batch_norm)
def _batch_norm_vjp(y, x, gamma, beta, running_mean, running_var, train=True, eps=1e-5):
    d[x] = batch_norm_grad_input(d[y], x, gamma, running_mean, running_var, train, eps)
    d[gamma] = batch_norm_grad_gamma(d[y], x, running_mean, running_var, train, eps)
    d[beta] = channel_sum(d[y])


@primitive(sample=_sample_bn_grad_input, tested_via=batch_norm)
def batch_norm_grad_input(dy, x, gamma, running_mean, running_var, train=True, eps=1e-5):
    """Cotangent of batch_norm's x. No VJP (second derivatives of batch_norm not provided)."""
    return K.batch_norm_grad_input(dy, x, gamma, running_mean, running_var, train, eps)


@primitive(sample=_sample_bn_grad_gamma, tested_via=batch_norm)
def batch_norm_grad_gamma(dy, x, running_mean, running_var, train=True, eps=1e-5):
    """Cotangent of batch_norm's gamma. No VJP."""
    return K.batch_norm_grad_gamma(dy, x, running_mean, running_var, train, eps)


@primitive(sample=_sample_bn_stats, tested_via=batch_norm)
def batch_norm_stats(x, running_mean, running_var, momentum=0.1):
    """New running statistics after a training batch, stacked (2, C): ``[mean, var]``.

    ``new = (1 - momentum) * running + momentum * batch`` with the unbiased
    batch variance (PyTorch's rule). Running statistics are state, not a
    differentiable output (as PyTorch's buffers): no cotangent flows through
    them, so they can be computed inside a differentiated function and returned
    as auxiliary data (``has_aux=True``)."""
    return K.batch_norm_stats(x, running_mean, running_var, momentum)


@vjp(batch_norm_stats)
def _batch_norm_stats_vjp(y, x, running_mean, running_var, momentum=0.1):
    """No cotangent: running statistics are buffers."""


@primitive(sample=_sample_ln)
def layer_norm(x, gamma, beta, eps=1e-5):
    """Normalize over the last axis, then scale by gamma and shift by beta (both of shape (D,))."""
    return K.layer_norm(x, gamma, beta, eps)


@vjp(layer_norm)
def _layer_norm_vjp(y, x, gamma, beta, eps=1e-5):
    d[x] = layer_norm_grad_input(d[y], x, gamma, eps)
    d[gamma] = layer_norm_grad_gamma(d[y], x, eps)
    d[beta] = layer_norm_grad_beta(d[y])


@primitive(sample=_sample_ln_grad_input, tested_via=layer_norm)
def layer_norm_grad_input(dy, x, gamma, eps=1e-5):
    """Cotangent of layer_norm's x. No VJP."""
    return K.layer_norm_grad_input(dy, x, gamma, eps)


@primitive(sample=_sample_ln_grad_gamma, tested_via=layer_norm)
def layer_norm_grad_gamma(dy, x, eps=1e-5):
    """Cotangent of layer_norm's gamma. No VJP."""
    return K.layer_norm_grad_gamma(dy, x, eps)


@primitive(sample=_sample_rows_sum, tested_via=layer_norm)
def layer_norm_grad_beta(dy):
    """Sum over every axis but the last. No VJP."""
    return K.layer_norm_grad_beta(dy)


@primitive(sample=_sample_embedding)
def embedding(table, ids):
    """``table[ids]``: (V, D) table, integer ids of any shape -> ids.shape + (D,)."""
    return K.embedding(table, ids)


@vjp(embedding)
def _embedding_vjp(y, table, ids):
    d[table] = embedding_grad(d[y], ids, table.shape)


@primitive(sample=_sample_embedding_grad)
def embedding_grad(dy, ids, table_shape):
    """Scatter-add of dy's rows at ids into a zero table of ``table_shape``."""
    return K.embedding_grad(dy, ids, tuple(table_shape))


@vjp(embedding_grad)
def _embedding_grad_vjp(r, dy, ids, table_shape):
    d[dy] = embedding(d[r], ids)


# =========================================================================== losses
@primitive(sample=_sample_pair_loss())
def mse(pred, target, reduction="mean"):
    """(pred - target)**2, reduced."""
    return K.mse(pred, target, reduction)


@vjp(mse)
def _mse_vjp(y, pred, target, reduction="mean"):
    d[pred] = mse_grad(d[y], pred, target, reduction)
    d[target] = -mse_grad(d[y], pred, target, reduction)


@primitive(sample=_loss_grad_sample(_sample_pair_loss(), _elem_shape), tested_via=mse)
def mse_grad(g, pred, target, reduction="mean"):
    """Cotangent of mse's pred. No VJP."""
    return K.mse_grad(g, pred, target, reduction)


@primitive(sample=_sample_huber)
def huber(pred, target, delta=1.0, reduction="mean"):
    """0.5 r**2 if |r| <= delta else delta * (|r| - delta / 2), r = pred - target, reduced."""
    return K.huber(pred, target, delta, reduction)


@vjp(huber)
def _huber_vjp(y, pred, target, delta=1.0, reduction="mean"):
    d[pred] = huber_grad(d[y], pred, target, delta, reduction)
    d[target] = -huber_grad(d[y], pred, target, delta, reduction)


def _sample_huber_grad(draw, dtype=np.float64):
    args, kw = _sample_huber(draw, dtype)
    g = _arr(draw, np.shape(args[0]), dtype) if kw["reduction"] == "none" else float(_arr(draw, (), np.float64))
    return (g,) + tuple(args), kw


@primitive(sample=_sample_huber_grad, tested_via=huber)
def huber_grad(g, pred, target, delta=1.0, reduction="mean"):
    """Cotangent of huber's pred. No VJP."""
    return K.huber_grad(g, pred, target, delta, reduction)


@primitive(sample=_sample_ce)
def cross_entropy(logits, labels, reduction="mean"):
    """Softmax cross-entropy over the last axis of (N, C) logits, fused and stable.

    ``labels``: (N,) integer class ids (not differentiable) or (N, C) target
    probabilities (differentiable)."""
    return K.cross_entropy(logits, labels, reduction)


@vjp(cross_entropy)
def _cross_entropy_vjp(y, logits, labels, reduction="mean"):
    d[logits] = cross_entropy_grad(d[y], logits, labels, reduction)
    d[labels] = cross_entropy_grad_target(d[y], logits, labels, reduction)


@primitive(sample=_loss_grad_sample(_sample_ce, _row_shape), tested_via=cross_entropy)
def cross_entropy_grad(g, logits, labels, reduction="mean"):
    """Cotangent of cross_entropy's logits: g * (softmax * sum(t) - t). No VJP."""
    return K.cross_entropy_grad(g, logits, labels, reduction)


@primitive(sample=_loss_grad_sample(_sample_ce, _row_shape), tested_via=cross_entropy)
def cross_entropy_grad_target(g, logits, labels, reduction="mean"):
    """Cotangent of cross_entropy's probability targets: -g * log_softmax. No VJP."""
    return K.cross_entropy_grad_target(g, logits, labels, reduction)


@primitive(sample=_sample_nll)
def nll(logp, labels, reduction="mean"):
    """Negative log-likelihood -logp[i, labels[i]] of (N, C) log-probabilities, reduced."""
    return K.nll(logp, labels, reduction)


@vjp(nll)
def _nll_vjp(y, logp, labels, reduction="mean"):
    d[logp] = nll_grad(d[y], logp, labels, reduction)


@primitive(sample=_loss_grad_sample(_sample_nll, _row_shape), tested_via=nll)
def nll_grad(g, logp, labels, reduction="mean"):
    """Cotangent of nll's logp (linear in g). No VJP."""
    return K.nll_grad(g, logp, labels, reduction)


@primitive(sample=_sample_pair_loss(0.05, 0.95, 0.0, 1.0))
def binary_cross_entropy(probs, target, reduction="mean"):
    """-(t log p + (1 - t) log(1 - p)) with the logs clamped at -100 (PyTorch's rule), reduced."""
    return K.binary_cross_entropy(probs, target, reduction)


@vjp(binary_cross_entropy)
def _bce_vjp(y, probs, target, reduction="mean"):
    d[probs] = binary_cross_entropy_grad(d[y], probs, target, reduction)
    d[target] = binary_cross_entropy_grad_target(d[y], probs, target, reduction)


@primitive(sample=_loss_grad_sample(_sample_pair_loss(0.05, 0.95, 0.0, 1.0), _elem_shape), tested_via=binary_cross_entropy)
def binary_cross_entropy_grad(g, probs, target, reduction="mean"):
    """No VJP."""
    return K.binary_cross_entropy_grad(g, probs, target, reduction)


@primitive(sample=_loss_grad_sample(_sample_pair_loss(0.05, 0.95, 0.0, 1.0), _elem_shape), tested_via=binary_cross_entropy)
def binary_cross_entropy_grad_target(g, probs, target, reduction="mean"):
    """No VJP."""
    return K.binary_cross_entropy_grad_target(g, probs, target, reduction)


@primitive(sample=_sample_pair_loss(-3.0, 3.0, 0.0, 1.0))
def binary_cross_entropy_with_logits(logits, target, reduction="mean"):
    """max(z, 0) - z t + log1p(exp(-|z|)): binary cross-entropy of sigmoid(z), stable, reduced."""
    return K.binary_cross_entropy_with_logits(logits, target, reduction)


@vjp(binary_cross_entropy_with_logits)
def _bcel_vjp(y, logits, target, reduction="mean"):
    d[logits] = binary_cross_entropy_with_logits_grad(d[y], logits, target, reduction)
    d[target] = binary_cross_entropy_with_logits_grad_target(d[y], logits, target, reduction)


@primitive(sample=_loss_grad_sample(_sample_pair_loss(-3.0, 3.0, 0.0, 1.0), _elem_shape), tested_via=binary_cross_entropy_with_logits)
def binary_cross_entropy_with_logits_grad(g, logits, target, reduction="mean"):
    """g * (sigmoid(z) - t). No VJP."""
    return K.binary_cross_entropy_with_logits_grad(g, logits, target, reduction)


@primitive(sample=_loss_grad_sample(_sample_pair_loss(-3.0, 3.0, 0.0, 1.0), _elem_shape), tested_via=binary_cross_entropy_with_logits)
def binary_cross_entropy_with_logits_grad_target(g, logits, target, reduction="mean"):
    """-g * z. No VJP."""
    return K.binary_cross_entropy_with_logits_grad_target(g, logits, target, reduction)


# =========================================================================== layers (stax-style)
# Every layer is (init_fn, apply_fn):
#   init_fn(seed, input_shape, dtype=np.float64) -> (output_shape, params)
#   apply_fn(params, x, train=False, seed=0) -> y
# apply_fns are plain defs of primitives with constants written into their source,
# so the source transformer (which reads source, it does not trace) sees them.

_GEN_DIR = None


def _gen_dir():
    global _GEN_DIR
    if _GEN_DIR is None:
        base = os.environ.get("FUNCGRAD_CACHE_DIR") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "funcgrad")
        path = os.path.join(base, "nn")
        try:
            os.makedirs(path, exist_ok=True)
        except OSError:
            path = os.path.join(tempfile.gettempdir(), f"funcgrad-nn-{os.getuid() if hasattr(os, 'getuid') else 0}")
            os.makedirs(path, exist_ok=True)
        _GEN_DIR = path
    return _GEN_DIR


def _make_function(name, src, env):
    """Compile ``src`` (defining ``name``) under a content-hashed real filename registered
    in linecache, so ``inspect.getsource`` works; ``env`` becomes its globals."""
    digest = hashlib.sha256(src.encode()).hexdigest()[:16]
    filename = os.path.join(_gen_dir(), f"{name}_{digest}.py")
    if not os.path.exists(filename):
        tmp = f"{filename}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(src)
        os.replace(tmp, filename)
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    g = {"__name__": f"funcgrad.nn._generated.{name}", "__file__": filename, "np": np}
    g.update(env)
    exec(compile(src, filename, "exec"), g)
    fn = g[name]
    fn.__module__ = "funcgrad.nn"
    return fn


def _static(v):
    """Source text of a static argument (int, float, None, tuple of ints)."""
    if isinstance(v, (list, tuple)):
        return "(" + ", ".join(_static(e) for e in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, (bool, np.bool_)):
        return repr(bool(v))
    if isinstance(v, (int, np.integer)):
        return repr(int(v))
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    if v is None:
        return "None"
    raise TypeError(f"layer argument must be an int, float, None or a tuple of ints, got {v!r}")


def _seed_of(seed):
    if seed is None or isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"init_fn: seed must be an int (randomness is explicit), got {seed!r}")
    return int(seed)


def Dense(out_dim, W_init=None, b_init=None):
    """Fully connected: ``x @ w + b`` with w (in, out) (Glorot-uniform) and b (out,) (zeros)."""
    out_dim = int(out_dim)

    def init_fn(seed, input_shape, dtype=np.float64):
        seed = _seed_of(seed)
        fan_in = int(input_shape[-1])
        if W_init is None:
            w = initializers.glorot_uniform(seed, (fan_in, out_dim), dtype=dtype, in_axis=0, out_axis=1)
        else:
            w = W_init(seed, (fan_in, out_dim), dtype=dtype)
        b = (initializers.zeros if b_init is None else b_init)(seed + 1, (out_dim,), dtype=dtype)
        return tuple(input_shape[:-1]) + (out_dim,), {"w": w, "b": b}

    def dense_apply(params, x, train=False, seed=0):
        return x @ params["w"] + params["b"]

    return init_fn, dense_apply


def Conv2D(out_channels, kernel_size, stride=1, padding=0, dilation=1, W_init=None, b_init=None):
    """2-D convolution layer (NCHW / OIHW) with bias; weights Kaiming-uniform(a=sqrt(5)) like PyTorch."""
    O = int(out_channels)
    kh, kw = K._pair(kernel_size)
    sh, sw = K._pair(stride)
    ph, pw = K._pair(padding)
    dh, dw = K._pair(dilation)

    def init_fn(seed, input_shape, dtype=np.float64):
        seed = _seed_of(seed)
        N, C, H, W = input_shape
        wshape = (O, int(C), kh, kw)
        if W_init is None:
            w = initializers.kaiming_uniform(seed, wshape, a=math.sqrt(5.0), dtype=dtype)
            bound = 1.0 / math.sqrt(C * kh * kw)
            b = initializers.uniform(seed + 1, (O,), -bound, bound, dtype=dtype) if b_init is None else \
                b_init(seed + 1, (O,), dtype=dtype)
        else:
            w = W_init(seed, wshape, dtype=dtype)
            b = (initializers.zeros if b_init is None else b_init)(seed + 1, (O,), dtype=dtype)
        OH = (H + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        OW = (W + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        return (N, O, OH, OW), {"w": w, "b": b}

    src = (f"def conv2d_apply(params, x, train=False, seed=0):\n"
           f"    return conv2d(x, params['w'], params['b'], {_static((sh, sw))}, {_static((ph, pw))}, "
           f"{_static((dh, dw))})\n")
    return init_fn, _make_function("conv2d_apply", src, {"conv2d": conv2d})


def _pool_layer(name, fn, kernel_size, stride, padding):
    kh, kw = K._pair(kernel_size)
    sh, sw = (kh, kw) if stride is None else K._pair(stride)
    ph, pw = K._pair(padding)

    def init_fn(seed, input_shape, dtype=np.float64):
        N, C, H, W = input_shape
        return (N, C, (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1), ()

    src = (f"def {name}_apply(params, x, train=False, seed=0):\n"
           f"    return {name}(x, {_static((kh, kw))}, {_static((sh, sw))}, {_static((ph, pw))})\n")
    return init_fn, _make_function(f"{name}_apply", src, {name: fn})


def MaxPool2D(kernel_size, stride=None, padding=0):
    return _pool_layer("max_pool2d", max_pool2d, kernel_size, stride, padding)


def AvgPool2D(kernel_size, stride=None, padding=0):
    return _pool_layer("avg_pool2d", avg_pool2d, kernel_size, stride, padding)


def _shape_preserving(apply_fn):
    def init_fn(seed, input_shape, dtype=np.float64):
        return tuple(input_shape), ()
    return init_fn, apply_fn


def _flatten_init(seed, input_shape, dtype=np.float64):
    return (input_shape[0], int(np.prod(input_shape[1:]))), ()


def flatten_apply(params, x, train=False, seed=0):
    return np.reshape(x, (x.shape[0], -1))


def relu_apply(params, x, train=False, seed=0):
    return relu(x)


def tanh_apply(params, x, train=False, seed=0):
    return np.tanh(x)


Flatten = (_flatten_init, flatten_apply)
Relu = _shape_preserving(relu_apply)
Tanh = _shape_preserving(tanh_apply)


def Dropout(rate):
    """Dropout with probability ``rate`` when ``train`` is true (mask from the apply's ``seed``);
    the identity when it is false."""
    rate = float(rate)
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"Dropout: rate must be in [0, 1), got {rate}")
    src = (f"def dropout_apply(params, x, train=False, seed=0):\n"
           f"    return dropout(x, {_static(rate)} * train, seed)\n")
    return _shape_preserving(_make_function("dropout_apply", src, {"dropout": dropout}))


def BatchNorm(eps=1e-5, momentum=0.1):
    """Batch normalization over axis 1. params: gamma (ones), beta (zeros) and the running
    statistics ``mean`` (zeros) and ``var`` (ones). train=True normalizes with the batch
    statistics, train=False with the running ones. apply_fn never changes params; the new
    running statistics come from ``serial``'s ``apply_fn.with_stats`` (returned as auxiliary
    data of the differentiated loss) and go back in with ``apply_fn.merge_stats``, with
    PyTorch's rule ``new = (1 - momentum) * running + momentum * batch`` (unbiased variance)."""
    momentum = float(momentum)
    if not 0.0 <= momentum <= 1.0:
        raise ValueError(f"BatchNorm: momentum must be in [0, 1], got {momentum}")

    def init_fn(seed, input_shape, dtype=np.float64):
        C = int(input_shape[1])
        return tuple(input_shape), {"gamma": np.ones(C, dtype), "beta": np.zeros(C, dtype),
                                    "mean": np.zeros(C, dtype), "var": np.ones(C, dtype)}

    src = (f"def batch_norm_apply(params, x, train=False, seed=0):\n"
           f"    return batch_norm(x, params['gamma'], params['beta'], params['mean'], params['var'], train, "
           f"{_static(float(eps))})\n")
    apply_fn = _make_function("batch_norm_apply", src, {"batch_norm": batch_norm})
    src = (f"def batch_norm_new_stats(params, x):\n"
           f"    return batch_norm_stats(x, params['mean'], params['var'], {_static(momentum)})\n")
    apply_fn.new_stats = _make_function("batch_norm_new_stats", src, {"batch_norm_stats": batch_norm_stats})
    return init_fn, apply_fn


def _merge_layer_stats(p, s):
    """params of one BatchNorm layer with its running statistics replaced by s = [mean, var]."""
    if not (isinstance(p, dict) and "mean" in p and "var" in p):
        raise TypeError("merge_stats: params do not match the layers (expected a BatchNorm layer's dict)")
    s = np.asarray(s)
    if s.shape != (2,) + np.shape(p["mean"]):
        raise ValueError(f"merge_stats: statistics of shape {s.shape} for a layer of {np.shape(p['mean'])[0]} channels")
    out = dict(p)
    out["mean"] = s[0].astype(np.asarray(p["mean"]).dtype, copy=True)
    out["var"] = s[1].astype(np.asarray(p["var"]).dtype, copy=True)
    return out


def serial(*layers):
    """Compose layers. params is a tuple with one entry per layer; apply_fn is GENERATED
    straight-line source (``x = _layer0(params[0], x, train, seed * 1000003 + 0)``, ...),
    never a Python loop over closures, so the source transformer can read it.

    With BatchNorm layers, apply_fn also has ``with_stats(params, x, train=True, seed=0)
    -> (y, stats)`` and ``merge_stats(params, stats) -> params``::

        def loss(params, x, y):
            logits, stats = apply_fn.with_stats(params, x)
            return nn.cross_entropy(logits, y), stats
        (value, stats), grads = funcgrad.value_and_grad(loss, has_aux=True)(params, x, y)
        params = apply_fn.merge_stats(optim.apply_updates(params, updates), stats)
    """
    if not layers:
        raise ValueError("serial: give at least one layer")
    for i, layer in enumerate(layers):
        if not (isinstance(layer, tuple) and len(layer) == 2 and callable(layer[0]) and callable(layer[1])):
            raise TypeError(f"serial: layer {i} must be an (init_fn, apply_fn) pair, got {layer!r}")
    inits = [l[0] for l in layers]
    applies = [l[1] for l in layers]

    def init_fn(seed, input_shape, dtype=np.float64):
        seed = _seed_of(seed)
        seeds = np.random.default_rng(seed).integers(0, 2**31 - 1, len(inits))
        params = []
        shape = tuple(input_shape)
        for s, init in zip(seeds, inits):
            shape, p = init(int(s), shape, dtype=dtype)
            params.append(p)
        return shape, tuple(params)

    lines = ["def serial_apply(params, x, train=False, seed=0):"]
    for i in range(len(applies)):
        lines.append(f"    x = _layer{i}(params[{i}], x, train, seed * 1000003 + {i})")
    lines.append("    return x")
    src = "\n".join(lines) + "\n"
    env = {f"_layer{i}": a for i, a in enumerate(applies)}
    # the content hash names the file: same source -> same file; globals differ per call
    apply_fn = _make_function("serial_apply", src, env)

    # Layers with running statistics (BatchNorm, or a nested serial holding one): with_stats
    # also returns their new statistics, computed from each layer's training-mode input.
    stateful = [i for i, a in enumerate(applies) if hasattr(a, "new_stats") or hasattr(a, "with_stats")]
    if stateful:
        lines = ["def serial_apply_with_stats(params, x, train=True, seed=0):"]
        for i, a in enumerate(applies):
            if hasattr(a, "with_stats"):
                lines.append(f"    x, _s{i} = _layer{i}_with_stats(params[{i}], x, train, seed * 1000003 + {i})")
                env[f"_layer{i}_with_stats"] = a.with_stats
                continue
            if hasattr(a, "new_stats"):
                lines.append(f"    _s{i} = _layer{i}_new_stats(params[{i}], x)")
                env[f"_layer{i}_new_stats"] = a.new_stats
            lines.append(f"    x = _layer{i}(params[{i}], x, train, seed * 1000003 + {i})")
        lines.append("    return x, (" + "".join(f"_s{i}, " for i in stateful) + ")")
        apply_fn.with_stats = _make_function("serial_apply_with_stats", "\n".join(lines) + "\n", env)
        nested = {i: applies[i].merge_stats for i in stateful if hasattr(applies[i], "merge_stats")}

        def merge_stats(params, stats):
            """params with every BatchNorm's running statistics replaced by ``stats``
            (the auxiliary output of ``with_stats``); other entries are returned as they are."""
            if not isinstance(params, tuple) or len(params) != len(applies):
                raise TypeError(f"merge_stats: params must be the tuple of {len(applies)} layer params")
            if not isinstance(stats, tuple) or len(stats) != len(stateful):
                raise TypeError(f"merge_stats: expected the {len(stateful)} statistics returned by with_stats")
            out = list(params)
            for i, s in zip(stateful, stats):
                out[i] = nested[i](params[i], s) if i in nested else _merge_layer_stats(params[i], s)
            return tuple(out)
        apply_fn.merge_stats = merge_stats
    return init_fn, apply_fn
