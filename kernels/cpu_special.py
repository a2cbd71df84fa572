"""SciPy kernels for the CPU: scipy.special's functions and scipy.stats' distribution methods.

Owns the compute behind every primitive declared in :mod:`funcgrad.ops.special` and
:mod:`funcgrad.ops.stats` (re-exported by ``funcgrad.kernels.cpu``; the kernel of primitive
``p`` is ``p`` here, with the primitive's parameters in the same order), and the helpers their
derivative rules call (the multivariate normal's and the Dirichlet's cotangents and tangents,
and ``no_derivative``, the refusal of a derivative that is not implemented).

Guarantee: each kernel returns what the SciPy call it stands for returns (it *is* that call,
made with the same arguments). These are Python functions only: Numba has no scipy.special
in nopython mode, so the primitives are declared ``python_only`` and ``jit="auto"`` runs code
calling them as Python over compiled kernels; ``jit="whole"`` refuses such code at the user's
line. scipy.special, scipy.stats and scipy.integrate are imported on the first call of a
kernel, not when funcgrad is imported (together about a second).
"""
import numpy as np

from ..errors import NoDerivativeError

__all__ = [
    # scipy.special
    "gammaln", "gamma", "digamma", "polygamma", "rgamma", "multigammaln", "multipolygamma", "betaln", "beta",
    "erf", "erfc", "erfinv", "erfcinv", "expit", "logit", "xlogy", "xlog1py", "entr", "rel_entr",
    "i0", "i1", "iv", "ive", "j0", "j1", "jv", "y0", "y1", "yn", "gammainc", "gammaincc", "betainc",
    "scipy_logsumexp", "scipy_logsumexp_b", "logsumexp_sign", "no_derivative",
    # scipy.stats
    "norm_pdf", "norm_logpdf", "norm_cdf", "norm_logcdf", "norm_sf", "norm_logsf",
    "t_pdf", "t_logpdf", "t_cdf", "t_logcdf", "t_sf", "t_logsf",
    "gamma_pdf", "gamma_logpdf", "gamma_cdf", "beta_pdf", "beta_logpdf", "beta_cdf",
    "chi2_cdf", "poisson_pmf", "poisson_logpmf", "poisson_cdf",
    "dirichlet_pdf", "dirichlet_logpdf", "dirichlet_logpdf_grad", "dirichlet_logpdf_tangent",
    "mvn_pdf", "mvn_logpdf", "mvn_entropy", "mvn_logpdf_grad", "mvn_logpdf_tangent",
    "mvn_entropy_grad", "mvn_entropy_tangent",
]

_MODS = {}


def _sp():
    m = _MODS.get("special")
    if m is None:
        import scipy.special as m   # lazily: see the module docstring
        _MODS["special"] = m
    return m


def _st():
    m = _MODS.get("stats")
    if m is None:
        import scipy.stats as m     # lazily: see the module docstring
        _MODS["stats"] = m
    return m


# --------------------------------------------------------------------------- scipy.special
def gammaln(x):
    return _sp().gammaln(x)


def gamma(x):
    return _sp().gamma(x)


def digamma(x):
    return _sp().digamma(x)


def polygamma(n, x):
    return _sp().polygamma(n, x)


def rgamma(x):
    return _sp().rgamma(x)


def multigammaln(a, d):
    return _sp().multigammaln(a, d)


def multipolygamma(n, a, d):
    """sum(polygamma(n, a - j / 2) for j in range(d))."""
    sp = _sp()
    return sum(sp.polygamma(n, np.asarray(a) - j / 2.0) for j in range(int(d)))[()]


def betaln(a, b):
    return _sp().betaln(a, b)


def beta(a, b):
    return _sp().beta(a, b)


def erf(x):
    return _sp().erf(x)


def erfc(x):
    return _sp().erfc(x)


def erfinv(x):
    return _sp().erfinv(x)


def erfcinv(x):
    return _sp().erfcinv(x)


def expit(x):
    return _sp().expit(x)


def logit(x):
    return _sp().logit(x)


def xlogy(x, y):
    return _sp().xlogy(x, y)


def xlog1py(x, y):
    return _sp().xlog1py(x, y)


def entr(x):
    return _sp().entr(x)


def rel_entr(x, y):
    return _sp().rel_entr(x, y)


def i0(x):
    return _sp().i0(x)


def i1(x):
    return _sp().i1(x)


def iv(v, z):
    return _sp().iv(v, z)


def ive(v, z):
    return _sp().ive(v, z)


def j0(x):
    return _sp().j0(x)


