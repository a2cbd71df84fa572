"""What HIPS autograd's own test suite needs of funcgrad, each piece checked against central differences:
check_grads' second- and third-order maps (forward over forward and reverse over forward mode), operator
functions called as functions, NumPy keyword names, and NumPy calls on the rows of one array."""
import operator

import numpy as np
import pytest

import funcgrad
import funcgrad.testing as T
from funcgrad.errors import NoDerivativeError
from funcgrad import test_util

RNG = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def _seeded():
    np.random.seed(3)  # the curried check_grads draws its directions from np.random, as autograd's does


def _fd(f, x, dx, eps=1e-6):
    """The central difference of ``f`` at ``x`` along ``dx`` (pytrees of arrays and floats)."""
    plus = f(T._vs_add(x, T._vs_scale(dx, eps)))
    minus = f(T._vs_add(x, T._vs_scale(dx, -eps)))
    return T._vs_scale(T._vs_add(plus, T._vs_scale(minus, -1.0)), 1.0 / (2 * eps))


def _numeric_vjp(f, x, v, eps=1e-6):
    """``J(x)^T v`` by central differences, with autograd's convention for complex ``x``
    (``d/dRe - 1j d/dIm`` of ``Re(sum(v * f))``): no funcgrad involved."""
    x = np.asarray(x)
    out = np.zeros(x.shape, dtype=x.dtype)
    units = (1.0, 1j) if np.iscomplexobj(x) else (1.0,)
    for k in range(x.size):
        for u in units:
            e = np.zeros(x.shape, dtype=x.dtype)
            e.reshape(-1)[k] = u * eps
            d = np.real(np.sum(v * (f(x + e) - f(x - e)))) / (2 * eps)
            out.reshape(-1)[k] += d if u == 1.0 else -1j * d
    return out


def _close(a, b, tol=1e-5):
    for p, q in zip(funcgrad.tree.tree_flatten(a)[0], funcgrad.tree.tree_flatten(b)[0]):
        np.testing.assert_allclose(p, q, rtol=tol, atol=tol)


def _f_real(x):
    return np.sin(x) * np.sum(x ** 2) + np.exp(x[::-1])


def _f_complex(z):
    return np.sin(z) * np.sum(z * np.conj(z)) + np.abs(z) ** 2


# ----------------------------------------------------------------------------- second-order maps
@pytest.mark.parametrize("f, x", [(_f_real, RNG.normal(size=3)),
                                  (_f_complex, RNG.normal(size=3) + 1j * RNG.normal(size=3))],
                         ids=["real", "complex"])
def test_the_jvp_map_is_the_derivative_and_funcgrad_differentiates_it_again(f, x):
    g = T._jvp_map(f, x, "f")   # (x, v) -> J(x) v, a Python function around funcgrad's forward-mode code
    v = RNG.normal(size=3) + (1j * RNG.normal(size=3) if np.iscomplexobj(x) else 0)
    _close(g(x, v), _fd(f, x, v))
    # forward over forward and reverse over forward, against central differences of the map itself
    dx, dv = RNG.normal(size=3).astype(x.dtype), RNG.normal(size=3).astype(x.dtype)
    _, tangent = funcgrad.jvp(lambda xv: g(xv[0], xv[1]), ((x, v),), ((dx, dv),))
    _close(tangent, _fd(lambda xv: g(xv[0], xv[1]), (x, v), (dx, dv)))


@pytest.mark.parametrize("f, x", [(_f_real, RNG.normal(size=3)),
                                  (_f_complex, RNG.normal(size=3) + 1j * RNG.normal(size=3))],
                         ids=["real", "complex"])
def test_the_vjp_map_from_one_jvp_per_element_is_the_transposed_jacobian(f, x):
    h = T._vjp_map(f, x, "f")
    v = RNG.normal(size=3) + (1j * RNG.normal(size=3) if np.iscomplexobj(f(x)) else 0)
    _close(h(x, v), _numeric_vjp(f, x, v))
    _close(h(x, v), funcgrad.vjp(f, x)[1](v)[0])


@pytest.mark.parametrize("f, x", [(_f_real, RNG.normal(size=3)),
                                  (_f_complex, RNG.normal(size=3) + 1j * RNG.normal(size=3))],
                         ids=["real", "complex"])
def test_the_closed_form_derivatives_of_the_vjp_map(f, x):
    hm = T._VjpMap(f, x, "f")
    v = RNG.normal(size=3) + (1j * RNG.normal(size=3) if np.iscomplexobj(f(x)) else 0)
    h_numeric = lambda xv: _numeric_vjp(f, xv[0], xv[1])  # noqa: E731  J(x)^T v with no funcgrad at all
    dx = RNG.normal(size=3).astype(x.dtype)
    dv = RNG.normal(size=3).astype(v.dtype)
    value, tangent = hm.jvp_at((x, v), (dx, dv))
    _close(value, h_numeric((x, v)))
    _close(tangent, _fd(h_numeric, (x, v), (dx, dv), eps=1e-4), tol=1e-4)
    # the VJP of the map: <w, jvp> = <vjp(w), (dx, dv)> in the real pairing Re(sum(a * b))
    w = RNG.normal(size=3).astype(x.dtype)
    _, pull = hm.vjp_at((x, v))
    gx, gv = pull(w)
    lhs = np.real(np.sum(w * tangent))
    rhs = np.real(np.sum(gx * dx) + np.sum(gv * dv))
    assert abs(lhs - rhs) < 1e-8 * max(1.0, abs(lhs))


def test_order_2_and_3_checks_pass_right_derivatives_of_every_kind():
    test_util.check_grads(_f_real)(RNG.normal(size=3))
    test_util.check_grads(_f_complex)(RNG.normal(size=3) + 1j * RNG.normal(size=3))
    test_util.check_grads(np.dot, argnum=(0, 1), order=3)(RNG.normal(size=3), RNG.normal(size=3))
    test_util.check_grads(lambda p: (p["a"] * p["b"][0], {"s": np.sum(np.tanh(p["b"][1]))}))(
        {"a": RNG.normal(size=2), "b": (1.3, RNG.normal(size=2))})
    test_util.check_grads(np.gradient)(RNG.normal(size=(6, 5, 4)))  # 120 elements: one pass, not one per element


