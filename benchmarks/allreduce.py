"""ring_allreduce against MPI's own Allreduce, float32, 1e3..1e7 elements.

Run it plainly, it launches itself under mpiexec for p = 2 and p = 4 and
prints one table:

    .venv/bin/python benchmarks/allreduce.py [--ps 2,4] [--reps N]

Both sides reduce the same preallocated contiguous buffers (same malloc
settings: nothing is allocated inside the timed loops). Columns: time per
call of ``comm.Allreduce`` (blocking, MPICH's tuned algorithms), of
``ring_allreduce`` as shipped (``auto``: MPI's Iallreduce below
``SMALL_BYTES``, the ring above, argument check included), of the ring
forced at every size and of the MPI path forced at every size (how the
thresholds were chosen), and of ``auto`` with ``check=False`` (the cost of
the cross-rank length/dtype agreement check); bus bandwidth
``2 (p-1)/p * bytes / time``; and the ratio auto / MPI (target <= 1.1 at
>= 1e5 elements, <= 1.5 below). Each figure is the median over rounds of the
slowest rank's mean time per call; every timed block starts with 3 untimed
calls, because the columns alternate signatures and the figure wanted is a
training loop's steady state (repeated calls with one signature: the
agreement check then rides in the data's own collective, see
``funcgrad.dist.speculation.Speculation``; a call with a new signature costs one
extra small round, and the two after it take the plain path).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np

ROUNDS = 9   # interleaved timing rounds per size; the median is reported
SIZES = [int(float(v)) for v in os.environ.get('BENCH_SIZES', '1e3,1e4,1e5,1e6,1e7').split(',')]


def _mpiexec():
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else "mpiexec"


def _time(fn, reps, comm):
    for _ in range(3):   # untimed: the columns alternate, and ring_allreduce's speculative check
        fn()             # (repeated calls) settles on a new signature after two calls
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    dt = (time.perf_counter() - t0) / reps
    return comm.allreduce(dt, op=__import__("mpi4py.MPI").MPI.MAX)


def run_ranks(reps_scale):
    from mpi4py import MPI
    import funcgrad.dist as fd

    w = fd.world()
    comm = MPI.COMM_WORLD
    p = w.size
    rows = []
    for n in SIZES:
        x = np.random.default_rng(w.rank).standard_normal(n).astype(np.float32)
        out = np.empty_like(x)
        # calibrate: about 0.1 s of MPI Allreduce per timed block (times --reps)
        for _ in range(3):
            comm.Allreduce(x, out, op=MPI.SUM)
        t1 = _time(lambda: comm.Allreduce(x, out, op=MPI.SUM), 3, comm)
        reps = int(max(3, min(2000, reps_scale * 0.1 / max(t1, 1e-7))))
        reps = comm.bcast(reps, root=0)
        fns = {
            "mpi": lambda: comm.Allreduce(x, out, op=MPI.SUM),
            "auto": lambda: fd.ring_allreduce(x, out=out),
            "ring": lambda: fd.ring_allreduce(x, out=out, algorithm="ring"),
            "inb": lambda: fd.ring_allreduce(x, out=out, algorithm="mpi"),
            "nochk": lambda: fd.ring_allreduce(x, out=out, check=False),
        }
        for f in fns.values():  # warm up (buffers, connections)
            f()
            f()
        res = {k: [] for k in fns}
        for _ in range(ROUNDS):  # interleaved rounds so drift hits every column alike
            for k, f in fns.items():
                res[k].append(_time(f, reps, comm))
        med = {k: float(np.median(v)) for k, v in res.items()}
        rows.append((n, med))
    if w.rank == 0:
        for n, med in rows:
            nbytes = 4 * n
            bus = lambda t: 2 * (p - 1) / p * nbytes / t / 1e9
            print(f"{p:>2} {n:>10.0e} {med['mpi']*1e6:>11.1f} {bus(med['mpi']):>7.2f} "
                  f"{med['auto']*1e6:>11.1f} {bus(med['auto']):>7.2f} "
                  f"{med['ring']*1e6:>11.1f} {med['auto']/med['mpi']:>7.2f}x "
                  f"{med['ring']/med['mpi']:>7.2f}x {med['inb']/med['mpi']:>7.2f}x "
                  f"{med['nochk']/med['mpi']:>7.2f}x", flush=True)


HEADER = (" p      elems     MPI(us)  GB/s*   auto(us)  GB/s*    ring(us)  auto/MPI ring/MPI  Iallr/MPI nocheck/MPI\n"
          "                                                      (forced)            (forced)  (check=False)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ps", default="2,4", help="comma-separated rank counts (default 2,4)")
    ap.add_argument("--reps", type=float, default=1.0, help="scale the repetition counts")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        run_ranks(a.reps)
        return
    from funcgrad.dist.ring import OVERSUBSCRIBED_SMALL_BYTES, SMALL_BYTES
    print(f"ring_allreduce vs comm.Allreduce, float32; auto = MPI's allreduce below {SMALL_BYTES} bytes "
          f"({OVERSUBSCRIBED_SMALL_BYTES} when ranks > cores, here {os.cpu_count()} cores), ring above, "
          f"length/dtype check included; GB/s* = bus bandwidth; steady state of repeated calls")
    print(HEADER, flush=True)
    for p in [int(s) for s in a.ps.split(",")]:
        cmd = [_mpiexec(), "-n", str(p), sys.executable, "-m", "mpi4py", os.path.abspath(__file__),
               "--child", "--reps", str(a.reps)]
        r = subprocess.run(cmd, timeout=900)
        if r.returncode != 0:
            sys.exit(f"benchmark at p={p} failed with exit code {r.returncode}")


if __name__ == "__main__":
    main()
