"""``numpy.linalg`` and ``scipy.linalg`` as users call them: primitives and definitions.

A function with one array result and NumPy's own signature is a primitive
keyed by NumPy's function (``np.linalg.inv``, ``det``, ``solve``, ``cholesky``,
``norm``, ``matrix_power``, ``scipy.linalg.expm``). The others are
*definitions* (:func:`.registry.define`): Python over primitives that
normalize inlines at the user's line. That is how several results are
returned from one computation: ``np.linalg.eigh`` calls the primitive
``eigh_packed`` (eigenvalues and eigenvectors in one array) and returns
``EighResult(p[..., 0, :], p[..., 1:, :])``, so ``w, v = np.linalg.eigh(a)``,
``np.linalg.eigh(a)[1]`` and ``.eigenvectors`` all work, and the reverse pass
sees only array primitives and indexing. Definitions also map other
signatures onto the primitives (``scipy.linalg.solve_triangular(a, b,
trans="T", check_finite=False)``) and refuse, at the user's line, the forms
whose derivative does not exist (``qr(mode="raw")``).

Conventions (true derivatives of what NumPy computes, checked against
central differences on any input):

* functions that read one triangle of a symmetric matrix (``eigh``,
  ``cholesky``, ``svd``/``pinv`` with ``hermitian=True``, ``cho_solve``,
  ``solve_triangular``) have a zero derivative in the other triangle and
  collect both mirrored entries in the one they read. For inputs built
  symmetric (``a = b @ b.T``) this gives the same gradient as autograd's
  symmetrized one, which is how autograd's tests check them;
* ``svd(full_matrices=True)`` / ``qr(mode="complete")`` of non-square
  matrices: the extra singular vectors / columns of Q are not unique, so a
  cotangent reaching them is refused when the gradient runs (using only the
  leading ``min(m, n)`` of them is fine);
* ``eig`` and ``sqrtm`` work on real results only (a complex spectrum is
  refused with a clear error);
* ``norm`` at a kink (a zero vector, tied maxima) takes the subgradient that
  shares equally among ties (as ``np.max`` does) and 0 at the origin.

Modes: everything runs in Python (``jit=False``, ``"kernels"``); everything but
``sqrtm``, ``expm`` and ``solve_banded`` (``python_only`` kernels: ``jit="auto"``
picks Python for functions calling them) also compiles whole with Numba, where
``eigh(UPLO="U")`` and ``qr(mode="complete")`` are refused (Numba has no LAPACK
call that gives NumPy's values for them).
"""
from __future__ import annotations

import numpy as np
import scipy.linalg as sla

import funcgrad.kernels.cpu as K
from . import samples_linalg as SL
from .core import unbroadcast
from .registry import RUNTIME, by_name, d, define, defvjp, primitive, t

EighResult = type(np.linalg.eigh(np.eye(1)))
EigResult = type(np.linalg.eig(np.eye(1)))
SVDResult = type(np.linalg.svd(np.eye(1)))
QRResult = type(np.linalg.qr(np.eye(1)))
SlogdetResult = type(np.linalg.slogdet(np.eye(1)))
_NOVALUE = np._NoValue


# ----------------------------------------------------------------------------- transposes and triangles
@defvjp(np.linalg.matrix_transpose, sample=SL.S.custom(lambda draw, dt, st, array, shapes: (
    (array(draw, shapes(draw, 2, 4), dt),), {})), also=[np.matrix_transpose])
def matrix_transpose(y, x):
    d[x] = np.linalg.matrix_transpose(d[y])
    t[y] = np.linalg.matrix_transpose(t[x])


# np.tril and np.triu are NumPy shape primitives (ops/numpy_shape.py).


@defvjp(None, sample=SL.triangle_pair())
def symmetric_from_triangle(y, a, lower=True):
    """The symmetric matrix whose lower (upper) triangle is ``a``'s (linear)."""
    d[a] = fold_triangle(d[y], lower)
    t[y] = symmetric_from_triangle(t[a], lower)