def test_order_2_reverse_check_catches_a_wrong_second_derivative(monkeypatch):
    test_util.check_grads(_f_real, modes=["rev"])(RNG.normal(size=3))
    right = T._VjpMap.a
    monkeypatch.setattr(T._VjpMap, "a", lambda self, x, t, c: T._vs_scale(right(self, x, t, c), 1.001))
    with pytest.raises(AssertionError, match="check of vjp_"):
        test_util.check_grads(_f_real, modes=["rev"])(RNG.normal(size=3))


def test_order_2_forward_check_catches_a_map_inconsistent_with_its_derivative(monkeypatch):
    right = T._jvp_map

    def off(f, x, name, tk=None):   # values whose derivative funcgrad is told to drop a 0.1% term of
        g = right(f, x, name, tk)
        env = {"_g": g, "_stop": funcgrad.stop_gradient}
        return T._lines_function("jvp_off", ["x", "v"], ["return _g(x, v) * (1.0 + 1e-3 * _stop(np.sum(x * x)))"],
                                 env)

    monkeypatch.setattr(T, "_jvp_map", off)
    with pytest.raises(AssertionError, match="check of jvp_off"):
        test_util.check_grads(_f_real, modes=["fwd"])(RNG.normal(size=3))


# ----------------------------------------------------------------------------- operators, keywords
@pytest.mark.parametrize("op", [operator.add, operator.sub, operator.mul, operator.truediv, operator.pow,
                                operator.mod])
@pytest.mark.parametrize("jit", [True, False])
def test_operator_functions_are_the_operators(op, jit):
    x, y = RNG.uniform(1.0, 2.0, size=3), RNG.uniform(0.5, 0.9, size=3)

    def f(a, b):
        return np.sum(op(a, b) ** 2)

    gx, gy = funcgrad.grad(f, argnums=(0, 1), jit=jit)(x, y)
    np.testing.assert_allclose(gx, [_fd(lambda a: f(a, y), x, e) for e in np.eye(3)], rtol=1e-6)
    np.testing.assert_allclose(gy, [_fd(lambda b: f(x, b), y, e) for e in np.eye(3)], rtol=1e-6)
    _, t = funcgrad.jvp(lambda a: op(a, y), (x,), (np.ones(3),), jit=jit)
    np.testing.assert_allclose(t, _fd(lambda a: op(a, y), x, np.ones(3)), rtol=1e-6)


def test_operator_neg_and_add_of_lists():
    def f(a):
        return operator.neg(a) * operator.add([2.0], [3.0])[1]

    assert funcgrad.grad(f)(0.4) == -3.0


def test_clip_takes_numpys_keyword_names():
    x = np.array([-0.5, 0.3, 0.7, 1.5])

    def f(x):
        return np.sum(np.clip(x, a_min=0.1, a_max=1.1) ** 2)

    np.testing.assert_allclose(funcgrad.grad(f)(x), [_fd(f, x, e) for e in np.eye(4)], atol=1e-8)


# ----------------------------------------------------------------------------- rows of one array
@pytest.mark.parametrize("fn", [np.vstack, np.hstack, np.column_stack])
@pytest.mark.parametrize("shape", [(2,), (2, 3), (2, 3, 4), (2, 3, 4, 2)])
@pytest.mark.parametrize("jit", [True, False])
def test_stacking_the_rows_of_one_array_is_numpys(fn, shape, jit):
    a = RNG.normal(size=shape)

    def f(x):
        return fn(x) * 1.0

    y, pull = funcgrad.vjp(f, a, jit=jit)
    np.testing.assert_array_equal(y, fn(a))
    c = RNG.normal(size=y.shape)
    (g,) = pull(c)
    want = np.array([np.sum(c * _fd(fn, a, e.reshape(shape))) for e in np.eye(a.size)]).reshape(shape)
    np.testing.assert_allclose(g, want, rtol=1e-6)
    y[...] = 0.0
    assert np.all(a != 0.0)  # a copy, as NumPy's


# ----------------------------------------------------------------------------- np.r_, np.c_
_C = RNG.normal(size=(3, 2))


def _r_mixed(x):
    return np.r_[x, _C, 2.0 * x]


def _r_scalars_and_range(x):
    return np.r_[x[0, 0], x[1], 1:4] * np.r_[x[2], x[0], 0.5, 1.0]


def _c_mixed(x):
    return np.c_[x, _C, x]


@pytest.mark.parametrize("f, shape", [(_r_mixed, (3, 2)), (_r_scalars_and_range, (3, 2)), (_c_mixed, (3, 2))])
@pytest.mark.parametrize("jit", [True, False])
def test_r_and_c_index_concatenation_is_numpys(f, shape, jit):
    x = RNG.normal(size=shape)
    y, pull = funcgrad.vjp(f, x, jit=jit)
    np.testing.assert_array_equal(y, f(x))
    c = RNG.normal(size=y.shape)
    (g,) = pull(c)
    want = np.array([np.sum(c * _fd(f, x, e.reshape(shape))) for e in np.eye(x.size)]).reshape(shape)
    np.testing.assert_allclose(g, want, rtol=1e-6)
    _, t = funcgrad.jvp(f, (x,), (np.ones(shape),), jit=jit)
    np.testing.assert_allclose(t, _fd(f, x, np.ones(shape)), rtol=1e-6)


def test_c_of_an_item_of_unknown_ndim_is_refused_at_the_users_line():
    def f(x):
        return np.c_[x[0] * 2.0, x[1]]

    with pytest.raises(funcgrad.errors.UnsupportedSyntaxError, match=r"np\.c_: the ndim") as info:
        funcgrad.grad(lambda x: np.sum(f(x)))(np.ones((2, 3)))
    assert "return np.c_[x[0] * 2.0, x[1]]" in str(info.value)


