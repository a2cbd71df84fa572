"""A name bound only inside a loop that ran no trip, or a branch not taken, raises Python's UnboundLocalError
when it is read, in every mode.

Compiled by Numba, such a read gave a zero (Numba gives a variable with no value a zero): the value and gradient
of ``for i in range(n): y = x * i`` / ``return y`` at n = 0 came back as 0.0 where Python raises. The generated
code now keeps a flag for each such name and tests it before the read (funcgrad/transform/unbound.py).
"""
import numpy as np
import pytest

import funcgrad
from funcgrad.errors import UnsupportedSyntaxError
from tests.support import assert_value_and_gradient

MODES = [dict(mode="auto"), dict(mode="python"), dict(mode="njit"), dict(jit=False)]
MODE_IDS = ["auto", "python", "njit", "nojit"]


def bound_in_loop(x, n):
    for i in range(n):
        y = x * (i + 1.0)
    return y * 2.0


def bound_in_branch(x):
    if x[0] > 0.0:
        y = x * 2.0
    return np.sum(y)


def container_item_in_loop(x, n):
    for i in range(n):
        d = {}
        d["a"] = x * (i + 1.0)
    return d["a"]


def bound_everywhere(x, n):
    y = x
    for i in range(n):
        z = y * 0.5
        y = z + x
    return y


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_read_after_a_loop_that_ran_no_trip_raises(kw):
    assert_value_and_gradient(bound_in_loop, (0.7, 3), 0, **kw)
    assert_value_and_gradient(container_item_in_loop, (0.7, 2), 0, **kw)
    for f in (bound_in_loop, container_item_in_loop):
        with pytest.raises(UnboundLocalError):
            f(0.7, 0)   # (Python's own)
        with pytest.raises(UnboundLocalError):
            funcgrad.value_and_grad(f, **kw)(0.7, 0)
    with pytest.raises(UnboundLocalError, match="'y'"):
        funcgrad.value_and_grad(bound_in_loop, **kw)(0.7, 0)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_read_after_a_branch_not_taken_raises(kw):
    assert_value_and_gradient(bound_in_branch, (np.array([0.5, 0.25]),), 0, **kw)
    with pytest.raises(UnboundLocalError, match="'y'"):
        funcgrad.value_and_grad(bound_in_branch, **kw)(np.array([-0.5, 0.25]))


def test_no_flag_where_every_path_binds_the_name():
    src = funcgrad.source(funcgrad.value_and_grad(bound_everywhere, jit="njit"), 0.7, 3)
    assert "_def_" not in src and "UnboundLocalError" not in src, src
    src = funcgrad.source(funcgrad.value_and_grad(bound_in_loop, jit="njit"), 0.7, 3)
    assert "UnboundLocalError" in src, src


def test_container_read_before_the_iteration_binds_it_is_refused_at_the_users_line():
    def f(x, n):
        s = 0.0
        for i in range(n):
            if i > 0:
                s = s + d["a"]
            d = {}
            d["a"] = x * (i + 1.0)
        return s

    with pytest.raises(UnsupportedSyntaxError, match="previous iteration") as e:
        funcgrad.grad(f)(0.7, 3)
    assert 's = s + d["a"]' in (e.value.text or "")
