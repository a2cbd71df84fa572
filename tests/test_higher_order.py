"""Second and higher order: hvp, hessian, jvp of jvp and grad of grad, against finite differences.

Hessian-vector products run the reverse pass over the generated forward pass; grad of grad is the
grad of the generated jvp; jvp of jvp runs the forward pass over its own output. Each is checked
against central differences of a first-order derivative funcgrad already gets right, on
straight-line code, loops, branches and in-place writes, in Python mode and compiled (auto).
"""
import numpy as np
import pytest

import funcgrad
from funcgrad.forward_mode import hessian, hvp, jvp_of_jvp


def straight(x):
    return np.sum(np.sin(x) * x ** 2) + np.prod(np.tanh(x[:2]))


def loop(x):
    s = 0.0
    for i in range(x.shape[0]):
        s = s + np.sin(x[i]) * x[(i + 1) % x.shape[0]] ** 2
    return s + np.sum(np.tanh(x) ** 3)


def branch(x):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > 0:
            s = s + x[i] ** 3
        else:
            s = s - np.exp(x[i]) * x[0]
    return s


def inplace(x):
    y = np.zeros(x.shape[0])
    for i in range(x.shape[0]):
        y[i] = x[i] * x[(i + 2) % x.shape[0]]
    return np.sum(np.exp(y))


X = np.array([0.3, -0.5, 0.8, 0.1])
V = np.array([1.0, 0.5, -2.0, 0.25])


def _fd_hessian(f, x, eps=1e-5):
    g = funcgrad.grad(f, mode="python")
    return np.stack([(g(x + eps * e) - g(x - eps * e)) / (2 * eps) for e in np.eye(x.size)], axis=-1)


@pytest.mark.parametrize("mode", ["python", "auto"])
@pytest.mark.parametrize("f", [straight, loop, branch, inplace])
def test_hessian_and_hvp(f, mode):
    H = hessian(f, mode=mode)(X)
    np.testing.assert_allclose(H, _fd_hessian(f, X), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(hvp(f, (X,), (V,), mode=mode), H @ V, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("f", [straight, loop, inplace])
def test_jvp_of_jvp_is_the_second_directional_derivative(f):
    H = _fd_hessian(f, X)
    U = np.array([0.2, -1.0, 0.4, 0.9])
    _, (second,) = jvp_of_jvp(f, (X,), (V,), (U,), (np.zeros(4),))
    np.testing.assert_allclose(second, U @ H @ V, rtol=1e-6, atol=1e-6)


def taylor(x):
    y = x
    for _ in range(3):
        y = np.tanh(y) * x
    return y


@pytest.mark.parametrize("mode", ["python", "auto"])
def test_grad_of_grad_of_grad(mode):
    g1 = funcgrad.grad(taylor, mode=mode)
    g2 = funcgrad.grad(g1, mode=mode)
    g3 = funcgrad.grad(g2, mode=mode)
    x, e = 0.7, 1e-4
    np.testing.assert_allclose(g2(x), (g1(x + e) - g1(x - e)) / (2 * e), rtol=1e-6)
    np.testing.assert_allclose(g3(x), (g2(x + e) - g2(x - e)) / (2 * e), rtol=1e-6)
    # tanh'' = -2 tanh (1 - tanh^2), straight from a NumPy function
    t = np.tanh(0.5)
    np.testing.assert_allclose(funcgrad.grad(funcgrad.grad(np.tanh))(0.5), -2 * t * (1 - t * t), rtol=1e-12)


def test_grad_of_grad_needs_a_scalar_inner_argument():
    with pytest.raises(TypeError, match="scalar"):
        funcgrad.grad(funcgrad.grad(straight))(X)


def test_forward_mode_refuses_custom_vjp_without_a_jvp():
    @funcgrad.custom_vjp
    def f(x):
        return np.sin(x)

    f.defvjp(lambda x: (np.sin(x), x), lambda x, g: (g * np.cos(x),))

    def h(x):
        return f(x) * 2.0

    with pytest.raises(funcgrad.NoDerivativeError, match="forward-mode"):
        funcgrad.jvp(h, (0.3,), (1.0,))


def test_source_prints_the_forward_mode_code():
    text = funcgrad.source(loop, X, forward=True)
    assert "def loop_jvp(x, t_x):" in text
    assert "t_s = " in text and "for i in range(" in text      # the loop is kept, tangents beside values


def test_grad_of_grad_of_a_lambda():
    d2 = funcgrad.grad(funcgrad.grad(lambda x: x ** 3 * np.sin(x)))
    x = 0.4
    want = 6 * x * np.sin(x) + 6 * x ** 2 * np.cos(x) - x ** 3 * np.sin(x)
    np.testing.assert_allclose(d2(x), want, rtol=1e-12)
