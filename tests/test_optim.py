"""funcgrad.optim: PyTorch update rules over a 10-step trajectory, schedules, composition, errors.

The reference ``ref_*`` functions below re-implement the algorithms in the
PyTorch documentation pseudocode independently of funcgrad.optim; torch itself
is an additional oracle when installed.
"""
import math
from typing import NamedTuple

import numpy as np
import pytest

from funcgrad import optim
from funcgrad.errors import TreeStructureError
from funcgrad.tree import tree_leaves

STEPS = 10


def make_params(dtype=np.float64):
    rng = np.random.default_rng(0)
    return {"W": rng.normal(size=(3, 4)).astype(dtype), "b": rng.normal(size=(4,)).astype(dtype)}


def grad_fn(params, t):
    """Gradient of a loss depending on the params (so a wrong update changes later gradients)."""
    W, b = params["W"], params["b"]
    rng = np.random.default_rng(100 + t)
    x = rng.normal(size=(5, 3)).astype(W.dtype)
    y = rng.normal(size=(5, 4)).astype(W.dtype)
    r = x @ W + b - y                    # loss = 0.5 * sum(r^2) + 0.1*sum(W^3)
    return {"W": x.T @ r + 0.3 * W * W, "b": r.sum(0)}


def run_funcgrad(opt, params, steps=STEPS):
    state = opt.init(params)
    traj = []
    for t in range(steps):
        g = grad_fn(params, t)
        u, state = opt.update(g, state, params)
        params = optim.apply_updates(params, u)
        traj.append(params)
    return traj


# ---------------------------------------------------------------- independent references (per leaf, float64)

def run_ref(step_fn, params, steps=STEPS):
    """step_fn(p, g, st, t, key) -> (new_p, st) over each leaf; t is 1-based."""
    params = {k: v.astype(np.float64) for k, v in params.items()}
    states = {k: {} for k in params}
    traj = []
    for t in range(1, steps + 1):
        g = grad_fn(params, t - 1)
        params = {k: step_fn(params[k], g[k], states[k], t) for k in params}
        traj.append(params)
    return traj


