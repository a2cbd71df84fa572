"""funcgrad.extend: autograd's primitive / defvjp / defjvp, checked against central differences."""
import numpy as np
import pytest

import funcgrad
import funcgrad.test_util
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


@primitive
def _no_jvp(x):
    return np.sum(x ** 2)


defvjp(_no_jvp, lambda ans, x: lambda g: 2.0 * g * x)


def _calls_no_jvp(y):
    return _no_jvp(y * 2.0)


@primitive
def _off(x):
    return np.sum(x ** 2)


defvjp(_off, lambda ans, x: lambda g: 2.0 * g * x + 0.1 * g * x ** 2)   # wrong by a term second order sees


def _calls_off(y):
    return _off(y * 2.0)


def test_second_order_with_a_vjp_maker_only_differentiates_the_maker():
    # a second derivative through a primitive with a VJP maker only was refused; forward mode now transposes the
    # maker (linear in g) and reverse over that differentiates it again, as autograd does: hessian, grad of grad
    # and autograd's order-2 check in reverse mode
    y = np.array([0.3, 0.5])
    np.testing.assert_allclose(funcgrad.hessian(_calls_no_jvp)(y), 8.0 * np.eye(2), rtol=1e-13)
    np.testing.assert_allclose(funcgrad.grad(lambda y: np.sum(funcgrad.grad(_calls_no_jvp)(y) * y))(y), 16.0 * y,
                               rtol=1e-13)
    funcgrad.test_util.check_grads(_calls_no_jvp, modes=["rev"], order=2)(y)
    funcgrad.test_util.check_grads(example, modes=["rev"], order=2)(np.array([0.3, -1.2, 0.8]))
    with pytest.raises(AssertionError):       # the check can fail: a maker off by a term is caught
        funcgrad.test_util.check_grads(_calls_off, modes=["rev"], order=2)(y)
    funcgrad.test_util.check_grads(_calls_off, modes=["rev"], order=1)(np.array([0.0, 0.0]))   # right at zero