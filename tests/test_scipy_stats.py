"""scipy.stats inside differentiated functions, called as users call them.

``from scipy.stats import norm; norm.logpdf(x, loc, scale)``, ``scipy.stats.norm.logpdf``,
``stats.multivariate_normal.logpdf(x, mean, cov)``: every method against central differences in
float64, in Python mode, pure Python and ``jit="auto"``, with loc/scale positional and as
keywords, and parameters broadcast against each other (the forms of autograd's
tests/test_scipy.py). The multivariate normal's cov gradient matches finite differences of
SciPy's own function (which reads the lower triangle), and symmetrized as autograd's tests do.
Derivatives with no rule (a cdf's shape parameter) are refused at the user's line. autograd, when
installed, is an extra oracle.
"""
import functools

import numpy as np
import pytest
import scipy.stats
from scipy import stats
from scipy.stats import multivariate_normal as mvn, norm

import funcgrad
from funcgrad.testing import check_grads

rng = np.random.default_rng(0)
R = rng.standard_normal
U = rng.uniform
MODES = [{"jit": "kernels"}, {"jit": False}, {"jit": "auto"}]


def _check(f, args, argnums=0, **tol):
    for kw in MODES:
        check_grads(f, args, argnums=argnums, **tol, **kw)


def _pos(*shape):
    return R(shape) ** 2 + 1.1


# --------------------------------------------------------------------------- norm
def norm_logpdf(x, loc, scale):
    return np.sum(norm.logpdf(x, loc, scale))


def norm_pdf(x, loc, scale):
    return np.sum(scipy.stats.norm.pdf(x, loc, scale))


def norm_cdf(x, loc, scale):
    return np.sum(stats.norm.cdf(x, loc=loc, scale=scale))


def norm_logcdf(x, loc, scale):
    return np.sum(norm.logcdf(x, loc, scale=scale))


def norm_sf(x, loc, scale):
    return np.sum(norm.sf(x, loc, scale))


def norm_logsf(x, loc, scale):
    return np.sum(norm.logsf(x, scale=scale, loc=loc))


NORM = [norm_logpdf, norm_pdf, norm_cdf, norm_logcdf, norm_sf, norm_logsf]


@pytest.mark.parametrize("f", NORM)
def test_norm(f):
    _check(f, (R(4), R(4), _pos(4)), argnums=(0, 1, 2))
    _check(f, (R((4, 3)), R((1, 3)), _pos(4, 1)), argnums=(0, 1, 2))     # broadcasting
    _check(f, (R(3), 0.3, 1.7), argnums=(0, 1, 2))                       # Python floats


def norm_defaults(x):
    return np.sum(norm.logpdf(x) + norm.cdf(x) * 2.0 + stats.norm.logsf(x))


def norm_scale_only(x, s):
    return np.sum(norm.pdf(x, scale=s))


def test_norm_defaults_and_keywords():
    _check(norm_defaults, (R(5),))
    _check(norm_scale_only, (R(5), 1.3), argnums=(0, 1))
    x = R(5)
    np.testing.assert_allclose(funcgrad.grad(norm_defaults)(x),
                               -x + 2 * norm.pdf(x) - norm.pdf(x) / norm.sf(x), rtol=1e-10)


def test_values_are_scipys():
    x, loc, s = R((4, 3)), R((1, 3)), _pos(4, 1)
    for f, ref in [(norm_logpdf, norm.logpdf), (norm_logcdf, norm.logcdf), (norm_logsf, norm.logsf)]:
        got = funcgrad.value_and_grad(f, jit="kernels")(x, loc, s)[0]
        assert got == np.sum(ref(x, loc, s))


# --------------------------------------------------------------------------- t
def t_pdf(x, df, loc, scale):
    return np.sum(stats.t.pdf(x, df, loc, scale))


def t_logpdf(x, df, loc, scale):
    return np.sum(scipy.stats.t.logpdf(x, df, loc=loc, scale=scale))


def t_cdf(x, df, loc, scale):
    return np.sum(stats.t.cdf(x, df, loc, scale))


def t_logcdf(x, df, loc, scale):
    return np.sum(stats.t.logcdf(x, df, loc, scale))


def t_sf(x, df, loc, scale):
    return np.sum(stats.t.sf(x, df, loc, scale))


def t_logsf(x, df, loc, scale):
    return np.sum(stats.t.logsf(x, df, loc, scale))


