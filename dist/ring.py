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

Repeated calls with one signature (a training loop) first settle on a
speculative round (``speculation.Speculation``): one persistent allreduce, in the
data's own dtype, of the data (messages up to ``SPEC_DATA_BYTES``) or nothing
(larger ones, which then go by the paths below) plus the agreement header; so
the check costs no extra collective in the steady state. Otherwise, small
floating messages (at most ``agreement.CONTROL_SLOTS`` elements) take neither
path: they ride, with the cross-rank length/dtype/op agreement header, in the
world's control allreduce (one persistent ``MPI_Allreduce_init`` of a fixed
8 KB float64 buffer, see ``agreement.Control``): one collective per call, the
check included, summed in float64 and rounded once to the caller's dtype.
Every other call first runs that control allreduce with the header alone
(``check=True``), then the data path below. The small persistent allreduces
(control, speculative rounds) run MPICH's recursive-doubling schedule (see
``_mpit``).

A call on the same ``x`` and ``out`` arrays as an earlier checked call
(``_PLANS``, weak references only) skips the argument checks and goes
straight to the speculative round: at p = 4 on 2 cores each microsecond of
Python before ``MPI_Start`` costs several of wall time. Above
``SPEC_DATA_BYTES`` on MPI's path such calls then start a persistent
allreduce bound to their own arrays, which the ranks create together once a
token in the round shows that all of them are planned (:func:`_planned`).
When every rank shares one node, repeated calls of 16 KB to 1 MB
(``shm.NODE_SHM_MIN_BYTES``, ``shm.NODE_SHM_BYTES``; ``algorithm="auto"``
only) take no MPI call at all: every rank copies ``x`` into a node
shared-memory region, the ranks meet at a counter barrier that also compares
their signatures (the check costs nothing extra), each sums its ``1/p``
chunk of every input in rank order, and after a second barrier each copies
the result out (see ``shm.NodeShm``; results bit-identical on every rank, as
with the ring). ``FUNCGRAD_COMM_NODE_SHM=0`` switches it off,
and ranks on several nodes never take it: they bind persistent requests as
above.

Messages go as ``Isend``/``Irecv`` pairs on preallocated contiguous buffers,
completed by the deadline-bounded poll of :meth:`World.wait`. Messages
smaller than ``SMALL_BYTES`` (measured with ``benchmarks/allreduce.py`` on
MPICH shared memory, where the ring's ``2 (p-1)`` latencies cost more than
the bandwidth it saves) go to MPI's own ``Iallreduce``. When a node runs
more ranks than it has cores (``mpiexec -n 4`` on 2 cores) each of the ring's
``2 (p-1)`` rounds waits for a descheduled neighbour, and MPICH's own
algorithms (fewer rounds) stay ahead for smaller messages: the threshold is
then ``OVERSUBSCRIBED_SMALL_BYTES``, on every rank of the job once any node is
oversubscribed (``World.oversubscribed`` is agreed at ``world()``: ranks that
chose different paths for one call would deadlock). Splitting each ring step
into 64 KB or 256 KB ``Isend``/``Irecv`` pieces to overlap the additions with
the transfers did not pay on shared memory, so each step is one message. The
measurements behind these thresholds and choices are in
``benchmarks/dist_tuning.md``.
"""
from __future__ import annotations

import weakref

import numpy as np

from .agreement import dtype_code, shape_code
from .comm import World, world
from .shm import chunk_bounds as _chunk_bounds

__all__ = ["ring_allreduce", "SMALL_BYTES", "OVERSUBSCRIBED_SMALL_BYTES", "OPS"]

#: Below this many bytes ring_allreduce uses MPI's Iallreduce (see module docstring).
SMALL_BYTES = 256 * 1024
#: Largest message (bytes) whose data rides in the speculative round of repeated calls (see
#: speculation.Speculation): a round whose signature turns out to have changed is wasted whole.
SPEC_DATA_BYTES = 64 * 1024
#: The same threshold when a node runs more ranks than it has cores.
OVERSUBSCRIBED_SMALL_BYTES = 2 ** 20


def _small_bytes(w) -> int:
    """The MPI-or-ring threshold; the same on every rank (``World.oversubscribed`` is agreed
    across ranks: a node with more ranks than cores anywhere in the job counts)."""
    return OVERSUBSCRIBED_SMALL_BYTES if w.oversubscribed else SMALL_BYTES

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
        Agree on length, dtype and op across ranks (the control allreduce, or
        the speculative round of repeated calls); a mismatch raises
        :class:`CommMismatchError` on every rank. Small floating messages
        always carry the check (it rides with the data at no extra cost),
        whatever ``check`` says.

    Returns the result array (``out`` when given). In a world of size 1 the
    result is a copy of ``x`` (or ``x`` itself in place).
    """
    if out is not None and check:
        # a training loop's repeated call on the same buffers: straight to the speculative round
        pl = _PLANS.get(None)
        if pl is None or pl.xref() is not x or pl.oref() is not out or pl.op != op \
                or pl.algorithm != algorithm:
            pl = _PLANS.get((id(x), id(out), op, algorithm))
            if pl is not None and (pl.xref() is not x or pl.oref() is not out):
                pl = None
        # (the same arrays: same memory and size; a shape set in place is compared)
        if pl is not None and (comm is None or comm is pl.w) and pl.w._spec.cur is pl.spec \
                and x.dtype is pl.dt and out.dtype is pl.dt and out.flags.writeable \
                and x.shape == pl.shape:
            _PLANS[None] = pl
            return _planned(pl, x, out, timeout)
    return _ring_allreduce(x, op, out, algorithm, timeout, check, comm)


