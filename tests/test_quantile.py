"""np.quantile and np.percentile inside differentiated functions (definitions over sort and take,
funcgrad/ops/numpy_math.py): NumPy's values and gradients against central differences in every mode,
q out of range raising NumPy's ValueError, and what is not supported refused at the user's line."""
import numpy as np
import pytest

import funcgrad

MODES = ["auto", "whole", False]
A = np.random.default_rng(12).standard_normal((5, 7))


def q_all(a):
    return np.quantile(a, 0.3)


def q_axis(a):
    return np.sum(np.quantile(a, 0.75, axis=0) ** 2)


def p_many(a):
    return np.sum(np.percentile(a, [10.0, 50.0, 93.0]) * np.array([1.0, -2.0, 3.0]))


def q_keep(a):
    return np.sum(np.quantile(a, 0.4, axis=1, keepdims=True) * a)


def q_ends(a):
    return np.quantile(a, 0.0) + 2.0 * np.percentile(a, 100.0, axis=-1)[1]


def central(f, a, eps=1e-6):
    g = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        up, dn = a.copy(), a.copy()
        up[i] += eps
        dn[i] -= eps
        g[i] = (f(up) - f(dn)) / (2 * eps)
    return g


@pytest.mark.parametrize("jit", MODES, ids=str)
@pytest.mark.parametrize("f", [q_all, q_axis, p_many, q_keep, q_ends], ids=lambda f: f.__name__)
def test_values_and_gradients(f, jit):
    v, g = funcgrad.value_and_grad(f, jit=jit)(A)
    np.testing.assert_allclose(v, f(A), rtol=1e-12)
    np.testing.assert_allclose(g, central(f, A), rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("jit", MODES, ids=str)
def test_q_out_of_range_raises_numpys_error(jit):
    def bad_p(a, q):
        return np.percentile(a, q)

    def bad_q(a):
        return np.quantile(a, 1.5)
    with pytest.raises(ValueError, match="Percentiles must be in the range"):
        funcgrad.grad(bad_p, jit=jit)(A, 120.0)
    with pytest.raises(ValueError, match="Quantiles must be in the range"):
        funcgrad.grad(bad_q, jit=jit)(A)


def test_unsupported_forms_are_refused_at_the_users_line():
    def nearest(a):
        return np.quantile(a, 0.5, method="nearest")

    def two_along_axis(a):
        return np.sum(np.quantile(a, [0.2, 0.8], axis=0))

    for f, word in ((nearest, "method"), (two_along_axis, "several quantiles")):
        with pytest.raises(funcgrad.FuncgradError, match=word) as e:
            funcgrad.grad(f)(A)
        assert "test_quantile.py" in str(e.value)