@pytest.mark.parametrize("f", [t_pdf, t_logpdf])
def test_t_density_in_every_parameter(f):
    _check(f, (R(4), _pos(4) + 1.0, R(4), _pos(4) + 1.0), argnums=(0, 1, 2, 3))
    _check(f, (R((4, 3)), _pos(1, 3) + 1.0, R((4, 3)), _pos(4, 1) + 1.0), argnums=(0, 1, 2, 3))


@pytest.mark.parametrize("f", [t_cdf, t_logcdf, t_sf, t_logsf])
def test_t_cdfs_in_x_loc_scale(f):
    _check(f, (R(4), _pos(4) + 1.0, R(4), _pos(4) + 1.0), argnums=(0, 2, 3))
    _check(f, (R((4, 3)), _pos(1, 3) + 1.0, R((4, 3)), _pos(4, 1) + 1.0), argnums=(0, 2, 3))


# --------------------------------------------------------------------------- gamma, beta, chi2
def gamma_pdf(x, a):
    return np.sum(stats.gamma.pdf(x, a))


def gamma_logpdf(x, a, loc, scale):
    return np.sum(stats.gamma.logpdf(x, a, loc, scale))


def gamma_cdf(x, a, scale):
    return np.sum(stats.gamma.cdf(x, a, scale=scale))


def beta_pdf(x, a, b):
    return np.sum(stats.beta.pdf(x, a, b))


def beta_logpdf(x, a, b, loc, scale):
    return np.sum(stats.beta.logpdf(x, a, b, loc=loc, scale=scale))


def beta_cdf(x, a, b):
    return np.sum(stats.beta.cdf(x, a, b))


def chi2_pdf(x, df):
    return np.sum(stats.chi2.pdf(x, df))


def chi2_logpdf(x, df, scale):
    return np.sum(stats.chi2.logpdf(x, df, scale=scale))


def chi2_cdf(x, df):
    return np.sum(stats.chi2.cdf(x, df))


def test_gamma():
    x, a = _pos(4), _pos(4)
    _check(gamma_pdf, (x, a), argnums=(0, 1))
    _check(gamma_logpdf, (x, a, 0.2, 1.3), argnums=(0, 1, 2, 3))
    _check(gamma_logpdf, (_pos(4, 3), _pos(1, 3), -0.1, _pos(4, 1)), argnums=(0, 1, 3))
    _check(gamma_cdf, (x, a, 1.4), argnums=(0, 2))


def test_beta():
    x, a, b = U(0.0, 1.0, 4), _pos(4), _pos(4)
    _check(beta_pdf, (x, a, b), argnums=(0, 1, 2))
    _check(beta_logpdf, (x, a, b, -0.05, 1.2), argnums=(0, 1, 2, 3, 4))
    _check(beta_cdf, (x, a, b), argnums=0)


def test_chi2():
    x = _pos(4)
    for df in (1.0, 2.0, 3.0, 2.5):
        _check(chi2_pdf, (x, df), argnums=(0, 1))
        _check(chi2_cdf, (x, df), argnums=0)
    _check(chi2_logpdf, (x, np.array([1.0, 2.5, 3.0, 4.0]), 1.3), argnums=(0, 1, 2))


def cdf_shape(a):
    return np.sum(stats.gamma.cdf(np.array([0.5, 1.5]), a))


def t_cdf_df(df):
    return stats.t.cdf(0.3, df)


@pytest.mark.parametrize("f,arg,what", [(cdf_shape, 2.0, "gamma.cdf has no derivative rule in a"),
                                        (t_cdf_df, 3.0, "t.cdf has no derivative rule in df")])
def test_cdf_shape_parameters_are_refused_at_the_users_line(f, arg, what):
    for kw in MODES:
        with pytest.raises(funcgrad.NoDerivativeError) as e:
            funcgrad.grad(f, **kw)(arg)
        text = str(e.value) + "".join(getattr(e.value, "__notes__", []))
        assert what in text and "test_scipy_stats.py" in text, text


# --------------------------------------------------------------------------- poisson
def poisson_logpmf(k, mu):
    return np.sum(stats.poisson.logpmf(k, mu))


def poisson_pmf(k, mu):
    return np.sum(stats.poisson.pmf(k, mu))


def poisson_cdf(k, mu):
    return np.sum(stats.poisson.cdf(k, mu))


def poisson_loc(k, mu):
    return np.sum(stats.poisson.logpmf(k, mu, 1) + stats.poisson.cdf(k + 0.5, mu, loc=1))


@pytest.mark.parametrize("f", [poisson_logpmf, poisson_pmf, poisson_cdf])
def test_poisson(f):
    _check(f, (np.round(R(4) ** 2), _pos(4)), argnums=1)
    _check(f, (np.round(R((4, 3)) ** 2), _pos(4, 1)), argnums=1)
    _check(poisson_loc, (np.round(R(4) ** 2) + 1, _pos(4)), argnums=1)


