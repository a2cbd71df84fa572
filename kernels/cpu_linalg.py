"""Linear-algebra kernels for the CPU: ``numpy.linalg`` and ``scipy.linalg`` and their derivatives.

Owns: the compute behind every primitive declared in ``funcgrad/ops/linalg.py``.
The kernel of primitive ``p`` is ``p`` here (re-exported by
``funcgrad.kernels.cpu``), with the primitive's parameters in the same order.

Every kernel works on a matrix or a stack of matrices (``(..., m, n)``), as
NumPy's own functions do. Functions with several results return them *packed*
in one array (``eigh_packed``: the eigenvalues as row 0 above the eigenvector
matrix), so each one is a single-array primitive; the definitions in
``ops/linalg.py`` slice the results out again. The derivative kernels
(``*_vjp``, ``*_jvp``) read the same packed layout.

Guarantee: every name in ``__all__`` runs from plain Python on NumPy arrays.
The ones Numba can compile (NumPy's decompositions: inverses, solves,
determinants, Cholesky, eigh, eig, svd, qr, pinv, matrix_power, norm) are also
callable inside ``@njit`` code through an ``overload`` (stacks of matrices by
a loop over the stack); a kernel Numba cannot compile (SciPy's routines:
sqrtm, expm, solve_banded) carries ``python_only = True``, so ``jit="auto"``
runs functions calling it as Python over the compiled kernels.
"""
import warnings

import numpy as np
import scipy.linalg as _sla
from numba import njit, types
from numba.core import errors as _nberrors
from numba.extending import overload

# Numba's advice about these kernels' products on non-contiguous views is nothing a user can act on
warnings.filterwarnings("ignore", category=_nberrors.NumbaPerformanceWarning, module=r".*cpu_linalg$")

__all__ = [
    "symmetric_from_triangle", "fold_triangle", "matrix_transpose", "inv", "det", "slogdet_packed", "slogdet_jvp",
    "solve", "solve_like", "solve_outer", "matmul_like",
    "pinv", "pinv_vjp", "pinv_jvp",
    "cholesky", "cholesky_vjp", "cholesky_jvp", "cho_factor", "cho_factor_vjp", "cho_factor_jvp",
    "eigh_packed", "eigh_vjp", "eigh_jvp",
    "eig_packed", "eig_vjp", "eig_jvp",
    "svd_packed", "svd_vjp", "svd_jvp",
    "qr_packed", "qr_vjp", "qr_jvp",
    "norm", "norm_vjp", "norm_jvp",
    "matrix_power", "matrix_power_vjp", "matrix_power_jvp",
    "solve_triangular", "solve_triangular_like", "solve_triangular_vjp_a", "triangular_matmul",
    "cho_solve", "cho_solve_like", "cho_solve_vjp_c", "cho_solve_jvp_c",
    "sqrtm", "sqrtm_vjp", "sqrtm_jvp", "solve_sylvester",
    "expm", "expm_vjp", "expm_jvp",
    "solve_banded", "solve_banded_vjp_ab", "solve_banded_vjp_b", "banded_matmul",
]


def _python_only(fn):
    """Mark a kernel Numba cannot compile: ``jit="auto"`` runs functions calling it as Python."""
    fn.python_only = True
    return fn


def _mT(x):
    return np.swapaxes(x, -1, -2)


def _fold(g, lower):
    """The adjoint of building a symmetric (complex: Hermitian) matrix from one triangle of ``a`` (what LAPACK
    reads): the cotangent of the strict triangle collects both mirrored entries (the mirror conjugated), the
    diagonal its own (its real part for a complex matrix, whose diagonal's imaginary part is not read)."""
    gs = g + (np.conj(_mT(g)) if np.iscomplexobj(g) else _mT(g))
    out = np.tril(gs, -1) if lower else np.triu(gs, 1)
    i = np.arange(g.shape[-1])
    out[..., i, i] = np.real(g[..., i, i]) if np.iscomplexobj(g) else g[..., i, i]
    return out


def _from_triangle(a, lower):
    """The symmetric (complex: Hermitian) matrix whose lower (upper) triangle is ``a``'s."""
    t = np.tril(a, -1) if lower else np.triu(a, 1)
    i = np.arange(a.shape[-1])
    out = t + (np.conj(_mT(t)) if np.iscomplexobj(t) else _mT(t))
    out[..., i, i] = np.real(a[..., i, i]) if np.iscomplexobj(a) else a[..., i, i]
    return out


def _gap_inverse(w):
    """``F[..., i, j] = 1 / (w_j - w_i)`` off the diagonal, 0 on it (and where two values coincide)."""
    d = w[..., None, :] - w[..., :, None]
    with np.errstate(divide="ignore"):
        f = np.where(d == 0, 0.0, 1.0 / np.where(d == 0, 1.0, d))
    return f.astype(np.result_type(w, np.float32), copy=False)


def _vec(b):
    """True when ``b`` is a vector right-hand side (NumPy 2 and SciPy: exactly when it is 1-D)."""
    return np.ndim(b) == 1


# ----------------------------------------------------------------------------- basics
def symmetric_from_triangle(a, lower=True):
    """The symmetric matrix whose lower (upper) triangle is ``a``'s: what a routine reading one
    triangle (``scipy.linalg.solve(..., assume_a="pos")``) sees."""
    return _from_triangle(np.asarray(a), lower)


def fold_triangle(g, lower=True):
    """The adjoint of symmetric_from_triangle: the strict triangle collects both mirrored entries."""
    return _fold(np.asarray(g), lower)


def matrix_transpose(x):
    """The last two axes swapped (``np.linalg.matrix_transpose``)."""
    return np.swapaxes(x, -1, -2)


def inv(a):
    return np.linalg.inv(a)


def det(a):
    return np.linalg.det(a)


def slogdet_packed(a):
    """``np.linalg.slogdet`` packed: ``[..., 0]`` the sign, ``[..., 1]`` log|det|."""
    s, ld = np.linalg.slogdet(a)
    return np.stack([s, ld], axis=-1)


def slogdet_jvp(t, a):
    """Tangent of the packed slogdet: zero for the sign, trace(a^-1 t) for log|det|."""
    tr = np.sum(np.linalg.inv(a) * _mT(t), axis=(-2, -1))
    return np.stack([np.zeros_like(tr), tr], axis=-1)


def solve(a, b):
    return np.linalg.solve(a, b)


def solve_like(a, z, b):
    """``solve(a, z)`` where ``z`` follows the right-hand side convention of ``b`` (a vector iff b is 1-D)."""
    if _vec(b) and np.ndim(z) > 1:
        return np.linalg.solve(a, z[..., None])[..., 0]
    return np.linalg.solve(a, z)


def matmul_like(m, y, b):
    """``m @ y`` where ``y`` follows the right-hand side convention of ``b``."""
    if _vec(b):
        return (m @ y[..., None])[..., 0]
    return m @ y


def solve_outer(u, y, b):
    """``u @ y^T`` for matrix right-hand sides, the outer product of the vectors for vector ones."""
    if _vec(b):
        return u[..., :, None] * y[..., None, :]
    return u @ _mT(y)


# ----------------------------------------------------------------------------- pinv
def pinv(a, rcond=1e-15, hermitian=False):
    """``np.linalg.pinv`` (``rcond=None``: the array-API default ``max(m, n) * eps``)."""
    if rcond is None:
        return np.linalg.pinv(a, hermitian=hermitian, rtol=None)
    return np.linalg.pinv(a, rcond=rcond, hermitian=hermitian)


def _pinv_grad(g, y, a):
    # Golub & Pereyra: the derivative of the pseudo-inverse at constant rank
    yt = _mT(y)
    gt = _mT(g)
    term = -(y @ gt @ y)
    term = term + (y @ yt) @ (g - g @ a @ y)        # (y y^T) g (I - a y)
    term = term + (g - y @ a @ g) @ yt @ y          # (I - y a) g y^T y
    return _mT(term)


def pinv_vjp(g, y, a, hermitian=False):
    gr = _pinv_grad(g, y, _from_triangle(a, True) if hermitian else a)
    return _fold(gr, True) if hermitian else gr


def pinv_jvp(t, y, a, hermitian=False):
    if hermitian:
        a = _from_triangle(a, True)
        t = _from_triangle(t, True)
    n = y.shape[-2]
    m = y.shape[-1]
    out = -(y @ t @ y)
    out = out + (y @ _mT(y)) @ _mT(t) @ (np.eye(m, dtype=y.dtype) - a @ y)
    out = out + (np.eye(n, dtype=y.dtype) - y @ a) @ _mT(t) @ _mT(y) @ y
    return out


# ----------------------------------------------------------------------------- cholesky
def cholesky(a, upper=False):
    return np.linalg.cholesky(a, upper=upper)


def _tri_solve(t, b, lower, trans=0):
    return _sla.solve_triangular(t, b, lower=lower, trans=trans)


def _phi(x):
    """The lower triangle with the diagonal halved."""
    out = np.tril(x)
    i = np.arange(x.shape[-1])
    out[..., i, i] *= 0.5
    return out


def cholesky_vjp(g, c, upper=False):
    """Cotangent of ``a`` for ``c = cholesky(a, upper)``: Murray's formula for symmetric perturbations
    (arXiv:1602.07527), folded onto the triangle LAPACK reads."""
    L, gL = (_mT(c), _mT(g)) if upper else (c, g)
    p = _phi(_mT(L) @ gL)
    s = _tri_solve(L, _mT(_tri_solve(L, _mT(p), True, 1)), True, 1)     # L^-T p L^-1
    return _fold(0.5 * (s + _mT(s)), not upper)


def cholesky_jvp(t, c, upper=False):
    L = _mT(c) if upper else c
    ds = _from_triangle(t, not upper)
    x = _tri_solve(L, _mT(_tri_solve(L, ds, True)), True)               # L^-1 ds L^-T
    dL = L @ _phi(x)
    return _mT(dL) if upper else dL


