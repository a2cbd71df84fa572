"""Ring allreduce: bandwidth-optimal reduce-scatter then allgather.

Owns :func:`ring_allreduce`. The vector is cut into ``p`` contiguous chunks
(sizes differ by at most one element; zero-length chunks when ``n < p``).
In ``p - 1`` reduce-scatter steps each rank sends one chunk to its right
neighbour and adds the chunk from its left neighbour; chunk ``j`` ends fully
reduced on exactly one rank, which (for ``op="mean"``) divides it there; in
``p - 1`` allgather steps the reduced chunks travel round the ring straight
into the output. Every element of the result is therefore computed once, on
one rank, and copied byte-for-byte to the others: results are bit-identical
on every rank. Each rank moves ``2 (p-1)/p * n`` elements, the lower bound.

Messages go as ``Isend``/``Irecv`` pairs on preallocated contiguous buffers,
completed by the deadline-bounded poll of :meth:`World.wait`. Messages
smaller than ``SMALL_BYTES`` (measured with ``benchmarks/allreduce.py`` on
MPICH shared memory, where the ring's ``2 (p-1)`` latencies cost more than
the bandwidth it saves) go to MPI's own ``Iallreduce``. When a node runs
more ranks than it has cores (``mpiexec -n 4`` on 2 cores) each of the ring's
``2 (p-1)`` rounds waits for a descheduled neighbour, and MPICH's own
algorithms (fewer rounds) stay ahead up to a few MB: the threshold is then
``OVERSUBSCRIBED_SMALL_BYTES`` (measured: ring 1.35x MPI at 4 MB, 1.0x at
8-16 MB, 0.7-0.8x at 40 MB for p = 4 on 2 cores). Splitting each ring step
into 64 KB or 256 KB ``Isend``/``Irecv`` pieces to overlap the additions with
the transfers was measured too and did not pay on shared memory (equal at
256 KB pieces, up to 1.6x slower at 64 KB), so each step is one message.
"""
from __future__ import annotations

import os

import numpy as np

from .comm import World, dtype_code, world

__all__ = ["ring_allreduce", "SMALL_BYTES", "OVERSUBSCRIBED_SMALL_BYTES", "OPS"]

#: Below this many bytes ring_allreduce uses MPI's Iallreduce (see module docstring).
SMALL_BYTES = 256 * 1024
#: The same threshold when a node runs more ranks than it has cores.
OVERSUBSCRIBED_SMALL_BYTES = 8 * 2 ** 20


def _small_bytes(w) -> int:
    v = getattr(w, "_small_bytes", None)
    if v is None:
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cores = os.cpu_count() or 1
        v = OVERSUBSCRIBED_SMALL_BYTES if w.local_size > cores else SMALL_BYTES
        w._small_bytes = v
    return v

OPS = {"sum": 1, "mean": 2}

_SUPPORTED_KINDS = "iuf"


class _Scratch:
    """Receive buffers reused across calls (one per dtype, grown on demand)."""

    def __init__(self):
        self.bufs = {}

    def get(self, dtype, n):
        b = self.bufs.get(dtype)
        if b is None or b.size < n:
            b = np.empty(max(n, 1), dtype=dtype)
            self.bufs[dtype] = b
        return b[:n]


_SCRATCH = _Scratch()


def _chunk_bounds(n, p):
    q, r = divmod(n, p)
    counts = [q + (1 if i < r else 0) for i in range(p)]
    offs = [0] * (p + 1)
    for i in range(p):
        offs[i + 1] = offs[i] + counts[i]
    return offs


