"""Sample specs of the linear-algebra primitives (``ops/linalg.py``): matrices the property tests draw.

Each factory returns ``sample(draw, dtype) -> (args, kwargs)`` like those of
:mod:`.samples`. Matrices are built away from the points where a derivative
does not exist or finite differences lose their accuracy: square matrices are
diagonally dominant, symmetric ones have well separated eigenvalues (and junk
in the triangle LAPACK does not read, which must get a zero derivative), SVD
and QR inputs have singular values in [1, 4], eig inputs a real, separated
spectrum. Stacks of matrices (a batch of 0 to 2 leading axes) are drawn too.
"""
from __future__ import annotations

import numpy as np

from . import samples as S


def _rng(draw, st):
    return np.random.default_rng(draw(st.integers(0, 2**31 - 1)))


def _batch(draw, st, max_dims=2):
    return tuple(draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, max_dims))))


def _mT(x):
    return np.swapaxes(x, -1, -2)


def dominant(rng, shape):
    """Diagonally dominant square matrices (well conditioned)."""
    n = shape[-1]
    return rng.uniform(-0.9, 0.9, shape) + (n + 0.5) * np.eye(n)


def orthogonal(rng, shape):
    q, r = np.linalg.qr(rng.standard_normal(shape))
    return q * np.sign(np.diagonal(r, axis1=-2, axis2=-1))[..., None, :]


def symmetric(rng, shape, junk=True, lo=None):
    """Symmetric matrices with eigenvalues 1.2 apart; ``junk``: random values in the upper triangle
    (read by nothing when the lower triangle is used)."""
    n = shape[-1]
    q = orthogonal(rng, shape)
    w = (lo if lo is not None else -1.5) + 1.2 * np.arange(n) + rng.uniform(-0.2, 0.2, shape[:-1])
    a = (q * w[..., None, :]) @ _mT(q)
    if junk:
        a = a + np.triu(rng.uniform(-1, 1, shape), 1)
    return a


def spd(rng, shape, junk=True):
    return symmetric(rng, shape, junk, lo=1.0)


def with_singular_values(rng, batch, m, n):
    k = min(m, n)
    u = orthogonal(rng, batch + (m, m))[..., :k]
    v = orthogonal(rng, batch + (n, n))[..., :k]
    s = 1.0 + 0.75 * np.arange(k)[::-1] + rng.uniform(-0.1, 0.1, batch + (k,))
    return (u * s[..., None, :]) @ _mT(v)


def real_spectrum(rng, shape):
    n = shape[-1]
    v = np.eye(n) + 0.3 * rng.uniform(-1, 1, shape)
    w = -1.0 + 1.1 * np.arange(n) + rng.uniform(-0.2, 0.2, shape[:-1])
    return (v * w[..., None, :]) @ np.linalg.inv(v)


def _cast(x, dt):
    return np.asarray(x, dtype=dt)


def square(kind="dominant", extra=None):
    """One square matrix (or a stack) of ``kind``; ``extra(draw, st) -> kwargs`` adds static arguments."""
    makers = {"dominant": dominant, "symmetric": symmetric, "spd": spd, "real_spectrum": real_spectrum}

    def fn(draw, dt, st, array, shapes):
        rng = _rng(draw, st)
        n = draw(st.integers(1, 4))
        a = makers[kind](rng, _batch(draw, st) + (n, n))
        kw = extra(draw, st) if extra else {}
        if kind in ("symmetric", "spd") and (kw.get("UPLO") == "U" or kw.get("upper") is True
                                             or kw.get("lower") is False):
            a = _mT(a)     # the upper triangle is read: the junk goes to the lower one
        return (_cast(a, dt),), kw
    return S.custom(fn)


def rectangular(extra=None, square_only=None):
    """One (m, n) matrix or a stack with singular values in [1, 4]; ``square_only(kwargs)``: m == n."""
    def fn(draw, dt, st, array, shapes):
        rng = _rng(draw, st)
        kw = extra(draw, st) if extra else {}
        m = draw(st.integers(1, 4))
        n = m if square_only and square_only(kw) else draw(st.integers(1, 4))
        return (_cast(with_singular_values(rng, _batch(draw, st), m, n), dt),), kw
    return S.custom(fn)


def _rhs(draw, st, rng, n, batch, dt):
    kind = draw(st.sampled_from(["vector", "matrix", "batched"]))
    if kind == "vector":
        return _cast(rng.uniform(-2, 2, (n,)), dt)
    k = draw(st.integers(1, 3))
    return _cast(rng.uniform(-2, 2, (batch if kind == "batched" else ()) + (n, k)), dt)