def cho_factor(a, lower=False):
    """The factor of ``scipy.linalg.cho_factor(a, lower)`` (the other triangle keeps ``a``'s entries)."""
    return _sla.cho_factor(a, lower=lower)[0]


def cho_factor_vjp(g, c, lower=False):
    factor = np.tril(c) if lower else np.triu(c)
    gf = np.tril(g) if lower else np.triu(g)
    keep = np.triu(g, 1) if lower else np.tril(g, -1)                 # the untouched triangle passes through
    return cholesky_vjp(gf, factor, not lower) + keep


def cho_factor_jvp(t, c, lower=False):
    factor = np.tril(c) if lower else np.triu(c)
    keep = np.triu(t, 1) if lower else np.tril(t, -1)
    return cholesky_jvp(t, factor, not lower) + keep


# ----------------------------------------------------------------------------- eigh
def eigh_packed(a, UPLO="L"):
    """``np.linalg.eigh`` packed: row 0 the eigenvalues, rows 1.. the eigenvectors (columns)."""
    w, v = np.linalg.eigh(a, UPLO)
    return np.concatenate([w[..., None, :], v], axis=-2)


def eigh_vjp(g, p, UPLO="L"):
    """Of a complex (Hermitian) matrix, in autograd's convention: conj(V) (diag(gw) + F * (V^T gV)) V^T,
    folded onto the triangle read."""
    w, v = np.real(p[..., 0, :]), p[..., 1:, :]
    gw, gv = g[..., 0, :], g[..., 1:, :]
    vt = _mT(v)
    vc = np.conj(v)
    gr = (vc * gw[..., None, :]) @ vt
    if np.any(gv):  # the eigenvector part only when it is asked for (degenerate spectra stay finite)
        gr = gr + vc @ (_gap_inverse(w) * (vt @ gv)) @ vt
    return _fold(gr, UPLO == "L")


def eigh_jvp(t, p, UPLO="L"):
    """dw = Re diag(V^H dA V), dV = V (F * (V^H dA V)) (each eigenvector's phase kept: no component along
    itself)."""
    w, v = np.real(p[..., 0, :]), p[..., 1:, :]
    m = np.conj(_mT(v)) @ _from_triangle(t, UPLO == "L") @ v
    dw = np.diagonal(m, axis1=-2, axis2=-1)
    if np.iscomplexobj(dw):
        dw = np.real(dw) + 0j   # the eigenvalues are real: so is their tangent (stored in the complex array)
    dv = v @ (_gap_inverse(w) * m)
    return np.concatenate([dw[..., None, :], dv], axis=-2)


# ----------------------------------------------------------------------------- eig
def eig_packed(a):
    """``np.linalg.eig`` packed like eigh_packed: complex where NumPy's results are (a complex matrix, or a real
    one with complex eigenvalues), real otherwise."""
    w, v = np.linalg.eig(a)
    return np.concatenate([w[..., None, :], v], axis=-2)


def eig_vjp(g, p):
    """autograd's VJP (arXiv:1701.00392, eq. 4.77): unit eigenvectors, their phase free (the reverse pass takes the
    real part for a real matrix)."""
    w, v = p[..., 0, :], p[..., 1:, :]
    gw, gv = g[..., 0, :], g[..., 1:, :]
    n = w.shape[-1]
    vt = _mT(v)
    f = _gap_inverse(w)
    vtgv = vt @ gv
    r = gw[..., :, None] * np.eye(n, dtype=v.dtype)
    if np.any(gv):
        r = r + f * vtgv - f * ((vt @ np.conj(v)) @ (np.real(np.diagonal(vtgv, axis1=-2, axis2=-1))[..., :, None]
                                                     * np.eye(n, dtype=v.dtype)))
    return np.linalg.solve(vt, r @ vt)


def eig_jvp(t, p):
    w, v = p[..., 0, :], p[..., 1:, :]
    m = np.linalg.solve(v, t @ v)                                         # v^-1 t v
    dw = np.diagonal(m, axis1=-2, axis2=-1)
    dv = v @ (_gap_inverse(w) * m)
    dv = dv - v * np.real(np.sum(np.conj(v) * dv, axis=-2, keepdims=True))   # columns stay unit vectors
    return np.concatenate([dw[..., None, :], dv], axis=-2)


# ----------------------------------------------------------------------------- svd
def svd_packed(a, full_matrices=True, hermitian=False):
    """``np.linalg.svd`` packed in ``(..., m + 1 + n, w)``: U in rows ``:m``, the singular values in row
    ``m``, V = Vh^T in rows ``m + 1:`` (each in the leading columns it needs)."""
    u, s, vh = np.linalg.svd(a, full_matrices=full_matrices, hermitian=hermitian)
    m, n = a.shape[-2], a.shape[-1]
    k = s.shape[-1]
    w = max(u.shape[-1], vh.shape[-2])
    out = np.zeros(a.shape[:-2] + (m + 1 + n, w), dtype=u.dtype)
    out[..., :m, :u.shape[-1]] = u
    out[..., m, :k] = s
    out[..., m + 1:, :vh.shape[-2]] = _mT(vh)
    return out


def _svd_unpack(p, m, n, full):
    k = min(m, n)
    cu, cv = (m, n) if full else (k, k)
    return p[..., :m, :cu], p[..., m, :k], p[..., m + 1:, :cv]


def _svd_reduced(p, g, m, n, full, hermitian):
    """(u, s, v, gu, gs, gv) of the reduced SVD; the extra columns of full_matrices=True must have no cotangent."""
    k = min(m, n)
    u, s, v = _svd_unpack(p, m, n, full)
    gu, gs, gv = _svd_unpack(g, m, n, full)
    if full and m != n:
        extra = gu[..., :, k:] if m > n else gv[..., :, k:]
        if np.any(extra):
            raise ValueError("np.linalg.svd(..., full_matrices=True): the extra singular vectors of a non-square "
                             "matrix are not unique, so they have no derivative; use full_matrices=False "
                             "(or use only the first min(m, n) of them)")
        u, v, gu, gv = u[..., :, :k], v[..., :, :k], gu[..., :, :k], gv[..., :, :k]
    return u, s, v, gu, gs, gv


_COMPLEX_HERMITIAN_SVD = ("np.linalg.svd(..., hermitian=True) of complex matrices: derivatives are not supported; "
                          "use hermitian=False")


def _svd_vjp_complex(u, s, v, gu, gs, gv, m, n):
    """autograd's complex SVD VJP, with the packed storage: ``v`` holds Vh^T (so V = conj(v)), ``gv`` the
    cotangent of Vh^T."""
    k = min(m, n)
    V = np.conj(v)
    gV = np.conj(gv)                                         # autograd's gv = conj(T(g_vh))
    eye = np.eye(k)
    f = _gap_inverse(s * s)
    utgu = _mT(u) @ gu
    vtgv = _mT(V) @ gV
    t1 = (f * (utgu - np.conj(_mT(utgu)))) * s[..., None, :]
    t1 = t1 + eye * gs[..., :, None]
    t1 = t1 + s[..., :, None] * (f * (vtgv - np.conj(_mT(vtgv))))
    t1 = t1 + 1j * (np.imag(np.diagonal(utgu, axis1=-2, axis2=-1)) / s)[..., None, :] * eye
    t1 = np.conj(u) @ t1 @ _mT(V)
    if m < n:
        t1 = t1 + np.conj((u / s[..., None, :]) @ _mT(gV) @ (np.eye(n) - V @ np.conj(_mT(V))))
    elif m > n:
        t1 = t1 + _mT((V / s[..., None, :]) @ _mT(gu) @ (np.eye(m) - u @ np.conj(_mT(u))))
    return t1


def svd_vjp(g, p, a, full_matrices=True, hermitian=False):
    """Cotangent of ``a`` for the packed SVD (Townsend's formulas for real matrices; autograd's for complex)."""
    m, n = a.shape[-2], a.shape[-1]
    k = min(m, n)
    u, s, v, gu, gs, gv = _svd_reduced(p, g, m, n, full_matrices, hermitian)
    if np.iscomplexobj(p):
        if hermitian:
            raise ValueError(_COMPLEX_HERMITIAN_SVD)
        return _svd_vjp_complex(u, np.real(s), v, gu, np.real(gs), gv, m, n)
    ut, vt = _mT(u), _mT(v)
    eye = np.eye(k, dtype=u.dtype)
    inner = gs[..., :, None] * eye
    if np.any(gu) or np.any(gv):
        f = _gap_inverse(s * s)
        utgu = ut @ gu
        vtgv = vt @ gv
        inner = inner + (f * (utgu - _mT(utgu))) * s[..., None, :] + s[..., :, None] * (f * (vtgv - _mT(vtgv)))
    gr = u @ inner @ vt
    if m < n and np.any(gv):
        gr = gr + (u / s[..., None, :]) @ _mT(gv) @ (np.eye(n, dtype=u.dtype) - v @ vt)
    if m > n and np.any(gu):
        gr = gr + _mT((v / s[..., None, :]) @ _mT(gu) @ (np.eye(m, dtype=u.dtype) - u @ ut))
    return _fold(gr, True) if hermitian else gr