def _ring_allreduce(x, op, out, algorithm, timeout, check, comm):
    w = comm if comm is not None else world()
    ctl = w._ctl
    if ctl is not None and type(x) is _ndarray and (algorithm == "auto" or algorithm == "mpi"):
        # fast path: a small floating message is one control allreduce, agreement check included
        n = x.size
        if n <= ctl.slots and type(op) is str:
            dt = x.dtype
            shape = x.shape
            hit = ctl.ring_entries.get((shape, dt, op, algorithm))
            if hit is None and dt.num in _FOLD_NUMS and op in OPS:
                ent = ctl.entry("ring_allreduce", _NAMES, (n, dtype_code(dt), OPS[op], shape_code(shape)))
                hit = ctl.ring_entries[(shape, dt, op, algorithm)] = (ent, ent[4] + (_ALGO[algorithm],))
            if hit is not None and (out is None or (type(out) is _ndarray and out.dtype == dt
                                                    and out.shape == x.shape and out.flags.writeable)):
                ent, sig = hit
                xf = x.reshape(-1) if x.flags.c_contiguous else x.ravel()
                spec = w._spec
                if spec.cur is not None:
                    red = spec.round(w, sig, xf, timeout)
                    if red is not None:
                        if out is None:
                            out = _empty(x.shape, dt)
                        elif check:
                            _remember(w, x, out, op, algorithm, sig, True)
                        of = out.reshape(-1)
                        if op == "mean":
                            np.true_divide(red, w.size, out=of)
                        else:
                            of[...] = red
                        return out
                    # every rank called with this same new signature: reduce it the plain way
                    red = _mpi_allreduce_fresh(w, xf, timeout)
                else:
                    red = ctl.run_entry(ent, _NAMES, "ring_allreduce", xf, timeout)
                    spec.note(w, sig, dt, True)
                if op == "mean":
                    red /= w.size
                if out is None:
                    out = _empty(x.shape, dt)
                out.reshape(-1)[...] = red
                return out
    opc = OPS.get(op)
    if opc is None:
        raise ValueError(f"ring_allreduce: op must be 'sum' or 'mean', received {op!r}")
    if algorithm not in ("auto", "ring", "mpi"):
        raise ValueError(f"ring_allreduce: algorithm must be 'auto', 'ring' or 'mpi', received {algorithm!r}")
    inplace = out is not None and out is x
    out_given = out is not None
    if inplace:
        if not isinstance(x, np.ndarray) or not x.flags.c_contiguous or not x.flags.writeable:
            raise ValueError("ring_allreduce: in-place reduction (out=x) needs a writeable "
                             "C-contiguous numpy array")
        xa = x
    else:
        xa = np.ascontiguousarray(x)
    dt = xa.dtype
    kind = dt.kind
    if kind not in _SUPPORTED_KINDS:
        raise TypeError(f"ring_allreduce: dtype {dt} is not supported; use float32, float64 or an "
                        f"integer dtype (received an array of {dt})")
    if opc == 2 and kind != "f":
        raise TypeError(f"ring_allreduce: op='mean' needs a floating dtype, received {dt}; "
                        f"use op='sum' and divide, or cast to float64 first")
    if out is None:
        out = np.empty_like(xa)
    elif not inplace:
        if not isinstance(out, np.ndarray) or out.shape != xa.shape or out.dtype != dt \
                or not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError(f"ring_allreduce: out must be a writeable C-contiguous array of shape "
                             f"{xa.shape} and dtype {dt}; received "
                             f"{getattr(out, 'shape', type(out))} {getattr(out, 'dtype', '')}")
    n = xa.size
    p = w.size
    if w.comm is None or p == 1:
        if out is not xa:
            np.copyto(out, xa)
        return out
    ctl = w._ctl
    spec = w._spec
    flat_in = xa.reshape(-1)
    fold = kind == "f" and n <= ctl.slots and dt.itemsize <= 8 and algorithm != "ring"
    use_mpi = algorithm == "mpi" or (algorithm == "auto" and n * dt.itemsize < _small_bytes(w))
    sig = (n, dtype_code(dt), opc, shape_code(xa.shape), _ALGO[algorithm])
    agreed = False
    if (check or fold) and spec.cur is not None:
        # one collective carrying the check (and, when it was agreed before, the data)
        red = spec.round(w, sig, flat_in, timeout)
        if red is not None:
            flat_out = out.reshape(-1)
            if red.size:
                if check and out_given and not inplace and x is xa:
                    _remember(w, x, out, op, algorithm, sig, use_mpi)
                if opc == 2:
                    np.true_divide(red, p, out=flat_out)
                else:
                    flat_out[...] = red
                return out
            agreed = True          # a header-only round: the data goes by the ring below
            if check and out_given and not inplace and x is xa and not np.may_share_memory(out, xa):
                _remember(w, x, out, op, algorithm, sig, use_mpi)
        else:
            agreed = True          # every rank has this (new) signature: no further check
    if fold and not agreed:
        # e.g. a list or a non-array input: the same one-collective path as the fast path above
        red = ctl.run("ring_allreduce", _NAMES, sig[:4], "ring_allreduce", data=flat_in, timeout=timeout)
        spec.note(w, sig, dt, True)
        if opc == 2:
            red /= p
        out.reshape(-1)[...] = red
        return out
    if not inplace and np.may_share_memory(out, xa):   # another view of the same memory: MPI forbids aliasing
        xa = xa.copy()
        flat_in = xa.reshape(-1)
    flat_out = out.reshape(-1)
    if check and not agreed:
        ctl.run("ring_allreduce", _NAMES, sig[:4], "ring_allreduce", timeout=timeout)
        spec.note(w, sig, dt, use_mpi and n * dt.itemsize <= SPEC_DATA_BYTES)
    if use_mpi:
        _mpi_allreduce(w, flat_in, flat_out, op, timeout, inplace=out is xa)
    else:
        _ring(w, flat_in, flat_out, op, timeout)
    return out


