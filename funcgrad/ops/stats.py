"""scipy.stats' distribution methods as primitives, keyed by the bound methods users call.

Owns the rules of ``norm`` (pdf cdf logpdf logcdf sf logsf), ``t`` (the same six), ``gamma``,
``beta`` and ``chi2`` (pdf logpdf cdf), ``poisson`` (pmf logpmf cdf), ``dirichlet`` (pdf logpdf)
and ``multivariate_normal`` (pdf logpdf entropy). ``from scipy.stats import norm;
norm.logpdf(x, loc, scale)``, ``scipy.stats.norm.logpdf(x, scale=s)`` and
``stats.multivariate_normal.logpdf(x, mean, cov)`` all resolve here: the registry knows a bound
method by its instance and function (a new method object is made at every attribute access), and
the keys are registered when scipy.stats is imported (``import funcgrad`` does not import it).
Frozen distributions (``norm(0, 1).logpdf(x)``) are not covered: a differentiated value flowing
into one is refused at the user's line.

Parameters broadcast against each other as in SciPy, and ``loc``/``scale`` are differentiable,
given by position or keyword. Templates are written over the standardized variable
``z = (x - loc) / scale``: with ``L(x) = Ls(z) - log(scale)``, ``dL/dloc = -dL/dx`` and
``dL/dscale = -z dL/dx - 1/scale``; a ``pdf`` is its ``logpdf``'s rule times the result; a ``cdf``'s
derivative in x is the pdf. A shape parameter of a ``cdf`` (t's df, gamma's a, beta's a and b,
chi2's df) has no derivative rule (autograd has none either): its d-line refuses at run time
unless the cotangent is zero. Poisson's ``k`` and ``loc`` are integers (piecewise constant: zero
derivative). The multivariate normal's cov is read as SciPy reads it, lower triangle only: its
cotangent is the lower triangle of the symmetric gradient, off-diagonal entries doubled (of a
scalar cov its trace, of a vector its diagonal), so it matches finite differences of SciPy's own
function; for a cov built symmetrically (``A @ A.T``, ``(C + C.T) / 2``) the chain rule gives the
usual symmetric gradient.
"""
from __future__ import annotations

import numpy as np

import funcgrad.kernels.cpu as K
from . import samples as S
from .core import mask, unbroadcast
from .registry import alias, d, define, defvjp, primitive, t, when_imported
from .special import digamma, no_derivative


# --------------------------------------------------------------------------- samples
def _loc_scale_sample(shape_domains, x_domain="real", loc_domain="real", scale_domain="positive", ints=()):
    """Arguments ``(x, *shape params, [loc, [scale]])``, broadcastable, each shape parameter in its domain;
    those named in ``ints`` are drawn as integers (not differentiated: their cdf rule refuses)."""
    def fn(draw, dt, st, array, shapes):
        n_opt = draw(st.integers(0, 2))
        domains = [x_domain] + list(shape_domains) + [loc_domain, scale_domain][:n_opt]
        shs = S.broadcastable_shapes(draw, len(domains))
        args = []
        for i, (sh, dom) in enumerate(zip(shs, domains)):
            v = array(draw, sh, dt, dom)
            if i - 1 in ints:
                v = np.round(np.asarray(v)).astype(np.int64) + 1
            args.append(v)
        return tuple(args), {}
    return S.custom(fn)


# --------------------------------------------------------------------------- norm
@defvjp(None, sample=_loc_scale_sample([]), python_only=True)
def norm_logpdf(y, x, loc=0.0, scale=1.0):
    z = (x - loc) / scale
    gx = -z / scale
    gs = (z * z - 1) / scale
    d[x] = unbroadcast(d[y] * gx, x)
    d[loc] = unbroadcast(-d[y] * gx, loc)
    d[scale] = unbroadcast(d[y] * gs, scale)
    t[y] = t[x] * gx - t[loc] * gx + t[scale] * gs


@defvjp(None, sample=_loc_scale_sample([]), python_only=True)
def norm_pdf(y, x, loc=0.0, scale=1.0):
    z = (x - loc) / scale
    gx = -z / scale * y
    gs = (z * z - 1) / scale * y
    d[x] = unbroadcast(d[y] * gx, x)
    d[loc] = unbroadcast(-d[y] * gx, loc)
    d[scale] = unbroadcast(d[y] * gs, scale)
    t[y] = t[x] * gx - t[loc] * gx + t[scale] * gs


