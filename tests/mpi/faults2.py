"""Run under mpiexec: faults planted in data-parallel training (issue 19).

usage: faults2.py MODE

early        rank 1 raises right after ``import funcgrad.dist`` (before any dist call): the
             job must end within seconds, naming rank 1 (MPI is initialised at import).
kill         rank 1 SIGKILLs itself mid-training (ring_allreduce loop); under
             ``mpiexec -disable-auto-cleanup`` the survivors raise RankFailure naming it.
uneven       rank 1 runs one DataParallel step fewer than the others: the others raise
             RankFailure saying rank 1 finished after N steps (uneven inputs).
sampler      DataParallel.sampler over a data set whose size is not a multiple of the world
             size gives every rank the same number of batches: training ends normally.
nan-raise    rank 1's gradient of params['W1'] is NaN at step 3: NonFiniteGradientError on
             every rank naming rank 1, step 3 and params['W1'] (fused and per-leaf paths).
nan-skip     the same with nonfinite='skip': step 3 is skipped on every rank, training goes
             on, parameters stay finite and equal on every rank.
mismatch     broadcast_tree/allreduce_tree with trees that differ by a shape, a missing key
             and a dtype, and ring_allreduce on (3, 4) vs (4, 3): CommMismatchError on every
             rank, naming the leaf and each rank's shape/dtype; then shape changes after
             repeated calls (speculative round, node shared memory) and in DataParallel.init.
mismatch-uncaught  broadcast_tree with W1 (64, 64) on rank 0, (64, 80) elsewhere, uncaught:
             the job ends at once (not at the deadline), the message naming the leaf.
Each rank prints ``RESULT <mode> rank=<r> ...`` lines the test reads.
"""
import os
import signal
import sys
import time

import numpy as np

import funcgrad.dist as fd

mode = sys.argv[1]
rank_env = int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
if mode == "early":
    if rank_env == 1:
        raise FileNotFoundError("bad config on rank 1: data/shard1.npz does not exist")
    time.sleep(60)          # the others would go on to world() and training; they must be aborted
    print("should not get here", flush=True)
    raise SystemExit(0)

w = fd.world()
r, p = w.rank, w.size


class SGD:
    """optax-style SGD, elementwise (the fused path) unless told otherwise."""

    def __init__(self, lr, elementwise=True):
        self.lr = lr
        if elementwise:
            self.update = self._update
            self._update.__func__.elementwise = True

    def init(self, params):
        return ()

    def update(self, grads, state, params):
        return {k: -self.lr * g for k, g in grads.items()}, state

    def _update(self, grads, state, params):
        if isinstance(grads, np.ndarray):
            return -self.lr * grads, state
        return {k: -self.lr * g for k, g in grads.items()}, state


def grad_fn(params, x):
    return {"W1": params["W1"] * 0.0 + x.mean(), "b1": params["b1"] * 0.0 + 1.0}


def params0():
    return {"W1": np.ones((64, 64)), "b1": np.zeros(64)}


if mode == "kill":
    x = np.ones(20000)
    for i in range(10 ** 6):
        if r == 1 and i == 30:
            os.kill(os.getpid(), signal.SIGKILL)
        fd.ring_allreduce(x)      # the survivors' RankFailure is uncaught: the abort hook reports it
elif mode == "uneven":
    dp = fd.DataParallel(SGD(0.1), grad_fn=grad_fn)
    prm, st = dp.init(params0())
    steps = 10 - (1 if r == 1 else 0)          # rank 1's shard is one batch shorter
    t0 = None
    for s in range(steps):
        t0 = time.monotonic()
        prm, st = dp.step(prm, st, np.full(8, float(s)))
    t0 = time.monotonic()
    if r != 1:
        print(f"RESULT uneven rank={r}: no error", flush=True)
elif mode == "sampler":
    n = 103                                    # not a multiple of the world size
    dp = fd.DataParallel(SGD(0.1), grad_fn=grad_fn)
    prm, st = dp.init(params0())
    X = np.arange(n, dtype=float)
    sampler = dp.sampler(n, shuffle=True, seed=1)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        idx = sampler.indices()
        for b in range(0, len(idx), 8):       # the last batch is shorter, the same count on every rank
            prm, st = dp.step(prm, st, X[idx[b:b + 8]])
    fd.check_params_in_sync(prm)
    print(f"RESULT sampler rank={r} steps={dp.step_count} ok", flush=True)
