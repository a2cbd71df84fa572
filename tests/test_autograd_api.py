"""autograd's helper API under funcgrad's names: ``funcgrad.misc`` (flatten, flatten_func, the sgd/rmsprop/adam
optimizers) and ``funcgrad.autograd_api`` (make_vjp, make_jvp, make_hvp, hessian_vector_product,
tensor_jacobian_product, grad_named, grad_and_aux, multigrad_dict, make_ggnvp).

Oracles: hand-derived gradients and central differences of them in float64, a hand-written loop of
autograd's optimizer formulas, and autograd itself where it is installed."""
import collections
import inspect

import numpy as np
import pytest

import funcgrad
from funcgrad import UnsupportedSyntaxError
from funcgrad.misc import flatten
from funcgrad.misc.flatten import flatten_func
from funcgrad.misc.optimizers import adam, rmsprop, sgd
from funcgrad.test_util import check_grads

try:
    import autograd
    import autograd.numpy as anp
    from autograd.misc import flatten as ag_flatten
    from autograd.misc import optimizers as ag_opt
except ImportError:   # optional oracle
    autograd = None

needs_autograd = pytest.mark.skipif(autograd is None, reason="autograd not installed")
MODES = ["auto", "kernels", "whole", False]
RNG = np.random.default_rng(15)


def _fd(f, x, eps=1e-6):
    """Central differences of ``f`` (array -> array) at the array ``x``: shape ``f(x).shape + x.shape``."""
    x = np.asarray(x, dtype=float)
    cols = []
    for k in range(x.size):
        e = np.zeros(x.size)
        e[k] = eps
        e = e.reshape(x.shape)
        cols.append((np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * eps))
    out = np.stack(cols, axis=-1)
    return out.reshape(np.shape(f(x)) + x.shape)


# f(x, y) = sum(sin(x) * y**2) + sum(x**3) * y[0], and its gradients by hand
def f2(x, y):
    return np.sum(np.sin(x) * y ** 2) + np.sum(x ** 3) * y[0]


def df2_dx(x, y):
    return np.cos(x) * y ** 2 + 3 * x ** 2 * y[0]


def df2_dy(x, y):
    e0 = np.zeros_like(y)
    e0[0] = 1.0
    return 2 * np.sin(x) * y + np.sum(x ** 3) * e0


X = np.array([0.3, -0.7, 1.1])
Y = np.array([1.2, 0.5, -0.4])
V = np.array([0.2, 0.1, -0.3])


# ----------------------------------------------------------------------------- flatten outside transforms
PARAMS = {"w": np.arange(6.0).reshape(2, 3), "b": 2.5, "layers": [(np.ones(2), np.float64(3.0)), np.eye(2)]}


def test_flatten_orders_leaves_as_autograd_and_round_trips():
    flat, unflatten = flatten(PARAMS)
    # dicts by sorted key: b, layers, w; lists and tuples in order
    expected = np.concatenate([[2.5], np.ones(2), [3.0], np.eye(2).ravel(), np.arange(6.0)])
    np.testing.assert_array_equal(flat, expected)
    assert flat.dtype == np.float64 and flat.ndim == 1
    back = unflatten(flat * 2)
    assert set(back) == {"w", "b", "layers"} and isinstance(back["layers"], list)
    assert isinstance(back["layers"][0], tuple)
    np.testing.assert_array_equal(back["w"], PARAMS["w"] * 2)
    np.testing.assert_array_equal(back["layers"][1], np.eye(2) * 2)
    assert isinstance(back["b"], np.ndarray) and back["b"].shape == () and back["b"] == 5.0   # autograd: 0-d
    back["w"][0, 0] = 99.0   # pieces are copies, not views of the vector
    assert flat[-6] == 0.0


def test_flatten_edge_cases_and_errors():
    flat, unflatten = flatten([])
    assert flat.shape == (0,) and unflatten(flat) == []
    f32 = np.ones(2, dtype=np.float32)
    flat, unflatten = flatten((f32, 1.0))
    assert flat.dtype == np.float64
    assert unflatten(flat)[0].dtype == np.float32   # in a container a leaf keeps its floating dtype
    flat, unflatten = flatten(f32)
    assert unflatten(np.ones(2)).dtype == np.float64   # a lone leaf keeps the vector's
    z = np.array([1 + 2j, 3j])
    flat, unflatten = flatten({"z": z})
    np.testing.assert_array_equal(unflatten(flat)["z"], z)
    with pytest.raises(ValueError, match="expected a 1-D array of 14 values"):
        flatten(PARAMS)[1](np.ones(3))
    with pytest.raises(TypeError, match="leaf of type str is not a number"):
        flatten({"a": np.ones(2), "name": "relu"})


