"""for/while ... else: the block runs exactly when no break of its loop fired, in value and gradient."""
import numpy as np
import pytest

import funcgrad
from funcgrad.testing import numerical_vjp
from tests.fixtures import loop_else as E

POINTS = [np.array([0.3, 0.7, 1.1, 0.4]), np.array([0.3, 0.7, 0.1, 0.4]), np.array([30.0, 0.7, 0.1, 0.4])]


def _central(f, x, h=1e-6):
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g


@pytest.mark.parametrize("fn", E.PROGRAMS, ids=lambda f: f.__name__)
def test_loop_else_value_and_gradient(fn):
    for x in POINTS:
        want = fn(x.copy())
        dwant = _central(fn, x)
        for jit in ("python", "njit", False):
            v, g = funcgrad.value_and_grad(fn, jit=jit)(x.copy())
            assert v == pytest.approx(want, rel=1e-12), (jit, x)
            np.testing.assert_allclose(g, dwant, rtol=1e-6, atol=1e-6, err_msg=f"{jit} at {x}")


def test_builtin_max_min_pow_of_arrays():
    """max(x)/min(x) of a 1-D array iterate its items (NumPy's max along axis 0); pow(a, b) is a ** b."""
    def f(x):
        return max(x) * min(x) + pow(x[1], 3) + max(x[0], x[2])

    x = np.array([0.3, 0.7, 1.1, 0.4])
    for jit in ("python", "njit", False):
        v, g = funcgrad.value_and_grad(f, jit=jit)(x)
        assert v == pytest.approx(f(x), rel=1e-12)
        np.testing.assert_allclose(g, _central(f, x), rtol=1e-6, atol=1e-6)


def _while_and_break(x, a, n):
    s = x
    k = 0
    while k < n and np.sin(s) < 0.99 or k == 0:
        k += 1
        s = s * 1.1 + x * np.cos(s)
        if s > a[0]:
            break
        s = s + 0.1 * x
    return s


@pytest.mark.parametrize("jit", ["auto", "python", "njit", False])
def test_a_while_test_of_statements_is_not_run_again_after_a_break(jit):
    # `while k < n and ...:` needs statements (short-circuit); they ran again after the loop's break, and the
    # reverse pass replayed them in the broken iteration: a break in the first iteration read '_bool_1' unbound
    # (found by gen_lang)
    for a0, n in [(0.5, 1), (1.2, 3), (5.0, 3), (5.0, 8)]:
        args = (0.3, np.array([a0]), n)
        v, g = funcgrad.value_and_grad(_while_and_break, jit=jit)(*args)
        assert v == pytest.approx(_while_and_break(*args), rel=1e-14)
        assert g == pytest.approx(float(numerical_vjp(_while_and_break, args, 0, 1.0, 1e-6)), rel=1e-7)
