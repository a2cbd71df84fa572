"""Second derivatives through the kernels that JVP and VJP lines call.

Several primitives' JVP lines call a helper kernel (``t[y] = cholesky_jvp(t[a], y, upper)``): one fast
NumPy (and Numba) function for the tangent. Forward mode calls it as it is. To differentiate the generated
forward-mode code again (``jvp`` of ``jvp``, reverse over forward: Hessian-vector products, autograd's
second-order ``check_grads``), funcgrad reads that code back like the user's, and a call of the helper
kernel there needs derivatives of its own. Each helper is therefore also *defined* here
(:func:`.registry.define`, keyed by the kernel objects of both kernel namespaces) as Python over
primitives that have rules: the same value, written so that normalize inlines it where generated code calls
the kernel. The user's own calls never reach these: they call NumPy's functions, whose rules call the
kernels. VJP helpers are defined the same way, for reverse-mode code read back (a gradient taken inside a
differentiated function, grad of grad): einsum's, qr's, the VJPs of pinv/eigh/eig/svd/norm, unjoin, ...

Each definition computes what its kernel computes (``tests/test_autograd_compat.py`` and
``tests/test_second_order_rules.py`` compare them on random inputs and check second derivatives against
central differences).
"""
from __future__ import annotations

import numpy as np
import scipy.linalg as sla

import funcgrad.kernels.cpu as K
from . import linalg as L
from .core import unbroadcast, untake
from .special import digamma
from .registry import define

mT = np.linalg.matrix_transpose


def _keys(name):
    """The kernel ``name`` as generated code sees it: the compiled namespace's object and its Python function
    (the Python namespace's)."""
    k = getattr(K, name)
    return [k] + ([k.py_func] if getattr(k, "py_func", None) is not None else [])


def kernel_definition(name):
    """Define kernel ``name`` (as generated code calls it) by the decorated function."""
    def deco(fn):
        define(*_keys(name))(fn)
        fn.kernel_name = name
        return fn
    return deco


def _gap_inverse(w):
    """``F[..., i, j] = 1 / (w_j - w_i)`` off the diagonal, 0 on it and where two values coincide."""
    d = w[..., None, :] - w[..., :, None]
    same = d == 0
    return np.where(same, 0.0, 1.0 / np.where(same, 1.0, d))


# ----------------------------------------------------------------------------- determinants, solves
@kernel_definition("slogdet_jvp")
def slogdet_jvp(t, a):
    tr = np.sum(np.linalg.inv(a) * mT(t), axis=(-2, -1))
    return np.stack([0.0 * tr, tr], axis=-1)


@kernel_definition("solve_like")
def solve_like(a, z, b):
    if b.ndim == 1 and z.ndim > 1:
        return np.linalg.solve(a, z[..., None])[..., 0]
    return np.linalg.solve(a, z)


@kernel_definition("matmul_like")
def matmul_like(m, y, b):
    if b.ndim == 1:
        return (m @ y[..., None])[..., 0]
    return m @ y


@kernel_definition("solve_outer")
def solve_outer(u, y, b):
    if b.ndim == 1:
        return u[..., :, None] * y[..., None, :]
    return u @ mT(y)


# ----------------------------------------------------------------------------- pinv, cholesky, eigh, svd
@kernel_definition("pinv_jvp")
def pinv_jvp(t, y, a, hermitian=False):
    if hermitian:
        a = L.symmetric_from_triangle(a, True)
        t = L.symmetric_from_triangle(t, True)
    n = y.shape[-2]
    m = y.shape[-1]
    out = -(y @ t @ y)
    out = out + (y @ mT(y)) @ mT(t) @ (np.eye(m, dtype=y.dtype) - a @ y)
    return out + (np.eye(n, dtype=y.dtype) - y @ a) @ mT(t) @ mT(y) @ y


@kernel_definition("cholesky_jvp")
def cholesky_jvp(t, c, upper=False):
    lo = mT(c) if upper else c
    ds = L.symmetric_from_triangle(t, not upper)
    x = np.linalg.solve(lo, mT(np.linalg.solve(lo, ds)))          # L^-1 ds L^-T (ds is symmetric)
    phi = np.tril(x) - 0.5 * x * np.eye(x.shape[-1], dtype=x.dtype)        # the lower triangle, diagonal halved
    dl = lo @ phi
    return mT(dl) if upper else dl


@kernel_definition("eigh_jvp")
def eigh_jvp(t, p, UPLO="L"):
    w = np.real(p[..., 0, :])
    v = p[..., 1:, :]
    m = np.conj(mT(v)) @ L.symmetric_from_triangle(t, UPLO == "L") @ v
    dw = np.real(np.diagonal(m, axis1=-2, axis2=-1))
    dv = v @ (_gap_inverse(w) * m)
    return np.concatenate([dw[..., None, :] + 0.0 * dv[..., :1, :], dv], axis=-2)   # dw in dv's kind


@kernel_definition("eig_jvp")
def eig_jvp(t, p):
    w = p[..., 0, :]
    v = p[..., 1:, :]
    m = np.linalg.solve(v, t @ v)                                 # v^-1 t v
    dw = np.diagonal(m, axis1=-2, axis2=-1)
    dv = v @ (_gap_inverse(w) * m)
    dv = dv - v * np.real(np.sum(np.conj(v) * dv, axis=-2, keepdims=True))   # columns stay unit vectors
    return np.concatenate([dw[..., None, :], dv], axis=-2)


