"""Run under mpiexec -n 2: ranks whose nodes look different still choose the same algorithms.

Rank 0 pins itself to one core before world(), so its node looks oversubscribed (2 ranks, 1
core) while rank 1's does not. ring_allreduce's MPI-or-ring threshold depends on that; if each
rank chose from its own node, a 400 KB call would go by MPI's allreduce on one rank and by the
ring on the other and never complete. Prints ``AGREEMENT OK`` on rank 0.
"""
import os

import numpy as np
from mpi4py import MPI

r = MPI.COMM_WORLD.Get_rank()
if r == 0:
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})

import funcgrad.dist as fd  # noqa: E402
from funcgrad.dist import ring  # noqa: E402

w = fd.world(timeout=20)
cores = len(os.sched_getaffinity(0))
assert (w.local_size > cores) == (r == 0), (r, w.local_size, cores)   # the nodes differ ...
assert w.oversubscribed, "... and every rank takes the oversubscribed thresholds"
assert ring._small_bytes(w) == ring.OVERSUBSCRIBED_SMALL_BYTES
x = np.full(100_000, r + 1.0, np.float32)
out = np.empty_like(x)
for rep in range(5):                       # plain, speculative and planned (bound) calls
    y = fd.ring_allreduce(x, out=out)
    assert np.all(y == 3.0), rep
    z = fd.ring_allreduce(x * 2)
    assert np.all(z == 6.0), rep
w.barrier()
if r == 0:
    print("AGREEMENT OK", flush=True)
