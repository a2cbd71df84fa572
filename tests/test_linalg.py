"""numpy.linalg and scipy.linalg as users call them (issue 14), in every mode.

Each function is differentiated inside a user function, the way autograd's
tests/test_linalg.py calls it (unpacking ``w, v = np.linalg.eigh(a)``,
indexing ``np.linalg.slogdet(a)[1]``, stacked matrices, every ``ord`` and
``axis`` of ``norm``...). Values must equal NumPy's / SciPy's, and VJPs central
differences in float64, under ``jit=False`` (plain Python), ``jit="kernels"``
(Python over compiled kernels) and ``jit="whole"`` (the whole function compiled
by Numba) where Numba can run the function; SciPy's routines that Numba cannot
compile (sqrtm, expm, solve_banded) must make ``jit="auto"`` run Python and
``jit="whole"`` refuse at the user's line. Forms whose derivative does not
exist are refused with a clear message. autograd, when installed, is an extra
oracle.
"""
import warnings

import numpy as np
import pytest
import scipy.linalg as sla

import funcgrad
from funcgrad.errors import CompileError, FuncgradWarning, UnsupportedSyntaxError
from funcgrad.testing import check_grads
from tests.support import SWEEP

rng = np.random.default_rng(0)
T = np.linalg.matrix_transpose


def randn(*shape):
    return rng.standard_normal(shape)


def rand_psd(n, batch=()):
    m = rng.standard_normal(batch + (n, n))
    return m @ T(m) + n * np.eye(n)


def sym_separated(n, batch=()):
    """Symmetric, eigenvalues well apart (finite differences of eigenvectors stay accurate)."""
    q, _ = np.linalg.qr(rng.standard_normal(batch + (n, n)))
    w = np.arange(n) * 1.3 - 2 + rng.uniform(-0.2, 0.2, batch + (n,))
    return (q * w[..., None, :]) @ T(q)


def with_sv(m, n, batch=()):
    """Singular values 1 .. 4, well apart."""
    u, _ = np.linalg.qr(rng.standard_normal(batch + (m, m)))
    v, _ = np.linalg.qr(rng.standard_normal(batch + (n, n)))
    k = min(m, n)
    return (u[..., :k] * (1 + 0.8 * np.arange(k)[::-1])) @ T(v[..., :k])


def symmetrize(a):
    """autograd's tests' convention: a function of the lower triangle, made symmetric."""
    lo = np.tril(a)
    return (lo + T(lo)) / 2.0


PY_MODES = [False, "kernels"]
# Each whole-function compile of a linear-algebra gradient takes seconds: make test checks the rules compiled
# through the registry grid (tests/test_primitives.py) and leaves these to make test-sweep (FUNCGRAD_SWEEP=1).
ALL_MODES = PY_MODES + (["whole"] if SWEEP else [])


def check(fn, args, modes, argnums=0, rtol=1e-5, atol=1e-6):
    """Values equal to the plain call; VJPs equal to central differences in every mode."""
    want = fn(*args)
    for jit in modes:
        out, _ = funcgrad.vjp(fn, *args, argnums=argnums, jit=jit)
        for a, b in zip(_leaves(out), _leaves(want)):
            np.testing.assert_allclose(np.asarray(a, float), np.asarray(b, float), rtol=1e-10, atol=1e-12,
                                       err_msg=f"value, jit={jit!r}")
        check_grads(fn, args, argnums=argnums, jit=jit, rtol=rtol, atol=atol)


def _leaves(x):
    if isinstance(x, (tuple, list)):
        return [y for v in x for y in _leaves(v)]
    return [x]


# ------------------------------------------------------------------ inverses, determinants, solves
def inv_fn(x):
    return np.linalg.inv(x)


@pytest.mark.parametrize("shape", [(4, 4), (3, 4, 4), (2, 2, 3, 3)])
def test_inv(shape):
    a = randn(*shape) + 4 * np.eye(shape[-1])
    check(inv_fn, (a,), ALL_MODES if len(shape) < 4 else PY_MODES)


def det_fn(x):
    s, logdet = np.linalg.slogdet(x)
    r = np.linalg.slogdet(x)
    return np.linalg.det(x), logdet * s, r[1], r.logabsdet, np.linalg.slogdet(-x)[1]


