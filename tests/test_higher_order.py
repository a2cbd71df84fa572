"""Second and higher order: hvp, hessian, jvp of jvp and grad of grad, against finite differences.

Hessian-vector products run the reverse pass over the generated forward pass; grad of grad is the
grad of the generated jvp; jvp of jvp runs the forward pass over its own output. Each is checked
against central differences of a first-order derivative funcgrad already gets right, on
straight-line code, loops, branches and in-place writes, in Python mode and compiled (auto).
"""
import numpy as np
import pytest

import funcgrad
from funcgrad.forward_mode import hessian, hvp, jvp_of_jvp


def straight(x):
    return np.sum(np.sin(x) * x ** 2) + np.prod(np.tanh(x[:2]))


def loop(x):
    s = 0.0
    for i in range(x.shape[0]):
        s = s + np.sin(x[i]) * x[(i + 1) % x.shape[0]] ** 2
    return s + np.sum(np.tanh(x) ** 3)


def branch(x):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > 0:
            s = s + x[i] ** 3
        else:
            s = s - np.exp(x[i]) * x[0]
    return s


def inplace(x):
    y = np.zeros(x.shape[0])
    for i in range(x.shape[0]):
        y[i] = x[i] * x[(i + 2) % x.shape[0]]
    return np.sum(np.exp(y))


X = np.array([0.3, -0.5, 0.8, 0.1])
V = np.array([1.0, 0.5, -2.0, 0.25])


def _fd_hessian(f, x, eps=1e-5):
    g = funcgrad.grad(f, mode="python")
    return np.stack([(g(x + eps * e) - g(x - eps * e)) / (2 * eps) for e in np.eye(x.size)], axis=-1)


