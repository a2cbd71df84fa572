"""The cross-rank agreement check: every rank called the same collective alike, or every rank
raises the same :class:`CommMismatchError`.

Owns :class:`Control` (the check folded into one fixed-size persistent
allreduce that small floating messages share), the header code the
speculative rounds reuse (:func:`varint`, :func:`signed64`: integer fields
as 16-bit limbs ``f`` sent with ``f*f``, so the sum shows whether every rank
sent the same), the stable dtype codes of the check (:func:`dtype_code`) and
the mismatch report (:func:`mismatch_error`).
"""
from __future__ import annotations

import hashlib
import zlib

import numpy as np

from . import _mpit
from .deadline import dup, user_site
from .errors import CommMismatchError, CommTimeout

__all__ = ["Control", "CONTROL_SLOTS", "mismatch_error", "dtype_code", "varint", "signed64"]


#: float64 payload slots of the control allreduce (small floating messages ride in it). With the
#: header the buffer is 8 KB, the largest size MPICH's shared-memory allreduce still moves in one
#: cell (measured on 2 cores: 1024 doubles 5.4 us, 1088 doubles 8.6 us, 2048 doubles 19 us at p = 2).
#: The same on every rank: it fixes the message size of a collective every rank calls alike.
CONTROL_SLOTS = 1000
_HDR_LIMBS = 12                       # 16-bit limbs: operation code (2), exact/hashed flag, 9 of fields
_HDR = 2 * _HDR_LIMBS                 # each limb f and its square f*f
_MASK64 = (1 << 64) - 1
_MAX_FIELDS = 7
_KINDS: dict = {}                     # operation code -> name, for mismatch reports


def varint(v, out):
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return


def signed64(v):
    v &= _MASK64
    return v - (1 << 64) if v >> 63 else v


class Control:
    """The agreement check folded into one fixed-size persistent allreduce.

    Every rank owns a float64 buffer of ``CONTROL_SLOTS`` payload slots plus
    a header, and one persistent ``Allreduce_init`` over it on a communicator
    of its own (``Start`` + a deadline-bounded poll per use: cheaper than
    ``MPI_Allreduce`` itself for a few KB on MPICH shared memory, and its
    size never depends on the caller's arguments, so ranks that disagree
    still make matching MPI calls). The header carries the operation's
    code (crc32 of its name) and its integer fields (length, dtype code, op,
    tree signature, ...) as a prefix-free varint string (a 144-bit blake2b
    hash of it if it is longer than 18 bytes), split into 16-bit limbs
    ``f``, each sent as ``f`` and ``f*f`` (exact float64 sums up to 2^21 ranks). After the
    sum, a rank whose own header times ``p`` equals the reduced header knows
    that every rank sent the same limbs: ``sum f = p f_me`` and
    ``sum f^2 = p f_me^2`` give ``(sum f)^2 = p sum f^2``, the equality case
    of Cauchy-Schwarz, which holds iff all ``f`` are equal. The reduced
    header is the same on every rank (exact integer sums), so either every
    rank passes or every rank fails and raises the same
    :class:`CommMismatchError` (after one allgather of everyone's fields for
    the message). Floating messages of at most ``CONTROL_SLOTS`` elements
    travel in the payload (summed in float64, then rounded once to their
    dtype), so a small ``ring_allreduce`` is one collective, check included.
    """

    def __init__(self, w):
        MPI = w.MPI
        self.w = w
        self.p = w.size
        self.comm = dup(w.comm, w.timeout, "world(): duplicating the communicator for agreement checks")
        self.comm.Set_errhandler(MPI.ERRORS_RETURN)
        self.slots = CONTROL_SLOTS
        self.buf_in = np.zeros(self.slots + _HDR)
        self.buf_out = np.zeros_like(self.buf_in)
        self.data_in, self.hdr_in = self.buf_in[:self.slots], self.buf_in[self.slots:]
        self.data_out, self.hdr_out = self.buf_out[:self.slots], self.buf_out[self.slots:]
        self.cache = {}
        self.ring_entries = {}             # (n, dtype, op, algorithm) -> (entry, signature)
        self.last = None
        self.broken = None
        # polls before World.wait takes over: spin when every rank has a core, yield at once when not
        self.spin = 1 if w._yield_after < 100 else 200
        try:
            with _mpit.small_allreduce_algorithm(w, self.buf_in.nbytes):
                self.req = self.comm.Allreduce_init(self.buf_in, self.buf_out, op=MPI.SUM)
        except (AttributeError, NotImplementedError, MPI.Exception):   # MPI before 4.0
            self.req = None

    def _entry(self, kind, names, vals):
        """(header, expected reduced header bytes, code) for this operation and these fields."""
        if len(vals) > _MAX_FIELDS:
            raise ValueError(f"funcgrad.dist: at most {_MAX_FIELDS} agreement fields, received {names}")
        code = zlib.crc32(kind.encode())
        _KINDS[code] = kind
        payload = bytearray()
        for v in vals:                     # a prefix-free code: exact, injective per operation
            varint(v & _MASK64, payload)
        flag = 0
        if len(payload) > 2 * (_HDR_LIMBS - 3):   # does not fit: a 144-bit hash of the fields instead
            payload = bytearray(hashlib.blake2b(bytes(payload), digest_size=2 * (_HDR_LIMBS - 3)).digest())
            flag = 1
        payload += bytes(2 * (_HDR_LIMBS - 3) - len(payload))
        limbs = [code & 0xFFFF, code >> 16, flag] + [payload[2 * i] | (payload[2 * i + 1] << 8)
                                                     for i in range(_HDR_LIMBS - 3)]
        f = np.array(limbs, dtype=np.float64)
        hdr = np.concatenate([f, f * f])
        ent = self.cache[(kind, vals)] = (hdr, (hdr * self.p).tobytes(), code, kind, vals)
        if len(self.cache) > 4096:
            self.cache.clear()
            self.ring_entries.clear()
        return ent

    def entry(self, kind, names, vals):
        """The cached header entry of operation ``kind`` with integer fields ``vals``."""
        ent = self.cache.get((kind, vals))
        return ent if ent is not None else self._entry(kind, names, vals)

    def run(self, kind, names, vals, what, data=None, timeout=None):
        """One control allreduce: agree on ``vals`` (and sum the 1-D floating ``data``
        of at most ``slots`` elements, when given). Returns the reduced payload
        (a float64 view of the internal buffer, valid until the next call) or None."""
        ent = self.cache.get((kind, vals))
        if ent is None:
            ent = self._entry(kind, names, vals)
        return self.run_entry(ent, names, what, data, timeout)

    def run_entry(self, ent, names, what, data=None, timeout=None):
        if self.broken is not None:
            raise CommTimeout(f"{user_site()}: {what}: this communicator is unusable after an earlier "
                              f"timeout in {self.broken}; end the job", ranks=(), operation=what)
        if ent is not self.last:           # the header stays in the buffer between calls
            self.hdr_in[:] = ent[0]
            self.last = ent
        if data is not None:
            self.data_in[:data.size] = data
        w = self.w
        w._seq += 1
        req = self.req
        if req is not None:
            req.Start()
        else:
            req = self.comm.Iallreduce(self.buf_in, self.buf_out, op=w.MPI.SUM)
        test = req.Test
        k = self.spin
        while not test():                  # a short spin (the usual case: everyone is there) ...
            k -= 1
            if k < 0:                      # ... then the deadline-bounded poll
                try:
                    w.wait([req], what, timeout=timeout, seq=w._seq)
                except CommTimeout:
                    self.broken = f"{what} #{w._seq}"
                    raise
                break
        if self.hdr_out.tobytes() != ent[1]:
            self._mismatch(ent[3], names, ent[4], what, ent[2], timeout)
        return self.data_out[:data.size] if data is not None else None

    def _mismatch(self, kind, names, vals, what, code, timeout):
        """Everyone learns everyone's fields (fixed-size allgather) and raises the same error."""
        w = self.w
        mine = np.zeros(_MAX_FIELDS + 1, dtype=np.int64)
        mine[0] = code
        mine[1:1 + len(vals)] = [signed64(v) for v in vals]
        allv = np.empty((self.p, _MAX_FIELDS + 1), dtype=np.int64)
        seq = w.next_seq()
        req = self.comm.Iallgather(mine, allv)
        w.wait([req], f"{what} (mismatch report)", timeout=timeout, seq=seq)
        raise mismatch_error(w, what, names, code, allv)