@defvjp(None, sample=SL.triangle_pair())
def fold_triangle(y, g, lower=True):
    """The adjoint of symmetric_from_triangle (linear)."""
    d[g] = symmetric_from_triangle(d[y], lower)
    t[y] = fold_triangle(t[g], lower)


# ----------------------------------------------------------------------------- inverse, determinants
@defvjp(np.linalg.inv, sample=SL.square())
def inv(y, a):
    d[a] = -(np.linalg.matrix_transpose(y) @ d[y] @ np.linalg.matrix_transpose(y))
    t[y] = -(y @ t[a] @ y)


@defvjp(np.linalg.det, sample=SL.square())
def det(y, a):
    d[a] = np.expand_dims(d[y] * y, (-2, -1)) * np.linalg.matrix_transpose(np.linalg.inv(a))
    t[y] = y * np.sum(np.linalg.inv(a) * np.linalg.matrix_transpose(t[a]), axis=(-2, -1))


@defvjp(None, sample=SL.square())
def slogdet_packed(y, a):
    """``np.linalg.slogdet`` packed: ``[..., 0]`` the sign (no derivative), ``[..., 1]`` log|det|."""
    d[a] = np.expand_dims(d[y][..., 1], (-2, -1)) * np.linalg.matrix_transpose(np.linalg.inv(a))
    t[y] = slogdet_jvp(t[a], a)


@primitive(tested_via=slogdet_packed)
def slogdet_jvp(t, a):
    return K.slogdet_jvp(t, a)


@define(np.linalg.slogdet)
def _slogdet(a):
    p = slogdet_packed(a)
    return SlogdetResult(p[..., 0], p[..., 1])


# ----------------------------------------------------------------------------- solve
@defvjp(np.linalg.solve, sample=SL.linear_system())
def solve(y, a, b):
    u = solve_like(np.linalg.matrix_transpose(a), d[y], b)
    d[a] = unbroadcast(-solve_outer(u, y, b), a)
    d[b] = unbroadcast(u, b)
    t[y] = np.linalg.solve(a, t[b]) - solve_like(a, matmul_like(t[a], y, b), b)


# a right-hand side follows NumPy 2's convention: a vector exactly when ``b`` is 1-D
@primitive(tested_via=np.linalg.solve)
def solve_like(a, z, b):
    """``solve(a, z)`` with ``z`` read as ``b`` is (a vector iff ``b`` is 1-D)."""
    return K.solve_like(a, z, b)


@primitive(tested_via=np.linalg.solve)
def matmul_like(m, y, b):
    """``m @ y`` with ``y`` read as ``b`` is."""
    return K.matmul_like(m, y, b)


@primitive(tested_via=np.linalg.solve)
def solve_outer(u, y, b):
    """``u @ y^T`` (the outer product for vector right-hand sides)."""
    return K.solve_outer(u, y, b)


# ----------------------------------------------------------------------------- pinv
@defvjp(None, sample=SL.rectangular(lambda draw, st: {"hermitian": False}))
def pinv(y, a, rcond=1e-15, hermitian=False):
    """``np.linalg.pinv`` (rcond ``None``: the array-API default); the derivative at constant rank."""
    d[a] = pinv_vjp(d[y], y, a, hermitian)
    t[y] = pinv_jvp(t[a], y, a, hermitian)


@primitive(tested_via=pinv)
def pinv_vjp(g, y, a, hermitian=False):
    return K.pinv_vjp(g, y, a, hermitian)


@primitive(tested_via=pinv)
def pinv_jvp(t, y, a, hermitian=False):
    return K.pinv_jvp(t, y, a, hermitian)


def _pinv_check(a, rcond=None, hermitian=False, rtol=_NOVALUE):
    if rcond is not None and rtol is not _NOVALUE:
        return "np.linalg.pinv: `rtol` and `rcond` can't be both set", None
    if RUNTIME in (rcond, rtol, hermitian):
        return ("np.linalg.pinv: rcond, rtol and hermitian must be known before the function runs",
                "pass constants, not values computed inside the function")
    return None


