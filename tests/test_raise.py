"""``raise`` in a differentiated function: input checks and guards, as Python runs them.

A raise reached whatever the arrays hold (a check of ndim, a flag, a static argument) is raised when the
function is transformed, which is when it is called: the user's own exception. Under a branch on array
values, the generated code raises it when it gets there (Python's built-in exceptions with constant
arguments, which Numba's compiled code can raise too)."""
import numpy as np
import pytest

import funcgrad
from funcgrad.testing import numerical_vjp

MODES = [dict(jit="auto"), dict(jit="python"), dict(jit="njit"), dict(jit=False)]
IDS = ["auto", "python", "njit", "nojit"]


class ModeError(Exception):
    pass


def checked(x, mode="sq"):
    if x.ndim != 1:
        raise ValueError(f"x must be 1-D, got {x.ndim}-D")
    if mode not in ("sq", "abs"):
        raise ModeError("unknown mode " + mode)
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > 100.0:
            raise FloatingPointError("x is too large")
        s = s + (x[i] ** 2 if mode == "sq" else abs(x[i]))
    return s


def guarded(x):
    if np.sum(x) < -50.0:
        raise ValueError("the sum is too negative")
    return np.sum(np.sin(x))


@pytest.mark.parametrize("kw", MODES, ids=IDS)
def test_checks_not_taken_leave_the_gradient_as_it_is(kw):
    x = np.array([0.5, -1.5, 2.0])
    np.testing.assert_allclose(funcgrad.grad(checked, **kw)(x), 2 * x, rtol=1e-14)
    np.testing.assert_allclose(funcgrad.grad(checked, **kw)(x, "abs"), np.sign(x), rtol=1e-14)
    np.testing.assert_allclose(funcgrad.grad(guarded, **kw)(x), numerical_vjp(guarded, (x,), 0, 1.0, 1e-6),
                               atol=1e-8)


@pytest.mark.parametrize("kw", MODES, ids=IDS)
def test_a_check_taken_raises_the_users_exception(kw):
    with pytest.raises(ValueError, match="x must be 1-D, got 2-D"):
        funcgrad.grad(checked, **kw)(np.ones((2, 2)))
    with pytest.raises(ModeError, match="unknown mode cube"):
        funcgrad.grad(checked, **kw)(np.ones(2), "cube")


@pytest.mark.parametrize("kw", MODES, ids=IDS)
def test_a_guard_on_array_values_raises_when_the_values_take_it(kw):
    with pytest.raises(FloatingPointError, match="x is too large"):
        funcgrad.grad(checked, **kw)(np.array([1.0, 200.0]))
    with pytest.raises(ValueError, match="the sum is too negative"):
        funcgrad.grad(guarded, **kw)(np.full(3, -20.0))
    # and the same transform is right for values that do not take it
    np.testing.assert_allclose(funcgrad.grad(checked, **kw)(np.array([1.0, 3.0])), [2.0, 6.0], rtol=1e-14)


def message_of_values(x):
    if np.sum(x) < 0:
        raise ValueError(f"negative sum {np.sum(x)}")
    return np.sum(x)


def reraise(x):
    if np.sum(x) < 0:
        raise
    return np.sum(x)


def custom_under_branch(x):
    if np.sum(x) < 0:
        raise ModeError("negative")
    return np.sum(x)


@pytest.mark.parametrize("f, words", [
    (message_of_values, "an f-string of a value known only when the function runs"),
    (reraise, "a bare 'raise'"),
    (custom_under_branch, "raising ModeError under a branch on array values is supported for Python's built-in"),
])
def test_what_cannot_be_raised_is_refused_at_the_users_line(f, words):
    with pytest.raises(funcgrad.UnsupportedSyntaxError, match=words) as e:
        funcgrad.grad(f)(np.ones(2))
    assert "test_raise.py" in str(e.value)
