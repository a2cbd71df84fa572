"""scipy.special inside differentiated functions, called as users call them.

Every function is checked against central differences in float64, in Python mode
(``jit="kernels"``), pure Python (``jit=False``) and ``jit="auto"``; the forms follow
autograd's tests/test_scipy.py (which arguments are differentiated, which are static orders).
Also: logsumexp's ``axis``/``b``/``keepdims``/``return_sign``, softmax and log_softmax over
every kind of axis, ``jit="auto"`` choosing Python mode for loop code that calls these, ``jit="whole"``
refusing at the user's line, run-time refusals of the derivatives that have no rule, and
``import funcgrad`` leaving scipy.special unimported. autograd, when installed, is an extra oracle.
"""
import functools
import subprocess
import sys
import warnings

import numpy as np
import pytest
import scipy.special
import scipy.special as sp
from scipy.special import gammaln, logsumexp

import funcgrad
from funcgrad.testing import check_grads

rng = np.random.default_rng(0)
R = rng.standard_normal
POS = np.abs(R(4)) + 1.1            # autograd's R(4) ** 2 + 1.1, kept away from 0
MODES = [{"jit": "kernels"}, {"jit": False}, {"jit": "auto"}]


def _check(f, args, argnums=0):
    for kw in MODES:
        check_grads(f, args, argnums=argnums, **kw)


# --------------------------------------------------------------------------- unary functions
def f_gammaln(x):
    return np.sum(gammaln(x) * np.cos(x))


def f_gamma(x):
    return np.sum(sp.gamma(x) * x)


def f_digamma(x):
    return np.sum(sp.digamma(x) ** 2)


def f_psi(x):
    return np.sum(scipy.special.psi(x) * x)


def f_rgamma(x):
    return np.sum(sp.rgamma(x))


def f_erf(x):
    return np.sum(sp.erf(x) * x)


def f_erfc(x):
    return np.sum(sp.erfc(x) ** 2)


def f_erfinv(x):
    return np.sum(sp.erfinv(x) * x)


def f_erfcinv(x):
    return np.sum(sp.erfcinv(x) ** 2)


def f_expit(x):
    return np.sum(sp.expit(x) * x)


def f_logit(x):
    return np.sum(sp.logit(x) ** 2)


def f_entr(x):
    return np.sum(sp.entr(x))


def f_i0(x):
    return np.sum(sp.i0(x))


def f_i1(x):
    return np.sum(sp.i1(x) * x)


def f_j0(x):
    return np.sum(sp.j0(x))


def f_j1(x):
    return np.sum(sp.j1(x) * x)


def f_y0(x):
    return np.sum(sp.y0(x))


def f_y1(x):
    return np.sum(sp.y1(x) * x)


UNARY = [
    (f_gammaln, (0.3, 2.0)), (f_gamma, (0.3, 2.0)), (f_digamma, (0.3, 2.0)), (f_psi, (0.3, 2.0)),
    (f_rgamma, (0.3, 2.0)), (f_erf, (-3.0, 3.0)), (f_erfc, (-3.0, 3.0)), (f_erfinv, (-0.95, 0.95)),
    (f_erfcinv, (0.05, 1.95)), (f_expit, (-4.05, 4.95)), (f_logit, (0.1, 0.9)), (f_entr, (0.1, 3.0)),
    (f_i0, (0.2, 5.0)), (f_i1, (0.2, 5.0)), (f_j0, (0.2, 20.0)), (f_j1, (0.2, 20.0)), (f_y0, (0.2, 20.0)),
    (f_y1, (0.2, 20.0)),
]


@pytest.mark.parametrize("f,lims", UNARY, ids=[f.__name__[2:] for f, _ in UNARY])
def test_unary_functions_match_finite_differences(f, lims):
    x = rng.uniform(lims[0], lims[1], (2, 3))
    _check(f, (x,))
    _check(f, (float(x[0, 0]),))                 # a Python float too


# --------------------------------------------------------------------------- orders and pairs
def f_polygamma(x):
    return np.sum(sp.polygamma(0, x) + sp.polygamma(2, x) * x)


def f_multigammaln(a):
    return np.sum(sp.multigammaln(a, 3))


def f_multigammaln_kw(a):
    return sp.multigammaln(a, d=2)


