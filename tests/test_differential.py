"""autograd's operators (funcgrad.jacobian, elementwise_grad, deriv, holomorphic_grad) and builtins
(funcgrad.builtins: isinstance, tuple, list, dict), against central differences and autograd's
conventions (argnum, shapes, types)."""
import builtins

import numpy as np
import pytest

import funcgrad
from funcgrad import deriv, elementwise_grad, holomorphic_grad, jacobian
from funcgrad.differential import ComplexNotSupportedError
from funcgrad.errors import FuncgradError

RNG = np.random.default_rng(3)


def _fd_jacobian(f, x, eps=1e-6):
    x = np.asarray(x, dtype=np.float64)
    y0 = np.asarray(f(x))
    jac = np.zeros(y0.shape + x.shape)
    for k in range(x.size):
        e = np.zeros(x.shape)
        e.reshape(-1)[k] = eps
        col = (np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * eps)
        jac.reshape(y0.shape + (-1,))[..., k] = col
    return jac


# ----------------------------------------------------------------------------- jacobian
@pytest.mark.parametrize("jit", [True, False])
def test_jacobian_shape_is_out_shape_plus_in_shape_and_matches_finite_differences(jit):
    fun = lambda x: np.sin(np.outer(x, x)) + np.cos(np.dot(x, x))  # noqa: E731
    x = RNG.normal(size=2)
    jac = jacobian(fun, jit=jit)(x)
    assert jac.shape == (2, 2, 2)
    np.testing.assert_allclose(jac, _fd_jacobian(fun, x), rtol=1e-6, atol=1e-8)


def test_jacobian_of_scalar_input_and_of_scalar_output():
    val = 0.7
    jac = jacobian(lambda x: np.array([x, x ** 2, x ** 3]))(val)
    np.testing.assert_allclose(jac, [1.0, 2 * val, 3 * val ** 2])
    A = RNG.normal(size=(1, 3))
    fun = lambda x: np.sum(np.sin(x), axis=1, keepdims=True)  # noqa: E731
    np.testing.assert_allclose(jacobian(fun)(A).reshape(-1), funcgrad.grad(lambda a: np.sum(fun(a)))(A).reshape(-1))
    g = jacobian(lambda x: np.sum(x ** 3))(np.arange(3.0))
    assert g.shape == (3,)
    np.testing.assert_allclose(g, 3 * np.arange(3.0) ** 2)


def test_jacobian_argnum_and_keywords():
    def f(a, b, power=2):
        return a * b ** power

    a, b = RNG.normal(size=3), RNG.normal(size=3)
    np.testing.assert_allclose(jacobian(f, 1)(a, b, power=3), np.diag(3 * a * b ** 2), atol=1e-12)
    ja, jb = jacobian(f, (0, 1))(a, b)
    np.testing.assert_allclose(ja, np.diag(b ** 2), atol=1e-12)
    np.testing.assert_allclose(jb, np.diag(2 * a * b), atol=1e-12)
    assert jacobian(f).__name__ == "jacobian_of_f_wrt_argnum_0"


def test_jacobian_refuses_containers_and_bad_argnum():
    with pytest.raises(TypeError, match="one array or scalar"):
        jacobian(lambda x: (x, x))(np.ones(2))
    with pytest.raises(TypeError, match="argnum"):
        jacobian(np.sin, "x")


# ----------------------------------------------------------------------------- elementwise_grad, deriv
def test_elementwise_grad_is_the_column_sum_of_the_jacobian():
    x = RNG.normal(size=(2, 3))
    np.testing.assert_allclose(elementwise_grad(np.tanh)(x), 1 - np.tanh(x) ** 2, rtol=1e-12)
    f = lambda x: np.sin(x) * np.sum(x * x)  # noqa: E731  a non-diagonal Jacobian
    v = RNG.normal(size=4)
    np.testing.assert_allclose(elementwise_grad(f)(v), _fd_jacobian(f, v).sum(axis=0), rtol=1e-6)
    ga, gb = elementwise_grad(lambda a, b: a * b, (0, 1))(x, 2.0 * x)
    np.testing.assert_allclose(ga, 2.0 * x)
    np.testing.assert_allclose(gb, x)


def test_deriv_is_the_derivative_for_a_scalar_input():
    fun = lambda x: (x + np.sin(x ** 2)) * x  # noqa: E731  autograd's test_direct value
    assert 3.190948746871 - 1e-6 < deriv(fun)(1.3) < 3.190948746871 + 1e-6
    d = deriv(lambda t: np.array([np.sin(t), t ** 2]))(0.4)
    np.testing.assert_allclose(d, [np.cos(0.4), 0.8])


def test_deriv_is_the_jacobian_times_ones():
    f = lambda x: np.sin(x) * np.sum(x * x)  # noqa: E731
    x = RNG.normal(size=3)
    np.testing.assert_allclose(deriv(f)(x), _fd_jacobian(f, x).sum(axis=1), rtol=1e-6)


