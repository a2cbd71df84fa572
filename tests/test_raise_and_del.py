"""``raise`` and ``del`` in a differentiated function: input checks and guards, as Python runs them.

A raise reached whatever the arrays hold (a check of ndim, a flag, a static argument) is raised when the
function is transformed, which is when it is called: the user's own exception. Under a branch on array
values, the generated code raises it when it gets there (Python's built-in exceptions with constant
arguments, which Numba's compiled code can raise too)."""
import numpy as np
import pytest

import funcgrad
from funcgrad.testing import numerical_vjp
from tests.support import assert_value_and_gradient

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
    assert "test_raise_and_del.py" in str(e.value)


def deletes(x, n):
    tmp = np.sin(x)
    y = tmp * 2.0
    del tmp
    tmp = y + 1.0          # rebound after del
    s = np.sum(tmp * x)
    for i in range(n):     # del of a temporary made inside a loop over a runtime range
        t = x * i
        if np.sum(t) > 2:
            s = s + np.sum(t * t)
        del t
    return s


@pytest.mark.parametrize("kw", MODES, ids=IDS)
def test_del_unbinds_a_name_as_python_does(kw):
    x = np.array([0.3, 1.0, -0.4])
    for n in (0, 3):
        v, g = funcgrad.value_and_grad(deletes, **kw)(x, n)
        assert v == pytest.approx(deletes(x, n), rel=1e-13)
        np.testing.assert_allclose(g, numerical_vjp(deletes, (x, n), 0, 1.0, 1e-6), atol=1e-7)


def read_after_del(x):
    t = x * 2
    del t
    return np.sum(t)


def del_of_outer_in_loop(x, n):
    t = x * 2
    for i in range(n):
        del t
        t = x
    return np.sum(t)


def del_item(x):
    d = {"a": x, "b": x * 2}
    del d["a"]
    lst = [x, x * 3.0, x * 5.0, x * 7.0]
    del lst[1:3]
    del lst[0]
    return np.sum(d["b"]) * len(d) + np.sum(lst[0]) * len(lst)


def del_array_item(x):
    y = x * 2.0
    del y[0]
    return np.sum(y)


def del_outer_item_in_loop(x, n):
    lst = [x, x * 2.0]
    for i in range(n):
        del lst[0]
    return np.sum(lst[0])


@pytest.mark.parametrize("kw", [dict(mode="auto"), dict(mode="njit"), dict(jit=False)], ids=["auto", "njit", "nojit"])
def test_del_of_an_item_of_a_container_known_now(kw):
    x = np.array([0.5, -1.5])
    assert_value_and_gradient(del_item, (x,), 0, **kw)


@pytest.mark.parametrize("f, words", [
    (read_after_del, "local variable 't' is read here before any value is assigned to it"),
    (del_of_outer_in_loop, "'del t' inside a loop over a runtime range or a branch on array values of a variable "
                           "bound before it"),
    (del_array_item, "'del' of an array item is not supported"),
    (del_outer_item_in_loop, "'del' of an item of a list or dict inside a loop or branch that runs at run time is "
                             "supported only for a container made inside it"),
])
def test_del_that_cannot_be_followed_is_refused_at_the_users_line(f, words):
    args = (np.ones(2), 2) if f in (del_of_outer_in_loop, del_outer_item_in_loop) else (np.ones(2),)
    with pytest.raises(funcgrad.UnsupportedSyntaxError, match=words) as e:
        funcgrad.grad(f)(*args)
    assert "test_raise_and_del.py" in str(e.value)