def j1(x):
    return _sp().j1(x)


def jv(v, z):
    return _sp().jv(v, z)


def y0(x):
    return _sp().y0(x)


def y1(x):
    return _sp().y1(x)


def yn(n, x):
    return _sp().yn(n, x)


def gammainc(a, x):
    return _sp().gammainc(a, x)


def gammaincc(a, x):
    return _sp().gammaincc(a, x)


def betainc(a, b, x):
    return _sp().betainc(a, b, x)


def scipy_logsumexp(a, axis=None, keepdims=False):
    """``scipy.special.logsumexp(a, axis=axis, keepdims=keepdims)``."""
    return _sp().logsumexp(a, axis=axis, keepdims=keepdims)


def scipy_logsumexp_b(a, b, axis=None, keepdims=False, return_sign=False):
    """``scipy.special.logsumexp(a, axis, b=b, keepdims)``: log(sum(b * exp(a))), or with
    ``return_sign`` log(abs(sum(b * exp(a)))) (the first of scipy's pair)."""
    out = _sp().logsumexp(a, axis=axis, b=b, keepdims=keepdims, return_sign=return_sign)
    return out[0] if return_sign else out


def logsumexp_sign(a, b=None, axis=None, keepdims=False):
    """The sign scipy.special.logsumexp returns with ``return_sign=True`` (+1, -1, or 0)."""
    return _sp().logsumexp(a, axis=axis, b=b, keepdims=keepdims, return_sign=True)[1]


def no_derivative(g, x, what):
    """The cotangent (or tangent) of a derivative that is not implemented: zeros shaped like ``x``
    while ``g`` is zero (0 times any Jacobian), and otherwise a refusal saying ``what``."""
    if g is not None and np.any(np.asarray(g) != 0):
        raise NoDerivativeError(what)
    dt = np.result_type(x) if np.issubdtype(np.result_type(x), np.floating) else np.float64
    return np.zeros(np.shape(x), dtype=dt)


# --------------------------------------------------------------------------- scipy.stats, univariate
def norm_pdf(x, loc=0.0, scale=1.0):
    return _st().norm.pdf(x, loc, scale)


def norm_logpdf(x, loc=0.0, scale=1.0):
    return _st().norm.logpdf(x, loc, scale)


def norm_cdf(x, loc=0.0, scale=1.0):
    return _st().norm.cdf(x, loc, scale)


def norm_logcdf(x, loc=0.0, scale=1.0):
    return _st().norm.logcdf(x, loc, scale)


def norm_sf(x, loc=0.0, scale=1.0):
    return _st().norm.sf(x, loc, scale)


def norm_logsf(x, loc=0.0, scale=1.0):
    return _st().norm.logsf(x, loc, scale)


def t_pdf(x, df, loc=0.0, scale=1.0):
    return _st().t.pdf(x, df, loc, scale)


def t_logpdf(x, df, loc=0.0, scale=1.0):
    return _st().t.logpdf(x, df, loc, scale)


def t_cdf(x, df, loc=0.0, scale=1.0):
    return _st().t.cdf(x, df, loc, scale)


def t_logcdf(x, df, loc=0.0, scale=1.0):
    return _st().t.logcdf(x, df, loc, scale)


def t_sf(x, df, loc=0.0, scale=1.0):
    return _st().t.sf(x, df, loc, scale)


def t_logsf(x, df, loc=0.0, scale=1.0):
    return _st().t.logsf(x, df, loc, scale)


def gamma_pdf(x, a, loc=0.0, scale=1.0):
    return _st().gamma.pdf(x, a, loc, scale)


def gamma_logpdf(x, a, loc=0.0, scale=1.0):
    return _st().gamma.logpdf(x, a, loc, scale)


def gamma_cdf(x, a, loc=0.0, scale=1.0):
    return _st().gamma.cdf(x, a, loc, scale)


def beta_pdf(x, a, b, loc=0.0, scale=1.0):
    return _st().beta.pdf(x, a, b, loc, scale)


def beta_logpdf(x, a, b, loc=0.0, scale=1.0):
    return _st().beta.logpdf(x, a, b, loc, scale)


def beta_cdf(x, a, b, loc=0.0, scale=1.0):
    return _st().beta.cdf(x, a, b, loc, scale)


def chi2_cdf(x, df, loc=0.0, scale=1.0):
    return _st().chi2.cdf(x, df, loc, scale)


def poisson_pmf(k, mu, loc=0):
    return _st().poisson.pmf(k, mu, loc)


def poisson_logpmf(k, mu, loc=0):
    return _st().poisson.logpmf(k, mu, loc)