@kernel_definition("svd_jvp")
def svd_jvp(t, p, a, full_matrices=True, hermitian=False):
    m = a.shape[-2]
    n = a.shape[-1]
    k = min(m, n)
    assert not (full_matrices and m != n), (
        "np.linalg.svd(..., full_matrices=True): the extra singular vectors of a non-square matrix are not unique, "
        "so they have no derivative; use full_matrices=False")
    assert not (hermitian and np.iscomplexobj(p)), (
        "np.linalg.svd(..., hermitian=True) of complex matrices: derivatives are not supported; use hermitian=False")
    if hermitian:
        t = L.symmetric_from_triangle(t, True)
    u = p[..., :m, :k]
    s = np.real(p[..., m, :k])
    v = np.conj(p[..., m + 1:, :k])                   # the stored rows are Vh^T
    dp = np.conj(mT(u)) @ t @ v
    dph = np.conj(mT(dp))
    ds = np.real(np.diagonal(dp, axis1=-2, axis2=-1))
    f = _gap_inverse(s * s)
    sr = s[..., None, :]
    sc = s[..., :, None]
    du = u @ (f * (dp * sr + sc * dph))
    dv = v @ (f * (sc * dp + dph * sr))
    if np.iscomplexobj(p):   # the phase of each pair, carried by u
        du = du + u * (1j * np.imag(np.diagonal(dp, axis1=-2, axis2=-1)) / s)[..., None, :]
    if m > n:
        du = du + (t @ v - u @ dp) / sr
    if m < n:
        dv = dv + (np.conj(mT(t)) @ u - v @ dph) / sr
    return np.concatenate([du, ds[..., None, :] + 0.0 * du[..., :1, :], np.conj(dv)], axis=-2)


# ----------------------------------------------------------------------------- VJPs of pinv, eigh, eig, svd
# Reverse-mode code read back (a gradient taken inside a differentiated function, grad of grad) calls these.
@kernel_definition("pinv_vjp")
def pinv_vjp(g, y, a, hermitian=False):
    if hermitian:
        a = L.symmetric_from_triangle(a, True)
    yt = mT(y)
    gt = mT(g)
    term = -(y @ gt @ y)
    term = term + (y @ yt) @ (g - g @ a @ y)                      # (y y^T) g (I - a y)
    term = term + (g - y @ a @ g) @ yt @ y                        # (I - y a) g y^T y
    gr = mT(term)
    return L.fold_triangle(gr, True) if hermitian else gr


@kernel_definition("eigh_vjp")
def eigh_vjp(g, p, UPLO="L"):
    w = np.real(p[..., 0, :])
    v = p[..., 1:, :]
    gw = g[..., 0, :]
    gv = g[..., 1:, :]
    vt = mT(v)
    vc = np.conj(v)
    gr = (vc * gw[..., None, :]) @ vt + vc @ (_gap_inverse(w) * (vt @ gv)) @ vt
    return L.fold_triangle(gr, UPLO == "L")


@kernel_definition("eig_vjp")
def eig_vjp(g, p):
    w = p[..., 0, :]
    v = p[..., 1:, :]
    gw = g[..., 0, :]
    gv = g[..., 1:, :]
    eye = np.eye(w.shape[-1])
    vt = mT(v)
    f = _gap_inverse(w)
    vtgv = vt @ gv
    r = gw[..., :, None] * eye + f * vtgv - f * ((vt @ np.conj(v)) @ (
        np.real(np.diagonal(vtgv, axis1=-2, axis2=-1))[..., :, None] * eye))
    return np.linalg.solve(vt, r @ vt)


_SVD_FULL_EXTRA = ("np.linalg.svd(..., full_matrices=True): the extra singular vectors of a non-square matrix are not "
                   "unique, so they have no derivative; use full_matrices=False (or use only the first min(m, n) of "
                   "them)")


def _recip(s):
    """1 / s, 0 where s is 0."""
    return np.where(s == 0, 0.0, 1.0 / np.where(s == 0, 1.0, s))