@pytest.mark.parametrize("shape", [(4, 4), (3, 3, 3)])
def test_det_and_slogdet(shape):
    check(det_fn, (randn(*shape) + 2 * np.eye(shape[-1]),), ALL_MODES)


def solve_fn(a, b):
    return np.linalg.solve(a, b)


@pytest.mark.parametrize("ash,bsh", [((4, 4), (4,)), ((4, 4), (4, 3)), ((3, 4, 4), (4,)), ((3, 4, 4), (3, 4, 2)),
                                     ((3, 4, 4), (4, 2)), ((4, 4), (2, 4, 3)), ((2, 1, 4, 4), (3, 4, 2))])
def test_solve(ash, bsh):
    a = randn(*ash) + 5 * np.eye(4)
    b = randn(*bsh)
    modes = ALL_MODES if len(ash) + len(bsh) <= 6 else PY_MODES
    check(solve_fn, (a, b), modes, argnums=(0, 1))


def pinv_fn(x):
    return np.linalg.pinv(x), np.linalg.pinv(x, rcond=1e-10), np.linalg.pinv(x, rtol=None)


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4), (2, 5, 3)])
def test_pinv(shape):
    check(pinv_fn, (with_sv(shape[-2], shape[-1], shape[:-2]),), ALL_MODES)


def test_pinv_low_rank_and_hermitian():
    # autograd: pinv(x^T x) of rank n < m, perturbed at constant rank
    for shape in [(3, 5), (2, 3, 5)]:
        check(lambda x: np.linalg.pinv(T(x) @ x), (with_sv(*shape[-2:], shape[:-2]),), PY_MODES)
    a = sym_separated(4) + 3 + np.triu(randn(4, 4), 1)   # junk above the diagonal: not read
    check(lambda x: np.linalg.pinv(x, hermitian=True), (a,), ALL_MODES)


def test_matrix_power():
    a = randn(3, 3) * 0.3 + np.eye(3)
    for n in (-2, -1, 0, 1, 3):
        def power(x):
            return np.linalg.matrix_power(x, n)
        check(power, (a,), PY_MODES)
    check(lambda x: np.linalg.matrix_power(x, 3) + np.linalg.matrix_power(x, -2), (a,), ["whole"])
    check(lambda x: np.linalg.matrix_power(x, 2), (randn(2, 3, 3) * 0.3 + np.eye(3),), ALL_MODES)


# ------------------------------------------------------------------ cholesky, eigh, eig
def chol_fn(a):
    return np.linalg.cholesky(a), np.linalg.cholesky(a, upper=True)


@pytest.mark.parametrize("batch", [(), (3,)])
def test_cholesky_reads_one_triangle(batch):
    # the true derivative of what LAPACK reads (any input, no symmetrization needed)
    a = rand_psd(4, batch)
    check(lambda x: np.linalg.cholesky(x), (a + np.triu(randn(*a.shape), 1) * 0.1,), ALL_MODES)
    check(lambda x: np.linalg.cholesky(x, upper=True), (a + np.tril(randn(*a.shape), -1) * 0.1,), ALL_MODES)
    check(lambda x: chol_fn(symmetrize(x)), (a,), PY_MODES)      # autograd's symmetrized form


def test_cholesky_reparameterization_trick():
    z = randn(6)

    def fun(a):
        return np.linalg.norm(np.dot(np.linalg.cholesky(a), z))

    check(lambda a: fun(symmetrize(a)), (rand_psd(6),), ALL_MODES)


def eigh_fn(a):
    w, v = np.linalg.eigh(a)
    return w, v


def eigh_forms(a):
    r = np.linalg.eigh(a)
    return r[0], np.abs(r.eigenvectors[:, 1]), np.sum(np.linalg.eigvalsh(a) ** 2)


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_eigh(batch):
    a = sym_separated(4, batch) + np.triu(randn(*(batch + (4, 4))), 1)
    check(eigh_fn, (a,), ALL_MODES)
    check(lambda x: np.linalg.eigh(x, "U"), (T(a),), PY_MODES)
    check(lambda x: eigh_fn(symmetrize(x)), (a,), PY_MODES)
    if not batch:
        check(eigh_forms, (a,), ALL_MODES)