@defvjp(None, sample=_loc_scale_sample([]), python_only=True)
def norm_cdf(y, x, loc=0.0, scale=1.0):
    p = norm_pdf(x, loc, scale)
    z = (x - loc) / scale
    d[x] = unbroadcast(d[y] * p, x)
    d[loc] = unbroadcast(-d[y] * p, loc)
    d[scale] = unbroadcast(-d[y] * p * z, scale)
    t[y] = t[x] * p - t[loc] * p - t[scale] * p * z


@defvjp(None, sample=_loc_scale_sample([]), python_only=True)
def norm_logcdf(y, x, loc=0.0, scale=1.0):
    r = np.exp(norm_logpdf(x, loc, scale) - y)
    z = (x - loc) / scale
    d[x] = unbroadcast(d[y] * r, x)
    d[loc] = unbroadcast(-d[y] * r, loc)
    d[scale] = unbroadcast(-d[y] * r * z, scale)
    t[y] = t[x] * r - t[loc] * r - t[scale] * r * z


@defvjp(None, sample=_loc_scale_sample([]), python_only=True)
def norm_sf(y, x, loc=0.0, scale=1.0):
    p = norm_pdf(x, loc, scale)
    z = (x - loc) / scale
    d[x] = unbroadcast(-d[y] * p, x)
    d[loc] = unbroadcast(d[y] * p, loc)
    d[scale] = unbroadcast(d[y] * p * z, scale)
    t[y] = -t[x] * p + t[loc] * p + t[scale] * p * z


@defvjp(None, sample=_loc_scale_sample([]), python_only=True)
def norm_logsf(y, x, loc=0.0, scale=1.0):
    r = np.exp(norm_logpdf(x, loc, scale) - y)
    z = (x - loc) / scale
    d[x] = unbroadcast(-d[y] * r, x)
    d[loc] = unbroadcast(d[y] * r, loc)
    d[scale] = unbroadcast(d[y] * r * z, scale)
    t[y] = -t[x] * r + t[loc] * r + t[scale] * r * z


# --------------------------------------------------------------------------- t
_DF = (2.1, 8.0)


@defvjp(None, sample=_loc_scale_sample([_DF]), python_only=True)
def t_logpdf(y, x, df, loc=0.0, scale=1.0):
    z = (x - loc) / scale
    gx = -(df + 1) * z / ((df + z * z) * scale)
    gdf = 0.5 * (digamma((df + 1) / 2) - digamma(df / 2) - 1 / df - np.log1p(z * z / df)
                 + (df + 1) * z * z / (df * (df + z * z)))
    gs = gx * z + 1 / scale
    d[x] = unbroadcast(d[y] * gx, x)
    d[df] = unbroadcast(d[y] * gdf, df)
    d[loc] = unbroadcast(-d[y] * gx, loc)
    d[scale] = unbroadcast(-d[y] * gs, scale)
    t[y] = t[x] * gx + t[df] * gdf - t[loc] * gx - t[scale] * gs


@defvjp(None, sample=_loc_scale_sample([_DF]), python_only=True)
def t_pdf(y, x, df, loc=0.0, scale=1.0):
    z = (x - loc) / scale
    gx = -(df + 1) * z / ((df + z * z) * scale) * y
    gdf = 0.5 * (digamma((df + 1) / 2) - digamma(df / 2) - 1 / df - np.log1p(z * z / df)
                 + (df + 1) * z * z / (df * (df + z * z))) * y
    gs = gx * z + y / scale
    d[x] = unbroadcast(d[y] * gx, x)
    d[df] = unbroadcast(d[y] * gdf, df)
    d[loc] = unbroadcast(-d[y] * gx, loc)
    d[scale] = unbroadcast(-d[y] * gs, scale)
    t[y] = t[x] * gx + t[df] * gdf - t[loc] * gx - t[scale] * gs


@defvjp(None, sample=_loc_scale_sample([_DF], ints=(0,)), python_only=True)
def t_cdf(y, x, df, loc=0.0, scale=1.0):
    p = t_pdf(x, df, loc, scale)
    z = (x - loc) / scale
    d[x] = unbroadcast(d[y] * p, x)
    d[df] = no_derivative(d[y], df, "scipy.stats.t.cdf has no derivative rule in df (autograd has none either): "
                                    "keep df out of the differentiated inputs")
    d[loc] = unbroadcast(-d[y] * p, loc)
    d[scale] = unbroadcast(-d[y] * p * z, scale)
    t[y] = t[x] * p - t[loc] * p - t[scale] * p * z + no_derivative(
        t[df], y, "scipy.stats.t.cdf has no derivative rule in df (autograd has none either): keep df out of the "
                  "differentiated inputs")