@define(np.linalg.pinv, check=_pinv_check)
def _pinv(a, rcond=None, hermitian=False, rtol=_NOVALUE):
    return pinv(a, rcond if rcond is not None else (1e-15 if rtol is _NOVALUE else rtol), hermitian)


# ----------------------------------------------------------------------------- cholesky
@defvjp(np.linalg.cholesky, sample=SL.square("spd", lambda draw, st: {"upper": draw(st.booleans())}))
def cholesky(y, a, upper=False):
    """Reads the lower (``upper=True``: upper) triangle of ``a``."""
    d[a] = cholesky_vjp(d[y], y, upper)
    t[y] = cholesky_jvp(t[a], y, upper)


@primitive(tested_via=np.linalg.cholesky)
def cholesky_vjp(g, c, upper=False):
    return K.cholesky_vjp(g, c, upper)


@primitive(tested_via=np.linalg.cholesky)
def cholesky_jvp(t, c, upper=False):
    return K.cholesky_jvp(t, c, upper)


# ----------------------------------------------------------------------------- eigh, eig
@defvjp(None, sample=SL.square("symmetric", lambda draw, st: {"UPLO": draw(st.sampled_from(["L", "U"]))}))
def eigh_packed(y, a, UPLO="L"):
    """``np.linalg.eigh`` packed: row 0 the eigenvalues, rows 1.. the eigenvectors."""
    d[a] = eigh_vjp(d[y], y, UPLO)
    t[y] = eigh_jvp(t[a], y, UPLO)


@primitive(tested_via=eigh_packed)
def eigh_vjp(g, p, UPLO="L"):
    return K.eigh_vjp(g, p, UPLO)


@primitive(tested_via=eigh_packed)
def eigh_jvp(t, p, UPLO="L"):
    return K.eigh_jvp(t, p, UPLO)


def _uplo_check(a, UPLO="L"):
    if UPLO not in ("L", "U"):
        return "UPLO argument must be 'L' or 'U'", None
    return None


@define(np.linalg.eigh, check=_uplo_check)
def _eigh(a, UPLO="L"):
    p = eigh_packed(a, UPLO)
    return EighResult(np.real(p[..., 0, :]), p[..., 1:, :])   # real eigenvalues (packed with complex vectors)


@define(np.linalg.eigvalsh, check=_uplo_check)
def _eigvalsh(a, UPLO="L"):
    return np.real(eigh_packed(a, UPLO)[..., 0, :])


@defvjp(None, sample=SL.square("real_spectrum"))
def eig_packed(y, a):
    """``np.linalg.eig`` packed like eigh_packed (complex when the spectrum or the matrix is)."""
    d[a] = eig_vjp(d[y], y)
    t[y] = eig_jvp(t[a], y)


@primitive(tested_via=eig_packed)
def eig_vjp(g, p):
    return K.eig_vjp(g, p)


@primitive(tested_via=eig_packed)
def eig_jvp(t, p):
    return K.eig_jvp(t, p)


by_name("eig_packed").result_kind = "complex"   # data-dependent: complex eigenvalues of a real matrix (transform.realness)


@define(np.linalg.eig)
def _eig(a):
    p = eig_packed(a)
    return EigResult(p[..., 0, :], p[..., 1:, :])


@define(np.linalg.eigvals)
def _eigvals(a):
    return eig_packed(a)[..., 0, :]


# ----------------------------------------------------------------------------- svd
@defvjp(None, sample=SL.rectangular(lambda draw, st: {"full_matrices": draw(st.booleans()),
                                                      "hermitian": False},
                                    square_only=lambda kw: kw["full_matrices"]))
def svd_packed(y, a, full_matrices=True, hermitian=False):
    """``np.linalg.svd`` packed: U in rows ``:m``, s in row ``m``, V = Vh^T in rows ``m + 1:``."""
    d[a] = svd_vjp(d[y], y, a, full_matrices, hermitian)
    t[y] = svd_jvp(t[a], y, a, full_matrices, hermitian)


