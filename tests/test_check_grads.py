"""funcgrad.testing.check_grads (and funcgrad.test_util, autograd's names for it) catches wrong derivative
rules and passes right ones, in both call forms: autograd's curried ``check_grads(f, argnum, modes,
order)(*args)`` and JAX's ``check_grads(f, args, ...)``."""
import numpy as np
import pytest

import funcgrad
import funcgrad.testing as T
from funcgrad import test_util


@pytest.fixture(autouse=True)
def _seeded():
    # the curried form draws its random directions from np.random, as autograd's does (autograd's conftest
    # seeds it per test); a seed keeps each check the same check on every run
    np.random.seed(42)


def _sin_with_rule(scale):
    """``np.sin`` as a custom_vjp whose backward is ``scale`` times the true one (1.0: right)."""
    @funcgrad.custom_vjp
    def my_sin(x):
        return np.sin(x)

    my_sin.defvjp(lambda x: (np.sin(x), x), lambda x, g: (scale * g * np.cos(x),))
    return my_sin


def _loss_of(rule):
    def loss(x, w):
        return np.sum(rule(x) * w) + np.sum(x * x)
    return loss


RIGHT, WRONG, SLIGHTLY_WRONG = _sin_with_rule(1.0), _sin_with_rule(1.5), _sin_with_rule(1.0 + 1e-4)
X = np.linspace(-1.0, 1.2, 5)
W = np.linspace(0.5, 2.0, 5)


def test_the_names_autograd_tests_import():
    assert test_util.check_grads is T.check_grads and test_util.combo_check is T.combo_check
    assert (test_util.TOL, test_util.RTOL, test_util.EPS) == (1e-6, 1e-6, 1e-6)


# ----------------------------------------------------------------------------- autograd's curried form
def test_curried_form_passes_a_right_rule():
    test_util.check_grads(RIGHT, modes=["rev"], order=1)(X)
    test_util.check_grads(_loss_of(RIGHT), modes=["rev"], order=1)(X, W)
    test_util.check_grads(_loss_of(RIGHT), 1, modes=["rev"], order=1)(X, W)
    test_util.check_grads(_loss_of(RIGHT), argnum=(0, 1), modes=["rev"], order=1)(X, W)


@pytest.mark.parametrize("rule", [WRONG, SLIGHTLY_WRONG], ids=["wrong", "off-by-1e-4"])
def test_curried_form_catches_a_wrong_rule(rule):
    with pytest.raises(AssertionError, match=r"Derivative \(VJP\) check of my_sin failed"):
        test_util.check_grads(rule, modes=["rev"], order=1)(X)
    with pytest.raises(AssertionError, match=r"Derivative \(VJP\) check of loss failed"):
        test_util.check_grads(_loss_of(rule), modes=["rev"], order=1)(X, W)
    with pytest.raises(AssertionError):  # through a tuple argnum too
        test_util.check_grads(_loss_of(WRONG), (0, 1), ["rev"], order=1)(X, W)
    # (autograd's check is one random projection with rtol 1e-6: a 1e-4 error confined to part of a tuple
    # argument slips through for about one seed in 60, so the subtle rule is checked per argument above)


def test_curried_form_ignores_the_wrong_rule_of_an_argument_it_does_not_check():
    # argnum=1 differentiates w only; my_sin's (wrong) backward is never asked for x
    test_util.check_grads(_loss_of(WRONG), argnum=1, modes=["rev"], order=1)(X, W)


def test_curried_form_takes_keywords_pytrees_and_python_floats():
    test_util.check_grads(np.sum, modes=["rev"], order=1)(np.arange(6.0).reshape(2, 3), axis=0, keepdims=True)

    def f(p, scale=2.0):
        return scale * np.sum(p["a"] * p["b"][0]) + p["b"][1] ** 2

    test_util.check_grads(f, modes=["rev"], order=1)({"a": X, "b": (W, 0.3)}, scale=3.0)
    test_util.check_grads(lambda x: x * np.sin(x), modes=["rev"], order=1)(0.7)


def test_a_wrong_rule_inside_a_pytree_function_is_caught():
    def f(p):
        return np.sum(WRONG(p["a"]) * p["b"][0]) + p["b"][1] ** 2

    with pytest.raises(AssertionError):
        test_util.check_grads(f, modes=["rev"], order=1)({"a": X, "b": (W, 0.3)})


def _reference_jvp(scale):
    """A JVP built on reverse mode (``J v`` from funcgrad.jacobian), wrong by ``scale`` when it is not 1."""
    def jvp(f, primals, tangents):
        (x,), (v,) = primals, tangents
        y = f(x)
        jac = funcgrad.jacobian(f)(x)
        return y, scale * np.tensordot(jac, v, axes=np.ndim(v))
    return jvp