def test_poisson_k_has_zero_derivative():
    k, mu = np.array([0.0, 1.0, 3.0]), np.array([0.5, 2.0, 4.0])
    gk, gmu = funcgrad.grad(poisson_logpmf, argnums=(0, 1), jit="kernels")(k, mu)
    np.testing.assert_array_equal(gk, 0.0)
    np.testing.assert_allclose(gmu, k / mu - 1, rtol=1e-12)


# --------------------------------------------------------------------------- dirichlet
def dirichlet_logpdf(x, alpha):
    return stats.dirichlet.logpdf(x, alpha)


def dirichlet_pdf(x, alpha):
    return stats.dirichlet.pdf(x, alpha)


def normalized_logpdf(x, alpha):
    return stats.dirichlet.logpdf(x / np.sum(x), alpha)


def normalized_pdf(x, alpha):
    return stats.dirichlet.pdf(x / np.sum(x), alpha)


def batch_logpdf(x, alpha):
    return np.sum(stats.dirichlet.logpdf(x, alpha) * np.arange(1.0, 4.0))


def test_dirichlet():
    alpha = U(0, 1, 4) ** 2 + 1.2
    x = stats.dirichlet.rvs(alpha, size=1, random_state=1)[0]
    _check(normalized_pdf, (x, alpha), argnums=0)                 # autograd's form: x on the simplex
    _check(normalized_logpdf, (x, alpha), argnums=0)
    _check(dirichlet_pdf, (x, alpha), argnums=1)
    _check(dirichlet_logpdf, (x, alpha), argnums=1)
    _check(dirichlet_logpdf, (x[:-1], alpha), argnums=(0, 1))    # K - 1 components: scipy completes the last
    xs = stats.dirichlet.rvs(alpha, size=3, random_state=2).T     # (K, n): one sample per column
    _check(batch_logpdf, (xs[:-1], alpha), argnums=(0, 1))
    _check(batch_logpdf, (xs, alpha), argnums=1)


# --------------------------------------------------------------------------- multivariate normal
def make_psd(a):
    return a.T @ a + np.eye(a.shape[0])


def mvn_logpdf(x, mean, cov):
    return np.sum(mvn.logpdf(x, mean, cov))


def mvn_pdf(x, mean, cov):
    return np.sum(stats.multivariate_normal.pdf(x, mean, cov))


def mvn_logpdf_sym(x, mean, cov):
    return np.sum(scipy.stats.multivariate_normal.logpdf(x, mean, 0.5 * (cov + cov.T)))


def mvn_pdf_sym(x, mean, cov):
    return np.sum(mvn.pdf(x, mean=mean, cov=0.5 * (cov + cov.T)))


def mvn_entropy_sym(mean, cov):
    return mvn.entropy(mean, 0.5 * (cov + cov.T))


def mvn_entropy(cov):
    return stats.multivariate_normal.entropy(cov=cov)


def mvn_entropy_mean(mean, cov):
    return stats.multivariate_normal.entropy(mean, cov)


def mvn_logpdf_factor(x, mean, a):
    return np.sum(mvn.logpdf(x, mean, a @ a.T + np.eye(3)))


def mvn_default_mean(x, cov):
    return np.sum(mvn.logpdf(x, cov=cov))


@pytest.mark.parametrize("f", [mvn_logpdf_sym, mvn_pdf_sym])
def test_mvn_symmetrized_as_autograd_tests(f):
    _check(f, (R(4), R(4), make_psd(R((4, 4)))), argnums=(0, 1, 2))
    _check(f, (R((5, 4)), R(4), make_psd(R((4, 4)))), argnums=(0, 1, 2))


@pytest.mark.parametrize("f", [mvn_logpdf, mvn_pdf])
def test_mvn_cov_gradient_matches_scipys_lower_triangle(f):
    x, m, c = R((3, 4)), R(4), make_psd(R((4, 4)))
    _check(f, (x, m, c), argnums=(0, 1, 2))
    g = funcgrad.grad(f, argnums=2, jit="kernels")(x, m, c)
    assert np.all(np.triu(g, 1) == 0)                    # scipy never reads the upper triangle
    _check(f, (R((2, 3)), R(3), _pos(3)), argnums=(0, 1, 2))        # a diagonal given as a vector
    _check(f, (R((2, 3)), R(3), 1.7), argnums=(0, 1, 2))            # a multiple of the identity
    _check(f, (R(5), np.array([0.3]), np.array([[1.4]])), argnums=(0, 1, 2))   # dimension 1: a batch of 5