@primitive(tested_via=svd_packed)
def svd_vjp(g, p, a, full_matrices=True, hermitian=False):
    return K.svd_vjp(g, p, a, full_matrices, hermitian)


@primitive(tested_via=svd_packed)
def svd_jvp(t, p, a, full_matrices=True, hermitian=False):
    return K.svd_jvp(t, p, a, full_matrices, hermitian)


def _svd_check(a, full_matrices=True, compute_uv=True, hermitian=False):
    if RUNTIME in (full_matrices, compute_uv, hermitian):
        return ("np.linalg.svd: full_matrices, compute_uv and hermitian must be known before the function runs",
                "pass constants, not values computed inside the function")
    return None


@define(np.linalg.svd, check=_svd_check)
def _svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    full = bool(full_matrices) and bool(compute_uv)
    p = svd_packed(a, full, bool(hermitian))
    m = a.shape[-2]
    n = a.shape[-1]
    k = min(m, n)
    s = np.real(p[..., m, :k])   # real singular values (packed with complex vectors for a complex matrix)
    return SVDResult(p[..., :m, :m] if full else p[..., :m, :k], s,
                     np.linalg.matrix_transpose(p[..., m + 1:, :n] if full else p[..., m + 1:, :k])) \
        if compute_uv else s


@define(np.linalg.svdvals)
def _svdvals(x):
    p = svd_packed(x, False, False)
    return np.real(p[..., x.shape[-2], :])


# ----------------------------------------------------------------------------- qr
@defvjp(None, sample=SL.rectangular(lambda draw, st: {"mode": draw(st.sampled_from(["reduced", "complete", "r"]))},
                                    square_only=lambda kw: kw["mode"] == "complete"))
def qr_packed(y, a, mode="reduced"):
    """``np.linalg.qr`` packed: Q in rows ``:m``, R in rows ``m:``."""
    d[a] = qr_vjp(d[y], y, a, mode)
    t[y] = qr_jvp(t[a], y, a, mode)


@primitive(tested_via=qr_packed)
def qr_vjp(g, p, a, mode="reduced"):
    return K.qr_vjp(g, p, a, mode)


@primitive(tested_via=qr_packed)
def qr_jvp(t, p, a, mode="reduced"):
    return K.qr_jvp(t, p, a, mode)


def _qr_check(a, mode="reduced"):
    if mode == "raw":
        return ("np.linalg.qr(mode='raw') is not supported in a differentiated function (Householder "
                "reflectors have no derivative rule)", "use mode='reduced', 'complete' or 'r'")
    if mode not in ("reduced", "complete", "r"):
        return f"np.linalg.qr: unrecognized mode {mode!r}", None
    return None


@define(np.linalg.qr, check=_qr_check)
def _qr(a, mode="reduced"):
    p = qr_packed(a, mode)
    m = a.shape[-2]
    n = a.shape[-1]
    k = min(m, n)
    r = p[..., m:, :n]
    return r if mode == "r" else QRResult(p[..., :m, :m] if mode == "complete" else p[..., :m, :k], r)


# ----------------------------------------------------------------------------- norm
@defvjp(np.linalg.norm, sample=SL.S.custom(SL.norm))
def norm(y, x, ord=None, axis=None, keepdims=False):  # noqa: A002
    """Every ``ord`` NumPy accepts, over all elements, one axis or two (a matrix norm)."""
    d[x] = norm_vjp(d[y], y, x, ord, axis, keepdims)
    t[y] = norm_jvp(t[x], y, x, ord, axis, keepdims)


@primitive(tested_via=np.linalg.norm)
def norm_vjp(g, y, x, ord=None, axis=None, keepdims=False):  # noqa: A002
    return K.norm_vjp(g, y, x, ord, axis, keepdims)


@primitive(tested_via=np.linalg.norm)
def norm_jvp(t, y, x, ord=None, axis=None, keepdims=False):  # noqa: A002
    return K.norm_jvp(t, y, x, ord, axis, keepdims)