@defvjp(None, sample=_loc_scale_sample([_DF], ints=(0,)), python_only=True)
def t_logcdf(y, x, df, loc=0.0, scale=1.0):
    r = np.exp(t_logpdf(x, df, loc, scale) - y)
    z = (x - loc) / scale
    d[x] = unbroadcast(d[y] * r, x)
    d[df] = no_derivative(d[y], df, "scipy.stats.t.logcdf has no derivative rule in df (autograd has none "
                                    "either): keep df out of the differentiated inputs")
    d[loc] = unbroadcast(-d[y] * r, loc)
    d[scale] = unbroadcast(-d[y] * r * z, scale)
    t[y] = t[x] * r - t[loc] * r - t[scale] * r * z + no_derivative(
        t[df], y, "scipy.stats.t.logcdf has no derivative rule in df (autograd has none either): keep df out of "
                  "the differentiated inputs")


@defvjp(None, sample=_loc_scale_sample([_DF], ints=(0,)), python_only=True)
def t_sf(y, x, df, loc=0.0, scale=1.0):
    p = t_pdf(x, df, loc, scale)
    z = (x - loc) / scale
    d[x] = unbroadcast(-d[y] * p, x)
    d[df] = no_derivative(d[y], df, "scipy.stats.t.sf has no derivative rule in df: keep df out of the "
                                    "differentiated inputs")
    d[loc] = unbroadcast(d[y] * p, loc)
    d[scale] = unbroadcast(d[y] * p * z, scale)
    t[y] = -t[x] * p + t[loc] * p + t[scale] * p * z + no_derivative(
        t[df], y, "scipy.stats.t.sf has no derivative rule in df: keep df out of the differentiated inputs")


@defvjp(None, sample=_loc_scale_sample([_DF], ints=(0,)), python_only=True)
def t_logsf(y, x, df, loc=0.0, scale=1.0):
    r = np.exp(t_logpdf(x, df, loc, scale) - y)
    z = (x - loc) / scale
    d[x] = unbroadcast(-d[y] * r, x)
    d[df] = no_derivative(d[y], df, "scipy.stats.t.logsf has no derivative rule in df: keep df out of the "
                                    "differentiated inputs")
    d[loc] = unbroadcast(d[y] * r, loc)
    d[scale] = unbroadcast(d[y] * r * z, scale)
    t[y] = -t[x] * r + t[loc] * r + t[scale] * r * z + no_derivative(
        t[df], y, "scipy.stats.t.logsf has no derivative rule in df: keep df out of the differentiated inputs")


# --------------------------------------------------------------------------- gamma
_POS_X = (0.5, 3.0)        # x - loc stays positive: loc is drawn from _SMALL_LOC
_SMALL_LOC = (-0.2, 0.2)


@defvjp(None, sample=_loc_scale_sample([(1.2, 4.0)], _POS_X, _SMALL_LOC), python_only=True)
def gamma_logpdf(y, x, a, loc=0.0, scale=1.0):
    z = (x - loc) / scale
    gx = ((a - 1) / z - 1) / scale
    ga = np.log(z) - digamma(a)
    gs = gx * z + 1 / scale
    d[x] = unbroadcast(d[y] * gx, x)
    d[a] = unbroadcast(d[y] * ga, a)
    d[loc] = unbroadcast(-d[y] * gx, loc)
    d[scale] = unbroadcast(-d[y] * gs, scale)
    t[y] = t[x] * gx + t[a] * ga - t[loc] * gx - t[scale] * gs


@defvjp(None, sample=_loc_scale_sample([(1.2, 4.0)], _POS_X, _SMALL_LOC), python_only=True)
def gamma_pdf(y, x, a, loc=0.0, scale=1.0):
    z = (x - loc) / scale
    gx = ((a - 1) / z - 1) / scale * y
    ga = (np.log(z) - digamma(a)) * y
    gs = gx * z + y / scale
    d[x] = unbroadcast(d[y] * gx, x)
    d[a] = unbroadcast(d[y] * ga, a)
    d[loc] = unbroadcast(-d[y] * gx, loc)
    d[scale] = unbroadcast(-d[y] * gs, scale)
    t[y] = t[x] * gx + t[a] * ga - t[loc] * gx - t[scale] * gs


