"""Checkpointed loops (funcgrad.checkpoint_range): gradients equal the taped gradient and central
differences, in both compiled and Python modes; what cannot be checkpointed is refused at the user's line."""
import types

import numpy as np
import pytest

import funcgrad
from funcgrad.errors import UnsupportedSyntaxError
from tests.fixtures import checkpoint_programs as P


def taped(f):
    """The same function over plain range (another function object: its own transform)."""
    g = types.FunctionType(f.__code__, {**f.__globals__, "rng": range}, f.__name__ + "_taped")
    return g


def central(f, args, argnum, eps=1e-6):
    args = list(args)
    x = np.asarray(args[argnum], dtype=float)
    out = np.zeros_like(x)
    for idx in np.ndindex(x.shape if x.shape else ()):
        xp, xm = x.copy(), x.copy()
        xp[idx] += eps
        xm[idx] -= eps
        ap, am = list(args), list(args)
        ap[argnum] = xp if x.shape else float(xp)
        am[argnum] = xm if x.shape else float(xm)
        out[idx] = (f(*ap) - f(*am)) / (2 * eps)
    return out


R = np.random.default_rng(0)
W = R.normal(size=(3, 3)) * 0.5
CASES = [
    (P.logistic, (0.5, 0.2), (0, 1)),
    (P.rnn, (W, R.normal(size=3), R.normal(size=3)), (0, 1, 2)),
    (P.with_helper, (0.7, 0.3), (0, 1)),
    (P.branches, (0.9, 0.4), (0, 1)),
    (P.nested_outer, (0.7, 0.3), (0, 1)),
    (P.nested_inner, (0.7, 0.3), (0, 1)),
    (P.stepped, (0.7, 0.3), (0, 1)),
    (P.before_and_after, (0.7, 0.3), (0, 1)),
]