def svd_jvp(t, p, a, full_matrices=True, hermitian=False):
    """Of complex matrices: dP = U^H dA V, ds = Re diag(dP); each pair's phase is carried by U (V's columns
    get no component along themselves)."""
    m, n = a.shape[-2], a.shape[-1]
    k = min(m, n)
    if full_matrices and m != n:
        raise ValueError("np.linalg.svd(..., full_matrices=True): the extra singular vectors of a non-square "
                         "matrix are not unique, so they have no derivative; use full_matrices=False")
    cplx = np.iscomplexobj(p)
    if cplx and hermitian:
        raise ValueError(_COMPLEX_HERMITIAN_SVD)
    if hermitian:
        t = _from_triangle(t, True)
    u, s, v = _svd_unpack(p, m, n, False)
    s = np.real(s)
    V = np.conj(v)                                      # the stored v is Vh^T
    dp = np.conj(_mT(u)) @ t @ V
    dph = np.conj(_mT(dp))
    ds = np.real(np.diagonal(dp, axis1=-2, axis2=-1))
    f = _gap_inverse(s * s)
    sr, sc = s[..., None, :], s[..., :, None]
    du = u @ (f * (dp * sr + sc * dph))
    dv = V @ (f * (sc * dp + dph * sr))
    if cplx:
        du = du + u * (1j * np.imag(np.diagonal(dp, axis1=-2, axis2=-1)) / s)[..., None, :]
    if m > n:
        du = du + (t @ V - u @ dp) / sr
    if m < n:
        dv = dv + (np.conj(_mT(t)) @ u - V @ dph) / sr
    out = np.zeros_like(p)
    out[..., :m, :k] = du
    out[..., m, :k] = ds
    out[..., m + 1:, :k] = np.conj(dv)
    return out


# ----------------------------------------------------------------------------- qr
def qr_packed(a, mode="reduced"):
    """``np.linalg.qr`` packed in ``(..., m + r, w)``: Q in rows ``:m``, R in rows ``m:`` (r = R's rows)."""
    q, r = np.linalg.qr(a, mode="complete" if mode == "complete" else "reduced")
    m, n = a.shape[-2], a.shape[-1]
    w = max(q.shape[-1], n)
    out = np.zeros(a.shape[:-2] + (m + r.shape[-2], w), dtype=q.dtype)
    out[..., :m, :q.shape[-1]] = q
    out[..., m:, :n] = r
    return out


def _copyltu(x):
    return np.tril(x) + _mT(np.tril(x, -1))


def _qr_square_vjp(q, r, gq, gr):
    """Cotangent of a (m >= n, reduced) for Q, R = qr(a)."""
    mm = r @ _mT(gr) - _mT(gq) @ q
    b = gq + q @ _copyltu(mm)
    return _mT(_tri_solve(r, _mT(b), False, 0))                          # b R^-T


def qr_vjp(g, p, a, mode="reduced"):
    m, n = a.shape[-2], a.shape[-1]
    k = min(m, n)
    qc = m if mode == "complete" else k
    q, r = p[..., :m, :qc], p[..., m:, :n]
    gq, gr = g[..., :m, :qc], g[..., m:, :n]
    if mode == "complete" and m > n:
        if np.any(gq[..., :, k:]):
            raise ValueError("np.linalg.qr(..., mode='complete'): the extra columns of Q for a tall matrix are not "
                             "unique, so they have no derivative; use mode='reduced'")
        q, gq, r, gr = q[..., :, :k], gq[..., :, :k], r[..., :k, :], gr[..., :k, :]
    if m >= n:
        return _qr_square_vjp(q, r, gq, gr)
    x_r, y_r = r[..., :, :m], r[..., :, m:]
    gx_r, gy_r = gr[..., :, :m], gr[..., :, m:]
    y = a[..., :, m:]
    gx = _qr_square_vjp(q, x_r, gq + y @ _mT(gy_r), gx_r)
    return np.concatenate([gx, q @ gy_r], axis=-1)


def _qr_square_jvp(q, r, t):
    tr = _mT(_tri_solve(r, _mT(t), False, 1))                            # t r^-1
    c = _mT(q) @ tr
    low = np.tril(c, -1)
    om = low - _mT(low)                                                  # q^T dq: skew, c - om upper
    return q @ om + tr - q @ c, (c - om) @ r


def qr_jvp(t, p, a, mode="reduced"):
    m, n = a.shape[-2], a.shape[-1]
    k = min(m, n)
    if mode == "complete" and m > n:
        raise ValueError("np.linalg.qr(..., mode='complete'): the extra columns of Q for a tall matrix are not "
                         "unique, so they have no derivative; use mode='reduced'")
    q, r = p[..., :m, :k], p[..., m:m + k, :n]
    out = np.zeros_like(p)
    if m >= n:
        dq, dr = _qr_square_jvp(q, r, t)
        out[..., :m, :k] = dq
        out[..., m:m + k, :n] = dr
        return out
    dq, dxr = _qr_square_jvp(q, r[..., :, :m], t[..., :, :m])
    dyr = _mT(dq) @ a[..., :, m:] + _mT(q) @ t[..., :, m:]
    out[..., :m, :k] = dq
    out[..., m:m + k, :m] = dxr
    out[..., m:m + k, m:n] = dyr
    return out


# ----------------------------------------------------------------------------- norm
def norm(x, ord=None, axis=None, keepdims=False):
    return np.linalg.norm(x, ord=ord, axis=axis, keepdims=keepdims)


def _norm_case(x, ord, axis):
    """("vector" | "matrix", axes as a tuple of non-negative ints) for np.linalg.norm's arguments."""
    nd = np.ndim(x)
    if axis is None:
        if ord is None:
            return "vector", tuple(range(nd)), None
        if nd == 1:
            return "vector", (0,), ord
        if nd == 2:
            return "matrix", (0, 1), ord
        raise ValueError("Improper number of dimensions to norm.")
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    axes = tuple(int(a) % nd for a in axes)
    if len(axes) == 1:
        return "vector", axes, ord
    return "matrix", axes, ord


def _tie_mask(v, target, axis):
    """1 where ``v`` equals the (kept-dims) ``target`` along ``axis``, shared out equally among ties."""
    m = (v == target).astype(v.dtype)
    return m / np.sum(m, axis=axis, keepdims=True)


def _norm_unit(x, ord, axis):
    """d norm / d x for every element (the VJP with a unit cotangent), shaped like ``x``. Of complex ``x``, in
    autograd's convention (``dy = Re(sum(unit * dx))``): ``conj(x) / |x|`` in place of ``sign(x)``."""
    x = np.asarray(x)
    kind, axes, ord = _norm_case(x, ord, axis)
    ft = np.result_type(x.dtype, np.float32)
    ax = np.abs(x)
    if np.iscomplexobj(x):
        sg = np.conj(np.where(ax == 0, 0.0, x / np.where(ax == 0, 1.0, ax)))
        x = np.conj(x)          # x / y below: conj(x) / y
        xx = ax * ax
    else:
        sg = np.sign(x).astype(ft)
        xx = x * x
    if kind == "vector":
        if ord is None or ord == 2:
            y = np.sqrt(np.sum(xx, axis=axes, keepdims=True))
            with np.errstate(invalid="ignore", divide="ignore"):
                return np.where(y == 0, 0.0, x / np.where(y == 0, 1.0, y)).astype(ft)
        if ord == np.inf or ord == -np.inf:
            tgt = (np.max if ord == np.inf else np.min)(ax, axis=axes, keepdims=True)
            return sg * _tie_mask(ax, tgt, axes)
        if ord == 0:
            return np.zeros(x.shape, ft)
        if ord == 1:
            return sg
        p = float(ord)
        y = np.sum(ax ** p, axis=axes, keepdims=True) ** (1.0 / p)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (sg * ax ** (p - 1) * y ** (1 - p)).astype(ft)
    r, c = axes
    if ord is None or ord == "fro":
        y = np.sqrt(np.sum(xx, axis=axes, keepdims=True))
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(y == 0, 0.0, x / np.where(y == 0, 1.0, y)).astype(ft)
    if ord in ("nuc", 2, -2):
        xm = np.moveaxis(x, (r, c), (-2, -1))   # conj(x) for complex x: its SVD is the conjugate one
        u, s, vh = np.linalg.svd(xm, full_matrices=False)
        if ord == "nuc":
            gm = u @ vh
        else:
            i = 0 if ord == 2 else -1
            gm = u[..., :, i, None] * vh[..., i, None, :]
        return np.moveaxis(gm, (-2, -1), (r, c)).astype(ft)
    if ord in (1, -1):       # the largest (smallest) column sum: sum over rows, then over columns
        sums = np.sum(ax, axis=r, keepdims=True)
    elif ord in (np.inf, -np.inf):
        sums = np.sum(ax, axis=c, keepdims=True)
    else:
        raise ValueError("Invalid norm order for matrices.")
    other = c if ord in (1, -1) else r
    tgt = (np.max if ord in (1, np.inf) else np.min)(sums, axis=other, keepdims=True)
    return sg * _tie_mask(sums, tgt, other)


def _norm_expand(v, x, ord, axis, keepdims):
    """A result-shaped ``v`` with the reduced axes put back (size 1)."""
    if keepdims:
        return v
    _, axes, _ = _norm_case(x, ord, axis)
    return np.expand_dims(v, axes)


def norm_vjp(g, y, x, ord=None, axis=None, keepdims=False):
    return _norm_expand(np.asarray(g), x, ord, axis, keepdims) * _norm_unit(x, ord, axis)


def norm_jvp(t, y, x, ord=None, axis=None, keepdims=False):
    _, axes, _ = _norm_case(x, ord, axis)
    out = np.sum(t * _norm_unit(x, ord, axis), axis=axes, keepdims=keepdims)
    return np.real(out) if np.iscomplexobj(out) else out


# ----------------------------------------------------------------------------- matrix_power
def matrix_power(a, n):
    return np.linalg.matrix_power(a, n)


def _powers(a, n):
    out = [np.broadcast_to(np.eye(a.shape[-1], dtype=a.dtype), a.shape)]
    for _ in range(n - 1):
        out.append(out[-1] @ a)
    return out