def test_mvn_entropy_and_factored_covariance():
    _check(mvn_entropy_sym, (10 * R(4), make_psd(R((4, 4)))), argnums=1)
    _check(mvn_entropy, (make_psd(R((3, 3))),))
    _check(mvn_entropy_mean, (R(3), _pos(3)), argnums=(0, 1))            # a diagonal given as a vector
    _check(mvn_entropy_mean, (R(3), 1.3), argnums=(0, 1))                # a multiple of the identity
    a = R((3, 3))
    _check(mvn_logpdf_factor, (R((4, 3)), R(3), a), argnums=(0, 1, 2))
    _check(mvn_default_mean, (R((2, 3)), make_psd(R((3, 3)))), argnums=(0, 1))


def mvn_singular(x, mean, cov):
    return np.sum(mvn.logpdf(np.concatenate([x[:2], mean[2:]]), mean, cov, allow_singular=True))


def test_mvn_singular_covariance():
    cov = np.zeros((4, 4))
    cov[0, 0] = cov[1, 1] = 1.0
    x = np.concatenate((R(2), np.zeros(2)))
    mean = np.concatenate((R(2), np.zeros(2)))
    _check(mvn_singular, (x, mean, cov), argnums=(0, 1))
    with pytest.raises(funcgrad.NoDerivativeError, match="singular covariance"):
        funcgrad.grad(mvn_singular, argnums=2, jit="kernels")(x, mean, cov)


# --------------------------------------------------------------------------- how it runs
def frozen(x, s):
    return np.sum(norm(0.0, 1.0).logpdf(x * s))


def test_frozen_distribution_is_refused_at_the_users_line():
    with pytest.raises(funcgrad.FuncgradError) as e:
        funcgrad.grad(frozen)(R(3), 1.5)
    assert "test_scipy_stats.py" in str(e.value) and "norm(0.0, 1.0).logpdf" in str(e.value)


def loop_stats(x, n):
    acc = 0.0
    for i in range(n):
        acc = acc + np.sum(norm.logcdf(x, i * 0.1, 1.5))
    return acc


def test_auto_runs_loops_calling_stats_as_python_and_whole_refuses():
    x = R(3)
    _check(loop_stats, (x, 3))
    with pytest.raises(funcgrad.CompileError) as e:
        funcgrad.grad(loop_stats, jit="whole")(x, 3)
    assert "test_scipy_stats.py" in str(e.value) and "norm.logcdf(x, i * 0.1, 1.5)" in str(e.value)


# --------------------------------------------------------------------------- autograd as an oracle
@pytest.mark.parametrize("name,fg,args,nums", [
    ("norm.logcdf", norm_logcdf, (R((4, 3)), R((1, 3)), _pos(4, 1)), (0, 1, 2)),
    ("norm.logsf", norm_logsf, (R(4), R(4), _pos(4)), (0, 1, 2)),
    ("t.logpdf", t_logpdf, (R(4), _pos(4) + 1, R(4), _pos(4) + 1), (0, 1, 2, 3)),
    ("t.cdf", t_cdf, (R(4), _pos(4) + 1, R(4), _pos(4) + 1), (0, 2)),
    ("beta.logpdf", functools.partial(beta_logpdf, loc=0.0, scale=1.0), (U(0, 1, 4), _pos(4), _pos(4)), (0, 1, 2)),
    ("gamma.pdf", gamma_pdf, (_pos(4), _pos(4)), (0, 1)),
    ("poisson.cdf", poisson_cdf, (np.round(R(4) ** 2), _pos(4)), (1,)),
    ("multivariate_normal.logpdf", mvn_logpdf_sym, (R((5, 4)), R(4), make_psd(R((4, 4)))), (0, 1, 2)),
])
def test_matches_autograd(name, fg, args, nums):
    autograd = pytest.importorskip("autograd", reason="autograd not installed")
    import autograd.numpy as anp  # optional oracle
    import autograd.scipy.stats as ags  # optional oracle
    dist, method = name.split(".")
    fn = getattr(getattr(ags, dist), method)
    if dist == "multivariate_normal":
        def ref(x, m, c):
            return anp.sum(fn(x, m, 0.5 * (c + c.T)))
    else:
        def ref(*a):
            return anp.sum(fn(*a))
    want = autograd.grad(ref, nums)(*args)
    got = funcgrad.grad(fg, argnums=nums, jit="kernels")(*args)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


