"""A Python type as a NumPy function's dtype (``np.zeros(n, dtype=int)``, ``np.full(n, 2, float)``) means the
NumPy type NumPy makes of it; compiled whole (Numba takes NumPy dtypes only) as in Python, in every mode."""
import numpy as np
import pytest

import funcgrad

MODES = ["auto", "whole", "kernels", False]


def made(x):
    idx = np.zeros(3, dtype=int)
    ones = np.ones(x.shape, int)
    full = np.full(3, 2, float)
    flags = np.ones_like(x, dtype=bool)
    steps = np.arange(0, 3, 1, int)
    w = np.array([1, 2, 3], dtype=float)
    return np.sum(x[idx] * ones[:3]) + np.sum(x * full * w) + np.sum(np.where(flags, x, 0.0)) + np.sum(x[steps])


@pytest.mark.parametrize("jit", MODES, ids=str)
def test_python_types_as_dtypes_compile_and_are_right(jit):
    x = np.array([1.5, -2.0, 0.25])
    v, g = funcgrad.value_and_grad(made, jit=jit)(x)
    np.testing.assert_allclose(v, made(x), rtol=1e-13)
    np.testing.assert_allclose(g, [3.0 + 2.0 + 1.0 + 1.0, 4.0 + 1.0 + 1.0, 6.0 + 1.0 + 1.0])


@pytest.mark.parametrize("jit", MODES, ids=str)
def test_the_arrays_have_numpys_dtypes(jit):
    def dtypes(x):
        return (np.sum(x) + 0.0, np.zeros(2, dtype=int), np.ones(2, dtype=bool), np.full(2, 1, complex))
    _, a, b, c = funcgrad.jit(dtypes, **({} if jit in ("whole", "auto") else {"strategy": "kernels"}))(np.ones(2))
    assert a.dtype == np.zeros(2, dtype=int).dtype and b.dtype == np.bool_ and c.dtype == np.complex128
