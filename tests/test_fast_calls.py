"""Repeated calls of grad/value_and_grad/jvp take a fast path once a signature has been seen: it must see
everything the general path sees (rebound globals and closure values, changed dtypes, shapes and tangent
types, outputs that change type), in every mode."""
import numpy as np
import pytest

import funcgrad

MODES = [dict(jit="auto"), dict(jit="whole"), dict(jit="kernels"), dict(jit=False)]

SCALE = 2.0
W = np.array([1.0, 2.0, 3.0])


def uses_globals(x):
    return SCALE * np.sum(W * x * x)


@pytest.mark.parametrize("kw", MODES, ids=lambda k: str(k["jit"]))
def test_rebound_globals_are_seen_on_repeated_calls(kw):
    global SCALE, W
    x = np.array([0.5, -1.0, 2.0])
    g = funcgrad.grad(uses_globals, **kw)
    try:
        for scale, w in [(2.0, np.array([1.0, 2.0, 3.0])), (2.0, np.array([1.0, 2.0, 3.0])),
                         (-1.5, np.array([1.0, 2.0, 3.0])), (-1.5, np.array([0.5, 0.0, 4.0])),
                         (3.0, np.array([1.0, 1.0]))]:
            SCALE, W = scale, w
            xx = x[:len(w)]
            np.testing.assert_allclose(g(xx), 2.0 * scale * w * xx, rtol=1e-12)
            v, t = funcgrad.jvp(uses_globals, (xx,), (np.ones_like(xx),), **kw)
            np.testing.assert_allclose(v, uses_globals(xx), rtol=1e-12)
            np.testing.assert_allclose(t, np.sum(2.0 * scale * w * xx), rtol=1e-12)
    finally:
        SCALE, W = 2.0, np.array([1.0, 2.0, 3.0])


def make_closure(c):
    def f(x):
        return np.sum(np.sin(c * x))
    return f


@pytest.mark.parametrize("kw", MODES, ids=lambda k: str(k["jit"]))
def test_dtypes_shapes_and_tangent_types_change_between_calls(kw):
    f = make_closure(0.7)
    g = funcgrad.value_and_grad(f, **kw)
    for x in [np.array([0.1, 0.2]), np.array([0.3, 0.4, 0.5]), np.array([0.3, 0.4], dtype=np.float32),
              np.array([[0.1, 0.2], [0.3, 0.4]]), np.array([0.1, 0.2])]:
        v, gr = g(x)
        assert gr.dtype == x.dtype and gr.shape == x.shape
        np.testing.assert_allclose(gr, 0.7 * np.cos(0.7 * x), rtol=1e-5 if x.dtype == np.float32 else 1e-12)
        np.testing.assert_allclose(v, f(x), rtol=1e-5)
    x = np.array([0.1, 0.2, 0.3])
    for t in [np.ones(3), np.ones(3, dtype=np.float32), np.ones(3)]:
        y, ty = funcgrad.jvp(f, (x,), (t,), **kw)
        assert isinstance(ty, float) or np.ndim(ty) == 0
        np.testing.assert_allclose(ty, np.sum(0.7 * np.cos(0.7 * x)), rtol=1e-6)
    with pytest.raises(ValueError, match="shape"):   # after the fast path was set up: still refused
        funcgrad.jvp(f, (x,), (np.ones(4),), **kw)


def float_or_array(x, k):
    return np.sum(x ** k)


@pytest.mark.parametrize("kw", MODES, ids=lambda k: str(k["jit"]))
def test_scalar_arguments_and_a_float_output_type(kw):
    g = funcgrad.grad(lambda a, b: a * a * b, argnums=(0, 1), **kw)
    for a, b in [(1.5, 2.0), (1.5, 2.0), (-0.5, 3.0)]:
        ga, gb = g(a, b)
        assert type(ga) is float and type(gb) is float
        assert ga == pytest.approx(2 * a * b) and gb == pytest.approx(a * a)
    # an int argument is a constant of the signature: a new value is a new specialization, never a stale one
    gk = funcgrad.grad(float_or_array, **kw)
    x = np.array([0.5, 1.5])
    for k in (2, 3, 2):
        np.testing.assert_allclose(gk(x, k), k * x ** (k - 1), rtol=1e-12)


POWER = 2
ACT = np.sin
OFFSET = 0.5


def uses_fixed_globals(x):
    return np.sum(ACT(x) ** POWER + OFFSET * x)


@pytest.mark.parametrize("kw", MODES, ids=lambda k: str(k["jit"]))
def test_globals_fixed_into_the_code_or_changing_kind_are_seen(kw):
    # an int exponent and a function are fixed into the generated code; OFFSET turns from a float into an
    # array (a new signature for the captured value): each change must reach a repeated call
    global POWER, ACT, OFFSET
    x = np.array([0.3, -0.2, 0.9])
    g = funcgrad.grad(uses_fixed_globals, **kw)
    d = {np.sin: np.cos, np.cos: lambda v: -np.sin(v)}
    try:
        for power, act, off in [(2, np.sin, 0.5), (2, np.sin, 0.5), (3, np.sin, 0.5), (3, np.cos, 0.5),
                                (3, np.cos, np.array([1.0, 2.0, 3.0])), (2, np.sin, 0.5)]:
            POWER, ACT, OFFSET = power, act, off
            want = power * act(x) ** (power - 1) * d[act](x) + off
            np.testing.assert_allclose(g(x), want, rtol=1e-10)
            _, t = funcgrad.jvp(uses_fixed_globals, (x,), (np.ones(3),), **kw)
            np.testing.assert_allclose(t, np.sum(want), rtol=1e-10)
    finally:
        POWER, ACT, OFFSET = 2, np.sin, 0.5


def trip_loop(a, b, n):
    x = 0.1
    for _ in range(n):
        x = x + 0.01 * (a * x - b * x * x)
    return x


def sum_along(x, ax):
    return np.sum(np.sum(x, axis=ax) ** 2)


def _fd(f, args, i, h=1e-6):
    lo, hi = list(args), list(args)
    lo[i] -= h
    hi[i] += h
    return (f(*hi) - f(*lo)) / (2 * h)


@pytest.mark.parametrize("kw", MODES, ids=lambda k: str(k["jit"]))
def test_int_arguments_take_the_fast_path_only_where_they_are_run_time_values(kw):
    # a trip count is a run-time int: every n gives its own gradient through the same code
    g = funcgrad.value_and_grad(trip_loop, argnums=(0, 1), **kw)
    for n in [3, 50, 0, 7, 50]:
        v, (da, db) = g(1.5, 0.7, n)
        assert v == pytest.approx(trip_loop(1.5, 0.7, n), rel=1e-13)
        assert da == pytest.approx(_fd(trip_loop, (1.5, 0.7, n), 0), rel=1e-6, abs=1e-12)
        assert db == pytest.approx(_fd(trip_loop, (1.5, 0.7, n), 1), rel=1e-6, abs=1e-12)
    # an int the code uses as an axis is fixed into it: a new value must not reuse the other axis's code
    x = np.arange(6.0).reshape(2, 3)
    gs = funcgrad.grad(sum_along, **kw)
    for ax in [0, 1, 0, 1, 1]:
        expect = np.broadcast_to(2 * np.expand_dims(np.sum(x, axis=ax), ax), x.shape)
        np.testing.assert_allclose(gs(x, ax), expect, rtol=1e-13)
