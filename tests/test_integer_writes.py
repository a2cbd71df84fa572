"""A differentiated value written into an array of integers or booleans (``a[i] = x * 5.0`` with ``a`` of dtype
int64) is cast by NumPy: a piecewise constant, so no derivative flows through the write. Reverse mode, forward
mode and second order agree with central differences in every mode; the generated code zeroes the cotangent
where the array's dtype is not a float one (``K.written_cast``)."""
import numpy as np
import pytest

import funcgrad
from funcgrad.testing import numerical_vjp
from tests.support import assert_value_and_gradient

MODES = [dict(mode="auto"), dict(mode="python"), dict(mode="njit"), dict(jit=False)]
MODE_IDS = ["auto", "python", "njit", "nojit"]


def _one_write(x):
    a = np.zeros(3, dtype=np.int64)
    a[0] = x[0] * 5.0
    return np.sum(a * x)


def _in_a_loop(x):
    a = np.zeros(3, dtype=np.int64)
    b = np.zeros(3)
    for i in range(3):
        a[i] = x[i] * 5.0      # cast: no derivative
        b[i] = x[i] * a[i]     # float: the derivative flows
    return np.sum(a * x * x) + np.sum(b * b)


def _bool_mask(x):
    m = np.zeros(3, dtype=np.bool_)
    m[1] = x[1] - 1.0
    return np.sum(np.where(m, x * x, x))


X = np.array([0.3, 1.7, 0.9])


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("f", [_one_write, _in_a_loop, _bool_mask])
def test_gradient_of_a_write_into_integers(f, kw):
    assert_value_and_gradient(f, (X,), 0, **kw)


@pytest.mark.parametrize("f", [_one_write, _in_a_loop, _bool_mask])
def test_forward_mode_and_hessian_of_a_write_into_integers(f):
    t = np.array([1.0, 0.5, -0.3])
    _, jt = funcgrad.jvp(f, (X,), (t,))
    np.testing.assert_allclose(jt, numerical_vjp(f, (X,), 0, 1.0, 1e-7) @ t, rtol=1e-6, atol=1e-7)
    H = funcgrad.hessian(f)(X)
    g = funcgrad.grad(f)
    want = np.stack([(g(X + 1e-6 * e) - g(X - 1e-6 * e)) / 2e-6 for e in np.eye(3)])
    np.testing.assert_allclose(H, want, rtol=1e-5, atol=1e-6)


def _float_write(x, y):
    z = x * 1.0
    z[0] = y[0] * 2.0
    return np.sum(z * z)


def test_a_write_into_floats_made_in_the_function_keeps_its_derivative():
    src = funcgrad.source(funcgrad.grad(_float_write, argnums=(0, 1), mode="njit"), X, X)
    assert "written_cast" in src   # z is made in the function: its dtype is checked where the code runs
    assert_value_and_gradient(_float_write, (X, X), (0, 1), mode="njit")
