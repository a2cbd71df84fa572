"""Two names for one list or dict inside a loop or branch: a change through either shows in both (Python's),
or, where the code cannot follow it (a name that held another value before), refused at the user's line."""
import numpy as np
import pytest

import funcgrad
from funcgrad.errors import UnsupportedSyntaxError

A = np.array([0.3, -0.7, 0.45, 0.2])


def alias_in_a_branch(x, a):
    s = 0.0
    if x > -5.0:
        L = []
        M = L
        M.append(a[1])
        s = sum(L) * x
    return s


def chained_in_a_branch(x, a):
    s = 0.0
    if x > -5.0:
        L = M = []
        L.append(x * a[0])
        M.append(a[1])
        s = sum(M) * x + len(L)
    return s


def chained_in_a_loop(x, a):
    s = 0.0
    for i in range(3):
        L = M = []
        L.append(x * a[i])
        M.append(a[i + 1])
        s = s + sum(M) * x + len(L)
    return s


def alias_then_loop(x, a):
    L = []
    M = L
    for i in range(3):
        M.append(a[i] * x)
    return sum(L)


def rebinding_a_name_that_held_another_list(x, a):
    L = [x]
    M = [a[0]]
    if x > 0:
        M = L
        M.append(a[1])
    return sum(L) + sum(M)


@pytest.mark.parametrize("fn", [alias_in_a_branch, chained_in_a_branch, chained_in_a_loop, alias_then_loop],
                         ids=lambda f: f.__name__)
def test_one_container_under_two_names(fn):
    h = 1e-6
    dx = (fn(0.37 + h, A) - fn(0.37 - h, A)) / (2 * h)
    da = np.array([(fn(0.37, A + h * e) - fn(0.37, A - h * e)) / (2 * h) for e in np.eye(4)])
    for jit in ("python", "njit", False):
        v, (gx, ga) = funcgrad.value_and_grad(fn, argnums=(0, 1), jit=jit)(0.37, A)
        assert v == pytest.approx(fn(0.37, A), rel=1e-12), jit
        assert gx == pytest.approx(dx, rel=1e-6), jit
        np.testing.assert_allclose(ga, da, rtol=1e-6, atol=1e-9, err_msg=str(jit))


def test_a_name_that_held_another_container_is_refused():
    with pytest.raises(UnsupportedSyntaxError, match="'M' takes a list or dict another name holds") as e:
        funcgrad.grad(rebinding_a_name_that_held_another_list)(0.37, A)
    assert e.value.filename == __file__ and "M = L" in (e.value.text or "")


def dict_keys_inside_a_runtime_loop(x, n):
    p = {"w": x[0], "b": x[1]}
    s = 0.0
    for i in range(n):
        for k in p:            # k holds a key (a string) inside a loop that runs at run time
            s = s + p[k] * (i + 1)
    return s


def lambda_made_in_a_runtime_loop(x, n):
    out = 0.0
    for i in range(n):
        g = lambda v, w=x[i % 4]: v * w
        out = out + g(x[3])
    return out


def a_string_that_changes_in_a_loop(x, n):
    mode = "a"
    for i in range(n):
        if x[i % 4] > 0.5:
            mode = "b"
    return x[0] * (2.0 if mode == "a" else 3.0)


@pytest.mark.parametrize("fn", [dict_keys_inside_a_runtime_loop, lambda_made_in_a_runtime_loop],
                         ids=lambda f: f.__name__)
def test_names_first_bound_inside_a_runtime_loop_to_values_known_now(fn):
    x = np.array([0.3, 0.7, 1.1, 0.4])
    dx = np.array([(fn(x + 1e-6 * e, 3) - fn(x - 1e-6 * e, 3)) / 2e-6 for e in np.eye(4)])
    for jit in ("python", "njit", False):
        v, g = funcgrad.value_and_grad(fn, jit=jit)(x, 3)
        assert v == pytest.approx(fn(x, 3), rel=1e-12), jit
        np.testing.assert_allclose(g, dx, rtol=1e-6, atol=1e-8, err_msg=str(jit))


def test_a_value_known_now_that_changes_in_a_runtime_loop_is_refused():
    with pytest.raises(UnsupportedSyntaxError, match="'mode'") as e:
        funcgrad.grad(a_string_that_changes_in_a_loop)(np.array([0.3, 0.7, 1.1, 0.4]), 3)
    assert e.value.filename == __file__ and "for i in range(n)" in (e.value.text or "")   # the loop that changes it
