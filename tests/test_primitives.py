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


def _cotangent(out, rng):
    if np.shape(out) == ():
        return float(rng.standard_normal())
    return rng.standard_normal(np.shape(out))


@pytest.mark.parametrize("name", TESTED)
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
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
    for k, i in enumerate(diff):
        want = numerical_vjp(f, values, i, ct, 1e-6)
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
