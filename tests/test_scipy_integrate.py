"""scipy.integrate.odeint inside differentiated functions (the adjoint method, funcgrad.integrate).

Gradients in y0, the output times t and the float args against central differences of the same
odeint call (tight tolerances so that differences of solutions are accurate), in every mode; the
form of autograd's test_odeint; ``tfirst``; integer args left out; ``full_output`` refused at the
user's line; autograd, when installed, as an extra oracle. Forward mode (the forward-sensitivity
JVP rule) against central differences, and reverse mode over it (autograd's order-2 check).
"""
import numpy as np
import pytest
import scipy.integrate
from scipy.integrate import odeint

import funcgrad
import funcgrad.integrate
from funcgrad.test_util import check_grads as ag_check_grads
from funcgrad.testing import check_grads

rng = np.random.default_rng(3)
R = rng.standard_normal
MODES = [{"jit": "kernels"}, {"jit": False}, {"jit": "auto"}]
TOL = dict(rtol=1e-11, atol=1e-11)


def func(y, t, arg1, arg2):
    return -np.sqrt(t) - y + arg1 - np.mean((y + arg2) ** 2)


def solve(y0, t, a1, a2):
    return np.sum(np.sin(odeint(func, y0, t, args=(a1, a2), rtol=1e-11, atol=1e-11)))


def _check(f, args, argnums):
    # eps 1e-4: an adaptive solver's result moves in steps of about its tolerance (1e-11) as its step
    # sizes change, so differences over 1e-6 would carry 1e-5 of noise
    for kw in MODES:
        check_grads(f, args, argnums=argnums, eps=1e-4, rtol=1e-5, atol=1e-6, **kw)


def test_odeint_in_y0_t_and_args():
    args = (R(3), np.linspace(0.1, 0.2, 4), R(3), R(3))
    _check(solve, args, (0, 1, 2, 3))


def decay(y, t, k):
    return -k * y * (1.0 + 0.1 * np.sin(t))


def decay_solve(y0, k, t_end):
    ts = np.array([0.0, 0.5, 1.0]) * t_end
    return np.sum(scipy.integrate.odeint(decay, y0, ts, (k,), rtol=1e-11, atol=1e-11)[-1])


def test_scalar_arg_and_scaled_times():
    _check(decay_solve, (np.array([1.0, 2.0]), 0.7, 1.3), (0, 1, 2))
    g = funcgrad.grad(decay_solve, argnums=1, jit="kernels")(np.array([1.0, 2.0]), 0.7, 1.3)
    assert isinstance(g, float)


def rhs_tfirst(t, y, w):
    return np.tanh(w @ y) - 0.1 * t


def solve_tfirst(y0, w):
    ys = odeint(rhs_tfirst, y0, np.linspace(0.0, 1.0, 5), args=(w,), tfirst=True, rtol=1e-11, atol=1e-11)
    return np.sum(ys ** 2)


def test_tfirst_and_a_matrix_argument():
    _check(solve_tfirst, (R(3), 0.5 * R((3, 3))), (0, 1))


def rhs_int(y, t, n, c):
    return -c * y ** n


def solve_int(y0, c):
    return np.sum(odeint(rhs_int, y0, np.array([0.0, 0.3, 0.6]), args=(2, c), rtol=1e-11, atol=1e-11))


def test_integer_args_are_not_differentiated():
    _check(solve_int, (np.array([1.0, 0.5]), 0.8), (0, 1))


def full_output(y0):
    ys, info = odeint(decay, y0, np.array([0.0, 1.0]), args=(0.5,), full_output=1)  # refused
    return np.sum(ys)


def test_full_output_is_refused_at_the_users_line():
    with pytest.raises(funcgrad.FuncgradError) as e:
        funcgrad.grad(full_output)(np.array([1.0]))
    assert "full_output" in str(e.value) and "test_scipy_integrate.py" in str(e.value)


def test_direct_call_is_scipys_odeint():
    y0, t = np.array([1.0, 2.0]), np.array([0.0, 0.5])
    np.testing.assert_array_equal(funcgrad.integrate.odeint(decay, y0, t, args=(0.7,)),
                                  odeint(decay, y0, t, args=(0.7,)))