@defvjp(None, sample=_loc_scale_sample([(1.2, 4.0)], _POS_X, _SMALL_LOC, ints=(0,)), python_only=True)
def gamma_cdf(y, x, a, loc=0.0, scale=1.0):
    p = gamma_pdf(x, a, loc, scale)
    z = (x - loc) / scale
    d[x] = unbroadcast(d[y] * p, x)
    d[a] = no_derivative(d[y], a, "scipy.stats.gamma.cdf has no derivative rule in a (autograd has none either): "
                                  "keep a out of the differentiated inputs")
    d[loc] = unbroadcast(-d[y] * p, loc)
    d[scale] = unbroadcast(-d[y] * p * z, scale)
    t[y] = t[x] * p - t[loc] * p - t[scale] * p * z + no_derivative(
        t[a], y, "scipy.stats.gamma.cdf has no derivative rule in a (autograd has none either): keep a out of the "
                 "differentiated inputs")


# --------------------------------------------------------------------------- beta
# z = (x - loc) / scale stays in (0, 1): x in (0.1, 0.9), loc in (-0.1, 0), scale in (1.2, 1.5)
_BETA = dict(x_domain=(0.1, 0.9), loc_domain=(-0.1, 0.0), scale_domain=(1.2, 1.5))


@defvjp(None, sample=_loc_scale_sample([(1.2, 4.0), (1.2, 4.0)], **_BETA), python_only=True)
def beta_logpdf(y, x, a, b, loc=0.0, scale=1.0):
    z = (x - loc) / scale
    gx = ((a - 1) / z - (b - 1) / (1 - z)) / scale
    ga = np.log(z) - digamma(a) + digamma(a + b)
    gb = np.log1p(-z) - digamma(b) + digamma(a + b)
    gs = gx * z + 1 / scale
    d[x] = unbroadcast(d[y] * gx, x)
    d[a] = unbroadcast(d[y] * ga, a)
    d[b] = unbroadcast(d[y] * gb, b)
    d[loc] = unbroadcast(-d[y] * gx, loc)
    d[scale] = unbroadcast(-d[y] * gs, scale)
    t[y] = t[x] * gx + t[a] * ga + t[b] * gb - t[loc] * gx - t[scale] * gs


@defvjp(None, sample=_loc_scale_sample([(1.2, 4.0), (1.2, 4.0)], **_BETA), python_only=True)
def beta_pdf(y, x, a, b, loc=0.0, scale=1.0):
    z = (x - loc) / scale
    gx = ((a - 1) / z - (b - 1) / (1 - z)) / scale * y
    ga = (np.log(z) - digamma(a) + digamma(a + b)) * y
    gb = (np.log1p(-z) - digamma(b) + digamma(a + b)) * y
    gs = gx * z + y / scale
    d[x] = unbroadcast(d[y] * gx, x)
    d[a] = unbroadcast(d[y] * ga, a)
    d[b] = unbroadcast(d[y] * gb, b)
    d[loc] = unbroadcast(-d[y] * gx, loc)
    d[scale] = unbroadcast(-d[y] * gs, scale)
    t[y] = t[x] * gx + t[a] * ga + t[b] * gb - t[loc] * gx - t[scale] * gs


@defvjp(None, sample=_loc_scale_sample([(1.2, 4.0), (1.2, 4.0)], ints=(0, 1), **_BETA), python_only=True)
def beta_cdf(y, x, a, b, loc=0.0, scale=1.0):
    p = beta_pdf(x, a, b, loc, scale)
    z = (x - loc) / scale
    d[x] = unbroadcast(d[y] * p, x)
    d[a] = no_derivative(d[y], a, "scipy.stats.beta.cdf has no derivative rule in a (autograd has none either): "
                                  "keep a out of the differentiated inputs")
    d[b] = no_derivative(d[y], b, "scipy.stats.beta.cdf has no derivative rule in b (autograd has none either): "
                                  "keep b out of the differentiated inputs")
    d[loc] = unbroadcast(-d[y] * p, loc)
    d[scale] = unbroadcast(-d[y] * p * z, scale)
    t[y] = t[x] * p - t[loc] * p - t[scale] * p * z + no_derivative(
        t[a], y, "scipy.stats.beta.cdf has no derivative rule in a (autograd has none either): keep a out of the "
                 "differentiated inputs") + no_derivative(
        t[b], y, "scipy.stats.beta.cdf has no derivative rule in b (autograd has none either): keep b out of the "
                 "differentiated inputs")