def ring_allreduce(x, op="sum", out=None, *, algorithm="auto", timeout=None, check=True,
                   comm: World | None = None):
    """Sum (or average) ``x`` over all ranks; every rank gets the same bits.

    Parameters
    ----------
    x : array_like
        Same shape and dtype on every rank (float32, float64 or an integer
        dtype). Not modified unless ``out is x`` (in place).
    op : "sum" or "mean"
        ``"mean"`` divides the sum by the number of ranks (floating dtypes only).
    out : ndarray, optional
        Preallocated contiguous result buffer with ``x``'s shape and dtype;
        ``out=x`` reduces in place.
    algorithm : "auto", "ring" or "mpi"
        ``"auto"`` uses MPI's Iallreduce below ``SMALL_BYTES`` (or
        ``OVERSUBSCRIBED_SMALL_BYTES`` when the node runs more ranks than
        cores) and the ring above; the others force one path.
    timeout : float, optional
        Deadline in seconds (default: the world's, ``FUNCGRAD_COMM_TIMEOUT``).
    check : bool
        First agree on length, dtype and op across ranks (one tiny allreduce);
        a mismatch raises :class:`CommMismatchError` on every rank.

    Returns the result array (``out`` when given). In a world of size 1 the
    result is a copy of ``x`` (or ``x`` itself in place).
    """
    w = comm if comm is not None else world()
    if op not in OPS:
        raise ValueError(f"ring_allreduce: op must be 'sum' or 'mean', received {op!r}")
    if algorithm not in ("auto", "ring", "mpi"):
        raise ValueError(f"ring_allreduce: algorithm must be 'auto', 'ring' or 'mpi', received {algorithm!r}")
    if out is not None and out is x:
        if not isinstance(x, np.ndarray) or not x.flags.c_contiguous or not x.flags.writeable:
            raise ValueError("ring_allreduce: in-place reduction (out=x) needs a writeable "
                             "C-contiguous numpy array")
        xa = x
    else:
        xa = np.ascontiguousarray(x)
    dt = xa.dtype
    if dt.kind not in _SUPPORTED_KINDS:
        raise TypeError(f"ring_allreduce: dtype {dt} is not supported; use float32, float64 or an "
                        f"integer dtype (received an array of {dt})")
    if op == "mean" and dt.kind != "f":
        raise TypeError(f"ring_allreduce: op='mean' needs a floating dtype, received {dt}; "
                        f"use op='sum' and divide, or cast to float64 first")
    if out is None:
        out = np.empty_like(xa)
    elif out is not x:
        if not isinstance(out, np.ndarray) or out.shape != xa.shape or out.dtype != dt \
                or not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError(f"ring_allreduce: out must be a writeable C-contiguous array of shape "
                             f"{xa.shape} and dtype {dt}; received "
                             f"{getattr(out, 'shape', type(out))} {getattr(out, 'dtype', '')}")
        if np.may_share_memory(out, xa):   # a different view of the same memory: MPI forbids aliasing
            xa = xa.copy()
    n = xa.size
    p = w.size
    if w.comm is None or p == 1:
        if out is not xa:
            np.copyto(out, xa)
        return out
    if check:
        w.check_same("ring_allreduce", {"length": n, "dtype": dtype_code(dt), "op": OPS[op]},
                     timeout=timeout)
    flat_out = out.reshape(-1)
    flat_in = xa.reshape(-1)
    use_mpi = algorithm == "mpi" or (algorithm == "auto" and n * dt.itemsize < _small_bytes(w))
    if use_mpi:
        _mpi_allreduce(w, flat_in, flat_out, op, timeout, inplace=out is xa)
    else:
        _ring(w, flat_in, flat_out, op, timeout)
    return out


def _mpi_allreduce(w, flat_in, flat_out, op, timeout, inplace):
    MPI = w.MPI
    seq = w.next_seq()
    if inplace:
        req = w.comm.Iallreduce(MPI.IN_PLACE, flat_out, op=MPI.SUM)
    else:
        req = w.comm.Iallreduce(flat_in, flat_out, op=MPI.SUM)
    w.wait([req], lambda: f"ring_allreduce #{seq} (MPI path, n={flat_out.size} {flat_out.dtype})",
           timeout=timeout, seq=seq)
    if op == "mean":
        flat_out /= w.size


def _ring(w, src, buf, op, timeout):
    """Ring allreduce of the contiguous 1-D ``src`` into ``buf`` (``src`` may be ``buf``).

    Out of place, ``src`` is never copied whole: the first reduce-scatter
    step sends straight from ``src``, each later step writes ``src + received``
    into ``buf``, and the one chunk that is never reduced locally arrives by
    the allgather. That saves a full read+write pass over the vector.
    """
    p, r = w.size, w.rank
    comm = w.comm
    n = buf.size
    offs = _chunk_bounds(n, p)
    right, left = (r + 1) % p, (r - 1) % p
    maxc = offs[1] - offs[0]
    tmp = _SCRATCH.get(buf.dtype, maxc)
    seq = w.next_seq()
    what = lambda: f"ring_allreduce #{seq} (ring, n={n} {buf.dtype})"  # noqa: E731
    wait = w.wait
    tag = 7
    # reduce-scatter
    for s in range(p - 1):
        sc = (r - s) % p
        rc = (r - s - 1) % p
        send = (src if s == 0 else buf)[offs[sc]:offs[sc + 1]]
        lo, hi = offs[rc], offs[rc + 1]
        recv = tmp[: hi - lo]
        rq = comm.Irecv(recv, source=left, tag=tag)
        sq = comm.Isend(send, dest=right, tag=tag)
        wait([rq, sq], what, peers=(left, right), timeout=timeout, seq=seq)
        np.add(src[lo:hi], recv, out=buf[lo:hi])
    own = (r + 1) % p
    if op == "mean":
        c = buf[offs[own]:offs[own + 1]]
        np.true_divide(c, p, out=c)
    # allgather
    for s in range(p - 1):
        sc = (r + 1 - s) % p
        rc = (r - s) % p
        rq = comm.Irecv(buf[offs[rc]:offs[rc + 1]], source=left, tag=tag)
        sq = comm.Isend(buf[offs[sc]:offs[sc + 1]], dest=right, tag=tag)
        wait([rq, sq], what, peers=(left, right), timeout=timeout, seq=seq)