elif mode in ("nan-raise", "nan-skip"):
    how = mode.split("-")[1]
    for fused in (True, False):
        dp = fd.DataParallel(SGD(0.1, elementwise=fused), grad_fn=grad_fn, nonfinite=how, check_every=1)
        prm, st = dp.init(params0())

        def g(params, x, dp=dp):
            out = grad_fn(params, x)
            if r == 1 and dp.step_count + 1 == 3:
                out["W1"] = out["W1"].copy()
                out["W1"][5, 7] = np.nan
                out["W1"][0, 0] = np.inf
            return out
        dp._grad_fn = g
        try:
            for s in range(6):
                prm, st = dp.step(prm, st, np.full(8, 1.0))
        except fd.NonFiniteGradientError as e:
            print(f"RESULT {mode} fused={fused} rank={r} ranks={list(e.ranks)} step={e.step} "
                  f"leaves={e.leaves} msg={str(e)!r}", flush=True)
            continue
        finite = all(np.isfinite(v).all() for v in prm.values())
        print(f"RESULT {mode} fused={fused} rank={r} skipped={dp.skipped_steps} finite={finite} "
              f"W1={prm['W1'][0, 0]!r}", flush=True)
elif mode == "mismatch":
    def show(tag, f):
        try:
            f()
        except fd.CommMismatchError as e:
            print(f"RESULT {tag} rank={r} msg={str(e)!r}", flush=True)
        else:
            print(f"RESULT {tag} rank={r} no error", flush=True)
    shape = (64, 64) if r == 0 else (64, 80)
    show("shape", lambda: fd.broadcast_tree({"W1": np.zeros(shape), "b1": np.zeros(64)}))
    tree = {"W1": np.zeros((64, 64)), "b1": np.zeros(64)}
    if r == 1:
        tree["b2"] = np.zeros(10)
    show("missing", lambda: fd.allreduce_tree(tree))
    show("dtype", lambda: fd.allreduce_tree({"W1": np.zeros((4, 4), np.float32 if r == 1 else np.float64)},
                                            op="sum"))
    a = np.ones((3, 4)) if r == 0 else np.ones((4, 3))
    show("ring-shape", lambda: fd.ring_allreduce(a))
    show("ring-shape-big", lambda: fd.ring_allreduce(np.ones((300, 400)) if r == 0 else np.ones((400, 300))))
    # after repeated calls (the check rides in the speculative round; 32 KB: in the node
    # shared-memory barrier) a shape that changes on one rank only
    for tag, s0, s1 in (("ring-shape-spec", (3, 4), (4, 3)), ("ring-shape-shm", (64, 64), (32, 128))):
        x0 = np.ones(s0)
        o0 = np.empty_like(x0)
        for _ in range(4):
            fd.ring_allreduce(x0, out=o0)
        assert w._spec.cur is not None, tag
        show(tag, lambda: fd.ring_allreduce(np.ones(s0 if r == 0 else s1)))
    show("dp-init", lambda: fd.DataParallel(SGD(0.1), grad_fn=grad_fn).step(
        *fd.DataParallel(SGD(0.1), grad_fn=grad_fn).init(
            {"W1": np.ones((64, 64) if r == 0 else (64, 80)), "b1": np.zeros(64)}), np.ones(8)))
    # and the same shapes still reduce fine
    y = fd.ring_allreduce(np.ones((3, 4)))
    print(f"RESULT after rank={r} ok={bool((y == p).all())}", flush=True)
elif mode == "mismatch-uncaught":
    # not caught: the abort hook ends the job; every rank's message names the leaf
    fd.broadcast_tree({"W1": np.zeros((64, 64) if r == 0 else (64, 80)), "b1": np.zeros(64)})
    print(f"RESULT mismatch-uncaught rank={r} no error", flush=True)
else:
    raise SystemExit(f"unknown mode {mode}")
