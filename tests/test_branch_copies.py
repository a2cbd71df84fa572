"""Code after an if that may return is written into both branches; each copy starts from the names as they
were (a list one copy built was read by the other: UnboundLocalError), and a nested def's own return is not
the function's (it made such a copy where none was needed)."""
import numpy as np
import pytest

import funcgrad


def def_in_a_branch_not_taken(x, n):
    if x > 0:
        def h(v):
            return v
    for i in range(n):
        L = []
        L.append(x)
    return x


def list_built_in_each_copy(x, n):
    if x > 0:
        if x > 1:
            return x
    s = 0.0
    for i in range(n):
        L = []
        L.append(x * i)
        s = s + sum(L)
    return s


def tuple_result_from_both_copies(x, n):
    if x > 0:
        if x > 1:
            return x, 2.0 * x
    L = [x]
    for i in range(n):
        L.append(x * i)
    return sum(L), x


@pytest.mark.parametrize("fn", [def_in_a_branch_not_taken, list_built_in_each_copy, tuple_result_from_both_copies],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("x", [-0.37, 0.37, 1.37])
def test_each_copy_starts_from_the_names_as_they_were(fn, x):
    if fn is tuple_result_from_both_copies:
        def scalar(v):
            a, b = fn(v, 3)
            return a + 3.0 * b
    else:
        def scalar(v):
            return fn(v, 3)

    h = 1e-6
    want, dwant = scalar(x), (scalar(x + h) - scalar(x - h)) / (2 * h)
    for jit in ("python", "njit", False):
        v, g = funcgrad.value_and_grad(scalar, jit=jit)(x)
        assert v == pytest.approx(want, rel=1e-12), jit
        assert g == pytest.approx(dwant, rel=1e-6, abs=1e-9), jit