# --------------------------------------------------------------------------- forward mode and second order
def _fd_jvp(f, args, tans, eps=1e-6):
    plus = [a + eps * t for a, t in zip(args, tans)]
    minus = [a - eps * t for a, t in zip(args, tans)]
    return (np.asarray(f(*plus), dtype=float) - np.asarray(f(*minus), dtype=float)) / (2 * eps)


def fw_loc_scale(x, loc, scale):
    return (norm.pdf(x, loc, scale) + norm.logpdf(x, loc, scale) + norm.cdf(x, loc, scale) + norm.logcdf(x, loc, scale)
            + norm.sf(x, loc, scale) + norm.logsf(x, loc, scale) + stats.t.pdf(x, scale + 2, loc, scale)
            + stats.t.logpdf(x, scale + 2, loc, scale) + stats.t.cdf(x, 3, loc, scale)
            + stats.t.logcdf(x, 3, loc, scale) + stats.t.sf(x, 4, loc, scale) + stats.t.logsf(x, 4, loc, scale))


def fw_positive(x, a, scale):
    return (stats.gamma.pdf(x, a, 0.1, scale) + stats.gamma.logpdf(x, a, -0.1, scale)
            + stats.gamma.cdf(x, 2, scale=scale) + stats.chi2.pdf(x, a + 1, 0.0, scale)
            + stats.chi2.logpdf(x, a, scale=scale) + stats.chi2.cdf(x, 3, 0.0, scale)
            + stats.beta.pdf(x / 3.0, a, 2.0) + stats.beta.logpdf(x / 3.0, 1.5, a) + stats.beta.cdf(x / 3.0, 2, 3)
            + stats.poisson.pmf(np.array([0.0, 1.0, 2.0, 5.0]), a) + stats.poisson.logpmf(np.array([1.0, 2.0, 3.0, 4.0]), scale)
            + stats.poisson.cdf(np.array([0.5, 1.0, 2.5, 5.0]), a))


def fw_multivariate(x, m, a):
    cov = a @ a.T + np.eye(3)
    return (np.sum(mvn.logpdf(x, m, cov)) + np.sum(mvn.pdf(x, m, cov)) + mvn.entropy(m, cov)
            + stats.dirichlet.logpdf(np.array([0.2, 0.5]), m ** 2 + 1.0)
            + stats.dirichlet.pdf(np.array([0.2, 0.5]), m ** 2 + 1.0))


@pytest.mark.parametrize("f,args", [
    (fw_loc_scale, (R(4), R(4), _pos(4))),
    (fw_positive, (U(0.5, 2.5, 4), _pos(4), _pos(4))),
    (fw_multivariate, (R((2, 3)), R(3), R((3, 3)))),
])
def test_forward_mode_matches_finite_differences(f, args):
    for i in range(len(args) + 1):
        tans = tuple(R(np.shape(a)) if i in (j, len(args)) else np.zeros(np.shape(a)) for j, a in enumerate(args))
        for kw in ({"jit": "kernels"}, {"jit": False}):
            out, tout = funcgrad.jvp(f, args, tans, **kw)
            np.testing.assert_allclose(tout, _fd_jvp(f, args, tans), rtol=1e-5, atol=1e-6)


def hess_norm_t(x):
    return np.sum(norm.logpdf(x, 0.3, 1.2) * stats.t.logcdf(x, 3.0) + stats.gamma.logpdf(x ** 2 + 0.5, 2.5))


def test_second_derivatives():
    x = R(4)
    H = funcgrad.hessian(hess_norm_t, jit="kernels")(x)
    g = funcgrad.grad(hess_norm_t, jit="kernels")
    eps = 1e-5
    num = np.stack([(g(x + eps * e) - g(x - eps * e)) / (2 * eps) for e in np.eye(4)], axis=-1)
    np.testing.assert_allclose(H, num, rtol=1e-5, atol=1e-6)


def mvn_twice(x, m):
    return np.sum(mvn.logpdf(x, m, np.eye(3) * 2.0))


def test_second_derivatives_of_the_multivariate_normal():
    # its tangent helper is also defined over primitives (funcgrad/ops/second_order.py): the Hessian by
    # reverse mode over forward mode against central differences of the gradient
    x, m = R(3), R(3)
    H = funcgrad.hessian(mvn_twice, jit="kernels")(x, m)
    g = funcgrad.grad(mvn_twice, jit="kernels")
    eps = 1e-5
    num = np.stack([(g(x + eps * e, m) - g(x - eps * e, m)) / (2 * eps) for e in np.eye(3)], axis=-1)
    np.testing.assert_allclose(H, num, rtol=1e-5, atol=1e-6)