@kernel_definition("svd_vjp")
def svd_vjp(g, p, a, full_matrices=True, hermitian=False):
    """Townsend's formulas (autograd's for complex matrices), one expression for both kinds: whether ``p`` is
    complex is only known when the function runs (a branch on it would build and differentiate both)."""
    m = a.shape[-2]
    n = a.shape[-1]
    k = min(m, n)
    cu = m if full_matrices else k
    cv = n if full_matrices else k
    u = p[..., :m, :cu]
    s = np.real(p[..., m, :k])
    v = p[..., m + 1:, :cv]
    gu = g[..., :m, :cu]
    gs = np.real(g[..., m, :k])
    gv = g[..., m + 1:, :cv]
    if full_matrices:
        assert not (m > n and np.any(gu[..., :, k:] != 0) or m < n and np.any(gv[..., :, k:] != 0)), _SVD_FULL_EXTRA
        u = u[..., :, :k]
        v = v[..., :, :k]
        gu = gu[..., :, :k]
        gv = gv[..., :, :k]
    if hermitian:
        assert not np.iscomplexobj(p), (
            "np.linalg.svd(..., hermitian=True) of complex matrices: derivatives are not supported; use "
            "hermitian=False")
    V = np.conj(v)                                                # v holds Vh^T
    gV = np.conj(gv)
    eye = np.eye(k)
    f = _gap_inverse(s * s)
    utgu = mT(u) @ gu
    vtgv = mT(V) @ gV
    dg = np.diagonal(utgu, axis1=-2, axis2=-1)
    inner = (f * (utgu - np.conj(mT(utgu)))) * s[..., None, :] + eye * gs[..., :, None] + s[..., :, None] * (
        f * (vtgv - np.conj(mT(vtgv)))) + ((dg - np.real(dg)) * _recip(s))[..., None, :] * eye   # i Im(dg) / s
    gr = np.conj(u) @ inner @ mT(V)
    if m < n and np.any(gv != 0):   # as the kernel: a rank-deficient matrix's singular values alone stay finite
        gr = gr + np.conj((u / s[..., None, :]) @ mT(gV) @ (np.eye(n) - V @ np.conj(mT(V))))
    if m > n and np.any(gu != 0):
        gr = gr + mT((V / s[..., None, :]) @ mT(gu) @ (np.eye(m) - u @ np.conj(mT(u))))
    return L.fold_triangle(gr, True) if hermitian else gr


# ----------------------------------------------------------------------------- norm
_INF = "inf"   # compared as float(_INF): np.inf read by normalize is a captured number, known only at run time, so
#                ``ord == np.inf`` was a run-time branch that built both of norm's paths (Numba refused one)


def _tie_share(v, target, axis):
    """1 where ``v`` equals ``target`` along ``axis``, shared out equally among ties (piecewise constant)."""
    m = np.where(v == target, 1.0, 0.0)   # (not .astype(v.dtype): a dtype read at run time, which Numba refuses)
    return m / np.sum(m, axis=axis, keepdims=True)


def _unit_2(x, axes):
    y = np.sqrt(np.sum(np.real(x * np.conj(x)), axis=axes, keepdims=True))
    zero = y == 0
    return np.where(zero, 0.0, np.conj(x) / np.where(zero, 1.0, y))


def _norm_unit(x, ord, axes, matrix):  # noqa: A002
    """d norm / d x for every element, as kernels/cpu_linalg.py's ``_norm_unit`` computes it (of complex x,
    ``conj(x) / |x|`` in place of ``sign(x)``: constant at real x, so its derivative is 0 there as sign's)."""
    ax = np.abs(x)
    sg = np.where(ax == 0, 0.0, np.conj(x) / np.where(ax == 0, 1.0, ax))
    if not matrix:
        if ord is None or ord == 2:
            return _unit_2(x, axes)
        if ord == float(_INF) or ord == -float(_INF):
            tgt = np.max(ax, axis=axes, keepdims=True) if ord == float(_INF) else np.min(ax, axis=axes, keepdims=True)
            return sg * _tie_share(ax, tgt, axes)
        if ord == 0:
            return 0.0 * x
        if ord == 1:
            return sg
        p = float(ord)
        y = np.sum(ax ** p, axis=axes, keepdims=True) ** (1.0 / p)
        return sg * ax ** (p - 1) * y ** (1 - p)
    r, c = axes
    if ord is None or ord == "fro":
        return _unit_2(x, axes)
    if ord == "nuc" or ord == 2 or ord == -2:
        xm = np.moveaxis(np.conj(x), (r, c), (-2, -1))
        u, s, vh = np.linalg.svd(xm, full_matrices=False)
        if ord == "nuc":
            gm = u @ vh
        elif ord == 2:
            gm = u[..., :, 0, None] * vh[..., 0, None, :]
        else:
            gm = u[..., :, -1, None] * vh[..., -1, None, :]
        return np.moveaxis(gm, (-2, -1), (r, c))
    if ord == 1 or ord == -1:
        sums = np.sum(ax, axis=r, keepdims=True)
        other = c
    else:
        sums = np.sum(ax, axis=c, keepdims=True)
        other = r
    big = ord == 1 or ord == float(_INF)
    tgt = np.max(sums, axis=other, keepdims=True) if big else np.min(sums, axis=other, keepdims=True)
    return sg * _tie_share(sums, tgt, other)


@kernel_definition("norm_jvp")
def norm_jvp(t, y, x, ord=None, axis=None, keepdims=False):  # noqa: A002
    axes, matrix = _norm_axes(x, ord, axis)
    return np.real(np.sum(t * _norm_unit(x, ord, axes, matrix), axis=axes, keepdims=keepdims))


def _norm_axes(x, ord, axis):  # noqa: A002
    """``(axes, matrix)`` of np.linalg.norm's arguments (``axes`` None: every element)."""
    if axis is None:
        if ord is None:
            axes = None   # every element
            matrix = False
        elif x.ndim == 1:
            axes = (0,)
            matrix = False
        else:
            axes = (0, 1)
            matrix = True
    else:
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        axes = tuple(a % x.ndim for a in axes)
        matrix = len(axes) == 2
    return axes, matrix


