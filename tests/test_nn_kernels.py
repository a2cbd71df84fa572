"""funcgrad.kernels.cpu_nn against independent references, independent of the AD core.

* conv2d and the pools match naive NumPy loops over random shapes, strides,
  paddings and dilations (ints and pairs);
* every backward kernel matches central finite differences of its forward
  kernel along a random direction: <g, J v> == <backward(g), v>;
* the linear helper pairs are adjoints of each other (<A u, v> == <u, A^T v>);
* the kernels give the same results from Python and from inside @njit code.
"""
import numpy as np
import pytest
from numba import njit

import funcgrad.kernels.cpu_nn as K

RNG = np.random.default_rng(1234)


def _pair(v):
    return (v, v) if np.isscalar(v) else tuple(v)


# ----------------------------------------------------------------------------- naive references
def conv2d_ref(x, w, b, stride, padding, dilation):
    sh, sw = _pair(stride)
    ph, pw = _pair(padding)
    dh, dw = _pair(dilation)
    N, C, H, W = x.shape
    O, _, KH, KW = w.shape
    xp = np.zeros((N, C, H + 2 * ph, W + 2 * pw))
    xp[:, :, ph:ph + H, pw:pw + W] = x
    OH = (H + 2 * ph - dh * (KH - 1) - 1) // sh + 1
    OW = (W + 2 * pw - dw * (KW - 1) - 1) // sw + 1
    out = np.zeros((N, O, OH, OW))
    for n in range(N):
        for o in range(O):
            for i in range(OH):
                for j in range(OW):
                    acc = 0.0
                    for c in range(C):
                        for a in range(KH):
                            for e in range(KW):
                                acc += xp[n, c, i * sh + a * dh, j * sw + e * dw] * w[o, c, a, e]
                    out[n, o, i, j] = acc + (b[o] if b is not None else 0.0)
    return out


def pool_ref(x, k, stride, padding, kind):
    kh, kw = _pair(k)
    sh, sw = _pair(stride if stride is not None else k)
    ph, pw = _pair(padding)
    N, C, H, W = x.shape
    fill = -np.inf if kind == "max" else 0.0
    xp = np.full((N, C, H + 2 * ph, W + 2 * pw), fill)
    xp[:, :, ph:ph + H, pw:pw + W] = x
    OH = (H + 2 * ph - kh) // sh + 1
    OW = (W + 2 * pw - kw) // sw + 1
    out = np.zeros((N, C, OH, OW))
    for i in range(OH):
        for j in range(OW):
            win = xp[:, :, i * sh:i * sh + kh, j * sw:j * sw + kw]
            out[:, :, i, j] = win.max(axis=(2, 3)) if kind == "max" else win.mean(axis=(2, 3))
    return out


def _conv_case(rng):
    N, C, O = rng.integers(1, 3), rng.integers(1, 4), rng.integers(1, 4)
    KH, KW = rng.integers(1, 4, 2)
    stride = [1, 2, 3, (1, 2), (2, 1)][rng.integers(5)]
    padding = [0, 1, 2, (0, 1), (2, 1)][rng.integers(5)]
    dilation = [1, 2, (1, 2), (2, 1)][rng.integers(4)]
    dh, dw = _pair(dilation)
    ph, pw = _pair(padding)
    H = rng.integers(max(1, dh * (KH - 1) + 1 - 2 * ph), 9)
    W = rng.integers(max(1, dw * (KW - 1) + 1 - 2 * pw), 9)
    x = rng.normal(size=(N, C, H, W))
    w = rng.normal(size=(O, C, KH, KW))
    b = rng.normal(size=O) if rng.random() < 0.5 else None
    return x, w, b, stride, padding, dilation