_NAMES = ("length", "dtype", "op", "shape")       # the control fields: SIG_NAMES less the algorithm
_ALGO = {"auto": 0, "ring": 1, "mpi": 2}


class _Plan:
    """A repeated ``ring_allreduce(x, out=out)`` on the same two arrays (see :func:`_remember`)."""
    __slots__ = ("w", "xref", "oref", "dt", "shape", "sig", "spec", "mean", "op", "algorithm", "use_mpi",
                 "token", "req", "fast")


#: (id(x), id(out), op, algorithm) -> _Plan, and None -> the last one used. Plans hold weak
#: references only (no views either, which would keep their base arrays alive), so no array
#: outlives its last use by the caller because of them.
_PLANS: dict = {}
_MAX_PLANS = 16


def _remember(w, x, out, op, algorithm, sig, use_mpi):
    """After a call that the speculative round checked: skip the argument checks next time.

    The next call with the same ``x`` and ``out`` objects (same dtype, ``out`` still writeable;
    ``out`` not overlapping ``x``) while the same speculation is current goes straight to the
    round, then (header-only rounds) to the data path ``use_mpi`` chose; what the round itself
    checks across ranks (length, dtype, op) is unchanged."""
    if not (type(x) is _ndarray and x.flags.c_contiguous and type(out) is _ndarray
            and out.flags.c_contiguous and out.shape == x.shape and out.dtype == x.dtype):
        return
    try:
        pl = _Plan()
        pl.xref, pl.oref = weakref.ref(x), weakref.ref(out)
    except TypeError:
        return
    pl.w, pl.dt, pl.shape = w, x.dtype, x.shape
    pl.sig, pl.spec, pl.mean, pl.op, pl.algorithm = sig, w._spec.cur, op == "mean", op, algorithm
    pl.use_mpi = use_mpi
    pl.token, pl.req, pl.fast = 0, None, None
    old = _PLANS.get((id(x), id(out), op, algorithm))
    if old is not None:
        _unbind(old)
    if len(_PLANS) >= _MAX_PLANS:
        for o in _PLANS.values():
            _unbind(o)
        _PLANS.clear()
    _PLANS[(id(x), id(out), op, algorithm)] = _PLANS[None] = pl


#: Largest token of a bound data request (exact sums of t*t in float32 up to 258 ranks).
_MAX_TOKEN = 101