def _vector_norm_check(x, axis=None, keepdims=False, ord=2):  # noqa: A002
    if axis is None and keepdims is not False:
        return ("np.linalg.vector_norm(axis=None, keepdims=True) is not supported in a differentiated function",
                "reshape the result yourself")
    if isinstance(axis, tuple) and len(axis) > 1:
        return ("np.linalg.vector_norm over several axes is not supported in a differentiated function",
                "reshape those axes into one first")
    return None


@define(np.linalg.vector_norm, check=_vector_norm_check)
def _vector_norm(x, axis=None, keepdims=False, ord=2):  # noqa: A002
    return np.linalg.norm(x, ord, axis, keepdims) if axis is not None else np.linalg.norm(np.reshape(x, (-1,)), ord)


@define(np.linalg.matrix_norm)
def _matrix_norm(x, keepdims=False, ord="fro"):  # noqa: A002
    return np.linalg.norm(x, ord, (-2, -1), keepdims)


# ----------------------------------------------------------------------------- matrix_power
@defvjp(np.linalg.matrix_power, sample=SL.S.custom(SL.matrix_power))
def matrix_power(y, a, n):
    d[a] = matrix_power_vjp(d[y], a, n)
    t[y] = matrix_power_jvp(t[a], a, n)


@primitive(tested_via=np.linalg.matrix_power)
def matrix_power_vjp(g, a, n):
    return K.matrix_power_vjp(g, a, n)


@primitive(tested_via=np.linalg.matrix_power)
def matrix_power_jvp(t, a, n):
    return K.matrix_power_jvp(t, a, n)


# ============================================================================= scipy.linalg
_TRANS = {0: 0, 1: 1, 2: 1, "N": 0, "T": 1, "C": 1}


@defvjp(None, sample=SL.S.custom(SL.triangular_system))
def solve_triangular(y, a, b, trans=0, lower=False, unit_diagonal=False):
    """``scipy.linalg.solve_triangular`` (trans 0 or 1); reads one triangle of ``a``."""
    u = solve_triangular_like(a, d[y], b, 1 - trans, lower, unit_diagonal)
    d[a] = unbroadcast(solve_triangular_vjp_a(u, y, a, b, trans, lower, unit_diagonal), a)
    d[b] = unbroadcast(u, b)
    t[y] = solve_triangular(a, t[b], trans, lower, unit_diagonal) - solve_triangular_like(
        a, triangular_matmul(t[a], y, b, trans, lower, unit_diagonal), b, trans, lower, unit_diagonal)


@primitive(tested_via=solve_triangular)
def solve_triangular_like(a, z, b, trans=0, lower=False, unit_diagonal=False):
    return K.solve_triangular_like(a, z, b, trans, lower, unit_diagonal)


@primitive(tested_via=solve_triangular)
def solve_triangular_vjp_a(u, y, a, b, trans=0, lower=False, unit_diagonal=False):
    return K.solve_triangular_vjp_a(u, y, a, b, trans, lower, unit_diagonal)


@primitive(tested_via=solve_triangular)
def triangular_matmul(t, y, b, trans=0, lower=False, unit_diagonal=False):
    return K.triangular_matmul(t, y, b, trans, lower, unit_diagonal)


def _trans_check(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False, check_finite=True):
    if trans not in _TRANS:
        return f"scipy.linalg.solve_triangular: trans must be 0, 1, 2, 'N', 'T' or 'C', not {trans!r}", None
    if RUNTIME in (lower, unit_diagonal):
        return ("scipy.linalg.solve_triangular: lower and unit_diagonal must be known before the function runs",
                None)
    return None


@define(sla.solve_triangular, check=_trans_check)
def _solve_triangular(a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False, check_finite=True):
    return solve_triangular(a, b, _TRANS[trans], lower, unit_diagonal)


