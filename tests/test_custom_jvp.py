"""custom_jvp (JAX's convention: ``@f.defjvp`` rule(primals, tangents) -> (out, tangent_out)).

Forward mode (jvp, jacfwd, hvp, hessian) uses the rule; reverse mode (grad, vjp) uses the transpose of the
rule's tangent map; higher orders differentiate the rule's code again. Every derivative is compared with
central differences of a lower-order derivative (or of the function) in float64, in every mode that runs
Python (custom functions and their rules are Python: jit="whole" refuses them at the user's line).
"""
import numpy as np
import pytest
import scipy.special

import funcgrad
import funcgrad.test_util
import funcgrad.testing
from funcgrad.forward_mode import jvp_of_jvp
from tests.support import tagged_line

MODES = [dict(jit=False), dict(mode="python"), dict(mode="auto")]
MODE_IDS = ["nojit", "python", "auto"]


# ----------------------------------------------------------------------------- functions with rules
@funcgrad.custom_jvp
def log1pexp(x):
    return np.log(1.0 + np.exp(x))


@log1pexp.defjvp
def log1pexp_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return log1pexp(x), t * (1.0 - 1.0 / (1.0 + np.exp(x)))


# scipy.special.dawsn has no rule in funcgrad: the custom function gives it one. The rule reads the
# function itself, so the rule's own derivative (second order) goes through the rule again.
dawsn = funcgrad.custom_jvp(scipy.special.dawsn)


@dawsn.defjvp
def dawsn_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    y = dawsn(x)
    return y, (1.0 - 2.0 * x * y) * t


@funcgrad.custom_jvp
def sin_times(x, y):
    return np.sin(x) * y


@sin_times.defjvp
def sin_times_jvp(primals, tangents):
    x, y = primals
    x_dot, y_dot = tangents
    return sin_times(x, y), np.cos(x) * x_dot * y + np.sin(x) * y_dot


def _fd_jvp(f, args, tans, eps=1e-6):
    plus = [a + eps * t for a, t in zip(args, tans)]
    minus = [a - eps * t for a, t in zip(args, tans)]
    return (np.asarray(f(*plus)) - np.asarray(f(*minus))) / (2 * eps)


def _fd_grad(f, x, eps=1e-6):
    x = np.asarray(x, dtype=float)
    g = np.zeros(x.size)
    for k in range(x.size):
        e = np.zeros(x.size)
        e[k] = eps
        g[k] = (f(x + e.reshape(x.shape)) - f(x - e.reshape(x.shape))) / (2 * eps)
    return g.reshape(x.shape)


def _fd_hessian(f, x, eps=1e-5):
    g = funcgrad.grad(f, jit=False)
    return np.stack([(g(x + eps * e) - g(x - eps * e)) / (2 * eps) for e in np.eye(x.size)], axis=-1)


# ----------------------------------------------------------------------------- programs calling them
def straight(x):
    return np.sum(log1pexp(x) * dawsn(x) + sin_times(x, 2.0) ** 2)


def loop(x):
    s = 0.0
    for i in range(x.shape[0]):
        s = s + dawsn(x[i]) * log1pexp(x[(i + 1) % x.shape[0]])
    return s + np.sum(sin_times(x, x) ** 2)


def inplace(x):
    y = np.zeros(x.shape[0])
    for i in range(x.shape[0]):
        y[i] = log1pexp(x[i] * x[(i + 1) % x.shape[0]])
    y[0] = dawsn(y[1])
    return np.sum(y * y)


def branch(x):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > 0:
            s = s + dawsn(x[i]) ** 2
        else:
            s = s - log1pexp(x[i]) * x[0]
    return s