def test_eigh_eigenvalues_only_with_repeated_eigenvalues():
    # no eigenvector cotangent: the eigenvector term is skipped, so a degenerate spectrum stays finite
    g = funcgrad.grad(lambda a: np.sum(np.linalg.eigh(a)[0] ** 2))(np.eye(3))
    np.testing.assert_allclose(g, 2 * np.eye(3))


def test_eigh_upper_in_compiled_code_is_refused():
    with pytest.raises(CompileError, match="eigh") as e:
        funcgrad.grad(lambda a: np.sum(np.linalg.eigh(a, UPLO="U")[0]), jit="whole")(sym_separated(3))
    assert e.value.filename == __file__


def eig_fn(a):
    w, v = np.linalg.eig(a)
    return w, v, np.linalg.eigvals(a)


@pytest.mark.parametrize("batch", [(), (3,)])
def test_eig_real_spectrum(batch):
    v = np.eye(4) + 0.3 * randn(*(batch + (4, 4)))
    a = (v * (np.arange(4) * 1.1 - 1)) @ np.linalg.inv(v)
    check(eig_fn, (a,), ALL_MODES)


def test_eig_complex_spectrum_of_a_real_matrix():
    # complex eigenvalues, as NumPy returns them; a real function of them has a real gradient
    a = np.array([[0.3, -1.0], [1.2, 0.1]])
    f = lambda x: np.sum(np.abs(np.linalg.eig(x)[0]) ** 2 + np.real(np.linalg.eig(x)[0]))  # noqa: E731
    g = funcgrad.grad(f, jit=False)(a)
    assert not np.iscomplexobj(g)
    eps = 1e-6
    num = np.array([(f(a + eps * e.reshape(2, 2)) - f(a - eps * e.reshape(2, 2))) / (2 * eps) for e in np.eye(4)])
    np.testing.assert_allclose(g.reshape(-1), num, rtol=1e-6, atol=1e-8)


# ------------------------------------------------------------------ svd, qr
def svd_fn(a):
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return u, s, vh


def svd_s(a):
    return np.linalg.svd(a, compute_uv=False), np.linalg.svdvals(a)


@pytest.mark.parametrize("shape", [(3, 5), (4, 4), (5, 3), (4, 3, 5), (3, 4, 4), (4, 5, 3)])
def test_svd(shape):
    a = with_sv(shape[-2], shape[-1], shape[:-2])
    modes = ALL_MODES if len(shape) == 2 else PY_MODES
    check(svd_fn, (a,), modes)
    check(svd_s, (a,), modes)


def test_svd_full_matrices():
    a = with_sv(4, 4)
    check(lambda x: np.linalg.svd(x), (a,), ALL_MODES)                       # square: full == reduced
    tall = with_sv(5, 3)
    # non-square: the extra singular vectors are not unique; using the leading ones is fine
    check(lambda x: (np.linalg.svd(x)[0][:, :3], np.linalg.svd(x).S), (tall,), PY_MODES)
    with pytest.raises(ValueError, match="full_matrices=False"):
        funcgrad.grad(lambda x: np.sum(np.linalg.svd(x)[0] ** 3), jit=False)(tall)


def test_svd_hermitian():
    a = sym_separated(4) + np.triu(randn(4, 4), 1)
    check(lambda x: np.linalg.svd(x, hermitian=True), (a,), ALL_MODES)


def qr_fn(a):
    q, r = np.linalg.qr(a)
    return q, r, np.linalg.qr(a, mode="r")


@pytest.mark.parametrize("shape", [(5, 3), (4, 4), (3, 5), (2, 5, 3), (2, 3, 5)])
def test_qr(shape):
    check(qr_fn, (with_sv(shape[-2], shape[-1], shape[:-2]),), ALL_MODES if len(shape) == 2 else PY_MODES)


def test_qr_complete_and_raw():
    check(lambda a: np.linalg.qr(a, mode="complete"), (with_sv(3, 5),), PY_MODES)
    with pytest.raises(UnsupportedSyntaxError, match="mode='raw'") as e:
        funcgrad.grad(lambda a: np.sum(np.linalg.qr(a, mode="raw")[0]))(with_sv(3, 3))
    assert e.value.filename == __file__


