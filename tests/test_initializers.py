"""funcgrad.initializers: scales (published formulas), determinism per seed, orthogonality, errors."""
import math

import numpy as np
import pytest

from funcgrad import initializers as init


def test_calculate_gain_values():
    assert init.calculate_gain("linear") == 1.0
    assert init.calculate_gain("conv2d") == 1.0
    assert init.calculate_gain("sigmoid") == 1.0
    assert init.calculate_gain("tanh") == pytest.approx(5 / 3)
    assert init.calculate_gain("relu") == pytest.approx(math.sqrt(2))
    assert init.calculate_gain("leaky_relu") == pytest.approx(math.sqrt(2 / (1 + 0.01 ** 2)))
    assert init.calculate_gain("leaky_relu", 0.2) == pytest.approx(math.sqrt(2 / 1.04))
    assert init.calculate_gain("selu") == 0.75
    with pytest.raises(ValueError, match="unsupported nonlinearity"):
        init.calculate_gain("swish")


def test_calculate_gain_and_fans_match_torch():
    torch = pytest.importorskip("torch")
    for nl, p in [("linear", None), ("tanh", None), ("relu", None), ("leaky_relu", None), ("leaky_relu", 0.3),
                  ("selu", None), ("conv3d", None)]:
        assert init.calculate_gain(nl, p) == pytest.approx(torch.nn.init.calculate_gain(nl, p))
    for shape in [(5, 7), (8, 3, 3, 3), (4, 2, 5)]:
        assert init.compute_fans(shape) == torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(shape))


def test_fans():
    assert init.compute_fans((10, 20)) == (20, 10)              # (out, in)
    assert init.compute_fans((64, 16, 3, 3)) == (16 * 9, 64 * 9)  # OIHW
    assert init.compute_fans((20, 10), in_axis=0, out_axis=1) == (20, 10)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        init.compute_fans((5,))


def _check_uniform(x, bound):
    assert x.min() >= -bound and x.max() <= bound
    assert x.max() > 0.98 * bound and x.min() < -0.98 * bound
    np.testing.assert_allclose(x.std(), bound / math.sqrt(3), rtol=0.02)
    assert abs(x.mean()) < 0.02 * bound


def _check_normal(x, std):
    np.testing.assert_allclose(x.std(), std, rtol=0.02)
    assert abs(x.mean()) < 0.02 * std
    # tails like a Gaussian (not truncated, not uniform): ~0.27% beyond 3 std
    frac = np.mean(np.abs(x) > 3 * std)
    assert 0.001 < frac < 0.005


def test_xavier():
    shape = (400, 300)
    x = init.xavier_uniform(0, shape, gain=2.0)
    _check_uniform(x, 2.0 * math.sqrt(6 / 700))
    _check_normal(init.xavier_normal(1, shape), math.sqrt(2 / 700))
    assert init.glorot_uniform is init.xavier_uniform


def test_kaiming_conv_oihw():
    shape = (64, 32, 3, 3)              # fan_in = 288, fan_out = 576
    _check_normal(init.kaiming_normal(0, shape, nonlinearity="relu"), math.sqrt(2) / math.sqrt(288))
    _check_normal(init.kaiming_normal(0, shape, mode="fan_out", nonlinearity="relu"), math.sqrt(2 / 576))
    _check_uniform(init.kaiming_uniform(2, shape), math.sqrt(3) * math.sqrt(2) / math.sqrt(288))  # torch defaults
    _check_uniform(init.he_uniform(3, shape, a=0.2, nonlinearity="leaky_relu"),
                   math.sqrt(3) * math.sqrt(2 / 1.04) / math.sqrt(288))
    _check_normal(init.kaiming_normal(4, shape, nonlinearity="tanh"), (5 / 3) / math.sqrt(288))
    with pytest.raises(ValueError, match="mode"):
        init.kaiming_normal(0, shape, mode="fan_avg")


def test_dense_in_out_layout():
    x = init.kaiming_normal(0, (1000, 200), nonlinearity="relu", in_axis=0, out_axis=1)
    _check_normal(x, math.sqrt(2 / 1000))


def test_normal_uniform_constant():
    _check_normal(init.normal(0, (300, 300), std=0.5), 0.5)
    u = init.uniform(0, (100000,), -2.0, 3.0)
    assert u.min() >= -2 and u.max() < 3 and abs(u.mean() - 0.5) < 0.03
    assert np.all(init.zeros(0, (2, 3)) == 0) and init.zeros(0, (2, 3)).dtype == np.float32
    assert np.all(init.ones(0, 4) == 1)
    c = init.constant(0, (2, 2), 7.5, dtype=np.float64)
    assert c.dtype == np.float64 and np.all(c == 7.5)


@pytest.mark.parametrize("shape", [(50, 50), (30, 80), (80, 30), (16, 4, 3, 3)])
@pytest.mark.parametrize("gain", [1.0, 0.5])
def test_orthogonal(shape, gain):
    w = init.orthogonal(0, shape, gain=gain, dtype=np.float64)
    assert w.shape == shape
    m = w.reshape(shape[0], -1) / gain
    r, c = m.shape
    gram = m @ m.T if r <= c else m.T @ m
    np.testing.assert_allclose(gram, np.eye(min(r, c)), atol=1e-10)
    w32 = init.orthogonal(0, shape, gain=gain)
    assert w32.dtype == np.float32
    np.testing.assert_allclose(w32, w, atol=1e-6)


def test_orthogonal_is_random():
    a = init.orthogonal(0, (10, 10))
    b = init.orthogonal(1, (10, 10))
    assert not np.allclose(a, b)
    with pytest.raises(ValueError, match="2 dimensions"):
        init.orthogonal(0, (5,))


ALL_RANDOM = [init.normal, init.uniform, init.xavier_uniform, init.xavier_normal, init.kaiming_uniform,
              init.kaiming_normal, init.orthogonal]


@pytest.mark.parametrize("fn", ALL_RANDOM, ids=lambda f: f.__name__)
def test_determinism_and_dtypes(fn):
    a = fn(123, (20, 30))
    b = fn(123, (20, 30))
    c = fn(124, (20, 30))
    assert a.dtype == np.float32 and a.shape == (20, 30)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    d = fn(123, (20, 30), dtype=np.float64)
    assert d.dtype == np.float64
    np.testing.assert_allclose(a, d, rtol=1e-6, atol=1e-7)   # same draw, cast
    # a Generator is drawn from: two calls differ, and the sequence is reproducible
    g = np.random.default_rng(5)
    x1, x2 = fn(g, (20, 30)), fn(g, (20, 30))
    assert not np.array_equal(x1, x2)
    g = np.random.default_rng(5)
    np.testing.assert_array_equal(fn(g, (20, 30)), x1)
    np.testing.assert_array_equal(fn(np.int64(123), (20, 30)), a)


@pytest.mark.parametrize("bad", [None, 1.5, "0", True, -1])
def test_bad_seed(bad):
    with pytest.raises((TypeError, ValueError), match="seed"):
        init.normal(bad, (2, 2))


def test_bad_shape_and_dtype():
    with pytest.raises(ValueError, match="shape"):
        init.normal(0, (2, -1))
    with pytest.raises(ValueError, match="shape"):
        init.uniform(0, (2.5, 3))
    with pytest.raises(TypeError, match="floating"):
        init.normal(0, (2, 2), dtype=np.int32)