PROGRAMS = [straight, loop, inplace, branch]
X = np.array([0.3, -0.5, 0.8, 0.1])
V = np.array([1.0, 0.5, -2.0, 0.25])


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("f", PROGRAMS)
def test_jvp_and_grad_against_central_differences(f, kw):
    y, t = funcgrad.jvp(f, (X,), (V,), **kw)
    np.testing.assert_allclose(y, f(X), rtol=1e-13)
    np.testing.assert_allclose(t, _fd_jvp(f, (X,), (V,)), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(funcgrad.grad(f, **kw)(X), _fd_grad(f, X), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("kw", MODES[1:], ids=MODE_IDS[1:])
@pytest.mark.parametrize("f", PROGRAMS)
def test_hessian_and_hvp_against_differences_of_the_gradient(f, kw):
    H = funcgrad.hessian(f, **kw)(X)
    np.testing.assert_allclose(H, _fd_hessian(f, X), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(funcgrad.hvp(f, (X,), (V,), **kw), H @ V, rtol=1e-10, atol=1e-10)


def test_jvp_of_jvp_is_the_second_directional_derivative():
    U = np.array([0.2, -1.0, 0.4, 0.9])
    _, (second,) = jvp_of_jvp(loop, (X,), (V,), (U,), (np.zeros(4),))
    np.testing.assert_allclose(second, U @ _fd_hessian(loop, X) @ V, rtol=1e-6, atol=1e-6)


def test_the_rule_is_used_where_the_function_would_overflow():
    # log(1 + exp(x)) differentiated as written is exp(x) / (1 + exp(x)) = inf / inf at x = 1000
    x = np.array([1000.0, 0.5])
    with np.errstate(over="ignore"):
        _, t = funcgrad.jvp(lambda x: np.sum(log1pexp(x)), (x,), (np.ones(2),))
        g = funcgrad.grad(lambda x: np.sum(log1pexp(x)))(x)
    s = 1.0 / (1.0 + np.exp(-0.5))
    np.testing.assert_allclose(t, 1.0 + s, rtol=1e-14)
    np.testing.assert_allclose(g, [1.0, s], rtol=1e-14)


def test_the_rule_is_used_even_where_it_disagrees_with_the_function():
    # a surrogate derivative (a straight-through estimator): forward and reverse mode both follow the rule
    @funcgrad.custom_jvp
    def ste_round(x):
        return np.round(x)

    @ste_round.defjvp
    def ste_round_jvp(primals, tangents):
        return ste_round(primals[0]), tangents[0]

    def f(x):
        return np.sum(ste_round(x) * x)

    x = np.array([0.4, 1.6, -2.2])
    _, t = funcgrad.jvp(f, (x,), (np.ones(3),))
    np.testing.assert_allclose(t, np.sum(np.round(x) + x))
    np.testing.assert_allclose(funcgrad.grad(f)(x), np.round(x) + x)
    np.testing.assert_allclose(funcgrad.hessian(f)(x), 2 * np.eye(3))


def test_custom_function_transformed_directly():
    x, y = np.array([0.3, -1.2]), 1.7
    out, t = funcgrad.jvp(sin_times, (x, y), (np.array([1.0, 2.0]), 0.5))
    np.testing.assert_allclose(out, np.sin(x) * y)
    np.testing.assert_allclose(t, np.cos(x) * np.array([1.0, 2.0]) * y + np.sin(x) * 0.5, rtol=1e-14)
    J = funcgrad.jacfwd(sin_times)(x, y)
    np.testing.assert_allclose(J, np.diag(np.cos(x) * y), rtol=1e-14)
    np.testing.assert_allclose(funcgrad.jacrev(sin_times)(x, y), J, rtol=1e-14)
    gx, gy = funcgrad.grad(lambda x, y: np.sum(sin_times(x, y)), argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gx, np.cos(x) * y, rtol=1e-14)
    np.testing.assert_allclose(gy, np.sum(np.sin(x)), rtol=1e-14)


def test_any_order_of_a_scalar_function():
    d1 = funcgrad.grad(dawsn)
    d2 = funcgrad.grad(d1)
    d3 = funcgrad.grad(d2)
    x, e = 0.7, 1e-4
    D = scipy.special.dawsn(x)
    np.testing.assert_allclose(d1(x), 1 - 2 * x * D, rtol=1e-13)
    np.testing.assert_allclose(d2(x), -2 * D - 2 * x * (1 - 2 * x * D), rtol=1e-12)   # D'' = -2D - 2xD'
    np.testing.assert_allclose(d3(x), (d2(x + e) - d2(x - e)) / (2 * e), rtol=1e-7)


def test_check_grads_second_order_both_modes():
    funcgrad.testing.check_grads(loop, (X,), order=2, modes=("fwd", "rev"))
    funcgrad.test_util.check_grads(lambda x: sin_times(x, x * x), modes=["fwd", "rev"], order=2)(X)


def test_an_argument_that_is_not_differentiated_gets_a_zero_tangent():
    seen = []

    @funcgrad.custom_jvp
    def power(x, n):
        return x ** n

    @power.defjvp
    def power_jvp(primals, tangents):
        x, n = primals
        seen.append(tangents[1])
        return power(x, n), n * x ** (n - 1) * tangents[0]

    def f(x, n, c):
        return np.sum(power(x, n) * c)

    x, c = np.array([0.5, 2.0]), np.array([1.0, -3.0])
    _, t = funcgrad.jvp(f, (x, 3, c), (np.ones(2), 0, np.zeros(2)))
    np.testing.assert_allclose(t, np.sum(3 * x ** 2 * c))
    assert seen and not np.any(seen[-1])
    np.testing.assert_allclose(funcgrad.grad(f)(x, 3, c), 3 * x ** 2 * c, rtol=1e-14)
    np.testing.assert_allclose(funcgrad.hessian(f)(x, 3, c), np.diag(6 * x * c), rtol=1e-14)


def test_defjvps_one_rule_per_argument():
    @funcgrad.custom_jvp
    def f(x, y):
        return np.exp(x) * np.cos(y)

    f.defjvps(lambda x_dot, ans, x, y: ans * x_dot,
              lambda y_dot, ans, x, y: -np.exp(x) * np.sin(y) * y_dot)

    def h(x, y):
        return np.sum(f(x, y) ** 2)

    x, y = np.array([0.1, -0.4]), np.array([1.2, 0.3])
    vx, vy = np.array([1.0, 2.0]), np.array([-0.5, 0.25])
    _, t = funcgrad.jvp(h, (x, y), (vx, vy))
    np.testing.assert_allclose(t, _fd_jvp(h, (x, y), (vx, vy)), rtol=1e-7)
    gx, gy = funcgrad.grad(h, argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gx, _fd_grad(lambda x: h(x, y), x), rtol=1e-7)
    np.testing.assert_allclose(gy, _fd_grad(lambda y: h(x, y), y), rtol=1e-7)
    np.testing.assert_allclose(funcgrad.hessian(h)(x, y), _fd_hessian(lambda x: h(x, y), x), rtol=1e-6)

    g = funcgrad.custom_jvp(lambda x, y: x * 2.0)
    g.defjvps(lambda x_dot, ans, x, y: 2.0 * x_dot, None)   # None: y has no effect on the output
    np.testing.assert_allclose(funcgrad.jvp(g, (1.0, 3.0), (1.0, 1.0))[1], 2.0)


def test_custom_vjp_function_with_a_jvp_rule_works_in_both_modes():
    @funcgrad.custom_vjp
    def clip_grad(x):
        return np.sin(x)

    # reverse mode: the given bwd (clipped); forward mode: the given rule
    clip_grad.defvjp(lambda x: (np.sin(x), x), lambda x, g: (np.clip(g * np.cos(x), -0.5, 0.5),))
    clip_grad.defjvp(lambda p, t: (clip_grad(p[0]), np.cos(p[0]) * t[0]))
    x = np.array([0.1, 2.0])
    np.testing.assert_allclose(funcgrad.grad(lambda x: np.sum(clip_grad(x)))(x), np.clip(np.cos(x), -0.5, 0.5))
    np.testing.assert_allclose(funcgrad.jvp(clip_grad, (x,), (np.ones(2),))[1], np.cos(x), rtol=1e-14)


# ----------------------------------------------------------------------------- refusals, at the user's line
def line_of(tag):
    return tagged_line(__file__, tag)


def test_custom_vjp_under_forward_mode_transposes_its_vjp():
    # no JVP rule: forward mode derives one from the VJP (bwd is linear in its cotangent)
    @funcgrad.custom_vjp
    def my_op(x):
        return np.sin(x)

    my_op.defvjp(lambda x: (np.sin(x), x), lambda x, g: (g * np.cos(x),))

    def h(x):
        return my_op(x) * 2.0

    assert funcgrad.jvp(h, (0.3,), (1.5,))[1] == pytest.approx(3.0 * np.cos(0.3), rel=1e-14)
    assert funcgrad.hessian(h)(0.3) == pytest.approx(-2.0 * np.sin(0.3), rel=1e-12)
    x = np.array([0.2, -1.0])
    np.testing.assert_allclose(funcgrad.jacfwd(h)(x), np.diag(2.0 * np.cos(x)), rtol=1e-14)
    np.testing.assert_allclose(funcgrad.grad(h)(0.3), 2 * np.cos(0.3))   # reverse mode has its rule


def test_custom_vjp_whose_vjp_cannot_be_transposed_is_refused_in_forward_mode():
    @funcgrad.custom_vjp
    def my_op(x):
        return np.sin(x)

    my_op.defvjp(lambda x: (np.sin(x), x), lambda x, g: (scipy.special.ellipe(g) * np.cos(x),))  # LINE: bwd

    def h(x):
        return my_op(x) * 2.0   # LINE: call

    for call in (lambda: funcgrad.jvp(h, (0.3,), (1.0,)), lambda: funcgrad.hessian(h)(0.3),
                 lambda: funcgrad.jacfwd(h)(np.ones(2))):
        with pytest.raises(funcgrad.NoDerivativeError, match=r"custom_vjp function 'my_op' has no forward-mode "
                                                             r"\(JVP\) rule, and funcgrad could not derive") as err:
            call()
        msg = str(err.value) + "\n".join(getattr(err.value, "__notes__", []))
        assert "my_op.defjvp" in msg and "scipy.special.ellipe has no derivative rule" in msg
        assert f"{__file__}:{line_of('bwd')}" in msg and f"{__file__}:{line_of('call')}" in msg, msg
        assert "funcgrad/" not in msg, msg


def test_custom_jvp_without_a_rule_is_refused_in_both_modes():
    f = funcgrad.custom_jvp(np.tanh)

    def h(x):
        return f(x) * 2.0

    with pytest.raises(funcgrad.NoDerivativeError, match="custom_jvp function 'tanh' has no forward-mode") as err:
        funcgrad.jvp(h, (0.3,), (1.0,))
    assert err.value.filename == __file__
    with pytest.raises(funcgrad.NoDerivativeError, match="custom_jvp function 'tanh' has no derivative rule") as err:
        funcgrad.grad(h)(0.3)
    assert err.value.filename == __file__ and "defjvp" in str(err.value)
    assert h(0.3) == pytest.approx(2 * np.tanh(0.3))   # without a differentiated value it just runs
    assert funcgrad.jit(h, mode="python")(0.3) == pytest.approx(2 * np.tanh(0.3))


def test_reverse_mode_refuses_a_rule_it_cannot_transpose_and_names_the_function():
    @funcgrad.custom_jvp
    def opaque_sin(x):
        return np.sin(x)

    @opaque_sin.defjvp
    def opaque_sin_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        try:                                   # not code funcgrad differentiates
            d = np.cos(x)
        except FloatingPointError:
            d = 0.0
        return opaque_sin(x), d * t

    def h(x):
        return np.sum(opaque_sin(x) ** 2)

    x = np.array([0.3, 0.4])
    _, t = funcgrad.jvp(h, (x,), (np.ones(2),))          # forward mode calls the rule as it is
    np.testing.assert_allclose(t, np.sum(2 * np.sin(x) * np.cos(x)), rtol=1e-14)
    with pytest.raises(funcgrad.NoDerivativeError, match="custom_jvp function 'opaque_sin'") as err:
        funcgrad.grad(h)(x)
    msg = str(err.value)
    assert "opaque_sin.defvjp(fwd, bwd)" in msg and "try/except" in msg
    assert err.value.filename == __file__ and "return np.sum(opaque_sin(x) ** 2)" in msg, msg   # the user's line


def test_whole_function_compilation_refuses_a_custom_function_at_the_users_line():
    def h(x):
        s = 0.0
        for i in range(x.shape[0]):
            s = s + log1pexp(x[i])
        return s

    with pytest.raises(funcgrad.CompileError, match="custom_jvp function 'log1pexp'") as err:
        funcgrad.jvp(h, (X,), (V,), jit="whole")
    assert err.value.filename == __file__
    np.testing.assert_allclose(funcgrad.jvp(h, (X,), (V,))[1], _fd_jvp(h, (X,), (V,)), rtol=1e-7)   # auto: Python


def test_the_generated_forward_code_calls_the_rule():
    text = funcgrad.source(straight, X, forward=True)
    assert ".jvp_rule((x,), (t_x,))" in text


def test_decorator_forms_and_bad_rules():
    @funcgrad.custom_jvp
    def f(x):
        return 2.0 * x

    def rule(p, t):
        return f(p[0]), 2.0 * t[0]

    assert f.defjvp(rule) is rule            # as in JAX: the rule stays bound to its name
    assert f(3.0) == 6.0 and f.__name__ == "f"
    with pytest.raises(TypeError, match="defjvp"):
        f.defjvp(3)


# ----------------------------------------------------------------------------- second order through a VJP-only rule
@funcgrad.custom_vjp
def scaled_sin(x, y, fn):
    """sin(x) * y with a static function argument (given no cotangent) and a VJP only."""
    return fn(x) * y


def _scaled_sin_fwd(x, y, fn):
    return scaled_sin(x, y, fn), (x, y, fn)


def _scaled_sin_bwd(res, g):
    x, y, fn = res
    gy = np.sum(np.sin(x) * g) if np.ndim(y) == 0 else np.sin(x) * g
    return np.cos(x) * y * g, gy, None


scaled_sin.defvjp(_scaled_sin_fwd, _scaled_sin_bwd)


def uses_scaled_sin(x, y):
    return np.sum(scaled_sin(x * x, y, np.sin) ** 2) + y * np.sum(x)


def uses_plain_sin(x, y):
    return np.sum((np.sin(x * x) * y) ** 2) + y * np.sum(x)


@pytest.mark.parametrize("kw", [dict(mode="auto"), dict(mode="python"), dict(jit=False)],
                         ids=["auto", "python", "jit-False"])
def test_second_order_through_a_vjp_only_rule(kw):
    """hessian (forward over reverse), hvp, grad of grad (reverse over reverse) and jvp through a custom_vjp
    function with no JVP rule equal those of the same function written without a rule (whose derivatives are
    checked against central differences here too)."""
    x, y = np.array([0.3, -0.7, 1.1]), 1.7
    H = funcgrad.hessian(uses_scaled_sin, **kw)(x, y)
    H_plain = funcgrad.hessian(uses_plain_sin)(x, y)
    np.testing.assert_allclose(H, H_plain, rtol=1e-12, atol=1e-12)
    g_plain = lambda x: funcgrad.grad(uses_plain_sin)(x, y)   # noqa: E731
    for i in range(3):
        e = np.eye(3)[i]
        np.testing.assert_allclose(H_plain[i], (g_plain(x + 1e-6 * e) - g_plain(x - 1e-6 * e)) / 2e-6,
                                   rtol=1e-6, atol=1e-6)
    v = np.array([1.0, 2.0, -1.0])
    np.testing.assert_allclose(funcgrad.hvp(uses_scaled_sin, (x, y), (v, 0.0), **kw)[0], H_plain @ v, rtol=1e-12)
    out, t = funcgrad.jvp(uses_scaled_sin, (x, y), (v, 0.5), **kw)
    _, t_plain = funcgrad.jvp(uses_plain_sin, (x, y), (v, 0.5))
    assert out == pytest.approx(uses_plain_sin(x, y), rel=1e-14) and t == pytest.approx(t_plain, rel=1e-12)

    def inner(fn):
        return lambda x, y: np.sum(funcgrad.grad(fn, argnums=(0, 1), **kw)(x, y)[0] * x) * y

    gg = funcgrad.grad(inner(uses_scaled_sin), argnums=(0, 1), **kw)(x, y)
    gg_plain = funcgrad.grad(inner(uses_plain_sin), argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gg[0], gg_plain[0], rtol=1e-12)
    assert gg[1] == pytest.approx(gg_plain[1], rel=1e-12)
    funcgrad.testing.check_grads(uses_scaled_sin, (x, y), order=2, modes=("rev",), **kw)


def test_forward_over_forward_through_a_vjp_only_rule_is_refused():
    x, y = np.array([0.3, -0.7]), 1.7
    with pytest.raises(funcgrad.NoDerivativeError, match="forward mode over forward mode") as err:
        funcgrad.jacfwd(funcgrad.jacfwd(uses_scaled_sin))(x, y)
    msg = str(err.value) + "\n".join(getattr(err.value, "__notes__", []))
    assert "scaled_sin.defjvp" in msg and f"{__file__}:" in msg and "funcgrad/" not in msg, msg


def test_a_vjp_only_rule_with_a_complex_argument_is_refused_in_forward_mode():
    @funcgrad.custom_vjp
    def csq(z):
        return np.real(z * z)

    csq.defvjp(lambda z: (csq(z), z), lambda z, g: (2.0 * g * np.conj(z),))
    with pytest.raises(funcgrad.NoDerivativeError, match="could not derive one from its VJP: a complex argument"):
        funcgrad.jvp(lambda z: csq(z) * 2.0, (0.3 + 0.2j,), (1.0 + 0j,))


def test_a_vjp_only_rule_with_a_moving_container_argument_is_refused_in_forward_mode():
    # the derived JVP pairs cotangents with tangents argument by argument: a tuple argument whose entries move
    # is refused (never a silently dropped tangent); a constant one is fine
    @funcgrad.custom_vjp
    def affine(ps, y):
        return ps[0] * y + ps[1]

    affine.defvjp(lambda ps, y: (affine(ps, y), (ps, y)), lambda r, g: ((g * r[1], g), g * r[0][0]))
    assert funcgrad.jvp(lambda y: affine((1.5, 2.0), y), (3.0,), (1.0,)) == pytest.approx((6.5, 1.5), rel=1e-14)
    with pytest.raises(funcgrad.NoDerivativeError, match="could not derive one from its VJP: an argument that is a "
                                                         "container") as err:
        funcgrad.jvp(lambda a, y: affine((a, 2.0), y), (1.5, 3.0), (1.0, 0.0))
    assert err.value.filename == __file__


# ----------------------------------------------------------------------------- rules that iterate to a tolerance
def _newton_step(a, x):
    return x - 0.05 * (x * x - a)


@funcgrad.custom_vjp
def iterated_root(a):
    """sqrt(a) by iterating x <- x - 0.05 (x^2 - a) to convergence."""
    x = 10.0
    x_new = _newton_step(a, x)
    while np.abs(x_new - x) > 1e-13:
        x = x_new
        x_new = _newton_step(a, x)
    return x_new


def _iterated_root_fwd(a):
    r = iterated_root(a)
    return r, (a, r)


def _iterated_root_bwd(res, g):
    """The adjoint of the fixed point, u = F_x u + g, also iterated until it stops moving."""
    a, x = res
    fx = 1.0 - 0.1 * x
    u = g
    u_new = fx * u + g
    while np.abs(u_new - u) > 1e-13:
        u = u_new
        u_new = fx * u + g
    return (0.05 * u_new,)


iterated_root.defvjp(_iterated_root_fwd, _iterated_root_bwd)


@funcgrad.custom_jvp
def iterated_scale(x):
    return 3.0 * x


@iterated_scale.defjvp
def _iterated_scale_jvp(primals, tangents):
    """The tangent 3 t as the limit of t_k = t_{k-1} / 2 + 1.5 t, iterated while it moves."""
    (x,), (t,) = primals, tangents
    s = t
    s_new = 0.5 * s + 1.5 * t
    while np.abs(s_new - s) > 1e-13:
        s = s_new
        s_new = 0.5 * s + 1.5 * t
    return 3.0 * x, s_new


def test_rules_that_iterate_to_a_tolerance_are_transposed_at_a_point_where_they_iterate():
    """A rule is linear in its cotangent (tangent), but its code may iterate until it stops moving: at a zero
    cotangent it stops at once. funcgrad transposes it at a nonzero point, so forward mode over a VJP-only
    rule and reverse mode over a JVP-only rule give the derivative (at zeros they gave 0.0929 for 0.3536)."""
    exact = 0.5 / np.sqrt(2.0)
    assert funcgrad.grad(iterated_root)(2.0) == pytest.approx(exact, rel=1e-10)
    assert funcgrad.jvp(iterated_root, (2.0,), (1.0,))[1] == pytest.approx(exact, rel=1e-10)
    assert funcgrad.jvp(iterated_root, (2.0,), (-2.5,))[1] == pytest.approx(-2.5 * exact, rel=1e-10)
    assert funcgrad.grad(iterated_scale)(0.7) == pytest.approx(3.0, rel=1e-10)