def test_grad_takes_autograds_argnum_keyword():
    def f(x, y):
        return np.sum(np.sin(x) * y ** 2)

    x, y = RNG.normal(size=3), RNG.normal(size=3)
    np.testing.assert_allclose(funcgrad.grad(f, argnum=1)(x, y), [_fd(lambda b: f(x, b), y, e) for e in np.eye(3)],
                               rtol=1e-6)
    v, g = funcgrad.value_and_grad(f, argnum=0)(x, y)
    np.testing.assert_allclose(g, [_fd(lambda a: f(a, y), x, e) for e in np.eye(3)], rtol=1e-6)
    with pytest.raises(TypeError, match="not both"):
        funcgrad.grad(f, 1, argnum=1)


def test_nested_lists_of_computed_values_passed_to_numpy_are_arrays():
    def f(a, b):   # autograd's test_simple_append_list_2D: lists of lists of floats as the arguments
        return np.sum(np.append(a, b, axis=0) ** 3)

    A = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    B = [[7.0, 8.0, 9.0]]
    ga, gb = funcgrad.grad(f, argnums=(0, 1))(A, B)
    assert isinstance(ga, list) and isinstance(ga[0], list)
    np.testing.assert_allclose(np.array(ga), 3 * np.array(A) ** 2)
    np.testing.assert_allclose(np.array(gb), 3 * np.array(B) ** 2)
    test_util.check_grads(np.append, argnum=(0, 1))(A, B, axis=0)


@pytest.mark.parametrize("subs, shapes", [("ij,jk->ik", [(2, 3), (3, 4)]), ("...ij,...jk->...ik", [(2, 2, 3), (2, 3, 4)]),
                                          ("ij,jk,kl->il", [(2, 3), (3, 2), (2, 2)]), ("ii->i", [(3, 3)])])
def test_einsum_is_twice_differentiable(subs, shapes):
    ops = [RNG.normal(size=s) for s in shapes]

    def f(*xs):
        return np.einsum(subs, *xs)

    test_util.check_grads(f, argnum=tuple(range(len(ops))))(*ops)   # forward and reverse, to second order
    if len(ops) == 2:   # the Hessian of <c, einsum(a, b)> in a and b, against central differences of the gradient
        c = RNG.normal(size=f(*ops).shape)
        loss = lambda a, b: np.sum(c * np.einsum(subs, a, b))  # noqa: E731
        da, db = RNG.normal(size=shapes[0]), RNG.normal(size=shapes[1])
        hx = funcgrad.hvp(loss, (ops[0], ops[1]), (da, db))
        ga = lambda ab: funcgrad.grad(loss, argnums=(0, 1))(*ab)  # noqa: E731
        _close(hx, _fd(ga, (ops[0], ops[1]), (da, db)))


# ----------------------------------------------------------------------------- captured ints as indices
_K = 1


def _pick(a, b):
    args = [a, b]
    args[_K] = args[_K] * 3.0   # a captured int indexing a list: autograd's symmetrize_matrix_arg(fun, argnum)
    return args[0] * args[1] ** 2


@pytest.mark.parametrize("jit", [True, False])
def test_a_captured_int_indexes_a_list_and_a_new_value_rebuilds(jit):
    global _K
    g = funcgrad.grad(_pick, argnums=(0, 1), jit=jit)
    try:
        for k in (1, 0):
            _K = k
            got = g(1.5, 2.0)
            want = [_fd(lambda a: _pick(a, 2.0), 1.5, 1.0), _fd(lambda b: _pick(1.5, b), 2.0, 1.0)]
            np.testing.assert_allclose(got, want, rtol=1e-7)
    finally:
        _K = 1


# ----------------------------------------------------------------------------- metadata of arguments
@pytest.mark.parametrize("jit", [True, False, "whole"])
def test_a_scalar_argument_has_the_metadata_of_a_0d_array(jit):
    def f(x):
        assert x.shape == () and x.ndim == 0 and x.size == 1 and x.dtype == np.float64
        return x ** 3

    assert funcgrad.grad(f, jit=jit)(1.5) == pytest.approx(_fd(f, 1.5, 1.0), rel=1e-8)


def test_ndim_of_an_argument_selects_code_when_transforming():
    def f(x):
        if x.ndim == 2:
            return np.sum(x @ x)
        return np.sum(x * x)

    a, v = RNG.normal(size=(2, 2)), RNG.normal(size=3)
    np.testing.assert_allclose(funcgrad.grad(f)(a), [[_fd(f, a, e.reshape(2, 2)) for e in np.eye(4)[k:k + 2]]
                                                     for k in (0, 2)], rtol=1e-6)
    np.testing.assert_allclose(funcgrad.grad(f)(v), 2 * v)


# ----------------------------------------------------------------------------- JVP helper kernels, second order
import funcgrad.kernels.cpu as K  # noqa: E402
from scipy.stats import dirichlet, multivariate_normal as mvn  # noqa: E402
from funcgrad.ops import second_order as SO  # noqa: E402


def _sym(a):
    return 0.5 * (a + np.swapaxes(a, -1, -2))


def _spd(a):
    s = _sym(a)
    return s @ np.swapaxes(s, -1, -2) + 3 * np.eye(a.shape[-1])


def _helper_cases():
    a3, t3 = RNG.normal(size=(2, 3, 3)), RNG.normal(size=(2, 3, 3))
    w = RNG.normal(size=(3, 5))
    yield "slogdet_jvp", (t3, _spd(a3)), {}
    yield "solve_like", (_spd(a3), RNG.normal(size=(2, 3)), np.ones(3)), {}
    yield "solve_like", (_spd(a3), RNG.normal(size=(2, 3, 2)), np.ones((3, 2))), {}
    yield "matmul_like", (a3, RNG.normal(size=(2, 3)), np.ones(3)), {}
    yield "solve_outer", (RNG.normal(size=(2, 3)), RNG.normal(size=(2, 3)), np.ones(3)), {}
    yield "pinv_jvp", (RNG.normal(size=(3, 5)), np.linalg.pinv(w), w), {}
    yield "cholesky_jvp", (t3, np.linalg.cholesky(_spd(a3))), {}
    yield "cholesky_jvp", (t3, np.linalg.cholesky(_spd(a3), upper=True)), {"upper": True}
    yield "eigh_jvp", (t3, K.eigh_packed(_sym(a3))), {}
    yield "eigh_jvp", (t3, K.eigh_packed(_sym(a3), "U")), {"UPLO": "U"}
    for shape in [(3, 5), (5, 3), (2, 4, 4)]:
        a = RNG.normal(size=shape)
        yield "svd_jvp", (RNG.normal(size=shape), K.svd_packed(a, False), a), {"full_matrices": False}
    x = RNG.normal(size=(4, 3, 2))
    for ord, axis in [(None, None), (3, 0), (np.inf, 1), ("fro", (0, 1)), ("nuc", (0, 2)), (2, (1, 2)), (-1, (0, 1))]:
        y = np.linalg.norm(x, ord, axis)
        yield "norm_jvp", (RNG.normal(size=x.shape), y, x, ord, axis), {}