def linear_system(make=dominant):
    """``(a, b)``: a square (stack) and a right-hand side: a vector, a matrix or a stack."""
    def fn(draw, dt, st, array, shapes):
        rng = _rng(draw, st)
        n = draw(st.integers(1, 4))
        batch = _batch(draw, st)
        return (_cast(make(rng, batch + (n, n)), dt), _rhs(draw, st, rng, n, batch, dt)), {}
    return S.custom(fn)


def triangular_system(draw, dt, st, array, shapes):
    rng = _rng(draw, st)
    n = draw(st.integers(1, 4))
    batch = _batch(draw, st)
    a = rng.uniform(-1, 1, batch + (n, n)) + 3 * np.eye(n)
    kw = {"trans": draw(st.sampled_from([0, 1])), "lower": draw(st.booleans()),
          "unit_diagonal": draw(st.booleans())}
    return (_cast(a, dt), _rhs(draw, st, rng, n, batch, dt)), kw


def cho_system(draw, dt, st, array, shapes):
    rng = _rng(draw, st)
    n = draw(st.integers(1, 4))
    batch = _batch(draw, st)
    lower = draw(st.booleans())
    c = np.linalg.cholesky(spd(rng, batch + (n, n), junk=False), upper=not lower)
    c = c + (np.triu(rng.uniform(-1, 1, c.shape), 1) if lower else np.tril(rng.uniform(-1, 1, c.shape), -1))
    return (_cast(c, dt), _rhs(draw, st, rng, n, batch, dt)), {"lower": lower}


def banded_system(draw, dt, st, array, shapes):
    rng = _rng(draw, st)
    n = draw(st.integers(1, 5))
    lo, up = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    ab = rng.uniform(-1, 1, (lo + up + 1, n))
    ab[up] += 2 * (lo + up) + 1.5          # the diagonal dominates
    b = rng.uniform(-2, 2, (n,) if draw(st.booleans()) else (n, draw(st.integers(1, 3))))
    return (_cast(ab, dt), _cast(b, dt)), {"l": lo, "u": up}


def _norm_case(draw, st):
    """(shape, ord, axis, keepdims) NumPy accepts, every form of ``ord`` and ``axis``."""
    kind = draw(st.sampled_from(["flat", "vector1d", "matrix2d", "vector_axis", "matrix_axes"]))
    vec_ords = [None, 1, 2, 3, -1, -2, 0.5, 0]     # inf and -inf: in tests/test_linalg.py (no literal for the registry
    mat_ords = [None, "fro", "nuc", 1, -1, 2, -2]   # test's generated source)
    side = lambda: draw(st.integers(1, 4))           # noqa: E731
    if kind == "flat":
        return tuple(side() for _ in range(draw(st.integers(1, 3)))), None, None
    if kind == "vector1d":
        return (side(),), draw(st.sampled_from(vec_ords)), None
    if kind == "matrix2d":
        return (side(), side()), draw(st.sampled_from(mat_ords)), None
    shape = tuple(side() for _ in range(draw(st.integers(2, 3))))
    nd = len(shape)
    if kind == "vector_axis":
        return shape, draw(st.sampled_from(vec_ords)), draw(st.integers(-nd, nd - 1))
    r, c = draw(st.permutations(range(nd)))[:2]
    return shape, draw(st.sampled_from(mat_ords)), (r - nd if draw(st.booleans()) else r, c)


def norm(draw, dt, st, array, shapes):
    shape, ord_, axis = _norm_case(draw, st)
    x = array(draw, shape, dt, "real", distinct=True)
    x = np.asarray(x, dtype=dt)
    x = np.where(np.abs(x) < 0.05, 0.3, x).astype(dt)   # no element at the kink of |x|
    return (x,), {"ord": ord_, "axis": axis, "keepdims": draw(st.booleans())}


def matrix_power(draw, dt, st, array, shapes):
    rng = _rng(draw, st)
    n = draw(st.integers(1, 3))
    a = rng.uniform(-0.4, 0.4, _batch(draw, st) + (n, n)) + np.eye(n)
    return (_cast(a, dt), draw(st.integers(-3, 4))), {}


def small_square(draw, dt, st, array, shapes):
    rng = _rng(draw, st)
    n = draw(st.integers(1, 4))
    return (_cast(rng.uniform(-0.7, 0.7, _batch(draw, st) + (n, n)), dt),), {}


def triangle_pair(adjoint=False):
    def fn(draw, dt, st, array, shapes):
        rng = _rng(draw, st)
        n = draw(st.integers(1, 4))
        return (_cast(rng.uniform(-2, 2, _batch(draw, st) + (n, n)), dt),), {"lower": draw(st.booleans())}
    return S.custom(fn)