@pytest.mark.parametrize("f,args,argnums", CASES, ids=[c[0].__name__ for c in CASES])
@pytest.mark.parametrize("mode", ["njit", "python"])
def test_equals_taped_and_differences(f, args, argnums, mode):
    g = funcgrad.grad(f, argnums=argnums, mode=mode)
    gt = funcgrad.grad(taped(f), argnums=argnums, mode=mode)
    for n in (0, 1, 2, 7, 10):
        got, want = g(*args, n), gt(*args, n)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
        if n == 7:
            for i, a in zip(argnums, got):
                np.testing.assert_allclose(a, central(lambda *z: f(*z, n), args, i), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("mode", ["njit", "python"])
def test_inplace_writes(mode):
    g = funcgrad.grad(P.inplace, argnums=(0, 1), mode=mode)
    gt = funcgrad.grad(taped(P.inplace), argnums=(0, 1), mode=mode)
    for n in (0, 1, 5, 11):
        xs = np.linspace(-0.3, 0.4, max(n, 1))
        got, want = g(0.8, xs, n), gt(0.8, xs, n)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
        if n == 5:
            np.testing.assert_allclose(got[1], central(lambda *z: P.inplace(*z, n), (0.8, xs), 1), rtol=1e-6)


def test_explicit_segment_and_python_equals_njit():
    gn = funcgrad.grad(P.explicit_segment, argnums=(0, 1), mode="njit")
    gp = funcgrad.grad(P.explicit_segment, argnums=(0, 1), mode="python")
    gt = funcgrad.grad(taped(P.logistic), argnums=(0, 1), mode="njit")
    for n in (0, 1, 3, 4, 9, 10):
        np.testing.assert_allclose(gn(0.5, 0.2, n), gt(0.5, 0.2, n), rtol=1e-12)
        np.testing.assert_allclose(gp(0.5, 0.2, n), gt(0.5, 0.2, n), rtol=1e-12)


def test_source_shows_segments():
    src = funcgrad.source(funcgrad.grad(P.logistic, argnums=(0, 1), mode="python"), 0.5, 0.2, 10)
    assert "checkpointed: for" in src and "_snap_x.append(x)" in src and "_snap_x.pop()" in src
    primal = src.split("_p_x = ")[0]
    assert "_tape_x[_pos_x] = x\n        _pos_x += 1" not in primal.split("_snap_x = []")[1]   # the primal loop is untaped


def test_tape_holds_one_segment():
    """The sweep's tape grows to one segment (plus the snapshot), not to the trip count."""
    import funcgrad.kernels.cpu as cpu  # noqa
    n = 10_000
    src = funcgrad.source(funcgrad.grad(P.logistic, argnums=(0, 1), mode="python"), 0.5, 0.2, n)
    assert "K.tape_reserve(_tape_x, _pos_x + _trip1)" in src


def test_refuses_break():
    def f(a, n):
        x = a
        for t in funcgrad.checkpoint_range(n):
            x = x * a
            if x > 3.0:
                break
        return x
    with pytest.raises(UnsupportedSyntaxError, match="checkpointed loop cannot contain 'break'") as e:
        funcgrad.grad(f)(1.1, 5)
    assert e.value.lineno == f.__code__.co_firstlineno + 2


def test_refuses_bad_segment():
    def f(a, n):
        x = a
        for t in funcgrad.checkpoint_range(n, segment=0):
            x = x * a
        return x
    with pytest.raises(UnsupportedSyntaxError, match="segment=k"):
        funcgrad.grad(f)(1.1, 5)


def test_refuses_name_unbound_before_loop():
    def f(a, n):
        x = a
        for t in funcgrad.checkpoint_range(n):
            if t > 0:
                x = x * z
            z = x + a
        return x
    with pytest.raises(UnsupportedSyntaxError, match="reads 'z' before assigning it") as e:
        funcgrad.grad(f)(1.1, 5)
    assert e.value.lineno == f.__code__.co_firstlineno + 2


def test_outside_differentiation_is_range():
    assert list(funcgrad.checkpoint_range(1, 7, 2)) == [1, 3, 5]
    assert P.logistic(0.5, 0.2, 4) == taped(P.logistic)(0.5, 0.2, 4)
    with pytest.raises(ValueError):
        funcgrad.checkpoint_range(3, segment=0)


@pytest.mark.parametrize("mode", ["njit", "python"])
def test_checkpointed_helper(mode):
    """funcgrad.checkpoint(helper) / funcgrad.remat: the helper's intermediates are recomputed, not taped."""
    args = (W, R.normal(size=3), R.normal(size=3))
    g = funcgrad.grad(P.remat_in_loop, argnums=(0, 1, 2), mode=mode)
    gt = funcgrad.grad(P.remat_in_loop_taped, argnums=(0, 1, 2), mode=mode)
    for n in (0, 1, 4):
        for a, b in zip(g(*args, n), gt(*args, n)):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(g(*args, 3)[0], central(lambda *z: P.remat_in_loop(*z, 3), args, 0), rtol=1e-6)
    src = funcgrad.source(g, *args, 3)
    primal = src.split("_p_x = ")[0]
    assert "_cell_h = K.tanh(_t2)\n" in primal and "_tape__cell_h.append" not in primal   # untaped forward
    assert "checkpointed: for _it2 in range(1)" in src and "_tape__cell_h.append(_cell_h)" in src


def test_checkpoint_module_is_callable():
    h = funcgrad.checkpoint(P._cell_taped)
    assert isinstance(h, funcgrad.custom.Rematerialized) and h.fun is P._cell_taped
    assert callable(funcgrad.checkpoint.save)   # still the model-checkpoint module
    x = np.ones(3)
    np.testing.assert_allclose(h(x, W, x)[0], P._cell_taped(x, W, x)[0])


def test_second_order_and_forward_mode():
    args = (0.5, 0.2, 7)
    assert funcgrad.grad(funcgrad.grad(P.logistic))(*args) == pytest.approx(
        funcgrad.grad(funcgrad.grad(taped(P.logistic)))(*args), rel=1e-12)
    assert funcgrad.hessian(P.logistic)(*args) == pytest.approx(funcgrad.hessian(taped(P.logistic))(*args), rel=1e-12)
    assert funcgrad.jvp(lambda a: P.logistic(a, 0.2, 7), (0.5,), (1.0,))[1] == pytest.approx(
        funcgrad.grad(P.logistic)(*args), rel=1e-12)