def test_fwd_mode_compares_funcgrad_jvp_with_finite_differences(monkeypatch):
    f = lambda x: np.tanh(x) * x  # noqa: E731
    monkeypatch.setattr(T, "jvp", _reference_jvp(1.0))
    test_util.check_grads(f, modes=["fwd"], order=1)(X)
    T.check_grads(f, (X,), modes=("fwd",))
    monkeypatch.setattr(T, "jvp", _reference_jvp(1.01))
    with pytest.raises(AssertionError, match=r"Derivative \(JVP\) check"):
        test_util.check_grads(f, modes=["fwd"], order=1)(X)
    with pytest.raises(AssertionError, match="JVP of"):
        T.check_grads(f, (X,), modes=("fwd",))


def test_modes_are_validated():
    with pytest.raises(ValueError, match="modes"):
        test_util.check_grads(np.sin, modes=["reverse"])
    with pytest.raises(ValueError, match="modes"):
        T.check_grads(np.sin, (X,), modes=("backward",))


def test_non_float_argument_is_refused_clearly():
    with pytest.raises(TypeError, match="only floating-point"):
        test_util.check_grads(lambda n: n * 2.0, modes=["rev"], order=1)(3)


# ----------------------------------------------------------------------------- JAX's (f, args) form
def test_args_form_passes_a_right_rule():
    T.check_grads(_loss_of(RIGHT), (X, W))
    T.check_grads(_loss_of(RIGHT), (X, W), argnums=0)
    T.check_grads(_loss_of(RIGHT), (X, W), 1, ("rev",), jit=False)


@pytest.mark.parametrize("rule", [WRONG, SLIGHTLY_WRONG], ids=["wrong", "off-by-1e-4"])
def test_args_form_catches_a_wrong_rule(rule):
    with pytest.raises(AssertionError, match="does not match finite differences"):
        T.check_grads(_loss_of(rule), (X, W))
    big = np.linspace(-1.0, 1.0, 300)  # more than max_full elements: random directional derivatives
    with pytest.raises(AssertionError, match="directional derivative"):
        T.check_grads(_loss_of(rule), (big, big), argnums=0)


def test_args_form_checks_every_float_argument_by_default():
    def loss(w, x):  # the wrong rule is applied to the second argument only
        return np.sum(WRONG(x) * w)

    T.check_grads(loss, (W, X), argnums=0)
    with pytest.raises(AssertionError, match="argument 1"):
        T.check_grads(loss, (W, X))


def test_args_form_skips_integer_arguments_by_default():
    def f(x, n):
        return np.sum(x ** n)

    T.check_grads(f, (X, 3))


def test_a_wrong_primal_value_is_caught(monkeypatch):
    real_vjp = T.vjp

    def vjp_with_wrong_value(f, *args, **kwargs):  # right VJP, wrong value (as a miscompiled primal would be)
        y, pull = real_vjp(f, *args, **kwargs)
        return y + 1.0, pull

    monkeypatch.setattr(T, "vjp", vjp_with_wrong_value)
    f = lambda x: np.sum(np.sin(x))  # noqa: E731
    with pytest.raises(AssertionError, match="calling it gives"):
        T.check_grads(f, (X,))
    with pytest.raises(AssertionError, match="calling it gives"):
        test_util.check_grads(f, modes=["rev"], order=1)(X)


def test_float32_inputs_get_float32_tolerances():
    x = X.astype(np.float32)
    T.check_grads(lambda x: np.sum(np.sin(x) * x), (x,))


# ----------------------------------------------------------------------------- combo_check
def test_combo_check_runs_every_combination_and_names_the_failing_one():
    seen = []

    def f(x, axis=None):
        seen.append((np.shape(x), axis))
        return np.sum(np.sin(x), axis=axis)

    a, b = np.ones((2, 3)), np.ones((3, 2))
    test_util.combo_check(f, [0], modes=["rev"], order=1)([a, b], axis=[None, 0, 1])
    assert {(s, ax) for s, ax in seen} == {(s, ax) for s in [(2, 3), (3, 2)] for ax in [None, 0, 1]}

    def g(x, axis=None):
        return np.sum(WRONG(x), axis=axis)

    with pytest.raises(AssertionError) as info:
        test_util.combo_check(g, [0], modes=["rev"], order=1)([a], axis=[0])
    assert "combo_check of g" in "\n".join(getattr(info.value, "__notes__", []))