# ------------------------------------------------------------------ norm
VECTOR_ORDS = [None, 1, 2, 3, 0.5, -1, -2, np.inf, -np.inf, 0]
MATRIX_ORDS = [None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf]


def _distinct(shape):
    x = rng.permutation(np.arange(1, np.prod(shape) + 1)).reshape(shape) / np.prod(shape) + 0.1
    return x * np.where(rng.random(shape) < 0.5, -1, 1)


@pytest.mark.parametrize("ord", VECTOR_ORDS)
def test_vector_norms(ord):
    x = _distinct((6,))
    check(lambda v: np.linalg.norm(v, ord=ord), (x,), PY_MODES)
    x3 = _distinct((3, 4, 5))
    for axis in (0, 1, -1):
        for keepdims in (False, True):
            check(lambda v: np.linalg.norm(v, ord, axis, keepdims), (x3,), PY_MODES)


@pytest.mark.parametrize("ord", MATRIX_ORDS)
def test_matrix_norms(ord):
    x = with_sv(4, 3) + 0.01 * _distinct((4, 3))
    check(lambda m: np.linalg.norm(m, ord), (x,), PY_MODES)
    x3 = _distinct((3, 4, 5)) + 0.1 * with_sv(3, 4, (5,)).transpose(1, 2, 0)
    for axis in ((0, 1), (2, 0), (-1, 1)):
        for keepdims in (False, True):
            check(lambda m: np.linalg.norm(m, ord, axis, keepdims), (x3,), PY_MODES)


def test_norm_forms():
    x = _distinct((3, 4))
    check(lambda m: np.linalg.norm(m) + np.linalg.norm(m, axis=(0, 1)) + np.linalg.matrix_norm(m, ord=1)
          + np.sum(np.linalg.vector_norm(m, axis=1, ord=3)) + np.linalg.vector_norm(m), (x,), PY_MODES)
    # autograd's test_norm_list_of_boxes: a list of differentiated scalars
    assert funcgrad.grad(lambda v: np.linalg.norm([v, v + 2]))(0.0) == pytest.approx(1.0)


def norm_many(x, m, x3):
    return (np.linalg.norm(x), np.linalg.norm(x, 1), np.linalg.norm(x, np.inf), np.linalg.norm(x, -np.inf),
            np.linalg.norm(x, 3), np.linalg.norm(m), np.linalg.norm(m, "nuc"), np.linalg.norm(m, 2),
            np.linalg.norm(m, -1), np.linalg.norm(m, np.inf), np.linalg.norm(x3, axis=1),
            np.linalg.norm(x3, 0.5, axis=-1, keepdims=True), np.linalg.norm(x3, "fro", axis=(2, 0)),
            np.linalg.norm(x3, -2, axis=(0, 1), keepdims=True), np.linalg.norm(x3, np.inf, axis=(1, 2)))


def test_norms_compiled():
    args = (_distinct((6,)), with_sv(4, 3) + 0.01 * _distinct((4, 3)), _distinct((3, 4, 5)))
    check(norm_many, args, ["whole"], argnums=(0, 1, 2))


# ------------------------------------------------------------------ scipy.linalg
def tri_fn(a, b):
    return (sla.solve_triangular(a, b, lower=True), sla.solve_triangular(a, b, trans="T"),
            sla.solve_triangular(a, b, trans=1, lower=True, unit_diagonal=True),
            sla.solve_triangular(a, b, trans="N", lower=False, check_finite=False))


@pytest.mark.parametrize("ash,bsh", [((4, 4), (4,)), ((4, 4), (4, 2)), ((3, 4, 4), (4,)), ((3, 4, 4), (3, 4, 2))])
def test_solve_triangular(ash, bsh):
    a = randn(*ash) + 3 * np.eye(4)
    check(tri_fn, (a, randn(*bsh)), ALL_MODES if len(ash) == 2 else PY_MODES, argnums=(0, 1))