def test_matches_autograd():
    pytest.importorskip("autograd", reason="autograd not installed")
    import autograd  # optional oracle
    import autograd.numpy as anp  # optional oracle
    import autograd.scipy.integrate as agi  # optional oracle

    def ag_func(y, t, arg1, arg2):
        return -anp.sqrt(t) - y + arg1 - anp.mean((y + arg2) ** 2)

    def ag_solve(y0, t, args):         # autograd 1.9.1 differentiates args as one tuple, and fails when
        return anp.sum(anp.sin(agi.odeint(ag_func, y0, t, args)))     # odeint is given options

    y0, t, a1, a2 = R(3), np.linspace(0.1, 0.2, 4), R(3), R(3)
    w_y0, w_t, (w_a1, w_a2) = autograd.grad(ag_solve, (0, 1, 2))(y0, t, (a1, a2))
    got = funcgrad.grad(solve_default_tolerances, argnums=(0, 1, 2, 3))(y0, t, a1, a2)
    for a, b in zip(got, (w_y0, w_t, w_a1, w_a2)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def solve_default_tolerances(y0, t, a1, a2):
    return np.sum(np.sin(odeint(func, y0, t, args=(a1, a2))))


# ------------------------------------------------------------------ forward mode and second order
def _check_fwd(f, args, argnums, modes=MODES):
    for kw in modes:
        check_grads(f, args, argnums=argnums, modes=("fwd",), eps=1e-4, rtol=1e-5, atol=1e-6, **kw)


def test_jvp_in_y0_t_and_args():
    _check_fwd(solve, (R(3), np.linspace(0.1, 0.2, 4), R(3), R(3)), (0, 1, 2, 3))


def test_jvp_scalar_arg_tfirst_integer_args():
    _check_fwd(decay_solve, (np.array([1.0, 2.0]), 0.7, 1.3), (0, 1, 2))
    _check_fwd(solve_tfirst, (R(3), 0.5 * R((3, 3))), (0, 1))
    _check_fwd(solve_int, (np.array([1.0, 0.5]), 0.8), (0, 1))


def rhs_kw(y, t, k, w):
    return -k * y + np.tanh(w @ y)


def solve_kw(y0, k, w):
    ys = odeint(rhs_kw, y0, np.array([0.0, 0.4, 0.8]), args=(k, w), rtol=1e-11, atol=1e-11)
    return np.sum(np.cos(ys))


def test_jvp_with_only_some_inputs_active():
    _check_fwd(solve_kw, (R(2), 0.6, 0.4 * R((2, 2))), (0,), modes=[{"jit": False}])   # zero placeholders
    _check_fwd(solve_kw, (R(2), 0.6, 0.4 * R((2, 2))), (2,), modes=[{"jit": False}])
    y, y_dot = funcgrad.jvp(lambda y0: odeint(decay, y0, np.array([0.0, 1.0]), args=(0.5,)),
                            (np.array([1.0, 2.0]),), (np.array([1.0, 0.0]),))
    np.testing.assert_array_equal(y, odeint(decay, np.array([1.0, 2.0]), np.array([0.0, 1.0]), args=(0.5,)))
    assert y_dot.shape == y.shape and y_dot[0].tolist() == [1.0, 0.0]


def trajectory(y0, t, a1, a2):
    return odeint(func, y0, t, args=(a1, a2), rtol=1e-11, atol=1e-11)


def directional(y0, t, a1, a2):
    """<c, J(x) v>: reverse mode over it is reverse over the JVP rule (funcgrad's second order, the map
    autograd's order-2 check differentiates); checked against central differences of the JVP itself."""
    _, y_dot = funcgrad.jvp(trajectory, (y0, t, a1, a2), (V[0], V[1], V[2], V[3]))
    return np.sum(C * y_dot)


V = (R(3), 0.1 * R(4), R(3), R(3))
C = R((4, 3))


def test_second_order_reverse_over_forward():
    check_grads(directional, (R(3), np.linspace(0.1, 0.2, 4), R(3), R(3)), argnums=(0, 1, 2, 3), eps=1e-4,
                rtol=1e-5, atol=1e-6, jit=False)


def test_second_order_catches_a_wrong_rule(monkeypatch):
    # the check above fails when the rule's VJP drops a term (so it checks something)
    original = funcgrad.integrate._odeint_jvp_bwd

    def broken(res, g):
        ct_p, ct_t = original(res, g)
        return (ct_p[0], ct_p[1], ct_p[2] * 0.9) + ct_p[3:], ct_t

    monkeypatch.setattr(funcgrad.integrate._odeint_jvp, "bwd", broken)
    with pytest.raises(AssertionError):
        check_grads(directional, (R(3), np.linspace(0.1, 0.2, 4), R(3), R(3)), argnums=(0,), eps=1e-4,
                    rtol=1e-5, atol=1e-6, jit=False)


def test_autograds_order_2_check():
    # autograd's own form (its test_odeint): check_grads(odeint, argnum, modes=["rev"], order=2), at its
    # default tolerances and step, with autograd's inputs (numpy's legacy seed 1)
    rs = np.random.RandomState(1)
    y0, t, a = rs.randn(3), np.linspace(0.1, 0.2, 4), (rs.randn(3), rs.randn(3))
    # autograd's check draws its directions from NumPy's global generator, whose state depended on the tests a
    # worker ran before: at the solver's default tolerance its steps move the central differences by ~2e-6
    # relative (README), past the check's tolerance for 3 of 60 global seeds (the same on session 23's tree).
    # The directions are pinned; tests/test_scipy_integrate.py's other tests check the second order at
    # tolerance 1e-11, where the solver's steps do not move the differences
    np.random.seed(0)
    for argnum in (1, 2, 3):
        ag_check_grads(odeint, argnum, modes=["rev"], order=2)(func, y0, t, a)


def test_hessian_and_hvp_through_odeint():
    y0, t, a1, a2 = R(3), np.linspace(0.1, 0.2, 4), R(3), R(3)
    g = funcgrad.grad(solve, argnums=(0, 1, 2, 3))
    e = 1e-4
    H = funcgrad.hessian(solve)(y0, t, a1, a2)
    want = np.stack([(g(y0 + e * u, t, a1, a2)[0] - g(y0 - e * u, t, a1, a2)[0]) / (2 * e) for u in np.eye(3)])
    np.testing.assert_allclose(H, want, rtol=1e-5, atol=1e-6)
    args, v = (y0, t, a1, a2), (R(3), 0.1 * R(4), R(3), R(3))
    hv = funcgrad.hvp(solve, args, v)
    plus = g(*[a + e * b for a, b in zip(args, v)])
    minus = g(*[a - e * b for a, b in zip(args, v)])
    for got, p, m in zip(hv, plus, minus):
        np.testing.assert_allclose(got, (p - m) / (2 * e), rtol=1e-5, atol=1e-6)


def test_forward_over_forward():
    # the JVP rule has a JVP of its own: the tangent of J(x) v in a direction u, against central differences
    # of the JVP, and jacfwd(jacfwd(f)) against differences of the gradient
    args = (R(3), np.linspace(0.1, 0.2, 4), R(3), R(3))
    u = (R(3), 0.1 * R(4), R(3), R(3))

    def jmap(*x):
        return funcgrad.jvp(trajectory, x, V)[1]

    _, got = funcgrad.jvp(jmap, args, u)
    e = 1e-4
    want = (jmap(*[a + e * b for a, b in zip(args, u)]) - jmap(*[a - e * b for a, b in zip(args, u)])) / (2 * e)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    H = funcgrad.jacfwd(funcgrad.jacfwd(solve))(*args)
    g = funcgrad.grad(solve)
    want = np.stack([(g(args[0] + e * w, *args[1:]) - g(args[0] - e * w, *args[1:])) / (2 * e) for w in np.eye(3)])
    np.testing.assert_allclose(H, want, rtol=1e-5, atol=1e-6)


def test_second_order_at_odeints_default_tolerance_is_right():
    # autograd's test_odeint raised to both modes (the strict suite run) compares the VJP of the VJP with central
    # differences (eps 1e-6) of odeint at its default tolerance (1.5e-8), which move with the solver's steps by
    # about 1e-6 relative, and fails on that noise. funcgrad's hvp at the default tolerance is right to far less:
    # against differences (eps 1e-4) of gradients at tolerance 1e-11
    def solve_default(y0, t, a1, a2):
        return np.sum(np.sin(odeint(func, y0, t, args=(a1, a2))))

    rs = np.random.RandomState(7)
    args = (rs.randn(3), np.linspace(0.1, 0.2, 4), rs.randn(3), rs.randn(3))
    v = (rs.randn(3), 0.1 * rs.randn(4), rs.randn(3), rs.randn(3))
    hv = funcgrad.hvp(solve_default, args, v)
    g = funcgrad.grad(solve, argnums=(0, 1, 2, 3))
    e = 1e-4
    plus, minus = g(*[a + e * b for a, b in zip(args, v)]), g(*[a - e * b for a, b in zip(args, v)])
    for got, p, m in zip(hv, plus, minus):
        np.testing.assert_allclose(got, (p - m) / (2 * e), rtol=1e-6, atol=1e-6)   # (found: 3e-7 absolute)


def _decay(y, t, a):
    return -a * y


def test_third_derivative_is_refused_at_the_users_line():
    # the rules give two derivatives; a third went into the forward-over-forward rule's code and crashed there
    # ("object of type 'float' has no len()")
    def f(a):
        return np.sum(odeint(_decay, np.ones(2), np.linspace(0.0, 1.0, 3), args=(a,)))

    for third in (funcgrad.grad(funcgrad.grad(funcgrad.grad(f))), funcgrad.jacfwd(funcgrad.jacfwd(funcgrad.jacfwd(f)))):
        with pytest.raises(funcgrad.NoDerivativeError, match="third derivative") as ei:
            third(2.0)
        assert __file__ in str(ei.value) and "odeint(_decay" in str(ei.value)   # the call's line


def test_whole_function_refusal_of_the_second_order_names_odeint():
    def f(a):
        return np.sum(odeint(_decay, np.ones(2), np.linspace(0.0, 1.0, 3), args=(a,)))

    with pytest.raises(funcgrad.FuncgradError) as ei:
        funcgrad.grad(funcgrad.grad(f, jit="whole"), jit="whole")(2.0)
    assert "'odeint'" in str(ei.value) and "_jvp" not in str(ei.value)