@defvjp(None, sample=SL.S.custom(SL.cho_system))
def cho_solve(y, c, b, lower=False):
    """``scipy.linalg.cho_solve((c, lower), b)``; reads one triangle of ``c``."""
    u = cho_solve_like(c, d[y], b, lower)
    d[c] = unbroadcast(cho_solve_vjp_c(u, y, c, b, lower), c)
    d[b] = unbroadcast(u, b)
    t[y] = cho_solve(c, t[b], lower) - cho_solve_like(c, cho_solve_jvp_c(t[c], y, c, b, lower), b, lower)


@primitive(tested_via=cho_solve)
def cho_solve_like(c, z, b, lower=False):
    return K.cho_solve_like(c, z, b, lower)


@primitive(tested_via=cho_solve)
def cho_solve_vjp_c(u, x, c, b, lower=False):
    return K.cho_solve_vjp_c(u, x, c, b, lower)


@primitive(tested_via=cho_solve)
def cho_solve_jvp_c(t, x, c, b, lower=False):
    return K.cho_solve_jvp_c(t, x, c, b, lower)


@define(sla.cho_solve)
def _cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True):
    c, lower = c_and_lower
    return cho_solve(c, b, lower)


@defvjp(None, sample=SL.square("spd", lambda draw, st: {"lower": draw(st.booleans())}))
def cho_factor(y, a, lower=False):
    """The factor of ``scipy.linalg.cho_factor``: the Cholesky factor in one triangle, ``a``'s own entries
    (untouched by LAPACK) in the other."""
    d[a] = cho_factor_vjp(d[y], y, lower)
    t[y] = cho_factor_jvp(t[a], y, lower)


@primitive(tested_via=cho_factor)
def cho_factor_vjp(g, c, lower=False):
    return K.cho_factor_vjp(g, c, lower)


@primitive(tested_via=cho_factor)
def cho_factor_jvp(t, c, lower=False):
    return K.cho_factor_jvp(t, c, lower)


@define(sla.cho_factor)
def _cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    return cho_factor(a, bool(lower)), bool(lower)


@define(sla.cholesky)
def _sp_cholesky(a, lower=False, overwrite_a=False, check_finite=True):
    return np.linalg.cholesky(a, upper=not lower)


@define(sla.det)
def _sp_det(a, overwrite_a=False, check_finite=True):
    return np.linalg.det(a)


def _general_check(what):
    def check(*args, assume_a=None, **kwargs):
        if assume_a not in (None, "gen", "general"):
            return (f"scipy.linalg.{what}(assume_a={assume_a!r}) is not supported in a differentiated function",
                    "use assume_a=None (a general matrix)")
        return None
    return check


@define(sla.inv, check=_general_check("inv"))
def _sp_inv(a, overwrite_a=False, check_finite=True, assume_a=None, lower=False):
    return np.linalg.inv(a)


_SYMMETRIC = ("sym", "symmetric", "her", "hermitian", "pos", "positive definite")
_TRIANGULAR = ("upper triangular", "lower triangular")


def _sp_solve_check(a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True, assume_a=None,
                    transposed=False):
    if assume_a not in (None, "gen", "general") + _SYMMETRIC + _TRIANGULAR:
        return (f"scipy.linalg.solve(assume_a={assume_a!r}) is not supported in a differentiated function",
                "use assume_a=None, 'sym', 'pos' or a triangular structure")
    if RUNTIME in (lower, transposed):
        return "scipy.linalg.solve: lower and transposed must be known before the function runs", None
    return None


@define(sla.solve, check=_sp_solve_check)
def _sp_solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True, assume_a=None,
              transposed=False):
    return solve_triangular(a, b, 1 if transposed else 0, assume_a == "lower triangular", False) \
        if assume_a in _TRIANGULAR else np.linalg.solve(
            (np.linalg.matrix_transpose(a) if transposed else a) if assume_a not in _SYMMETRIC
            else symmetric_from_triangle(a, bool(lower)), b)


# ----------------------------------------------------------------------------- solve_sylvester
def _sample_sylvester(draw, dt, st, array, shapes):
    rng = SL._rng(draw, st)
    m, n = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    return (SL._cast(SL.dominant(rng, (m, m)), dt), SL._cast(SL.dominant(rng, (n, n)), dt),
            SL._cast(rng.uniform(-1.0, 1.0, (m, n)), dt)), {}


