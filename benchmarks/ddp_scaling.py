"""Data-parallel throughput of the digits MLP on 1 and 2 ranks (samples/s).

    .venv/bin/python benchmarks/ddp_scaling.py [--steps 300] [--batches 64,256,1024] [--repeats 3]
                                               [--handwritten] [--unfused] [--threads]

Launches itself under mpiexec with 1 and 2 ranks, alternately, ``--repeats``
times each. Each rank runs the full ``DataParallel.step`` (local gradient of
the MLP from examples/ddp_digits.py with ``funcgrad.value_and_grad`` -- or
``--handwritten`` -- then the allreduce of the gradients, then SGD with
momentum as one fused update over the flat parameter vector, or per leaf with
``--unfused``; the cross-rank parameter checksum every ``--check-every``
steps, DataParallel's default 100), after warm-up steps that also trigger
compilation. Fairness: the 1-rank run executes the same ``DataParallel.step``
code (its allreduce is a copy) on the same data indexing, and each rank uses
one BLAS and one Numba thread, set in-process with threadpoolctl /
numba.set_num_threads for 1 and 2 ranks alike (DDP runs one process per
device; ``--threads`` keeps the default pools); no environment variable is
changed. Each figure is the median of ``--rounds`` timed rounds (slowest
rank); ranges are over the launches. Settings:

* weak scaling: ``--batches`` samples per rank per step (the global batch
  grows with the ranks), the usual data-parallel throughput figure; the
  digits MLP is tiny, so per-step costs that do not shrink with the batch
  (the allreduce latency, waiting for the slower rank) decide how large a
  per-rank batch must be before a second rank pays;
* strong scaling: a fixed global batch ``--strong`` split over the ranks
  (bounded by how the gradient's cost grows with the batch: one rank does
  512 samples in about 1.5x the time of 256, so 2 ranks cannot reach 2x);
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
    import funcgrad  # noqa: F401
    import funcgrad.dist as fd
    pinned = [] if a.threads else _one_thread_per_rank()
    from ddp_digits import init_mlp, load_data, make_grad, make_optimizer

    w = fd.world()
    (Xtr, ytr), _ = load_data(0)
    Y1h = np.eye(10)[ytr]
    vg, desc = make_grad(a.handwritten, Xtr, Y1h, w.rank)
    if w.rank == 0:
        print(f"GRAD {desc}", flush=True)
        print(f"PINNED {'+'.join(pinned) or 'none'}", flush=True)
    results = {}
    settings = [("weak", b) for b in a.batches] + [("strong", a.strong // w.size)]

    def timed_rounds(step_fn, steps):
        """Median over ``a.rounds`` blocks of ``steps`` steps of the slowest rank's seconds per step."""
        per = []
        for _ in range(a.rounds):
            w.barrier()
            t0 = time.perf_counter()
            for s in range(steps):
                step_fn(s)
            w.barrier()
            per.append((time.perf_counter() - t0) / steps)
        return float(np.median(per))

    for setting, per_rank in settings:
        dp = fd.DataParallel(make_optimizer(0.05), grad_fn=vg, returns_loss=True,
                             check_every=a.check_every, fused=None if not a.unfused else False)
        params, st = dp.init(init_mlp(0, hidden=a.hidden))
        rng = np.random.default_rng(w.rank)
        steps = max(30, int(a.steps * 64 / max(per_rank, 64)))
        idx = rng.integers(0, len(Xtr), size=(steps + a.warmup, per_rank))
        state = [params, st]

        def one(s, dp=dp, idx=idx, state=state):
            state[0], state[1] = dp.step(state[0], state[1], Xtr[idx[s]], Y1h[idx[s]])
        for s in range(a.warmup):
            one(s)
        dt = timed_rounds(lambda s: one(a.warmup + s), steps)
        results[(setting, per_rank if setting == "weak" else a.strong)] = (per_rank * w.size / dt, per_rank, dt)
    # machine ceiling: the same local work (gradient + optimizer) with no communication at all,
    # timed while the other rank does the same -- what 2 ranks can gain on this machine right now
    per_rank = a.batches[-1]
    dp = fd.DataParallel(make_optimizer(0.05), grad_fn=vg, returns_loss=True, check_every=0,
                         comm=fd.World(), fused=None if not a.unfused else False)   # a world of one rank
    params, st = dp.init(init_mlp(0, hidden=a.hidden))
    steps = max(30, int(a.steps * 64 / max(per_rank, 64)))
    idx = np.random.default_rng(w.rank).integers(0, len(Xtr), size=(steps + a.warmup, per_rank))
    state = [params, st]

    def solo(s):
        state[0], state[1] = dp.step(state[0], state[1], Xtr[idx[s]], Y1h[idx[s]])
    for s in range(a.warmup):
        solo(s)
    dt = timed_rounds(lambda s: solo(a.warmup + s), steps)
    dt = fd.allreduce_tree({"t": np.float64(dt)}, op="mean")["t"] if w.size > 1 else dt
    results[("no-comm", per_rank)] = (per_rank * w.size / dt, per_rank, dt)
    if w.rank == 0:
        for (setting, key), (sps, per_rank, step) in results.items():
            print(f"RESULT {setting} {key} {w.size} {sps:.1f} {per_rank} {step * 1e3:.4f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=300, help="timed steps per round at 64 samples/rank (fewer for larger batches)")
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds per launch (the median is kept)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="launches per rank count, alternating 1 and 2 ranks (ranges are over these)")
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--batches", dest="batches_arg", default="64,256,1024",
                    help="samples per rank per step, comma-separated (weak scaling)")
    ap.add_argument("--strong", type=int, default=512, help="global batch for strong scaling")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--check-every", type=int, default=100,
                    help="steps between cross-rank parameter checksums (DataParallel's default, 100)")
    ap.add_argument("--handwritten", action="store_true")
    ap.add_argument("--unfused", action="store_true", help="DataParallel(fused=False): per-leaf optimizer")
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
    grad, pinned = "?", "?"
    for rep in range(a.repeats):
        for p in (1, 2):
            cmd = [_mpiexec(), "-n", str(p), sys.executable, "-m", "mpi4py", os.path.abspath(__file__),
                   "--child", "--steps", str(a.steps), "--rounds", str(a.rounds), "--warmup", str(a.warmup),
                   "--batches", a.batches_arg, "--strong", str(a.strong), "--hidden", str(a.hidden),
                   "--check-every", str(a.check_every)] \
                + (["--handwritten"] if a.handwritten else []) + (["--threads"] if a.threads else []) \
                + (["--unfused"] if a.unfused else [])
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
            if r.returncode != 0:
                sys.exit(f"ddp_scaling at p={p} failed:\n{r.stdout}\n{r.stderr}")
            for line in r.stdout.splitlines():
                if line.startswith("GRAD"):
                    grad = line[5:]
                if line.startswith("PINNED"):
                    pinned = line[7:]
                if line.startswith("RESULT"):
                    _, setting, key, size, sps, per_rank, step_ms = line.split()
                    rows.setdefault((setting, int(key), int(size)), []).append(
                        (float(sps), int(per_rank), float(step_ms)))
    threads = ("default thread pools (--threads)" if a.threads else
               f"each rank pinned to 1 thread ({pinned}, set in-process with threadpoolctl / "
               f"numba.set_num_threads; no environment variable changed) in the 1- and 2-rank runs alike")
    print(f"digits MLP 64-{a.hidden}-10, DataParallel.step ({grad}; optimizer sgd+momentum, "
          f"{'per leaf' if a.unfused else 'fused flat update'}; parameter checksum every "
          f"{a.check_every or 'never'} steps), {os.cpu_count()} cores")
    print(f"fairness: the same DataParallel.step code and data indexing at 1 and 2 ranks (at 1 rank the "
          f"gradient allreduce is a copy); {threads}; 1- and 2-rank launches alternate, "
          f"{a.repeats} each; each figure is the median of {a.rounds} timed rounds of the slowest rank")
    print(f"load average {load0:.2f} before / {os.getloadavg()[0]:.2f} after; ranges are min-max over "
          f"the {a.repeats} launches, speedup = median 2-rank samples/s / median 1-rank samples/s "
          f"(range: worst and best pairing)")
    print(f"{'setting':<8} {'ranks':>5} {'batch/rank':>10} {'ms/step':>15} {'samples/s':>17} {'speedup':>18}")
    order = {"weak": 0, "strong": 1, "no-comm": 2}
    for (setting, key) in sorted({(k[0], k[1]) for k in rows}, key=lambda t: (order[t[0]], t[1])):
        base = [v[0] for v in rows[(setting, key, 1)]]
        for p in (1, 2):
            v = rows[(setting, key, p)]
            sps = [x[0] for x in v]
            ms = [x[2] for x in v]
            med = float(np.median(sps))
            sp = f"{med / np.median(base):.2f}x ({min(sps) / max(base):.2f}-{max(sps) / min(base):.2f})"
            print(f"{setting:<8} {p:>5} {v[0][1]:>10} {np.median(ms):>6.3f} ({min(ms):.3f}-{max(ms):.3f}) "
                  f"{med:>8.0f} ({min(sps):.0f}-{max(sps):.0f}) {sp:>18}")


if __name__ == "__main__":
    main()