def _mp_sum(a, t, n):
    """sum_k a^k t a^(n-1-k), k = 0..n-1 (the derivative of a^n along t)."""
    pw = _powers(a, n)
    acc = np.zeros(np.broadcast_shapes(a.shape, np.shape(t)), dtype=np.result_type(a, t))
    for k in range(n):
        acc = acc + pw[k] @ t @ pw[n - 1 - k]
    return acc


def matrix_power_vjp(g, a, n):
    n = int(n)
    if n == 0:
        return np.zeros_like(a)
    if n > 0:
        return _mp_sum(_mT(a), g, n)
    b = np.linalg.inv(a)
    gb = _mp_sum(_mT(b), g, -n)
    return -(_mT(b) @ gb @ _mT(b))


def matrix_power_jvp(t, a, n):
    n = int(n)
    if n == 0:
        return np.zeros_like(t)
    if n > 0:
        return _mp_sum(a, t, n)
    b = np.linalg.inv(a)
    return _mp_sum(b, -(b @ t @ b), -n)


# ----------------------------------------------------------------------------- scipy: triangular systems
def _tri_part(x, lower, unit_diagonal):
    """The triangle of ``x`` a triangular solve reads (without the diagonal when it is taken as ones)."""
    k = -1 if unit_diagonal else 0
    return np.tril(x, k) if lower else np.triu(x, -k)


def _unbroadcast_to(x, shape):
    """Sum ``x`` down to ``shape`` (undo NumPy broadcasting)."""
    x = np.asarray(x)
    lead = x.ndim - len(shape)
    if lead > 0:
        x = x.sum(axis=tuple(range(lead)))
    axes = tuple(i for i, s in enumerate(shape) if s == 1 and x.shape[i] != 1)
    if axes:
        x = x.sum(axis=axes, keepdims=True)
    return x


def solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False):
    """``scipy.linalg.solve_triangular`` (trans 0: a x = b, 1: a^T x = b)."""
    return _sla.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit_diagonal)


def solve_triangular_like(a, z, b, trans=0, lower=False, unit_diagonal=False):
    """``solve_triangular(a, z)`` where ``z`` follows the right-hand side convention of ``b``."""
    if _vec(b) and np.ndim(z) > 1:
        return _sla.solve_triangular(a, z[..., None], trans=trans, lower=lower, unit_diagonal=unit_diagonal)[..., 0]
    return _sla.solve_triangular(a, z, trans=trans, lower=lower, unit_diagonal=unit_diagonal)


def solve_triangular_vjp_a(u, y, a, b, trans=0, lower=False, unit_diagonal=False):
    """Cotangent of ``a`` (before summing broadcast axes) given ``u = op(a)^-T g``."""
    gt = -solve_outer(u, y, b) if trans == 0 else -solve_outer(y, u, b)
    return _tri_part(gt, lower, unit_diagonal)


def triangular_matmul(t, y, b, trans=0, lower=False, unit_diagonal=False):
    """``op(tri(t)) @ y`` (the triangle a triangular solve reads) with ``y`` in ``b``'s convention."""
    m = _tri_part(t, lower, unit_diagonal)
    return matmul_like(m if trans == 0 else _mT(m), y, b)


def cho_solve(c, b, lower=False):
    """``scipy.linalg.cho_solve((c, lower), b)``: solve (c c^T) x = b (lower) or (c^T c) x = b."""
    return _sla.cho_solve((c, lower), b)


def cho_solve_like(c, z, b, lower=False):
    """``cho_solve((c, lower), z)`` where ``z`` follows the right-hand side convention of ``b``."""
    if _vec(b) and np.ndim(z) > 1:
        return _sla.cho_solve((c, lower), z[..., None])[..., 0]
    return _sla.cho_solve((c, lower), z)


def cho_solve_vjp_c(u, x, c, b, lower=False):
    """Cotangent of the factor ``c`` (before summing broadcast axes) given ``u = A^-1 g``."""
    ga = -solve_outer(u, x, b)
    gs = ga + _mT(ga)
    return np.tril(gs @ np.tril(c)) if lower else np.triu(np.triu(c) @ gs)


def cho_solve_jvp_c(t, x, c, b, lower=False):
    """``dA @ x`` for the tangent ``t`` of the factor (A = c c^T or c^T c, from c's triangle)."""
    tc = np.tril(t) if lower else np.triu(t)
    cc = np.tril(c) if lower else np.triu(c)
    da = tc @ _mT(cc) + cc @ _mT(tc) if lower else _mT(tc) @ cc + _mT(cc) @ tc
    return matmul_like(da, x, b)


# ----------------------------------------------------------------------------- scipy: sqrtm, expm
def _real(x, what):
    if np.iscomplexobj(x):
        raise ValueError(f"{what}: the result is complex (the matrix has negative or complex eigenvalues); "
                         "funcgrad differentiates real arrays only")
    return x


@_python_only
def solve_sylvester(a, b, q):
    """``scipy.linalg.solve_sylvester(a, b, q)``: X with a X + X b = q."""
    return _sla.solve_sylvester(a, b, q)


@_python_only
def sqrtm(a):
    """``scipy.linalg.sqrtm``: complex where SciPy's is (a matrix with negative or complex eigenvalues)."""
    return _sla.sqrtm(a)


@_python_only
def sqrtm_vjp(g, y):
    """The cotangent of ``a`` for ``y = sqrtm(a)``: y^T X + X y^T = g (the reverse pass takes the real part for a
    real ``a``)."""
    yt = _mT(y)
    return _sla.solve_sylvester(yt, yt, g)


@_python_only
def sqrtm_jvp(t, y):
    """dy with y dy + dy y = t."""
    return _sla.solve_sylvester(y, y, t)


@_python_only
def expm(a):
    return _sla.expm(a)


@_python_only
def expm_vjp(g, a):
    return _sla.expm_frechet(_mT(a), g, compute_expm=False)


@_python_only
def expm_jvp(t, a):
    return _sla.expm_frechet(a, t, compute_expm=False)


# ----------------------------------------------------------------------------- scipy: banded systems
def _band_cols(n, s):
    """The columns ``j`` where the diagonal at offset ``s`` below the main one has entries (``0 <= j + s < n``):
    ``range(lo, hi)``, empty (``lo == hi``) for a band ``|s| >= n`` away, which scipy.linalg.solve_banded accepts
    (l or u at least n) and ignores."""
    lo = min(n, max(0, -s))
    return lo, max(lo, min(n, n - s))


def _band_transpose(ab, l, u):
    """The banded storage of a^T (bands (u, l)) from that of a (bands (l, u))."""
    n = ab.shape[-1]
    out = np.zeros_like(ab)
    for r in range(l + u + 1):
        s = r - l                       # a^T's row r holds a's row l + u - r, shifted by s columns
        src = ab[..., l + u - r, :]
        k = min(abs(s), n)              # a band at or beyond n from the diagonal holds no entry of a
        if s >= 0:
            out[..., r, :n - k] = src[..., k:]
        else:
            out[..., r, k:] = src[..., :n - k]
    return out


@_python_only
def solve_banded(ab, b, l=1, u=1):
    """``scipy.linalg.solve_banded((l, u), ab, b)``."""
    return _sla.solve_banded((l, u), ab, b)


@_python_only
def solve_banded_vjp_b(g, ab, b, l=1, u=1):
    """Cotangent of ``b``: a^-T g."""
    return _sla.solve_banded((u, l), _band_transpose(ab, l, u), g)


def solve_banded_vjp_ab(v, y, ab, b, l=1, u=1):
    """Cotangent of the banded storage given ``v = a^-T g``: -v y^T on the bands, in ab's layout."""
    vv = v if v.ndim > 1 else v[:, None]
    yy = y if y.ndim > 1 else y[:, None]
    n = ab.shape[-1]
    out = np.zeros_like(ab)
    for r in range(l + u + 1):
        s = r - u                       # ab[r, j] = a[j + s, j]
        lo, hi = _band_cols(n, s)
        j = np.arange(lo, hi)
        out[r, lo:hi] = -np.sum(vv[j + s] * yy[j], axis=-1)
    return out


def banded_matmul(t, y, l=1, u=1):
    """``a(t) @ y`` for a matrix ``t`` in banded storage."""
    yy = y if y.ndim > 1 else y[:, None]
    n = t.shape[-1]
    out = np.zeros(yy.shape, dtype=np.result_type(t, y))
    for r in range(l + u + 1):
        s = r - u
        lo, hi = _band_cols(n, s)
        j = np.arange(lo, hi)
        out[j + s] += t[r, lo:hi, None] * yy[j]
    return out if y.ndim > 1 else out[:, 0]


# =============================================================================
# nopython implementations (Numba): 2-D cores, and stacks of matrices by a loop over the stack
# =============================================================================
def _lit(t, default=None):
    """The Python value of a literal (or omitted/None) Numba type; ``RUNTIME`` for a runtime value."""
    if t is None or isinstance(t, (types.NoneType, types.Omitted)):
        return getattr(t, "value", default)
    if isinstance(t, types.Literal):
        return t.literal_value
    if isinstance(t, types.BaseTuple) and all(isinstance(x, types.Literal) for x in t.types):
        return tuple(x.literal_value for x in t.types)
    if isinstance(t, (bool, int, float, str, tuple)):
        return t
    return _RUNTIME


_RUNTIME = object()


def _refuse(what):
    raise _nberrors.TypingError(f"{what} has no nopython implementation")


def _param_src(pyfn):
    import inspect
    parts = []
    for p in inspect.signature(pyfn).parameters.values():
        parts.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}")
    return ", ".join(parts), list(inspect.signature(pyfn).parameters)


def _compile_impl(src, env):
    ns = {"np": np}
    ns.update(env)
    exec(compile(src, "<funcgrad.kernels.cpu_linalg>", "exec"), ns)
    return ns["impl"]