def mismatch_error(w, what, names, code, allv):
    """The :class:`CommMismatchError` every rank raises, from every rank's header fields
    (``allv[rank] = [operation code, *fields]``)."""
    p = len(allv)
    lines = []
    if not np.all(allv[:, 0] == code):
        per = ", ".join(f"rank {r}: {_KINDS.get(int(allv[r, 0]) & 0xFFFFFFFF, 'another operation')}"
                        for r in range(p))
        lines.append(f"  operation: {per}")
        bad = ["operation"]
    else:
        bad = [names[j] for j in range(len(names)) if not np.all(allv[:, j + 1] == allv[0, j + 1])]
    for j, name in enumerate(names):
        if name in bad:
            per = ", ".join(f"rank {r}: {_describe(name, allv[r, j + 1])}" for r in range(p))
            lines.append(f"  {name}: {per}")
    return CommMismatchError(
        f"{user_site()}: {what}: the ranks passed different {', '.join(bad)} (seen on rank {w.rank}):\n"
        + "\n".join(lines)
        + "\nEvery rank must call it with arrays of the same length and dtype (and the same op/tree).")



_DTYPE_CODES = {}
_DTYPE_CODE_CACHE = {}


def dtype_code(dt) -> int:
    """A small stable integer for a dtype (for the agreement check)."""
    c = _DTYPE_CODE_CACHE.get(dt)
    if c is None:
        s = np.dtype(dt).str
        c = zlib.crc32(s.encode()) & 0x7FFFFFFF
        _DTYPE_CODES[s] = c
        _DTYPE_CODE_CACHE[dt] = c
    return c


for _t in ("f2", "f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "c8", "c16", "b1"):
    dtype_code(np.dtype(_t))


def _describe(name, v):
    if name == "dtype":
        for s, c in _DTYPE_CODES.items():
            if c == v:
                return np.dtype(s).name
    if name == "op":
        return {1: "sum", 2: "mean"}.get(int(v), str(v))
    return str(int(v))