@pytest.mark.parametrize("name, args, kwargs", list(_helper_cases()))
def test_each_second_order_definition_computes_its_kernels_value(name, args, kwargs):
    np.testing.assert_allclose(getattr(SO, name)(*args, **kwargs), getattr(K, name)(*args, **kwargs),
                               rtol=1e-9, atol=1e-11)


def _hvp_against_gradient_differences(loss, x):
    """funcgrad's Hessian-vector product (reverse over its generated forward code) against central
    differences of its first-order gradient (which the registry tests check against central differences)."""
    v = RNG.normal(size=x.shape)
    got = funcgrad.hvp(loss, (x,), (v,))
    want = _fd(funcgrad.grad(loss), x, v, eps=1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    _, second = funcgrad.forward_mode.jvp_of_jvp(loss, (x,), (v,), (v,), (0.0 * v,))   # forward over forward
    np.testing.assert_allclose(second[0], np.sum(got * v), rtol=1e-5, atol=1e-7)


_C3 = RNG.normal(size=(3, 3))


def _loss_solve(a):
    return np.sum(np.sin(np.linalg.solve(_spd_f(a), _C3[0])))


def _spd_f(a):
    s = 0.5 * (a + a.T)
    return s @ s.T + 3.0 * np.eye(3)


def _loss_slogdet(a):
    return np.linalg.slogdet(_spd_f(a))[1] ** 2


def _loss_cholesky(a):
    return np.sum(np.linalg.cholesky(_spd_f(a)) * _C3)


def _loss_eigh(a):
    w, v = np.linalg.eigh(0.5 * (a + a.T))
    return np.sum(w ** 3) + np.sum(v[:, 0] * _C3[0]) ** 2


def _loss_svd(a):
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return np.sum(s ** 3) + np.sum((u[:, 0] * vh[0, 0]) * _C3[:, 0]) ** 2


def _loss_pinv(a):
    return np.sum(np.linalg.pinv(a) * _C3)


def _loss_norms(a):
    return np.linalg.norm(a) ** 3 + np.linalg.norm(a, 3, axis=0)[1] + np.linalg.norm(a, "nuc") ** 2


@pytest.mark.parametrize("loss", [_loss_solve, _loss_slogdet, _loss_cholesky, _loss_eigh, _loss_svd, _loss_pinv,
                                  _loss_norms])
def test_linalg_second_derivatives_match_differences_of_the_gradient(loss):
    _hvp_against_gradient_differences(loss, RNG.normal(size=(3, 3)))


def test_svd_second_order_refuses_the_extra_singular_vectors_clearly():
    def f(a):
        return np.sum(np.linalg.svd(a)[0])   # full_matrices=True of a non-square matrix

    with pytest.raises((NoDerivativeError, ValueError), match="extra singular vectors"):
        funcgrad.hvp(f, (np.ones((3, 2)) + np.eye(3, 2),), (np.ones((3, 2)),))


def _stats_cases():
    a = RNG.normal(size=(3, 3))
    cov = a @ a.T + np.eye(3)
    mean = RNG.normal(size=3)
    for x in (RNG.normal(size=3), RNG.normal(size=(4, 3))):
        yield "mvn_logpdf_tangent", (RNG.normal(size=x.shape), x, mean, cov, False, "x")
        yield "mvn_logpdf_tangent", (RNG.normal(size=3), x, mean, cov, False, "mean")
        yield "mvn_logpdf_tangent", (RNG.normal(size=(3, 3)), x, mean, cov, False, "cov")
        yield "mvn_logpdf_tangent", (RNG.normal(size=3), x, mean, np.diag(cov), False, "cov")
    yield "mvn_entropy_tangent", (RNG.normal(size=(3, 3)), mean, cov)
    alpha = RNG.uniform(1.2, 3.0, size=4)
    w = RNG.uniform(0.5, 2.0, size=(4, 2))
    for x in ((w / w.sum(0)), (w / w.sum(0))[:-1], (w[:, 0] / w[:, 0].sum())):
        yield "dirichlet_logpdf_tangent", (RNG.normal(size=x.shape), x, alpha, "x")
        yield "dirichlet_logpdf_tangent", (RNG.normal(size=4), x, alpha, "alpha")


@pytest.mark.parametrize("name, args", list(_stats_cases()))
def test_each_stats_second_order_definition_computes_its_kernels_value(name, args):
    np.testing.assert_allclose(getattr(SO, name)(*args), getattr(K, name)(*args), rtol=1e-9, atol=1e-11)


def _mvn_loss(p):
    cov = p[3:].reshape(3, 3)
    cov = cov @ cov.T + np.eye(3)
    return np.sum(mvn.logpdf(_X43 * p[0], p[:3], cov)) + mvn.entropy(p[:3], cov)


def _dirichlet_loss(p):
    x = p[:3] ** 2
    return dirichlet.logpdf(x / sum(x), p[3:] ** 2 + 1.2)   # builtin sum of an array: its rows added


_X43 = RNG.normal(size=(4, 3))


@pytest.mark.parametrize("loss", [_mvn_loss, _dirichlet_loss])
def test_stats_second_derivatives_match_differences_of_the_gradient(loss):
    p = RNG.uniform(0.5, 1.5, size=12 if loss is _mvn_loss else 6)
    _hvp_against_gradient_differences(loss, p)


@pytest.mark.parametrize("jit", [True, False])
def test_builtin_sum_of_an_array_adds_its_rows(jit):
    def f(x):
        return np.sum(np.sin(sum(x, 1.5)) * sum(x[0]))

    x = RNG.normal(size=(3, 2))
    np.testing.assert_allclose(funcgrad.grad(f, jit=jit)(x),
                               np.array([_fd(f, x, e.reshape(3, 2)) for e in np.eye(6)]).reshape(3, 2), rtol=1e-6)


# ----------------------------------------------------------------------------- complex statistics
@pytest.mark.parametrize("fn", [np.var, np.std])
@pytest.mark.parametrize("axis, ddof", [(None, 0), (0, 1), (1, 0)])
def test_var_and_std_of_complex_values(fn, axis, ddof):
    z = RNG.normal(size=(3, 4)) + 1j * RNG.normal(size=(3, 4))
    f = lambda x: fn(x, axis=axis, ddof=ddof)  # noqa: E731
    c = RNG.normal(size=np.shape(f(z)))
    (g,) = funcgrad.vjp(f, z)[1](c)
    np.testing.assert_allclose(g, _numeric_vjp(f, z, c), rtol=1e-6, atol=1e-8)
    dz = RNG.normal(size=z.shape) + 1j * RNG.normal(size=z.shape)
    _, t = funcgrad.jvp(f, (z,), (dz,))
    assert not np.iscomplexobj(t)
    np.testing.assert_allclose(t, _fd(f, z, dz), rtol=1e-6, atol=1e-8)


# ----------------------------------------------------------------------------- small NumPy/SciPy additions
_NUM = 5


@pytest.mark.parametrize("num", [0, 1, 2, 5])
@pytest.mark.parametrize("endpoint", [True, False])
@pytest.mark.parametrize("jit", [True, False])
def test_linspace_of_differentiated_ends_is_numpys(num, endpoint, jit):
    global _NUM
    _NUM = num   # a captured int: read as a constant, as a literal would be

    def f(a, b):
        return np.linspace(a, b, _NUM, endpoint=endpoint)

    try:
        for a, b in [(1.2, 3.4), (np.array([1.0, 2.0]), np.array([3.0, -1.0]))]:
            y, pull = funcgrad.vjp(f, a, b, jit=jit)
            np.testing.assert_array_equal(y, np.linspace(a, b, num, endpoint=endpoint))
            c = RNG.normal(size=y.shape)
            ga, gb = pull(c)
            np.testing.assert_allclose(ga, [np.sum(c * _fd(lambda s: f(s, b), a, e)) for e in np.eye(np.size(a))]
                                       if np.ndim(a) else np.sum(c * _fd(lambda s: f(s, b), a, 1.0)), atol=1e-8)
            np.testing.assert_allclose(gb, [np.sum(c * _fd(lambda s: f(a, s), b, e)) for e in np.eye(np.size(b))]
                                       if np.ndim(b) else np.sum(c * _fd(lambda s: f(a, s), b, 1.0)), atol=1e-8)
    finally:
        _NUM = 5


def test_real_if_close_and_integer_casts():
    z = RNG.normal(size=3) + 1j * RNG.normal(size=3)
    test_util.check_grads(lambda x: np.real_if_close(x) * 2.0)(z)          # stays complex
    test_util.check_grads(lambda x: np.real_if_close(x) * 2.0)(RNG.normal(size=3))
    w = RNG.normal(size=(5, 4))
    w[:, -1] = [0.3, 2.4, 1.2, 1.5, 3.1]   # away from integers: the indices stay put under perturbation

    def f(w):
        idx = np.int64(w[:, -1])   # indices read from the data: no derivative through them
        return np.sum(w[:, :-1][idx] ** 2)

    g = funcgrad.grad(f)(w)
    np.testing.assert_allclose(g, np.array([_fd(f, w, e.reshape(5, 4)) for e in np.eye(20)]).reshape(5, 4),
                               atol=1e-6)


def test_einsum_with_a_zero_size_broadcast_axis():
    a, b = RNG.normal(size=(0, 2, 3)), RNG.normal(size=(1, 3, 4))
    y, pull = funcgrad.vjp(lambda p, q: np.einsum("...ij,...jk->...ik", p, q), a, b)
    assert y.shape == (0, 2, 4)
    ga, gb = pull(np.zeros((0, 2, 4)))
    assert ga.shape == a.shape and gb.shape == b.shape and not np.any(gb)


def test_betainc_is_differentiated_in_x():
    import scipy.special as sp
    a, b, x = np.array([1.5, 2.5]), np.array([2.0, 0.7]), np.array([0.3, 0.6])
    g = funcgrad.grad(lambda s: np.sum(sp.betainc(a, b, s) ** 2))(x)
    np.testing.assert_allclose(g, [_fd(lambda s: np.sum(sp.betainc(a, b, s) ** 2), x, e) for e in np.eye(2)],
                               rtol=1e-6)
    with pytest.raises(funcgrad.NoDerivativeError, match="differentiated in x only"):
        funcgrad.grad(lambda s: np.sum(sp.betainc(s, b, x)))(a)


# ----------------------------------------------------------------------------- non-numeric arguments
@pytest.mark.parametrize("reduction", [np.sum, np.prod, np.max, np.min])
def test_a_function_passed_as_an_argument_is_a_constant(reduction):
    base = np.abs(RNG.normal(size=5)) + 0.5

    def f(a, _r=reduction):   # the default is bound as an argument: a function leaf
        return _r(np.exp(a) * base)

    assert funcgrad.grad(f)(0.7) == pytest.approx(_fd(f, 0.7, 1.0), rel=1e-7)
    _, t = funcgrad.jvp(f, (0.7, reduction), (1.0, reduction))
    assert t == pytest.approx(_fd(f, 0.7, 1.0), rel=1e-7)


def test_types_as_arguments_and_isinstance_of_an_array_argument():
    def checker(ex, type_, truthval):
        assert isinstance(ex, type_) == truthval
        return 1.0 + 0.0 * np.sum(ex) if isinstance(ex, np.ndarray) else 1.0

    for type_, ex, truth in [(list, [[]], True), (np.ndarray, np.zeros(2), True), ((tuple, list), np.zeros(1), False),
                             ((tuple, list), (), True)]:
        g = funcgrad.grad(checker)(ex, type_, truth)
        if isinstance(ex, np.ndarray):
            np.testing.assert_array_equal(g, np.zeros_like(ex))

    def scale(x, kind):
        return np.sum(x * 2.0) if kind is np.ndarray else np.sum(x)

    np.testing.assert_allclose(funcgrad.grad(scale)(np.ones(3), np.ndarray), 2.0 * np.ones(3))
    np.testing.assert_allclose(funcgrad.grad(scale)(np.ones(3), list), np.ones(3))   # another object: rebuilt


# ----------------------------------------------------------------------------- complex norms
@pytest.mark.parametrize("ord, axis, shape", [(None, None, (5,)), (None, None, (3, 4)), (3, None, (5,)),
                                              (1, None, (5,)), (np.inf, None, (5,)), (None, 1, (3, 4)),
                                              ("fro", (0, 1), (3, 4)), ("nuc", None, (3, 4)), (2, None, (3, 4)),
                                              (1, None, (3, 4))])
@pytest.mark.parametrize("jit", [True, False])
def test_norm_of_complex_values_in_autograds_convention(ord, axis, shape, jit):
    z = RNG.normal(size=shape) + 1j * RNG.normal(size=shape)
    f = lambda x: np.linalg.norm(x, ord, axis)  # noqa: E731
    c = RNG.normal(size=np.shape(f(z)))
    (g,) = funcgrad.vjp(f, z, jit=jit)[1](c)
    np.testing.assert_allclose(g, _numeric_vjp(f, z, c), rtol=1e-6, atol=1e-8)
    dz = RNG.normal(size=shape) + 1j * RNG.normal(size=shape)
    _, t = funcgrad.jvp(f, (z,), (dz,), jit=jit)
    assert not np.iscomplexobj(t)
    np.testing.assert_allclose(t, _fd(f, z, dz), rtol=1e-6, atol=1e-8)


def test_norm_of_complex_values_to_second_order():
    z = RNG.normal(size=(3, 4)) + 1j * RNG.normal(size=(3, 4))
    for ord, axis in [(None, None), (3, 1), (np.inf, 0), ("fro", None)]:
        test_util.check_grads(lambda x: np.linalg.norm(x, ord, axis))(z)


@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (3, 3), (2, 2, 3)])
def test_svd_of_complex_matrices(shape):
    x = RNG.normal(size=shape) + 1j * RNG.normal(size=shape)
    k = min(shape[-2:])
    cu, cs, cv = RNG.normal(size=shape[:-1] + (k,)), RNG.normal(size=shape[:-2] + (k,)), RNG.normal(size=shape[:-2]
                                                                                                     + (k, shape[-1]))

    def f(a):   # |u| and |v| do not depend on the phase of each pair of singular vectors
        u, s, vh = np.linalg.svd(a, full_matrices=False)
        return np.sum(np.abs(u) * cu) + np.sum(s * cs) + np.sum(np.abs(vh) * cv)

    assert not np.iscomplexobj(funcgrad.jit(lambda a: np.linalg.svd(a)[1], strategy="kernels")(x))
    (g,) = funcgrad.vjp(f, x)[1](1.0)
    np.testing.assert_allclose(g, _numeric_vjp(f, x, 1.0), rtol=1e-6, atol=1e-8)
    dx = RNG.normal(size=shape) + 1j * RNG.normal(size=shape)
    _, t = funcgrad.jvp(f, (x,), (dx,))
    assert t == pytest.approx(_fd(f, x, dx), rel=1e-6)
    test_util.check_grads(f)(x)
    if len(shape) == 2:
        test_util.check_grads(lambda a: np.linalg.norm(a, "nuc"))(x)


