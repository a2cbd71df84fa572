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
import json
import zlib

import numpy as np

from . import _mpit
from .deadline import dup, user_site
from .errors import CommMismatchError, CommTimeout

__all__ = ["Control", "CONTROL_SLOTS", "mismatch_error", "report_mismatch", "exchange", "tree_detail",
           "dtype_code", "shape_code", "varint", "signed64"]


#: float64 payload slots of the control allreduce (small floating messages ride in it). With the
#: header the buffer is 8 KB, the largest size MPICH's shared-memory allreduce still moves in one
#: cell (benchmarks/dist_tuning.md).
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

    def run(self, kind, names, vals, what, data=None, timeout=None, detail=None):
        """One control allreduce: agree on ``vals`` (and sum the 1-D floating ``data``
        of at most ``slots`` elements, when given). Returns the reduced payload
        (a float64 view of the internal buffer, valid until the next call) or None.
        ``detail`` (a zero-argument callable returning a JSON value, called on a mismatch
        only) describes this rank's arguments for the report (see :func:`report_mismatch`)."""
        ent = self.cache.get((kind, vals))
        if ent is None:
            ent = self._entry(kind, names, vals)
        return self.run_entry(ent, names, what, data, timeout, detail)

    def run_entry(self, ent, names, what, data=None, timeout=None, detail=None):
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
            report_mismatch(self.w, self.comm, what, names, ent[2], ent[4], timeout, detail)
        return self.data_out[:data.size] if data is not None else None

def exchange(w, comm, obj, what, timeout=None):
    """Every rank's JSON value ``obj``, in rank order: two deadline-bounded collectives on
    ``comm`` (the lengths, then the bytes). For error reports only, never on a hot path."""
    data = np.frombuffer(json.dumps(obj).encode(), dtype=np.uint8)
    p = comm.Get_size()
    n = np.array([data.size], dtype=np.int64)
    lens = np.empty(p, dtype=np.int64)
    seq = w.next_seq()
    w.wait([comm.Iallgather(n, lens)], what, timeout=timeout, seq=seq)
    buf = np.empty(max(int(lens.sum()), 1), dtype=np.uint8)
    offs = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    seq = w.next_seq()
    req = comm.Iallgatherv(data, [buf, (lens.tolist(), offs.tolist()), w.MPI.BYTE])
    w.wait([req], what, timeout=timeout, seq=seq)
    return [json.loads(bytes(buf[o:o + k]).decode()) for o, k in zip(offs, lens)]


def report_mismatch(w, comm, what, names, code, vals, timeout=None, detail=None):
    """Raise the same :class:`CommMismatchError` on every rank after a failed agreement check.

    Every rank of ``comm`` calls this at the same point (they all saw the same reduced
    header): one :func:`exchange` of every rank's operation code, fields (``names``:
    ``vals``), shape (when ``names`` has one: its code is a hash, see :func:`shape_code`) and
    ``detail()`` (e.g. :func:`tree_detail`), from which :func:`mismatch_error` names what
    differs."""
    mine = {"code": int(code), "vals": [signed64(v) for v in vals]}
    if "shape" in names:
        c = int(vals[names.index("shape")])
        sh = (int(vals[names.index("length")]),) if c == 0 else _SHAPES.get(c)   # 0: 1-D
        mine["shape"] = list(sh) if sh is not None else None
    if detail is not None:
        mine["detail"] = detail()
    raise mismatch_error(w, what, names, code, exchange(w, comm, mine, f"{what} (mismatch report)",
                                                        timeout))


def tree_detail(leaves, treedef, root="tree"):
    """A pytree's description for a mismatch report: its structure and, per leaf, the key
    path (``funcgrad.tree`` style: ``['W1']``), shape and dtype. ``leaves`` are
    ``(path, shape, dtype)``; ``root`` names the tree in the message (``params['W1']``)."""
    return {"tree": [[path, [int(d) for d in shape], np.dtype(dt).name] for path, shape, dt in leaves],
            "structure": repr(treedef), "root": root}


def _ranks_phrase(rs):
    return f"rank {rs[0]}" if len(rs) == 1 else "ranks " + ", ".join(map(str, rs))


