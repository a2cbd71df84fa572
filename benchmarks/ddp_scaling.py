"""Data-parallel throughput of the digits MLP on 1 and 2 ranks (samples/s).

    .venv/bin/python benchmarks/ddp_scaling.py [--steps 300] [--batch 64] [--handwritten]

Launches itself under mpiexec with 1 and 2 ranks. Each rank runs the full
``DataParallel.step`` (local gradient of the MLP from examples/ddp_digits.py
with ``funcgrad.value_and_grad`` -- or ``--handwritten`` -- then the ring
allreduce of the gradients, then SGD with momentum), after warm-up steps that
also trigger compilation. Two settings are printed:

* weak scaling: ``--batch`` samples per rank per step (the global batch grows
  with the ranks), the usual data-parallel throughput figure;
* strong scaling: a fixed global batch of ``2 * --batch`` split over the ranks.

Target: >= 1.7x samples/s at 2 ranks (weak scaling) on a 2-core machine.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))


def _mpiexec():
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else "mpiexec"


def child(a):
    import funcgrad
    import funcgrad.dist as fd
    from ddp_digits import (init_mlp, load_data, make_optimizer, mlp_loss,
                            mlp_loss_and_grad_by_hand)

    w = fd.world()
    (Xtr, ytr), _ = load_data(0)
    Y1h = np.eye(10)[ytr]
    vg = mlp_loss_and_grad_by_hand if a.handwritten else funcgrad.value_and_grad(mlp_loss)
    results = {}
    for setting, per_rank in (("weak", a.batch), ("strong", 2 * a.batch // w.size)):
        dp = fd.DataParallel(make_optimizer(0.05), grad_fn=vg, returns_loss=True, check_every=0)
        params, st = dp.init(init_mlp(0, hidden=a.hidden))
        rng = np.random.default_rng(w.rank)
        idx = rng.integers(0, len(Xtr), size=(a.steps + a.warmup, per_rank))
        for s in range(a.warmup):
            params, st = dp.step(params, st, Xtr[idx[s]], Y1h[idx[s]])
        w.barrier()
        t0 = time.perf_counter()
        for s in range(a.warmup, a.warmup + a.steps):
            params, st = dp.step(params, st, Xtr[idx[s]], Y1h[idx[s]])
        w.barrier()
        dt = time.perf_counter() - t0
        results[setting] = (a.steps * per_rank * w.size / dt, per_rank, dt / a.steps)
    if w.rank == 0:
        for setting, (sps, per_rank, step) in results.items():
            print(f"RESULT {setting} {w.size} {sps:.1f} {per_rank} {step * 1e3:.3f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--batch", type=int, default=64, help="samples per rank per step (weak scaling)")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--handwritten", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a)
        return
    rows = {}
    for p in (1, 2):
        cmd = [_mpiexec(), "-n", str(p), sys.executable, "-m", "mpi4py", os.path.abspath(__file__), "--child",
               "--steps", str(a.steps), "--warmup", str(a.warmup), "--batch", str(a.batch),
               "--hidden", str(a.hidden)] + (["--handwritten"] if a.handwritten else [])
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            sys.exit(f"ddp_scaling at p={p} failed:\n{r.stdout}\n{r.stderr}")
        for line in r.stdout.splitlines():
            if line.startswith("RESULT"):
                _, setting, size, sps, per_rank, step_ms = line.split()
                rows[(setting, int(size))] = (float(sps), int(per_rank), float(step_ms))
    grad = "hand-written" if a.handwritten else "funcgrad.value_and_grad"
    print(f"digits MLP 64-{a.hidden}-10, DataParallel.step ({grad}), {a.steps} timed steps, "
          f"{os.cpu_count()} cores")
    print(f"{'setting':<8} {'ranks':>5} {'batch/rank':>10} {'ms/step':>8} {'samples/s':>10} {'speedup':>8}")
    for setting in ("weak", "strong"):
        base = rows[(setting, 1)][0]
        for p in (1, 2):
            sps, per_rank, step_ms = rows[(setting, p)]
            print(f"{setting:<8} {p:>5} {per_rank:>10} {step_ms:>8.3f} {sps:>10.0f} {sps / base:>7.2f}x")


if __name__ == "__main__":
    main()
