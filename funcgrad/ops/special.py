"""scipy.special's differentiable functions as primitives, each declared once.

Owns the rules of ``gammaln gamma digamma (psi) polygamma rgamma multigammaln betaln beta erf
erfc erfinv erfcinv expit logit xlogy xlog1py entr rel_entr i0 i1 iv ive j0 j1 jv (jn) y0 y1
yn gammainc gammaincc betainc`` and of ``logsumexp`` (with ``axis`` None, an int or a tuple, ``b=``,
``keepdims`` and ``return_sign``: read as :func:`_logsumexp`, a lowering onto the primitives
``scipy_logsumexp``, ``scipy_logsumexp_b`` and ``logsumexp_sign``), and of ``softmax`` and
``log_softmax`` (lowered to ``exp(x - logsumexp(x, axis, keepdims=True))`` and
``x - logsumexp(...)``). funcgrad.nn's ``logsumexp``, ``softmax`` and ``log_softmax`` primitives
are not reused: their ``axis`` is an int (default -1) fixed in a fused kernel, while SciPy's
defaults to None (all axes), takes tuples, ``keepdims`` and ``b``, and an ``axis`` read from a
variable is only known when the function runs, too late to choose between the two.

Each template differentiates the arguments autograd differentiates: integer orders
(``polygamma``'s n, ``yn``'s n, ``multigammaln``'s d) are static, and where a float argument has
no derivative rule here (the order v of ``iv ive jv``, the ``a`` of ``gammainc``) its d-line is
:func:`no_derivative`, which refuses at run time, naming the argument, unless the cotangent is
zero. The kernels (:mod:`funcgrad.kernels.cpu_special`) are SciPy's own functions, in Python
only (``python_only``): ``jit="auto"`` runs code calling them as Python over compiled kernels.

The keys (``scipy.special.gammaln``...) are registered when scipy.special is imported
(:func:`~funcgrad.ops.registry.when_imported`), so ``import funcgrad`` does not import it.
"""
from __future__ import annotations

import numpy as np

from . import samples as S
from .core import unbroadcast, unreduce
from .registry import alias, d, define, defvjp, lookup, nondiff, t, when_imported



def _order_and_x(lo, hi, domain):
    """Samples ``(n, x)``: an integer order (static, not differentiated) and a float array ``x``."""
    def fn(draw, dt, st, array, shapes):
        return (draw(st.integers(lo, hi)), array(draw, shapes(draw), dt, domain)), {}
    return S.custom(fn)


# --------------------------------------------------------------------------- refusal
@defvjp(None, python_only=True, sample=S.custom(lambda draw, dt, st, array, shapes: (
    lambda s: ((np.zeros(s, dt), array(draw, s, dt), "no derivative"), {}))(shapes(draw))))
def no_derivative(y, g, x, what):
    """Zeros shaped like ``x`` while ``g`` is zero, else a NoDerivativeError saying ``what``: the
    d-line (or JVP term) of an argument whose derivative is not implemented."""
    pass


# --------------------------------------------------------------------------- gamma family
@defvjp(None, sample=S.unary("positive"), elementwise=True, python_only=True)
def gammaln(y, x):
    d[x] = d[y] * digamma(x)
    t[y] = t[x] * digamma(x)


@defvjp(None, sample=S.unary("positive"), elementwise=True, python_only=True)
def gamma(y, x):
    d[x] = d[y] * y * digamma(x)
    t[y] = t[x] * y * digamma(x)


@defvjp(None, sample=S.unary("positive"), elementwise=True, python_only=True)
def digamma(y, x):
    d[x] = d[y] * polygamma(1, x)
    t[y] = t[x] * polygamma(1, x)


@defvjp(None, sample=_order_and_x(0, 3, (0.5, 3.0)), elementwise=True, python_only=True)
def polygamma(y, n, x):
    """``polygamma(n, x)``, the n-th derivative of digamma; the integer order n is not differentiated."""
    d[x] = d[y] * polygamma(n + 1, x)
    d[n] = no_derivative(d[y], n, "scipy.special.polygamma(n, x) has no derivative in the integer order n")
    t[y] = t[x] * polygamma(n + 1, x) + no_derivative(t[n], y, "scipy.special.polygamma(n, x) has no derivative "
                                                               "in the integer order n")


@defvjp(None, sample=S.unary("positive"), elementwise=True, python_only=True)
def rgamma(y, x):
    """1 / gamma(x)."""
    d[x] = -d[y] * y * digamma(x)
    t[y] = -t[x] * y * digamma(x)


