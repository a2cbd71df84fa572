"""Sample specs of the neural-network primitives (:mod:`funcgrad.nn`), for the registry-driven test.

Owns how the property test draws each nn primitive's arguments. Each spec is
``sample(draw, dtype) -> (args, kwargs)``: small inputs where the function is
smooth (values away from kinks such as relu's 0, no ties inside pooling
windows, pooling geometry PyTorch accepts). Specs are named after the primitive
they serve; a few serve several (``unary``, ``with_axis``, ``pair_loss(...)``).
hypothesis is imported only when a sample is drawn (a test-time dependency).
"""
from __future__ import annotations

import numpy as np

from funcgrad.kernels import cpu_nn as K


def _st():
    import hypothesis.strategies as st  # optional: a test-time dependency, needed only to draw a sample
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


def _conv_geom(draw):
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


def conv2d(draw, dtype=np.float64):
    xs, ws, ys, stride, padding, dilation = _conv_geom(draw)
    b = _arr(draw, (ws[0],), dtype) if draw(_st().booleans()) else None
    return (_arr(draw, xs, dtype), _arr(draw, ws, dtype), b, stride, padding, dilation), {}


def conv2d_input_grad(draw, dtype=np.float64):
    xs, ws, ys, stride, padding, dilation = _conv_geom(draw)
    return (_arr(draw, ys, dtype), _arr(draw, ws, dtype), xs, stride, padding, dilation), {}


def conv2d_weight_grad(draw, dtype=np.float64):
    xs, ws, ys, stride, padding, dilation = _conv_geom(draw)
    return (_arr(draw, ys, dtype), _arr(draw, xs, dtype), ws, stride, padding, dilation), {}


def _pool_geom(draw):
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


def max_pool2d(draw, dtype=np.float64, distinct=True):
    xs, ys, k, stride, padding = _pool_geom(draw)
    x = _distinct(draw, xs, dtype) if distinct else _arr(draw, xs, dtype)
    return (x, k, stride, padding), {}


def avg_pool2d(draw, dtype=np.float64):
    return max_pool2d(draw, dtype, distinct=False)


def max_pool2d_grad(draw, dtype=np.float64):
    xs, ys, k, stride, padding = _pool_geom(draw)
    return (_arr(draw, ys, dtype), _distinct(draw, xs, dtype), k, stride, padding), {}


def max_pool2d_select(draw, dtype=np.float64):
    xs, ys, k, stride, padding = _pool_geom(draw)
    return (_arr(draw, xs, dtype), _distinct(draw, xs, dtype), k, stride, padding), {}


def avg_pool2d_grad(draw, dtype=np.float64):
    xs, ys, k, stride, padding = _pool_geom(draw)
    return (_arr(draw, ys, dtype), xs, k, stride, padding), {}


def _shape(draw, min_dims=1, max_dims=3):
    st = _st()
    return tuple(draw(st.integers(1, 4)) for _ in range(draw(st.integers(min_dims, max_dims))))


def unary(draw, dtype=np.float64):
    return (_arr(draw, _shape(draw), dtype, -2.0, 2.0),), {}


def unary_kink0(draw, dtype=np.float64):
    return (_away(draw, _shape(draw), dtype) * 2.0,), {}


def grad_kink0(draw, dtype=np.float64):
    s = _shape(draw)
    return (_arr(draw, s, dtype), _away(draw, s, dtype) * 2.0), {}


def grad_smooth(draw, dtype=np.float64):
    s = _shape(draw)
    return (_arr(draw, s, dtype), _arr(draw, s, dtype, -2.0, 2.0)), {}


def sigmoid_grad(draw, dtype=np.float64):
    s = _shape(draw)
    return (_arr(draw, s, dtype), _arr(draw, s, dtype, 0.05, 0.95)), {}


def leaky_relu(draw, dtype=np.float64):
    return (_away(draw, _shape(draw), dtype) * 2.0, draw(_st().sampled_from([0.01, 0.2]))), {}


