"""Run under mpiexec: one rank misbehaves, the job must fail fast and loudly.

usage: faults.py raise|exit|absent|absent-mpi|absent-repeated

raise       rank 1 raises while the others wait in ring_allreduce: the abort
            hook (installed by world()) must end the whole job, non-zero.
exit        rank 1 calls os._exit(3): the others must not hang.
absent      rank 2 never joins a ring allreduce (sleeps, then exits): every
            waiting rank raises CommTimeout naming rank 2 and prints
            ``TIMEOUT_NAMED rank=<r> ranks=<tuple>``.
absent-mpi  same on the small-message (MPI Iallreduce + argument check) path.
absent-repeated  same once repeated calls take node shared memory (no MPI
            call, see shm.NodeShm): rank 2 stops after a few calls.
"""
import os
import sys
import time

import numpy as np

import funcgrad.dist as fd

mode = sys.argv[1]
w = fd.world()
r, p = w.rank, w.size

if mode == "raise":
    if r == 1:
        time.sleep(0.2)
        raise RuntimeError("deliberate failure on rank 1")
    fd.ring_allreduce(np.ones(1000))
    print(f"rank {r} should not get here", flush=True)
elif mode == "exit":
    if r == 1:
        time.sleep(0.2)
        os._exit(3)
    fd.ring_allreduce(np.ones(2 ** 16), algorithm="ring")
    fd.ring_allreduce(np.ones(10))
    print(f"rank {r} should not get here", flush=True)
elif mode in ("absent", "absent-mpi", "absent-repeated"):
    if mode == "absent-repeated":
        xb, ob = np.ones(30000), np.empty(30000)
        for _ in range(6):
            fd.ring_allreduce(xb, out=ob)
        assert w._spec.cur is not None and w._spec.cur.shm is not None, "the calls must take node shared memory"
    if r == 2:
        time.sleep(3 * w.timeout + 3)
        os._exit(0)
    t0 = time.monotonic()
    try:
        if mode == "absent":
            fd.ring_allreduce(np.ones(2 ** 20), algorithm="ring", check=False)
        elif mode == "absent-repeated":
            fd.ring_allreduce(xb, out=ob)
        else:
            fd.ring_allreduce(np.ones(100))
    except fd.CommTimeout as e:
        dt = time.monotonic() - t0
        print(f"TIMEOUT_NAMED rank={r} ranks={e.ranks} after={dt:.1f}s msg={str(e)[:300]!r}", flush=True)
        sys.stdout.flush()
        time.sleep(1.5)   # let the other waiting ranks report too before the job is torn down
        os._exit(0)
    print(f"rank {r}: no CommTimeout", flush=True)
    os._exit(1)
else:
    raise SystemExit(f"unknown mode {mode}")