def _per_rank(values, fmt):
    """``rank 0 X, ranks 1, 2 Y``: the ranks grouped by equal value, in rank order."""
    groups = {}
    for r, v in enumerate(values):
        groups.setdefault(json.dumps(v), (v, []))[1].append(r)
    return ", ".join(f"{_ranks_phrase(rs)} {fmt(v)}" for v, rs in groups.values())


def _shape_str(sh):
    return "unknown shape" if sh is None else str(tuple(sh))


_MAX_LEAF_LINES = 8


def _tree_lines(trees):
    """Lines naming each leaf whose shape or dtype differs between ``trees`` (one description
    per rank, see :func:`tree_detail`), or that some ranks lack; else the structures; None
    when those are the same too."""
    maps = [{path: (shape, dt) for path, shape, dt in t["tree"]} for t in trees]
    order = []
    seen = set()
    for t in trees:
        for path, _, _ in t["tree"]:
            if path not in seen:
                seen.add(path)
                order.append(path)
    root = trees[0].get("root", "tree")
    lines = []
    for path in order:
        vals = [m.get(path) for m in maps]
        if all(v == vals[0] for v in vals):
            continue
        lines.append(f"  {root}{path}: " + _per_rank(
            vals, lambda v: "missing" if v is None else f"{_shape_str(v[0])} {v[1]}"))
    if len(lines) > _MAX_LEAF_LINES:
        lines = lines[:_MAX_LEAF_LINES] + [f"  ... and {len(lines) - _MAX_LEAF_LINES} more leaves"]
    if not lines:
        structures = [t["structure"] for t in trees]
        if all(s == structures[0] for s in structures):
            return None            # the same leaves and structure: another field of the signature
        lines.append("  structure: " + _per_rank(structures, str))
    return lines


def mismatch_error(w, what, names, code, allm):
    """The :class:`CommMismatchError` every rank raises, from every rank's report
    (``allm[rank] = {"code": operation code, "vals": fields, "shape": ..., "detail": ...}``,
    see :func:`report_mismatch`)."""
    p = len(allm)
    lines = []
    codes = [int(m["code"]) for m in allm]
    if any(c != code for c in codes):
        per = ", ".join(f"rank {r}: {_KINDS.get(c & 0xFFFFFFFF, 'another operation')}"
                        for r, c in enumerate(codes))
        lines.append(f"  operation: {per}")
        bad = ["operation"]
    else:
        vals = [m["vals"] for m in allm]
        bad = [names[j] for j in range(len(names)) if any(v[j] != vals[0][j] for v in vals)]
    details = [m.get("detail") for m in allm]
    trees = all(isinstance(d, dict) and "tree" in d for d in details)
    shown = []
    for j, name in enumerate(names):
        if name not in bad:
            continue
        if name == "tree signature" and trees:
            tl = _tree_lines(details)
            if tl is not None:
                lines.extend(tl)
                shown.append("trees")
                continue
        if name == "shape":
            per = ", ".join(f"rank {r}: {_shape_str(m.get('shape'))}" for r, m in enumerate(allm))
        else:
            per = ", ".join(f"rank {r}: {_describe(name, m['vals'][j])}" for r, m in enumerate(allm))
        lines.append(f"  {name}: {per}")
        shown.append(name)
    return CommMismatchError(
        f"{user_site()}: {what}: the ranks passed different {', '.join(shown or bad)} (seen on "
        f"rank {w.rank}):\n"
        + "\n".join(lines)
        + "\nEvery rank must call it with arrays of the same shape and dtype (and the same op/tree).")


_SHAPES: dict = {}                    # shape code -> shape, for mismatch reports
_SHAPE_CODES: dict = {}


def shape_code(shape) -> int:
    """The agreement field of an array's shape: 0 for every 1-D shape (the length is a field
    of its own), else a 32-bit hash of the shape (odd, so never 0)."""
    c = _SHAPE_CODES.get(shape)
    if c is None:
        c = 0 if len(shape) == 1 else zlib.crc32(repr(tuple(int(d) for d in shape)).encode()) | 1
        if len(_SHAPE_CODES) > 4096:
            _SHAPE_CODES.clear()
            _SHAPES.clear()
        _SHAPE_CODES[shape] = c
        if c:
            _SHAPES[c] = tuple(int(d) for d in shape)
    return c


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