def _core_ndim(role, t):
    return {"m": 2, "v": 1}.get(role)


def _batched(pyfn, core, argtypes, roles, scalar_out=False):
    """A nopython implementation of ``pyfn`` that applies ``core`` (2-D matrices, 1-D vectors) to every
    matrix of a stack. ``roles`` per parameter: "m" a matrix (its last two axes), "v" a vector (its last
    axis), "s" passed as it is, "x" not passed to ``core`` (read only for its type). The leading axes of
    the "m"/"v" arguments broadcast together."""
    params, names = _param_src(pyfn)
    arrs = [(i, _core_ndim(r, argtypes[i])) for i, r in enumerate(roles) if r in "mv"]
    for i, c in arrs:
        if not isinstance(argtypes[i], types.Array) or argtypes[i].ndim < c:
            return None
    ks = {i: argtypes[i].ndim - c for i, c in arrs}
    ko = max(ks.values())
    call = ", ".join(f"X{i}[j]" if r in "mv" else names[i] for i, r in enumerate(roles) if r != "x")
    if ko == 0:
        direct = ", ".join(names[i] for i, r in enumerate(roles) if r != "x")
        return _compile_impl(f"def impl({params}):\n    return core({direct})\n", {"core": core})
    lines = [f"def impl({params}):"]
    lines += [f"    o{j} = 1" for j in range(ko)]
    for i, c in arrs:
        k = ks[i]
        for jj in range(k):
            lines.append(f"    if {names[i]}.shape[{jj}] != 1:\n        o{ko - k + jj} = {names[i]}.shape[{jj}]")
    ob = "".join(f"o{j}, " for j in range(ko))
    lines.append("    nb = " + " * ".join(f"o{j}" for j in range(ko)))
    for i, c in arrs:
        nd = argtypes[i].ndim
        cs = "".join(f"{names[i]}.shape[{d}], " for d in range(nd - c, nd))
        lines.append(f"    X{i} = np.ascontiguousarray(np.broadcast_to({names[i]}, ({ob}{cs}))).reshape((nb, {cs}))")
    first = arrs[0][0]
    if scalar_out:
        lines.append(f"    out = np.empty(nb, dtype=X{first}.dtype)")
        lines.append("    for j in range(nb):")
        lines.append(f"        out[j] = core({call})")
        lines.append(f"    return out.reshape(({ob}))")
    else:
        lines.append(f"    j = 0\n    r0 = core({call})")
        lines.append("    out = np.empty((nb,) + r0.shape, dtype=r0.dtype)")
        lines.append("    out[0] = r0")
        lines.append("    for j in range(1, nb):")
        lines.append(f"        out[j] = core({call})")
        lines.append(f"    return out.reshape(({ob}) + r0.shape)")
    return _compile_impl("\n".join(lines) + "\n", {"core": core})


def _rhs_role(t):
    """A right-hand side is a vector exactly when it is 1-D."""
    return "v" if isinstance(t, types.Array) and t.ndim == 1 else "m"


# ----------------------------------------------------------------------------- 2-D helpers
@njit(cache=True)
def _fold2(g, lower):
    n = g.shape[0]
    out = np.zeros_like(g)
    for i in range(n):
        out[i, i] = g[i, i]
        for j in range(i):
            if lower:
                out[i, j] = g[i, j] + g[j, i]
            else:
                out[j, i] = g[i, j] + g[j, i]
    return out


@njit(cache=True)
def _from_tri2(a, lower):
    n = a.shape[0]
    out = np.empty_like(a)
    for i in range(n):
        out[i, i] = a[i, i]
        for j in range(i):
            v = a[i, j] if lower else a[j, i]
            out[i, j] = v
            out[j, i] = v
    return out


@njit(cache=True)
def _gap_inv2(w):
    n = w.shape[0]
    f = np.zeros((n, n), dtype=w.dtype)
    for i in range(n):
        for j in range(n):
            dd = w[j] - w[i]
            if i != j and dd != 0:
                f[i, j] = 1.0 / dd
    return f


@njit(cache=True)
def _trsolve2(t, b, lower, trans, unit):
    """Solve op(T) x = b (b 2-D) with T the lower (upper) triangle of ``t``, op(T) = T or T^T."""
    n = t.shape[0]
    x = b.copy()
    fwd = lower != (trans != 0)           # op(T) is lower triangular: forward substitution
    for step in range(n):
        i = step if fwd else n - 1 - step
        for jj in range(step):
            j = jj if fwd else n - 1 - jj
            c = t[i, j] if trans == 0 else t[j, i]
            for q in range(x.shape[1]):
                x[i, q] -= c * x[j, q]
        if not unit:
            d = t[i, i]
            for q in range(x.shape[1]):
                x[i, q] /= d
    return x


@njit(cache=True)
def _trsolve(t, b, lower, trans, unit):
    if b.ndim == 1:
        return _trsolve2(t, np.ascontiguousarray(b).reshape((b.shape[0], 1)), lower, trans, unit)[:, 0]
    return _trsolve2(t, b, lower, trans, unit)


@njit(cache=True)
def _tri_part2(x, lower, unit):
    k = -1 if unit else 0
    return np.tril(x, k) if lower else np.triu(x, -k)


@njit(cache=True)
def _phi2(x):
    out = np.tril(x)
    for i in range(x.shape[0]):
        out[i, i] *= 0.5
    return out


# ----------------------------------------------------------------------------- cores
@njit(cache=True)
def _c_from_tri(a, lower):
    return _from_tri2(a, lower)


@njit(cache=True)
def _c_fold(g, lower):
    return _fold2(g, lower)


@njit(cache=True)
def _c_inv(a):
    return np.linalg.inv(a)


@njit(cache=True)
def _c_det(a):
    return np.linalg.det(a)


@njit(cache=True)
def _c_slogdet(a):
    s, ld = np.linalg.slogdet(a)
    out = np.empty(2, dtype=a.dtype)
    out[0] = s
    out[1] = ld
    return out


@njit(cache=True)
def _c_slogdet_jvp(t, a):
    out = np.zeros(2, dtype=a.dtype)
    out[1] = np.sum(np.linalg.inv(a) * t.T)
    return out


@njit(cache=True)
def _c_solve(a, b):
    return np.linalg.solve(a, b)


@njit(cache=True)
def _c_matmul(m, y):
    return np.dot(m, y)


@njit(cache=True)
def _c_outer(u, y):
    if u.ndim == 1:
        return np.outer(u, y)
    return np.dot(u, y.T)


@njit(cache=True)
def _c_pinv(a, rcond, hermitian):
    if hermitian:
        u, s, vt = _svd_herm2(_from_tri2(a, True))
    else:
        u0, s, vt0 = np.linalg.svd(a, full_matrices=False)
        u, vt = np.ascontiguousarray(u0), np.ascontiguousarray(vt0)
    if rcond is None:
        cut = max(a.shape[0], a.shape[1]) * np.finfo(a.dtype).eps
    else:
        cut = rcond
    cutoff = cut * (np.max(s) if s.shape[0] > 0 else 0.0)
    sinv = np.zeros_like(s)
    for i in range(s.shape[0]):
        if s[i] > cutoff:
            sinv[i] = 1.0 / s[i]
    return np.dot(vt.T * sinv, u.T)


@njit(cache=True)
def _c_pinv_vjp(g, y, a, hermitian):
    if hermitian:
        a = _from_tri2(a, True)
    yt = np.ascontiguousarray(y.T)
    gt = np.ascontiguousarray(g.T)
    term = -np.dot(np.dot(y, gt), y)
    term += np.dot(np.dot(y, yt), g - np.dot(np.dot(g, a), y))
    term += np.dot(np.dot(g - np.dot(np.dot(y, a), g), yt), y)
    gr = np.ascontiguousarray(term.T)
    return _fold2(gr, True) if hermitian else gr


@njit(cache=True)
def _c_pinv_jvp(t, y, a, hermitian):
    if hermitian:
        a = _from_tri2(a, True)
        t = _from_tri2(t, True)
    n, m = y.shape
    tt = np.ascontiguousarray(t.T)
    out = -np.dot(np.dot(y, t), y)
    out += np.dot(np.dot(np.dot(y, y.T), tt), np.eye(m, dtype=y.dtype) - np.dot(a, y))
    out += np.dot(np.dot(np.dot(np.eye(n, dtype=y.dtype) - np.dot(y, a), tt), y.T), y)
    return out


@njit(cache=True)
def _c_cholesky(a, upper):
    if upper:
        return np.ascontiguousarray(np.linalg.cholesky(np.ascontiguousarray(a.T)).T)
    return np.linalg.cholesky(a)


@njit(cache=True)
def _c_cholesky_vjp(g, c, upper):
    if upper:
        L = np.ascontiguousarray(c.T)
        gl = np.ascontiguousarray(g.T)
    else:
        L = c
        gl = g
    p = _phi2(np.dot(L.T, gl))
    z = _trsolve2(L, np.ascontiguousarray(p.T), True, 1, False)          # L^-T p^T = (p L^-1)^T
    s = _trsolve2(L, np.ascontiguousarray(z.T), True, 1, False)          # L^-T p L^-1
    return _fold2(0.5 * (s + s.T), not upper)


@njit(cache=True)
def _c_cholesky_jvp(t, c, upper):
    L = np.ascontiguousarray(c.T) if upper else c
    ds = _from_tri2(t, not upper)
    z = _trsolve2(L, ds, True, 0, False)                                 # L^-1 ds
    x = _trsolve2(L, np.ascontiguousarray(z.T), True, 0, False)          # L^-1 ds L^-T
    dl = np.dot(L, _phi2(x))
    return np.ascontiguousarray(dl.T) if upper else dl


