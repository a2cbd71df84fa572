"""funcgrad.grad end to end through funcgrad.nn (primitives, losses, serial layers) vs finite differences."""
import inspect

import numpy as np
import pytest

import funcgrad
import funcgrad.nn as nn


def fd_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros(x.size)
        e[i] = eps
        e = e.reshape(x.shape)
        g.flat[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


def check(f, args, argnums, rtol=1e-5, atol=1e-7):
    grads = funcgrad.grad(f, argnums=argnums)(*args)
    for argnum, g in zip(argnums, grads):
        def fi(v):
            a = list(args)
            a[argnum] = v
            return float(f(*a))
        np.testing.assert_allclose(g, fd_grad(fi, args[argnum]), rtol=rtol, atol=atol)


RNG = np.random.default_rng(11)


def cnn_loss(w1, b1, w2, wd, x, y):
    h = nn.conv2d(x, w1, b1, stride=(1, 2), padding=1)
    h = nn.relu(h)
    h = nn.max_pool2d(h, 2, stride=1)
    h = nn.conv2d(h, w2, None, 1, (0, 1), 2)
    h = nn.avg_pool2d(h, 2)
    h = np.reshape(h, (h.shape[0], -1))
    return nn.cross_entropy(h @ wd, y)


def test_grad_through_small_cnn_matches_finite_differences():
    x = RNG.normal(size=(2, 2, 9, 10))
    w1, b1 = RNG.normal(size=(3, 2, 3, 3)) * 0.5, RNG.normal(size=3) * 0.1
    w2 = RNG.normal(size=(4, 3, 2, 2)) * 0.5
    h = nn.avg_pool2d(nn.conv2d(nn.max_pool2d(nn.relu(nn.conv2d(x, w1, b1, (1, 2), 1)), 2, 1), w2, None, 1, (0, 1), 2), 2)
    wd = RNG.normal(size=(h[0].size, 5)) * 0.3
    y = np.array([1, 4])
    args = (w1, b1, w2, wd, x, y)
    check(cnn_loss, args, (0, 1, 2, 3, 4))


def misc_loss(x, gamma, beta, table, ids, t):
    h = nn.batch_norm(x, gamma, beta, np.zeros(3), np.ones(3), True, 1e-5)
    h = nn.gelu(h) + nn.elu(h, 0.7) + nn.softplus(h) + nn.sigmoid(h) + nn.leaky_relu(h, 0.1)
    h = nn.dropout(h, 0.25, 5)
    e = nn.embedding(table, ids)                       # (4, 3)
    h = nn.layer_norm(h + e, gamma, beta)
    return (nn.mse(nn.softmax(h, 0), t) + nn.huber(h, t, 0.5, "sum") + np.sum(nn.logsumexp(h, 1))
            + nn.nll(nn.log_softmax(h), np.array([0, 2, 1, 1]))
            + nn.binary_cross_entropy_with_logits(h, t) + nn.cross_entropy(h, nn.softmax(t), "sum"))


def test_grad_through_other_primitives_matches_finite_differences():
    x = RNG.normal(size=(4, 3))
    gamma, beta = RNG.uniform(0.5, 1.5, 3), RNG.normal(size=3) * 0.1
    table, ids = RNG.normal(size=(5, 3)), np.array([4, 0, 4, 2])
    t = RNG.uniform(0.1, 0.9, (4, 3))
    args = (x, gamma, beta, table, ids, t)
    check(misc_loss, args, (0, 1, 2, 3, 5), rtol=1e-4, atol=1e-6)


def test_serial_generates_readable_straight_line_source():
    init, apply = nn.serial(nn.Conv2D(3, 3, padding=1), nn.Relu, nn.MaxPool2D(2), nn.Flatten, nn.Dense(4), nn.Tanh,
                            nn.Dropout(0.5), nn.Dense(2))
    src = inspect.getsource(apply)
    assert "for " not in src and src.count("_layer") == 8
    assert "conv2d(x, params['w'], params['b'], (1, 1), (1, 1), (1, 1))" in inspect.getsource(nn.Conv2D(3, 3, padding=1)[1])
    shape, params = init(0, (2, 1, 6, 6))
    assert shape == (2, 2)
    assert params[0]["w"].shape == (3, 1, 3, 3) and params[4]["w"].shape == (27, 4)
    x = RNG.normal(size=(2, 1, 6, 6))
    y = apply(params, x)
    assert y.shape == (2, 2)
    np.testing.assert_array_equal(apply(params, x, False, 3), y)          # dropout off in eval
    assert not np.array_equal(apply(params, x, True, 3), y)               # and on in training
    _, params2 = init(0, (2, 1, 6, 6))
    np.testing.assert_array_equal(params2[0]["w"], params[0]["w"])       # seeded init
    with pytest.raises(TypeError):
        init(None, (2, 1, 6, 6))


_init, _apply = nn.serial(nn.Conv2D(3, 3, padding=1), nn.Relu, nn.AvgPool2D(2), nn.BatchNorm(), nn.Flatten,
                          nn.Dense(4), nn.Tanh, nn.Dense(3))


def serial_loss(params, x, y):
    return nn.cross_entropy(_apply(params, x, True, 0), y)


def test_grad_through_serial_layers_matches_finite_differences():
    _, params = _init(1, (3, 1, 6, 6))
    x = RNG.normal(size=(3, 1, 6, 6))
    y = np.array([0, 2, 1])
    g = funcgrad.grad(serial_loss)(params, x, y)
    for li, name in [(0, "w"), (0, "b"), (3, "gamma"), (3, "beta"), (5, "w"), (7, "b")]:
        def f(v):
            p = [dict(q) if isinstance(q, dict) else q for q in params]
            p[li] = dict(p[li])
            p[li][name] = v
            return float(serial_loss(tuple(p), x, y))
        np.testing.assert_allclose(g[li][name], fd_grad(f, params[li][name]), rtol=1e-5, atol=1e-7)


_binit, _bapply = nn.serial(nn.Conv2D(4, 3, padding=1), nn.BatchNorm(momentum=0.2), nn.Relu,
                            nn.serial(nn.Flatten, nn.Dense(5), nn.BatchNorm()), nn.Dense(3))


def bn_loss(params, x, y):
    logits, stats = _bapply.with_stats(params, x)
    return nn.cross_entropy(logits, y), stats


def test_batchnorm_running_statistics_follow_pytorchs_rule_and_gradients_are_unchanged():
    _, params = _binit(3, (6, 2, 5, 5))
    x = RNG.normal(size=(6, 2, 5, 5))
    y = np.array([0, 1, 2, 0, 1, 2])
    (value, stats), g = funcgrad.value_and_grad(bn_loss, has_aux=True)(params, x, y)
    # the loss and gradients are those of the plain training-mode apply
    g_plain = funcgrad.grad(lambda p, x, y: nn.cross_entropy(_bapply(p, x, True), y))(params, x, y)
    assert value == pytest.approx(float(nn.cross_entropy(_bapply(params, x, True), y)), rel=1e-12)
    for a, b in zip(funcgrad.tree_leaves(g), funcgrad.tree_leaves(g_plain)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    assert np.all(g[1]["mean"] == 0) and np.all(g[1]["var"] == 0)      # buffers get no gradient
    new = _bapply.merge_stats(params, stats)
    h = nn.conv2d(x, params[0]["w"], params[0]["b"], 1, 1)
    np.testing.assert_allclose(new[1]["mean"], 0.8 * params[1]["mean"] + 0.2 * h.mean(axis=(0, 2, 3)), rtol=1e-12)
    np.testing.assert_allclose(new[1]["var"], 0.8 * params[1]["var"] + 0.2 * h.var(axis=(0, 2, 3), ddof=1),
                               rtol=1e-12)
    z = np.reshape(np.maximum(nn.batch_norm(h, params[1]["gamma"], params[1]["beta"], params[1]["mean"],
                                            params[1]["var"], True), 0), (6, -1)) @ params[3][1]["w"] + params[3][1]["b"]
    np.testing.assert_allclose(new[3][2]["mean"], 0.9 * params[3][2]["mean"] + 0.1 * z.mean(0), rtol=1e-12)
    np.testing.assert_allclose(new[3][2]["var"], 0.9 * params[3][2]["var"] + 0.1 * z.var(0, ddof=1), rtol=1e-12)
    np.testing.assert_array_equal(new[0]["w"], params[0]["w"])        # everything else untouched
    # eval mode then normalizes with the merged statistics
    ev = _bapply(new, x, False)
    assert not np.allclose(ev, _bapply(params, x, False))
    with pytest.raises(TypeError, match="statistics returned by with_stats"):
        _bapply.merge_stats(params, stats[:1])


def test_batchnorm_running_statistics_match_torch():
    torch = pytest.importorskip("torch", reason="torch not installed: no running-statistics oracle")
    _, params = _binit(4, (6, 2, 5, 5))
    bn = torch.nn.BatchNorm2d(4, momentum=0.2, dtype=torch.float64)
    bn.train()
    for step in range(3):
        x = np.random.default_rng(step).normal(size=(6, 2, 5, 5))
        h = nn.conv2d(x, params[0]["w"], params[0]["b"], 1, 1)
        bn(torch.from_numpy(h))
        _, stats = bn_loss(params, x, np.zeros(6, np.int64))
        params = _bapply.merge_stats(params, stats)
    np.testing.assert_allclose(params[1]["mean"], bn.running_mean.numpy(), rtol=1e-12)
    np.testing.assert_allclose(params[1]["var"], bn.running_var.numpy(), rtol=1e-12)