@kernel_definition("norm_vjp")
def norm_vjp(g, y, x, ord=None, axis=None, keepdims=False):  # noqa: A002
    axes, matrix = _norm_axes(x, ord, axis)
    unit = _norm_unit(x, ord, axes, matrix)
    if keepdims or axes is None:
        return g * unit
    if len(axes) == x.ndim:   # g is one number (np.expand_dims of a number fails under Numba)
        return g * unit
    return np.expand_dims(g, axes) * unit


# ----------------------------------------------------------------------------- cotangent scatters
@kernel_definition("index_add")
def index_add(out, idx, g):
    """``d_x = K.index_add(d_x, idx, g)``, an adjoint adding into part of a cotangent (a slice, a row, an
    integer-array index: repeated indices accumulate, as np.add.at) read back: ``out`` plus ``g`` scattered
    into zeros at ``idx`` (untake, whose derivatives gather ``idx`` again). The kernel adds in place; this
    returns a new array, which generated code assigns to the same name."""
    return out + untake(g, out, idx)


# ----------------------------------------------------------------------------- scipy.stats (multivariate)
def _squeeze(out):
    """scipy.stats' multivariate output convention: size-1 axes dropped."""
    return np.squeeze(out)


def _dirichlet_full(x, alpha):
    """x completed to all K components along axis 0 (scipy accepts K - 1)."""
    if x.shape[0] == alpha.shape[0]:
        return x
    return np.concatenate([x, 1 - np.sum(x, 0, keepdims=True)], axis=0)


@kernel_definition("dirichlet_logpdf_tangent")
def dirichlet_logpdf_tangent(tv, x, alpha, wrt):
    xf = np.moveaxis(_dirichlet_full(x, alpha), 0, -1)   # the components last: (..., K)
    if tv is None:
        return _squeeze(0.0 * xf[..., 0])
    if wrt == "alpha":
        score = np.log(xf) - (digamma(alpha) - digamma(np.sum(alpha)))
        return _squeeze(np.sum(score * tv, axis=-1))
    gx = (alpha - 1.0) / xf
    if x.shape[0] != alpha.shape[0]:   # x_K = 1 - sum(x): the chain rule through it
        gx = gx[..., :-1] - gx[..., -1:]
    return _squeeze(np.sum(gx * np.moveaxis(tv, 0, -1), axis=-1))


@kernel_definition("dirichlet_logpdf_grad")
def dirichlet_logpdf_grad(g, x, alpha, wrt):
    """The cotangent of ``x`` or ``alpha`` (kernels/cpu_special.py), the components last as in the tangent."""
    xf = np.moveaxis(_dirichlet_full(x, alpha), 0, -1)   # (..., K)
    gg = np.expand_dims(np.reshape(g, xf.shape[:-1]), -1)   # scipy squeezed the result's size-1 axes
    if wrt == "alpha":
        score = np.log(xf) - (digamma(alpha) - digamma(np.sum(alpha)))
        return np.reshape(np.sum(np.reshape(score * gg, (-1, alpha.shape[0])), axis=0), np.shape(alpha))
    gx = (alpha - 1.0) / xf * gg
    if x.shape[0] != alpha.shape[0]:   # x_K = 1 - sum(x): the chain rule through it
        gx = gx[..., :-1] - gx[..., -1:]
    return np.reshape(np.moveaxis(gx, -1, 0), np.shape(x))


def _mvn_full_cov(cov, dim):
    """scipy's reading of cov: a scalar a multiple of the identity, a vector a diagonal, of a matrix the lower
    triangle."""
    if cov.ndim == 0:
        return cov * np.eye(dim)
    if cov.ndim == 1:
        return np.diag(cov)
    return np.tril(cov) + np.linalg.matrix_transpose(np.tril(cov, -1))


def _mvn_dim(mean, cov):
    if mean is not None:
        return np.size(mean)
    if cov.ndim == 0:
        return 1
    return cov.shape[0]


def _mvn_quantiles(x, dim):
    if x.ndim == 0:
        return x[None]
    if x.ndim == 1:
        if dim == 1:
            return x[:, None]
        return x[None, :]
    return x


_MVN_SINGULAR = ("scipy.stats.multivariate_normal with allow_singular=True is not differentiable with respect to a "
                 "singular covariance matrix: keep cov out of the differentiated inputs")


@kernel_definition("mvn_logpdf_tangent")
def mvn_logpdf_tangent(tv, x, mean, cov, allow_singular, wrt):
    dim = _mvn_dim(mean, cov)
    xq = _mvn_quantiles(x, dim)
    if tv is None:
        return _squeeze(0.0 * xq[..., 0])
    m = 0.0 * xq[..., 0, None] if mean is None else np.reshape(mean, (dim,))
    C = _mvn_full_cov(cov, dim)
    P = np.linalg.pinv(C, hermitian=True) if allow_singular else np.linalg.inv(C)
    s = (xq - m) @ P
    if wrt == "x":
        return _squeeze(-np.sum(s * np.reshape(tv, xq.shape), axis=-1))
    if wrt == "mean":
        return _squeeze(np.sum(s * np.reshape(tv, (dim,)), axis=-1))
    T = _mvn_full_cov(tv, dim)
    assert not (allow_singular and np.any(T != 0)), _MVN_SINGULAR
    return _squeeze(0.5 * np.einsum("...i,ij,...j->...", s, T, s) - 0.5 * np.sum(P * T))