@njit(cache=True)
def _c_cho_factor(a, lower):
    out = a.copy()
    f = _c_cholesky(a, not lower)
    n = a.shape[0]
    for i in range(n):
        for j in range(n):
            if (lower and j <= i) or (not lower and j >= i):
                out[i, j] = f[i, j]
    return out


@njit(cache=True)
def _c_cho_factor_vjp(g, c, lower):
    factor = np.tril(c) if lower else np.triu(c)
    gf = np.tril(g) if lower else np.triu(g)
    keep = np.triu(g, 1) if lower else np.tril(g, -1)
    return _c_cholesky_vjp(gf, factor, not lower) + keep


@njit(cache=True)
def _c_cho_factor_jvp(t, c, lower):
    factor = np.tril(c) if lower else np.triu(c)
    keep = np.triu(t, 1) if lower else np.tril(t, -1)
    return _c_cholesky_jvp(t, factor, not lower) + keep


@njit(cache=True)
def _c_eigh(a):
    w, v = np.linalg.eigh(a)
    n = a.shape[0]
    out = np.empty((n + 1, n), dtype=v.dtype)
    out[0] = w
    out[1:] = v
    return out


@njit(cache=True)
def _c_eigh_vjp(g, p, uplo):
    w = p[0]
    v = p[1:]
    gw = g[0]
    gv = g[1:]
    vt = np.ascontiguousarray(v.T)
    gr = np.dot(v * gw, vt)
    if np.any(gv != 0):
        gr = gr + np.dot(np.dot(v, _gap_inv2(w) * np.dot(vt, gv)), vt)
    return _fold2(gr, uplo == "L")


@njit(cache=True)
def _c_eigh_jvp(t, p, uplo):
    w = p[0]
    v = p[1:]
    m = np.dot(np.dot(v.T, _from_tri2(t, uplo == "L")), v)
    n = w.shape[0]
    out = np.empty((n + 1, n), dtype=p.dtype)
    for i in range(n):
        out[0, i] = m[i, i]
    out[1:] = np.dot(v, _gap_inv2(w) * m)
    return out


@njit(cache=True)
def _c_eig(a):
    w, v = np.linalg.eig(a)
    n = a.shape[0]
    out = np.empty((n + 1, n), dtype=v.dtype)
    out[0] = w
    out[1:] = v
    return out


@njit(cache=True)
def _c_eig_vjp(g, p):
    w = p[0]
    v = p[1:]
    gw = g[0]
    gv = g[1:]
    n = w.shape[0]
    vt = np.ascontiguousarray(v.T)
    r = np.diag(gw).astype(v.dtype)
    if np.any(gv != 0):
        f = _gap_inv2(w)
        vtgv = np.dot(vt, gv)
        r = r + f * vtgv - f * np.dot(np.dot(vt, v), np.diag(np.diag(vtgv)))
    return np.linalg.solve(vt, np.dot(r, vt))


@njit(cache=True)
def _c_eig_jvp(t, p):
    w = p[0]
    v = np.ascontiguousarray(p[1:])
    n = w.shape[0]
    m = np.linalg.solve(v, np.dot(t, v))
    dv = np.dot(v, _gap_inv2(w) * m)
    for j in range(n):
        c = np.sum(v[:, j] * dv[:, j])
        dv[:, j] -= c * v[:, j]
    out = np.empty((n + 1, n), dtype=p.dtype)
    for i in range(n):
        out[0, i] = m[i, i]
    out[1:] = dv
    return out


@njit(cache=True)
def _svd_herm2(a):
    """NumPy's svd(hermitian=True) of a real matrix (eigh of the lower triangle, sorted by |w|)."""
    w, v = np.linalg.eigh(a)
    sgn = np.sign(w)
    s = np.abs(w)
    idx = np.argsort(s)[::-1]
    s = np.ascontiguousarray(s[idx])
    u = np.ascontiguousarray(v[:, idx])
    vt = np.ascontiguousarray((u * sgn[idx]).T)
    return u, s, vt


@njit(cache=True)
def _c_svd(a, full_matrices, hermitian):
    m, n = a.shape
    k = min(m, n)
    if hermitian:
        u, s, vh = _svd_herm2(a)
    else:
        u0, s, vh0 = np.linalg.svd(a, full_matrices=full_matrices)
        u, vh = np.ascontiguousarray(u0), np.ascontiguousarray(vh0)
    w = max(u.shape[1], vh.shape[0])
    out = np.zeros((m + 1 + n, w), dtype=u.dtype)
    out[:m, :u.shape[1]] = u
    out[m, :k] = s
    out[m + 1:, :vh.shape[0]] = vh.T
    return out


@njit(cache=True)
def _c_svd_vjp(g, p, a, full_matrices, hermitian):
    m, n = a.shape
    k = min(m, n)
    u = np.ascontiguousarray(p[:m, :k])
    s = p[m, :k].copy()
    v = np.ascontiguousarray(p[m + 1:, :k])
    gu = np.ascontiguousarray(g[:m, :k])
    gs = g[m, :k].copy()
    gv = np.ascontiguousarray(g[m + 1:, :k])
    if full_matrices and m != n:
        extra = g[:m, k:m] if m > n else g[m + 1:, k:n]
        if np.any(extra != 0):
            raise ValueError("np.linalg.svd(..., full_matrices=True): the extra singular vectors of a non-square "
                             "matrix are not unique, so they have no derivative; use full_matrices=False")
    ut = np.ascontiguousarray(u.T)
    vt = np.ascontiguousarray(v.T)
    inner = np.diag(gs).astype(u.dtype)
    anyu = np.any(gu != 0)
    anyv = np.any(gv != 0)
    if anyu or anyv:
        f = _gap_inv2(s * s)
        utgu = np.dot(ut, gu)
        vtgv = np.dot(vt, gv)
        inner = inner + (f * (utgu - utgu.T)) * s + (f * (vtgv - vtgv.T)) * s.reshape((k, 1))
    gr = np.dot(np.dot(u, inner), vt)
    if m < n and anyv:
        gr = gr + np.dot(np.dot(u / s, np.ascontiguousarray(gv.T)), np.eye(n, dtype=u.dtype) - np.dot(v, vt))
    if m > n and anyu:
        gr = gr + np.dot(np.dot(v / s, np.ascontiguousarray(gu.T)), np.eye(m, dtype=u.dtype) - np.dot(u, ut)).T
    return _fold2(np.ascontiguousarray(gr), True) if hermitian else gr


@njit(cache=True)
def _c_svd_jvp(t, p, a, full_matrices, hermitian):
    m, n = a.shape
    k = min(m, n)
    if full_matrices and m != n:
        raise ValueError("np.linalg.svd(..., full_matrices=True): the extra singular vectors of a non-square "
                         "matrix are not unique, so they have no derivative; use full_matrices=False")
    if hermitian:
        t = _from_tri2(t, True)
    u = np.ascontiguousarray(p[:m, :k])
    s = p[m, :k].copy()
    v = np.ascontiguousarray(p[m + 1:, :k])
    dp = np.dot(np.dot(u.T, t), v)
    f = _gap_inv2(s * s)
    sc = s.reshape((k, 1))
    du = np.dot(u, f * (dp * s + sc * dp.T))
    dv = np.dot(v, f * (sc * dp + dp.T * s))
    if m > n:
        du = du + (np.dot(t, v) - np.dot(u, dp)) / s
    if m < n:
        dv = dv + (np.dot(t.T, u) - np.dot(v, dp.T)) / s
    out = np.zeros_like(p)
    out[:m, :k] = du
    for i in range(k):
        out[m, i] = dp[i, i]
    out[m + 1:, :k] = dv
    return out


@njit(cache=True)
def _c_qr(a, mode):
    m, n = a.shape
    q, r = np.linalg.qr(a)
    w = max(q.shape[1], n)
    out = np.zeros((m + r.shape[0], w), dtype=q.dtype)
    out[:m, :q.shape[1]] = q
    out[m:, :n] = r
    return out


@njit(cache=True)
def _qr_sq_vjp2(q, r, gq, gr):
    mm = np.dot(r, gr.T) - np.dot(gq.T, q)
    b = gq + np.dot(q, np.tril(mm) + np.tril(mm, -1).T)
    return np.ascontiguousarray(_trsolve2(r, np.ascontiguousarray(b.T), False, 0, False).T)


@njit(cache=True)
def _c_qr_vjp(g, p, a, mode):
    m, n = a.shape
    k = min(m, n)
    q = np.ascontiguousarray(p[:m, :k])
    r = np.ascontiguousarray(p[m:m + k, :n])
    gq = np.ascontiguousarray(g[:m, :k])
    gr = np.ascontiguousarray(g[m:m + k, :n])
    if m >= n:
        return _qr_sq_vjp2(q, r, gq, gr)
    gyr = np.ascontiguousarray(gr[:, m:])
    gx = _qr_sq_vjp2(q, np.ascontiguousarray(r[:, :m]), gq + np.dot(a[:, m:], gyr.T), np.ascontiguousarray(gr[:, :m]))
    out = np.empty((m, n), dtype=gx.dtype)
    out[:, :m] = gx
    out[:, m:] = np.dot(q, gyr)
    return out


@njit(cache=True)
def _qr_sq_jvp2(q, r, t):
    tr = np.ascontiguousarray(_trsolve2(r, np.ascontiguousarray(t.T), False, 1, False).T)
    c = np.dot(q.T, tr)
    low = np.tril(c, -1)
    om = low - low.T
    return np.dot(q, om) + tr - np.dot(q, c), np.dot(c - om, r)