# --------------------------------------------------------------------------- chi2
# chi2(df, loc, scale) is gamma(df / 2, loc, 2 * scale): its pdf and logpdf are defined over gamma's rules.
# The cdf keeps a rule of its own, so that its refusal in df names chi2 and df, not gamma and a.
def _chi2_logpdf(x, df, loc=0.0, scale=1.0):
    return gamma_logpdf(x, df / 2, loc, 2 * scale)


def _chi2_pdf(x, df, loc=0.0, scale=1.0):
    return gamma_pdf(x, df / 2, loc, 2 * scale)


@defvjp(None, sample=_loc_scale_sample([(1.5, 6.0)], _POS_X, _SMALL_LOC, ints=(0,)), python_only=True)
def chi2_cdf(y, x, df, loc=0.0, scale=1.0):
    p = gamma_pdf(x, df / 2, loc, 2 * scale)
    z = (x - loc) / scale
    d[x] = unbroadcast(d[y] * p, x)
    d[df] = no_derivative(d[y], df, "scipy.stats.chi2.cdf has no derivative rule in df (autograd has none "
                                    "either): keep df out of the differentiated inputs")
    d[loc] = unbroadcast(-d[y] * p, loc)
    d[scale] = unbroadcast(-d[y] * p * z, scale)
    t[y] = t[x] * p - t[loc] * p - t[scale] * p * z + no_derivative(
        t[df], y, "scipy.stats.chi2.cdf has no derivative rule in df (autograd has none either): keep df out of "
                  "the differentiated inputs")


# --------------------------------------------------------------------------- poisson
def _sample_poisson(draw, dt, st, array, shapes):
    sk, sm = S.broadcastable_shapes(draw)
    loc = draw(st.sampled_from([None, -1, 0, 1]))
    k = (np.round(np.asarray(array(draw, sk, np.float64, (0.0, 6.0)))) + max(loc or 0, 0)).astype(dt)  # k >= loc
    mu = array(draw, sm, dt, (0.5, 5.0))
    return ((k, mu) if loc is None else (k, mu, loc)), {}


@defvjp(None, sample=S.custom(_sample_poisson), python_only=True)
def poisson_logpmf(y, k, mu, loc=0):
    """log P(k; mu) for integer k (0 where k is not an integer >= loc: zero derivative there)."""
    kk = k - loc
    g = (kk / mu - 1) * mask(np.logical_and(kk >= 0, kk == np.floor(kk)), y)
    d[k] = None      # piecewise constant in the integer count and its shift
    d[loc] = None
    d[mu] = unbroadcast(d[y] * g, mu)
    t[y] = t[mu] * g


@defvjp(None, sample=S.custom(_sample_poisson), python_only=True)
def poisson_pmf(y, k, mu, loc=0):
    g = ((k - loc) / mu - 1) * y
    d[k] = None      # piecewise constant in the integer count and its shift
    d[loc] = None
    d[mu] = unbroadcast(d[y] * g, mu)
    t[y] = t[mu] * g


@defvjp(None, sample=S.custom(_sample_poisson), python_only=True)
def poisson_cdf(y, k, mu, loc=0):
    """P(K <= k): its derivative in mu is minus the pmf at floor(k)."""
    p = poisson_pmf(np.floor(k), mu, loc)
    d[k] = None      # piecewise constant in the integer count and its shift
    d[loc] = None
    d[mu] = unbroadcast(-d[y] * p, mu)
    t[y] = -t[mu] * p


# --------------------------------------------------------------------------- dirichlet
def _sample_dirichlet(draw, dt, st, array, shapes):
    k = draw(st.integers(2, 4))
    n = draw(st.sampled_from([None, 1, 3]))
    alpha = np.asarray(array(draw, (k,), np.float64, (1.2, 3.0)), dtype=dt)
    w = np.asarray(array(draw, (k,) if n is None else (k, n), np.float64, (0.5, 2.0)))
    x = (w / w.sum(0))[:-1].astype(dt)   # K - 1 components: scipy completes the last, so x can move freely
    return (x, alpha), {}


