"""Data-parallel throughput of the digits MLP on 1 and 2 ranks (samples/s).

    .venv/bin/python benchmarks/ddp_scaling.py [--steps 300] [--batch 64] [--handwritten]

Launches itself under mpiexec with 1 and 2 ranks. Each rank runs the full
``DataParallel.step`` (local gradient of the MLP from examples/ddp_digits.py
with ``funcgrad.value_and_grad`` -- or ``--handwritten`` -- then the ring
allreduce of the gradients, then SGD with momentum), after warm-up steps that
also trigger compilation. Each rank uses one BLAS and one Numba thread (set
in-process with threadpoolctl / numba.set_num_threads, for 1 and 2 ranks
alike; ``--threads`` keeps the default pools). Two settings are printed:

* weak scaling: ``--batches`` samples per rank per step (the global batch
  grows with the ranks), the usual data-parallel throughput figure; the
  digits MLP is tiny, so per-step costs that do not shrink with the batch
  (the optimizer on the parameters, the allreduce latency) decide how large
  a per-rank batch must be before a second rank pays;
* strong scaling: a fixed global batch ``--strong`` split over the ranks;
* no-comm: the same local work (gradient + optimizer) with no communication,
  every rank at once: the speedup the machine allows at that moment.

Target: >= 1.7x samples/s at 2 ranks on this 2-core machine. The load
average is printed: other processes on the 2 cores cap the speedup.
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


def _one_thread_per_rank():
    """One BLAS thread and one Numba thread per rank, for 1 and 2 ranks alike (in-process
    limits via threadpoolctl / numba.set_num_threads; no environment variables are changed).
    Two ranks each running OpenBLAS's 2 spinning threads would put 4 busy threads on 2 cores."""
    done = []
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(1)
        done.append("BLAS")
    except Exception:
        pass
    try:
        import numba
        numba.set_num_threads(1)
        done.append("Numba")
    except Exception:
        pass
    return done


def child(a):
    import funcgrad
    import funcgrad.dist as fd
    if not a.threads:
        _one_thread_per_rank()
    from ddp_digits import init_mlp, load_data, make_grad, make_optimizer

    w = fd.world()
    (Xtr, ytr), _ = load_data(0)
    Y1h = np.eye(10)[ytr]
    vg, desc = make_grad(a.handwritten, Xtr, Y1h, w.rank)
    if w.rank == 0:
        print(f"GRAD {desc}", flush=True)
    results = {}
    settings = [(f"weak", b) for b in a.batches] + [("strong", a.strong // w.size)]
    for setting, per_rank in settings:
        dp = fd.DataParallel(make_optimizer(0.05), grad_fn=vg, returns_loss=True, check_every=0)
        params, st = dp.init(init_mlp(0, hidden=a.hidden))
        rng = np.random.default_rng(w.rank)
        steps = max(30, int(a.steps * 64 / max(per_rank, 64)))
        idx = rng.integers(0, len(Xtr), size=(steps + a.warmup, per_rank))
        for s in range(a.warmup):
            params, st = dp.step(params, st, Xtr[idx[s]], Y1h[idx[s]])
        w.barrier()
        t0 = time.perf_counter()
        for s in range(a.warmup, a.warmup + steps):
            params, st = dp.step(params, st, Xtr[idx[s]], Y1h[idx[s]])
        w.barrier()
        dt = time.perf_counter() - t0
        results[(setting, per_rank if setting == "weak" else a.strong)] = (steps * per_rank * w.size / dt,
                                                                         per_rank, dt / steps)
    # machine ceiling: the same local work (gradient + optimizer) with no communication at all,
    # timed while the other rank does the same -- what 2 ranks can gain on this machine right now
    per_rank = a.batches[-1]
    opt = make_optimizer(0.05)
    params = init_mlp(0, hidden=a.hidden)
    st = opt.init(params)
    steps = max(30, int(a.steps * 64 / max(per_rank, 64)))
    idx = np.random.default_rng(w.rank).integers(0, len(Xtr), size=(steps, per_rank))
    w.barrier()
    t0 = time.perf_counter()
    for s in range(steps):
        out = vg(params, Xtr[idx[s]], Y1h[idx[s]])
        u, st = opt.update(out[1], st, params)
        params = fd.ddp.apply_updates(params, u)
    dt = time.perf_counter() - t0
    dts = fd.allreduce_tree({"t": np.float64(dt)}, op="sum")["t"] if w.size > 1 else dt
    dt = dts / w.size
    results[("no-comm", per_rank)] = (steps * per_rank * w.size / dt, per_rank, dt / steps)
    if w.rank == 0:
        for (setting, key), (sps, per_rank, step) in results.items():
            print(f"RESULT {setting} {key} {w.size} {sps:.1f} {per_rank} {step * 1e3:.3f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=300, help="timed steps at 64 samples/rank (fewer for larger batches)")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--batches", dest="batches_arg", default="64,256,1024",
                    help="samples per rank per step, comma-separated (weak scaling)")
    ap.add_argument("--strong", type=int, default=512, help="global batch for strong scaling")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--handwritten", action="store_true")
    ap.add_argument("--threads", action="store_true",
                    help="keep the libraries' default thread pools (default: one BLAS/Numba thread per rank)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.batches = [int(b) for b in a.batches_arg.split(",")]
    if a.child:
        child(a)
        return
    load0 = os.getloadavg()[0]
    rows = {}
    grad = "?"
    for p in (1, 2):
        cmd = [_mpiexec(), "-n", str(p), sys.executable, "-m", "mpi4py", os.path.abspath(__file__), "--child",
               "--steps", str(a.steps), "--warmup", str(a.warmup), "--batches", a.batches_arg,
               "--strong", str(a.strong), "--hidden", str(a.hidden)] \
            + (["--handwritten"] if a.handwritten else []) + (["--threads"] if a.threads else [])
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            sys.exit(f"ddp_scaling at p={p} failed:\n{r.stdout}\n{r.stderr}")
        for line in r.stdout.splitlines():
            if line.startswith("GRAD"):
                grad = line[5:]
            if line.startswith("RESULT"):
                _, setting, key, size, sps, per_rank, step_ms = line.split()
                rows[(setting, int(key), int(size))] = (float(sps), int(per_rank), float(step_ms))
    print(f"digits MLP 64-{a.hidden}-10, DataParallel.step ({grad}), {os.cpu_count()} cores, "
          f"{'default thread pools' if a.threads else '1 BLAS/Numba thread per rank'}, "
          f"load average {load0:.2f} before / {os.getloadavg()[0]:.2f} after")
    print(f"{'setting':<8} {'ranks':>5} {'batch/rank':>10} {'ms/step':>8} {'samples/s':>10} {'speedup':>8}")
    order = {"weak": 0, "strong": 1, "no-comm": 2}
    for (setting, key) in sorted({(k[0], k[1]) for k in rows}, key=lambda t: (order[t[0]], t[1])):
        base = rows[(setting, key, 1)][0]
        for p in (1, 2):
            sps, per_rank, step_ms = rows[(setting, key, p)]
            print(f"{setting:<8} {p:>5} {per_rank:>10} {step_ms:>8.3f} {sps:>10.0f} {sps / base:>7.2f}x")


if __name__ == "__main__":
    main()