@njit(cache=True)
def _c_qr_jvp(t, p, a, mode):
    m, n = a.shape
    k = min(m, n)
    q = np.ascontiguousarray(p[:m, :k])
    r = np.ascontiguousarray(p[m:m + k, :n])
    out = np.zeros_like(p)
    if m >= n:
        dq, dr = _qr_sq_jvp2(q, r, t)
        out[:m, :k] = dq
        out[m:m + k, :n] = dr
        return out
    dq, dxr = _qr_sq_jvp2(q, np.ascontiguousarray(r[:, :m]), np.ascontiguousarray(t[:, :m]))
    out[:m, :k] = dq
    out[m:m + k, :m] = dxr
    out[m:m + k, m:n] = np.dot(dq.T, a[:, m:]) + np.dot(q.T, t[:, m:])
    return out


@njit(cache=True)
def _c_matrix_power(a, n):
    """NumPy's algorithm step for step (the same products in the same order)."""
    a = np.linalg.inv(a) if n < 0 else np.ascontiguousarray(a)
    n = abs(n)
    if n == 0:
        return np.eye(a.shape[0], dtype=a.dtype)
    if n == 1:
        return a.copy()
    if n == 2:
        return np.dot(a, a)
    if n == 3:
        return np.dot(np.dot(a, a), a)
    z = a.copy()
    result = np.eye(a.shape[0], dtype=a.dtype)
    first_z = True
    first_r = True
    while n > 0:
        if not first_z:
            z = np.dot(z, z)
        first_z = False
        bit = n % 2
        n = n // 2
        if bit:
            result = z.copy() if first_r else np.dot(result, z)
            first_r = False
    return result


@njit(cache=True)
def _mp_sum2(a, t, n):
    k = a.shape[0]
    pw = np.empty((n, k, k), dtype=a.dtype)
    pw[0] = np.eye(k, dtype=a.dtype)
    for i in range(1, n):
        pw[i] = np.dot(pw[i - 1], a)
    acc = np.zeros_like(t)
    for i in range(n):
        acc += np.dot(np.dot(pw[i], t), pw[n - 1 - i])
    return acc


@njit(cache=True)
def _c_matrix_power_vjp(g, a, n):
    if n == 0:
        return np.zeros_like(a)
    if n > 0:
        return _mp_sum2(np.ascontiguousarray(a.T), g, n)
    b = np.linalg.inv(a)
    bt = np.ascontiguousarray(b.T)
    return -np.dot(np.dot(bt, _mp_sum2(bt, g, -n)), bt)


@njit(cache=True)
def _c_matrix_power_jvp(t, a, n):
    if n == 0:
        return np.zeros_like(t)
    if n > 0:
        return _mp_sum2(a, t, n)
    b = np.linalg.inv(a)
    return _mp_sum2(b, -np.dot(np.dot(b, t), b), -n)


@njit(cache=True)
def _c_solve_tri(a, b, trans, lower, unit):
    return _trsolve(a, b, lower, trans, unit)


@njit(cache=True)
def _c_tri_vjp_a(u, y, trans, lower, unit):
    gt = -_c_outer(u, y) if trans == 0 else -_c_outer(y, u)
    return _tri_part2(gt, lower, unit)


@njit(cache=True)
def _c_tri_matmul(t, y, trans, lower, unit):
    m = _tri_part2(t, lower, unit)
    return np.dot(m if trans == 0 else np.ascontiguousarray(m.T), y)


@njit(cache=True)
def _c_cho_solve(c, b, lower):
    if lower:
        return _trsolve(c, _trsolve(c, b, True, 0, False), True, 1, False)
    return _trsolve(c, _trsolve(c, b, False, 1, False), False, 0, False)


@njit(cache=True)
def _c_cho_vjp_c(u, x, c, lower):
    ga = -_c_outer(u, x)
    gs = ga + ga.T
    if lower:
        return np.tril(np.dot(gs, np.tril(c)))
    return np.triu(np.dot(np.triu(c), gs))


@njit(cache=True)
def _c_cho_jvp_c(t, x, c, lower):
    if lower:
        tc = np.tril(t)
        cc = np.tril(c)
        da = np.dot(tc, cc.T) + np.dot(cc, tc.T)
    else:
        tc = np.triu(t)
        cc = np.triu(c)
        da = np.dot(tc.T, cc) + np.dot(cc.T, tc)
    return np.dot(da, x)


# ----------------------------------------------------------------------------- overloads
def _ov(pyfn, core, roles, scalar_out=False, check=None):
    """Register the nopython implementation of ``pyfn``: ``core`` over stacks (see _batched); ``roles`` is
    a tuple or a function of the argument types returning one; ``check(*types)`` may refuse."""
    def make(*args):
        if check is not None:
            check(*args)
        return _batched(pyfn, core, args, roles(*args) if callable(roles) else roles, scalar_out)
    overload(pyfn, prefer_literal=True)(_same_signature(pyfn, make))


def _same_signature(pyfn, make):
    """A function with ``pyfn``'s parameters (Numba folds keyword arguments by them) calling ``make``."""
    params, names = _param_src(pyfn)
    src = f"def typer({params}):\n    return make({', '.join(names)})\n"
    ns = {"make": make}
    exec(compile(src, "<funcgrad.kernels.cpu_linalg>", "exec"), ns)
    return ns["typer"]


def _no_upper_eigh(a, uplo=None):
    if _lit(uplo, "L") not in ("L",):
        _refuse("np.linalg.eigh(UPLO='U') (LAPACK's upper-triangle path)")


def _no_complete_qr(a, mode=None):
    # Numba retries a literal typing that failed with the argument's plain type (a runtime string): refused too,
    # or mode='complete' compiled as the reduced factorization (a Q of k columns, silently)
    mode = _lit(mode, "reduced")
    if mode == "complete" or mode is _RUNTIME:
        _refuse("np.linalg.qr(mode='complete')")


def _real_only(name):
    def check(x, *rest):
        if isinstance(getattr(x, "dtype", None), types.Complex):
            _refuse(f"{name} of complex values")
    return check


_ov(symmetric_from_triangle, _c_from_tri, ("m", "s"), check=_real_only("a Hermitian matrix from one triangle"))
_ov(fold_triangle, _c_fold, ("m", "s"), check=_real_only("the adjoint of a Hermitian matrix from one triangle"))
_ov(inv, _c_inv, ("m",))
_ov(det, _c_det, ("m",), scalar_out=True)
_ov(slogdet_packed, _c_slogdet, ("m",))
_ov(slogdet_jvp, _c_slogdet_jvp, ("m", "m"))
_ov(solve, _c_solve, lambda a, b: ("m", _rhs_role(b)))
_ov(solve_like, _c_solve, lambda a, z, b: ("m", _rhs_role(b), "x"))
_ov(matmul_like, _c_matmul, lambda m, y, b: ("m", _rhs_role(b), "x"))
_ov(solve_outer, _c_outer, lambda u, y, b: (_rhs_role(b), _rhs_role(b), "x"))
_ov(pinv, _c_pinv, ("m", "s", "s"))
_ov(pinv_vjp, _c_pinv_vjp, ("m", "m", "m", "s"))
_ov(pinv_jvp, _c_pinv_jvp, ("m", "m", "m", "s"))
_ov(cholesky, _c_cholesky, ("m", "s"))
_ov(cholesky_vjp, _c_cholesky_vjp, ("m", "m", "s"))
_ov(cholesky_jvp, _c_cholesky_jvp, ("m", "m", "s"))
_ov(cho_factor, _c_cho_factor, ("m", "s"))
_ov(cho_factor_vjp, _c_cho_factor_vjp, ("m", "m", "s"))
_ov(cho_factor_jvp, _c_cho_factor_jvp, ("m", "m", "s"))
_ov(eigh_packed, _c_eigh, ("m", "x"), check=_no_upper_eigh)
_ov(eigh_vjp, _c_eigh_vjp, ("m", "m", "s"), check=lambda g, p, uplo=None: _real_only("eigh derivatives")(p))
_ov(eigh_jvp, _c_eigh_jvp, ("m", "m", "s"), check=lambda t, p, uplo=None: _real_only("eigh derivatives")(p))
_ov(eig_packed, _c_eig, ("m",))
_ov(eig_vjp, _c_eig_vjp, ("m", "m"))
_ov(eig_jvp, _c_eig_jvp, ("m", "m"))
_ov(svd_packed, _c_svd, ("m", "s", "s"))
def _real_svd(d, p, a, full_matrices=None, hermitian=None):
    if isinstance(getattr(a, "dtype", None), types.Complex) or isinstance(getattr(p, "dtype", None), types.Complex):
        _refuse("derivatives of np.linalg.svd of complex matrices")


_ov(svd_vjp, _c_svd_vjp, ("m", "m", "m", "s", "s"), check=_real_svd)
_ov(svd_jvp, _c_svd_jvp, ("m", "m", "m", "s", "s"), check=_real_svd)
_ov(qr_packed, _c_qr, ("m", "s"), check=_no_complete_qr)
_ov(qr_vjp, _c_qr_vjp, ("m", "m", "m", "s"))
_ov(qr_jvp, _c_qr_jvp, ("m", "m", "m", "s"))
_ov(matrix_power, _c_matrix_power, ("m", "s"))
_ov(matrix_power_vjp, _c_matrix_power_vjp, ("m", "m", "s"))
_ov(matrix_power_jvp, _c_matrix_power_jvp, ("m", "m", "s"))
_ov(solve_triangular, _c_solve_tri, lambda a, b, *r: ("m", _rhs_role(b), "s", "s", "s"))
_ov(solve_triangular_like, _c_solve_tri, lambda a, z, b, *r: ("m", _rhs_role(b), "x", "s", "s", "s"))
_ov(solve_triangular_vjp_a, _c_tri_vjp_a, lambda u, y, a, b, *r: (_rhs_role(b), _rhs_role(b), "x", "x", "s", "s", "s"))
_ov(triangular_matmul, _c_tri_matmul, lambda t, y, b, *r: ("m", _rhs_role(b), "x", "s", "s", "s"))
_ov(cho_solve, _c_cho_solve, lambda c, b, *r: ("m", _rhs_role(b), "s"))
_ov(cho_solve_like, _c_cho_solve, lambda c, z, b, *r: ("m", _rhs_role(b), "x", "s"))
_ov(cho_solve_vjp_c, _c_cho_vjp_c, lambda u, x, c, b, *r: (_rhs_role(b), _rhs_role(b), "m", "x", "s"))
_ov(cho_solve_jvp_c, _c_cho_jvp_c, lambda t, x, c, b, *r: ("m", _rhs_role(b), "m", "x", "s"))


