"""ring_allreduce's speculative rounds: the agreement check folded into the data's own collective.

Owns :class:`Speculation` (per world: which agreed signature repeated calls
currently speculate on, the round that runs it, through MPI or through the
node region of :mod:`~funcgrad.dist.shm`, and what a round's sums say:
hit, every rank switched, or a mismatch) and :class:`Spec` (one agreed
signature: its persistent allreduce of ``[data | header]`` in the data's own
dtype, or its views of the node region).
"""
from __future__ import annotations

import hashlib
import zlib

import numpy as np

from . import _mpit
from .agreement import _MASK64, report_mismatch, signed64, varint
from .deadline import dup, user_site
from .errors import CommTimeout
from .shm import NODE_SHM_BYTES, NODE_SHM_MIN_BYTES

__all__ = ["Speculation", "Spec", "SPEC_DTYPES"]

_CRC_RING = zlib.crc32(b"ring_allreduce")


# limb width (bits) of a speculative round's header, by buffer dtype, and the largest world for
# which its sums of squares stay exact: float64 and int64 16 bits, float32 and int32 8 bits
SPEC_DTYPES = {"f8": (16, 1 << 20), "i8": (16, 1 << 20), "f4": (8, 258), "i4": (8, 1 << 14)}
_SPEC_PAYLOAD = 18          # bytes of the varint-coded signature (n, dtype code, op, shape code, algorithm)
#: the fields of a ring_allreduce signature (``ring._ring_allreduce``), in order
SIG_NAMES = ("length", "dtype", "op", "shape", "algorithm")


class Spec:
    """One agreed ring_allreduce signature and its persistent allreduce (see Speculation)."""

    def __init__(self, w, comm, sig, dt, with_data):
        bits, _ = SPEC_DTYPES[dt.str[1:]]
        self.sig, self.dt, self.bits = sig, dt, bits
        self.L = _SPEC_PAYLOAD * 8 // bits
        self.shm = None            # the node region when it reduces this signature (see NodeShm)
        nbytes = sig[0] * dt.itemsize
        if sig[4] == 0 and w.node_shm and NODE_SHM_MIN_BYTES <= nbytes <= NODE_SHM_BYTES:
            # algorithm "auto" only
            region = w.node_region()
            if region is not None and nbytes <= region.cap:
                self.shm = region
                self.ins, self.in_chunks, self.outs, self.out_chunks = region.views(dt, sig[0], w.rank)
                self.row = self.shm_row(sig)
                self.row_expect = self.row.tobytes() * w.size
                with_data = False  # the region carries the data; the round below is never run
        self.m = m = sig[0] if with_data else 0
        # a header-only round also carries a bound-request token t as (t, t*t): see ring._planned
        nt = 0 if with_data else 2
        self.buf_in = np.zeros(m + 2 * self.L + nt, dtype=dt)
        self.buf_out = np.zeros_like(self.buf_in)
        h = m + 2 * self.L
        self.data_in, self.hdr_in = self.buf_in[:m], self.buf_in[m:h]
        self.data_out, self.hdr_out = self.buf_out[:m], self.buf_out[m:h]
        self.tok_in = self.buf_in[h:] if nt else None
        self.tok_out = self.buf_out[h:] if nt else None
        self.tok_last = 0
        self.nbound = 0            # bound data requests created for this signature (ring._planned)
        self.p = w.size
        self.headers = {}
        self.own = own = self.header(sig)
        self.expect = (own * self.p).tobytes()
        self.hdr_in[:] = own
        self.last = own
        with _mpit.small_allreduce_algorithm(w, self.buf_in.nbytes):
            self.req = comm.Allreduce_init(self.buf_in, self.buf_out, op=w.MPI.SUM)

    def shm_row(self, sig):
        return np.array([_CRC_RING, *(signed64(v) for v in sig)], dtype=np.int64)

    def header(self, sig):
        h = self.headers.get(sig)
        if h is None:
            payload = bytearray()
            for v in sig:
                varint(int(v) & _MASK64, payload)
            if len(payload) > _SPEC_PAYLOAD:      # a length of 2^35 or more with a 2-D shape
                payload = bytearray(hashlib.blake2b(bytes(payload), digest_size=_SPEC_PAYLOAD).digest())
            payload += bytes(_SPEC_PAYLOAD - len(payload))
            v = int.from_bytes(bytes(payload), "little")
            mask = (1 << self.bits) - 1
            f = np.array([(v >> (self.bits * i)) & mask for i in range(self.L)], dtype=self.dt)
            h = np.concatenate([f, f * f])
            if len(self.headers) > 64:
                self.headers.clear()
            self.headers[sig] = h
        return h