def leaky_relu_grad(draw, dtype=np.float64):
    s = _shape(draw)
    return (_arr(draw, s, dtype), _away(draw, s, dtype) * 2.0, draw(_st().sampled_from([0.01, 0.2]))), {}


def elu(draw, dtype=np.float64):
    return (_away(draw, _shape(draw), dtype) * 2.0, draw(_st().sampled_from([1.0, 0.5]))), {}


def elu_grad(draw, dtype=np.float64):
    s = _shape(draw)
    return (_arr(draw, s, dtype), _away(draw, s, dtype) * 2.0, draw(_st().sampled_from([1.0, 0.5]))), {}


def with_axis(draw, dtype=np.float64):
    s = _shape(draw)
    axis = draw(_st().integers(-len(s), len(s) - 1))
    return (_arr(draw, s, dtype, -2.0, 2.0), axis), {}


def softmax_grad(draw, dtype=np.float64):
    s = _shape(draw)
    axis = draw(_st().integers(-len(s), len(s) - 1))
    y = K.softmax(_arr(draw, s, np.float64, -2.0, 2.0), axis).astype(dtype)
    return (_arr(draw, s, dtype), y, axis), {}


def softmax_grad_y(draw, dtype=np.float64):
    (g, y, axis), _ = softmax_grad(draw, dtype)
    return (_arr(draw, y.shape, dtype), g, y, axis), {}


def log_softmax_grad(draw, dtype=np.float64):
    s = _shape(draw)
    axis = draw(_st().integers(-len(s), len(s) - 1))
    y = K.log_softmax(_arr(draw, s, np.float64, -2.0, 2.0), axis).astype(dtype)
    return (_arr(draw, s, dtype), y, axis), {}


def logsumexp_grad(draw, dtype=np.float64):
    s = _shape(draw)
    axis = draw(_st().integers(-len(s), len(s) - 1))
    x = _arr(draw, s, dtype, -2.0, 2.0)
    y = K.logsumexp(x, axis)
    return (_arr(draw, np.shape(y), dtype), x, y, axis), {}


def dropout(draw, dtype=np.float64):
    st = _st()
    return (_arr(draw, _shape(draw), dtype), draw(st.sampled_from([0.0, 0.25, 0.5])),
            draw(st.integers(0, 2**31 - 1))), {}


def batch_norm(draw, dtype=np.float64):
    st = _st()
    N, C = draw(st.integers(2, 4)), draw(st.integers(1, 3))
    shape = (N, C) + tuple(draw(st.integers(1, 3)) for _ in range(draw(st.sampled_from([0, 2]))))
    x = _arr(draw, shape, dtype, -2.0, 2.0)
    gamma, beta = _arr(draw, (C,), dtype, 0.5, 1.5), _arr(draw, (C,), dtype)
    rm, rv = _arr(draw, (C,), dtype), _arr(draw, (C,), dtype, 0.5, 1.5)
    return (x, gamma, beta, rm, rv, draw(st.booleans())), {"eps": 1e-5}


def batch_norm_grad_input(draw, dtype=np.float64):
    (x, gamma, beta, rm, rv, train), kw = batch_norm(draw, dtype)
    return (_arr(draw, x.shape, dtype), x, gamma, rm, rv, train, 1e-5), {}


def batch_norm_grad_gamma(draw, dtype=np.float64):
    (x, gamma, beta, rm, rv, train), kw = batch_norm(draw, dtype)
    return (_arr(draw, x.shape, dtype), x, rm, rv, train, 1e-5), {}


def batch_norm_stats(draw, dtype=np.float64):
    (x, gamma, beta, rm, rv, train), kw = batch_norm(draw, dtype)
    return (x, rm, rv, 0.1), {}


def layer_norm(draw, dtype=np.float64):
    s = _shape(draw, 1, 3)
    s = s[:-1] + (max(s[-1], 2),)
    D = s[-1]
    return (_arr(draw, s, dtype, -2.0, 2.0), _arr(draw, (D,), dtype, 0.5, 1.5), _arr(draw, (D,), dtype)), {}