def _pool_case(rng):
    N, C = rng.integers(1, 3), rng.integers(1, 4)
    k = [1, 2, 3, (2, 3), (3, 1)][rng.integers(5)]
    kh, kw = _pair(k)
    stride = [None, 1, 2, (2, 1)][rng.integers(4)]
    ph, pw = rng.integers(0, kh // 2 + 1), rng.integers(0, kw // 2 + 1)
    H = rng.integers(max(1, kh - 2 * ph), 9)
    W = rng.integers(max(1, kw - 2 * pw), 9)
    # distinct values: no ties inside a window, so max-pool is differentiable
    x = (rng.permutation(N * C * H * W).reshape(N, C, H, W) - 10.0) * 0.1 + rng.uniform(-0.01, 0.01, (N, C, H, W))
    return x, k, stride, (int(ph), int(pw))


def _dirderiv(f, x, v, eps=1e-6):
    return (np.asarray(f(x + eps * v)) - np.asarray(f(x - eps * v))) / (2 * eps)


def _check_vjp(f, x, g, back, rtol=1e-6, atol=1e-8):
    """<g, (f(x+ev) - f(x-ev)) / 2e> == <back(g), v> for a random direction v."""
    v = RNG.normal(size=np.shape(x))
    lhs = float(np.sum(g * _dirderiv(f, x, v)))
    rhs = float(np.sum(back * v))
    assert lhs == pytest.approx(rhs, rel=rtol * 100, abs=atol * 100), (lhs, rhs)


# ----------------------------------------------------------------------------- conv2d
def test_conv2d_matches_naive_loops():
    rng = np.random.default_rng(0)
    for _ in range(25):
        x, w, b, s, p, dl = _conv_case(rng)
        np.testing.assert_allclose(K.conv2d(x, w, b, s, p, dl), conv2d_ref(x, w, b, s, p, dl), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("stride, dilation", [(1, 1), (2, 1), (1, 2)])
def test_conv2d_in_blocks_of_images_across_threads(stride, dilation):
    """A batch large enough to split over the threads, each chunk's images taken in blocks of 3 for one GEMM (the
    last block shorter): the same as the naive loops, unit steps (contiguous patch copies) or not."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(11, 3, 20, 20))
    w = rng.normal(size=(4, 3, 5, 5))
    b = rng.normal(size=4)
    np.testing.assert_allclose(K.conv2d(x, w, b, stride, 0, dilation), conv2d_ref(x, w, b, stride, 0, dilation),
                               rtol=1e-10, atol=1e-10)
    # the input gradient (blocks of images' dy in one GEMM, then each image's scatter) is conv2d's exact adjoint
    g = rng.normal(size=conv2d_ref(x, w, None, stride, 0, dilation).shape)
    u = rng.normal(size=x.shape)
    assert np.sum(K.conv2d_input_grad(g, w, x.shape, stride, 0, dilation) * u) == pytest.approx(
        np.sum(conv2d_ref(u, w, None, stride, 0, dilation) * g), rel=1e-12)


def _conv2d_weight_grad_ref(g, x, k, stride):
    """sum over images and output pixels of g times the patch it saw (no padding, no dilation), by NumPy windows."""
    win = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("nopq,ncpqij->ocij", g, win)


@pytest.mark.parametrize("C, N, stride", [(6, 7, 1), (6, 14, 1), (6, 7, 2), (1, 14, 1)])
def test_conv2d_weight_grad_both_gemm_orders(C, N, stride):
    """The weight gradient's GEMM runs as (R, B*P) @ (B*P, O) from R = C*KH*KW >= 64 (LeNet's conv2, R = 150), as
    (O, B*P) @ (B*P, R) below (conv1, R = 25): both against NumPy's windows, in float64 and float32, in blocks of 6
    images with a shorter last one, serially (N = 7) and split over the threads (N = 14); and the R >= 64 order
    against central differences."""
    rng = np.random.default_rng(C * 100 + N + stride)
    x = rng.normal(size=(N, C, 12, 12))
    w = rng.normal(size=(2, C, 5, 5))
    g = rng.normal(size=K.conv2d(x, w, None, stride, 0, 1).shape)
    want = _conv2d_weight_grad_ref(g, x, 5, stride)
    np.testing.assert_allclose(K.conv2d_weight_grad(g, x, w.shape, stride, 0, 1), want, rtol=1e-10, atol=1e-10)
    got32 = K.conv2d_weight_grad(g.astype(np.float32), x.astype(np.float32), w.shape, stride, 0, 1)
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, want, rtol=1e-4, atol=1e-4 * np.max(np.abs(want)))
    if C == 6 and N == 7 and stride == 1:
        _check_vjp(lambda w_: K.conv2d(x, w_, None, 1, 0, 1), w, g, K.conv2d_weight_grad(g, x, w.shape, 1, 0, 1))


def test_conv2d_float32_and_noncontiguous():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 5, 3, 9)).astype(np.float32).transpose(0, 3, 2, 1)   # (2, 9, 3, 5), not contiguous
    w = rng.normal(size=(4, 9, 2, 2)).astype(np.float32)
    y = K.conv2d(x, w, None, 1, 1, 1)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, conv2d_ref(x.astype(np.float64), w, None, 1, 1, 1), rtol=1e-4, atol=1e-4)


def test_conv2d_backward_kernels_match_finite_differences():
    rng = np.random.default_rng(2)
    for _ in range(12):
        x, w, b, s, p, dl = _conv_case(rng)
        y = K.conv2d(x, w, b, s, p, dl)
        g = rng.normal(size=y.shape)
        _check_vjp(lambda x_: K.conv2d(x_, w, b, s, p, dl), x, g, K.conv2d_input_grad(g, w, x.shape, s, p, dl))
        _check_vjp(lambda w_: K.conv2d(x, w_, b, s, p, dl), w, g, K.conv2d_weight_grad(g, x, w.shape, s, p, dl))
        if b is not None:
            _check_vjp(lambda b_: K.conv2d(x, w, b_, s, p, dl), b, g, K.channel_sum(g))


def test_conv2d_input_grad_is_exact_adjoint_when_stride_skips_pixels():
    # kernel 2, stride 3, H=W=8: rows/cols 2 and 5 are never read; their gradient must be exactly 0
    rng = np.random.default_rng(3)
    x = rng.normal(size=(1, 2, 8, 8))
    w = rng.normal(size=(3, 2, 2, 2))
    g = rng.normal(size=K.conv2d(x, w, None, 3, 0, 1).shape)
    dx = K.conv2d_input_grad(g, w, x.shape, 3, 0, 1)
    assert dx.shape == x.shape
    assert np.all(dx[:, :, [2, 5], :] == 0) and np.all(dx[:, :, :, [2, 5]] == 0)
    assert np.all(dx[:, :, 7, [0, 1, 3, 4, 6, 7]] != 0)
    assert np.sum(dx * x) == pytest.approx(np.sum(g * K.conv2d(x, w, None, 3, 0, 1)))


def test_linear_helper_pairs_are_adjoint():
    rng = np.random.default_rng(4)
    for _ in range(6):
        x, w, b, s, p, dl = _conv_case(rng)
        y = K.conv2d(x, w, None, s, p, dl)
        g, u = rng.normal(size=y.shape), rng.normal(size=x.shape)
        # conv2d_input_grad (in dy) is the adjoint of conv2d (in x); weight_grad likewise in w
        assert np.sum(K.conv2d(u, w, None, s, p, dl) * g) == pytest.approx(
            np.sum(u * K.conv2d_input_grad(g, w, x.shape, s, p, dl)))
        v = rng.normal(size=w.shape)
        assert np.sum(K.conv2d(x, v, None, s, p, dl) * g) == pytest.approx(
            np.sum(v * K.conv2d_weight_grad(g, x, w.shape, s, p, dl)))
    z = rng.normal(size=(2, 3, 4, 5))
    c = rng.normal(size=3)
    assert np.sum(K.channel_sum(z) * c) == pytest.approx(np.sum(z * K.channel_broadcast(c, z.shape)))


# ----------------------------------------------------------------------------- pools
def test_pools_match_naive_loops():
    rng = np.random.default_rng(5)
    for _ in range(25):
        x, k, s, p = _pool_case(rng)
        np.testing.assert_allclose(K.max_pool2d(x, k, s, p), pool_ref(x, k, s, p, "max"), rtol=1e-12)
        np.testing.assert_allclose(K.avg_pool2d(x, k, s, p), pool_ref(x, k, s, p, "avg"), rtol=1e-12, atol=1e-12)


def test_pool_backward_kernels_match_finite_differences():
    rng = np.random.default_rng(6)
    for _ in range(12):
        x, k, s, p = _pool_case(rng)
        g = rng.normal(size=K.max_pool2d(x, k, s, p).shape)
        _check_vjp(lambda x_: K.max_pool2d(x_, k, s, p), x, g, K.max_pool2d_grad(g, x, k, s, p))
        _check_vjp(lambda x_: K.avg_pool2d(x_, k, s, p), x, g, K.avg_pool2d_grad(g, x.shape, k, s, p))
        # max_pool2d_select is the adjoint of max_pool2d_grad in dy, and select(x, x) == max_pool2d(x)
        u = rng.normal(size=x.shape)
        assert np.sum(K.max_pool2d_grad(g, x, k, s, p) * u) == pytest.approx(
            np.sum(g * K.max_pool2d_select(u, x, k, s, p)))
        np.testing.assert_array_equal(K.max_pool2d_select(x, x, k, s, p), K.max_pool2d(x, k, s, p))


def test_max_pool_ties_route_to_one_element():
    x = np.ones((1, 1, 2, 2))
    dx = K.max_pool2d_grad(np.ones((1, 1, 1, 1)), x, 2, None, 0)
    assert dx.sum() == 1.0 and dx[0, 0, 0, 0] == 1.0


def _max_pool_grad_ref(dy, x, k):
    """dy routed to each k x k window's first maximum in row-major order (np.argmax's), stride k, no padding."""
    N, C, OH, OW = dy.shape
    dx = np.zeros_like(x)
    for n in range(N):
        for c in range(C):
            for i in range(OH):
                for j in range(OW):
                    a, b = divmod(int(np.argmax(x[n, c, i * k:(i + 1) * k, j * k:(j + 1) * k])), k)
                    dx[n, c, i * k + a, j * k + b] += dy[n, c, i, j]
    return dx


@pytest.mark.parametrize("shape", [(2, 3, 8, 8), (1, 2, 6, 9), (2, 1, 7, 6), (1, 1, 5, 5)])
def test_max_pool_2x2_grad_routes_ties_like_argmax(shape):
    """The 2x2 backward (a branch-free tournament, even heights as one run of row pairs) sends each window's
    gradient to its first maximum, as the general path does: ReLU-like zeros, -0.0 beside 0.0, repeated values;
    the cells of an odd last row or column get 0."""
    rng = np.random.default_rng(sum(shape))
    for dt in (np.float32, np.float64):
        x = np.maximum(np.round(rng.normal(size=shape) * 1.5), 0).astype(dt)
        x[rng.random(shape) < 0.2] = -0.0
        dy = rng.normal(size=(shape[0], shape[1], shape[2] // 2, shape[3] // 2)).astype(dt)
        dx = K.max_pool2d_grad(dy, x, 2)
        assert dx.dtype == dt
        np.testing.assert_array_equal(dx, _max_pool_grad_ref(dy, x, 2))
        np.testing.assert_array_equal(_njit_max_pool2d_grad(dy, x), dx)


@njit
def _njit_max_pool2d_grad(dy, x):
    return K.max_pool2d_grad(dy, x, 2)


# ----------------------------------------------------------------------------- activations
def _away_from_zero(shape):
    a = RNG.uniform(-2, 2, shape)
    return np.where(np.abs(a) < 0.05, 0.2 * np.sign(a) + (a == 0) * 0.2, a)


ACTIVATIONS = [
    ("relu", lambda x: np.maximum(x, 0.0)),
    ("gelu", lambda x: x * 0.5 * (1 + np.vectorize(__import__("math").erf)(x / np.sqrt(2)))),
    ("sigmoid", lambda x: 1 / (1 + np.exp(-x))),
    ("softplus", lambda x: np.log1p(np.exp(x))),
]


@pytest.mark.parametrize("name,ref", ACTIVATIONS)
def test_activation_values_and_grads(name, ref):
    x = _away_from_zero((3, 4, 5))
    f = getattr(K, name)
    np.testing.assert_allclose(f(x), ref(x), rtol=1e-12, atol=1e-14)
    assert f(float(x.flat[0])) == pytest.approx(float(ref(x.flat[0])))
    g = RNG.normal(size=x.shape)
    if name == "sigmoid":
        back = K.sigmoid_grad(g, f(x))
    elif name == "softplus":
        back = g * K.sigmoid(x)
    else:
        back = getattr(K, name + "_grad")(g, x)
    _check_vjp(f, x, g, back)


def test_parametric_activations():
    x = _away_from_zero((4, 6))
    g = RNG.normal(size=x.shape)
    np.testing.assert_allclose(K.leaky_relu(x, 0.2), np.where(x > 0, x, 0.2 * x))
    np.testing.assert_allclose(K.leaky_relu(x, negative_slope=0.3), np.where(x > 0, x, 0.3 * x))
    np.testing.assert_allclose(K.elu(x, 0.7), np.where(x > 0, x, 0.7 * np.expm1(x)))
    _check_vjp(lambda x_: K.leaky_relu(x_, 0.2), x, g, K.leaky_relu_grad(g, x, 0.2))
    _check_vjp(lambda x_: K.elu(x_, 0.7), x, g, K.elu_grad(g, x, 0.7))
    # second derivatives the VJP templates use
    _check_vjp(lambda x_: K.gelu_grad(g, x_), x, g, K.gelu_grad2(g * g, x))
    _check_vjp(lambda x_: K.elu_grad(g, x_, 0.7), x, g, K.elu_grad(g * g, x, 0.7) - K.relu_grad(g * g, x))
    assert K.sigmoid(-800.0) == 0.0 and K.sigmoid(800.0) == 1.0
    assert np.isfinite(K.softplus(np.array([-800.0, 800.0]))).all()


# ----------------------------------------------------------------------------- softmax family
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_family(axis):
    x = RNG.normal(size=(3, 4, 5)) * 3
    e = np.exp(x - x.max(axis, keepdims=True))
    sm = e / e.sum(axis, keepdims=True)
    lse = np.log(np.exp(x).sum(axis))
    np.testing.assert_allclose(K.softmax(x, axis), sm, rtol=1e-12)
    np.testing.assert_allclose(K.log_softmax(x, axis), np.log(sm), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(K.logsumexp(x, axis), lse, rtol=1e-12)
    g = RNG.normal(size=x.shape)
    _check_vjp(lambda x_: K.softmax(x_, axis), x, g, K.softmax_grad(g, K.softmax(x, axis), axis))
    _check_vjp(lambda x_: K.log_softmax(x_, axis), x, g, K.log_softmax_grad(g, K.log_softmax(x, axis), axis))
    gl = RNG.normal(size=lse.shape)
    _check_vjp(lambda x_: K.logsumexp(x_, axis), x, gl, K.logsumexp_grad(gl, x, K.logsumexp(x, axis), axis))
    y = K.softmax(x, axis)
    r = RNG.normal(size=x.shape)
    _check_vjp(lambda y_: K.softmax_grad(g, y_, axis), y, r, K.softmax_grad_y(r, g, y, axis))


def test_logsumexp_is_stable():
    x = np.array([[1000.0, 1000.0], [-1000.0, -1000.0]])
    np.testing.assert_allclose(K.logsumexp(x, -1), [1000 + np.log(2), -1000 + np.log(2)])
    assert np.isfinite(K.log_softmax(x, -1)).all()


# ----------------------------------------------------------------------------- dropout, norms, embedding
def test_dropout_mask_is_seeded_and_reused():
    x = RNG.normal(size=(50, 40))
    y = K.dropout(x, 0.3, 7)
    np.testing.assert_array_equal(y, K.dropout(x, 0.3, 7))
    assert not np.array_equal(y, K.dropout(x, 0.3, 8))
    kept = y != 0
    assert 0.6 < kept.mean() < 0.8
    np.testing.assert_allclose(y[kept], x[kept] / 0.7)
    g = RNG.normal(size=x.shape)
    assert np.array_equal(K.dropout(g, 0.3, 7) != 0, kept)      # the VJP (dropout of g) reuses the mask
    np.testing.assert_array_equal(K.dropout(x, 0.0, 7), x)


@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 2, 5)])
@pytest.mark.parametrize("train", [True, False])
def test_batch_norm(shape, train):
    x = RNG.normal(size=shape) * 2 + 1
    C = shape[1]
    gamma, beta = RNG.uniform(0.5, 1.5, C), RNG.normal(size=C)
    rm, rv = RNG.normal(size=C), RNG.uniform(0.5, 1.5, C)
    axes = (0,) + tuple(range(2, len(shape)))
    bshape = (1, C) + (1,) * (len(shape) - 2)
    mean, var = (x.mean(axes), x.var(axes)) if train else (rm, rv)
    ref = (x - mean.reshape(bshape)) / np.sqrt(var.reshape(bshape) + 1e-5) * gamma.reshape(bshape) + beta.reshape(bshape)
    np.testing.assert_allclose(K.batch_norm(x, gamma, beta, rm, rv, train, 1e-5), ref, rtol=1e-10, atol=1e-12)
    g = RNG.normal(size=shape)
    _check_vjp(lambda x_: K.batch_norm(x_, gamma, beta, rm, rv, train, 1e-5), x, g,
               K.batch_norm_grad_input(g, x, gamma, rm, rv, train, 1e-5))
    _check_vjp(lambda g_: K.batch_norm(x, g_, beta, rm, rv, train, 1e-5), gamma, g,
               K.batch_norm_grad_gamma(g, x, rm, rv, train, 1e-5))
    _check_vjp(lambda b_: K.batch_norm(x, gamma, b_, rm, rv, train, 1e-5), beta, g, K.channel_sum(g))
    st = K.batch_norm_stats(x, rm, rv, 0.1)
    M = x.size // C
    np.testing.assert_allclose(st[0], 0.9 * rm + 0.1 * x.mean(axes))
    np.testing.assert_allclose(st[1], 0.9 * rv + 0.1 * x.var(axes) * M / (M - 1))


def test_layer_norm():
    x = RNG.normal(size=(3, 2, 6))
    gamma, beta = RNG.uniform(0.5, 1.5, 6), RNG.normal(size=6)
    ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * gamma + beta
    np.testing.assert_allclose(K.layer_norm(x, gamma, beta, 1e-5), ref, rtol=1e-10, atol=1e-12)
    g = RNG.normal(size=x.shape)
    _check_vjp(lambda x_: K.layer_norm(x_, gamma, beta, 1e-5), x, g, K.layer_norm_grad_input(g, x, gamma, 1e-5))
    _check_vjp(lambda g_: K.layer_norm(x, g_, beta, 1e-5), gamma, g, K.layer_norm_grad_gamma(g, x, 1e-5))
    _check_vjp(lambda b_: K.layer_norm(x, gamma, b_, 1e-5), beta, g, K.layer_norm_grad_beta(g))


def test_embedding():
    table = RNG.normal(size=(7, 3))
    ids = np.array([[0, 6, 6], [2, 0, 1]])
    np.testing.assert_array_equal(K.embedding(table, ids), table[ids])
    g = RNG.normal(size=(2, 3, 3))
    ref = np.zeros_like(table)
    np.add.at(ref, ids, g)
    np.testing.assert_allclose(K.embedding_grad(g, ids, table.shape), ref)
    with pytest.raises(IndexError):
        K.embedding(table, np.array([7]))


# ----------------------------------------------------------------------------- losses
def _ce_ref(z, y):
    lse = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1)
    if y.ndim == 1:
        return lse - z[np.arange(len(y)), y]
    return (y * (lse[:, None] - z)).sum(1)


def _reduce(e, r):
    return e if r == "none" else (e.sum() if r == "sum" else e.mean())


LOSSES = {
    "mse": (lambda p, t: (p - t) ** 2, lambda: (RNG.normal(size=(4, 3)), RNG.normal(size=(4, 3)))),
    "binary_cross_entropy": (lambda p, t: -(t * np.log(p) + (1 - t) * np.log(1 - p)),
                             lambda: (RNG.uniform(0.05, 0.95, (5,)), RNG.uniform(0, 1, (5,)))),
    "binary_cross_entropy_with_logits": (
        lambda z, t: -(t * np.log(1 / (1 + np.exp(-z))) + (1 - t) * np.log(1 - 1 / (1 + np.exp(-z)))),
        lambda: (RNG.normal(size=(3, 2)) * 3, RNG.uniform(0, 1, (3, 2)))),
    "cross_entropy": (_ce_ref, lambda: (RNG.normal(size=(5, 4)) * 2, RNG.integers(0, 4, 5))),
    "cross_entropy_prob": (_ce_ref, lambda: (RNG.normal(size=(5, 4)), RNG.dirichlet(np.ones(4), 5))),
    "nll": (lambda lp, y: -lp[np.arange(len(y)), y], lambda: (np.log(RNG.dirichlet(np.ones(4), 6)),
                                                              RNG.integers(0, 4, 6))),
}


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name", list(LOSSES))
def test_losses_values_and_grads(name, reduction):
    ref, make = LOSSES[name]
    a, b = make()
    kname = "cross_entropy" if name == "cross_entropy_prob" else name
    f = getattr(K, kname)
    val = f(a, b, reduction)
    np.testing.assert_allclose(val, _reduce(ref(a, b), reduction), rtol=1e-10)
    g = RNG.normal(size=np.shape(val)) if reduction == "none" else 1.7
    _check_vjp(lambda a_: f(a_, b, reduction), a, g, getattr(K, kname + "_grad")(g, a, b, reduction))
    if b.dtype.kind == "f":
        back_t = {"mse": lambda: -K.mse_grad(g, a, b, reduction)}.get(
            kname, lambda: getattr(K, kname + "_grad_target")(g, a, b, reduction))()
        _check_vjp(lambda b_: f(a, b_, reduction), b, g, back_t)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_huber(reduction):
    p, t = RNG.normal(size=(4, 5)) * 2, RNG.normal(size=(4, 5))
    r = p - t
    r = np.where(np.abs(np.abs(r) - 1.0) < 0.05, r * 1.3, r)
    p = t + r
    e = np.where(np.abs(r) <= 1.0, 0.5 * r ** 2, np.abs(r) - 0.5)
    np.testing.assert_allclose(K.huber(p, t, 1.0, reduction), _reduce(e, reduction))
    g = RNG.normal(size=e.shape) if reduction == "none" else 0.3
    _check_vjp(lambda p_: K.huber(p_, t, 1.0, reduction), p, g, K.huber_grad(g, p, t, 1.0, reduction))


def test_cross_entropy_is_stable_and_checks_labels():
    z = np.array([[1000.0, -1000.0, 0.0]])
    assert K.cross_entropy(z, np.array([0])) == pytest.approx(0.0)
    assert K.cross_entropy(z, np.array([1])) == pytest.approx(2000.0)
    assert np.isfinite(K.cross_entropy_grad(1.0, z, np.array([1]))).all()
    with pytest.raises(IndexError):
        K.cross_entropy(z, np.array([3]))
    with pytest.raises(ValueError):
        K.mse(z, z, "avg")


# ----------------------------------------------------------------------------- Python == njit
@njit(cache=True)
def _njit_conv_pool(x, w, b, g):
    y = K.conv2d(x, w, b, (2, 1), 1, 1)
    y2 = K.conv2d(x, w, None, 1, (1, 0), 2)
    dx = K.conv2d_input_grad(g, w, x.shape, (2, 1), 1, 1)
    dw = K.conv2d_weight_grad(g, x, w.shape, (2, 1), 1, 1)
    m = K.max_pool2d(x, 2, None, 0)
    a = K.avg_pool2d(x, (3, 2), 1, (1, 1))
    mg = K.max_pool2d_grad(m, x, 2, None, 0)
    ag = K.avg_pool2d_grad(a, x.shape, (3, 2), 1, (1, 1))
    return y, y2, dx, dw, m, a, mg, ag, K.channel_sum(y)


@njit(cache=True)
def _njit_pointwise(x, g, s):
    return (K.relu(x), K.relu_grad(g, x), K.gelu(x), K.sigmoid(x), K.softplus(x), K.leaky_relu(x, 0.2),
            K.elu(x, 0.5), K.elu_grad(g, x, 0.5), K.relu(s), K.sigmoid(s), K.softmax(x, 1), K.log_softmax(x, 0),
            K.logsumexp(x, -1), K.dropout(x, 0.25, 11))


@njit(cache=True)
def _njit_losses(z, y, t, p):
    return (K.cross_entropy(z, y, "mean"), K.cross_entropy(z, t, "sum"), K.cross_entropy(z, y, "none"),
            K.cross_entropy_grad(1.0, z, y, "mean"), K.cross_entropy_grad(np.ones(z.shape[0]), z, t, "none"),
            K.mse(z, t), K.mse_grad(2.0, z, t, "sum"), K.nll(z, y, "mean"),
            K.binary_cross_entropy_with_logits(z, t, "mean"), K.binary_cross_entropy(p, t, "mean"),
            K.huber(z, t, 0.5, "sum"))


@njit(cache=True)
def _njit_norms(x, gamma, beta, rm, rv, table, ids):
    return (K.batch_norm(x, gamma, beta, rm, rv, True, 1e-5), K.batch_norm(x, gamma, beta, rm, rv, False, 1e-5),
            K.batch_norm_grad_input(x, x, gamma, rm, rv, True, 1e-5), K.batch_norm_stats(x, rm, rv, 0.1),
            K.embedding(table, ids), K.embedding_grad(K.embedding(table, ids), ids, table.shape))


def _py_conv_pool(x, w, b, g):
    """What _njit_conv_pool computes, called from Python."""
    py = (K.conv2d(x, w, b, (2, 1), 1, 1), K.conv2d(x, w, None, 1, (1, 0), 2),
          K.conv2d_input_grad(g, w, x.shape, (2, 1), 1, 1), K.conv2d_weight_grad(g, x, w.shape, (2, 1), 1, 1),
          K.max_pool2d(x, 2, None, 0), K.avg_pool2d(x, (3, 2), 1, (1, 1)))
    return py + (K.max_pool2d_grad(py[4], x, 2, None, 0), K.avg_pool2d_grad(py[5], x.shape, (3, 2), 1, (1, 1)),
                 K.channel_sum(py[0]))


def _same(a, b):
    for u, v in zip(a, b):
        np.testing.assert_allclose(u, v, rtol=1e-12, atol=1e-12)


def test_kernels_same_from_python_and_njit():
    rng = np.random.default_rng(9)
    x, w, b = rng.normal(size=(2, 3, 7, 6)), rng.normal(size=(4, 3, 3, 2)), rng.normal(size=4)
    g = rng.normal(size=K.conv2d(x, w, b, (2, 1), 1, 1).shape)
    py = _py_conv_pool(x, w, b, g)
    _same(py, _njit_conv_pool(x, w, b, g))

    z, gz = rng.normal(size=(3, 5)), rng.normal(size=(3, 5))
    py = (K.relu(z), K.relu_grad(gz, z), K.gelu(z), K.sigmoid(z), K.softplus(z), K.leaky_relu(z, 0.2),
          K.elu(z, 0.5), K.elu_grad(gz, z, 0.5), K.relu(0.3), K.sigmoid(0.3), K.softmax(z, 1), K.log_softmax(z, 0),
          K.logsumexp(z, -1), K.dropout(z, 0.25, 11))
    _same(py, _njit_pointwise(z, gz, 0.3))
    assert _njit_pointwise(z, gz, -1.5)[8] == 0.0

    y, t = rng.integers(0, 5, 3), rng.dirichlet(np.ones(5), 3)
    p = rng.uniform(0.1, 0.9, (3, 5))
    py = (K.cross_entropy(z, y, "mean"), K.cross_entropy(z, t, "sum"), K.cross_entropy(z, y, "none"),
          K.cross_entropy_grad(1.0, z, y, "mean"), K.cross_entropy_grad(np.ones(3), z, t, "none"),
          K.mse(z, t), K.mse_grad(2.0, z, t, "sum"), K.nll(z, y, "mean"),
          K.binary_cross_entropy_with_logits(z, t, "mean"), K.binary_cross_entropy(p, t, "mean"),
          K.huber(z, t, 0.5, "sum"))
    _same(py, _njit_losses(z, y, t, p))

    xb = rng.normal(size=(4, 3, 2, 2))
    gamma, beta, rm, rv = rng.normal(size=3), rng.normal(size=3), rng.normal(size=3), rng.uniform(1, 2, 3)
    table, ids = rng.normal(size=(6, 2)), rng.integers(0, 6, (2, 3))
    py = (K.batch_norm(xb, gamma, beta, rm, rv, True, 1e-5), K.batch_norm(xb, gamma, beta, rm, rv, False, 1e-5),
          K.batch_norm_grad_input(xb, xb, gamma, rm, rv, True, 1e-5), K.batch_norm_stats(xb, rm, rv, 0.1),
          K.embedding(table, ids), K.embedding_grad(K.embedding(table, ids), ids, table.shape))
    _same(py, _njit_norms(xb, gamma, beta, rm, rv, table, ids))


@pytest.mark.sweep   # ~35 s of compiling; test_parallel_drivers_match_serial_bodies runs the same bodies in make test
def test_parallel_launch_inside_njit():
    # large enough for several chunks (>= 2**18 multiply-adds): prange drivers inside njit code,
    # threads from Python; both split the same bodies and must agree with each other
    rng = np.random.default_rng(11)
    x, w, b = rng.normal(size=(6, 4, 30, 30)), rng.normal(size=(8, 4, 3, 3)), rng.normal(size=8)
    g = rng.normal(size=K.conv2d(x, w, b, (2, 1), 1, 1).shape)
    py = _py_conv_pool(x, w, b, g)
    assert K._nchunks(x.shape[0], x.size * 8 * 9) == K._PAR_CHUNKS
    _same(py, _njit_conv_pool(x, w, b, g))


def test_conv2d_blas_route_for_wide_reductions():
    # C*KH*KW >= 128 takes the batch-wide im2col + GEMM route for the weight gradient
    rng = np.random.default_rng(10)
    for C, k, s, p, dl in [(21, 5, 1, 2, 1), (9, 4, 2, (1, 0), (1, 2)), (40, 4, 1, 1, 1)]:
        x = rng.normal(size=(2, C, 7, 8))
        w = rng.normal(size=(3, C, k, k))
        b = rng.normal(size=3)
        y = K.conv2d(x, w, b, s, p, dl)
        np.testing.assert_allclose(y, conv2d_ref(x, w, b, s, p, dl), rtol=1e-9, atol=1e-9)
        g = rng.normal(size=y.shape)
        _check_vjp(lambda x_: K.conv2d(x_, w, b, s, p, dl), x, g, K.conv2d_input_grad(g, w, x.shape, s, p, dl))
        _check_vjp(lambda w_: K.conv2d(x, w_, b, s, p, dl), w, g, K.conv2d_weight_grad(g, x, w.shape, s, p, dl))


def test_parallel_drivers_match_serial_bodies():
    # big enough for the parallel path (>= 2**18 multiply-adds); each sample alone runs serially
    rng = np.random.default_rng(12)
    x = rng.normal(size=(6, 4, 30, 30))
    w = rng.normal(size=(8, 4, 3, 3))
    b = rng.normal(size=8)
    y = K.conv2d(x, w, b, 1, 1, 1)
    g = rng.normal(size=y.shape)
    dx = K.conv2d_input_grad(g, w, x.shape, 1, 1, 1)
    dw = K.conv2d_weight_grad(g, x, w.shape, 1, 1, 1)
    dw_sum = np.zeros_like(w)
    for i in range(6):
        np.testing.assert_allclose(y[i:i + 1], K.conv2d(x[i:i + 1], w, b, 1, 1, 1), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(dx[i:i + 1], K.conv2d_input_grad(g[i:i + 1], w, (1, 4, 30, 30), 1, 1, 1),
                                   rtol=1e-12, atol=1e-12)
        dw_sum += K.conv2d_weight_grad(g[i:i + 1], x[i:i + 1], w.shape, 1, 1, 1)
    np.testing.assert_allclose(dw, dw_sum, rtol=1e-10, atol=1e-10)
    xp = rng.normal(size=(8, 16, 40, 40))
    for k, s, p in [(2, None, 0), (3, 2, 1)]:
        m = K.max_pool2d(xp, k, s, p)
        a = K.avg_pool2d(xp, k, s, p)
        gm = rng.normal(size=m.shape)
        dmx = K.max_pool2d_grad(gm, xp, k, s, p)
        dav = K.avg_pool2d_grad(gm, xp.shape, k, s, p)
        sel = K.max_pool2d_select(xp, xp, k, s, p)
        for i in (0, 7):
            sl = slice(i, i + 1)
            np.testing.assert_array_equal(m[sl], K.max_pool2d(xp[sl], k, s, p))
            np.testing.assert_allclose(a[sl], K.avg_pool2d(xp[sl], k, s, p), rtol=1e-14)
            np.testing.assert_array_equal(dmx[sl], K.max_pool2d_grad(gm[sl], xp[sl], k, s, p))
            np.testing.assert_allclose(dav[sl], K.avg_pool2d_grad(gm[sl], (1, 16, 40, 40), k, s, p), rtol=1e-14)
        np.testing.assert_array_equal(sel, m)


def test_kernel_bodies_run_blas_on_one_thread_and_restore_the_setting():
    found = K._find_numba_blas_threads()
    if found is None:
        pytest.skip("SciPy's OpenBLAS not found: no BLAS thread setting to check")
    get, put = found
    before = get()
    put(2)
    try:
        seen = []
        with K._one_blas_thread():
            seen.append(get())
        assert seen == [1] and get() == 2
        rng = np.random.default_rng(13)
        x, w = rng.normal(size=(4, 3, 9, 9)), rng.normal(size=(5, 3, 3, 3))
        np.testing.assert_allclose(K.conv2d(x, w, None, 1, 1, 1), conv2d_ref(x, w, None, 1, 1, 1), rtol=1e-10)
        assert get() == 2
    finally:
        put(before)