@defvjp(None, sample=S.custom(_sample_dirichlet), python_only=True)
def dirichlet_logpdf(y, x, alpha):
    """x: the components along axis 0 (K of them, or K - 1 and scipy completes the last), alpha (K,)."""
    d[x] = dirichlet_logpdf_grad(d[y], x, alpha, "x")
    d[alpha] = dirichlet_logpdf_grad(d[y], x, alpha, "alpha")
    t[y] = dirichlet_logpdf_tangent(t[x], x, alpha, "x") + dirichlet_logpdf_tangent(t[alpha], x, alpha, "alpha")


@defvjp(None, sample=S.custom(_sample_dirichlet), python_only=True)
def dirichlet_pdf(y, x, alpha):
    d[x] = dirichlet_logpdf_grad(d[y] * y, x, alpha, "x")
    d[alpha] = dirichlet_logpdf_grad(d[y] * y, x, alpha, "alpha")
    t[y] = y * dirichlet_logpdf_tangent(t[x], x, alpha, "x") + y * dirichlet_logpdf_tangent(t[alpha], x, alpha,
                                                                                             "alpha")


@primitive(tested_via=dirichlet_logpdf, python_only=True)
def dirichlet_logpdf_grad(g, x, alpha, wrt):
    """Cotangent of ``x`` or ``alpha`` (``wrt``) in dirichlet.logpdf given the result's ``g``. Second
    derivatives differentiate its definition over primitives (ops/second_order.py)."""
    return K.dirichlet_logpdf_grad(g, x, alpha, wrt)


@primitive(tested_via=dirichlet_logpdf, python_only=True)
def dirichlet_logpdf_tangent(tv, x, alpha, wrt):
    """Tangent of dirichlet.logpdf along the tangent ``tv`` of ``x`` or ``alpha`` (``wrt``); defined over
    primitives for second derivatives (ops/second_order.py)."""
    return K.dirichlet_logpdf_tangent(tv, x, alpha, wrt)


# --------------------------------------------------------------------------- multivariate_normal
def _spd(draw, dt, st, array, k):
    a = np.asarray(array(draw, (k, k), np.float64, (-1.0, 1.0)))
    return (a @ a.T + np.eye(k)).astype(dt)


def _sample_mvn(draw, dt, st, array, shapes):
    k = draw(st.integers(1, 3))
    batch = draw(st.sampled_from([(), (1,), (3,), (2, 2)]))
    x = np.asarray(array(draw, batch + (k,), np.float64, "real"), dtype=dt)
    if k == 1 and len(batch) == 1 and draw(st.booleans()):
        x = x.reshape(batch)                 # scipy: a 1-D x with a 1-D distribution is a batch of numbers
    mean = np.asarray(array(draw, (k,), np.float64, "real"), dtype=dt)
    form = draw(st.sampled_from(["matrix", "matrix", "diagonal", "scalar"]))
    cov = {"matrix": lambda: _spd(draw, dt, st, array, k),
           "diagonal": lambda: np.asarray(array(draw, (k,), np.float64, (0.5, 2.0)), dtype=dt),
           "scalar": lambda: np.asarray(array(draw, (), np.float64, (0.5, 2.0)), dtype=dt)}[form]()
    return (x, mean, cov), {}


@defvjp(None, sample=S.custom(_sample_mvn), python_only=True)
def mvn_logpdf(y, x, mean=None, cov=1, allow_singular=False):
    """scipy.stats.multivariate_normal.logpdf: x (..., k) (a 1-D x is one point, or with k == 1 a batch),
    mean (k,), cov a (k, k) matrix (lower triangle read), a vector (diagonal) or a scalar."""
    d[x] = mvn_logpdf_grad(d[y], x, mean, cov, allow_singular, "x")
    d[mean] = mvn_logpdf_grad(d[y], x, mean, cov, allow_singular, "mean")
    d[cov] = mvn_logpdf_grad(d[y], x, mean, cov, allow_singular, "cov")
    t[y] = (mvn_logpdf_tangent(t[x], x, mean, cov, allow_singular, "x")
            + mvn_logpdf_tangent(t[mean], x, mean, cov, allow_singular, "mean")
            + mvn_logpdf_tangent(t[cov], x, mean, cov, allow_singular, "cov"))