def _cov_input_form(G, cov):
    """A symmetric gradient of the full matrix as the cotangent of scipy's ``cov`` argument: of a scalar the
    trace, of a vector the diagonal, of a matrix the lower triangle scipy reads (off-diagonal entries count
    twice)."""
    if cov.ndim == 0:
        return np.trace(G)
    if cov.ndim == 1:
        return np.diagonal(G)
    return np.tril(G + mT(G)) - np.diag(np.diagonal(G))


@kernel_definition("mvn_logpdf_grad")
def mvn_logpdf_grad(g, x, mean, cov, allow_singular, wrt):
    dim = _mvn_dim(mean, cov)
    xq = _mvn_quantiles(x, dim)
    m = 0.0 * xq[..., 0, None] if mean is None else np.reshape(mean, (dim,))
    C = _mvn_full_cov(cov, dim)
    P = np.linalg.pinv(C, hermitian=True) if allow_singular else np.linalg.inv(C)
    s = (xq - m) @ P                                     # P (x - mean), batched; P is symmetric
    gg = np.expand_dims(np.reshape(g, xq.shape[:-1]), -1)
    if wrt == "x":
        return np.reshape(-s * gg, np.shape(x))
    if wrt == "mean":
        return np.reshape(np.sum(np.reshape(s * gg, (-1, dim)), axis=0), np.shape(mean))
    assert not (allow_singular and np.any(g != 0)), _MVN_SINGULAR
    sb = np.reshape(s, (-1, dim))
    gb = np.reshape(gg, (-1, 1))
    G = 0.5 * (mT(sb * gb) @ sb) - 0.5 * np.sum(gb) * P
    return _cov_input_form(G, cov)


@kernel_definition("mvn_entropy_grad")
def mvn_entropy_grad(g, mean, cov):
    return _cov_input_form(0.5 * g * np.linalg.inv(_mvn_full_cov(cov, _mvn_dim(mean, cov))), cov)


@kernel_definition("mvn_entropy_tangent")
def mvn_entropy_tangent(tv, mean, cov):
    if tv is None:
        return 0.0
    dim = _mvn_dim(mean, cov)
    return 0.5 * np.sum(np.linalg.inv(_mvn_full_cov(cov, dim)) * _mvn_full_cov(tv, dim))


# ----------------------------------------------------------------------------- list-valued VJP helpers
# Reverse-mode code read back (grad of grad, vjp of a function calling grad) calls these on cotangents.
@kernel_definition("unstack")
def unstack(g, arrays, axis=0):
    return [np.take(g, i, axis=axis) for i in range(len(arrays))]


@kernel_definition("unconcatenate")
def unconcatenate(g, arrays, axis=0):
    gm = np.moveaxis(g, axis, 0)
    out = []
    start = 0
    for a in arrays:
        n = np.moveaxis(a, axis, 0).shape[0]
        out.append(np.moveaxis(gm[start:start + n], 0, axis))
        start = start + n
    return out


def _joined_length(a, kind, ax):
    """The length along ``ax`` of ``a`` as ``np.<kind>`` joins it (made at least 1-, 2- or 3-d, or a column)."""
    nd = np.ndim(a)
    if kind == "hstack" and ax == 0:
        return np.size(a)
    if kind == "vstack":
        return 1 if nd < 2 else np.shape(a)[0]
    if kind == "dstack":
        return 1 if nd < 3 else np.shape(a)[2]
    return 1 if nd < 2 else np.shape(a)[1]   # hstack of matrices, column_stack


@kernel_definition("unjoin")
def unjoin(g, arrays, kind):
    if kind == "hstack":
        ax = 0 if np.ndim(arrays[0]) < 2 else 1
    else:
        ax = {"vstack": 0, "dstack": 2, "column_stack": 1}[kind]
    gm = np.moveaxis(g, ax, 0)
    out = []
    start = 0
    for a in arrays:
        n = _joined_length(a, kind, ax)
        out.append(np.reshape(np.moveaxis(gm[start:start + n], 0, ax), np.shape(a)))
        start = start + n
    return out


# ----------------------------------------------------------------------------- scipy.linalg
@kernel_definition("sqrtm_jvp")
def sqrtm_jvp(t, y):
    return sla.solve_sylvester(y, y, t)


# ----------------------------------------------------------------------------- scipy.linalg: triangular and Cholesky
# solves. The rules of solve_triangular, cho_solve and cho_factor call these kernels in both their VJP and JVP
# lines; generated code read back (hessian, grad of grad, a gradient taken inside a differentiated function)
# differentiates them through these definitions.
def _tri_part(x, lower, unit_diagonal):
    """The triangle of ``x`` a triangular solve reads (without the diagonal when it is taken as ones)."""
    k = -1 if unit_diagonal else 0
    if lower:
        return np.tril(x, k)
    return np.triu(x, -k)


def _tri_solve(c, b, lower, trans=0):
    return L.solve_triangular(c, b, trans, lower, False)


