"""Builtins and idioms people write (reversed, .item(), np.float64(x), x[()], (x,) * 3, keyword-only helper
parameters, recursion of a constant depth): value and gradient in every mode against plain Python and
central differences; a recursion whose depth comes from an int argument specializes on it, one whose depth
depends on array values is refused at the user's line."""
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


def test_recursion_whose_depth_is_an_int_argument_specializes_on_it():
    for n in (3, 5):
        want, dwant = B.recursion_of_runtime_depth(X, n), _central(B.recursion_of_runtime_depth, X, (n,))
        v, g = funcgrad.value_and_grad(B.recursion_of_runtime_depth)(X, n)
        assert v == pytest.approx(want, rel=1e-12)
        np.testing.assert_allclose(g, dwant, rtol=1e-6, atol=1e-7)


def test_recursion_of_runtime_depth_is_refused_at_the_users_line():
    with pytest.raises(UnsupportedSyntaxError, match="recursion|nest more than") as e:
        funcgrad.grad(B.recursion_of_value_depth)(X)
    assert e.value.filename == B.__file__ and "_halve(v * 1.5, t * 0.5)" in (e.value.text or "")


def test_max_of_an_empty_sequence_and_of_an_array_with_default_are_refused_at_the_users_line():
    def empty(x):
        return max(()) + x[0]

    def array_default(x):
        return max(x * 2.0, default=0.0)

    with pytest.raises(UnsupportedSyntaxError, match="empty sequence") as e:
        funcgrad.grad(empty)(X)
    assert "max(()) + x[0]" in (e.value.text or "")
    with pytest.raises(UnsupportedSyntaxError, match="default=") as e:
        funcgrad.grad(array_default)(X)
    assert "max(x * 2.0, default=0.0)" in (e.value.text or "")


def take_with_a_list(w):
    return np.sum(np.take(w, [0, 2, 1]) * w[:3]) + np.sum(np.take(w, (3, 3, 0), axis=0) ** 2)


def test_take_with_a_list_of_indices():
    """np.take(w, [0, 2, 1]): the list is an index array (it reached the adjoint as a tuple: an IndexError)."""
    for jit in ("python", "njit", False):
        v, g = funcgrad.value_and_grad(take_with_a_list, jit=jit)(X.copy())
        assert v == pytest.approx(take_with_a_list(X), rel=1e-12)
        np.testing.assert_allclose(g, _central(take_with_a_list, X, ()), rtol=1e-6, atol=1e-8)


def masked_updates(x, B):
    c = B.copy()
    c[c < 0.2] += x
    c[B > 0.4] *= x
    d = B * 1.0
    d[d < 0.0] = x * 2.0
    return np.sum(c * B) + np.sum(d[B > 0.0] ** 2)


def test_nd_boolean_masks_compile_whole():
    """c[c < t] += v on a 2-D array: right under whole-function njit too (Numba indexes with 1-D arrays only)."""
    B = np.array([[0.3, -0.2, 0.5], [0.1, 0.8, -0.6]])
    h = 1e-6
    dx = (masked_updates(0.37 + h, B) - masked_updates(0.37 - h, B)) / (2 * h)
    for jit in ("python", "njit", False):
        v, g = funcgrad.value_and_grad(masked_updates, jit=jit)(0.37, B)
        assert v == pytest.approx(masked_updates(0.37, B), rel=1e-12), jit
        assert g == pytest.approx(dx, rel=1e-6), jit


def negative_base_and_bool_counts(x, a, n):
    return (-2) ** n * x + (-2.5) ** 2 * x + np.sum(a > 0) * x + (a > 0).sum() * x + np.mean(a > 0) * x \
        + np.sum(np.sum((a > 0).reshape(2, 2), axis=0) * x)


def test_negative_base_and_boolean_counts():
    """(-2) ** n was printed as -2 ** n (a wrong value everywhere); under njit np.sum of a mask gave True, not
    the count (the accumulator kept the mask's dtype)."""
    a = np.array([0.3, -0.7, 0.45, 0.2])
    h = 1e-6
    for n in (2, 3):
        want = negative_base_and_bool_counts(0.37, a, n)
        dwant = (negative_base_and_bool_counts(0.37 + h, a, n) - negative_base_and_bool_counts(0.37 - h, a, n)) / (2 * h)
        for jit in ("python", "njit", False):
            v, g = funcgrad.value_and_grad(negative_base_and_bool_counts, jit=jit)(0.37, a, n)
            assert v == pytest.approx(want, rel=1e-12), (jit, n)
            assert g == pytest.approx(dwant, rel=1e-6), (jit, n)


def float_of_an_int_accumulator(x, n):
    s = 0                  # still the int 0 when the branch is not taken
    if n > 2:
        s = s + x
    return float(s)


def test_float_of_an_int_is_a_float():
    for n, want in ((2, (0.0, 0.0)), (5, (0.37, 1.0))):
        for jit in ("python", "njit", False):
            v, g = funcgrad.value_and_grad(float_of_an_int_accumulator, jit=jit)(0.37, n)
            assert (v, g) == pytest.approx(want) and isinstance(float(v), float), (jit, n)


def where_one_argument_and_int_means(x):
    X = x.reshape(2, 2)
    return np.sum(X[np.where(X[:, 0] > 0.2)]) + np.where(x > 0.5)[0].size * x[0] \
        + np.sum(x) * np.mean(np.arange(4)) + np.mean(np.arange(3, dtype=np.int32)) * x[1]


def test_where_of_a_condition_and_means_of_ints():
    """np.where(cond) is np.nonzero(cond) (was refused: a missing argument); under njit np.mean of ints is a
    float64 mean (it was truncated: 1 for 1.5)."""
    for jit in ("python", "njit", False):
        v, g = funcgrad.value_and_grad(where_one_argument_and_int_means, jit=jit)(X.copy())
        assert v == pytest.approx(where_one_argument_and_int_means(X), rel=1e-12), jit
        np.testing.assert_allclose(g, _central(where_one_argument_and_int_means, X, ()), rtol=1e-6, atol=1e-8)


def float_of_a_float32(x):
    return float(np.float32(0.5)) * x + float(np.float32(x))


def test_float_of_a_float32_is_a_float64():
    for jit in ("python", "njit", False):
        v, g = funcgrad.value_and_grad(float_of_a_float32, jit=jit)(0.123456789)
        assert v == float_of_a_float32(0.123456789) and np.asarray(v).dtype == np.float64, jit
        assert g == pytest.approx(1.5, rel=1e-6), jit
