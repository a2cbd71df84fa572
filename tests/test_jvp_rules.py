"""Registry-driven: every primitive's JVP line (``t[y] = ...``) against central differences.

The line is run directly (:func:`funcgrad.ops.registry.evaluate_jvp`), so a rule is checked
independently of the forward pass that fills it in. The directional derivative of the
primitive's forward along random tangents of its differentiable inputs must match
``(f(x + eps v) - f(x - eps v)) / (2 eps)``; each input alone and all together.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from funcgrad.ops.registry import evaluate_jvp, registry
from tests.support import drawn_cases

REG = registry()
WITH_JVP = sorted(n for n, p in REG.items() if p.sample is not None and p.template is not None
                  and p.template.jvp_body is not None)


def _float_like(v):
    return isinstance(v, float) or (isinstance(v, np.ndarray) and v.dtype.kind == "f")


def _perturb(value, tangent, eps):
    if isinstance(value, tuple):
        return tuple(_perturb(a, b, eps) for a, b in zip(value, tangent))
    return value + eps * tangent if isinstance(value, np.ndarray) else float(value + eps * tangent)


def _tangent(value, rng):
    if isinstance(value, (tuple, list)):
        return tuple(_tangent(v, rng) for v in value)
    return rng.standard_normal(np.shape(value)) if isinstance(value, np.ndarray) else float(rng.standard_normal())


@pytest.mark.parametrize("name", WITH_JVP)
@settings(max_examples=drawn_cases(12, 8), deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_jvp_line_matches_finite_differences(name, data):
    prim = REG[name]
    args, kwargs = data.draw(st.composite(lambda draw: prim.sample(draw, np.float64))())
    ba = prim.signature.bind(*args, **kwargs)
    diff = [p for p in prim.template.diff_params if p in ba.arguments and (
        _float_like(ba.arguments[p]) or (isinstance(ba.arguments[p], (tuple, list)) and ba.arguments[p]
                                          and all(_float_like(v) for v in ba.arguments[p])))]
    if not diff:
        return
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31 - 1)))
    eps = 1e-6
    for chosen in [[p] for p in diff] + ([diff] if len(diff) > 1 else []):
        tans = {p: _tangent(ba.arguments[p], rng) for p in chosen}
        got = evaluate_jvp(prim, ba.args, ba.kwargs, tans)

        def at(sign):
            b2 = prim.signature.bind(*args, **kwargs)
            for p in chosen:
                b2.arguments[p] = _perturb(b2.arguments[p], tans[p], sign * eps)
            return np.asarray(prim.impl(*b2.args, **b2.kwargs), dtype=np.float64)

        want = (at(1) - at(-1)) / (2 * eps)
        y = prim.impl(*args, **kwargs)
        assert np.shape(got) == np.shape(y), f"{name}: tangent shape {np.shape(got)} != result shape {np.shape(y)}"
        np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=1e-5, atol=1e-6,
                                   err_msg=f"{name}: JVP along {chosen} vs central differences")
