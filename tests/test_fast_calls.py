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


# ------------------------------------------------------------------------------ containers of arrays (pytrees)
def tree_loss(params, x):
    (W1, b1), rest = params[0], params[1]
    h = np.tanh(x @ W1 + b1)
    return np.sum(h * rest["w"]) + rest["c"] * np.sum(x ** 2)


def _tree_args(rng, n=3, d=4, dtype=np.float64, c=0.5):
    params = [(rng.standard_normal((d, n)).astype(dtype), rng.standard_normal(n).astype(dtype)),
              {"w": rng.standard_normal(n).astype(dtype), "c": c}]
    return params, rng.standard_normal((5, d)).astype(dtype)


def _tree_grad_ref(params, x, eps=1e-6):
    """Central differences of tree_loss in every leaf of params."""
    leaves, td = funcgrad.tree_flatten(params)
    out = []
    for k, leaf in enumerate(leaves):
        if isinstance(leaf, float):
            up = list(leaves); up[k] = leaf + eps
            dn = list(leaves); dn[k] = leaf - eps
            out.append((tree_loss(funcgrad.tree_unflatten(td, up), x) -
                        tree_loss(funcgrad.tree_unflatten(td, dn), x)) / (2 * eps))
            continue
        g = np.zeros_like(leaf, dtype=np.float64)
        for i in np.ndindex(leaf.shape):
            up = [l.copy() if isinstance(l, np.ndarray) else l for l in leaves]
            dn = [l.copy() if isinstance(l, np.ndarray) else l for l in leaves]
            up[k][i] += eps
            dn[k][i] -= eps
            g[i] = (tree_loss(funcgrad.tree_unflatten(td, up), x) - tree_loss(funcgrad.tree_unflatten(td, dn), x)) / (2 * eps)
        out.append(g)
    return funcgrad.tree_unflatten(td, out)


@pytest.mark.parametrize("kw", MODES, ids=lambda k: str(k["jit"]))
def test_repeated_calls_with_containers_of_arrays_are_right(kw):
    rng = np.random.default_rng(4)
    vg = funcgrad.value_and_grad(tree_loss, **kw)
    calls = [_tree_args(rng), _tree_args(rng), _tree_args(rng, c=-2.0),   # the same signature: the fast path
             _tree_args(rng, n=2),                                         # another shape
             _tree_args(rng, dtype=np.float32),                           # another dtype
             _tree_args(rng)]
    for params, x in calls:
        v, g = vg(params, x)
        np.testing.assert_allclose(v, tree_loss(params, x), rtol=1e-5 if x.dtype == np.float32 else 1e-12)
        ref = _tree_grad_ref(params, x) if x.dtype == np.float64 else None   # (float32: dtypes and shapes)
        assert type(g) is list and type(g[0]) is tuple and type(g[1]) is dict and sorted(g[1]) == ["c", "w"]
        assert g[0][0].dtype == x.dtype and g[0][0].shape == params[0][0].shape and type(g[1]["c"]) is float
        if ref is not None:
            np.testing.assert_allclose(g[0][0], ref[0][0], rtol=1e-6, atol=1e-8)
            np.testing.assert_allclose(g[0][1], ref[0][1], rtol=1e-6, atol=1e-8)
            np.testing.assert_allclose(g[1]["w"], ref[1]["w"], rtol=1e-6, atol=1e-8)
            np.testing.assert_allclose(g[1]["c"], ref[1]["c"], rtol=1e-6, atol=1e-8)
    assert vg._fast   # (the repeated calls took the fast path)


def summed(xs, axis):
    return np.sum(np.sum(xs[0] * xs[1], axis=axis) ** 2)


@pytest.mark.parametrize("kw", MODES, ids=lambda k: str(k["jit"]))
def test_an_int_or_bool_leaf_that_selects_code_is_seen_on_repeated_calls(kw):
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    g = funcgrad.grad(summed, **kw)
    for axis in (0, 0, 1, 1, 0):   # an int used as an axis fixes code: never the plan of another value
        got = g((a, b), axis)
        s = np.sum(a * b, axis=axis, keepdims=True)
        np.testing.assert_allclose(got[0], 2 * s * b, rtol=1e-12)
        np.testing.assert_allclose(got[1], 2 * s * a, rtol=1e-12)

    def flagged(xs, neg):
        return np.sum(xs[0]) * (-1.0 if neg else 1.0)
    gf = funcgrad.grad(flagged, **kw)
    for neg in (False, False, True, True, False):
        np.testing.assert_allclose(gf([a, b], neg)[0], np.full((3, 4), -1.0 if neg else 1.0))


@pytest.mark.parametrize("kw", [dict(), dict(strategy="kernels")], ids=["whole", "kernels"])
def test_repeated_jit_calls_with_containers_are_right(kw):
    def step(p, g, lr):
        return {k: p[k] - lr * g[k] for k in p}, [np.sum(v) for v in g.values()]
    js = funcgrad.jit(step, **kw)
    rng = np.random.default_rng(6)
    for shape, lr in [((3,), 0.1), ((3,), 0.1), ((3,), 0.5), ((2, 2), 0.1), ((3,), 0.1)]:
        p = {"a": rng.standard_normal(shape), "b": rng.standard_normal(shape)}
        g = {"a": rng.standard_normal(shape), "b": rng.standard_normal(shape)}
        new, sums = js(p, g, lr)
        assert type(new) is dict and type(sums) is list
        for k in p:
            np.testing.assert_allclose(new[k], p[k] - lr * g[k], rtol=1e-12)
        np.testing.assert_allclose(sums, [np.sum(g["a"]), np.sum(g["b"])], rtol=1e-12)
    assert js._fast