@kernel_definition("solve_triangular_like")
def solve_triangular_like(a, z, b, trans=0, lower=False, unit_diagonal=False):
    if b.ndim == 1 and z.ndim > 1:
        return L.solve_triangular(a, z[..., None], trans, lower, unit_diagonal)[..., 0]
    return L.solve_triangular(a, z, trans, lower, unit_diagonal)


@kernel_definition("solve_triangular_vjp_a")
def solve_triangular_vjp_a(u, y, a, b, trans=0, lower=False, unit_diagonal=False):
    if trans == 0:
        return _tri_part(-solve_outer(u, y, b), lower, unit_diagonal)
    return _tri_part(-solve_outer(y, u, b), lower, unit_diagonal)


@kernel_definition("triangular_matmul")
def triangular_matmul(t, y, b, trans=0, lower=False, unit_diagonal=False):
    m = _tri_part(t, lower, unit_diagonal)
    if trans == 0:
        return matmul_like(m, y, b)
    return matmul_like(mT(m), y, b)


@kernel_definition("cho_solve_like")
def cho_solve_like(c, z, b, lower=False):
    if b.ndim == 1 and z.ndim > 1:
        return L.cho_solve(c, z[..., None], lower)[..., 0]
    return L.cho_solve(c, z, lower)


@kernel_definition("cho_solve_vjp_c")
def cho_solve_vjp_c(u, x, c, b, lower=False):
    ga = -solve_outer(u, x, b)
    gs = ga + mT(ga)
    if lower:
        return np.tril(gs @ np.tril(c))
    return np.triu(np.triu(c) @ gs)


@kernel_definition("cho_solve_jvp_c")
def cho_solve_jvp_c(t, x, c, b, lower=False):
    if lower:
        tc = np.tril(t)
        cc = np.tril(c)
        return matmul_like(tc @ mT(cc) + cc @ mT(tc), x, b)
    tc = np.triu(t)
    cc = np.triu(c)
    return matmul_like(mT(tc) @ cc + mT(cc) @ tc, x, b)


@kernel_definition("cholesky_vjp")
def cholesky_vjp(g, c, upper=False):
    lo = mT(c) if upper else c
    gl = mT(g) if upper else g
    x = mT(lo) @ gl
    p = np.tril(x) - 0.5 * x * np.eye(x.shape[-1], dtype=x.dtype)     # the lower triangle, diagonal halved
    s = _tri_solve(lo, mT(_tri_solve(lo, mT(p), True, 1)), True, 1)    # L^-T p L^-1
    return L.fold_triangle(0.5 * (s + mT(s)), not upper)


@kernel_definition("cho_factor_vjp")
def cho_factor_vjp(g, c, lower=False):
    if lower:
        return cholesky_vjp(np.tril(g), np.tril(c), False) + np.triu(g, 1)
    return cholesky_vjp(np.triu(g), np.triu(c), True) + np.tril(g, -1)


@kernel_definition("cho_factor_jvp")
def cho_factor_jvp(t, c, lower=False):
    if lower:
        return cholesky_jvp(t, np.tril(c), False) + np.triu(t, 1)
    return cholesky_jvp(t, np.triu(c), True) + np.tril(t, -1)


# ----------------------------------------------------------------------------- matrix_power, expm, sqrtm
def _power_sum(a, t, n):
    """sum_k a^k t a^(n-1-k), k = 0..n-1 (the derivative of a^n along t)."""
    acc = 0.0 * (a @ t)
    for k in range(n):
        acc = acc + np.linalg.matrix_power(a, k) @ t @ np.linalg.matrix_power(a, n - 1 - k)
    return acc


@kernel_definition("matrix_power_jvp")
def matrix_power_jvp(t, a, n):
    if n == 0:
        return 0.0 * t
    if n > 0:
        return _power_sum(a, t, n)
    b = np.linalg.inv(a)
    return _power_sum(b, -(b @ t @ b), -n)


@kernel_definition("matrix_power_vjp")
def matrix_power_vjp(g, a, n):
    if n == 0:
        return 0.0 * a
    if n > 0:
        return _power_sum(mT(a), g, n)
    b = np.linalg.inv(a)
    return -(mT(b) @ _power_sum(mT(b), g, -n) @ mT(b))


@kernel_definition("expm_jvp")
def expm_jvp(t, a):
    """The Frechet derivative of expm at ``a`` along ``t``: the upper right block of expm([[a, t], [0, a]])."""
    n = a.shape[-1]
    big = np.concatenate([np.concatenate([a, t], axis=-1), np.concatenate([0.0 * t, a], axis=-1)], axis=-2)
    return sla.expm(big)[..., :n, n:]


@kernel_definition("expm_vjp")
def expm_vjp(g, a):
    return expm_jvp(g, mT(a))


@kernel_definition("sqrtm_vjp")
def sqrtm_vjp(g, y):
    return sla.solve_sylvester(mT(y), mT(y), g)


# ----------------------------------------------------------------------------- scipy.linalg.solve_banded
# ab[r, j] = a[j + r - u, j]: row r of the banded storage is the diagonal at offset s = r - u below the main one,
# its entries j in [max(0, -s), min(n, n - s)).
def _band_cols(n, s):
    return max(0, -s), min(n, n - s)