@defvjp(sla.solve_sylvester, sample=SL.S.custom(_sample_sylvester), python_only=True)
def solve_sylvester(y, a, b, q):
    """``scipy.linalg.solve_sylvester``: X with A X + X B = Q (square A and B without opposite eigenvalues)."""
    u = sla.solve_sylvester(np.linalg.matrix_transpose(a), np.linalg.matrix_transpose(b), d[y])
    d[a] = -(u @ np.linalg.matrix_transpose(y))
    d[b] = -(np.linalg.matrix_transpose(y) @ u)
    d[q] = u
    t[y] = sla.solve_sylvester(a, b, t[q] - t[a] @ y - y @ t[b])


# ----------------------------------------------------------------------------- sqrtm, expm
@defvjp(None, sample=SL.square("spd", lambda draw, st: {}))
def sqrtm(y, a):
    """``scipy.linalg.sqrtm`` (complex where SciPy's result is)."""
    d[a] = sqrtm_vjp(d[y], y)
    t[y] = sqrtm_jvp(t[a], y)


@primitive(tested_via=sqrtm)
def sqrtm_vjp(g, y):
    return K.sqrtm_vjp(g, y)


@primitive(tested_via=sqrtm)
def sqrtm_jvp(t, y):
    return K.sqrtm_jvp(t, y)


by_name("sqrtm").result_kind = "complex"   # data-dependent: a real matrix with negative eigenvalues


@define(sla.sqrtm)
def _sqrtm(A, disp=True, blocksize=64):
    return sqrtm(A)


@defvjp(sla.expm, sample=SL.S.custom(SL.small_square))
def expm(y, A):
    d[A] = expm_vjp(d[y], A)
    t[y] = expm_jvp(t[A], A)


@primitive(tested_via=sla.expm)
def expm_vjp(g, a):
    return K.expm_vjp(g, a)


@primitive(tested_via=sla.expm)
def expm_jvp(t, a):
    return K.expm_jvp(t, a)


# ----------------------------------------------------------------------------- banded systems
@defvjp(None, sample=SL.S.custom(SL.banded_system))
def solve_banded(y, ab, b, l=1, u=1):  # noqa: E741
    """``scipy.linalg.solve_banded((l, u), ab, b)`` (one system: 2-D ab, b of shape (n,) or (n, k))."""
    v = solve_banded_vjp_b(d[y], ab, b, l, u)
    d[ab] = solve_banded_vjp_ab(v, y, ab, b, l, u)
    d[b] = v
    t[y] = solve_banded(ab, t[b], l, u) - solve_banded(ab, banded_matmul(t[ab], y, l, u), l, u)


@primitive(tested_via=solve_banded)
def solve_banded_vjp_b(g, ab, b, l=1, u=1):  # noqa: E741
    return K.solve_banded_vjp_b(g, ab, b, l, u)


@primitive(tested_via=solve_banded)
def solve_banded_vjp_ab(v, y, ab, b, l=1, u=1):  # noqa: E741
    return K.solve_banded_vjp_ab(v, y, ab, b, l, u)


@primitive(tested_via=solve_banded)
def banded_matmul(t, y, l=1, u=1):  # noqa: E741
    return K.banded_matmul(t, y, l, u)


def _banded_check(l_and_u, ab, b, overwrite_ab=False, overwrite_b=False, check_finite=True):
    if l_and_u is RUNTIME or not (isinstance(l_and_u, tuple) and len(l_and_u) == 2):
        return ("scipy.linalg.solve_banded: (l, u) must be a pair of ints known before the function runs",
                "pass the band widths as constants")
    return None


@define(sla.solve_banded, check=_banded_check)
def _solve_banded(l_and_u, ab, b, overwrite_ab=False, overwrite_b=False, check_finite=True):
    l, u = l_and_u  # noqa: E741
    return solve_banded(ab, b, l, u)
