"""funcgrad.nn kernels against PyTorch (optional: skipped when torch is not installed).

Values and gradients of conv2d (strides, paddings, dilations), the pools,
batch_norm (train and eval, running statistics), layer_norm, the activations
and the losses; the gradients come from funcgrad's backward kernels and from
torch.autograd on the same inputs.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import funcgrad.kernels.cpu_nn as K  # noqa: E402

RNG = np.random.default_rng(7)


def T(a, grad=True):
    return torch.tensor(a, dtype=torch.float64, requires_grad=grad)


def close(a, b, tol=1e-9):
    np.testing.assert_allclose(np.asarray(a), b.detach().numpy() if hasattr(b, "detach") else b, rtol=tol, atol=tol)


@pytest.mark.parametrize("case", [
    ((2, 3, 9, 8), (4, 3, 3, 3), 1, 0, 1),
    ((2, 3, 9, 8), (4, 3, 3, 2), (2, 1), (1, 2), 1),
    ((1, 2, 10, 11), (3, 2, 3, 3), 2, 1, (2, 1)),
    ((2, 1, 28, 28), (6, 1, 5, 5), 1, 0, 1),
    ((2, 24, 7, 7), (5, 24, 5, 5), 1, 2, 1),           # C*KH*KW = 600: the BLAS route
])
def test_conv2d_vs_torch(case):
    xs, ws, s, p, dl = case
    x, w, b = RNG.normal(size=xs), RNG.normal(size=ws), RNG.normal(size=ws[0])
    tx, tw, tb = T(x), T(w), T(b)
    ty = F.conv2d(tx, tw, tb, stride=s, padding=p, dilation=dl)
    y = K.conv2d(x, w, b, s, p, dl)
    close(y, ty)
    g = RNG.normal(size=y.shape)
    ty.backward(torch.tensor(g))
    close(K.conv2d_input_grad(g, w, x.shape, s, p, dl), tx.grad)
    close(K.conv2d_weight_grad(g, x, w.shape, s, p, dl), tw.grad)
    close(K.channel_sum(g), tb.grad)


@pytest.mark.parametrize("k,s,p", [(2, None, 0), (3, 2, 1), ((2, 3), (1, 2), (1, 1)), (3, 1, 0)])
def test_pools_vs_torch(k, s, p):
    x = RNG.normal(size=(2, 3, 9, 10))
    tx = T(x)
    ty = F.max_pool2d(tx, k, s, p)
    close(K.max_pool2d(x, k, s, p), ty)
    g = RNG.normal(size=tuple(ty.shape))
    ty.backward(torch.tensor(g))
    close(K.max_pool2d_grad(g, x, k, s, p), tx.grad)
    tx = T(x)
    ty = F.avg_pool2d(tx, k, s, p, count_include_pad=True)
    close(K.avg_pool2d(x, k, s, p), ty)
    ty.backward(torch.tensor(g))
    close(K.avg_pool2d_grad(g, x.shape, k, s, p), tx.grad)


@pytest.mark.parametrize("shape", [(8, 4), (5, 3, 4, 4)])
@pytest.mark.parametrize("train", [True, False])
def test_batch_norm_vs_torch(shape, train):
    x = RNG.normal(size=shape) * 2 + 0.5
    C = shape[1]
    gamma, beta = RNG.uniform(0.5, 1.5, C), RNG.normal(size=C)
    rm, rv = RNG.normal(size=C), RNG.uniform(0.5, 2.0, C)
    tx, tg, tb = T(x), T(gamma), T(beta)
    trm, trv = torch.tensor(rm), torch.tensor(rv)
    ty = F.batch_norm(tx, trm, trv, tg, tb, training=train, momentum=0.1, eps=1e-5)
    close(K.batch_norm(x, gamma, beta, rm, rv, train, 1e-5), ty)
    g = RNG.normal(size=shape)
    ty.backward(torch.tensor(g))
    close(K.batch_norm_grad_input(g, x, gamma, rm, rv, train, 1e-5), tx.grad)
    close(K.batch_norm_grad_gamma(g, x, rm, rv, train, 1e-5), tg.grad)
    close(K.channel_sum(g), tb.grad)
    if train:   # torch updated its running statistics in place
        st = K.batch_norm_stats(x, rm, rv, 0.1)
        close(st[0], trm)
        close(st[1], trv)


def test_layer_norm_vs_torch():
    x = RNG.normal(size=(3, 4, 6))
    gamma, beta = RNG.uniform(0.5, 1.5, 6), RNG.normal(size=6)
    tx, tg, tb = T(x), T(gamma), T(beta)
    ty = F.layer_norm(tx, (6,), tg, tb, 1e-5)
    close(K.layer_norm(x, gamma, beta, 1e-5), ty)
    g = RNG.normal(size=x.shape)
    ty.backward(torch.tensor(g))
    close(K.layer_norm_grad_input(g, x, gamma, 1e-5), tx.grad)
    close(K.layer_norm_grad_gamma(g, x, 1e-5), tg.grad)
    close(K.layer_norm_grad_beta(g), tb.grad)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("kind", ["int", "prob"])
def test_cross_entropy_vs_torch(reduction, kind):
    z = RNG.normal(size=(6, 5)) * 3
    y = RNG.integers(0, 5, 6) if kind == "int" else RNG.dirichlet(np.ones(5), 6)
    tz = T(z)
    ty = torch.tensor(y) if kind == "int" else T(y)
    tl = F.cross_entropy(tz, ty, reduction=reduction)
    close(K.cross_entropy(z, y, reduction), tl)
    g = RNG.normal(size=tl.shape) if reduction == "none" else np.array(1.3)
    tl.backward(torch.tensor(g, dtype=torch.float64))
    close(K.cross_entropy_grad(g if reduction == "none" else float(g), z, y, reduction), tz.grad)
    if kind == "prob":
        close(K.cross_entropy_grad_target(g if reduction == "none" else float(g), z, y, reduction), ty.grad)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_other_losses_vs_torch(reduction):
    a, b = RNG.normal(size=(4, 3)), RNG.normal(size=(4, 3))
    p, t = RNG.uniform(0.05, 0.95, (4, 3)), RNG.uniform(0, 1, (4, 3))
    lp, lab = np.log(RNG.dirichlet(np.ones(3), 4)), RNG.integers(0, 3, 4)
    cases = [
        (K.mse, K.mse_grad, F.mse_loss, a, b, ()),
        (K.huber, K.huber_grad, F.huber_loss, a * 2, b, (0.7,)),
        (K.binary_cross_entropy, K.binary_cross_entropy_grad, F.binary_cross_entropy, p, t, ()),
        (K.binary_cross_entropy_with_logits, K.binary_cross_entropy_with_logits_grad,
         F.binary_cross_entropy_with_logits, a * 3, t, ()),
    ]
    for fwd, bwd, tf, u, v, extra in cases:
        tu = T(u)
        tl = tf(tu, torch.tensor(v), reduction=reduction, **({"delta": extra[0]} if extra else {}))
        close(fwd(u, v, *extra, reduction), tl)
        g = RNG.normal(size=tl.shape) if reduction == "none" else 0.6
        tl.backward(torch.tensor(g, dtype=torch.float64))
        close(bwd(g, u, v, *extra, reduction), tu.grad)
    tu = T(lp)
    tl = F.nll_loss(tu, torch.tensor(lab), reduction=reduction)
    close(K.nll(lp, lab, reduction), tl)


def test_activations_vs_torch():
    x = RNG.normal(size=(5, 7)) * 3
    g = RNG.normal(size=x.shape)
    for ours, ours_grad, theirs in [
        (K.gelu, lambda g, x, y: K.gelu_grad(g, x), F.gelu),
        (K.sigmoid, lambda g, x, y: K.sigmoid_grad(g, y), torch.sigmoid),
        (K.softplus, lambda g, x, y: g * K.sigmoid(x), F.softplus),
        (lambda x: K.elu(x, 0.8), lambda g, x, y: K.elu_grad(g, x, 0.8), lambda t: F.elu(t, 0.8)),
        (lambda x: K.leaky_relu(x, 0.1), lambda g, x, y: K.leaky_relu_grad(g, x, 0.1),
         lambda t: F.leaky_relu(t, 0.1)),
        (lambda x: K.log_softmax(x, 1), lambda g, x, y: K.log_softmax_grad(g, y, 1), lambda t: F.log_softmax(t, 1)),
        (lambda x: K.softmax(x, 0), lambda g, x, y: K.softmax_grad(g, y, 0), lambda t: F.softmax(t, 0)),
    ]:
        tx = T(x)
        ty = theirs(tx)
        y = ours(x)
        close(y, ty)
        ty.backward(torch.tensor(g))
        close(ours_grad(g, x, y), tx.grad)
    close(K.logsumexp(x, 1), torch.logsumexp(torch.tensor(x), 1))