def _band_transpose(ab, l, u):  # noqa: E741
    """The banded storage of a^T (bands (u, l)) from that of a (bands (l, u))."""
    n = ab.shape[-1]
    rows = []
    for r in range(l + u + 1):
        s = r - l                       # a^T's row r holds a's row l + u - r, shifted by s columns
        src = ab[l + u - r]
        k = min(abs(s), n)
        if s >= 0:
            rows.append(np.concatenate([src[k:], 0.0 * src[:k]]))
        else:
            rows.append(np.concatenate([0.0 * src[:k], src[:n - k]]))
    return np.stack(rows)


@kernel_definition("banded_matmul")
def banded_matmul(t, y, l=1, u=1):  # noqa: E741
    """``a(t) @ y`` for a matrix ``t`` in banded storage."""
    yy = y if y.ndim > 1 else y[:, None]
    n = t.shape[-1]
    out = 0.0 * (t[0, :, None] * yy)
    for r in range(l + u + 1):
        s = r - u
        lo, hi = _band_cols(n, s)
        if hi > lo:   # entry j of the diagonal multiplies y[j] into row j + s
            term = t[r, lo:hi, None] * yy[lo:hi]
            out = out + np.concatenate([0.0 * out[:lo + s], term, 0.0 * out[hi + s:]], axis=0)
    if y.ndim > 1:
        return out
    return out[:, 0]


@kernel_definition("solve_banded_vjp_b")
def solve_banded_vjp_b(g, ab, b, l=1, u=1):  # noqa: E741
    """Cotangent of ``b``: a^-T g."""
    return L.solve_banded(_band_transpose(ab, l, u), g, u, l)


@kernel_definition("solve_banded_vjp_ab")
def solve_banded_vjp_ab(v, y, ab, b, l=1, u=1):  # noqa: E741
    """Cotangent of the banded storage given ``v = a^-T g``: -v y^T on the bands, in ab's layout."""
    vv = v if v.ndim > 1 else v[:, None]
    yy = y if y.ndim > 1 else y[:, None]
    n = ab.shape[-1]
    rows = []
    for r in range(l + u + 1):
        s = r - u
        lo, hi = _band_cols(n, s)
        if hi > lo:
            row = -np.sum(vv[lo + s:hi + s] * yy[lo:hi], axis=-1)
            rows.append(np.concatenate([0.0 * ab[r, :lo], row, 0.0 * ab[r, hi:]]))
        else:
            rows.append(0.0 * ab[r])
    return np.stack(rows)


# ----------------------------------------------------------------------------- einsum
# einsum's VJP and JVP helpers are einsums too: each is written as ``np.einsum`` calls whose subscripts are made
# from the call's own (constant) subscripts while transforming, so what normalize inlines is plain einsums,
# broadcasts and sums, all with rules.
_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _einsum_io(subscripts, n):
    """``(input terms, output term)`` of ``subscripts`` for ``n`` operands, the output made explicit (NumPy's
    implicit output: the ellipsis, then the letters that appear once, sorted)."""
    s = subscripts.replace(" ", "")
    if "->" in s:
        lhs, rhs = s.split("->")
    else:
        lhs = s
        once = sorted(c for c in set(lhs) if c in _LETTERS and lhs.count(c) == 1)
        rhs = ("..." if "..." in lhs else "") + "".join(once)
    terms = lhs.split(",")
    assert len(terms) == n, f"einsum subscripts {subscripts!r} name {len(terms)} operands, {n} were given"
    return terms, rhs


def _letters(term):
    return [c for c in term if c in _LETTERS]


def einsum_vjp_plan(subscripts, n):
    """For each operand ``i`` of ``np.einsum(subscripts, *operands)`` (``n`` of them), how its cotangent is computed
    from ``g``: ``(subs, others, axes)``, ``subs`` the subscripts of one einsum over ``g``, the other operands
    (``others``: their indices), ``np.ones_like(operand i)`` and one identity per axis in ``axes``.

    The ones carry operand ``i``'s full shape (its letters and ellipsis that no other operand has, and sizes the
    others broadcast from 1: the cotangent is constant along them); each identity ties a repeated letter's second
    axis to its first (the cotangent lives on the diagonal). The einsum's result is then summed down to operand
    ``i``'s shape where the operand was broadcast (axes from 1, and the ellipsis of the other operands where
    operand ``i`` has none: NumPy's einsum does not sum an ellipsis away)."""
    terms, rhs = _einsum_io(subscripts, n)
    fresh = [c for c in _LETTERS if c not in subscripts]
    plans = []
    for i, term in enumerate(terms):
        others = [j for j in range(n) if j != i]
        ins = [rhs] + [terms[j] for j in others] + [term]
        out = ""
        eyes = []
        axes = []
        for c in term.replace("...", "."):
            if c == ".":
                out += "..."
            elif c in out:   # a repeated letter: a fresh one in the result, tied to the first by an identity
                f = fresh.pop(0)
                out += f
                eyes.append(c + f)
                axes.append(_axis_of(term, c))
            else:
                out += c
        if "..." not in term and any("..." in s for s in ins):   # NumPy sums no ellipsis away: unbroadcast does
            out = "..." + out
        plans.append((",".join(ins + eyes) + "->" + out, tuple(others), tuple(axes)))
    return tuple(plans)