def f_jn(x):
    return np.sum(sp.jn(2, x))


def f_jv(x):
    return np.sum(sp.jv(1.5, x) * x)


def f_yn(x):
    return np.sum(sp.yn(2, x))


def f_iv(v, x):
    return np.sum(sp.iv(v, x))


def f_ive(v, x):
    return np.sum(sp.ive(v, x))


def f_gammainc(x):
    return np.sum(sp.gammainc(1.7, x) * x)


def f_gammaincc(a, x):
    return np.sum(sp.gammaincc(a, x))


def f_beta(a, b):
    return np.sum(sp.beta(a, b))


def f_betaln(a, b):
    return np.sum(sp.betaln(a, b) * a)


def f_xlogy(x, y):
    return np.sum(sp.xlogy(x, y))


def f_xlog1py(x, y):
    return np.sum(sp.xlog1py(x, y))


def f_rel_entr(x, y):
    return np.sum(sp.rel_entr(x, y))


def test_static_orders():
    x = np.abs(R(4)) + 1.3
    _check(f_polygamma, (x,))
    _check(f_jn, (x,))
    _check(f_jv, (x,))
    _check(f_yn, (x,))
    _check(f_multigammaln, (rng.uniform(4.0, 5.0, (2, 3)),))
    _check(f_multigammaln, (4.5,))
    _check(f_multigammaln_kw, (4.5,))
    _check(f_iv, (np.array([1, 2, 3, 4]), x), argnums=1)        # an integer-array order
    _check(f_iv, (2.5, x), argnums=1)                            # a float order, not differentiated
    _check(f_ive, (rng.uniform(1.0, 50.0, 4), x), argnums=1)
    _check(f_gammainc, (x,))
    _check(f_gammaincc, (rng.uniform(0.5, 3.0, 4), x), argnums=1)


@pytest.mark.parametrize("f", [f_beta, f_betaln, f_xlogy, f_xlog1py, f_rel_entr])
def test_binary_functions_broadcast(f):
    a = np.abs(R((4, 3))) + 0.5
    b = np.abs(R((1, 3))) + 0.5
    _check(f, (a, b), argnums=(0, 1))
    _check(f, (b, 1.7), argnums=(0, 1))


def test_xlogy_is_zero_times_log_at_zero():
    def f(x, y):
        return np.sum(sp.xlogy(x, y))
    gx, gy = funcgrad.grad(f, argnums=(0, 1), jit="kernels")(np.array([0.0, 2.0]), np.array([3.0, 4.0]))
    np.testing.assert_allclose(gx, np.log([3.0, 4.0]))
    np.testing.assert_allclose(gy, [0.0, 0.5])


# --------------------------------------------------------------------------- logsumexp
def lse_default(a):
    return logsumexp(a)


def lse_axis_keep(a, axis, keepdims):
    return np.sum(np.sin(logsumexp(a, axis=axis, keepdims=keepdims)))


def lse_b(a, b, axis, keepdims):
    return np.sum(np.cos(sp.logsumexp(a, axis=axis, b=b, keepdims=keepdims)))


def lse_sign(a, b):
    v, s = scipy.special.logsumexp(a, axis=0, b=b, return_sign=True)
    return np.sum(v * s + v ** 2)


def lse_sign_no_b(a):
    v, s = sp.logsumexp(a, return_sign=True)
    return v * s