def layer_norm_grad_input(draw, dtype=np.float64):
    (x, gamma, beta), _ = layer_norm(draw, dtype)
    return (_arr(draw, x.shape, dtype), x, gamma, 1e-5), {}


def layer_norm_grad_gamma(draw, dtype=np.float64):
    (x, gamma, beta), _ = layer_norm(draw, dtype)
    return (_arr(draw, x.shape, dtype), x, 1e-5), {}


def row_sums(draw, dtype=np.float64):
    return (_arr(draw, _shape(draw, 1, 3), dtype),), {}


def channel_sum(draw, dtype=np.float64):
    return (_arr(draw, _shape(draw, 2, 4), dtype),), {}


def channel_broadcast(draw, dtype=np.float64):
    s = _shape(draw, 2, 4)
    return (_arr(draw, (s[1],), dtype), s), {}


def embedding(draw, dtype=np.float64):
    st = _st()
    V, D = draw(st.integers(1, 5)), draw(st.integers(1, 3))
    ids = _rng(draw).integers(0, V, _shape(draw, 1, 2))
    return (_arr(draw, (V, D), dtype), ids), {}


def embedding_grad(draw, dtype=np.float64):
    (table, ids), _ = embedding(draw, dtype)
    return (_arr(draw, ids.shape + (table.shape[1],), dtype), ids, table.shape), {}


def _reduction(draw):
    return draw(_st().sampled_from(["mean", "sum", "none"]))


def pair_loss(lo_p=-2.0, hi_p=2.0, lo_t=-2.0, hi_t=2.0):
    """(prediction, target) of one random shape, in the given ranges, and a random reduction."""
    def sample(draw, dtype=np.float64):
        s = _shape(draw)
        return (_arr(draw, s, dtype, lo_p, hi_p), _arr(draw, s, dtype, lo_t, hi_t)), {"reduction": _reduction(draw)}
    return sample


def huber(draw, dtype=np.float64):
    s = _shape(draw)
    delta = draw(_st().sampled_from([0.5, 1.0]))
    t = _arr(draw, s, dtype)
    r = _away(draw, s, np.float64, 0.0, 0.0) * 2.0
    r = np.where(np.abs(np.abs(r) - delta) < 0.05, r * 1.2 + np.sign(r) * 0.1, r)    # |r| away from delta
    return (t + r.astype(dtype), t, delta), {"reduction": _reduction(draw)}


def cross_entropy(draw, dtype=np.float64):
    st = _st()
    N, C = draw(st.integers(1, 4)), draw(st.integers(1, 5))
    z = _arr(draw, (N, C), dtype, -2.0, 2.0)
    if draw(st.booleans()):
        y = _rng(draw).integers(0, C, N)
    else:
        p = _arr(draw, (N, C), np.float64, 0.1, 1.0)
        y = (p / p.sum(1, keepdims=True)).astype(dtype)
    return (z, y), {"reduction": _reduction(draw)}


def nll(draw, dtype=np.float64):
    st = _st()
    N, C = draw(st.integers(1, 4)), draw(st.integers(1, 5))
    return (_arr(draw, (N, C), dtype, -3.0, 0.0), _rng(draw).integers(0, C, N)), {"reduction": _reduction(draw)}


def loss_grad(fwd_sample, shape_of_g):
    """The spec of a loss's gradient primitive: a cotangent ``g`` (a float when the loss is
    reduced, an array shaped ``shape_of_g(args)`` for ``reduction="none"``), then the loss's args."""
    def sample(draw, dtype=np.float64):
        args, kw = fwd_sample(draw, dtype)
        red = kw["reduction"]
        g = _arr(draw, shape_of_g(args), dtype) if red == "none" else float(_arr(draw, (), np.float64))
        return (g,) + tuple(args), kw
    return sample


def elem_shape(args):
    return np.shape(args[0])


def row_shape(args):
    return (np.shape(args[0])[0],)


huber_grad = loss_grad(huber, elem_shape)
