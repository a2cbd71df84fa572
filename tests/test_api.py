"""The public transforms: grad, value_and_grad, vjp, jit, custom_vjp, stop_gradient, source."""
import numpy as np
import pytest

import funcgrad
from funcgrad.transform.pipeline import STATS
from funcgrad.testing import check_grads
from tests.fixtures import models as M


def _mlp_data(dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    params = {"W1": rng.normal(size=(4, 5)), "b1": rng.normal(size=5),
              "W2": rng.normal(size=(5, 3)), "b2": rng.normal(size=3)}
    x = rng.normal(size=(6, 4))
    y = np.eye(3)[rng.integers(0, 3, 6)]
    cast = lambda a: a.astype(dtype)  # noqa: E731
    return {k: cast(v) for k, v in params.items()}, cast(x), cast(y)


def test_mlp_gradient_matches_finite_differences_and_keeps_structure():
    params, x, y = _mlp_data()
    g = funcgrad.grad(M.mlp_loss)(params, x, y)
    assert isinstance(g, dict) and set(g) == set(params)
    for k in params:
        assert g[k].shape == params[k].shape and g[k].dtype == np.float64
    check_grads(M.mlp_loss, (params, x, y))


def test_mlp_source_is_readable_python():
    params, x, y = _mlp_data()
    gf = funcgrad.grad(M.mlp_loss)
    gf(params, x, y)
    src = funcgrad.source(gf)
    compile(src, "<generated>", "exec")
    assert "def mlp_loss_vjp(params_W1, params_W2, params_b1, params_b2, x, y, g_out0):" in src
    assert "h = K.tanh(_t2)" in src
    assert "_t1 = x @ params_W1" in src
    assert "d_params_W1 = K.matmul_dy(d_t1, x, params_W1)" in src
    assert "# h = K.tanh(_t2)" in src  # adjoint lines name the primal statement they undo


def test_second_call_compiles_nothing_and_float32_specializes():
    params, x, y = _mlp_data()
    gf = funcgrad.grad(M.mlp_loss)
    before = STATS["builds"]
    gf(params, x, y)
    assert STATS["builds"] == before + 1
    gf(*_mlp_data(seed=1))  # same signature, other values
    assert STATS["builds"] == before + 1 and gf.specializations == 1
    p32, x32, y32 = _mlp_data(np.float32)
    g32 = gf(p32, x32, y32)
    assert STATS["builds"] == before + 2 and gf.specializations == 2
    assert all(v.dtype == np.float32 for v in g32.values())
    g64 = gf(params, x, y)
    for k in params:
        np.testing.assert_allclose(g32[k], g64[k], rtol=2e-3, atol=2e-4)


def test_captured_globals_and_closures_update_without_recompiling():
    x = np.array([1.0, 2.0, 3.0])
    gf = funcgrad.value_and_grad(M.uses_globals)
    v, g = gf(x)
    assert v == pytest.approx(np.sum(2.0 * x + M.BIAS))
    np.testing.assert_allclose(g, 2.0)
    before = STATS["builds"]
    old_scale, old_bias = M.SCALE, M.BIAS
    try:
        M.SCALE = 5.0
        M.BIAS = np.array([1.0, 1.0, 1.0])
        v, g = gf(x)
        assert v == pytest.approx(np.sum(5.0 * x + 1.0))
        np.testing.assert_allclose(g, 5.0)
        assert STATS["builds"] == before
    finally:
        M.SCALE, M.BIAS = old_scale, old_bias

    data = np.array([1.0, -2.0])
    lam = funcgrad.grad(lambda w: np.sum((w * data) ** 2))
    np.testing.assert_allclose(lam(np.array([0.5, 0.25])), 2 * np.array([0.5, 0.25]) * data ** 2)
    data[:] = [3.0, 1.0]  # a captured array that changes takes effect at the next call
    np.testing.assert_allclose(lam(np.array([0.5, 0.25])), 2 * np.array([0.5, 0.25]) * data ** 2)


def test_lambda_closing_over_data_like_training_code():
    params, x, y = _mlp_data()
    g = funcgrad.grad(lambda p: M.mlp_loss(p, x, y))(params)
    g_ref = funcgrad.grad(M.mlp_loss)(params, x, y)
    for k in params:
        np.testing.assert_allclose(g[k], g_ref[k], rtol=1e-12)


def test_primitive_handed_over_directly():
    x = np.linspace(-1, 1, 5)
    out, f = funcgrad.vjp(np.sin, x)
    np.testing.assert_allclose(f(np.ones(5))[0], np.cos(x))
    assert funcgrad.grad(np.tanh)(0.3) == pytest.approx(1 - np.tanh(0.3) ** 2)


@pytest.mark.parametrize("fn,args,argnums", [
    (M.methods, (np.arange(6.0).reshape(3, 2) / 7, np.linspace(-1, 1, 6).reshape(3, 2)), (0, 1)),
    (M.helpers, ([(np.linspace(-1, 1, 6).reshape(2, 3), np.array([0.1, -0.2, 0.3])),
                  (np.linspace(1, -1, 9).reshape(3, 3), np.array([0.2, 0.1, 0.05]))], np.array([[0.3, -0.7]])), 0),
    (M.namedtuple_fn, (M.State(np.array([0.2, 0.4]), 1.5), np.array([1.0, 2.0])), (0, 1)),
    (M.indexing, (np.linspace(-1, 1, 12).reshape(4, 3),), 0),
    (M.inplace, (np.array([0.3, -0.2, 0.9, 1.1]),), 0),
    (M.where_clip, (np.array([0.3, -0.2, 0.9, -1.1, 0.1]),), 0),
    (M.nested_def, (np.array([0.3, -0.2]), 0.7), (0, 1)),
    (M.concat_stack, (np.array([0.3, -0.2]), np.array([1.5, 0.5])), (0, 1)),
    (M.helper_defaults, (np.array([0.3, -0.7, 0.2]),), 0),
])
def test_supported_constructs_match_finite_differences(fn, args, argnums):
    # (whole-function njit of each primitive is covered by test_primitives; of control flow and
    # in-place writes by test_loops: here the default path for array code)
    check_grads(fn, args, argnums=argnums)


def test_structures_of_results():
    x = np.array([1.0, 2.0])
    (v, aux), g = funcgrad.value_and_grad(M.with_aux, has_aux=True)(x)
    assert v == pytest.approx(5.0) and aux["n"] == 2 and aux["norm"] == pytest.approx(np.sqrt(5.0))
    np.testing.assert_allclose(g, 2 * x)
    g2, aux2 = funcgrad.grad(M.with_aux, has_aux=True)(x)
    np.testing.assert_allclose(g2, 2 * x)
    gs = funcgrad.grad(M.nested_def, argnums=(0, 1))(x, 0.5)
    assert isinstance(gs, tuple) and len(gs) == 2 and isinstance(gs[1], float)


def test_stop_gradient():
    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(funcgrad.grad(M.stopped)(x), x)


def test_custom_vjp_is_used():
    @funcgrad.custom_vjp
    def clipped_identity(x):
        return x

    clipped_identity.defvjp(lambda x: (x, None), lambda res, g: (np.clip(g, -1.0, 1.0),))

    def loss(x):
        return np.sum(clipped_identity(x) * 10.0)

    np.testing.assert_allclose(funcgrad.grad(loss)(np.ones(3)), np.ones(3))


def test_jit_compiles_without_differentiating():
    from tests.fixtures.loop_programs import horner
    c = np.array([0.5, -1.0, 2.0])
    f = funcgrad.jit(horner)  # whole-function numba.njit
    assert f(c, 0.7) == pytest.approx(horner(c, 0.7), rel=1e-14)
    assert list(f.cache.values())[0].mode == "njit" and "def horner(" in funcgrad.source(f)
    params, x, y = _mlp_data()
    g = funcgrad.jit(M.mlp_loss, mode="python")
    assert g(params, x, y) == pytest.approx(M.mlp_loss(params, x, y), rel=1e-12)


def test_disable_jit_env_runs_same_source(monkeypatch):
    params, x, y = _mlp_data()
    g1 = funcgrad.grad(M.mlp_loss, mode="python")(params, x, y)
    monkeypatch.setenv("FUNCGRAD_DISABLE_JIT", "1")
    gf = funcgrad.grad(M.mlp_loss)
    g2 = gf(params, x, y)
    assert list(gf.cache.values())[0].mode == "nojit"
    for k in params:
        np.testing.assert_allclose(g1[k], g2[k], rtol=1e-12, atol=1e-14)


def test_jit_accepts_the_strategies_own_names():
    """jit="njit"/"python" mean what mode= does ("whole"/"kernels" are the documented spellings)."""
    from tests.fixtures.loop_programs import horner
    c = np.array([0.5, -1.0, 2.0])
    for jit, mode in (("njit", "njit"), ("python", "python"), ("whole", "njit"), ("kernels", "python")):
        g = funcgrad.grad(horner, jit=jit)
        np.testing.assert_allclose(g(c, 0.7), [1.0, 0.7, 0.49], rtol=1e-12)
        assert list(g.cache.values())[0].mode == mode
    with pytest.raises(ValueError, match="jit must be one of"):
        funcgrad.grad(horner, jit="fast")