def _unbind(pl):
    """Free ``pl``'s bound data request (inactive between calls, so freeing it is local)."""
    if pl.req is not None:
        try:
            pl.req.Free()
        except Exception:
            pass
        pl.req = None
    pl.token = 0
    pl.fast = None


def _planned(pl, x, out, timeout):
    """A planned call. Data up to ``SPEC_DATA_BYTES`` rides in the speculative round. Larger
    messages on MPI's path go, after the header-only round, by a persistent allreduce bound to
    this rank's ``x`` and ``out`` (no per-call schedule, unlike ``Iallreduce``): every rank
    sends a token in the round, 1 for "planned, nothing bound" and 2 + k for "bound by the
    k-th binding of this signature", and the round's sums of t and t*t say whether all tokens
    are equal. All 1: every rank binds now (the same collective point everywhere). All equal
    and >= 2: every rank starts the request created at that same point. Otherwise every rank
    unbinds and takes MPI's ``Iallreduce``; ranks outside the planned path send 0. A rank only
    ever starts a request bound to the arrays of its current call."""
    w = pl.w
    spec = pl.spec
    xf = x if x.ndim == 1 else x.reshape(-1)
    of = out if out.ndim == 1 else out.reshape(-1)
    fast = pl.fast
    if fast is not None and spec.last is spec.own and spec.tok_last == pl.token \
            and w._ctl.broken is None:
        # the steady state of a bound plan: this signature's header and this plan's token are
        # already in the round's buffer, and one byte comparison checks both (pl.fast is set
        # where every rank first started the bound request)
        sreq, dreq, buf_out, expect = fast
        w._seq += 1
        sreq.Start()
        w._spec.complete(w, sreq, timeout)
        if buf_out.tobytes() == expect:
            seq = w.next_seq()
            dreq.Start()
            if not dreq.Test():
                w.wait([dreq], lambda: f"ring_allreduce #{seq} (bound MPI path, n={of.size} "
                                       f"{of.dtype})", timeout=timeout, seq=seq)
            if pl.mean:
                np.true_divide(of, w.size, out=of)
            return out
        pl.fast = None
        red = w._spec.result(w, spec, pl.sig, timeout)
        tok = pl.token
        bindable = True
    else:
        bindable = pl.use_mpi and spec.tok_in is not None
        tok = (pl.token or 1) if bindable else 0
        red = w._spec.round(w, pl.sig, xf, timeout, tok)
    if red is not None and red.size:            # the data rode in the round
        if pl.mean:
            np.true_divide(red, w.size, out=of)
        else:
            of[...] = red
        return out
    if red is not None and bindable:            # a header-only hit: agree on the bound request
        p = w.size
        t1, t2 = float(spec.tok_out[0]), float(spec.tok_out[1])
        if t1 == p * tok and t1 * t1 == p * t2:    # every rank sent this same token
            if tok == 1 and spec.nbound < _MAX_TOKEN - 1:
                pl.req = w.comm.Allreduce_init(xf, of, op=w.MPI.SUM)
                pl.token = 2 + spec.nbound
                spec.nbound += 1
                tok = pl.token
            if tok >= 2:
                seq = w.next_seq()
                pl.req.Start()
                if not pl.req.Test():
                    w.wait([pl.req], lambda: f"ring_allreduce #{seq} (bound MPI path, n={of.size} "
                                             f"{of.dtype})", timeout=timeout, seq=seq)
                if pl.mean:
                    np.true_divide(of, p, out=of)
                if spec.tok_last == tok:        # from now on one byte comparison checks the round
                    pl.fast = (spec.req, pl.req, spec.buf_out,
                               spec.expect + np.array([p * tok, p * tok * tok], spec.dt).tobytes())
                return out
        elif pl.token:
            _unbind(pl)
    # a header-only round, or every rank changed to this signature at once: the data path,
    # no further check
    if pl.use_mpi:
        _mpi_allreduce(w, xf, of, "mean" if pl.mean else "sum", timeout, inplace=False)
    else:
        _ring(w, xf, of, "mean" if pl.mean else "sum", timeout)
    return out


def _mpi_allreduce_fresh(w, xf, timeout):
    res = np.empty_like(xf)
    _mpi_allreduce(w, xf, res, "sum", timeout, inplace=False)
    return res
_ndarray = np.ndarray
_empty = np.empty
#: numpy type numbers of the dtypes whose small messages ride in the control allreduce (float16/32/64)
_FOLD_NUMS = frozenset(np.dtype(t).num for t in (np.float16, np.float32, np.float64))


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
    (Sending the p = 2 agreement header as its own small message next to the
    first ring message, instead of the control allreduce before the ring, was
    measured slower: ``benchmarks/dist_tuning.md``.)
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
