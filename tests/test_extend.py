"""funcgrad.extend: autograd's primitive / defvjp / defjvp, checked against central differences."""
import numpy as np
import pytest

import funcgrad
from funcgrad.extend import defjvp, defvjp, primitive
from funcgrad.testing import numerical_vjp


@primitive
def logsumexp(x):
    m = np.max(x)
    return m + np.log(np.sum(np.exp(x - m)))


defvjp(logsumexp, lambda ans, x: lambda g: np.full(x.shape, g) * np.exp(x - np.full(x.shape, ans)))
defjvp(logsumexp, lambda g, ans, x: np.sum(g * np.exp(x - ans)))


@primitive
def scaled(x, c):
    return x * c


defvjp(scaled, lambda ans, x, c: lambda g: g * c, None)


def example(y):
    return np.sum(logsumexp(y ** 2)) + np.sum(scaled(y, 3.0) ** 2)


@pytest.mark.parametrize("kw", [dict(mode="auto"), dict(mode="python"), dict(jit=False)])
def test_defvjp_gives_the_gradient(kw):
    y = np.array([0.3, -1.2, 0.8])
    want = numerical_vjp(example, (y,), 0, 1.0, 1e-6)
    np.testing.assert_allclose(funcgrad.grad(example, **kw)(y), want, rtol=1e-6)


def test_defjvp_gives_forward_mode():
    y = np.array([0.3, -1.2, 0.8])
    v = np.array([1.0, 0.5, -2.0])
    out, tangent = funcgrad.jvp(lambda x: logsumexp(x), (y,), (v,))
    eps = 1e-6
    assert out == pytest.approx(logsumexp(y))
    assert tangent == pytest.approx((logsumexp(y + eps * v) - logsumexp(y - eps * v)) / (2 * eps), rel=1e-6)


def test_defvjp_of_a_plain_function_is_refused():
    with pytest.raises(TypeError, match="funcgrad.extend.primitive"):
        defvjp(np.sin, lambda ans, x: lambda g: g)