def _sample_multigammaln(draw, dt, st, array, shapes):
    return (array(draw, shapes(draw), dt, (2.0, 4.0)), draw(st.integers(1, 3))), {}


@defvjp(None, sample=S.custom(_sample_multigammaln), python_only=True)
def multigammaln(y, a, d):
    """The log of the multivariate gamma function of dimension ``d`` (an integer, static)."""
    d[a] = d[y] * multipolygamma(0, a, d)
    t[y] = t[a] * multipolygamma(0, a, d)


def _sample_multipolygamma(draw, dt, st, array, shapes):
    return (draw(st.integers(0, 2)), array(draw, shapes(draw), dt, (2.0, 4.0)), draw(st.integers(1, 3))), {}


@defvjp(None, sample=S.custom(_sample_multipolygamma), python_only=True)
def multipolygamma(y, n, a, d):
    """sum(polygamma(n, a - j / 2) for j in range(d)): the derivatives of multigammaln (integers n, d static)."""
    d[a] = d[y] * multipolygamma(n + 1, a, d)
    d[n] = no_derivative(d[y], n, "multipolygamma(n, a, d) has no derivative in the integer order n")
    t[y] = t[a] * multipolygamma(n + 1, a, d) + no_derivative(t[n], y, "multipolygamma(n, a, d) has no "
                                                                       "derivative in the integer order n")


@defvjp(None, sample=S.binary("positive", "positive"), elementwise=True, python_only=True)
def betaln(y, a, b):
    d[a] = unbroadcast(d[y] * (digamma(a) - digamma(a + b)), a)
    d[b] = unbroadcast(d[y] * (digamma(b) - digamma(a + b)), b)
    t[y] = t[a] * (digamma(a) - digamma(a + b)) + t[b] * (digamma(b) - digamma(a + b))


@defvjp(None, sample=S.binary("positive", "positive"), elementwise=True, python_only=True)
def beta(y, a, b):
    d[a] = unbroadcast(d[y] * y * (digamma(a) - digamma(a + b)), a)
    d[b] = unbroadcast(d[y] * y * (digamma(b) - digamma(a + b)), b)
    t[y] = t[a] * y * (digamma(a) - digamma(a + b)) + t[b] * y * (digamma(b) - digamma(a + b))


_GAMMAINC_A = ("scipy.special.{0}(a, x) is differentiated in x only (as autograd does); it has no derivative rule "
               "in a: keep a out of the differentiated inputs")


