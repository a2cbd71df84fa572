"""Run under mpiexec -n p with a scratch directory argument: data-parallel training.

N ranks with batch B/N each must end with the parameters of one process with
batch B after 20 steps (1e-10 in float64), with SGD+momentum and Adam, with
and without gradient accumulation; the checksum catches a diverged rank on
every rank; rank-0 checkpoint + resume reproduces the uninterrupted run.
Rank 0 prints ``DDP OK p=<p> maxdiff=<d> checks=<n>``.
"""
import os
import sys

import numpy as np
from mpi4py import MPI

import funcgrad.dist as fd

try:
    import funcgrad.optim as optim
    HAVE_OPTIM = True
except Exception:  # the optimizer module is built by someone else; a local SGD stands in
    HAVE_OPTIM = False

w = fd.world()
comm = MPI.COMM_WORLD
p, r = w.size, w.rank
scratch = sys.argv[1]
checks = 0
maxdiff = 0.0


class LocalSGD:
    """Tiny optax-style SGD with momentum (used when funcgrad.optim is unavailable)."""

    def __init__(self, lr, momentum=0.0):
        self.lr, self.m = lr, momentum

    def init(self, params):
        return {k: np.zeros_like(v) for k, v in params.items()}

    def update(self, grads, state, params):
        new = {k: self.m * state[k] + grads[k] for k in grads}
        return {k: -self.lr * new[k] for k in new}, new


def make_opts():
    if HAVE_OPTIM:
        return {"sgd": optim.sgd(0.5, momentum=0.9), "adam": optim.adam(0.05)}
    return {"sgd": LocalSGD(0.5, 0.9)}


# softmax regression, written by hand (no dependency on funcgrad.grad)
D, C, B, STEPS = 10, 4, 24, 20
rng = np.random.default_rng(42)
X_all = rng.standard_normal((STEPS * B, D))
Wtrue = rng.standard_normal((D, C))
Y_all = np.argmax(X_all @ Wtrue + 0.5 * rng.standard_normal((STEPS * B, C)), axis=1)


def loss_and_grad(params, x, y):
    z = x @ params["W"] + params["b"]
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    s = e / e.sum(axis=1, keepdims=True)
    n = x.shape[0]
    loss = -np.mean(np.log(s[np.arange(n), y]))
    d = s.copy()
    d[np.arange(n), y] -= 1.0
    d /= n
    return loss, {"W": x.T @ d, "b": d.sum(axis=0)}


def grad_only(params, x, y):
    return loss_and_grad(params, x, y)[1]


def init_params(seed):
    g = np.random.default_rng(seed)
    return {"W": 0.1 * g.standard_normal((D, C)), "b": np.zeros(C)}


def batch(step, full=False):
    lo = step * B
    if full:
        return X_all[lo:lo + B], Y_all[lo:lo + B]
    per = B // p
    return X_all[lo + r * per: lo + (r + 1) * per], Y_all[lo + r * per: lo + (r + 1) * per]


def reference(opt, steps=STEPS, start=None):
    params = init_params(0) if start is None else start
    state = opt.init(params)
    losses = []
    for s in range(steps):
        l, g = loss_and_grad(params, *batch(s, full=True))
        losses.append(l)
        u, state = opt.update(g, state, params)
        params = {k: params[k] + u[k] for k in params}
    return params, losses


def diff(a, b):
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)


assert B % p == 0
for name, opt in make_opts().items():
    ref, ref_losses = reference(opt)
    for accum in (1, 3):
        dp = fd.DataParallel(opt, grad_fn=loss_and_grad, returns_loss=True, accum_steps=accum,
                             check_every=5)
        # every rank starts from a different init; init() must broadcast rank 0's
        params, state = dp.init(init_params(0 if r == 0 else 100 + r))
        for s in range(STEPS):
            params, state = dp.step(params, state, *batch(s))
            assert abs(dp.last_loss - ref_losses[s]) < 1e-10, (name, accum, s, dp.last_loss, ref_losses[s])
        d = diff(params, ref)
        maxdiff = max(maxdiff, d)
        assert d < 1e-10, f"{name} accum={accum}: N-rank params differ from 1-process by {d}"
        assert dp.step_count == STEPS
        fd.check_params_in_sync(params)
        checks += 3
    # explicit micro-batches through the functional helper
    params, state = fd.broadcast_tree(init_params(0)), opt.init(init_params(0))
    for s in range(STEPS):
        x, y = batch(s)
        h = len(x) // 2
        params, state, loss = fd.data_parallel_step(grad_only, opt, params, state,
                                                    micro_batches=[(x[:h], y[:h]), (x[h:], y[h:])])
        assert loss is None
    d = diff(params, ref)
    maxdiff = max(maxdiff, d)
    assert d < 1e-10, f"{name} micro_batches: differ by {d}"
    checks += 1