def test_svd_hermitian_of_complex_matrices_is_refused_clearly():
    z = RNG.normal(size=(3, 3)) + 1j * RNG.normal(size=(3, 3))
    with pytest.raises(ValueError, match="hermitian=True"):
        funcgrad.vjp(lambda x: np.linalg.svd(x, hermitian=True)[1], z)[1](np.ones(3))


# ----------------------------------------------------------------------------- grad inside a transformed function
def _inner(p):
    return np.sum(np.sin(p["a"]) * p["b"][0]) + p["b"][1] ** 3


def _uses_grad(p):
    g = funcgrad.grad(_inner)(p)          # made and called inside: the inner gradient is generated code, inlined
    return np.sum(g["a"] ** 2) + np.sum(np.sin(g["b"][0])) + g["b"][1] * p["b"][1]


def _exp_dot(y):
    return np.sum(np.exp(y) * y)


def _tanh_sq(y):
    return np.sum(np.tanh(y) ** 2)


def _uses_value_and_grad(x):
    v, g = funcgrad.value_and_grad(_exp_dot)(x)
    return v * np.sum(g * x)


@pytest.mark.parametrize("jit", [True, False])
def test_grad_called_inside_a_differentiated_function(jit):
    p = {"a": RNG.normal(size=3), "b": (RNG.normal(size=3), 0.7)}
    flat, td = funcgrad.tree.tree_flatten(p)
    g = funcgrad.grad(_uses_grad, jit=jit)(p)
    for leaf_i, leaf in enumerate(flat):
        for k in range(np.size(leaf)):
            def along(eps, leaf_i=leaf_i, k=k):
                ls = [np.array(v, dtype=float, copy=True) for v in flat]
                ls[leaf_i].reshape(-1)[k] += eps
                return _uses_grad(funcgrad.tree.tree_unflatten(td, [v if np.ndim(v) else float(v) for v in ls]))
            want = (along(1e-6) - along(-1e-6)) / 2e-6
            got = np.ravel(funcgrad.tree.tree_flatten(g)[0][leaf_i])[k]
            assert got == pytest.approx(want, rel=1e-5, abs=1e-7)
    x = RNG.normal(size=3)
    np.testing.assert_allclose(funcgrad.grad(_uses_value_and_grad, jit=jit)(x),
                               [_fd(_uses_value_and_grad, x, e) for e in np.eye(3)], rtol=1e-6)