class Speculation:
    """ring_allreduce's agreement check folded into the data collective of repeated calls.

    Training loops reduce the same signature (length, dtype, op, shape, algorithm)
    step after step. Once two consecutive checked calls had the same agreed
    signature, every rank holds the same :class:`Spec`: a persistent
    allreduce, on a communicator of its own, of ``[data | header]`` in the
    call's own dtype (the data only for messages below the ring threshold;
    a ring-size message sends the header alone). While it is current, every
    checked call of every rank runs exactly that collective -- whatever its
    own arguments, so the MPI calls always match -- with the header of its
    actual signature in the limb code of :class:`Control` (``f`` and ``f*f``,
    exact in the dtype). If the reduced header is ``p`` times the current
    signature's, every rank called with it and the data is already reduced:
    one collective, check included. Otherwise every rank sees the same sums:
    if they show equal headers (the Cauchy-Schwarz test per limb) everyone
    switched to the same new signature and proceeds without a further check;
    else every rank raises the same CommMismatchError. After a miss the
    speculation stops until a signature repeats, so alternating signatures
    cost the plain path, not a wasted round each; data rides in the round
    only up to ``ring.SPEC_DATA_BYTES``, which bounds what a miss wastes.
    The round runs on its own communicator: a rank that meanwhile calls a
    different collective (a program error) makes both sides reach their
    deadline, which raises CommTimeout, instead of a mismatch report.
    """

    def __init__(self, w):
        self.comm = dup(w.comm, w.timeout, "world(): duplicating the communicator for ring_allreduce")
        self.comm.Set_errhandler(w.MPI.ERRORS_RETURN)
        self.cur = None
        self.last = None
        self.cache = {}
        self.ok = hasattr(self.comm, "Allreduce_init")

    def note(self, w, sig, dt, with_data):
        """A checked call with ``sig`` was agreed by every rank the plain way."""
        if sig == self.last and self.ok:
            spec = self.cache.get((sig, with_data))
            if spec is None:
                ent = SPEC_DTYPES.get(dt.str[1:])
                if ent is None or w.size > ent[1]:
                    self.last = sig
                    return
                try:
                    spec = Spec(w, self.comm, sig, dt, with_data)
                except (NotImplementedError, w.MPI.Exception):     # no persistent collectives
                    self.ok = False
                    return
                if len(self.cache) >= 8:
                    old = self.cache.pop(next(iter(self.cache)))
                    old.req.Free()
                self.cache[(sig, with_data)] = spec
            self.cur = spec
        self.last = sig

    def round(self, w, sig, data, timeout, tok=0):
        """The speculative collective of a checked call with ``sig``: the reduced data (a view of
        the internal buffer, empty for a header-only round) when ``sig`` is the current signature
        on every rank; None when every rank has the same other signature (then the caller
        reduces the plain way, with no further check); raises CommMismatchError otherwise.
        A header-only round also sums the token ``tok`` and its square (``spec.tok_out``)."""
        spec = self.cur
        ctl = w._ctl
        if ctl.broken is not None:
            raise CommTimeout(f"{user_site()}: ring_allreduce: this communicator is unusable after an "
                              f"earlier timeout in {ctl.broken}; end the job", ranks=(),
                              operation="ring_allreduce")
        if spec.shm is not None:
            return self.shm_round(w, spec, sig, data, timeout)
        if sig == spec.sig:
            if spec.last is not spec.own:            # the header stays in the buffer between calls
                spec.hdr_in[:] = spec.own
                spec.last = spec.own
            if spec.m:
                spec.data_in[...] = data
        else:
            h = spec.header(sig)
            spec.hdr_in[:] = h
            spec.last = h
        if tok != spec.tok_last and spec.tok_in is not None:
            spec.tok_in[0] = tok
            spec.tok_in[1] = tok * tok
            spec.tok_last = tok
        w._seq += 1
        req = spec.req
        req.Start()
        self.complete(w, req, timeout)
        return self.result(w, spec, sig, timeout)

    @staticmethod
    def complete(w, req, timeout):
        """Finish a started round: a short spin, then :meth:`World.wait` (a timeout leaves the
        world's control unusable: the ranks no longer agree on which round is which)."""
        ctl = w._ctl
        test = req.Test
        k = ctl.spin
        while not test():
            k -= 1
            if k < 0:
                try:
                    w.wait([req], "ring_allreduce", timeout=timeout, seq=w._seq)
                except CommTimeout:
                    ctl.broken = f"ring_allreduce #{w._seq}"
                    raise
                return

    def shm_round(self, w, spec, sig, data, timeout):
        """:meth:`round` through the node region (see :class:`NodeShm` for the steps)."""
        sh = spec.shm
        c = sh.count = sh.count + 1
        par = c & 1
        r = w.rank
        if sig == spec.sig:
            np.copyto(spec.ins[r], data)
            row = spec.row
        else:
            row = spec.shm_row(sig)
        if sh.written[par] is not row:
            sh.rows[par, r] = row
            sh.written[par] = row
        self._shm_barrier(w, sh, sh.arrived, c, timeout)
        rows = sh.rows[par]
        if rows.tobytes() != spec.row_expect:
            return self.decide_rows(w, spec, sig, rows.copy(), timeout)
        ch = spec.in_chunks
        out = spec.out_chunks[par]
        np.add(ch[0], ch[1], out=out)
        for k in range(2, sh.p):
            np.add(out, ch[k], out=out)
        self._shm_barrier(w, sh, sh.reduced, c, timeout)
        return spec.outs[par]

    @staticmethod
    def _shm_barrier(w, sh, counters, c, timeout):
        """Set my ``counters`` entry to ``c`` (after my stores) and wait until every rank's is."""
        sync = sh.sync
        if sync is not None:
            sync()
        counters[w.rank] = c
        if counters.min() < c:
            Speculation._shm_wait(w, counters, c, timeout)
        if sync is not None:
            sync()

    @staticmethod
    def _shm_wait(w, counters, c, timeout):
        t = w.timeout if timeout is None else float(timeout)
        res = w.poll(lambda: counters.min() >= c, t)
        if res is True:
            return
        if res:
            w._ctl.broken = "ring_allreduce (node shared memory)"
            raise w._rank_failure("ring_allreduce (node shared memory)", res, t)
        late = [k for k in range(w.size) if counters[k] < c]
        w._ctl.broken = "ring_allreduce (node shared memory)"
        raise CommTimeout(
            f"{user_site()}: ring_allreduce (node shared memory) timed out after {t:g} s on rank "
            f"{w.rank}: rank(s) {late} never joined it (waited for rank(s) {late}). Every rank must "
            f"make the same collective calls in the same order; raise FUNCGRAD_COMM_TIMEOUT if a "
            f"rank is just slow.", ranks=late, operation="ring_allreduce", timeout=t)

    def decide_rows(self, w, spec, sig, rows, timeout=None):
        """:meth:`result` for a node shared-memory round, from every rank's signature row (the
        same rows on every rank, not all equal to ``spec``'s): every rank with one other
        signature: None; else raise the same CommMismatchError on every rank."""
        self.cur = None
        if (rows == rows[0]).all():
            self.last = sig
            return None
        self.last = None
        report_mismatch(w, self.comm, "ring_allreduce", SIG_NAMES, _CRC_RING, sig, timeout)

    def result(self, w, spec, sig, timeout):
        """What a completed round of ``spec`` (for a call with ``sig``) says; see :meth:`round`."""
        if spec.hdr_out.tobytes() == spec.expect:
            return spec.data_out                      # every rank: the current signature
        self.cur = None
        self.last = None
        L = spec.L
        s1 = [int(v) for v in spec.hdr_out[:L]]
        s2 = [int(v) for v in spec.hdr_out[L:]]
        if all(a * a == spec.p * b for a, b in zip(s1, s2)):
            self.last = sig                           # every rank: the same new signature
            return None
        report_mismatch(w, self.comm, "ring_allreduce", SIG_NAMES, _CRC_RING, sig, timeout)