def _axis_of(term, c):
    """The axis of ``term``'s first ``c`` (negative when it follows an ellipsis)."""
    if "..." in term and term.index(c) > term.index("..."):
        after = _letters(term[term.index("...") + 3:])
        return after.index(c) - len(after)
    return _letters(term).index(c)


einsum_vjp_plan._funcgrad_static_call = True   # evaluated while transforming: its arguments are constants


@kernel_definition("einsum_vjp")
def einsum_vjp(g, subscripts, operands, optimize=False):
    plans = einsum_vjp_plan(subscripts, len(operands))
    out = []
    for i in range(len(operands)):
        subs, others, axes = plans[i]
        x = operands[i]
        args = [g] + [operands[j] for j in others] + [np.ones_like(x)] + [np.eye(np.shape(x)[ax]) for ax in axes]
        out.append(unbroadcast(np.einsum(subs, *args, optimize=optimize), x))
    return out


def _replaced(operands, k, a, j=-1, b=None):
    """``operands`` as a list with ``a`` in place of operand ``k`` (and ``b`` of operand ``j``)."""
    return [a if i == k else b if i == j else operands[i] for i in range(len(operands))]


@kernel_definition("einsum_tangent_vjp")
def einsum_tangent_vjp(g, subscripts, operands, tangents, optimize=False):
    n = len(operands)
    if n == 1:   # einsum is linear in its one operand: the second derivative is zero
        return [0.0 * einsum_vjp(g, subscripts, operands, optimize)[0]]
    cts = [einsum_vjp(g, subscripts, _replaced(operands, k, tangents[k]), optimize) for k in range(n)]
    out = []
    for j in range(n):
        terms = [cts[k][j] for k in range(n) if k != j]
        out.append(sum(terms[1:], terms[0]))
    return out


@kernel_definition("einsum_tangent2")
def einsum_tangent2(subscripts, operands, tangents, dots, optimize=False):
    n = len(operands)
    if n == 1:   # einsum is linear in its one operand: the second derivative is zero
        return 0.0 * np.einsum(subscripts, *operands, optimize=optimize)
    terms = [np.einsum(subscripts, *_replaced(operands, k, tangents[k], j, dots[j]), optimize=optimize)
             for k in range(n) for j in range(n) if j != k]
    return sum(terms[1:], terms[0])


# ----------------------------------------------------------------------------- qr
# As kernels/cpu_linalg.py computes them, the packed result rebuilt by concatenation (Q in rows :m, R below).
_QR_COMPLETE_TALL = ("np.linalg.qr(..., mode='complete'): the extra columns of Q for a tall matrix are not unique, so "
                     "they have no derivative; use mode='reduced'")


def _copyltu(x):
    return np.tril(x) + mT(np.tril(x, -1))


def _qr_square_vjp(q, r, gq, gr):
    """Cotangent of ``a`` (m >= n, reduced) for ``q, r = qr(a)``."""
    mm = r @ mT(gr) - mT(gq) @ q
    b = gq + q @ _copyltu(mm)
    return mT(_tri_solve(r, mT(b), False, 0))                     # b R^-T


@kernel_definition("qr_vjp")
def qr_vjp(g, p, a, mode="reduced"):
    m = a.shape[-2]
    n = a.shape[-1]
    k = min(m, n)
    qc = m if mode == "complete" else k
    q = p[..., :m, :qc]
    r = p[..., m:, :n]
    gq = g[..., :m, :qc]
    gr = g[..., m:, :n]
    if mode == "complete":
        assert not (m > n and np.any(gq[..., :, k:] != 0)), _QR_COMPLETE_TALL
        q = q[..., :, :k]
        gq = gq[..., :, :k]
        r = r[..., :k, :]
        gr = gr[..., :k, :]
    if m >= n:
        out = _qr_square_vjp(q, r, gq, gr)
    else:
        gy_r = gr[..., :, m:]
        gx = _qr_square_vjp(q, r[..., :, :m], gq + a[..., :, m:] @ mT(gy_r), gr[..., :, :m])
        out = np.concatenate([gx, q @ gy_r], axis=-1)
    return out


def _qr_square_jvp(q, r, t):
    tr = mT(_tri_solve(r, mT(t), False, 1))                       # t r^-1
    c = mT(q) @ tr
    low = np.tril(c, -1)
    om = low - mT(low)                                            # q^T dq: skew, c - om upper
    return q @ om + tr - q @ c, (c - om) @ r


@kernel_definition("qr_jvp")
def qr_jvp(t, p, a, mode="reduced"):
    m = a.shape[-2]
    n = a.shape[-1]
    k = min(m, n)
    assert not (mode == "complete" and m > n), _QR_COMPLETE_TALL
    q = p[..., :m, :k]
    r = p[..., m:m + k, :n]
    if m >= n:
        dq, dr = _qr_square_jvp(q, r, t)
        out = np.concatenate([dq, dr], axis=-2)
    else:
        dq, dxr = _qr_square_jvp(q, r[..., :, :m], t[..., :, :m])
        dyr = mT(dq) @ a[..., :, m:] + mT(q) @ t[..., :, m:]
        out = np.concatenate([np.concatenate([dq, 0.0 * dyr], axis=-1), np.concatenate([dxr, dyr], axis=-1)], axis=-2)
    return out