def test_grad_inside_to_second_order_and_of_complex_values():
    test_util.check_grads(lambda x: funcgrad.grad(np.abs)(x))(1.1 + 1.3j)
    test_util.check_grads(lambda x: funcgrad.grad(_tanh_sq)(x))(RNG.normal(size=(2, 3)))


def test_grad_inside_at_a_computed_value():
    """grad(f)(x * 2.0) inside: x * 2.0 has x's kind and ndim (inferred from the primitive); a library call's
    result has none known and stays refused at the user's line."""
    def f(x):
        return funcgrad.grad(_tanh_sq)(x * 2.0)

    x = np.array([0.1, -0.4, 0.3])
    h = lambda x: np.sum(f(x))   # noqa: E731
    np.testing.assert_allclose(funcgrad.grad(h)(x), [_fd(h, x, e) for e in np.eye(3)], rtol=1e-6, atol=1e-9)
    rs = np.random.RandomState(0)

    def g(x):
        return funcgrad.grad(_tanh_sq)(rs.randn(3) * x)

    with pytest.raises(funcgrad.errors.UnsupportedSyntaxError, match="known while transforming") as info:
        funcgrad.grad(lambda x: np.sum(g(x)))(np.ones(3))
    assert "return funcgrad.grad(_tanh_sq)(rs.randn(3) * x)" in str(info.value)