def ref_sgd(lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
    def step(p, g, st, t):
        if weight_decay:
            g = g + weight_decay * p
        if momentum:
            if t > 1:
                st["b"] = momentum * st["b"] + (1 - dampening) * g
            else:
                st["b"] = g.copy()
            g = g + momentum * st["b"] if nesterov else st["b"]
        return p - lr * g
    return step


def ref_adam(lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0, decoupled=False, amsgrad=False):
    def step(p, g, st, t):
        if decoupled:
            p = p * (1 - lr * weight_decay)
        elif weight_decay:
            g = g + weight_decay * p
        st["m"] = b1 * st.get("m", 0) + (1 - b1) * g
        st["v"] = b2 * st.get("v", 0) + (1 - b2) * g * g
        mhat = st["m"] / (1 - b1 ** t)
        if amsgrad:
            st["vmax"] = np.maximum(st.get("vmax", 0), st["v"])
            vhat = st["vmax"] / (1 - b2 ** t)
        else:
            vhat = st["v"] / (1 - b2 ** t)
        return p - lr * mhat / (np.sqrt(vhat) + eps)
    return step


def ref_rmsprop(lr, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False):
    def step(p, g, st, t):
        if weight_decay:
            g = g + weight_decay * p
        st["v"] = alpha * st.get("v", 0) + (1 - alpha) * g * g
        vt = st["v"]
        if centered:
            st["g"] = alpha * st.get("g", 0) + (1 - alpha) * g
            vt = vt - st["g"] ** 2
        if momentum > 0:
            st["b"] = momentum * st.get("b", 0) + g / (np.sqrt(vt) + eps)
            return p - lr * st["b"]
        return p - lr * g / (np.sqrt(vt) + eps)
    return step


def ref_adagrad(lr, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10):
    def step(p, g, st, t):
        if weight_decay:
            g = g + weight_decay * p
        clr = lr / (1 + (t - 1) * lr_decay)
        st["s"] = st.get("s", initial_accumulator_value) + g * g
        return p - clr * g / (np.sqrt(st["s"]) + eps)
    return step


CASES = [
    ("sgd-plain", lambda: optim.sgd(0.05), ref_sgd(0.05), "SGD", dict(lr=0.05)),
    ("sgd-momentum", lambda: optim.sgd(0.05, momentum=0.9), ref_sgd(0.05, 0.9), "SGD", dict(lr=0.05, momentum=0.9)),
    ("sgd-dampening-l2", lambda: optim.sgd(0.05, momentum=0.8, dampening=0.3, weight_decay=0.1),
     ref_sgd(0.05, 0.8, 0.3, 0.1), "SGD", dict(lr=0.05, momentum=0.8, dampening=0.3, weight_decay=0.1)),
    ("sgd-nesterov-l2", lambda: optim.sgd(0.05, momentum=0.9, nesterov=True, weight_decay=0.05),
     ref_sgd(0.05, 0.9, 0, 0.05, True), "SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.05)),
    ("adam", lambda: optim.adam(0.05), ref_adam(0.05), "Adam", dict(lr=0.05)),
    ("adam-l2", lambda: optim.adam(0.05, b1=0.8, b2=0.99, eps=1e-6, weight_decay=0.2),
     ref_adam(0.05, 0.8, 0.99, 1e-6, 0.2), "Adam", dict(lr=0.05, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.2)),
    ("adam-amsgrad", lambda: optim.adam(0.05, amsgrad=True), ref_adam(0.05, amsgrad=True), "Adam",
     dict(lr=0.05, amsgrad=True)),
    ("adamw", lambda: optim.adamw(0.05, weight_decay=0.3), ref_adam(0.05, weight_decay=0.3, decoupled=True),
     "AdamW", dict(lr=0.05, weight_decay=0.3)),
    ("rmsprop", lambda: optim.rmsprop(0.01), ref_rmsprop(0.01), "RMSprop", dict(lr=0.01)),
    ("rmsprop-centered-momentum-l2", lambda: optim.rmsprop(0.01, alpha=0.9, momentum=0.7, centered=True,
                                                           weight_decay=0.1),
     ref_rmsprop(0.01, 0.9, 1e-8, 0.1, 0.7, True), "RMSprop",
     dict(lr=0.01, alpha=0.9, momentum=0.7, centered=True, weight_decay=0.1)),
    ("adagrad", lambda: optim.adagrad(0.1, lr_decay=0.05, weight_decay=0.1, initial_accumulator_value=0.2),
     ref_adagrad(0.1, 0.05, 0.1, 0.2), "Adagrad",
     dict(lr=0.1, lr_decay=0.05, weight_decay=0.1, initial_accumulator_value=0.2)),
]


@pytest.mark.parametrize("name,make,ref,_tname,_tkw", CASES, ids=[c[0] for c in CASES])
def test_matches_reference_trajectory(name, make, ref, _tname, _tkw):
    p0 = make_params()
    ours = run_funcgrad(make(), p0)
    theirs = run_ref(ref, p0)
    for t, (a, b) in enumerate(zip(ours, theirs)):
        for k in a:
            np.testing.assert_allclose(a[k], b[k], rtol=1e-12, atol=1e-12, err_msg=f"{name} step {t + 1} {k}")
    # the trajectory actually moved
    assert not np.allclose(ours[-1]["W"], p0["W"])


@pytest.mark.parametrize("name,make,ref,tname,tkw", CASES, ids=[c[0] for c in CASES])
def test_matches_torch(name, make, ref, tname, tkw):
    torch = pytest.importorskip("torch")
    p0 = make_params()
    ours = run_funcgrad(make(), p0)
    tp = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in sorted(p0.items())}
    topt = getattr(torch.optim, tname)(list(tp.values()), foreach=False, **tkw)
    for t in range(STEPS):
        g = grad_fn({k: v.detach().numpy() for k, v in tp.items()}, t)
        for k, v in tp.items():
            v.grad = torch.tensor(g[k])
        topt.step()
        for k in tp:
            np.testing.assert_allclose(ours[t][k], tp[k].detach().numpy(), rtol=1e-10, atol=1e-12,
                                       err_msg=f"{name} step {t + 1} {k}")


def test_torch_schedule_matches_steplr():
    torch = pytest.importorskip("torch")
    p0 = make_params()
    ours = run_funcgrad(optim.sgd(optim.step_decay(0.1, 3, 0.5), momentum=0.9), p0)
    tp = [torch.tensor(p0[k], requires_grad=True) for k in sorted(p0)]
    topt = torch.optim.SGD(tp, lr=0.1, momentum=0.9, foreach=False)
    sch = torch.optim.lr_scheduler.StepLR(topt, 3, 0.5)
    for t in range(STEPS):
        g = grad_fn({k: v.detach().numpy() for k, v in zip(sorted(p0), tp)}, t)
        for k, v in zip(sorted(p0), tp):
            v.grad = torch.tensor(g[k])
        topt.step()
        sch.step()
        for k, v in zip(sorted(p0), tp):
            np.testing.assert_allclose(ours[t][k], v.detach().numpy(), rtol=1e-10, atol=1e-12)


def test_float32_params_stay_float32_and_close_to_float64():
    p32 = make_params(np.float32)
    for make in (lambda: optim.sgd(0.05, momentum=0.9, nesterov=True), lambda: optim.adam(0.05),
                 lambda: optim.adamw(0.05), lambda: optim.rmsprop(0.01, centered=True, momentum=0.5),
                 lambda: optim.adagrad(0.1)):
        opt = make()
        state = opt.init(p32)
        g = grad_fn(p32, 0)
        g64 = {k: v.astype(np.float64) for k, v in g.items()}   # float64 grads must not upcast params
        u, state = opt.update(g64, state, p32)
        new = optim.apply_updates(p32, u)
        assert all(v.dtype == np.float32 for v in new.values())
        arrays = [v for v in tree_leaves(state) if isinstance(v, np.ndarray)]
        assert arrays and all(v.dtype == np.float32 for v in arrays)
        assert all(v.dtype == np.float32 for v in u.values())
    ours = run_funcgrad(optim.adam(0.05), p32)
    ref = run_funcgrad(optim.adam(0.05), make_params())
    np.testing.assert_allclose(ours[-1]["W"], ref[-1]["W"], rtol=1e-4, atol=1e-5)


def test_update_is_pure():
    p = make_params()
    opt = optim.adam(0.1)
    s0 = opt.init(p)
    g = grad_fn(p, 0)
    g_copy = {k: v.copy() for k, v in g.items()}
    u1, s1 = opt.update(g, s0, p)
    u2, s2 = opt.update(g, s1, p)
    assert s0.count == 0 and np.all(s0.mu["W"] == 0) and np.all(s0.nu["b"] == 0)
    u1b, _ = opt.update(g, s0, p)
    np.testing.assert_array_equal(u1["W"], u1b["W"])
    for k in g:
        np.testing.assert_array_equal(g[k], g_copy[k])
    assert s2.count == 2


# ---------------------------------------------------------------- the optimizers are chains of transforms

CHAINS = [
    ("sgd", lambda: optim.sgd(0.05, momentum=0.8, dampening=0.3, weight_decay=0.1),
     lambda: optim.chain(optim.add_decayed_weights(0.1), optim.trace(0.8, dampening=0.3),
                         optim.scale_by_learning_rate(0.05))),
    ("sgd-nesterov", lambda: optim.sgd(0.05, momentum=0.9, nesterov=True),
     lambda: optim.chain(optim.trace(0.9, nesterov=True), optim.scale_by_learning_rate(0.05))),
    ("adam", lambda: optim.adam(0.05, weight_decay=0.1, amsgrad=True),
     lambda: optim.chain(optim.add_decayed_weights(0.1), optim.scale_by_adam(amsgrad=True),
                         optim.scale_by_learning_rate(0.05))),
    ("adamw", lambda: optim.adamw(0.05, weight_decay=0.3),
     lambda: optim.chain(optim.scale_by_adam(), optim.add_decayed_weights(0.3), optim.scale_by_learning_rate(0.05))),
    ("rmsprop", lambda: optim.rmsprop(0.01, alpha=0.9, momentum=0.7, centered=True),
     lambda: optim.chain(optim.scale_by_rms(0.9, centered=True), optim.trace(0.7), optim.scale_by_learning_rate(0.01))),
    ("adagrad", lambda: optim.adagrad(0.1, lr_decay=0.05, initial_accumulator_value=0.2),
     lambda: optim.chain(optim.scale_by_rss(0.2),
                         optim.scale_by_learning_rate(lambda step: 0.1 / (1.0 + step * 0.05)))),
]


@pytest.mark.parametrize("name,alias,links", CHAINS, ids=[c[0] for c in CHAINS])
def test_optimizer_is_its_chain_of_transforms(name, alias, links):
    """Each optimizer gives bit for bit what the chain of its transforms gives, and keeps the
    links' states merged into its one state NamedTuple."""
    p = make_params()
    ours, chained = run_funcgrad(alias(), p), run_funcgrad(links(), p)
    for a, b in zip(ours, chained):
        for k in a:
            np.testing.assert_array_equal(a[k], b[k], err_msg=f"{name}: {k}")
    opt, chain = alias(), links()
    st, cst = opt.init(p), chain.init(p)
    for t in range(2):
        _, st = opt.update(grad_fn(p, t), st, p)
        _, cst = chain.update(grad_fn(p, t), cst, p)
    merged = {f: v for s in cst for f, v in zip(s._fields, s)}
    assert set(merged) <= set(st._fields) and st.count == 2
    for f, v in merged.items():
        for x, y in zip(tree_leaves(getattr(st, f)), tree_leaves(v)):
            np.testing.assert_array_equal(x, y, err_msg=f"{name}: state field {f}")
    assert opt.update.elementwise is True


def test_transforms_refuse_mismatched_grads_and_bad_hyperparameters():
    p = {"layer": {"W": np.ones((2, 2)), "b": np.ones(2)}}
    for t in (optim.trace(0.9), optim.scale_by_adam(), optim.scale_by_rms(), optim.scale_by_rss()):
        st = t.init(p)
        with pytest.raises(TreeStructureError, match=r"grads\['layer'\]\['b'\] has shape \(3,\)"):
            t.update({"layer": {"W": np.ones((2, 2)), "b": np.ones(3)}}, st)
    for make in (lambda: optim.trace(-0.1), lambda: optim.trace(0.0, nesterov=True),
                 lambda: optim.scale_by_adam(b1=1.0), lambda: optim.scale_by_rms(decay=1.5),
                 lambda: optim.scale_by_rss(eps=-1.0)):
        with pytest.raises(ValueError):
            make()


def test_optimizer_state_keeps_its_public_import_path():
    """Checkpoints name NamedTuples by import path: the states stay at funcgrad.optim."""
    for cls in (optim.SGDState, optim.AdamState, optim.RMSPropState, optim.AdagradState, optim.EmptyState,
                optim.ScaleByScheduleState, optim.MultiTransformState, optim.TraceState, optim.ScaleByAdamState):
        assert cls.__module__ == "funcgrad.optim"


# ---------------------------------------------------------------- schedules

def test_schedules_values():
    s = optim.step_decay(1.0, 3, 0.5)
    assert [s(i) for i in range(7)] == [1, 1, 1, 0.5, 0.5, 0.5, 0.25]
    e = optim.exponential_decay(2.0, 0.5)
    assert e(0) == 2.0 and e(3) == 0.25
    es = optim.exponential_decay(1.0, 0.1, transition_steps=10, staircase=True)
    assert es(9) == 1.0 and math.isclose(es(10), 0.1)
    c = optim.cosine_decay(1.0, 10, end_value=0.1)
    assert c(0) == 1.0 and math.isclose(c(5), 0.55) and math.isclose(c(10), 0.1) and math.isclose(c(50), 0.1)
    w = optim.linear_warmup(1.0, 4)
    assert [w(i) for i in range(6)] == [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    j = optim.warmup_cosine_decay(1.0, 4, 10, end_value=0.0)
    assert j(2) == 0.5 and j(4) == 1.0 and math.isclose(j(9), 0.5) and j(14) == 0.0
    pc = optim.piecewise_constant_schedule(1.0, {2: 0.1, 5: 0.5})
    assert [pc(i) for i in range(7)] == [1.0, 1.0, 0.1, 0.1, 0.1, 0.05, 0.05]
    assert optim.constant_schedule(0.3)(100) == 0.3
    with pytest.raises(ValueError, match="boundaries"):
        optim.join_schedules([w, c], [])


def test_torch_cosine_annealing_formula():
    torch = pytest.importorskip("torch")
    p = torch.zeros(1, requires_grad=True)
    o = torch.optim.SGD([p], lr=0.5)
    sch = torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=8, eta_min=0.05)
    ours = optim.cosine_decay(0.5, 8, end_value=0.05)
    for t in range(9):
        assert math.isclose(o.param_groups[0]["lr"], ours(t), rel_tol=1e-12, abs_tol=1e-15)
        o.step()
        sch.step()


def test_schedule_used_per_step_with_sgd():
    p = {"w": np.array([1.0])}
    opt = optim.sgd(optim.step_decay(1.0, 2, 0.1))
    st = opt.init(p)
    seen = []
    for _ in range(4):
        u, st = opt.update({"w": np.array([1.0])}, st, p)
        seen.append(-u["w"][0])
    np.testing.assert_allclose(seen, [1.0, 1.0, 0.1, 0.1])


# ---------------------------------------------------------------- composition

def test_chain_clip_decay_sgd_equals_manual():
    p = make_params()
    opt = optim.chain(optim.clip_by_global_norm(1.0), optim.add_decayed_weights(0.1), optim.scale_by_learning_rate(0.5))
    st = opt.init(p)
    g = grad_fn(p, 0)
    u, st = opt.update(g, st, p)
    norm = math.sqrt(sum(float(np.sum(v * v)) for v in g.values()))
    assert norm > 1.0
    coef = 1.0 / (norm + 1e-6)
    for k in p:
        np.testing.assert_allclose(u[k], -0.5 * (g[k] * coef + 0.1 * p[k]), rtol=1e-13)
    assert isinstance(st, tuple) and len(st) == 3 and st[2].count == 1


def test_clip_by_global_norm_leaves_small_grads():
    g = {"a": np.array([0.3, 0.4])}
    u, _ = optim.clip_by_global_norm(1.0).update(g, optim.EmptyState())
    np.testing.assert_array_equal(u["a"], g["a"])
    u, _ = optim.clip_by_global_norm(0.25).update(g, optim.EmptyState())
    np.testing.assert_allclose(np.linalg.norm(u["a"]), 0.25, rtol=1e-5)
    with pytest.raises(FloatingPointError):
        optim.clip_by_global_norm(1.0).update({"a": np.array([np.nan])}, optim.EmptyState())


def test_scale():
    u, _ = optim.scale(-2.0).update([np.array([1.0, 2.0])], optim.EmptyState())
    np.testing.assert_array_equal(u[0], [-2.0, -4.0])


def test_multi_transform_param_groups():
    p = make_params()
    labels = {"W": "decay", "b": "no_decay"}
    opt = optim.multi_transform({"decay": optim.adamw(0.05, weight_decay=0.3),
                                 "no_decay": optim.sgd(0.05, momentum=0.9)}, labels)
    ours = run_funcgrad(opt, p)
    ref_w = run_ref(ref_adam(0.05, weight_decay=0.3, decoupled=True), p)
    ref_b = run_ref(ref_sgd(0.05, 0.9), p)
    # the reference runs update both leaves with one rule; since W and b gradients couple through
    # the loss, compare the first step exactly and the full run through a per-group reference
    np.testing.assert_allclose(ours[0]["W"], ref_w[0]["W"], rtol=1e-12)
    np.testing.assert_allclose(ours[0]["b"], ref_b[0]["b"], rtol=1e-12)
    # full trajectory against a hand-rolled two-group loop
    pw, pb = p["W"].copy(), p["b"].copy()
    sw, sb = {}, {}
    aw, sg = ref_adam(0.05, weight_decay=0.3, decoupled=True), ref_sgd(0.05, 0.9)
    for t in range(1, STEPS + 1):
        g = grad_fn({"W": pw, "b": pb}, t - 1)
        pw, pb = aw(pw, g["W"], sw, t), sg(pb, g["b"], sb, t)
    np.testing.assert_allclose(ours[-1]["W"], pw, rtol=1e-12)
    np.testing.assert_allclose(ours[-1]["b"], pb, rtol=1e-12)
    # labels as a callable
    opt2 = optim.multi_transform({"a": optim.sgd(0.1), "b": optim.sgd(0.0)},
                                 lambda params: {k: "a" if v.ndim == 2 else "b" for k, v in params.items()})
    st = opt2.init(p)
    u, st = opt2.update(grad_fn(p, 0), st, p)
    assert np.all(u["b"] == 0) and np.any(u["W"] != 0)


def test_multi_transform_bad_label_names_path():
    p = make_params()
    opt = optim.multi_transform({"a": optim.sgd(0.1)}, {"W": "a", "b": "zzz"})
    with pytest.raises(ValueError, match=r"labels\['b'\].*'zzz'"):
        opt.init(p)


# ---------------------------------------------------------------- errors

@pytest.mark.parametrize("make", [lambda: optim.sgd(-0.1), lambda: optim.adam(-1e-3), lambda: optim.adamw(lr=-1.0),
                                  lambda: optim.rmsprop(-0.1), lambda: optim.adagrad(-0.1),
                                  lambda: optim.adam(1e-3, b1=1.0), lambda: optim.sgd(0.1, momentum=-0.5),
                                  lambda: optim.sgd(0.1, nesterov=True),
                                  lambda: optim.adam(float("nan"))])
def test_bad_hyperparameters(make):
    with pytest.raises(ValueError):
        make()


def test_lr_type_error():
    with pytest.raises(TypeError, match="lr"):
        optim.sgd("0.1")


def test_negative_schedule_value_raises_at_update():
    p = {"w": np.ones(2)}
    opt = optim.sgd(lambda step: 0.1 - step)
    st = opt.init(p)
    _, st = opt.update({"w": np.ones(2)}, st, p)
    with pytest.raises(ValueError, match="schedule returned"):
        opt.update({"w": np.ones(2)}, st, p)


def test_grads_structure_mismatch_names_key_path():
    p = {"layer": {"W": np.ones((2, 2)), "b": np.ones(2)}}
    opt = optim.adam(1e-3)
    st = opt.init(p)
    with pytest.raises(TreeStructureError, match=r"\['layer'\]"):
        opt.update({"layer": {"W": np.ones((2, 2)), "c": np.ones(2)}}, st, p)
    with pytest.raises(TreeStructureError, match=r"grads\['layer'\]\['b'\] has shape \(3,\)"):
        opt.update({"layer": {"W": np.ones((2, 2)), "b": np.ones(3)}}, st, p)
    with pytest.raises(TreeStructureError):
        optim.apply_updates(p, {"layer": [np.ones((2, 2)), np.ones(2)]})


def test_weight_decay_needs_params():
    opt = optim.sgd(0.1, weight_decay=0.1)
    p = {"w": np.ones(2)}
    with pytest.raises(ValueError, match="params"):
        opt.update({"w": np.ones(2)}, opt.init(p))


def test_integer_params_refused():
    with pytest.raises(TypeError, match=r"params\['n'\].*int"):
        optim.adam(1e-3).init({"n": np.arange(3)})


class Layer(NamedTuple):
    W: np.ndarray
    b: np.ndarray


def test_namedtuple_params_and_state_are_namedtuples():
    p = [Layer(np.ones((2, 2)), np.zeros(2)), Layer(np.ones((2, 1)), np.zeros(1))]
    opt = optim.chain(optim.clip_by_global_norm(10.0), optim.rmsprop(0.01, momentum=0.9, centered=True))
    st = opt.init(p)
    g = [Layer(np.full((2, 2), 0.5), np.ones(2)), Layer(np.ones((2, 1)), np.ones(1))]
    u, st = opt.update(g, st, p)
    new = optim.apply_updates(p, u)
    assert isinstance(new[0], Layer) and isinstance(st[1], optim.RMSPropState)
    assert isinstance(st[1].momentum[1], Layer)


@pytest.mark.parametrize("make", [lambda: optim.sgd(0.1, momentum=0.9, nesterov=True, weight_decay=0.1),
                                  lambda: optim.adam(0.1, amsgrad=True), lambda: optim.adamw(0.1),
                                  lambda: optim.rmsprop(0.1, centered=True, momentum=0.5, weight_decay=0.1),
                                  lambda: optim.adagrad(0.1, weight_decay=0.1),
                                  lambda: optim.chain(optim.clip_by_global_norm(0.1), optim.add_decayed_weights(0.1),
                                                      optim.scale_by_learning_rate(0.1))])
def test_zero_d_params_stay_arrays(make):
    p = {"s": np.array(1.5), "v": np.ones(2, np.float32)}
    opt = make()
    st = opt.init(p)
    for _ in range(3):
        u, st = opt.update({"s": np.array(0.5), "v": np.full(2, 0.5, np.float32)}, st, p)
        p = optim.apply_updates(p, u)
    assert type(p["s"]) is np.ndarray and p["s"].shape == () and p["s"] < 1.5
    assert p["v"].dtype == np.float32