@pytest.mark.parametrize("shape", [(1,), (4,), (3, 4), (4, 5, 6), (1, 5)])
@pytest.mark.parametrize("axis", [None, 0, -1, (0, 1)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_logsumexp_axis_keepdims(shape, axis, keepdims):
    if isinstance(axis, tuple) and len(shape) < 2:
        return
    a = R(shape)
    _check(functools.partial(lse_axis_keep, axis=axis, keepdims=keepdims), (a,))
    if axis is not None and not isinstance(axis, tuple):
        _check(lse_axis_keep, (a, axis, keepdims))              # an int axis known only when the function runs


@pytest.mark.parametrize("shape,bshape", [((4,), (4,)), ((3, 4), (3, 4)), ((2, 3, 4), (2, 3, 4)),
                                          ((3, 4), (4,)), ((3, 1), (3, 4))])
@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("keepdims", [False, True])
def test_logsumexp_b(shape, bshape, axis, keepdims):
    if axis == 1 and max(len(shape), len(bshape)) < 2:
        return
    a, b = R(shape), np.exp(R(bshape))
    _check(functools.partial(lse_b, axis=axis, keepdims=keepdims), (a, b), argnums=(0, 1))


def test_logsumexp_default_and_return_sign():
    a = 0.1 * R((3, 2))
    _check(lse_default, (a,))
    np.testing.assert_allclose(funcgrad.grad(lse_default)(a), np.exp(a - scipy.special.logsumexp(a)))
    b = np.array([1.0, -30.0, 0.5])[:, None] * np.ones((3, 2))      # negative sums
    _check(lse_sign, (a, b), argnums=(0, 1))
    _check(lse_sign_no_b, (a,))
    v, sgn = sp.logsumexp(a, axis=0, b=b, return_sign=True)
    assert sgn[0] == -1 and sgn[1] == -1
    np.testing.assert_allclose(funcgrad.jit(lse_sign, strategy="kernels")(a, b), np.sum(v * sgn + v ** 2), rtol=1e-12)


# --------------------------------------------------------------------------- softmax family
def softmax_axes(x, axis):
    return np.sum(sp.softmax(x, axis=axis) * np.cos(x))


def log_softmax_axes(x, axis):
    return np.sum(sp.log_softmax(x, axis) * np.cos(x))


def softmax_default(x):
    return np.sum(scipy.special.softmax(x) ** 2)


@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 1), (0, 2)])
def test_softmax_and_log_softmax(axis):
    x = R((2, 3, 4))
    for f in (softmax_axes, log_softmax_axes):
        fa = functools.partial(f, axis=axis)
        _check(fa, (x,))
        np.testing.assert_allclose(funcgrad.jit(fa, strategy="kernels")(x), f(x, axis), rtol=1e-12)
        if isinstance(axis, int):
            _check(f, (x, axis))                                # an int axis known only when the function runs
    _check(softmax_default, (x,))


# --------------------------------------------------------------------------- how it runs
def loop_special(x, n):
    acc = 0.0
    for i in range(n):
        acc = acc + np.sum(sp.expit(x * i) * gammaln(x + i))
    return acc


def test_auto_runs_loops_calling_scipy_as_python_and_whole_refuses_at_the_line():
    x = np.abs(R(3)) + 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("error", funcgrad.errors.FuncgradWarning)                      # no fallback warning: auto chose Python mode itself
        g = funcgrad.grad(loop_special)(x, 4)
    _check(loop_special, (x, 4))
    with pytest.raises(funcgrad.CompileError) as e:
        funcgrad.grad(loop_special, jit="whole")(x, 4)
    msg = str(e.value)
    assert "test_scipy_special.py" in msg and "sp.expit(x * i)" in msg
    assert "numba" not in msg.lower().replace("numba cannot compile", "")
    np.testing.assert_allclose(funcgrad.grad(loop_special, jit=False)(x, 4), g, rtol=1e-12)


def other_ufuncs(x, c, n):
    acc = 0.0
    for i in range(n):
        acc = acc + np.sum(x * sp.gammasgn(c)) * sp.zeta(2.0 + i, 1.0) + np.sum(sp.gammasgn(x))
    return acc


def test_scipy_ufuncs_without_a_rule_run_on_values_not_differentiated():
    x, c = np.array([0.5, -0.5, 1.5]), np.array([2.0, -0.5, -1.5])
    want = sp.gammasgn(c) * sum(sp.zeta(2.0 + i, 1.0) for i in range(3))   # gammasgn(x): zero derivative
    with warnings.catch_warnings():
        warnings.simplefilter("error", funcgrad.errors.FuncgradWarning)
        for kw in MODES:
            np.testing.assert_allclose(funcgrad.grad(other_ufuncs, **kw)(x, c, 3), want, rtol=1e-12)


def order_grad(v, x):
    return np.sum(sp.iv(v, x))


def gammainc_a(a, x):
    return np.sum(sp.gammainc(a, x))


def polygamma_n(n, x):
    return np.sum(sp.polygamma(n, x))


@pytest.mark.parametrize("f,args,what", [(order_grad, (1.5, np.array([1.0, 2.0])), "order v"),
                                         (gammainc_a, (1.5, np.array([1.0, 2.0])), "in a"),
                                         (polygamma_n, (1.0, np.array([1.0, 2.0])), "integer order n")])