@pytest.mark.parametrize("mode", ["python", "auto"])
@pytest.mark.parametrize("f", [straight, loop, branch, inplace])
def test_hessian_and_hvp(f, mode):
    H = hessian(f, mode=mode)(X)
    np.testing.assert_allclose(H, _fd_hessian(f, X), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(hvp(f, (X,), (V,), mode=mode), H @ V, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("f", [straight, loop, inplace])
def test_jvp_of_jvp_is_the_second_directional_derivative(f):
    H = _fd_hessian(f, X)
    U = np.array([0.2, -1.0, 0.4, 0.9])
    _, (second,) = jvp_of_jvp(f, (X,), (V,), (U,), (np.zeros(4),))
    np.testing.assert_allclose(second, U @ H @ V, rtol=1e-6, atol=1e-6)


def taylor(x):
    y = x
    for _ in range(3):
        y = np.tanh(y) * x
    return y


@pytest.mark.parametrize("mode", ["python", "auto"])
def test_grad_of_grad_of_grad(mode):
    g1 = funcgrad.grad(taylor, mode=mode)
    g2 = funcgrad.grad(g1, mode=mode)
    g3 = funcgrad.grad(g2, mode=mode)
    x, e = 0.7, 1e-4
    np.testing.assert_allclose(g2(x), (g1(x + e) - g1(x - e)) / (2 * e), rtol=1e-6)
    np.testing.assert_allclose(g3(x), (g2(x + e) - g2(x - e)) / (2 * e), rtol=1e-6)
    # tanh'' = -2 tanh (1 - tanh^2), straight from a NumPy function
    t = np.tanh(0.5)
    np.testing.assert_allclose(funcgrad.grad(funcgrad.grad(np.tanh))(0.5), -2 * t * (1 - t * t), rtol=1e-12)


def _with_other_arguments(x, params, tag, scaled):
    s = np.sin(x) * params["a"] + x ** 4 * np.sum(params["b"])
    return s * len(tag) if scaled else s


def test_grad_of_grad_with_a_pytree_a_string_and_a_flag_beside_the_scalar():
    """The other arguments reach the inner function as the user passed them: a dict of a float and an array, a
    string and a bool fixed into the code (they were flattened, and the call failed with an internal name)."""
    p = {"a": 2.0, "b": np.array([1.0, 2.0])}
    args = (0.5, p, "abc", True)
    d2, d3 = -np.sin(0.5) * 2 + 12 * 0.25 * 3, -np.cos(0.5) * 2 + 24 * 0.5 * 3
    g2 = funcgrad.grad(funcgrad.grad(_with_other_arguments))
    assert g2(*args) == pytest.approx(d2 * 3, rel=1e-12)
    assert g2(0.5, p, "abc", scaled=False) == pytest.approx(d2, rel=1e-12)
    assert funcgrad.grad(g2)(*args) == pytest.approx(d3 * 3, rel=1e-12)
    # with respect to a later argument
    def f(p, x, tag):
        return np.sin(x) * p["a"] * len(tag)
    assert funcgrad.grad(funcgrad.grad(f, argnums=1), argnums=1)(p, 0.5, "ab") == pytest.approx(
        -np.sin(0.5) * 4, rel=1e-12)


def test_forward_mode_and_hessian_with_a_flag_and_a_string_beside_the_array():
    def h(x, scaled, tag):
        return np.sum(np.sin(x) * 2.0) * len(tag) if scaled else np.sum(np.sin(x))
    x = np.array([0.5, 0.7])
    np.testing.assert_allclose(funcgrad.hessian(h)(x, True, "ab"), np.diag(-np.sin(x) * 4), rtol=1e-12)
    np.testing.assert_allclose(funcgrad.hvp(h, (x, True, "ab"), (np.ones(2), 0.0, 0.0)), -np.sin(x) * 4, rtol=1e-12)
    np.testing.assert_allclose(funcgrad.jacfwd(h)(x, False, "ab"), np.cos(x), rtol=1e-12)


def test_grad_of_grad_needs_a_scalar_inner_argument():
    with pytest.raises(TypeError, match="scalar"):
        funcgrad.grad(funcgrad.grad(straight))(X)


def test_forward_mode_transposes_a_custom_vjp_without_a_jvp():
    @funcgrad.custom_vjp
    def f(x):
        return np.sin(x)

    f.defvjp(lambda x: (np.sin(x), x), lambda x, g: (g * np.cos(x),))

    def h(x):
        return f(x) * 2.0

    assert funcgrad.jvp(h, (0.3,), (1.0,))[1] == pytest.approx(2.0 * np.cos(0.3), rel=1e-14)


def test_source_prints_the_forward_mode_code():
    text = funcgrad.source(loop, X, forward=True)
    assert "def loop_jvp(x, t_x):" in text
    assert "t_s = " in text and "for i in range(" in text      # the loop is kept, tangents beside values


def test_grad_of_grad_of_a_lambda():
    d2 = funcgrad.grad(funcgrad.grad(lambda x: x ** 3 * np.sin(x)))
    x = 0.4
    want = 6 * x * np.sin(x) + 6 * x ** 2 * np.cos(x) - x ** 3 * np.sin(x)
    np.testing.assert_allclose(d2(x), want, rtol=1e-12)


# ----------------------------------------------------------------------------- jvp and vjp inside a transform
def inner(x):
    return np.sum(np.sin(x) * x)


def uses_vjp(x):
    y, pull = funcgrad.vjp(inner, x)
    (g,) = pull(1.0)
    return np.sum(g ** 2) + y


def uses_jvp(x):
    y, t = funcgrad.jvp(inner, (x,), (np.ones(x.shape[0]),))
    return t * y


def uses_jvp_of_a_closure(x, c):
    _, t = funcgrad.jvp(lambda z: np.sum(np.tanh(z * x)) * c, (x,), (x,))
    return t


A_CAPTURED = np.arange(8.0).reshape(2, 4) / 5


def uses_vjp_of_a_lambda_over_a_global(x):
    y, pull = funcgrad.vjp(lambda z: A_CAPTURED @ np.tanh(z * x), x)
    (g,) = pull(y)
    return np.sum(g * g)


def uses_jvp_in_a_loop(x):
    s = 0.0
    for k in range(3):                  # the inlined forward code runs each iteration
        _, t = funcgrad.jvp(inner, (x,), (x * s + 1.0,))
        s = s * 0.5 + t
    return s


NESTED = [uses_vjp, uses_jvp, lambda x: uses_jvp_of_a_closure(x, 1.5), uses_vjp_of_a_lambda_over_a_global,
          uses_jvp_in_a_loop]


def _fd_grad(f, x, eps=1e-6):
    return np.array([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(x.size)])


@pytest.mark.parametrize("mode", ["python", "auto"])
@pytest.mark.parametrize("f", NESTED, ids=["vjp", "jvp", "jvp_closure", "vjp_global", "jvp_loop"])
def test_grad_of_a_function_calling_jvp_or_vjp(f, mode):
    np.testing.assert_allclose(funcgrad.grad(f, mode=mode)(X), _fd_grad(f, X), rtol=1e-7, atol=1e-9)
    _, t = funcgrad.jvp(f, (X,), (V,), mode=mode)
    np.testing.assert_allclose(t, _fd_grad(f, X) @ V, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(hessian(f, mode=mode)(X), _fd_hessian(f, X), rtol=1e-6, atol=1e-6)


def _jvp_at_a_computed_value(x):
    y = np.sin(x)
    _, t = funcgrad.jvp(inner, (y,), (x,))
    return t


def _vjp_at_a_computed_value(x):
    y, pull = funcgrad.vjp(inner, x[1:] * 2.0)
    (g,) = pull(1.0)
    return y + np.sum(g * x[1:])


@pytest.mark.parametrize("f", [_jvp_at_a_computed_value, _vjp_at_a_computed_value], ids=["jvp", "vjp"])
def test_jvp_and_vjp_inside_at_values_computed_inside(f):
    """The kind and ndim of np.sin(x) or x[1:] * 2.0 follow from the primitives that make them: the nested
    transform is built at that signature, and differentiated again."""
    np.testing.assert_allclose(funcgrad.grad(f)(X), _fd_grad(f, X), rtol=1e-6, atol=1e-8)


def test_jvp_inside_at_a_value_of_unknown_kind_is_refused_at_the_users_line():
    rs = np.random.RandomState(0)

    def h(x):
        y = rs.randn(4) * x           # a library call's result: its kind and ndim are not known while transforming
        _, t = funcgrad.jvp(inner, (y,), (x,))
        return t

    with pytest.raises(funcgrad.UnsupportedSyntaxError, match=r"funcgrad\.jvp inside a transformed function") as e:
        funcgrad.grad(h)(X)
    assert e.value.filename == __file__ and "funcgrad.jvp(inner, (y,), (x,))" in e.value.text


# ----------------------------------------------------------------------------- linearize, jacrev
def test_linearize_is_the_jvp_at_fixed_primals():
    y, f_jvp = funcgrad.linearize(loop, X)
    assert y == pytest.approx(loop(X), rel=1e-14)
    U = np.array([0.2, -1.0, 0.4, 0.9])
    np.testing.assert_allclose(f_jvp(V), funcgrad.jvp(loop, (X,), (V,))[1], rtol=1e-14)
    np.testing.assert_allclose(f_jvp(2.0 * V - U), 2.0 * f_jvp(V) - f_jvp(U), rtol=1e-12)   # linear
    np.testing.assert_allclose(f_jvp(V), _fd_grad(loop, X) @ V, rtol=1e-7)

    def two(p, c):                                 # pytrees in and out
        return {"a": p["w"] * c, "b": np.sum(np.sin(p["w"]))}

    p = {"w": np.array([0.3, -0.2])}
    y, f_jvp = funcgrad.linearize(two, p, 2.0)
    t = f_jvp({"w": np.array([1.0, 0.0])}, 1.0)
    np.testing.assert_allclose(y["a"], p["w"] * 2.0)
    np.testing.assert_allclose(t["a"], np.array([2.0, 0.0]) + p["w"])
    np.testing.assert_allclose(t["b"], np.cos(0.3))
    with pytest.raises(TypeError, match="one per primal"):
        f_jvp(V)


def test_jacrev_equals_jacfwd():
    def vec(x, y):
        return np.tanh(x) * y + np.cumsum(x) ** 2

    x, y = X, 0.7
    np.testing.assert_allclose(funcgrad.jacrev(vec)(x, y), funcgrad.jacfwd(vec)(x, y), rtol=1e-12, atol=1e-14)
    jx, jy = funcgrad.jacrev(vec, argnums=(0, 1))(x, y)
    np.testing.assert_allclose(jy, np.tanh(x), rtol=1e-12)


# ----------------------------------------------------------------------------- the second-order example
def test_newton_example_converges_in_few_iterations(capsys):
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "examples", "newton_logistic.py")
    spec = importlib.util.spec_from_file_location("newton_logistic", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    r = mod.main(["--n", "400", "--d", "6", "--seed", "1"])
    assert r["newton_iters"] <= 10 and r["newton_cg_iters"] <= 15 and r["trust_iters"] <= 15, r
    assert r["grad_norm"] < 1e-10 and r["agree"] < 1e-7, r
    # the point found is a minimum by central differences of the loss alone (no funcgrad)
    X, y = mod.make_data(400, 6, 1)
    w, eps = r["w"], 1e-6
    fd = np.array([(mod.loss(w + eps * e, X, y, 1e-3) - mod.loss(w - eps * e, X, y, 1e-3)) / (2 * eps)
                   for e in np.eye(w.size)])
    assert np.max(np.abs(fd)) < 1e-7
    assert "Newton (funcgrad.hessian" in capsys.readouterr().out


# ----------------------------------------------------------------------------- autograd's operators nested
def test_elementwise_grad_and_deriv_nested_and_inside_a_transform():
    x = np.array([0.3, -0.2, 1.1])
    t = np.tanh(x)
    d2 = -2 * t * (1 - t * t)
    d3 = (-2 + 6 * t * t) * (1 - t * t)
    eg, dv = funcgrad.elementwise_grad, funcgrad.deriv
    np.testing.assert_allclose(eg(eg(np.tanh))(x), d2, rtol=1e-12)            # autograd's tanh example
    np.testing.assert_allclose(eg(eg(eg(np.tanh)))(x), d3, rtol=1e-12)
    np.testing.assert_allclose(dv(dv(np.tanh))(x), d2, rtol=1e-12)
    np.testing.assert_allclose(eg(dv(np.tanh))(x), d2, rtol=1e-12)

    def f(x):                                   # written inside the function funcgrad differentiates
        return np.sum(eg(np.tanh)(x) ** 2) + np.sum(dv(np.sin)(x))

    np.testing.assert_allclose(funcgrad.grad(f)(x), _fd_grad(f, x), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(hessian(f)(x), _fd_hessian(f, x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", ["hessian", "hvp", "linearize"])   # jacobian, jacfwd, jacrev: written out (below)
def test_size_dependent_derivatives_inside_a_transform_are_refused_at_the_users_line(op):
    def f(x):
        if op == "hvp":
            return np.sum(funcgrad.hvp(inner, (x,), (x,)))
        if op == "linearize":
            return funcgrad.linearize(inner, x)[0]
        return np.sum(getattr(funcgrad, op)(inner)(x))

    with pytest.raises(funcgrad.UnsupportedSyntaxError, match=rf"funcgrad\.{op} inside a transformed function") as e:
        funcgrad.grad(f)(X)
    assert e.value.filename == __file__


# ----------------------------------------------------------------------------- jacobian inside a transform
def _jac_fun(x):
    return np.sin(np.outer(x, x)) + np.cos(np.dot(x, x))


# the inner transforms run as Python when f is called for the central differences (compiling them whole is
# seconds each); inside the differentiated function they are written out and follow its mode
def _sum_sin_jacobian(x):
    return np.sum(np.sin(funcgrad.jacobian(_jac_fun, jit=False)(x)))


def _sum_sin_jacobian_of_jacobian(x):
    return np.sum(np.sin(funcgrad.jacobian(funcgrad.jacobian(_jac_fun, jit=False), jit=False)(x)))


def _jacfwd_and_jacrev_of_two_args(x, c):
    jf = funcgrad.jacfwd(lambda a, b: np.tanh(a * b) * np.sum(a), 1, jit=False)(c, x)     # w.r.t. an array
    jr = funcgrad.jacrev(lambda a, s: a ** 2 * s, 1, jit=False)(x, c)                     # w.r.t. a number
    return np.sum(jf * jf) + np.sum(jr)


@pytest.mark.parametrize("f,mode", [(_sum_sin_jacobian, "python"),
                                    pytest.param(_sum_sin_jacobian, "auto", marks=pytest.mark.sweep),  # 35 s cold
                                    (_sum_sin_jacobian_of_jacobian, "python"),
                                    (lambda x: _jacfwd_and_jacrev_of_two_args(x, 0.7), "python")],
                         ids=["jac-python", "jac-auto", "jac_jac-python", "fwd_rev-python"])
def test_jacobian_inside_a_transform(f, mode):
    """jacobian(f)(x) (jacfwd, jacrev, jacobian of jacobian) inside a differentiated function: one jvp per element
    of x in a loop run at run time (autograd's test_jacobian_higher_order), differentiated again."""
    x = np.array([0.3, -0.7, 0.2])
    np.testing.assert_allclose(funcgrad.grad(f, mode=mode)(x), _fd_grad(f, x), rtol=1e-6, atol=1e-8)
    assert funcgrad.jacobian(funcgrad.jacobian(_jac_fun, jit=False), jit=False)(x[:2]).shape == (2, 2, 2, 2)


def _two_args(x, y):
    return np.sum(np.sin(x) * y[0] ** 2) + np.sum(x) ** 2 * y[1] + y[0] * y[1] ** 3


def test_hessian_with_an_argnums_tuple_gives_every_block():
    """hessian(f, argnums=(0, 1)) gives JAX's tuple of tuples, H[i][j] of shape x_i.shape + x_j.shape (it
    failed inside funcgrad with "tuple indices must be integers"); each block against differences of grad."""
    x, y = np.array([0.3, -0.5, 1.1]), np.array([0.7, -1.2])
    H = funcgrad.hessian(_two_args, argnums=(0, 1))(x, y)
    assert [[b.shape for b in row] for row in H] == [[(3, 3), (3, 2)], [(2, 3), (2, 2)]]
    g = funcgrad.grad(_two_args, argnums=(0, 1))
    eps = 1e-6
    for a, xa in enumerate((x, y)):
        for k in range(xa.size):
            e = np.zeros(xa.size)
            e[k] = eps
            plus = g(*[v + e if i == a else v for i, v in enumerate((x, y))])
            minus = g(*[v - e if i == a else v for i, v in enumerate((x, y))])
            for b in range(2):
                np.testing.assert_allclose(H[b][a][..., k], (plus[b] - minus[b]) / (2 * eps), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(H[0][1], H[1][0].T, rtol=1e-12)
    np.testing.assert_allclose(funcgrad.hessian(_two_args, argnums=1)(x, y), H[1][1], rtol=1e-14)
    assert funcgrad.hessian(lambda a, b: a * a * b, argnums=(0, 1))(2.0, 3.0)[0][1] == pytest.approx(4.0)


def test_hessian_refuses_a_container_argument_and_bad_argnums():
    with pytest.raises(TypeError, match="argument 0 is a list, not an array or float"):
        funcgrad.hessian(lambda p: np.sum(p[0] * p[1]))([np.ones(2), np.ones(2)])
    with pytest.raises(TypeError, match="argnums must be an int or a non-empty tuple of ints"):
        funcgrad.hessian(_two_args, argnums=())
    with pytest.raises(ValueError, match="out of range"):
        funcgrad.hessian(_two_args, argnums=(0, 2))(np.ones(3), np.ones(2))


def test_jacfwd_refuses_a_container_argument_by_name():
    # it failed inside funcgrad with "entry not a 2- or 3- tuple"; jacrev already said this
    for jac in (funcgrad.jacfwd, funcgrad.jacrev):
        with pytest.raises(TypeError, match="argument 0 is a dict; jac"):
            jac(lambda p: p["a"] * p["b"])({"a": np.ones(2), "b": np.ones(2)})
    with pytest.raises(ValueError, match="out of range"):
        funcgrad.jacfwd(lambda a: a, argnums=3)(np.ones(2))


@pytest.mark.parametrize("call", ["jvp", "linearize", "hvp"])
def test_forward_mode_with_no_float_argument_is_refused_in_words(call):
    def f(n):
        return float(n) ** 2
    run = {"jvp": lambda: funcgrad.jvp(f, (3,), (1,)), "linearize": lambda: funcgrad.linearize(f, 3),
           "hvp": lambda: funcgrad.hvp(f, (3,), (1,))}[call]
    with pytest.raises(funcgrad.errors.ArgumentTypeError, match=r"no argument is made of floating-point values "
                                                                 r"\(received int \(3\)\).*pass floats"):
        run()
