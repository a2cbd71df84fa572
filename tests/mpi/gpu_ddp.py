"""Run under mpiexec -n p (with NUMBA_ENABLE_CUDASIM=1 in CI) and a scratch directory: data parallel on GPUs.

Each rank takes its GPU from funcgrad.dist.local_device(), puts its parameters and batches there, and
trains a small tanh regression with DataParallel whose gradients funcgrad computes on the GPU. After a
few steps (with and without gradient accumulation, SGD with momentum and Adam) the GPU parameters must
equal, to 1e-12, the same data-parallel run on the CPU and one process with the whole batch; they stay
GPU arrays throughout. allreduce_tree/broadcast_tree of GPU trees, the cross-rank checksum and rank-0
checkpoint + resume of GPU parameters are checked too. Rank 0 prints ``GPU DDP OK p=<p> maxdiff=<d>``.
"""
import os
import sys

import numpy as np

import funcgrad
import funcgrad.dist as fd
import funcgrad.optim as optim
from funcgrad.kernels.base import is_device_array

w = fd.world()
p, r = w.size, w.rank
scratch = sys.argv[1]
dev = fd.local_device()
assert dev in funcgrad.devices(), dev

D, H, B, STEPS = 4, 3, 4 * p, 4
rng = np.random.default_rng(3)
X_all = rng.standard_normal((STEPS * B, D))
Y_all = rng.standard_normal((STEPS * B, H))


def loss(params, x, y):
    z = np.tanh(x @ params["W"] + params["b"])
    return np.mean((z - y) ** 2)


def init_params(seed):
    g = np.random.default_rng(seed)
    return {"W": 0.5 * g.standard_normal((D, H)), "b": 0.1 * g.standard_normal(H)}


def batch(step, full=False):
    lo = step * B
    if full:
        return X_all[lo:lo + B], Y_all[lo:lo + B]
    per = B // p
    return X_all[lo + r * per: lo + (r + 1) * per], Y_all[lo + r * per: lo + (r + 1) * per]


def host(tree):
    return funcgrad.device_get(tree)


def diff(a, b):
    a, b = host(a), host(b)
    return max(float(np.max(np.abs(np.asarray(a[k]) - np.asarray(b[k])))) for k in a)


def reference(opt):
    vg = funcgrad.value_and_grad(loss)
    params = init_params(0)
    state = opt.init(params)
    for s in range(STEPS):
        _, g = vg(params, *batch(s, full=True))
        u, state = opt.update(g, state, params)
        params = optim.apply_updates(params, u)
    return params


maxdiff = 0.0
for name, opt in {"sgd": optim.sgd(0.3, momentum=0.9), "adam": optim.adam(0.05)}.items():
    ref = reference(opt)
    for accum in (1, 2):
        runs = {}
        for where in ("cpu", "gpu"):
            dp = fd.DataParallel(opt, loss_fn=loss, accum_steps=accum, check_every=2)
            start = init_params(0 if r == 0 else 50 + r)     # init() must broadcast rank 0's
            if where == "gpu":
                start = funcgrad.device_put(start, dev)
            params, state = dp.init(start)
            for s in range(STEPS):
                x, y = batch(s)
                if where == "gpu":
                    x, y = funcgrad.device_put((x, y), dev)
                params, state = dp.step(params, state, x, y)
            runs[where] = (params, state, dp.last_loss)
        gp, gs, gl = runs["gpu"]
        assert all(is_device_array(v) for v in gp.values()), "GPU parameters must stay on the GPU"
        arrays = [v for v in funcgrad.tree.tree_leaves(gs) if is_device_array(v) or isinstance(v, np.ndarray)]
        assert arrays and all(is_device_array(v) for v in arrays), "the optimizer state stays on the GPU"
        d = max(diff(gp, runs["cpu"][0]), diff(gp, ref))
        assert abs(gl - runs["cpu"][2]) < 1e-12, (name, accum, gl, runs["cpu"][2])
        maxdiff = max(maxdiff, d)
        assert d < 1e-12, f"{name} accum={accum}: GPU data parallel differs by {d}"

# collectives of GPU trees
t = {"a": funcgrad.device_put(np.full(3, float(r + 1)), dev), "n": 2.0 * r, "h": np.ones(2) * r}
red = fd.allreduce_tree(t, op="mean")
assert is_device_array(red["a"]) and not is_device_array(red["h"]) and isinstance(red["n"], float)
np.testing.assert_allclose(host(red["a"]), np.full(3, (p + 1) / 2))
np.testing.assert_allclose(red["h"], np.full(2, (p - 1) / 2))
b = fd.broadcast_tree({"a": funcgrad.device_put(np.arange(3.0) + r, dev)}, root=p - 1)
assert is_device_array(b["a"])
np.testing.assert_array_equal(host(b["a"]), np.arange(3.0) + p - 1)

# divergence check and checkpoint + resume of GPU parameters
opt = optim.adam(0.05)
dp = fd.DataParallel(opt, loss_fn=loss, check_every=0)
params, state = dp.init(funcgrad.device_put(init_params(0), dev))
path = os.path.join(scratch, "gpu_ddp.npz")
for s in range(STEPS):
    if s == 2:
        dp.save(path, params, state)
    params, state = dp.step(params, state, *funcgrad.device_put(batch(s), dev))
dp.check(params)
full_run = params
dp2 = fd.DataParallel(opt, loss_fn=loss)
tmpl = funcgrad.device_put(init_params(9), dev)
params, state = dp2.restore(path, tmpl, opt.init(tmpl))
assert dp2.step_count == 2 and is_device_array(params["W"])
for s in range(2, STEPS):
    params, state = dp2.step(params, state, *funcgrad.device_put(batch(s), dev))
assert diff(params, full_run) == 0.0, diff(params, full_run)
if r == p - 1:
    params = dict(params, b=funcgrad.device_put(host(params["b"]) + 1e-9, dev))
try:
    dp2.check(params)
    raised = ""
except fd.ParameterDivergenceError as e:
    raised = str(e)
assert "diverged" in raised, "a GPU parameter differing on one rank must be reported on every rank"

if r == 0:
    print(f"GPU DDP OK p={p} maxdiff={maxdiff:.3g}", flush=True)