def test_derivatives_without_a_rule_are_refused_at_the_users_line(f, args, what):
    for kw in MODES:
        with pytest.raises(funcgrad.NoDerivativeError) as e:
            funcgrad.grad(f, **kw)(*args)
        text = str(e.value) + "".join(getattr(e.value, "__notes__", []))
        assert what in text and "test_scipy_special.py" in text, text
    # the same calls are fine when only x is differentiated
    _check(f, args, argnums=1)


def test_import_funcgrad_does_not_import_scipy_special():
    code = ("import sys, funcgrad; "
            "print(sorted(m for m in ('scipy.special', 'scipy.stats', 'scipy.integrate') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_keys_registered_after_a_late_import(tmp_path):
    script = tmp_path / "late.py"
    script.write_text("import sys\n"
                      "import numpy as np, funcgrad\n"
                      "assert 'scipy.special' not in sys.modules\n"
                      "import scipy.special\n"
                      "def f(x):\n"
                      "    return np.sum(scipy.special.gammaln(x)) + scipy.special.logsumexp(x)\n"
                      "print(repr(list(funcgrad.grad(f)(np.array([1.5, 2.5])))))\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = np.array(eval(out.stdout.strip().replace("np.float64", "float")))
    x = np.array([1.5, 2.5])
    np.testing.assert_allclose(got, sp.digamma(x) + np.exp(x - sp.logsumexp(x)), rtol=1e-12)


# --------------------------------------------------------------------------- autograd as an oracle
AG_CASES = [
    ("gammaln", (POS,)), ("digamma", (POS,)), ("gamma", (POS,)), ("rgamma", (POS,)), ("erf", (R(4),)),
    ("erfc", (R(4),)), ("erfinv", (rng.uniform(-0.9, 0.9, 4),)), ("erfcinv", (rng.uniform(0.1, 1.9, 4),)),
    ("expit", (R(4),)), ("logit", (rng.uniform(0.1, 0.9, 4),)), ("i0", (POS,)), ("i1", (POS,)), ("j0", (POS,)),
    ("j1", (POS,)), ("y0", (POS,)), ("y1", (POS,)), ("beta", (POS, POS[::-1])), ("betaln", (POS, POS[::-1])),
]


def _ag_value(name, args):
    import autograd.scipy.special as ags  # optional oracle
    import autograd.numpy as anp
    fn = getattr(ags, name)
    return lambda *a: anp.sum(fn(*a) * anp.arange(1.0, 5.0))


def _fg_value(name):
    return {"gammaln": ag_gammaln, "digamma": ag_digamma, "gamma": ag_gamma, "rgamma": ag_rgamma, "erf": ag_erf,
            "erfc": ag_erfc, "erfinv": ag_erfinv, "erfcinv": ag_erfcinv, "expit": ag_expit, "logit": ag_logit,
            "i0": ag_i0, "i1": ag_i1, "j0": ag_j0, "j1": ag_j1, "y0": ag_y0, "y1": ag_y1, "beta": ag_beta,
            "betaln": ag_betaln}[name]


W = np.arange(1.0, 5.0)


def ag_gammaln(x): return np.sum(sp.gammaln(x) * W)      # noqa: E704
def ag_digamma(x): return np.sum(sp.digamma(x) * W)      # noqa: E704
def ag_gamma(x): return np.sum(sp.gamma(x) * W)          # noqa: E704
def ag_rgamma(x): return np.sum(sp.rgamma(x) * W)        # noqa: E704
def ag_erf(x): return np.sum(sp.erf(x) * W)              # noqa: E704
def ag_erfc(x): return np.sum(sp.erfc(x) * W)            # noqa: E704
def ag_erfinv(x): return np.sum(sp.erfinv(x) * W)        # noqa: E704
def ag_erfcinv(x): return np.sum(sp.erfcinv(x) * W)      # noqa: E704
def ag_expit(x): return np.sum(sp.expit(x) * W)          # noqa: E704
def ag_logit(x): return np.sum(sp.logit(x) * W)          # noqa: E704
def ag_i0(x): return np.sum(sp.i0(x) * W)                # noqa: E704
def ag_i1(x): return np.sum(sp.i1(x) * W)                # noqa: E704
def ag_j0(x): return np.sum(sp.j0(x) * W)                # noqa: E704
def ag_j1(x): return np.sum(sp.j1(x) * W)                # noqa: E704
def ag_y0(x): return np.sum(sp.y0(x) * W)                # noqa: E704
def ag_y1(x): return np.sum(sp.y1(x) * W)                # noqa: E704
def ag_beta(a, b): return np.sum(sp.beta(a, b) * W)      # noqa: E704
def ag_betaln(a, b): return np.sum(sp.betaln(a, b) * W)  # noqa: E704


@pytest.mark.parametrize("name,args", AG_CASES, ids=[c[0] for c in AG_CASES])
def test_matches_autograd(name, args):
    autograd = pytest.importorskip("autograd", reason="autograd not installed")
    nums = tuple(range(len(args)))
    want = autograd.grad(_ag_value(name, args), nums)(*args)
    got = funcgrad.grad(_fg_value(name), argnums=nums, jit="kernels")(*args)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_logsumexp_matches_autograd():
    autograd = pytest.importorskip("autograd", reason="autograd not installed")
    import autograd.scipy.special as ags  # optional oracle
    a, b = R((3, 4)), np.exp(R((3, 4)))
    for axis in (None, 0, 1):
        for keepdims in (False, True):
            want = autograd.grad(lambda x: autograd.numpy.sum(
                autograd.numpy.sin(ags.logsumexp(x, axis=axis, b=b, keepdims=keepdims))))(a)
            got_sin = funcgrad.grad(functools.partial(lse_b_sin, axis=axis, keepdims=keepdims))(a, b)
            np.testing.assert_allclose(got_sin, want, rtol=1e-10, atol=1e-12)


def lse_b_sin(a, b, axis, keepdims):
    return np.sum(np.sin(sp.logsumexp(a, axis=axis, b=b, keepdims=keepdims)))


# --------------------------------------------------------------------------- forward mode and second order
def _fd_jvp(f, args, tans, eps=1e-6):
    plus = [a + eps * t for a, t in zip(args, tans)]
    minus = [a - eps * t for a, t in zip(args, tans)]
    return (np.asarray(f(*plus), dtype=float) - np.asarray(f(*minus), dtype=float)) / (2 * eps)


def fw_gamma_family(x, y):
    return (sp.gammaln(x) * sp.digamma(y) + sp.gamma(y) - sp.rgamma(x) + sp.polygamma(1, x) + sp.multigammaln(x + 3, 2)
            + sp.betaln(x, y) + sp.beta(x, y) + sp.gammainc(1.5, x) + sp.gammaincc(2, y))


def fw_errors_logs(x, y):
    u = sp.expit(x - y)
    return (sp.erf(x) + sp.erfc(y) + sp.erfinv(0.5 * u) + sp.erfcinv(u + 0.2) + sp.logit(u) + sp.xlogy(x, y)
            + sp.xlog1py(y, x) + sp.entr(x) + sp.rel_entr(x, y))


def fw_bessel(x, y):
    return (sp.i0(x) + sp.i1(y) + sp.iv(1.5, x) + sp.ive(2, y) + sp.j0(x) + sp.j1(y) + sp.jv(2, x) + sp.jn(1, y)
            + sp.y0(x) + sp.y1(y) + sp.yn(2, x))


def fw_reductions(x, y):
    return (sp.logsumexp(x * y) + sp.logsumexp(x, axis=0, b=y, keepdims=True) + sp.softmax(x * y, axis=0)
            + sp.log_softmax(x - y, axis=(0,)) + sp.logsumexp(x, b=y - 1.0, return_sign=True)[0])


@pytest.mark.parametrize("f", [fw_gamma_family, fw_errors_logs, fw_bessel, fw_reductions])
def test_forward_mode_matches_finite_differences(f):
    args = (rng.uniform(0.5, 2.0, 4), rng.uniform(0.5, 2.0, 4))
    for tans in [(R(4), np.zeros(4)), (np.zeros(4), R(4)), (R(4), R(4))]:
        for kw in ({"jit": "kernels"}, {"jit": False}):
            out, tout = funcgrad.jvp(f, args, tans, **kw)
            np.testing.assert_allclose(out, f(*args), rtol=1e-12)
            np.testing.assert_allclose(tout, _fd_jvp(f, args, tans), rtol=1e-5, atol=1e-6)


def lse_keep(a):
    return np.sum(sp.logsumexp(a, axis=1, keepdims=True))


def second_order(x):
    return np.sum(sp.gammaln(x) * sp.erf(x) + sp.logsumexp(x) * sp.expit(x) + sp.xlogy(x, x + 1.0))


@pytest.mark.parametrize("f,x", [(lse_keep, R((1, 5))), (lse_keep, R((3, 4))), (second_order, np.abs(R(4)) + 0.5)])
def test_second_derivatives(f, x):
    """autograd's test_logsumexp6 checks the gradient of the gradient: here the Hessian, against central
    differences of the gradient."""
    H = funcgrad.hessian(f, jit="kernels")(x)
    g = funcgrad.grad(f, jit="kernels")
    eps = 1e-5
    num = np.stack([(g(x + eps * e.reshape(x.shape)) - g(x - eps * e.reshape(x.shape))) / (2 * eps)
                    for e in np.eye(x.size)], axis=-1).reshape(x.shape + x.shape)
    np.testing.assert_allclose(H, num, rtol=1e-5, atol=1e-6)


def _logistic_and_error_functions(x):
    return np.sum(sp.erf(x) * sp.expit(2.0 * x) + sp.erfc(x) ** 2 + sp.logit(sp.expit(0.5 * x)))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_erf_erfc_expit_logit_compile_whole_as_python(dtype):
    """Numba implementations (math.erf, math.erfc, SciPy's logistic formulas): jit="whole" compiles code calling
    them (it refused it before) and gives Python mode's values, gradients and dtypes."""
    x = np.array([0.3, -1.2, 2.5, -7.0, 6.0], dtype=dtype)
    vw, gw = funcgrad.value_and_grad(_logistic_and_error_functions, jit="whole")(x)
    vp, gp = funcgrad.value_and_grad(_logistic_and_error_functions, jit=False)(x)
    tol = 1e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(vw, vp, rtol=tol)
    np.testing.assert_allclose(gw, gp, rtol=tol, atol=tol)
    assert gw.dtype == dtype
    gs = funcgrad.grad(_logistic_and_error_functions, jit="whole")(0.7)   # a number: Python's float
    np.testing.assert_allclose(gs, funcgrad.grad(_logistic_and_error_functions, jit=False)(0.7), rtol=1e-13)


def _lse_forms(a):
    return (sp.logsumexp(a) + np.sum(sp.logsumexp(a, axis=1) ** 2) + np.sum(sp.logsumexp(a, axis=0, keepdims=True) * a)
            + np.sum(sp.logsumexp(a, keepdims=True)) + sp.logsumexp(a[0], axis=0)
            + np.sum(sp.softmax(a, axis=1) * a) + np.sum(sp.log_softmax(a, axis=0)))


def _lse_two_axes(a):
    return np.sum(sp.logsumexp(a, axis=(0, 1)))


def test_logsumexp_compiles_whole_for_one_axis_or_none():
    """scipy.special.logsumexp without b= (and softmax/log_softmax, written over it) compiles whole for axis None
    or one axis: the same values and gradients as Python mode, SciPy's values at the ends; two axes still run as
    Python (refused by jit="whole" in words)."""
    a = np.random.default_rng(3).standard_normal((3, 4))
    vw, gw = funcgrad.value_and_grad(_lse_forms, jit="whole")(a)
    vp, gp = funcgrad.value_and_grad(_lse_forms, jit=False)(a)
    np.testing.assert_allclose(vw, vp, rtol=1e-13)
    np.testing.assert_allclose(gw, gp, rtol=1e-12, atol=1e-14)
    ends = np.array([[-np.inf, -np.inf], [np.inf, 1.0], [np.nan, 0.0]])
    np.testing.assert_array_equal(funcgrad.jit(_lse_rows)(ends), sp.logsumexp(ends, axis=1))
    with pytest.raises(funcgrad.CompileError, match="logsumexp"):
        funcgrad.grad(_lse_two_axes, jit="whole")(a)
    np.testing.assert_allclose(funcgrad.grad(_lse_two_axes)(a), funcgrad.grad(_lse_two_axes, jit=False)(a))


def _lse_rows(v):
    return sp.logsumexp(v, axis=1)
