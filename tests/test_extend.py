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


@primitive
def _no_jvp(x):
    return np.sum(x ** 2)


defvjp(_no_jvp, lambda ans, x: lambda g: 2.0 * g * x)


def _calls_no_jvp(y):
    return _no_jvp(y * 2.0)  # LINE


def test_second_order_without_a_jvp_rule_is_refused_at_the_users_line():
    # the refusal named a file funcgrad made up for the wrapper ('<funcgrad ... #1>') with the user's line number
    from funcgrad.errors import NoDerivativeError
    with pytest.raises(NoDerivativeError) as e:
        funcgrad.hessian(_calls_no_jvp)(np.array([0.3, 0.5]))
    line = [i for i, ln in enumerate(open(__file__), 1) if ln.rstrip().endswith("# LINE")][0]
    # the user's file; the line is the call's or (for this inlined one-line helper) its def line
    assert f"{__file__}:{line}" in str(e.value) or f"{__file__}:{line - 1}" in str(e.value), str(e.value)