def cho_fn(a, b):
    c = sla.cholesky(a, lower=True)
    cu = sla.cholesky(a)
    return c, cu, sla.cho_solve((c, True), b), sla.cho_solve(sla.cho_factor(a), b), sla.cho_factor(a, lower=True)[0]


@pytest.mark.parametrize("bsh", [(4,), (4, 3)])
def test_scipy_cholesky_and_cho_solve(bsh):
    check(cho_fn, (rand_psd(4), randn(*bsh)), ALL_MODES, argnums=(0, 1))
    check(lambda a, b: sla.cho_solve((np.linalg.cholesky(a), True), b), (rand_psd(4, (3,)), randn(*bsh)),
          PY_MODES, argnums=(0, 1))


def sp_aliases(a, b):
    return (sla.det(a), sla.inv(a), sla.solve(a, b), sla.solve(a, b, transposed=True),
            sla.solve(a, b, assume_a="pos"), sla.solve(a, b, assume_a="sym", lower=True),
            sla.solve(a, b, assume_a="lower triangular"))


def test_scipy_aliases():
    a = rand_psd(4) + np.triu(randn(4, 4), 1) * 0.1
    check(sp_aliases, (a, randn(4, 2)), ALL_MODES, argnums=(0, 1), rtol=1e-5)


def test_sqrtm_expm_solve_banded():
    s = rand_psd(3)
    check(lambda a: sla.sqrtm(a), (s,), PY_MODES)
    check(lambda a: sla.sqrtm(symmetrize(a)), (s,), PY_MODES)                 # autograd's form
    check(lambda a: sla.expm(a), (randn(3, 3) * 0.5,), PY_MODES)
    check(lambda a: sla.expm(a), (randn(2, 3, 3) * 0.5,), PY_MODES)
    ab = randn(3, 5)
    ab[1] += 4
    for b in (randn(5), randn(5, 2)):
        check(lambda ab_, b_: sla.solve_banded((1, 1), ab_, b_), (ab, b), PY_MODES, argnums=(0, 1))
    ab2 = randn(4, 6)
    ab2[2] += 5
    check(lambda ab_, b_: sla.solve_banded((1, 2), ab_, b_), (ab2, randn(6)), PY_MODES, argnums=(0, 1))


LO, UP = 1, 1   # band widths a program keeps as globals, written as a tuple at the call


def banded_loss(ab, b):
    return np.sum(sla.solve_banded((LO, UP), ab, b) ** 2)


def test_solve_banded_band_widths_from_global_names_and_their_change():
    # (LO, UP) of two global ints was refused as "not known before the function runs"
    global LO
    ab, b = randn(3, 6), randn(6)
    ab[1] += 5
    check(banded_loss, (ab, b), PY_MODES, argnums=(0, 1))
    g1 = funcgrad.grad(banded_loss)(ab, b)
    LO = 2          # the widths change: the code is rebuilt for them
    try:
        ab2 = randn(4, 6)
        ab2[2] += 5
        check(banded_loss, (ab2, b), PY_MODES, argnums=(0, 1))
        assert funcgrad.grad(banded_loss)(ab2, b).shape == (4, 6) and g1.shape == (3, 6)
    finally:
        LO = 1


def expm_loop(a, n):
    s = 0.0
    for i in range(n):
        s = s + np.sum(sla.expm(a * (i + 1)))
    return s


def test_python_only_kernels_steer_auto_and_refuse_whole():
    a = randn(3, 3) * 0.2
    with warnings.catch_warnings():
        warnings.simplefilter("error", FuncgradWarning)       # auto picks Python at once: no fallback warning
        g = funcgrad.grad(expm_loop)(a, 3)
    np.testing.assert_allclose(g, funcgrad.grad(expm_loop, jit=False)(a, 3), rtol=1e-12)
    with pytest.raises(CompileError, match="expm has no nopython implementation") as e:
        funcgrad.grad(expm_loop, jit="whole")(a, 3)
    assert e.value.filename == __file__


def inv_loop(a, n):
    s = 0.0
    for i in range(n):
        x = np.linalg.solve(a + i * np.eye(3), np.ones(3))
        s = s + np.linalg.norm(x) + np.linalg.det(a) * 0.1
    return s


