"""Python numbers are weak in compiled code too (NumPy 2's NEP 50, funcgrad.transform.weak).

``0.5 * h``, ``np.maximum(h, 0.0)`` and ``g / x.shape[0]`` of a float32 ``h`` are float32 in NumPy; Numba
alone makes them float64, so a float32 loop compiled whole changed dtype between iterations and was
refused (``jit="auto"`` then warned and ran it as Python). Each test compares the compiled gradient with
the Python modes' (values and dtypes) and, in float64, with central differences.
"""
import ast
import warnings

import numpy as np
import pytest

import funcgrad
from funcgrad.transform.weak import weak_names
from tests.support import assert_value_and_gradient

MODES = {"python": dict(mode="python"), "auto": dict(mode="auto"), "njit": dict(mode="njit")}


def rnn(W, h0, xs):
    h = h0
    for t in range(xs.shape[0]):
        h = np.tanh(h @ W + xs[t])
        h = 0.5 * h + np.maximum(h, 0.0) / xs.shape[1]
    return np.sum(h * h) / h.size


def scaled_loop(x, lr, n):
    s = x
    for i in range(n):
        s = s - lr * (s * s - 1.0) + i * 0.01
    return s


def scaled_loop_sum(x, lr, n):
    return np.sum(scaled_loop(x, lr, n))


def _args(dt):
    rng = np.random.default_rng(3)
    return (rng.standard_normal((6, 6)).astype(dt) * 0.3, rng.standard_normal((4, 6)).astype(dt),
            rng.standard_normal((5, 4, 6)).astype(dt))


@pytest.mark.parametrize("mode", ["auto", "njit"])
def test_float32_loop_compiles_whole_and_stays_float32(mode):
    args = _args(np.float32)
    want = funcgrad.grad(rnn, argnums=(0, 1), **MODES["python"])(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("error")            # auto used to warn and fall back to Python here
        got = funcgrad.grad(rnn, argnums=(0, 1), **MODES[mode])(*args)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)


def test_the_float64_gradient_equals_central_differences_compiled():
    assert_value_and_gradient(rnn, _args(np.float64), (0, 1), **MODES["njit"])


@pytest.mark.parametrize("lr", [0.1, np.float32(0.1)], ids=["python-float", "np.float32"])
def test_a_scalar_argument_promotes_as_numpy_says(lr):
    """A Python float argument is weak beside a float32 array, as in NumPy: the loop stays float32 and compiles
    whole, and value and gradient have the Python mode's dtype."""
    x = np.linspace(-1, 1, 7).astype(np.float32)
    want = scaled_loop(x, lr, 3)
    got = funcgrad.jit(scaled_loop, mode="njit")(x, lr, 3)
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6)
    want_g = funcgrad.grad(scaled_loop_sum, **MODES["python"])(x, lr, 3)
    got_g = funcgrad.grad(scaled_loop_sum, **MODES["njit"])(x, lr, 3)
    assert got_g.dtype == want_g.dtype
    np.testing.assert_allclose(got_g, want_g, rtol=1e-5)


def test_a_float64_numpy_scalar_is_not_weak():
    """np.float64(0.1) is a float subclass but NumPy promotes float32 arrays with it: the loop's array turns
    float64 after one step, which Numba cannot compile (refused at the loop), and "auto" runs it as Python
    with NumPy's float64 result."""
    x = np.linspace(-1, 1, 7).astype(np.float32)
    with pytest.raises(funcgrad.errors.CompileError, match="different types"):
        funcgrad.jit(scaled_loop, mode="njit")(x, np.float64(0.1), 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = funcgrad.jit(scaled_loop, mode="auto")(x, np.float64(0.1), 3)
    want = scaled_loop(x, np.float64(0.1), 3)
    assert got.dtype == want.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_weak_names_follow_every_binding():
    fdef = ast.parse("""
def f(x, lr, a):
    n = x.shape[0]
    m = len(a) * 2 + n
    c = 0.5
    s = 0.0
    for i in range(n):
        s = s + x[i]
        k = i + 1
    lr2 = lr * c
    c2 = a * c
    return s
""").body[0]
    assert weak_names(fdef, {"lr"}) == {"n", "m", "c", "i", "k", "lr", "lr2"}


def branch_on_threshold(x):
    s = 0.0 * x[0]
    for i in range(x.shape[0]):
        if x[i] > 0.1:
            s = s + x[i] * x[i]
        else:
            s = s - x[i]
    return s


def test_a_float32_value_is_compared_with_a_number_in_float32():
    """np.float32(0.1) > 0.1 is False in NumPy 2 (the number is weak: compared in float32); Numba alone compares
    in float64 (True), which took the other branch."""
    x = np.array([0.1, 0.3, -0.2], dtype=np.float32)
    want = funcgrad.grad(branch_on_threshold, **MODES["python"])(x)
    np.testing.assert_allclose(want, [-1.0, 0.6, -1.0], rtol=1e-6)  # 0.1 is not above 0.1
    got = funcgrad.grad(branch_on_threshold, **MODES["njit"])(x)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)


def where_in_loop(x):
    h = x
    for i in range(2):
        h = np.where(h > 0.0, h * h, 0.0) + np.where(h < 0.5, 1.0, h)
    return np.sum(h)


def test_where_with_a_number_branch_stays_float32():
    x = np.linspace(-1, 1, 9).astype(np.float32)
    want = funcgrad.grad(where_in_loop, **MODES["python"])(x)
    got = funcgrad.grad(where_in_loop, **MODES["njit"])(x)
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6)


def float64_state(w, b, xs):
    h = np.zeros(xs.shape[1])          # float64, as np.zeros makes it
    s = 0.0
    for t in range(xs.shape[0]):
        h = np.tanh(w @ xs[t] + h * b[0])
        s = s + np.sum(h) * b[1]
    return s


def test_float32_parameters_meeting_float64_state_keep_float32_cotangents():
    """w, b float32 and h float64: their cotangents are float64 contributions added to float32 accumulators in a
    loop; compiled, each is taken in float32 (as JAX keeps a cotangent in its primal's dtype) so the loop
    compiles whole; the gradient equals the Python mode's to float32 precision, in w's and b's dtype."""
    rng = np.random.default_rng(4)
    w = (rng.standard_normal((5, 5)) * 0.4).astype(np.float32)
    b = np.array([0.3, 1.5], dtype=np.float32)
    xs = rng.standard_normal((6, 5)).astype(np.float32)
    want = funcgrad.grad(float64_state, argnums=(0, 1), **MODES["python"])(w, b, xs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = funcgrad.grad(float64_state, argnums=(0, 1), **MODES["auto"])(w, b, xs)
    for g, wt in zip(got, want):
        assert g.dtype == wt.dtype == np.float32
        np.testing.assert_allclose(g, wt, rtol=1e-5, atol=1e-6)
