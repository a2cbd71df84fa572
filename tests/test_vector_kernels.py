"""The straight-line kernels compiled for one vector (kernels/cpu_shape.py: ``cross``, ``cross_dx``, ``cross_dy``
of two 1-d float arrays; kernels/cpu.py: ``sum``/``mean``/``max``/``min``/``prod`` of a 1-d float array to one
number) compute what the general kernels and NumPy compute: the same numbers, the same dtype, the same
refusals. They exist for compile time (a loop over small vectors, as in bundle adjustment, compiles each
kernel into its gradient); a gradient through them is checked against central differences."""
import warnings

import numpy as np
import pytest
from numba import njit

import funcgrad
from funcgrad.kernels import cpu as K
from funcgrad.kernels import cpu_shape as S
from tests.support import assert_value_and_gradient


@njit
def _cross(a, b):
    return S.cross(a, b)


@njit
def _cross_dx(g, a, b):
    return S.cross_dx(g, a, b, -1, -1, -1, None)


@njit
def _cross_dy(g, a, b):
    return S.cross_dy(g, a, b, -1, -1, -1, None)


DTYPES = [(np.float64, np.float64), (np.float32, np.float32), (np.float32, np.float64)]


@pytest.mark.parametrize("dta,dtb", DTYPES, ids=lambda t: t.__name__)
def test_cross_of_two_vectors_is_numpys(dta, dtb):
    rs = np.random.RandomState(0)
    for na, nb in ((3, 3), (2, 3), (3, 2)):
        a, b = rs.randn(na).astype(dta), rs.randn(nb).astype(dtb)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)   # NumPy 2 deprecates 2-vectors
            want = np.cross(a, b)
        got = _cross(a, b)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
        g = rs.randn(3).astype(want.dtype)
        for compiled, python in ((_cross_dx, S.cross_dx), (_cross_dy, S.cross_dy)):
            got, want = compiled(g, a, b), python(g, a, b)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-6)


def test_cross_of_vectors_refuses_what_numpy_refuses():
    with pytest.raises(ValueError, match="dimension must be 2 or 3"):
        _cross(np.ones(4), np.ones(3))
    with pytest.raises(ValueError, match="2-vectors"):
        _cross(np.ones(2), np.ones(2))
    with pytest.raises(ValueError, match="cotangent"):
        _cross_dx(np.ones(2), np.ones(3), np.ones(3))


def _reductions():
    return {op: (njit(lambda x, f=getattr(K, op): f(x)), njit(lambda x, f=getattr(K, op): f(x, None, True)))
            for op in ("sum", "mean", "max", "min", "prod")}


def test_vector_reductions_add_as_the_general_kernel_adds():
    """The vector's loop against the general kernel's (keepdims=True takes it): bit for bit, NaN included."""
    rs = np.random.RandomState(1)
    red = _reductions()
    for dt in (np.float64, np.float32):
        for n in (1, 3, 17):
            x = rs.randn(n).astype(dt)
            if n == 3:
                x[1] = np.nan
            for op, (vector, general) in red.items():
                got, kept = vector(x), general(x)
                np.testing.assert_array_equal(np.asarray(got), kept.reshape(()))
                np.testing.assert_allclose(got, getattr(np, op)(x), rtol=1e-5)


def _bundle_like(cam, X):
    """Rotate by a Rodrigues vector and sum squares: cross, dot and vector sums in a loop."""
    total = 0.0
    for i in range(X.shape[0]):
        theta = np.sqrt(np.sum(cam ** 2))
        w = cam / theta
        p = X[i] * np.cos(theta) + np.cross(w, X[i]) * np.sin(theta) + w * np.dot(w, X[i]) * (1 - np.cos(theta))
        total = total + np.sum(p[:2] / p[2]) + np.max(p) * np.mean(p)
    return total


@pytest.mark.parametrize("jit", ["whole", False])
def test_gradient_through_vector_kernels(jit):
    rs = np.random.RandomState(2)
    args = (0.3 * rs.randn(3), rs.randn(4, 3) + np.array([0.0, 0.0, 5.0]))
    assert_value_and_gradient(_bundle_like, args, (0, 1), jit=jit)
    if jit == "whole":   # the compiled gradient is the Python one
        got = funcgrad.grad(_bundle_like, argnums=(0, 1), jit="whole")(*args)
        want = funcgrad.grad(_bundle_like, argnums=(0, 1), jit=False)(*args)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


@njit
def _dot(a, b):   # in an array: a float32 result keeps its dtype out of nopython code
    return np.full(1, K.dot(a, b))


@njit
def _unbroadcast(g, x):
    return K.unbroadcast(g, x)


@njit
def _zeros_like(x):
    return K.zeros_like(x)


@pytest.mark.parametrize("dt", [np.float64, np.float32], ids=lambda t: t.__name__)
def test_dot_of_short_vectors_is_numpys(dt):
    """Vectors up to K._DOT_LOOP_MAX long take a loop, longer ones BLAS: both NumPy's value and dtype, and a
    length mismatch is refused as NumPy refuses it."""
    rs = np.random.RandomState(1)
    for n in (1, 3, K._DOT_LOOP_MAX, K._DOT_LOOP_MAX + 1, 40):
        a, b = rs.randn(n).astype(dt), rs.randn(n).astype(dt)
        got, want = _dot(a, b), np.dot(a, b)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got[0], want, rtol=1e-5 if dt is np.float32 else 1e-14)
        np.testing.assert_allclose(_dot(a[::-1], b)[0], np.dot(a[::-1], b), rtol=1e-5 if dt is np.float32 else 1e-14)
    with pytest.raises(ValueError):
        _dot(np.ones(3, dt), np.ones(4, dt))


def test_unbroadcast_of_same_shape_is_the_cotangent_itself_and_zeros_like_is_numpys():
    """Compiled as in Python: a cotangent already of x's shape comes back as it is (no copy); a strided one is
    made contiguous with the same values; zeros_like has x's shape and dtype."""
    g, x = np.arange(3.0), np.ones(3)
    assert np.shares_memory(_unbroadcast(g, x), g)   # (a compiled result is a new ndarray object)
    assert K.unbroadcast(g, x) is g
    gs = np.arange(6.0)[::2]
    np.testing.assert_array_equal(_unbroadcast(gs, x), gs)
    np.testing.assert_array_equal(_unbroadcast(np.ones((2, 3)), x), [2.0, 2.0, 2.0])
    for a in (np.ones((2, 3), np.float32), np.ones(4), np.asfortranarray(np.ones((3, 2)))):
        z = _zeros_like(a)
        assert z.shape == a.shape and z.dtype == a.dtype and not z.any()