def test_loops_with_linalg_compile_whole():
    a = randn(3, 3) + 3 * np.eye(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FuncgradWarning)
        g = funcgrad.grad(inv_loop)(a, 4)
    check_grads(inv_loop, (a, 4), jit="whole")
    np.testing.assert_allclose(g, funcgrad.grad(inv_loop, jit=False)(a, 4), rtol=1e-10)


def test_runtime_error_names_the_users_line():
    def f(a):
        return np.sum(np.linalg.inv(a))
    with pytest.raises(np.linalg.LinAlgError) as e:
        funcgrad.grad(f, jit="kernels")(np.zeros((2, 2)))
    notes = "\n".join(getattr(e.value, "__notes__", []))
    assert __file__ in notes and "ops/linalg.py" not in notes


def bad_uplo(x):
    return np.sum(np.linalg.eigh(x, UPLO="X")[0])


def bad_keyword(x):
    return np.sum(np.linalg.eigh(x, uplo="L")[0])


def both_tolerances(x):
    return np.sum(np.linalg.pinv(x, rcond=1e-3, rtol=1e-3))


@pytest.mark.parametrize("fn,match", [(bad_uplo, "UPLO"), (bad_keyword, "bad arguments to eigh"),
                                      (both_tolerances, "can't be both set")])
def test_bad_arguments_are_refused_at_the_users_line(fn, match):
    with pytest.raises(UnsupportedSyntaxError, match=match) as e:
        funcgrad.grad(fn)(sym_separated(3))
    assert e.value.filename == __file__ and e.value.lineno == fn.__code__.co_firstlineno + 1


def test_static_flags_computed_at_run_time_are_refused():
    def f(x, flag):
        return np.sum(np.linalg.svd(x, full_matrices=flag > 0)[1])
    with pytest.raises(UnsupportedSyntaxError, match="known before the function runs"):
        funcgrad.grad(f)(with_sv(3, 3), 1.0)


def test_results_keep_numpys_named_tuples():
    a = sym_separated(3)
    out, _ = funcgrad.vjp(lambda x: np.linalg.eigh(x), a)
    assert type(out) is type(np.linalg.eigh(a)) and np.allclose(out.eigenvalues, np.linalg.eigh(a).eigenvalues)


# ------------------------------------------------------------------ autograd as an oracle
def test_agrees_with_autograd():
    ag = pytest.importorskip("autograd", reason="autograd not installed")
    anp = pytest.importorskip("autograd.numpy")
    a = with_sv(4, 4)
    s = rand_psd(4)

    def build(np_):
        def f1(x):
            return np_.sum(np_.linalg.inv(x) ** 2)

        def f2(x):
            return np_.linalg.slogdet(x)[1] + np_.linalg.det(x)

        def f3(x):
            return np_.sum(np_.linalg.svd(x, full_matrices=False)[1] ** 3)

        def f4(x):
            return np_.linalg.norm(x, "nuc") + np_.linalg.norm(x)

        def f5(x):
            return np_.sum(np_.linalg.pinv(x[:, :3]) ** 2)
        return [f1, f2, f3, f4, f5]

    for fa, ff in zip(build(anp), build(np)):
        np.testing.assert_allclose(funcgrad.grad(ff)(a), ag.grad(fa)(a), rtol=1e-8, atol=1e-10)
    # symmetric conventions agree on symmetrized inputs (autograd's tests' form)
    def chol_ag(x):
        return anp.sum(anp.linalg.cholesky((anp.tril(x) + anp.tril(x).T) / 2) ** 2)

    def chol_fg(x):
        return np.sum(np.linalg.cholesky((np.tril(x) + np.tril(x).T) / 2) ** 2)

    def eigh_ag(x):
        return anp.sum(anp.linalg.eigh(x)[0] ** 3 + anp.linalg.eigh(x)[1][0] ** 2)

    def eigh_fg(x):
        return np.sum(np.linalg.eigh(x)[0] ** 3 + np.linalg.eigh(x)[1][0] ** 2)

    for fa, ff in [(chol_ag, chol_fg), (eigh_ag, eigh_fg)]:
        np.testing.assert_allclose(funcgrad.grad(ff)(s), ag.grad(fa)(s), rtol=1e-8, atol=1e-10)