# ----------------------------------------------------------------------------- holomorphic_grad
def _complex_fd(f, z, eps=1e-6):
    """The complex derivative of a holomorphic scalar function, by central differences along the real axis."""
    return (f(z + eps) - f(z - eps)) / (2 * eps)


@pytest.mark.parametrize("jit", [True, False])
def test_holomorphic_grad_of_a_complex_input_is_the_complex_derivative(jit):
    f = lambda z: np.sin(z) * z * (1.0 + 0.2j)  # noqa: E731
    z = 0.7 - 0.4j
    g = holomorphic_grad(f, jit=jit)(z)
    assert np.iscomplexobj(g)
    np.testing.assert_allclose(g, _complex_fd(f, z), rtol=1e-7)
    # a holomorphic function's derivative is the same along the imaginary axis
    np.testing.assert_allclose(g, (f(z + 1e-6j) - f(z - 1e-6j)) / 2e-6j, rtol=1e-7)
    with pytest.warns(UserWarning, match="not complex"):
        g_real = holomorphic_grad(lambda x: x * (1.0 + 0.2j))(1.0)
    assert abs(g_real - 1.0) < 1e-12  # the gradient of the real part, as autograd's


def test_holomorphic_grad_of_an_array_function_with_argnum():
    def f(a, z):
        return np.sum(np.exp(a * z) * z)

    a, z = RNG.normal(size=3), RNG.normal(size=3) + 1j * RNG.normal(size=3)
    g = holomorphic_grad(f, 1)(a, z)
    want = np.array([_complex_fd(lambda zk: np.exp(a[k] * zk) * zk, z[k]) for k in range(3)])
    np.testing.assert_allclose(g, want, rtol=1e-6)


def test_deriv_of_a_complex_input_uses_autograds_complex_ones():
    f = lambda z: z ** 3  # noqa: E731
    z = np.array([0.3 + 0.2j, -1.1 + 0.5j])
    # autograd's vspace(z).ones() is 1 + 1j: deriv is f'(z) * (1 + 1j) for a holomorphic f
    np.testing.assert_allclose(deriv(f)(z), _complex_fd(f, z) * (1 + 1j), rtol=1e-6)


def test_jacobian_of_a_complex_output_is_refused_clearly():
    with pytest.raises(ComplexNotSupportedError, match="complex values") as info:
        jacobian(lambda x: x * (1.0 + 0.2j))(np.ones(2))
    assert isinstance(info.value, FuncgradError) and isinstance(info.value, TypeError)


def test_holomorphic_grad_of_a_real_input_warns_and_is_the_gradient_of_the_real_part():
    with pytest.warns(UserWarning, match="not complex"):
        g = holomorphic_grad(lambda x: np.sin(x) * 3.0)(0.5)
    assert abs(g - 3.0 * np.cos(0.5)) < 1e-12


# ----------------------------------------------------------------------------- builtins
def test_builtins_are_autograds_names_and_do_not_shadow_on_star_import():
    assert funcgrad.builtins.isinstance is builtins.isinstance
    for name in ("isinstance", "tuple", "list", "dict"):
        assert getattr(funcgrad, name) is getattr(funcgrad.builtins, name)
        assert name not in funcgrad.__all__
    ns = {}
    exec("from funcgrad import *", ns)
    assert not {"isinstance", "tuple", "list", "dict"} & set(ns)


def test_builtins_build_plain_containers_and_recognise_them():
    from funcgrad import dict as ag_dict, list as ag_list, tuple as ag_tuple
    t, l, d = ag_tuple([1, 2]), ag_list((1, 2)), ag_dict([("a", 1)], b=2)
    assert type(t) is builtins.tuple and t == (1, 2)
    assert type(l) is builtins.list and l == [1, 2]
    assert type(d) is builtins.dict and d == {"a": 1, "b": 2}
    assert ag_dict() == {} and ag_dict(()) == {} and ag_dict({}) == {}
    assert isinstance((), ag_tuple) and isinstance([], ag_list) and isinstance({}, ag_dict)
    assert not isinstance([], ag_tuple) and not isinstance((), ag_dict)


@pytest.mark.parametrize("jit", [True, False, "whole"])
def test_builtins_inside_a_differentiated_function_are_the_builtins(jit):
    from funcgrad import dict as ag_dict, isinstance as ag_isinstance, list as ag_list, tuple as ag_tuple

    def f(x):
        t = ag_tuple((x, 2.0 * x))
        lst = ag_list([x, x])
        d = ag_dict([("a", x)], b=x)
        assert ag_isinstance(t, ag_tuple) and ag_isinstance(lst, ag_list) and ag_isinstance(d, ag_dict)
        assert not ag_isinstance(t, ag_list)
        return np.sum(t[0] * t[1]) + np.sum(lst[1]) + np.sum(d["a"] * d["b"])

    x = np.arange(3.0)
    np.testing.assert_allclose(funcgrad.grad(f, jit=jit)(x), 4 * x + 1 + 2 * x)

    def g(x):
        assert ag_isinstance(x, ag_tuple)
        return x[0]

    assert funcgrad.grad(g, jit=jit)((1.0, 2.0, 3.0)) == (1.0, 0.0, 0.0)
