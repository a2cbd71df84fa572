"""np.interp inside differentiated functions (a definition over primitives, funcgrad/ops/numpy_math.py): NumPy's
values in every mode (knots, the ends, left/right, a repeated knot, one knot), gradients in x, xp and fp against
central differences, forward mode, and period= refused at the user's line."""
import numpy as np
import pytest

import funcgrad

MODES = ["auto", "whole", False]
RNG = np.random.default_rng(11)
XP = np.sort(RNG.uniform(0, 10, 6))
FP = RNG.standard_normal(6)
X = np.concatenate([RNG.uniform(-1, 11, 9), XP[[0, 3, 5]]])   # inside, outside, and on knots


def interp(x, xp, fp):
    return np.interp(x, xp, fp)


def interp_lr(x, xp, fp, lo, hi):
    return np.interp(x, xp, fp, left=lo, right=hi)


def knots_as_lists(x):
    return np.sum(np.interp(x, [-1.0, 0.0, 1.0], [0.0, 0.5, 2.0]) ** 2)


def loss(x, xp, fp):
    return np.sum(np.sin(np.interp(x, xp, fp)) ** 2)


def central(fun, args, k, eps=1e-6):
    a = [np.array(v, dtype=float) for v in args]
    out = np.zeros_like(a[k])
    for idx in np.ndindex(a[k].shape):
        up = [v.copy() for v in a]
        dn = [v.copy() for v in a]
        up[k][idx] += eps
        dn[k][idx] -= eps
        out[idx] = (fun(*up) - fun(*dn)) / (2 * eps)
    return out


@pytest.mark.parametrize("jit", MODES, ids=str)
def test_values_are_numpys(jit):
    cases = [(X, XP, FP), (2.5, XP, FP), (XP[-1], XP, FP), (X, np.array([1.0, 2.0, 2.0, 3.0]), np.array([0.0, 1.0, 5.0, 2.0])),
             (X, np.array([4.0]), np.array([7.0])), (X.astype(np.float32), XP.astype(np.float32), FP.astype(np.float32))]
    for x, xp, fp in cases:
        got = funcgrad.jvp(interp, (x, xp, fp), (np.zeros_like(x) if np.ndim(x) else 0.0, np.zeros_like(xp),
                                                 np.zeros_like(fp)), jit=jit)[0]
        np.testing.assert_allclose(got, np.interp(x, xp, fp), rtol=1e-6 if np.asarray(x).dtype == np.float32 else 1e-13)
    v, g = funcgrad.value_and_grad(knots_as_lists, jit=jit)(X)   # (knots and values written as lists)
    np.testing.assert_allclose(v, knots_as_lists(X), rtol=1e-13)
    inside = (X > -1.0) & (X < 1.0)
    np.testing.assert_allclose(g[inside], 2 * np.interp(X, [-1.0, 0.0, 1.0], [0.0, 0.5, 2.0])[inside] *
                               np.where(X[inside] < 0, 0.5, 1.5), rtol=1e-12)
    got = funcgrad.value_and_grad(lambda x: np.sum(interp_lr(x, XP, FP, -1.5, 2.5)), jit=jit)(X)[0]
    np.testing.assert_allclose(got, np.sum(np.interp(X, XP, FP, left=-1.5, right=2.5)), rtol=1e-13)


@pytest.mark.parametrize("jit", MODES, ids=str)
def test_gradients_in_x_xp_fp_match_central_differences(jit):
    off = X[:9]   # (off the knots: central differences straddle a kink there)
    gx, gxp, gfp = funcgrad.grad(loss, argnums=(0, 1, 2), jit=jit)(off, XP, FP)
    np.testing.assert_allclose(gx, central(loss, (off, XP, FP), 0), rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(gxp, central(loss, (off, XP, FP), 1), rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(gfp, central(loss, (off, XP, FP), 2), rtol=1e-5, atol=1e-8)
    outside = np.array([-3.0, 12.0])   # beyond the ends: constant in x, the end values move with fp
    np.testing.assert_allclose(funcgrad.grad(loss, jit=jit)(outside, XP, FP), [0.0, 0.0])
    g_lr = funcgrad.grad(lambda lo, hi: np.sum(interp_lr(outside, XP, FP, lo, hi) ** 2), argnums=(0, 1), jit=jit)(-1.5, 2.5)
    np.testing.assert_allclose(g_lr, [-3.0, 5.0])


@pytest.mark.parametrize("jit", MODES, ids=str)
def test_forward_mode_matches_reverse(jit):
    off = X[:9]
    v = (RNG.standard_normal(off.shape), RNG.standard_normal(XP.shape), RNG.standard_normal(FP.shape))
    _, tan = funcgrad.jvp(loss, (off, XP, FP), v, jit=jit)
    g = funcgrad.grad(loss, argnums=(0, 1, 2), jit=jit)(off, XP, FP)
    np.testing.assert_allclose(tan, sum(np.sum(a * b) for a, b in zip(g, v)), rtol=1e-10)


def test_period_is_refused_at_the_users_line():
    def periodic(x):
        return np.sum(np.interp(x, XP, FP, period=10.0))
    with pytest.raises(funcgrad.FuncgradError, match="period") as e:
        funcgrad.grad(periodic)(X)
    assert "test_interp.py" in str(e.value)