def poisson_cdf(k, mu, loc=0):
    return _st().poisson.cdf(k, mu, loc)


# --------------------------------------------------------------------------- scipy.stats.dirichlet
def dirichlet_pdf(x, alpha):
    return _st().dirichlet.pdf(x, alpha)


def dirichlet_logpdf(x, alpha):
    return _st().dirichlet.logpdf(x, alpha)


def _squeeze(out):
    """scipy.stats' multivariate output convention: size-1 axes dropped, a 0-d result a scalar."""
    out = np.asarray(out).squeeze()
    return out[()] if out.ndim == 0 else out


def _dirichlet_parts(x, alpha):
    """x completed to all K components along axis 0 (scipy accepts K - 1), alpha (K,)."""
    alpha = np.asarray(alpha, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    full = x.shape[0] == alpha.shape[0]
    xf = x if full else np.concatenate([x, (1 - np.sum(x, 0))[None]], axis=0)
    return xf, alpha, full


def dirichlet_logpdf_grad(g, x, alpha, wrt):
    """Cotangent of ``x`` or ``alpha`` (``wrt``) in dirichlet.logpdf(x, alpha), given the result's ``g``.

    With all K components in x, d/dx_i = (alpha_i - 1) / x_i (the density's gradient in the
    ambient coordinates, as autograd's); with K - 1 (scipy completes x_K = 1 - sum(x)), the chain
    rule through x_K subtracts (alpha_K - 1) / x_K."""
    sp = _sp()
    xf, alpha, full = _dirichlet_parts(x, alpha)
    gg = np.reshape(np.asarray(g, dtype=np.float64), xf.shape[1:])   # the squeezed axes come back
    if wrt == "alpha":
        score = np.log(xf) - (sp.digamma(alpha) - sp.digamma(np.sum(alpha))).reshape((-1,) + (1,) * (xf.ndim - 1))
        return np.reshape(np.sum(score * gg, axis=tuple(range(1, xf.ndim))), np.shape(alpha))
    a1 = (alpha - 1).reshape((-1,) + (1,) * (xf.ndim - 1))
    gx = a1 / xf * gg
    if not full:
        gx = gx[:-1] - gx[-1:]
    return np.reshape(gx, np.shape(x))


def dirichlet_logpdf_tangent(tv, x, alpha, wrt):
    """Tangent of dirichlet.logpdf(x, alpha) along the tangent ``tv`` of ``x`` or ``alpha`` (``wrt``)."""
    xf, alpha, full = _dirichlet_parts(x, alpha)
    if tv is None:
        return _squeeze(np.zeros(xf.shape[1:]))
    ones = np.ones(xf.shape[1:])
    if wrt == "alpha":
        sp = _sp()
        score = np.log(xf) - (sp.digamma(alpha) - sp.digamma(np.sum(alpha))).reshape((-1,) + (1,) * (xf.ndim - 1))
        t = np.reshape(np.asarray(tv, dtype=np.float64), alpha.shape).reshape((-1,) + (1,) * (xf.ndim - 1))
        return _squeeze(np.sum(score * t, axis=0))
    gx = dirichlet_logpdf_grad(ones, x, alpha, "x")
    return _squeeze(np.sum(np.reshape(gx, np.shape(x)) * np.asarray(tv, dtype=np.float64), axis=0))


# --------------------------------------------------------------------------- scipy.stats.multivariate_normal
def mvn_pdf(x, mean=None, cov=1, allow_singular=False):
    return _st().multivariate_normal.pdf(x, mean, cov, allow_singular)


def mvn_logpdf(x, mean=None, cov=1, allow_singular=False):
    return _st().multivariate_normal.logpdf(x, mean, cov, allow_singular)


def mvn_entropy(mean=None, cov=1):
    return _st().multivariate_normal.entropy(mean, cov)


def _mvn_parts(mean, cov):
    """scipy's reading of (mean, cov): the dimension, the mean vector and the full covariance matrix
    (a scalar is a multiple of the identity, a vector a diagonal; of a matrix, the lower triangle)."""
    cov = np.asarray(cov, dtype=np.float64)
    if mean is not None:
        dim = np.size(mean)
    elif cov.ndim == 0:
        dim = 1
    else:
        dim = cov.shape[0]
    m = np.zeros(dim) if mean is None else np.reshape(np.asarray(mean, dtype=np.float64), (dim,))
    if cov.ndim == 0:
        C = cov * np.eye(dim)
    elif cov.ndim == 1:
        C = np.diag(cov)
    else:
        C = np.tril(cov) + np.tril(cov, -1).T
    return dim, m, C


def _mvn_quantiles(x, dim):
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 0:
        return x[None]
    if x.ndim == 1:
        return x[:, None] if dim == 1 else x[None, :]
    return x


def _cov_input_form(G, cov):
    """A gradient G (symmetric, in the full matrix) as the cotangent of scipy's ``cov`` argument: of a
    scalar the trace, of a vector the diagonal, of a matrix the lower triangle scipy reads (off-diagonal
    entries count twice there, since each stands for two entries of the matrix)."""
    cov = np.asarray(cov)
    if cov.ndim == 0:
        return np.trace(G)
    if cov.ndim == 1:
        return np.diag(G).copy()
    return np.tril(G + G.T) - np.diag(np.diag(G))


def _cov_full_tangent(T, cov, dim):
    """A tangent of scipy's ``cov`` argument as the tangent of the full matrix it stands for."""
    T = np.asarray(T, dtype=np.float64)
    if np.ndim(cov) == 0:
        return T.reshape(()) * np.eye(dim)
    if np.ndim(cov) == 1:
        return np.diag(T)
    return np.tril(T) + np.tril(T, -1).T


def _mvn_inverse(C, allow_singular):
    return np.linalg.pinv(C, hermitian=True) if allow_singular else np.linalg.inv(C)


_SINGULAR_COV = ("scipy.stats.multivariate_normal with allow_singular=True is not differentiable with respect "
                 "to a singular covariance matrix: keep cov out of the differentiated inputs")


def mvn_logpdf_grad(g, x, mean, cov, allow_singular, wrt):
    """Cotangent of ``x``, ``mean`` or ``cov`` (``wrt``) in multivariate_normal.logpdf, given ``g``."""
    dim, m, C = _mvn_parts(mean, cov)
    xq = _mvn_quantiles(x, dim)
    P = _mvn_inverse(C, allow_singular)
    s = (xq - m) @ P                                        # P (x - mean), batched; P is symmetric
    gg = np.reshape(np.asarray(g, dtype=np.float64), xq.shape[:-1])
    if wrt == "x":
        return np.reshape(-s * gg[..., None], np.shape(x))
    if wrt == "mean":
        return np.reshape(np.sum(s * gg[..., None], axis=tuple(range(s.ndim - 1))), np.shape(mean))
    if allow_singular and np.any(np.asarray(g) != 0):
        raise NoDerivativeError(_SINGULAR_COV)
    sb = s.reshape(-1, dim)
    gb = gg.reshape(-1)
    G = 0.5 * (sb.T * gb) @ sb - 0.5 * np.sum(gb) * P
    return _cov_input_form(G, cov)


def mvn_logpdf_tangent(tv, x, mean, cov, allow_singular, wrt):
    """Tangent of multivariate_normal.logpdf along the tangent ``tv`` of ``x``, ``mean`` or ``cov``."""
    dim, m, C = _mvn_parts(mean, cov)
    xq = _mvn_quantiles(x, dim)
    if tv is None:
        return _squeeze(np.zeros(xq.shape[:-1]))
    P = _mvn_inverse(C, allow_singular)
    s = (xq - m) @ P
    if wrt == "x":
        return _squeeze(-np.sum(s * np.reshape(np.asarray(tv, dtype=np.float64), xq.shape), axis=-1))
    if wrt == "mean":
        return _squeeze(np.sum(s * np.reshape(np.asarray(tv, dtype=np.float64), (dim,)), axis=-1))
    T = _cov_full_tangent(tv, cov, dim)
    if allow_singular and np.any(T != 0):
        raise NoDerivativeError(_SINGULAR_COV)
    return _squeeze(0.5 * np.einsum("...i,ij,...j->...", s, T, s) - 0.5 * np.sum(P * T))


def mvn_entropy_grad(g, mean, cov):
    """Cotangent of ``cov`` in multivariate_normal.entropy(mean, cov): g / 2 times the inverse."""
    _, _, C = _mvn_parts(mean, cov)
    return _cov_input_form(0.5 * np.asarray(g, dtype=np.float64) * np.linalg.inv(C), cov)


def mvn_entropy_tangent(tv, mean, cov):
    """Tangent of multivariate_normal.entropy(mean, cov) along the tangent ``tv`` of ``cov``."""
    if tv is None:
        return 0.0
    dim, _, C = _mvn_parts(mean, cov)
    return 0.5 * np.sum(np.linalg.inv(C) * _cov_full_tangent(tv, cov, dim))