# ----------------------------------------------------------------------------- methods of other objects
def test_a_method_of_an_object_made_in_the_function_runs_as_it_is():
    def f(a):
        rng = np.random.RandomState(0)   # made at every call: the same draws every time
        z = np.dot(np.linalg.cholesky(a), rng.randn(a.shape[0]))
        return np.linalg.norm(z)

    b = RNG.normal(size=(3, 3))
    a = b @ b.T + np.eye(3)
    g = funcgrad.grad(f)(a)
    sym = lambda d: d + d.T - np.diag(np.diag(d))  # noqa: E731  cholesky reads the lower triangle
    for i, j in [(0, 0), (1, 0), (2, 1), (2, 2)]:
        e = np.zeros((3, 3))
        e[i, j] = 1.0
        want = _fd(f, a, sym(e))
        got = g[i, j] if i == j else g[i, j] + g[j, i]
        assert got == pytest.approx(want, rel=1e-6)
    test_util.check_grads(lambda x: f(x @ x.T + np.eye(3)))(b)


def test_a_method_with_no_rule_on_a_differentiated_value_is_refused():
    def f(x):
        return np.sum(np.asarray(x.tolist()))

    with pytest.raises(funcgrad.NoDerivativeError, match=r"\.tolist\(\) has no derivative rule"):
        funcgrad.grad(f)(np.ones(3))


# ----------------------------------------------------------------------------- iterating dicts
def _dict_walk(d):
    acc = 0.0
    for i, (k, v) in enumerate(sorted(d.items(), key=operator.itemgetter(0), reverse=True)):
        acc = acc + np.sum(np.sin(v)) * (i + 1.0)
    for k in d:                    # a dict iterates its keys
        acc = acc + np.sum(d[k] ** 2) * len(k)
    for i, k in enumerate(sorted(d)):
        acc = acc + np.sum(np.cos(d[k])) * (i + 2.0)
    for v in d.values():
        acc = acc + np.sum(v)
    return acc + len(list(d)) * 0.5


@pytest.mark.parametrize("jit", [True, False])
def test_iterating_a_dict_is_pythons(jit):
    d = {"bb": RNG.normal(size=2), "a": RNG.normal(size=3), "ccc": RNG.normal(size=(2, 2))}
    assert funcgrad.jit(_dict_walk, strategy="kernels")(d) == pytest.approx(_dict_walk(d))
    g = funcgrad.grad(_dict_walk, jit=jit)(d)
    for k in d:
        want = [_fd(lambda x: _dict_walk({**d, k: x}), d[k], e.reshape(d[k].shape)) for e in np.eye(d[k].size)]
        np.testing.assert_allclose(np.ravel(g[k]), want, rtol=1e-6)


def _outer_with_local(x):
    def inner(y):                      # a nested def: converted to a real function, then differentiated
        return y[0] * y[1] * x          # reads x of the enclosing function (a leading parameter after conversion)

    return np.sum(np.sin(np.array(funcgrad.grad(inner)((x, x)))))


def test_grad_of_a_nested_def_and_grad_of_grad_of_it():
    x = 0.7
    assert funcgrad.grad(_outer_with_local)(x) == pytest.approx(_fd(_outer_with_local, x, 1.0), rel=1e-6)
    g1 = funcgrad.grad(_outer_with_local)
    assert funcgrad.grad(g1)(x) == pytest.approx(_fd(g1, x, 1.0, eps=1e-5), rel=1e-5)
    test_util.check_grads(_outer_with_local)(x)
    test_util.check_grads(g1)(x)
    test_util.check_grads(funcgrad.grad(g1))(x)


def test_unstack_and_unconcatenate_read_back_are_differentiable():
    def f(a, b):   # reverse mode through stack and concatenate, then differentiated again
        return np.sum(np.sin(np.stack([a, 2.0 * b], axis=1))) + np.sum(np.concatenate([a, b * b], axis=0) ** 3)

    a, b = RNG.normal(size=(2, 3)), RNG.normal(size=(2, 3))
    g = funcgrad.grad(f, argnums=(0, 1))

    def h(a, b):
        ga, gb = g(a, b)
        return np.sum(ga * gb)

    gh = funcgrad.grad(lambda a, b: h(a, b), argnums=0)
    want = np.array([_fd(lambda s: h(s, b), a, e.reshape(2, 3)) for e in np.eye(6)]).reshape(2, 3)
    np.testing.assert_allclose(gh(a, b), want, rtol=1e-5, atol=1e-7)