@defvjp(None, sample=S.custom(_sample_mvn), python_only=True)
def mvn_pdf(y, x, mean=None, cov=1, allow_singular=False):
    d[x] = mvn_logpdf_grad(d[y] * y, x, mean, cov, allow_singular, "x")
    d[mean] = mvn_logpdf_grad(d[y] * y, x, mean, cov, allow_singular, "mean")
    d[cov] = mvn_logpdf_grad(d[y] * y, x, mean, cov, allow_singular, "cov")
    t[y] = (y * mvn_logpdf_tangent(t[x], x, mean, cov, allow_singular, "x")
            + y * mvn_logpdf_tangent(t[mean], x, mean, cov, allow_singular, "mean")
            + y * mvn_logpdf_tangent(t[cov], x, mean, cov, allow_singular, "cov"))


def _sample_mvn_entropy(draw, dt, st, array, shapes):
    (_, mean, cov), _ = _sample_mvn(draw, dt, st, array, shapes)
    return (mean, cov), {}


@defvjp(None, sample=S.custom(_sample_mvn_entropy), python_only=True)
def mvn_entropy(y, mean=None, cov=1):
    """The differential entropy: it depends on cov only (mean sets the dimension of a scalar cov)."""
    d[mean] = None   # sets the dimension only
    d[cov] = mvn_entropy_grad(d[y], mean, cov)
    t[y] = mvn_entropy_tangent(t[cov], mean, cov)


@primitive(tested_via=mvn_logpdf, python_only=True)
def mvn_logpdf_grad(g, x, mean, cov, allow_singular, wrt):
    """Cotangent of ``x``, ``mean`` or ``cov`` (``wrt``) in multivariate_normal.logpdf; defined over primitives
    for second derivatives (ops/second_order.py)."""
    return K.mvn_logpdf_grad(g, x, mean, cov, allow_singular, wrt)


@primitive(tested_via=mvn_logpdf, python_only=True)
def mvn_logpdf_tangent(tv, x, mean, cov, allow_singular, wrt):
    """Tangent of multivariate_normal.logpdf along the tangent ``tv`` of ``x``, ``mean`` or ``cov``; defined over
    primitives for second derivatives (ops/second_order.py)."""
    return K.mvn_logpdf_tangent(tv, x, mean, cov, allow_singular, wrt)


@primitive(tested_via=mvn_entropy, python_only=True)
def mvn_entropy_grad(g, mean, cov):
    """Cotangent of ``cov`` in multivariate_normal.entropy; defined over primitives for second derivatives."""
    return K.mvn_entropy_grad(g, mean, cov)


@primitive(tested_via=mvn_entropy, python_only=True)
def mvn_entropy_tangent(tv, mean, cov):
    """Tangent of multivariate_normal.entropy along the tangent ``tv`` of ``cov``; defined over primitives for
    second derivatives."""
    return K.mvn_entropy_tangent(tv, mean, cov)


# --------------------------------------------------------------------------- keys
_METHODS = {
    "norm": {"pdf": norm_pdf, "logpdf": norm_logpdf, "cdf": norm_cdf, "logcdf": norm_logcdf, "sf": norm_sf,
             "logsf": norm_logsf},
    "t": {"pdf": t_pdf, "logpdf": t_logpdf, "cdf": t_cdf, "logcdf": t_logcdf, "sf": t_sf, "logsf": t_logsf},
    "gamma": {"pdf": gamma_pdf, "logpdf": gamma_logpdf, "cdf": gamma_cdf},
    "beta": {"pdf": beta_pdf, "logpdf": beta_logpdf, "cdf": beta_cdf},
    "chi2": {"cdf": chi2_cdf},
    "poisson": {"pmf": poisson_pmf, "logpmf": poisson_logpmf, "cdf": poisson_cdf},
    "dirichlet": {"pdf": dirichlet_pdf, "logpdf": dirichlet_logpdf},
    "multivariate_normal": {"pdf": mvn_pdf, "logpdf": mvn_logpdf, "entropy": mvn_entropy},
}


def _register_keys():
    import scipy.stats as st   # lazily (when_imported): importing scipy.stats costs about 0.6 s
    for dist, methods in _METHODS.items():
        for method, fn in methods.items():
            alias(getattr(getattr(st, dist), method), fn)
    define(st.chi2.pdf)(_chi2_pdf)
    define(st.chi2.logpdf)(_chi2_logpdf)


when_imported("scipy.stats", _register_keys)