@needs_autograd
def test_flatten_matches_autograd():
    value = {"b": 2.0, "a": np.ones((2, 2)), "c": [np.float32(1.5), (3.0, np.arange(3.0))], "d": np.array(5.0)}
    flat, unflatten = flatten(value)
    ag_flat, ag_unflatten = ag_flatten(value)
    np.testing.assert_array_equal(flat, ag_flat)
    v = RNG.standard_normal(flat.size)
    ours, theirs = unflatten(v), ag_unflatten(v)
    for got, want in zip(funcgrad.tree_leaves(ours), funcgrad.tree_leaves(theirs)):
        assert type(got) is type(want) and got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    assert funcgrad.tree_structure(ours) == funcgrad.tree_structure(theirs)


# ----------------------------------------------------------------------------- flatten inside transforms
def l2_of_params(params):
    flat, _ = flatten(params)
    return np.dot(flat, flat) + np.sum(np.sin(flat))


def _l2_grad_by_hand(params):
    return funcgrad.tree_map(lambda p: 2 * np.asarray(p) + np.cos(p), params)


@pytest.mark.parametrize("jit", MODES)
def test_flatten_inside_grad_every_mode(jit):
    params = [(RNG.standard_normal((2, 3)), RNG.standard_normal(3)), (RNG.standard_normal((3, 1)), 0.7)]
    g = funcgrad.grad(l2_of_params, jit=jit)(params)
    want = _l2_grad_by_hand(params)
    assert funcgrad.tree_structure(g) == funcgrad.tree_structure(params)
    for a, b in zip(funcgrad.tree_leaves(g), funcgrad.tree_leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    assert abs(l2_of_params(params) - sum(np.sum(np.asarray(p) ** 2 + np.sin(p))
                                          for p in funcgrad.tree_leaves(params))) < 1e-12


def rescale_through_unflatten(p):
    flat, unflatten = flatten(p)
    q = unflatten(flat * 3.0)           # the unflatten of a flatten made here: sizes read at run time
    return np.sum(q["a"] ** 2) + q["s"] ** 3


@pytest.mark.parametrize("jit", MODES)
def test_unflatten_of_an_inside_flatten(jit):
    p = {"a": np.array([[0.5, -1.0], [2.0, 0.25]]), "s": 0.4}
    g = funcgrad.grad(rescale_through_unflatten, jit=jit)(p)
    np.testing.assert_allclose(g["a"], 18 * p["a"], rtol=1e-13)     # d/da sum((3a)^2) = 18 a
    np.testing.assert_allclose(g["s"], 81 * p["s"] ** 2, rtol=1e-13)  # d/ds (3s)^3 = 81 s^2


def _objective(p, scale):
    return {"fit": np.sum((p["w"] @ np.array([1.0, -2.0])) ** 2) * scale, "reg": np.tanh(p["b"])}


EXAMPLE = {"w": np.array([[0.3, 0.2], [-0.5, 1.5]]), "b": 0.35}


@pytest.mark.parametrize("jit", MODES)
def test_flatten_func_jacobian_every_mode(jit):
    flat_f, unflatten, x0 = flatten_func(_objective, EXAMPLE)
    assert x0.shape == (5,)
    out = flat_f(x0, 2.0)
    np.testing.assert_allclose(out, flatten(_objective(EXAMPLE, 2.0))[0])
    jac = funcgrad.jacobian(flat_f, jit=jit)(x0, 2.0)
    np.testing.assert_allclose(jac, _fd(lambda v: flat_f(v, 2.0), x0), rtol=1e-7, atol=1e-8)


def test_flatten_func_gradient_and_hvp_as_gmm_uses_them():
    """gmm.py's pattern: scipy's jac=grad(flat_obj), hessp=hessian_vector_product(flat_obj)."""
    def objective(p):
        return np.sum(np.log1p(p["w"] ** 2)) + p["b"] ** 4 + np.sum(p["w"]) * p["b"]
    flat_obj, unflatten, x0 = flatten_func(objective, EXAMPLE)
    g = funcgrad.grad(flat_obj)(x0)
    np.testing.assert_allclose(g, _fd(flat_obj, x0)[0], rtol=1e-7, atol=1e-9)   # flat_obj(x) has shape (1,)
    v = RNG.standard_normal(x0.size)
    hv = funcgrad.hessian_vector_product(flat_obj)(x0, v)
    g_of = funcgrad.grad(flat_obj, jit=False)
    np.testing.assert_allclose(hv, _fd(g_of, x0) @ v, rtol=1e-6, atol=1e-8)
    t = funcgrad.jvp(flat_obj, (x0,), (v,))[1]
    np.testing.assert_allclose(t, [g @ v], rtol=1e-12)


def flatten_with_a_name(x):
    flat, _ = flatten({"x": x, "name": "relu"})
    return np.sum(flat)


def test_flatten_of_a_string_inside_is_refused_at_the_users_line():
    with pytest.raises(UnsupportedSyntaxError) as ei:
        funcgrad.grad(flatten_with_a_name)(np.ones(2))
    e = ei.value
    assert "leaf of type str is not a number" in str(e)
    assert e.filename == __file__
    assert e.lineno == inspect.getsourcelines(flatten_with_a_name)[1] + 1


# ----------------------------------------------------------------------------- optimizers
A = np.array([[3.0, 0.5], [0.5, 1.0]])


def _quad_grad(p, i):
    """The gradient of 0.5 x'Ax - c.x + 0.5 |y - 1|^2 * (1 + i / 10) for p = {'x': x, 'y': y} (by hand)."""
    return {"x": A @ p["x"] - np.array([1.0, -1.0]), "y": (p["y"] - 1.0) * (1 + i / 10)}


X0 = {"x": np.array([2.0, -3.0]), "y": 0.5}


def _ref(name, num_iters, **kw):
    """autograd's update formulas written out on the flat vector [x0, x1, y] (sorted keys: x, y)."""
    x = np.array([2.0, -3.0, 0.5])
    g_of = lambda x, i: np.concatenate([A @ x[:2] - np.array([1.0, -1.0]), [(x[2] - 1.0) * (1 + i / 10)]])  # noqa
    if name == "sgd":
        step, mass = kw.get("step_size", 0.1), kw.get("mass", 0.9)
        vel = np.zeros(3)
        for i in range(num_iters):
            vel = mass * vel - (1.0 - mass) * g_of(x, i)
            x = x + step * vel
    elif name == "rmsprop":
        step, gamma, eps = kw.get("step_size", 0.1), kw.get("gamma", 0.9), 1e-8
        avg = np.ones(3)
        for i in range(num_iters):
            g = g_of(x, i)
            avg = avg * gamma + g ** 2 * (1 - gamma)
            x = x - step * g / (np.sqrt(avg) + eps)
    else:
        step, b1, b2, eps = kw.get("step_size", 0.001), 0.9, 0.999, 1e-8
        m, v = np.zeros(3), np.zeros(3)
        for i in range(num_iters):
            g = g_of(x, i)
            m = (1 - b1) * g + b1 * m
            v = (1 - b2) * (g ** 2) + b2 * v
            x = x - step * (m / (1 - b1 ** (i + 1))) / (np.sqrt(v / (1 - b2 ** (i + 1))) + eps)
    return x


@pytest.mark.parametrize("opt,kw", [(sgd, {}), (sgd, {"step_size": 0.3, "mass": 0.5}), (rmsprop, {"step_size": 0.05}),
                                    (adam, {"step_size": 0.1})])
def test_optimizers_follow_autograds_formulas(opt, kw):
    seen = []
    out = opt(_quad_grad, X0, callback=lambda x, i, g: seen.append((x, i, g)), num_iters=30, **kw)
    ref = _ref(opt.__name__, 30, **kw)
    np.testing.assert_allclose(out["x"], ref[:2], rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(out["y"], ref[2], rtol=1e-14, atol=1e-15)
    assert [i for _, i, _ in seen] == list(range(30))
    x, i, g = seen[3]          # the callback gets x and g in x0's structure, before the update
    assert set(x) == {"x", "y"} and set(g) == {"x", "y"}
    np.testing.assert_allclose(g["x"], _quad_grad(x, 3)["x"])
    np.testing.assert_array_equal(seen[0][0]["x"], X0["x"])
    assert X0["x"][0] == 2.0   # x0 is not modified


def test_optimizers_have_autograds_signatures_and_converge():
    for opt, defaults in ((sgd, (200, 0.1, 0.9)), (rmsprop, (100, 0.1, 0.9, 1e-8)), (adam, (100, 0.001, 0.9, 0.999, 1e-8))):
        params = list(inspect.signature(opt).parameters.values())
        assert [p.name for p in params[:3]] == ["grad", "x", "callback"]
        assert tuple(p.default for p in params[3:]) == defaults
    out = adam(lambda p, i: _quad_grad(p, 0), X0, num_iters=2000, step_size=0.05)
    np.testing.assert_allclose(out["x"], np.linalg.solve(A, [1.0, -1.0]), atol=1e-6)
    np.testing.assert_allclose(out["y"], 1.0, atol=1e-6)


@needs_autograd
@pytest.mark.parametrize("name", ["sgd", "rmsprop", "adam"])
def test_optimizers_equal_autograds_bit_for_bit(name):
    x0 = [np.array([2.0, -3.0]), (np.array([[0.5]]), 0.25)]

    def grad(p, i):
        return [A @ p[0] - 1.0, (np.sin(p[1][0]) * (i + 1), p[1][1] ** 3)]

    ours = getattr(funcgrad.misc.optimizers, name)(grad, x0, num_iters=25, step_size=0.07)
    theirs = getattr(ag_opt, name)(grad, x0, num_iters=25, step_size=0.07)
    for a, b in zip(funcgrad.tree_leaves(ours), funcgrad.tree_leaves(theirs)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("jit", ["auto", False])
def test_adam_trains_with_funcgrad_grad(jit):
    """The examples' loop: grad(objective) of (params, iter) fed to adam with a pytree of parameters."""
    data_x = np.linspace(-1, 1, 20)
    data_y = 0.7 * data_x - 0.2

    def objective(params, i):
        pred = params["w"] * data_x + params["b"]
        return np.mean((pred - data_y) ** 2)

    out = adam(funcgrad.grad(objective, jit=jit), {"w": 0.0, "b": 0.0}, num_iters=1500, step_size=0.02)
    np.testing.assert_allclose([out["w"], out["b"]], [0.7, -0.2], atol=1e-4)


# ----------------------------------------------------------------------------- the differential operators
@pytest.mark.parametrize("jit", MODES)
def test_hessian_vector_product_every_mode(jit):
    hv = funcgrad.hessian_vector_product(f2, jit=jit)(X, Y, V)
    np.testing.assert_allclose(hv, _fd(lambda x: df2_dx(x, Y), X) @ V, rtol=1e-7, atol=1e-9)
    hv1 = funcgrad.hessian_tensor_product(f2, 1, jit=jit)(X, Y, V)
    np.testing.assert_allclose(hv1, _fd(lambda y: df2_dy(X, y), Y) @ V, rtol=1e-7, atol=1e-9)


def test_hessian_vector_product_keywords_and_refusals():
    def f(x, y, scale=1.0):
        return f2(x, y) * scale
    hv = funcgrad.hessian_vector_product(f)(X, Y, V, scale=3.0)
    np.testing.assert_allclose(hv, 3 * (_fd(lambda x: df2_dx(x, Y), X) @ V), rtol=1e-7, atol=1e-9)
    with pytest.raises(TypeError, match="must return one real value"):
        funcgrad.hessian_vector_product(lambda x: np.sin(x))(X, V)
    with pytest.raises(ValueError, match="must match"):
        funcgrad.hessian_vector_product(f2)(X, Y, V[:2])


@pytest.mark.parametrize("jit", ["auto", False])
def test_make_hvp_returns_hvp_and_gradient(jit):
    hvp_fn, g = funcgrad.make_hvp(f2, jit=jit)(X, Y)
    np.testing.assert_allclose(g, df2_dx(X, Y), rtol=1e-13)
    H = _fd(lambda x: df2_dx(x, Y), X)
    for v in (V, np.eye(3)[1]):
        np.testing.assert_allclose(hvp_fn(v), H @ v, rtol=1e-7, atol=1e-9)
    hvp_y, gy = funcgrad.make_hvp(f2, 1, jit=jit)(X, Y)
    np.testing.assert_allclose(gy, df2_dy(X, Y), rtol=1e-13)
    np.testing.assert_allclose(hvp_y(V), _fd(lambda y: df2_dy(X, y), Y) @ V, rtol=1e-7, atol=1e-9)


def F(x, y):
    return np.outer(np.sin(x), y) * 2.0 + x[0] * y


def _jac_F_x(x, y):
    return _fd(lambda x_: F(x_, y), x)


@pytest.mark.parametrize("jit", ["auto", "kernels", False])   # whole: funcgrad.vjp's own tests (12 s of compiling)
def test_make_vjp_order_and_values(jit):
    vjp_fn, ans = funcgrad.make_vjp(F, jit=jit)(X, Y)
    np.testing.assert_allclose(ans, F(X, Y), rtol=1e-14)
    G = RNG.standard_normal((3, 3))
    np.testing.assert_allclose(vjp_fn(G), np.einsum("ij,ijk->k", G, _jac_F_x(X, Y)), rtol=1e-7, atol=1e-9)
    vjp2, _ = funcgrad.make_vjp(F, (0, 1), jit=jit)(X, Y)
    gx, gy = vjp2(G)
    np.testing.assert_allclose(gy, np.einsum("ij,ijk->k", G, _fd(lambda y: F(X, y), Y)), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(gx, vjp_fn(G), rtol=1e-14)


@pytest.mark.parametrize("jit", ["auto", "whole", False])
def test_make_jvp(jit):
    jvp_fn = funcgrad.make_jvp(F, jit=jit)(X, Y)
    ans, t = jvp_fn(V)
    np.testing.assert_allclose(ans, F(X, Y), rtol=1e-14)
    np.testing.assert_allclose(t, _jac_F_x(X, Y) @ V, rtol=1e-7, atol=1e-9)
    _, t2 = funcgrad.make_jvp(F, (0, 1), jit=jit)(X, Y)((V, -V))
    np.testing.assert_allclose(t2, _jac_F_x(X, Y) @ V - _fd(lambda y: F(X, y), Y) @ V, rtol=1e-7, atol=1e-9)


def test_tensor_jacobian_product():
    J = _jac_F_x(X, Y)    # (3, 3, 3): out x in
    W = RNG.standard_normal((3, 3))
    np.testing.assert_allclose(funcgrad.vector_jacobian_product(F)(X, Y, W), np.einsum("ij,ijk->k", W, J),
                               rtol=1e-7, atol=1e-9)
    # a vector over the output's first axis: the Jacobian of tensordot(v, F, 1), shape (3,) + x.shape
    np.testing.assert_allclose(funcgrad.tensor_jacobian_product(F)(X, Y, V), np.einsum("i,ijk->jk", V, J),
                               rtol=1e-7, atol=1e-9)
    with pytest.raises(ValueError, match="not the leading part"):
        funcgrad.tensor_jacobian_product(F)(X, Y, np.ones(4))


def test_grad_named_and_grad_and_aux():
    np.testing.assert_allclose(funcgrad.grad_named(f2, "y")(X, Y), df2_dy(X, Y), rtol=1e-13)
    with pytest.raises(ValueError, match="no positional parameter named 'z'"):
        funcgrad.grad_named(f2, "z")

    def with_aux(x, y):
        return f2(x, y), {"peak": np.max(x), "n": 3}
    g, aux = funcgrad.grad_and_aux(with_aux)(X, Y)
    np.testing.assert_allclose(g, df2_dx(X, Y), rtol=1e-13)
    assert aux["n"] == 3 and aux["peak"] == 1.1
    (gx, gy), _ = funcgrad.grad_and_aux(with_aux, (0, 1))(X, Y)
    np.testing.assert_allclose(gy, df2_dy(X, Y), rtol=1e-13)


def multi(a, b=2.0, *rest, c=1.5, **kw):
    return np.sum(np.sin(a)) * b * c + rest[0] * rest[1] ** 2 + kw["z"] ** 2


def test_multigrad_dict():
    a = np.array([0.2, -0.4])
    out = funcgrad.multigrad_dict(multi)(a, 3.0, 1.5, 2.0, z=4.0)
    assert isinstance(out, collections.OrderedDict) and list(out) == ["a", "b", "rest", "c", "kw"]
    np.testing.assert_allclose(out["a"], np.cos(a) * 3.0 * 1.5, rtol=1e-14)
    np.testing.assert_allclose(out["b"], np.sum(np.sin(a)) * 1.5, rtol=1e-14)
    np.testing.assert_allclose(out["rest"], (4.0, 2 * 1.5 * 2.0), rtol=1e-14)
    np.testing.assert_allclose(out["c"], np.sum(np.sin(a)) * 3.0, rtol=1e-14)
    assert out["kw"] == {"z": 8.0}
    out = funcgrad.multigrad_dict(f2)(X, Y)
    np.testing.assert_allclose(out["x"], df2_dx(X, Y), rtol=1e-13)
    np.testing.assert_allclose(out["y"], df2_dy(X, Y), rtol=1e-13)


def mlp_out(w, x):
    return np.tanh(x @ w)


def test_make_ggnvp():
    w = RNG.standard_normal((3, 2))
    xb = RNG.standard_normal(3)
    v = RNG.standard_normal((3, 2))
    J = _fd(lambda w_: mlp_out(w_, xb), w).reshape(2, 6)
    got = funcgrad.make_ggnvp(mlp_out)(w, xb)(v)
    np.testing.assert_allclose(got.reshape(-1), J.T @ (J @ v.reshape(-1)), rtol=1e-6, atol=1e-9)  # H_g = I

    def g(y):
        return np.sum(np.exp(y))      # H_g = diag(exp(y))
    got = funcgrad.make_ggnvp(mlp_out, g)(w, xb)(v)
    Hg = np.diag(np.exp(mlp_out(w, xb)))
    np.testing.assert_allclose(got.reshape(-1), J.T @ Hg @ (J @ v.reshape(-1)), rtol=1e-6, atol=1e-9)


@needs_autograd
def test_operators_match_autograd():
    def af2(x, y):
        return anp.sum(anp.sin(x) * y ** 2) + anp.sum(x ** 3) * y[0]

    def aF(x, y):
        return anp.outer(anp.sin(x), y) * 2.0 + x[0] * y
    np.testing.assert_allclose(funcgrad.hessian_vector_product(f2)(X, Y, V),
                               autograd.hessian_vector_product(af2)(X, Y, V), rtol=1e-12)
    h, g = funcgrad.make_hvp(f2, 1)(X, Y)
    ah, ag = autograd.make_hvp(af2, 1)(X, Y)
    np.testing.assert_allclose(h(V), ah(V), rtol=1e-12)
    np.testing.assert_allclose(g, ag, rtol=1e-12)
    vj, ans = funcgrad.make_vjp(F, (0, 1))(X, Y)
    avj, aans = autograd.make_vjp(aF, (0, 1))(X, Y)
    W = RNG.standard_normal((3, 3))
    for a, b in zip(vj(W), avj(W)):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    np.testing.assert_allclose(funcgrad.make_jvp(F)(X, Y)(V)[1], autograd.make_jvp(aF)(X, Y)(V)[1], rtol=1e-12)
    np.testing.assert_allclose(funcgrad.tensor_jacobian_product(F)(X, Y, V),
                               autograd.tensor_jacobian_product(aF)(X, Y, V), rtol=1e-12)
    w, xb, v = RNG.standard_normal((3, 2)), RNG.standard_normal(3), RNG.standard_normal((3, 2))
    np.testing.assert_allclose(funcgrad.make_ggnvp(mlp_out)(w, xb)(v),
                               autograd.make_ggnvp(lambda w, x: anp.tanh(anp.dot(x, w)))(w, xb)(v), rtol=1e-12)


def hvp_inside(x):
    return np.sum(funcgrad.hessian_vector_product(f2)(x, Y, V))


def test_operators_inside_a_transform_are_refused_at_the_users_line():
    with pytest.raises(UnsupportedSyntaxError) as ei:
        funcgrad.grad(hvp_inside)(X)
    assert "hessian_tensor_product inside a transformed function" in str(ei.value)
    assert ei.value.filename == __file__
    assert ei.value.lineno == inspect.getsourcelines(hvp_inside)[1] + 1


def test_exported_under_autograds_names():
    for name in ("make_vjp", "make_jvp", "make_hvp", "hessian_tensor_product", "hessian_vector_product",
                 "tensor_jacobian_product", "vector_jacobian_product", "grad_named", "grad_and_aux",
                 "multigrad_dict", "make_ggnvp"):
        assert callable(getattr(funcgrad, name))
    assert funcgrad.hessian_vector_product is funcgrad.hessian_tensor_product
    assert funcgrad.misc.flatten is flatten


# ----------------------------------------------------------------------------- funcgrad.misc.fixed_points
from funcgrad.misc.fixed_points import fixed_point  # noqa: E402


def _descent_iter(a):
    return lambda x: x - 0.05 * (x ** 2 - a)


def _newton_iter(a):
    return lambda x: 0.5 * (x + a / x)


def _dist(x, y):
    return np.abs(x - y)


def _maxdist(x, y):
    return np.max(np.abs(x - y))


def _sqrt_by(it, tol):
    def f(a, guess=10.0):
        return fixed_point(it, a, guess, _dist, tol)
    return f


@pytest.mark.parametrize("it", [_descent_iter, _newton_iter], ids=["descent", "newton"])
def test_fixed_point_value_and_implicit_derivative(it):
    """The derivative of the fixed point is the implicit one (1 / (2 sqrt(a)) for sqrt), not the iterations'."""
    f = _sqrt_by(it, 1e-12)
    assert f(2.0) == pytest.approx(np.sqrt(2.0), rel=1e-9)
    assert funcgrad.grad(f)(2.0) == pytest.approx(0.5 / np.sqrt(2.0), rel=1e-8)
    A = np.array([2.0, 3.0, 5.0])
    fa = lambda a: np.sum(fixed_point(it, a, np.full(3, 10.0), _maxdist, 1e-12) * A)  # noqa: E731
    np.testing.assert_allclose(funcgrad.grad(fa)(A), A * 0.5 / np.sqrt(A), rtol=1e-8)


def test_fixed_point_equals_autograds_bit_for_bit():
    ag = pytest.importorskip("autograd", reason="autograd (optional oracle) not installed")
    from autograd.misc.fixed_points import fixed_point as ag_fixed_point
    import autograd.numpy as anp
    f = _sqrt_by(_descent_iter, 1e-4)
    g = lambda a, guess=10.0: ag_fixed_point(_descent_iter, a, guess, lambda x, y: anp.abs(x - y), 1e-4)  # noqa: E731
    assert f(2.0) == g(2.0)
    assert funcgrad.grad(f)(2.0) == pytest.approx(ag.grad(g)(2.0), rel=1e-12)


@pytest.mark.parametrize("it", [_descent_iter, _newton_iter], ids=["descent", "newton"])
def test_fixed_point_second_derivative(it):
    """grad of grad (reverse over fixed_point's JVP rule), hessian and jacfwd of jacfwd (forward over it) are the
    implicit second derivative, -1 / (4 a^1.5) for sqrt; the same with jit=True (compiled kernels) as in Python."""
    f = _sqrt_by(it, 1e-12)
    want = -0.25 * 2.0 ** -1.5
    got = funcgrad.grad(funcgrad.grad(f))(2.0)
    assert got == pytest.approx(want, rel=1e-9)
    assert funcgrad.grad(funcgrad.grad(f, jit=False), jit=False)(2.0) == got
    g = lambda a: fixed_point(it, a, 10.0, _dist, 1e-12)  # noqa: E731
    assert funcgrad.hessian(g)(2.0) == pytest.approx(want, rel=1e-9)
    assert funcgrad.jacfwd(funcgrad.jacfwd(g))(2.0) == pytest.approx(want, rel=1e-9)


def test_fixed_point_second_order_of_arrays_against_central_differences():
    """Both modes to order 2 (jvp, the VJP of the VJP, the JVP of the JVP) against central differences, for an
    array parameter; the Hessian of a weighted sum is diagonal with entries -w / (4 a^1.5)."""
    A = np.array([2.0, 3.0, 5.0])
    g = lambda a: fixed_point(_descent_iter, a, np.full(3, 10.0), _maxdist, 1e-12)  # noqa: E731
    check_grads(g, modes=["fwd", "rev"], order=2)(A)
    H = funcgrad.hessian(lambda a: np.sum(g(a) * A))(A)
    np.testing.assert_allclose(H, np.diag(-0.25 * A * A ** -1.5), rtol=1e-8, atol=1e-12)


def test_fixed_point_second_derivative_in_a_pytree_parameter():
    def it(a):
        p, q = a
        return lambda x: x - 0.05 * (x ** 2 - p * q)

    f = lambda p, q: fixed_point(it, (p, q), 10.0, _dist, 1e-12)  # noqa: E731
    # d2/dp2 sqrt(p q) = -q^2 / (4 (p q)^1.5)
    assert funcgrad.grad(funcgrad.grad(f))(2.0, 1.5) == pytest.approx(-0.25 * 1.5 ** 2 * 3.0 ** -1.5, rel=1e-9)


def test_fixed_point_at_autograds_tolerance_equals_autograds_second_derivative():
    """autograd's fixed_points example: grad(grad(sqrt)) at tol 1e-4. The linear fixed points stop at the same
    tolerance as autograd's, so the value is the implicit derivative to about that (autograd's own value, where it
    is installed, to rounding: for a scalar the two orders of differentiation iterate the same sums)."""
    f = _sqrt_by(_descent_iter, 1e-4)
    got = funcgrad.grad(funcgrad.grad(f))(2.0)
    assert got == pytest.approx(-0.25 * 2.0 ** -1.5, rel=1e-2)
    if autograd is not None:
        from autograd.misc.fixed_points import fixed_point as ag_fixed_point
        g = lambda a, guess=10.0: ag_fixed_point(_descent_iter, a, guess, lambda x, y: anp.abs(x - y), 1e-4)  # noqa: E731
        assert got == pytest.approx(autograd.grad(autograd.grad(g))(2.0), rel=1e-12)


def test_third_derivative_through_fixed_point_is_refused_at_the_callers_line():
    f = _sqrt_by(_descent_iter, 1e-6)
    with pytest.raises(funcgrad.NoDerivativeError, match="third derivative through it is not supported") as ei:
        funcgrad.grad(funcgrad.grad(funcgrad.grad(f)))(2.0)
    assert __file__ in str(ei.value)
    with pytest.raises(funcgrad.NoDerivativeError, match="fixed_point") as ei:
        funcgrad.jacfwd(funcgrad.jacfwd(funcgrad.jacfwd(lambda a: fixed_point(_descent_iter, a, 10.0, _dist, 1e-6))))(2.0)
    assert __file__ in str(ei.value)
    with pytest.raises(funcgrad.FuncgradError) as ei:   # whole-function compiling: refused, naming fixed_point
        funcgrad.grad(funcgrad.grad(f, jit="whole"), jit="whole")(2.0)
    assert "'fixed_point'" in str(ei.value) and "_jvp" not in str(ei.value)


def _with_default(a, scale=10.0, *, shift=0.5):
    return np.sin(a) * scale + shift * a ** 3


def test_grad_of_grad_uses_defaults_and_keywords():
    """grad(grad(f)) of a function with default and keyword-only parameters (autograd's fixed_points example
    calls grad(grad(sqrt)) with sqrt(a, guess=10.0)); it stopped at "name 'scale' is not defined"."""
    gg = funcgrad.grad(funcgrad.grad(_with_default))
    assert gg(2.0) == pytest.approx(-np.sin(2.0) * 10.0 + 3.0 * 2.0, rel=1e-12)
    assert gg(2.0, 3.0) == pytest.approx(-np.sin(2.0) * 3.0 + 3.0 * 2.0, rel=1e-12)
    assert gg(2.0, shift=1.0) == pytest.approx(-np.sin(2.0) * 10.0 + 6.0 * 2.0, rel=1e-12)
    outer = funcgrad.grad(lambda a: gg(a) * a)      # inside a transform too
    eps = 1e-5
    assert outer(2.0) == pytest.approx((gg(2.0 + eps) * (2.0 + eps) - gg(2.0 - eps) * (2.0 - eps)) / (2 * eps),
                                       rel=1e-6)
