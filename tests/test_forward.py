"""Forward mode: ``jvp`` against central differences, for every primitive and for real programs.

Every primitive with a JVP line (registry-driven, as tests/test_primitives.py does for VJPs), and
the loop/branch catalogue of tests/fixtures/loop_programs.py, in Python mode and compiled whole
(njit), compared with ``(f(x + eps v) - f(x - eps v)) / (2 eps)`` along random tangents.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import funcgrad
from funcgrad.ops.registry import registry
from funcgrad.testing import primitive_function
from fixtures.loop_programs import CATALOGUE

REG = registry()
WITH_JVP = sorted(n for n, p in REG.items() if p.sample is not None and p.template is not None
                  and p.template.jvp_body is not None)
# primitives declared in these modules (a defvjp forward lives in the registry; its template in the module)
CORE = {n for n, p in REG.items() if p.template is not None
        and p.template.globals.get("__name__") in ("funcgrad.ops.core", "funcgrad.ops.tangents")}


def _tangent(x, rng):
    return rng.standard_normal(np.shape(x)) if isinstance(x, np.ndarray) else float(rng.standard_normal())


def _fd(f, args, nums, tans, eps=1e-6):
    plus = list(args)
    minus = list(args)
    for i, v in zip(nums, tans):
        plus[i] = args[i] + eps * v
        minus[i] = args[i] - eps * v
    return (np.asarray(f(*plus), dtype=float) - np.asarray(f(*minus), dtype=float)) / (2 * eps)


def _check(f, args, nums, mode, seed=0, rtol=1e-5, atol=1e-6):
    rng = np.random.default_rng(seed)
    tans = [_tangent(args[i], rng) for i in nums]
    full = [(_tangent(a, rng) * 0 if isinstance(a, (float, np.ndarray)) and np.asarray(a).dtype.kind == "f" else None)
            for a in args]
    for i, v in zip(nums, tans):
        full[i] = v
    primals = tuple(args)
    tangents = tuple(full[i] if full[i] is not None else 0 for i in range(len(args)))
    y, ty = funcgrad.jvp(f, primals, tangents, mode=mode)
    np.testing.assert_allclose(np.asarray(y, dtype=float), np.asarray(f(*args), dtype=float), rtol=1e-12, atol=1e-12)
    assert np.shape(ty) == np.shape(y)
    np.testing.assert_allclose(np.asarray(ty, dtype=float), _fd(f, args, nums, tans), rtol=rtol, atol=atol)


# through funcgrad.jvp (a transform per example): make test-sweep only (tests/conftest.py); make test checks each
# JVP line against central differences (tests/test_jvp_rules.py) and the core primitives' JVPs through
# funcgrad.jvp, compiled against Python (below)
@pytest.mark.parametrize("name", WITH_JVP)
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_jvp_of_every_primitive(name, data):
    prim = REG[name]
    args, kwargs = data.draw(st.composite(lambda draw: prim.sample(draw, np.float64))())
    f, values, diff = primitive_function(prim, args, kwargs)
    if not diff:
        return
    _check(f, values, diff, "python", seed=data.draw(st.integers(0, 2**31 - 1)))


@pytest.mark.parametrize("name", sorted(set(WITH_JVP) & CORE))
@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data())
def test_jvp_compiled_equals_python(name, data):
    prim = REG[name]
    args, kwargs = data.draw(st.composite(lambda draw: prim.sample(draw, np.float64))())
    args = tuple(float(a) if isinstance(a, np.ndarray) and a.ndim == 0 and a.dtype.kind == "f" else a for a in args)
    f, values, diff = primitive_function(prim, args, kwargs)
    if not diff:
        return
    rng = np.random.default_rng(0)
    tangents = tuple(_tangent(v, rng) if i in diff else (np.zeros_like(v) if isinstance(v, np.ndarray) and
                                                         v.dtype.kind == "f" else 0.0) for i, v in enumerate(values))
    y_py, t_py = funcgrad.jvp(f, tuple(values), tangents, jit=False)
    y_nb, t_nb = funcgrad.jvp(f, tuple(values), tangents, mode="njit")
    np.testing.assert_allclose(np.asarray(y_nb, dtype=float), np.asarray(y_py, dtype=float), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(t_nb, dtype=float), np.asarray(t_py, dtype=float), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["python", "auto"])
@pytest.mark.parametrize("case", CATALOGUE, ids=[c[0].__name__ for c in CATALOGUE])
def test_jvp_of_loop_programs(case, mode):
    f, args, nums = case
    _check(f, args, (nums,) if isinstance(nums, int) else nums, mode)


# ------------------------------------------------------------------ parameters the call binds itself
def _with_defaults(x, s=2.0, *, k=3):
    return np.sum(np.sin(x) * s * k)


def _with_kwargs(x, **kw):
    return np.sum(np.sin(x) ** 2) * kw.get("scale", 1.0)


def _with_varargs(x, *rest, **kw):
    return np.sum(np.sin(x) * len(rest))


@pytest.mark.parametrize("mode", ["auto", "python"])
def test_forward_mode_binds_defaults_and_kwargs(mode):
    # f(*primals) binds defaults, keyword-only parameters and an empty **kwargs; forward mode and the
    # second order did not ("name 's' is not defined" at the user's line)
    x = np.array([0.1, 0.2, 0.7])
    v = np.array([0.3, -1.0, 0.5])
    y, t = funcgrad.jvp(_with_defaults, (x,), (v,), mode=mode)
    assert y == pytest.approx(_with_defaults(x)) and t == pytest.approx(np.sum(6.0 * np.cos(x) * v))
    y, t = funcgrad.jvp(_with_defaults, (x, 1.5), (v, 2.0), mode=mode)
    assert t == pytest.approx(np.sum(4.5 * np.cos(x) * v) + 2.0 * 3 * np.sum(np.sin(x)))
    _, t = funcgrad.jvp(_with_kwargs, (x,), (v,), mode=mode)
    assert t == pytest.approx(np.sum(np.sin(2 * x) * v))
    _, t = funcgrad.jvp(_with_varargs, (x, 1, 2), (v, 0, 0), mode=mode)
    assert t == pytest.approx(2 * np.sum(np.cos(x) * v))
    np.testing.assert_allclose(funcgrad.jacfwd(_with_defaults, mode=mode)(x), 6.0 * np.cos(x))
    np.testing.assert_allclose(funcgrad.hessian(_with_defaults, mode=mode)(x), np.diag(-6.0 * np.sin(x)))
    np.testing.assert_allclose(funcgrad.hessian(_with_kwargs, mode=mode)(x), np.diag(2 * np.cos(2 * x)))
    np.testing.assert_allclose(funcgrad.hvp(_with_kwargs, (x,), (v,), mode=mode), 2 * np.cos(2 * x) * v)