# ---------------------------------------------------------- fused flat update == per-leaf path, bit for bit
if HAVE_OPTIM:
    for name, opt in make_opts().items():
        runs = {}
        for fused in (False, None):
            dp = fd.DataParallel(opt, grad_fn=loss_and_grad, returns_loss=True, check_every=5, fused=fused)
            params, state = dp.init(init_params(0))
            losses = []
            for s in range(STEPS):
                if s == 7:      # in-place edit of a returned leaf: the next step must see it
                    params["W"][0, 0] += 0.25
                if s == 11:     # a leaf replaced in the returned dict: the next step must see it too
                    params["b"] = params["b"] - 0.125
                params, state = dp.step(params, state, *batch(s))
                losses.append(dp.last_loss)
            runs[fused] = (params, state, losses, dp)
        (p0, s0, l0, dp0), (p1, s1, l1, dp1) = runs[False], runs[None]
        assert dp0._layouts == {} and len(dp1._layouts) == 1, "the fused path must be taken by default"
        assert p1["W"].base is not None and p1["W"].base is p1["b"].base, "fused params: views of one vector"
        assert diff(p0, p1) == 0.0 and l0 == l1, f"{name}: fused differs from per-leaf by {diff(p0, p1)}"
        fs0, fs1 = (fd.ddp.ftree.tree_leaves(x) for x in (s0, s1))
        assert len(fs0) == len(fs1) and all(np.array_equal(a, b) for a, b in zip(fs0, fs1)), name
        assert type(s0) is type(s1)
        checks += 3
    try:
        fd.DataParallel(LocalSGD(0.1), grad_fn=loss_and_grad, returns_loss=True, fused=True).step(
            *(lambda pr: (pr, LocalSGD(0.1).init(pr)))(init_params(0)), *batch(0))
        raised = False
    except TypeError as e:
        raised = "elementwise" in str(e)
    assert raised, "fused=True with an unmarked optimizer must say why it cannot fuse"
    checks += 1

# ---------------------------------------------------------- divergence check
opt = make_opts()["sgd"]
dp = fd.DataParallel(opt, grad_fn=grad_only, check_every=0)
params, state = dp.init(init_params(0))
params, state = dp.step(params, state, *batch(0))
dp.check(params)
if r == p - 1:
    params["W"][0, 0] = np.nextafter(params["W"][0, 0], np.inf)   # one ulp on one rank
try:
    dp.check(params)
    raised = ""
except fd.ParameterDivergenceError as e:
    raised = str(e)
assert "diverged" in raised and "after step 1" in raised and "checksum" in raised, raised
assert comm.allreduce(bool(raised), op=MPI.LAND), "divergence must be reported on every rank"
checks += 2

# ---------------------------------------------------------- checkpoint + resume
path = os.path.join(scratch, "ddp_ckpt.npz")
opt = make_opts()["adam" if HAVE_OPTIM else "sgd"]
dp = fd.DataParallel(opt, grad_fn=grad_only)
params, state = dp.init(init_params(0))
for s in range(STEPS):
    if s == 10:
        dp.save(path, params, state)
    params, state = dp.step(params, state, *batch(s))
full_run = params
dp2 = fd.DataParallel(opt, grad_fn=grad_only)
tmpl_p, tmpl_s = init_params(7), opt.init(init_params(7))
params, state = dp2.restore(path, tmpl_p, tmpl_s)
assert dp2.step_count == 10
for s in range(dp2.step_count, STEPS):
    params, state = dp2.step(params, state, *batch(s))
assert diff(params, full_run) == 0.0, "resume must reproduce the uninterrupted run bit for bit"
assert os.path.exists(path) and not [f for f in os.listdir(scratch) if f.endswith(".tmp")]
checks += 3

# ---------------------------------------------------------- sampler
try:
    from funcgrad.data import DistributedSampler  # noqa: F401
    have_sampler = True
except Exception:
    have_sampler = False
if have_sampler:
    idx = np.ascontiguousarray(dp.sampler(103, shuffle=True, seed=3, drop_last=True).indices(), dtype=np.int64)
    allidx = np.empty(p * len(idx), dtype=np.int64)
    comm.Allgather(idx, allidx)
    assert len(set(allidx.tolist())) == len(allidx), "shards must not overlap"
    checks += 1

w.barrier()
if r == 0:
    print(f"DDP OK p={p} maxdiff={maxdiff:.3g} checks={checks} optim={'funcgrad.optim' if HAVE_OPTIM else 'local'}",
          flush=True)
