"""Builtins and idioms people write (reversed, .item(), np.float64(x), x[()], (x,) * 3, keyword-only helper
parameters, recursion of a constant depth): value and gradient in every mode against plain Python and
central differences; a recursion whose depth is known only when it runs is refused at the user's line."""
import numpy as np
import pytest

import funcgrad
from funcgrad.errors import UnsupportedSyntaxError
from tests.fixtures import builtins_programs as B

X = np.array([0.3, 0.7, 1.1, 0.4])


def _central(f, x, rest, h=1e-6):
    return np.array([(f(x + h * e, *rest) - f(x - h * e, *rest)) / (2 * h) for e in np.eye(x.size)])


@pytest.mark.parametrize("fn,rest", B.PROGRAMS, ids=lambda v: getattr(v, "__name__", str(v)))
def test_idiom_value_and_gradient(fn, rest):
    want, dwant = fn(X.copy(), *rest), _central(fn, X, rest)
    for jit in ("python", "njit", False):
        v, g = funcgrad.value_and_grad(fn, jit=jit)(X.copy(), *rest)
        assert v == pytest.approx(want, rel=1e-12, abs=1e-14), jit
        np.testing.assert_allclose(g, dwant, rtol=1e-6, atol=1e-7, err_msg=str(jit))


def test_recursion_of_runtime_depth_is_refused_at_the_users_line():
    with pytest.raises(UnsupportedSyntaxError, match="recursion") as e:
        funcgrad.grad(B.recursion_of_runtime_depth)(X, 3)
    assert e.value.filename == B.__file__ and "_rec(v * 1.1 + 0.1, d - 1)" in (e.value.text or "")


def take_with_a_list(w):
    return np.sum(np.take(w, [0, 2, 1]) * w[:3]) + np.sum(np.take(w, (3, 3, 0), axis=0) ** 2)


def test_take_with_a_list_of_indices():
    """np.take(w, [0, 2, 1]): the list is an index array (it reached the adjoint as a tuple: an IndexError)."""
    for jit in ("python", "njit", False):
        v, g = funcgrad.value_and_grad(take_with_a_list, jit=jit)(X.copy())
        assert v == pytest.approx(take_with_a_list(X), rel=1e-12)
        np.testing.assert_allclose(g, _central(take_with_a_list, X, ()), rtol=1e-6, atol=1e-8)
