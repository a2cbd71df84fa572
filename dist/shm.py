"""The node shared-memory region through which ring_allreduce reduces repeated mid-size calls.

Owns :class:`NodeShm` (an ``MPI_Win_allocate_shared`` window with per-rank
counters, agreement rows and input slots, and two output slots; its
docstring gives the steps of one call and what orders them), the sizes it
serves (``NODE_SHM_MIN_BYTES`` to ``NODE_SHM_BYTES``) and :func:`chunk_bounds`,
the cut into ``p`` contiguous chunks that it and the ring share. Running a
call through it (the two counter barriers) is
:meth:`Speculation.shm_round <funcgrad.dist.speculation.Speculation.shm_round>`.
"""
from __future__ import annotations

import platform

import numpy as np

__all__ = ["NodeShm", "NODE_SHM_MIN_BYTES", "NODE_SHM_BYTES", "ROW_WORDS", "chunk_bounds"]


#: int64 words per agreement row: the operation code and the 5 signature fields
#: (``speculation.SIG_NAMES``)
ROW_WORDS = 6
#: Message sizes (bytes per rank) that ring_allreduce reduces through node shared memory.
#: Below the lower bound MPI's one small allreduce beats two barriers (benchmarks/dist_tuning.md)
NODE_SHM_MIN_BYTES = 16 << 10
NODE_SHM_BYTES = 1 << 20
_NODE_SHM_TOTAL = 32 << 20     # and the data part of the region stays under this many bytes


class NodeShm:
    """A node shared-memory region for ring_allreduce's repeated mid-size calls.

    When every rank of the job shares one node, an ``MPI_Win_allocate_shared``
    window holds, per rank, an arrival counter, a reduction counter, two
    agreement rows (by call parity) and an input slot of ``cap`` bytes, plus
    two output slots (by parity). A call ``c`` with the current speculative
    signature (``Spec.shm``) then needs no MPI call at all:

    1. copy ``x`` into my input slot, write my call's signature row (parity
       ``c % 2``), set my arrival counter to ``c``;
    2. wait until every arrival counter is ``c``; every rank now reads the
       same rows: all equal to the current signature, or else every rank stops
       here and decides alike (:meth:`Speculation.decide_rows`: the plain
       path, or the same CommMismatchError) -- the agreement check rides in
       the barrier the reduction needs anyway;
    3. sum my chunk (:func:`chunk_bounds`) of every rank's input, in
       rank order, into output ``c % 2`` and set my reduction counter;
    4. wait until every reduction counter is ``c``; the caller copies the
       output (every rank the same bytes, as with the ring).

    A rank reuses its input slot only after step 4, when every rank has read
    it; output ``c % 2`` is written again at call ``c + 2``, after every rank
    has arrived there, so after every rank has copied it. Each wait has the
    world's deadline and names the ranks whose counters lag. Every rank moves
    ``x`` in, ``1/p`` of every input through the adder and the result out:
    fewer copies than MPI's shared-memory allreduce, which also moves every
    step's message through its cells (0.71-0.76x ``comm.Allreduce`` at 1e5
    float32, ``benchmarks/dist_tuning.md``). Stores and loads are
    ordered by ``MPI_Win_sync`` except on x86-64, whose memory order already
    keeps them. Creating the region (``Split_type``, ``Win_allocate_shared``
    and one node barrier: blocking calls with no deadline of their own)
    happens once, when every rank agreed on a new signature a moment before.
    """

    def __init__(self, w):
        self.win = None
        self.cap = 0
        MPI = w.MPI
        if not w.node_shm or not hasattr(MPI.Win, "Allocate_shared"):
            return
        node = w.comm.Split_type(MPI.COMM_TYPE_SHARED, key=w.rank)
        try:
            if node.Get_size() != w.size:          # the same answer on every rank
                return
            p, r = w.size, w.rank
            cap = min(NODE_SHM_BYTES, _NODE_SHM_TOTAL // (p + 2)) // 64 * 64
            head = -(-(2 * p + 2 * p * ROW_WORDS) * 8 // 64) * 64
            nbytes = head + (p + 2) * cap
            self.win = MPI.Win.Allocate_shared(nbytes if r == 0 else 0, 1, comm=node)
            buf, _ = self.win.Shared_query(0)
            self.buf, self.head, self.cap, self.p = buf, head, cap, p
            cnt = np.ndarray(buffer=buf, dtype=np.int64, shape=(2, p))
            self.arrived, self.reduced = cnt[0], cnt[1]
            self.rows = np.ndarray(buffer=buf, dtype=np.int64, shape=(2, p, ROW_WORDS),
                                   offset=2 * p * 8)
            self.arrived[r] = 0
            self.reduced[r] = 0
            self.rows[:, r] = 0
            self.win.Lock_all(MPI.MODE_NOCHECK)
            self.sync = None if platform.machine() in ("x86_64", "AMD64") else self.win.Sync
            if self.sync is not None:
                self.sync()
            node.Barrier()
            self.count = 0
            self.written = [None, None]
        finally:
            node.Free()

    def views(self, dt, n, rank):
        """(every rank's input slot, this rank's chunk of each, the two outputs, this rank's chunk
        of each) as ``dt`` arrays of ``n`` elements."""
        lo, hi = chunk_bounds(n, self.p)[rank:rank + 2]
        mk = lambda k: np.ndarray(buffer=self.buf, dtype=dt, shape=(n,), offset=self.head + k * self.cap)  # noqa: E731
        ins = [mk(k) for k in range(self.p)]
        outs = [mk(self.p + k) for k in range(2)]
        return ins, [a[lo:hi] for a in ins], outs, [a[lo:hi] for a in outs]


def chunk_bounds(n, p):
    """Offsets of ``p`` contiguous chunks of ``n`` elements (sizes differ by at most one)."""
    q, r = divmod(n, p)
    offs = [0] * (p + 1)
    for i in range(p):
        offs[i + 1] = offs[i] + q + (1 if i < r else 0)
    return offs