def test_solve_sylvester_to_second_order():
    import scipy.linalg as sla
    a = RNG.normal(size=(3, 3)) + 3 * np.eye(3)
    b = RNG.normal(size=(2, 2)) + 3 * np.eye(2)
    q = RNG.normal(size=(3, 2))
    y, pull = funcgrad.vjp(sla.solve_sylvester, a, b, q)
    np.testing.assert_allclose(a @ y + y @ b, q, atol=1e-12)
    c = RNG.normal(size=(3, 2))
    for k, (arg, shape) in enumerate([(a, (3, 3)), (b, (2, 2)), (q, (3, 2))]):
        def f(v, k=k):
            args = [a, b, q]
            args[k] = v
            return np.sum(c * sla.solve_sylvester(*args))
        want = np.array([_fd(f, arg, e.reshape(shape)) for e in np.eye(arg.size)]).reshape(shape)
        np.testing.assert_allclose(pull(c)[k], want, rtol=1e-6, atol=1e-9)
    test_util.combo_check(sla.solve_sylvester, [0, 1, 2])([a], [b], [q])


# ----------------------------------------------------------------------------- complex eigh
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh_of_complex_hermitian_matrices(uplo):
    x = RNG.normal(size=(3, 3)) + 1j * RNG.normal(size=(3, 3))   # eigh reads one triangle (Hermitian)
    c1, c2 = RNG.normal(size=3), RNG.normal(size=(3, 3))

    def f(a):
        w, v = np.linalg.eigh(a, uplo)
        return np.sum(w * c1) + np.sum(np.abs(v) * c2)   # |v|: independent of each eigenvector's phase

    w = np.linalg.eigh(x, uplo)[0]
    assert not np.iscomplexobj(funcgrad.jit(lambda a: np.linalg.eigh(a, uplo)[0], strategy="kernels")(x))
    np.testing.assert_allclose(funcgrad.jit(lambda a: np.linalg.eigh(a, uplo)[0], strategy="kernels")(x), w)
    (g,) = funcgrad.vjp(f, x)[1](1.0)
    np.testing.assert_allclose(g, _numeric_vjp(f, x, 1.0), rtol=1e-6, atol=1e-8)
    dx = RNG.normal(size=(3, 3)) + 1j * RNG.normal(size=(3, 3))
    _, t = funcgrad.jvp(f, (x,), (dx,))
    assert t == pytest.approx(_fd(f, x, dx), rel=1e-6)
    test_util.check_grads(f)(x)   # to second order


# ----------------------------------------------------------------------------- eig with complex spectra
@pytest.mark.parametrize("kind", ["real matrix, complex spectrum", "complex matrix"])
def test_eig_with_complex_eigenvalues(kind):
    x = RNG.normal(size=(3, 3))
    while not np.iscomplexobj(np.linalg.eigvals(x)):   # a real matrix with a complex pair of eigenvalues
        x = RNG.normal(size=(3, 3))
    if kind == "complex matrix":
        x = x + 1j * RNG.normal(size=(3, 3))
    c1 = RNG.normal(size=3) + 1j * RNG.normal(size=3)
    c2 = RNG.normal(size=(3, 3))

    def f(a):
        w, v = np.linalg.eig(a)
        return np.real(np.sum(w * c1)) + np.sum(np.abs(v) * c2)   # |v|: unit eigenvectors, phase free

    (g,) = funcgrad.vjp(f, x)[1](1.0)
    assert np.iscomplexobj(g) == np.iscomplexobj(x)
    np.testing.assert_allclose(g, _numeric_vjp(f, x, 1.0), rtol=1e-6, atol=1e-8)
    dx = RNG.normal(size=(3, 3)).astype(x.dtype)
    _, t = funcgrad.jvp(f, (x,), (dx,))
    assert t == pytest.approx(_fd(f, x, dx), rel=1e-6)
    test_util.check_grads(f)(x)


def _grad_of_an_element(x):
    # the inner gradient is taken at x[1], an element of an argument: its signature is known (a scalar)
    return funcgrad.grad(lambda y: np.exp(y) * np.tanh(x[0]))(x[1]) + funcgrad.grad(_tanh_sq)(x[1:][0])


def test_grad_inside_at_an_integer_index_of_an_argument():
    x = RNG.normal(size=4)
    y0 = np.exp(x[1]) * (1 - np.tanh(x[0]) ** 2)
    np.testing.assert_allclose(funcgrad.grad(lambda v: funcgrad.grad(lambda y: np.exp(y) * np.tanh(v[0]))(v[1]))(x),
                               [y0, np.exp(x[1]) * np.tanh(x[0]), 0.0, 0.0], rtol=1e-7, atol=1e-12)
    gx = funcgrad.grad(_grad_of_an_element)(x)    # x[1:][0]: a slice, then an element: a scalar too
    np.testing.assert_allclose(gx, [_fd(_grad_of_an_element, x, e) for e in np.eye(4)], rtol=1e-6, atol=1e-9)
    jac = funcgrad.jacobian(lambda v: np.array([np.sum(v ** 3), funcgrad.grad(lambda y: np.exp(y) * np.tanh(v[0]))(
        v[1])]))(x)
    want = np.stack([_fd(lambda v: np.array([np.sum(v ** 3), np.exp(v[1]) * np.tanh(v[0])]), x, e)
                     for e in np.eye(4)], axis=-1)
    np.testing.assert_allclose(jac, want, rtol=1e-6, atol=1e-9)


def test_sqrtm_with_a_complex_result():
    import scipy.linalg as sla
    b = RNG.normal(size=(3, 3))
    a = 0.5 * (b + b.T) - 1.5 * np.eye(3)            # a negative eigenvalue: a complex square root
    assert np.iscomplexobj(sla.sqrtm(a))
    c = RNG.normal(size=(3, 3)) + 1j * RNG.normal(size=(3, 3))
    f = lambda x: np.real(np.sum(c * sla.sqrtm(0.5 * (x + x.T))))  # noqa: E731
    (g,) = funcgrad.vjp(f, a)[1](1.0)
    assert not np.iscomplexobj(g)
    np.testing.assert_allclose(g, _numeric_vjp(f, a, 1.0), rtol=1e-5, atol=1e-8)
    test_util.check_grads(lambda x: sla.sqrtm(0.5 * (x + x.T)))(a)