def _sample_gammainc(draw, dt, st, array, shapes):
    sa, sx = S.broadcastable_shapes(draw)
    a = (np.asarray(array(draw, sa, np.float64, (1.0, 4.0))) // 1).astype(np.int64)   # integers: not differentiated
    return (a, array(draw, sx, dt, "positive")), {}


@defvjp(None, sample=S.custom(_sample_gammainc), elementwise=True, python_only=True)
def gammainc(y, a, x):
    """The regularized lower incomplete gamma function P(a, x)."""
    dens = np.exp(xlogy(a - 1, x) - x - gammaln(a))
    d[x] = unbroadcast(d[y] * dens, x)
    d[a] = no_derivative(d[y], a, "scipy.special.gammainc(a, x) is differentiated in x only (as autograd "
                                  "does); it has no derivative rule in a: keep a out of the differentiated inputs")
    t[y] = t[x] * dens + no_derivative(t[a], y, "scipy.special.gammainc(a, x) is differentiated in x only (as "
                                                "autograd does); it has no derivative rule in a: keep a out of the "
                                                "differentiated inputs")


@defvjp(None, sample=S.custom(_sample_gammainc), elementwise=True, python_only=True)
def gammaincc(y, a, x):
    """The regularized upper incomplete gamma function Q(a, x) = 1 - P(a, x)."""
    dens = np.exp(xlogy(a - 1, x) - x - gammaln(a))
    d[x] = unbroadcast(-d[y] * dens, x)
    d[a] = no_derivative(d[y], a, "scipy.special.gammaincc(a, x) is differentiated in x only (as autograd "
                                  "does); it has no derivative rule in a: keep a out of the differentiated inputs")
    t[y] = -t[x] * dens + no_derivative(t[a], y, "scipy.special.gammaincc(a, x) is differentiated in x only (as "
                                                 "autograd does); it has no derivative rule in a: keep a out of the "
                                                 "differentiated inputs")


def _sample_betainc(draw, dt, st, array, shapes):
    sa, sb, sx = S.broadcastable_shapes(draw, 3)
    ab = lambda sh: (np.asarray(array(draw, sh, np.float64, (1.0, 4.0))) // 1).astype(np.int64)  # noqa: E731
    return (ab(sa), ab(sb), array(draw, sx, dt, (0.05, 0.95))), {}


@defvjp(None, sample=S.custom(_sample_betainc), elementwise=True, python_only=True)
def betainc(y, a, b, x):
    """The regularized incomplete beta function I_x(a, b); differentiated in x (as autograd does)."""
    dens = np.exp(xlogy(a - 1, x) + xlog1py(b - 1, -x) - betaln(a, b))
    d[x] = unbroadcast(d[y] * dens, x)
    d[a] = no_derivative(d[y], a, "scipy.special.betainc(a, b, x) is differentiated in x only (as autograd "
                                  "does); it has no derivative rule in a: keep a out of the differentiated inputs")
    d[b] = no_derivative(d[y], b, "scipy.special.betainc(a, b, x) is differentiated in x only (as autograd "
                                  "does); it has no derivative rule in b: keep b out of the differentiated inputs")
    t[y] = t[x] * dens + no_derivative(t[a], y, "scipy.special.betainc(a, b, x) is differentiated in x only (as "
                                                "autograd does); it has no derivative rule in a: keep a out of the "
                                                "differentiated inputs") + \
        no_derivative(t[b], y, "scipy.special.betainc(a, b, x) is differentiated in x only (as autograd does); it "
                               "has no derivative rule in b: keep b out of the differentiated inputs")


# --------------------------------------------------------------------------- error functions
@defvjp(None, sample=S.unary(), elementwise=True)
def erf(y, x):
    d[x] = d[y] * 1.1283791670955126 * np.exp(-x * x)
    t[y] = t[x] * 1.1283791670955126 * np.exp(-x * x)


@defvjp(None, sample=S.unary(), elementwise=True)
def erfc(y, x):
    d[x] = -d[y] * 1.1283791670955126 * np.exp(-x * x)
    t[y] = -t[x] * 1.1283791670955126 * np.exp(-x * x)


@defvjp(None, sample=S.unary("unit"), elementwise=True, python_only=True)
def erfinv(y, x):
    d[x] = d[y] * 0.886226925452758 * np.exp(y * y)
    t[y] = t[x] * 0.886226925452758 * np.exp(y * y)


@defvjp(None, sample=S.unary((0.1, 1.9)), elementwise=True, python_only=True)
def erfcinv(y, x):
    d[x] = -d[y] * 0.886226925452758 * np.exp(y * y)
    t[y] = -t[x] * 0.886226925452758 * np.exp(y * y)


# --------------------------------------------------------------------------- logistic, logs, entropies
@defvjp(None, sample=S.unary(), elementwise=True)
def expit(y, x):
    d[x] = d[y] * y * (1 - y)
    t[y] = t[x] * y * (1 - y)


@defvjp(None, sample=S.unary((0.05, 0.95)), elementwise=True)
def logit(y, x):
    d[x] = d[y] / (x * (1 - x))
    t[y] = t[x] / (x * (1 - x))


@defvjp(None, sample=S.binary("real", "positive"), elementwise=True, python_only=True)
def xlogy(z, x, y):
    """x * log(y), 0 where x == 0."""
    d[x] = unbroadcast(d[z] * np.log(y), x)
    d[y] = unbroadcast(d[z] * x / y, y)
    t[z] = t[x] * np.log(y) + t[y] * x / y


@defvjp(None, sample=S.binary("real", "positive"), elementwise=True, python_only=True)
def xlog1py(z, x, y):
    """x * log1p(y), 0 where x == 0."""
    d[x] = unbroadcast(d[z] * np.log1p(y), x)
    d[y] = unbroadcast(d[z] * x / (1 + y), y)
    t[z] = t[x] * np.log1p(y) + t[y] * x / (1 + y)


@defvjp(None, sample=S.unary("positive"), elementwise=True, python_only=True)
def entr(y, x):
    """-x * log(x) (x > 0)."""
    d[x] = -d[y] * (np.log(x) + 1)
    t[y] = -t[x] * (np.log(x) + 1)


@defvjp(None, sample=S.binary("positive", "positive"), elementwise=True, python_only=True)
def rel_entr(z, x, y):
    """x * log(x / y) (x, y > 0)."""
    d[x] = unbroadcast(d[z] * (np.log(x) - np.log(y) + 1), x)
    d[y] = unbroadcast(-d[z] * x / y, y)
    t[z] = t[x] * (np.log(x) - np.log(y) + 1) - t[y] * x / y


# --------------------------------------------------------------------------- Bessel functions
@defvjp(None, sample=S.unary(), elementwise=True, python_only=True)
def i0(y, x):
    d[x] = d[y] * i1(x)
    t[y] = t[x] * i1(x)


@defvjp(None, sample=S.unary(), elementwise=True, python_only=True)
def i1(y, x):
    d[x] = d[y] * (i0(x) + iv(2, x)) / 2
    t[y] = t[x] * (i0(x) + iv(2, x)) / 2


@defvjp(None, sample=_order_and_x(0, 3, "real"), elementwise=True, python_only=True)
def iv(y, v, z):
    """The modified Bessel function of the first kind of real order v (not differentiated)."""
    d[z] = d[y] * (iv(v - 1, z) + iv(v + 1, z)) / 2
    d[v] = no_derivative(d[y], v, "scipy.special.iv(v, z) is differentiated in z only; it has no derivative rule "
                                  "in the order v: keep v out of the differentiated inputs")
    t[y] = t[z] * (iv(v - 1, z) + iv(v + 1, z)) / 2 + no_derivative(
        t[v], y, "scipy.special.iv(v, z) is differentiated in z only; it has no derivative rule in the order v: keep "
                 "v out of the differentiated inputs")


@defvjp(None, sample=_order_and_x(0, 3, "positive"), elementwise=True, python_only=True)
def ive(y, v, z):
    """iv(v, z) * exp(-abs(z)); differentiated in z."""
    d[z] = d[y] * (y * (v / z - np.sign(z)) + ive(v + 1, z))
    d[v] = no_derivative(d[y], v, "scipy.special.ive(v, z) is differentiated in z only; it has no derivative rule "
                                  "in the order v: keep v out of the differentiated inputs")
    t[y] = t[z] * (y * (v / z - np.sign(z)) + ive(v + 1, z)) + no_derivative(
        t[v], y, "scipy.special.ive(v, z) is differentiated in z only; it has no derivative rule in the order v: "
                 "keep v out of the differentiated inputs")


@defvjp(None, sample=S.unary(), elementwise=True, python_only=True)
def j0(y, x):
    d[x] = -d[y] * j1(x)
    t[y] = -t[x] * j1(x)


@defvjp(None, sample=S.unary(), elementwise=True, python_only=True)
def j1(y, x):
    d[x] = d[y] * (j0(x) - jv(2, x)) / 2
    t[y] = t[x] * (j0(x) - jv(2, x)) / 2


@defvjp(None, sample=_order_and_x(0, 3, "real"), elementwise=True, python_only=True)
def jv(y, v, z):
    """The Bessel function of the first kind of real order v (scipy.special.jn is the same function)."""
    d[z] = d[y] * (jv(v - 1, z) - jv(v + 1, z)) / 2
    d[v] = no_derivative(d[y], v, "scipy.special.jv(v, z) is differentiated in z only; it has no derivative rule "
                                  "in the order v: keep v out of the differentiated inputs")
    t[y] = t[z] * (jv(v - 1, z) - jv(v + 1, z)) / 2 + no_derivative(
        t[v], y, "scipy.special.jv(v, z) is differentiated in z only; it has no derivative rule in the order v: keep "
                 "v out of the differentiated inputs")


@defvjp(None, sample=S.unary("positive"), elementwise=True, python_only=True)
def y0(y, x):
    d[x] = -d[y] * y1(x)
    t[y] = -t[x] * y1(x)


@defvjp(None, sample=S.unary("positive"), elementwise=True, python_only=True)
def y1(y, x):
    d[x] = d[y] * (y0(x) - yn(2, x)) / 2
    t[y] = t[x] * (y0(x) - yn(2, x)) / 2


@defvjp(None, sample=_order_and_x(0, 3, "positive"), elementwise=True, python_only=True)
def yn(y, n, x):
    """The Bessel function of the second kind of integer order n (SciPy truncates a float n: its
    derivative in n is zero)."""
    d[x] = d[y] * (yn(n - 1, x) - yn(n + 1, x)) / 2
    t[y] = t[x] * (yn(n - 1, x) - yn(n + 1, x)) / 2


# --------------------------------------------------------------------------- logsumexp
@defvjp(None, sample=S.reduction())
def scipy_logsumexp(y, a, axis=None, keepdims=False):
    """``scipy.special.logsumexp(a, axis, keepdims=keepdims)``: ``axis`` None, an int or a tuple."""
    w = np.exp(a - unreduce(y, a, axis, keepdims))
    d[a] = unreduce(d[y], a, axis, keepdims) * w
    t[y] = np.sum(t[a] * w, axis=axis, keepdims=keepdims)


def _sample_lse_b(draw, dt, st, array, shapes):
    (a,), kw = S.reduction()(draw, dt)
    sb = np.shape(a)[draw(st.integers(0, np.ndim(a))):]
    sb = tuple(1 if draw(st.booleans()) else n for n in sb)
    b = array(draw, sb, dt, "positive")
    return (a, b), dict(kw, return_sign=draw(st.booleans()))


@defvjp(None, sample=S.custom(_sample_lse_b), python_only=True)
def scipy_logsumexp_b(y, a, b, axis=None, keepdims=False, return_sign=False):
    """``scipy.special.logsumexp(a, axis, b=b, keepdims)``: log(sum(b * exp(a))); with ``return_sign``
    log(abs(sum(b * exp(a)))). ``a`` and ``b`` broadcast together."""
    ab = a + 0 * b
    w = np.exp(a - unreduce(y, ab, axis, keepdims)) * unreduce(logsumexp_sign(a, b, axis, keepdims), ab, axis,
                                                                keepdims)
    d[a] = unbroadcast(unreduce(d[y], ab, axis, keepdims) * b * w, a)
    d[b] = unbroadcast(unreduce(d[y], ab, axis, keepdims) * w, b)
    t[y] = np.sum(t[a] * b * w, axis=axis, keepdims=keepdims) + np.sum(t[b] * w, axis=axis, keepdims=keepdims)


def _sample_lse_sign(draw, dt, st, array, shapes):
    (a, b), kw = _sample_lse_b(draw, dt, st, array, shapes)
    kw.pop("return_sign")
    return (a, b), kw


@defvjp(None, sample=S.custom(_sample_lse_sign), python_only=True)
def logsumexp_sign(y, a, b=None, axis=None, keepdims=False):
    """The sign of sum(b * exp(a)) (scipy.special.logsumexp's second result with ``return_sign``)."""
    pass  # piecewise constant


def _logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """What funcgrad reads for ``scipy.special.logsumexp``: the options are static, ``return_sign`` makes
    a pair whose sign has no derivative."""
    if b is None:
        out = scipy_logsumexp(a, axis, keepdims)
    else:
        out = scipy_logsumexp_b(a, b, axis, keepdims, return_sign)
    if return_sign:
        return out, logsumexp_sign(a, b, axis, keepdims)
    return out


def _softmax(x, axis=None):
    """What funcgrad reads for ``scipy.special.softmax(x, axis)``: exp(x - logsumexp(x, axis, keepdims=True))."""
    return np.exp(x - scipy_logsumexp(x, axis, True))


def _log_softmax(x, axis=None):
    """What funcgrad reads for ``scipy.special.log_softmax(x, axis)``: x - logsumexp(x, axis, keepdims=True)."""
    return x - scipy_logsumexp(x, axis, True)


# --------------------------------------------------------------------------- keys
def _register_keys():
    import scipy.special as sp   # lazily (when_imported): importing scipy.special costs about 0.4 s
    for name, fn in [("gammaln", gammaln), ("gamma", gamma), ("digamma", digamma), ("psi", digamma),
                     ("polygamma", polygamma), ("rgamma", rgamma), ("multigammaln", multigammaln),
                     ("betaln", betaln), ("beta", beta), ("gammainc", gammainc), ("gammaincc", gammaincc),
                     ("betainc", betainc),
                     ("erf", erf), ("erfc", erfc), ("erfinv", erfinv), ("erfcinv", erfcinv), ("expit", expit),
                     ("logit", logit), ("xlogy", xlogy), ("xlog1py", xlog1py), ("entr", entr),
                     ("rel_entr", rel_entr), ("i0", i0), ("i1", i1), ("iv", iv), ("ive", ive), ("j0", j0),
                     ("j1", j1), ("jv", jv), ("jn", jv), ("y0", y0), ("y1", y1), ("yn", yn)]:
        key = getattr(sp, name, None)
        if key is not None and lookup(key) is None:   # psi is digamma, jn is jv
            alias(key, fn)
    nondiff(sp.gammasgn)   # the sign of gamma: piecewise constant
    define(sp.logsumexp)(_logsumexp)
    define(sp.softmax)(_softmax)
    define(sp.log_softmax)(_log_softmax)


when_imported("scipy.special", _register_keys)