# ----------------------------------------------------------------------------- norm
@njit(cache=True)
def _vnorm(v, p):
    a = np.abs(v)
    if p == np.inf:
        return np.max(a)
    if p == -np.inf:
        return np.min(a)
    if p == 0:
        return float(np.sum(a != 0))
    if p == 1:
        return np.sum(a)
    if p == 2:
        return np.sqrt(np.sum(v * v))
    return np.sum(a ** p) ** (1.0 / p)


@njit(cache=True)
def _vunit(v, p):
    a = np.abs(v)
    sg = np.sign(v)
    out = np.zeros(v.shape[0], dtype=v.dtype)
    if p == np.inf or p == -np.inf:
        tgt = np.max(a) if p == np.inf else np.min(a)
        cnt = np.sum(a == tgt)
        for i in range(v.shape[0]):
            if a[i] == tgt:
                out[i] = sg[i] / cnt
    elif p == 1:
        out[:] = sg
    elif p == 2:
        y = np.sqrt(np.sum(v * v))
        if y != 0:
            out[:] = v / y
    elif p != 0:
        y = np.sum(a ** p) ** (1.0 / p)
        out[:] = sg * a ** (p - 1) * y ** (1 - p)
    return out


@njit(cache=True)
def _mcode(o):
    if o == np.inf:
        return 6
    if o == -np.inf:
        return 7
    if o == 2:
        return 2
    if o == -2:
        return 3
    if o == 1:
        return 4
    if o == -1:
        return 5
    raise ValueError("Invalid norm order for matrices.")


@njit(cache=True)
def _mnorm(m, code):
    if code == 0:
        return np.sqrt(np.sum(m * m))
    if code <= 3:
        s = np.linalg.svd(m)[1]
        return np.sum(s) if code == 1 else (s[0] if code == 2 else s[-1])
    sums = np.sum(np.abs(m), axis=0) if code <= 5 else np.sum(np.abs(m), axis=1)
    return np.max(sums) if code == 4 or code == 6 else np.min(sums)


@njit(cache=True)
def _munit(m, code):
    r, c = m.shape
    out = np.zeros((r, c), dtype=m.dtype)
    if code == 0:
        y = np.sqrt(np.sum(m * m))
        if y != 0:
            out[:, :] = m / y
        return out
    if code <= 3:
        u, s, vh = np.linalg.svd(m, full_matrices=False)
        if code == 1:
            return np.dot(u, vh)
        i = 0 if code == 2 else s.shape[0] - 1
        return np.outer(u[:, i], vh[i])
    cols = code <= 5
    sums = np.sum(np.abs(m), axis=0) if cols else np.sum(np.abs(m), axis=1)
    tgt = np.max(sums) if code == 4 or code == 6 else np.min(sums)
    cnt = np.sum(sums == tgt)
    sg = np.sign(m)
    for i in range(r):
        for j in range(c):
            if sums[j if cols else i] == tgt:
                out[i, j] = sg[i, j] / cnt
    return out


_MCODES = {None: 0, "fro": 0, "nuc": 1, 2: 2, -2: 3, 1: 4, -1: 5}


def _norm_plan(x, ord_t, axis_t, keep_t, fn):
    """Typing-time plan of a nopython norm: (source lines reading ``x`` into X (nb, ...) and P, helpers)."""
    if not isinstance(x, types.Array):
        return None
    if isinstance(x.dtype, types.Complex):
        _refuse(f"np.linalg.{fn} of complex values (nopython mode computes real norms only)")
    nd = x.ndim
    o, axis, keep = _lit(ord_t), _lit(axis_t), _lit(keep_t, False)
    if axis is _RUNTIME or keep is _RUNTIME:
        _refuse(f"np.linalg.{fn} with an axis or keepdims computed at run time")
    if axis is None:
        if o is None:
            kind, axes = "v", tuple(range(nd))
        elif nd in (1, 2):
            kind, axes = ("v", (0,)) if nd == 1 else ("m", (0, 1))
        else:
            _refuse("np.linalg.norm of a 3-D or larger array with ord and no axis")
    else:
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        axes = tuple(a % nd for a in axes)
        kind = "v" if len(axes) == 1 else "m"
    rest = tuple(i for i in range(nd) if i not in axes)
    perm = rest + axes
    if kind == "v":
        pexpr = "2.0" if o is None else ("float(ord)" if o is _RUNTIME else repr(float(o)))
        core, unit = _vnorm, _vunit
    else:
        if o is _RUNTIME:
            pexpr = "_mcode(ord)"
        elif o in _MCODES:
            pexpr = str(_MCODES[o])
        else:
            raise _nberrors.TypingError(f"Invalid norm order {o!r} for matrices.")
        core, unit = _mnorm, _munit
    nr = len(rest)
    bshape = "".join(f"s[{i}], " for i in range(nr))
    nb = " * ".join([f"s[{i}]" for i in range(nr)] or ["1"])
    cshape = (" * ".join(f"s[{i}]" for i in range(nr, nd)) + ", ") if kind == "v" else f"s[{nd - 2}], s[{nd - 1}], "
    outshape = "".join(("1, " if i in axes else f"x.shape[{i}], ") if keep else (f"x.shape[{i}], " if i not in axes
                                                                               else "") for i in range(nd))
    inv = tuple(perm.index(i) for i in range(nd))
    dt = "np.float32" if x.dtype == types.float32 else "np.float64"
    return dict(perm=perm, inv=inv, ident=perm == tuple(range(nd)), nb=nb, cshape=cshape, outshape=outshape,
                pexpr=pexpr, dt=dt, env={"core": core, "unit": unit, "_mcode": _mcode}, bshape=bshape)


def _to_rows(name, plan, var):
    src = name if plan["ident"] else f"np.transpose({name}, {plan['perm']})"
    return [f"    {var}t = {src}", f"    s = {var}t.shape", f"    nb = {plan['nb']}",
            f"    {var} = np.ascontiguousarray({var}t).astype({plan['dt']}).reshape((nb, {plan['cshape']}))"]


def _finish(plan):
    if plan["outshape"]:
        return [f"    return out.reshape(({plan['outshape']}))"]
    return ["    return out[0]"]


@overload(norm, prefer_literal=True)
def _norm_ov(x, ord=None, axis=None, keepdims=False):  # noqa: A002
    plan = _norm_plan(x, ord, axis, keepdims, "norm")
    if plan is None:
        return None
    lines = ["def impl(x, ord=None, axis=None, keepdims=False):"] + _to_rows("x", plan, "X")
    lines += [f"    P = {plan['pexpr']}", f"    out = np.empty(nb, dtype={plan['dt']})",
              "    for j in range(nb):", "        out[j] = core(X[j], P)"] + _finish(plan)
    return _compile_impl("\n".join(lines) + "\n", plan["env"])


@overload(norm_jvp, prefer_literal=True)
def _norm_jvp_ov(t, y, x, ord=None, axis=None, keepdims=False):  # noqa: A002
    plan = _norm_plan(x, ord, axis, keepdims, "norm")
    if plan is None:
        return None
    lines = ["def impl(t, y, x, ord=None, axis=None, keepdims=False):"] + _to_rows("x", plan, "X")
    trows = _to_rows("t", plan, "T")
    lines += [trows[0], trows[-1]]
    lines += [f"    P = {plan['pexpr']}", f"    out = np.empty(nb, dtype={plan['dt']})",
              "    for j in range(nb):", "        out[j] = np.sum(T[j] * unit(X[j], P))"] + _finish(plan)
    return _compile_impl("\n".join(lines) + "\n", plan["env"])


@overload(norm_vjp, prefer_literal=True)
def _norm_vjp_ov(g, y, x, ord=None, axis=None, keepdims=False):  # noqa: A002
    plan = _norm_plan(x, ord, axis, keepdims, "norm")
    if plan is None:
        return None
    gread = "np.ascontiguousarray(g).astype(out.dtype).reshape(nb)" if isinstance(g, types.Array) else \
        "np.full(nb, g, dtype=out.dtype)"
    lines = ["def impl(g, y, x, ord=None, axis=None, keepdims=False):"] + _to_rows("x", plan, "X")
    lines += [f"    P = {plan['pexpr']}", "    out = np.empty(X.shape, dtype=X.dtype)", f"    G = {gread}",
              "    for j in range(nb):", "        out[j] = G[j] * unit(X[j], P)", "    res = out.reshape(s)"]
    lines += ["    return res"] if plan["ident"] else [f"    return np.ascontiguousarray(np.transpose(res, {plan['inv']}))"]
    return _compile_impl("\n".join(lines) + "\n", plan["env"])


@overload(matrix_transpose)
def _matrix_transpose_ov(x):
    if isinstance(x, types.Array) and x.ndim >= 2:
        return lambda x: np.swapaxes(x, -1, -2)
    return None


def _python_only_overload(fn):
    fn.python_only = True

    def refuse(*args):
        _refuse(f"scipy.linalg's {fn.__name__}")
    overload(fn)(_same_signature(fn, refuse))


for _fn in (sqrtm, sqrtm_vjp, sqrtm_jvp, expm, expm_vjp, expm_jvp, solve_banded, solve_banded_vjp_b,
            solve_banded_vjp_ab, banded_matmul):
    _python_only_overload(_fn)
