"""for/while ... else: the block runs exactly when no break of its loop fired, in value and gradient."""
import numpy as np
import pytest

import funcgrad
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
