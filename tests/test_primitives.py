"""Registry-driven property tests: every primitive's VJP against finite differences.

The list of primitives comes from the registry itself, so a new primitive is
tested by this file without touching it; a primitive without a sample spec
(or a primitive that another primitive's VJP exercises) fails the first test.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import funcgrad
from funcgrad.ops.registry import registry
from funcgrad.testing import numerical_vjp, primitive_function
from tests.support import drawn_cases

REG = registry()
TESTED = sorted(n for n, p in REG.items() if p.sample is not None)


def test_every_primitive_has_a_sample_and_a_rule():
    for name, p in REG.items():
        assert p.sample is not None or p.tested_via is not None, f"primitive {name} has no sample spec"
        if p.tested_via is not None:
            assert REG[funcgrad.ops.registry.lookup(p.tested_via).name].sample is not None
        assert p.template is not None or p.tested_via is not None, f"primitive {name} has no VJP template"


def _draw_case(data, prim):
    args, kwargs = data.draw(st.builds(lambda: None).flatmap(
        lambda _: st.composite(lambda draw: prim.sample(draw, np.float64))()))
    return args, kwargs


# Outputs packing eigenvectors below a row of eigenvalues: LAPACK picks each vector's sign (phase) afresh at
# every input, and may flip it between x - eps and x + eps, where central differences then see a jump of
# ~1/eps. The VJP is the derivative at LAPACK's choice at x, so the differenced outputs are aligned to it.
_EIGENVECTOR_ROWS = {"eig_packed", "eigh_packed"}


def _aligned_to(base, f):
    def g(*args):
        p = np.array(f(*args))
        v, b = p[..., 1:, :], base[..., 1:, :]
        ip = np.sum(np.conj(b) * v, axis=-2, keepdims=True)
        p[..., 1:, :] = v * (np.conj(ip) / np.maximum(np.abs(ip), 1e-300))
        return p
    return g


def _cotangent(out, rng):
    if np.shape(out) == ():
        return float(rng.standard_normal())
    return rng.standard_normal(np.shape(out))


@pytest.mark.parametrize("name", TESTED)
# 6 drawn cases per primitive in make test (kept within its 15 minutes: each new shape or dtype compiles the
# kernels again), 15 in make test-sweep
@settings(max_examples=drawn_cases(15, 6), deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_vjp_matches_finite_differences(name, data):
    prim = REG[name]
    args, kwargs = _draw_case(data, prim)
    f, values, diff = primitive_function(prim, args, kwargs)
    if not diff:
        return
    out, vjp_fn = funcgrad.vjp(f, *values, argnums=diff, mode="python")
    expected = f(*values)
    np.testing.assert_allclose(np.asarray(out, dtype=float), np.asarray(expected, dtype=float), rtol=1e-12, atol=1e-12)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31 - 1)))
    ct = _cotangent(out, rng)
    got = vjp_fn(ct)
    fd = _aligned_to(np.asarray(out), f) if name in _EIGENVECTOR_ROWS else f
    for k, i in enumerate(diff):
        want = numerical_vjp(fd, values, i, ct, 1e-6)
        np.testing.assert_allclose(np.asarray(got[k], dtype=float), want, rtol=1e-5, atol=1e-6,
                                   err_msg=f"{name}: VJP of argument {i} vs central differences")


CORE = {n for n, p in REG.items() if p.impl.__module__ == "funcgrad.ops.core"}


@pytest.mark.parametrize("name", TESTED)
@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data())
def test_compiled_equals_python(name, data):
    """The same generated source, compiled, equals its pure-Python run (jit=False).

    NumPy primitives (the ones loop code uses) are compiled whole with numba.njit; the
    NN primitives run their @njit kernels from Python (how CNN code runs) against the
    kernels' uncompiled Python.
    """
    prim = REG[name]
    mode = "njit" if name in CORE else "python"
    args, kwargs = _draw_case(data, prim)
    # nopython code takes scalars as scalars: 0-d arrays are passed as floats
    args = tuple(float(a) if isinstance(a, np.ndarray) and a.ndim == 0 and a.dtype.kind == "f" else a for a in args)
    f, values, diff = primitive_function(prim, args, kwargs)
    if not diff:
        return
    rng = np.random.default_rng(0)
    out_py, vjp_py = funcgrad.vjp(f, *values, argnums=diff, jit=False)
    out_nb, vjp_nb = funcgrad.vjp(f, *values, argnums=diff, mode=mode)
    np.testing.assert_allclose(np.asarray(out_nb, dtype=float), np.asarray(out_py, dtype=float), rtol=1e-12, atol=1e-12)
    ct = _cotangent(out_py, rng)
    for a, b in zip(vjp_nb(ct), vjp_py(ct)):
        np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=1e-12, atol=1e-12,
                                   err_msg=f"{name}: compiled vs pure-Python cotangent")


# ------------------------------------------------------- the kernels' Python fast paths
# (ndarrays go straight to ufunc.reduce; unreduce writes small results out instead of
# returning a broadcast view): the same values, dtypes and shapes as the NumPy calls they replace
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32, np.int64, np.bool_])
@pytest.mark.parametrize("op", ["sum", "max", "min", "prod"])
def test_reduction_fast_path_matches_numpy(op, dtype):
    from funcgrad.kernels import cpu as K
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, 4, 5)) * 3).astype(dtype)
    npfn = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}[op]
    for axis in (None, 0, 1, -1, (0, 2)):
        for keepdims in (False, True):
            got = getattr(K, op)(x, axis=axis, keepdims=keepdims)
            want = npfn(x, axis=axis, keepdims=keepdims)
            assert np.asarray(got).dtype == np.asarray(want).dtype, (op, dtype, axis, keepdims)
            assert np.shape(got) == np.shape(want)
            assert np.array_equal(got, want)
    assert getattr(K, op)(2.5) == npfn(2.5)                 # a Python scalar takes NumPy's path


@pytest.mark.parametrize("shape,axis,keepdims", [((4, 3), 1, False), ((4, 3), 1, True),
                                                  ((4, 3), None, False), ((2, 3, 4), (0, 2), False),
                                                  ((300, 200), 0, True)])   # the last: a broadcast view
def test_unreduce_matches_broadcast(shape, axis, keepdims):
    from funcgrad.kernels import cpu as K
    x = np.zeros(shape)
    g = np.arange(np.prod(np.sum(x, axis=axis, keepdims=keepdims).shape), dtype=np.float32)
    g = g.reshape(np.sum(x, axis=axis, keepdims=keepdims).shape)
    got = K.unreduce(g, x, axis, keepdims)
    g_kd = g if keepdims or axis is None else np.expand_dims(g, axis)
    want = np.broadcast_to(g_kd, shape)
    assert got.shape == shape and got.dtype == np.float32 and np.array_equal(got, want)
    for s in (np.float32(1.5), 2.0):                          # scalar cotangents keep their dtype
        r = K.unreduce(s, x, None, False)
        assert r.shape == shape and r.dtype == np.asarray(s).dtype and np.all(r == s)


def test_unbroadcast_sums_broadcast_axes():
    from funcgrad.kernels import cpu as K
    g = np.arange(24.0).reshape(2, 3, 4)
    assert K.unbroadcast(g, np.zeros((3, 4))).shape == (3, 4)
    assert np.array_equal(K.unbroadcast(g, np.zeros((3, 4))), g.sum(0))
    assert np.array_equal(K.unbroadcast(g, np.zeros((3, 1))), g.sum((0, 2)).reshape(3, 1))
    assert K.unbroadcast(g, np.zeros((2, 3, 4))) is g
    assert K.unbroadcast(g, 1.0) == g.sum()


def test_every_primitive_has_a_kernel_in_every_backend():
    from funcgrad.kernels.base import backends
    from funcgrad.ops.registry import registry
    prims = registry()
    assert len(prims) > 50
    from funcgrad.kernels.base import Backend
    for b in backends().values():
        for compiled in (True, False):
            K = b.namespace(compiled)
            missing = sorted(name for name in prims if not hasattr(K, name))
            if type(b).supports is not Backend.supports:
                # a backend covering part of the primitives (the GPU's) says which, and the build refuses the
                # others at the user's line (tests/test_cuda.py): what it claims must be there
                assert not [n for n in missing if b.supports(n)], b.name
                assert [n for n in prims if b.supports(n)], b.name
                continue
            assert not missing, f"backend {b.name} (compiled={compiled}) lacks kernels for {missing}"
