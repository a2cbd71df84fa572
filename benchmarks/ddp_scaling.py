"""Data-parallel throughput of the digits MLP on 1 and 2 ranks (samples/s).

    .venv/bin/python benchmarks/ddp_scaling.py [--steps 300] [--batches 64,256,1024] [--rounds 7]
                                               [--repeats 2] [--handwritten] [--unfused] [--threads]

Launches itself under ``mpiexec -n 2`` (``--repeats`` times, rounds pooled).
Each setting runs ``--rounds`` paired rounds: a 1-rank block (rank 0 alone,
``DataParallel`` on a world of one rank, whose allreduce is a copy, while
rank 1 sleeps in 1 ms naps -- the machine as a lone process sees it), then a
2-rank block (both ranks, the real allreduce). Pairing inside one launch
matters here: this VM's speed drifts by up to 1.7x between launches, which
made separate 1- and 2-rank launches report anything from 1.4x to 2.8x.
Each block runs the full ``DataParallel.step``: the local gradient of the MLP
from examples/ddp_digits.py with ``funcgrad.value_and_grad`` (or
``--handwritten``), the gradient allreduce, SGD with momentum as one fused
update over the flat parameter vector (per leaf with ``--unfused``), and the
cross-rank parameter checksum every ``--check-every`` steps (DataParallel's
default, 100). Fairness: the same step code at 1 and 2 ranks, fresh random
batches of the same size, and each rank uses one BLAS and one Numba thread,
set in-process with threadpoolctl / numba.set_num_threads in both blocks
alike (DDP runs one process per device; ``--threads`` keeps the default
pools); no environment variable is changed. Figures are medians over the
rounds with their range; the speedup of a round is its 2-rank samples/s over
its 1-rank samples/s. Settings:

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


def _idle_until_released(comm):
    """The other rank's share of a 1-rank block: sleep (1 ms naps, no spinning) until rank 0
    joins the barrier, so the 1-rank figure sees the machine as a lone process would."""
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(1e-3)


def _paired_round(comm, w, solo, steps1, duo, steps2, block):
    """Seconds per step of ``solo`` on rank 0 alone (rank 1 asleep), then of ``duo`` on both ranks."""
    if w.rank == 0:
        t0 = time.perf_counter()
        solo(steps1)
        t1 = (time.perf_counter() - t0) / steps1
        comm.Ibarrier().Wait()       # (a nonblocking barrier matches only another one)
    else:
        _idle_until_released(comm)
        t1 = 0.0
    return t1, block(duo, steps2)


def child(a):
    import funcgrad  # noqa: F401
    import funcgrad.dist as fd
    pinned = [] if a.threads else _one_thread_per_rank()
    from ddp_digits import init_mlp, load_data, make_grad, make_optimizer

    w = fd.world()
    if w.size != 2:
        raise SystemExit("ddp_scaling's child runs on exactly 2 ranks")
    comm = w.comm
    (Xtr, ytr), _ = load_data(0)
    Y1h = np.eye(10)[ytr]
    vg, desc = make_grad(a.handwritten, Xtr, Y1h, w.rank)
    if w.rank == 0:
        print(f"GRAD {desc}", flush=True)
        print(f"PINNED {'+'.join(pinned) or 'none'}", flush=True)
    fused = False if a.unfused else None

    def runner(per_rank, world, seed):
        """(step function, warm-up) of a DataParallel on ``world`` with its own data stream."""
        dp = fd.DataParallel(make_optimizer(0.05), grad_fn=vg, returns_loss=True,
                             check_every=a.check_every, fused=fused, comm=world)
        state = list(dp.init(init_mlp(0, hidden=a.hidden)))
        rng = np.random.default_rng(seed)

        def step(k):
            for _ in range(k):
                b = rng.integers(0, len(Xtr), size=per_rank)
                state[0], state[1] = dp.step(state[0], state[1], Xtr[b], Y1h[b])
        return step

    def block(step, steps):
        comm.Barrier()
        t0 = time.perf_counter()
        step(steps)
        dt = time.perf_counter() - t0
        return comm.allreduce(dt, op=w.MPI.MAX) / steps

    settings = [("weak", b, b) for b in a.batches] + [("strong", a.strong, a.strong // 2)]
    for setting, one_batch, two_batch in settings:
        steps1 = max(30, int(a.steps * 64 / max(one_batch, 64)))
        steps2 = max(30, int(a.steps * 64 / max(two_batch, 64)))
        solo = runner(one_batch, fd.World(), 1000) if w.rank == 0 else None   # a world of one rank
        duo = runner(two_batch, w, w.rank)
        if w.rank == 0:
            solo(a.warmup)
        comm.Barrier()
        duo(a.warmup)
        for rnd in range(a.rounds):          # paired rounds: 1 rank (the other asleep), then 2 ranks
            t1, t2 = _paired_round(comm, w, solo, steps1, duo, steps2, block)
            if w.rank == 0:
                print(f"ROUND {setting} {one_batch} {two_batch} {t1 * 1e3:.4f} {t2 * 1e3:.4f}", flush=True)
    # machine ceiling: the same local work with no communication, both ranks at once
    per_rank = a.batches[-1]
    steps = max(30, int(a.steps * 64 / max(per_rank, 64)))
    solo = runner(per_rank, fd.World(), 2000 + w.rank)
    solo(a.warmup)
    for rnd in range(a.rounds):
        t1, t2 = _paired_round(comm, w, solo, steps, solo, steps, block)
        if w.rank == 0:
            print(f"ROUND no-comm {per_rank} {per_rank} {t1 * 1e3:.4f} {t2 * 1e3:.4f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=300, help="timed steps per block at 64 samples/rank (fewer for larger batches)")
    ap.add_argument("--rounds", type=int, default=7,
                    help="paired rounds (a 1-rank block, then a 2-rank block) per setting and launch")
    ap.add_argument("--repeats", type=int, default=2, help="launches (their rounds are pooled)")
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
    rounds = {}
    grad, pinned = "?", "?"
    for rep in range(a.repeats):
        cmd = [_mpiexec(), "-n", "2", sys.executable, "-m", "mpi4py", os.path.abspath(__file__),
               "--child", "--steps", str(a.steps), "--rounds", str(a.rounds), "--warmup", str(a.warmup),
               "--batches", a.batches_arg, "--strong", str(a.strong), "--hidden", str(a.hidden),
               "--check-every", str(a.check_every)] \
            + (["--handwritten"] if a.handwritten else []) + (["--threads"] if a.threads else []) \
            + (["--unfused"] if a.unfused else [])
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            sys.exit(f"ddp_scaling failed:\n{r.stdout}\n{r.stderr}")
        for line in r.stdout.splitlines():
            if line.startswith("GRAD"):
                grad = line[5:]
            if line.startswith("PINNED"):
                pinned = line[7:]
            if line.startswith("ROUND"):
                _, setting, b1, b2, t1, t2 = line.split()
                rounds.setdefault((setting, int(b1), int(b2)), []).append((float(t1), float(t2)))
    threads = ("default thread pools (--threads)" if a.threads else
               f"each rank pinned to 1 thread ({pinned}, set in-process with threadpoolctl / "
               f"numba.set_num_threads; no environment variable changed) in the 1- and 2-rank blocks alike")
    print(f"digits MLP 64-{a.hidden}-10, DataParallel.step ({grad}; optimizer sgd+momentum, "
          f"{'per leaf' if a.unfused else 'fused flat update'}; parameter checksum every "
          f"{a.check_every or 'never'} steps), {os.cpu_count()} cores")
    print(f"fairness: the same DataParallel.step code at 1 and 2 ranks (at 1 rank a world of one rank: "
          f"the gradient allreduce is a copy); {threads}; the 1-rank block runs while the other process "
          f"sleeps, and 1- and 2-rank blocks alternate in {a.rounds} paired rounds per launch "
          f"({a.repeats} launch(es)), so a drift of the machine's speed hits both alike")
    print(f"load average {load0:.2f} before / {os.getloadavg()[0]:.2f} after; figures are medians over the "
          f"rounds (range min-max); speedup = 2-rank samples/s / 1-rank samples/s of the same round")
    print(f"{'setting':<8} {'batch 1 rank':>12} {'batch/rank 2':>12} {'1 rank samples/s':>24} "
          f"{'2 ranks samples/s':>24} {'speedup':>18}")
    order = {"weak": 0, "strong": 1, "no-comm": 2}
    for key in sorted(rounds, key=lambda k: (order[k[0]], k[1])):
        setting, b1, b2 = key
        v = rounds[key]
        s1 = np.array([b1 / (t1 / 1e3) for t1, _ in v])
        s2 = np.array([2 * b2 / (t2 / 1e3) for _, t2 in v])
        sp = s2 / s1
        print(f"{setting:<8} {b1:>12} {b2:>12} {np.median(s1):>9.0f} ({s1.min():.0f}-{s1.max():.0f}) "
              f"{np.median(s2):>9.0f} ({s2.min():.0f}-{s2.max():.0f}) "
              f"{np.median(sp):>6.2f}x ({sp.min():.2f}-{sp.max():.2f})")


if __name__ == "__main__":
    main()
