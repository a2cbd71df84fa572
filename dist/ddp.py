"""Data-parallel training: every rank holds the full model and a shard of the batch.

Owns :class:`DataParallel` and :func:`data_parallel_step`: local gradients
(from a ``grad_fn(params, *batch) -> grads``, or ``funcgrad.value_and_grad``
of a ``loss_fn``, resolved lazily), optional accumulation over ``k``
micro-batches, averaging with :func:`allreduce_tree` (the local loss rides in
the same buckets), the optimizer (any object with optax-style
``init``/``update``) applied identically on every rank, a periodic
cross-rank parameter checksum (``crc32`` of the parameters' bytes) that
raises :class:`ParameterDivergenceError` on every rank when they differ, and
rank-0 checkpointing with resume (rank 0 writes; on resume rank 0 reads and
broadcasts, so other ranks need not see the file).

Equivalence: with equal per-rank batches, the mean over ranks of per-rank
mean gradients is the mean gradient of the global batch, so ``N`` ranks with
batch ``B/N`` follow one process with batch ``B`` (up to summation order).
"""
from __future__ import annotations

import logging
import math
import os
import zlib

import numpy as np

import funcgrad.tree as ftree
from funcgrad.api import value_and_grad as _value_and_grad
from funcgrad.data import DistributedSampler
from funcgrad.kernels.base import is_device_array
from funcgrad.kernels.cuda_backend import CUDA
from funcgrad.optim import apply_updates as _optim_apply_updates

from . import _mpit
from . import checkpoint as _ckpt
from .agreement import tree_detail
from .buckets import DEFAULT_BUCKET_BYTES, _plan_for, allreduce_tree, broadcast_tree
from .comm import World, world
from .device import STAGING, has_device_leaves
from .errors import CommMismatchError, NonFiniteGradientError, ParameterDivergenceError
from .ring import _small_bytes, ring_allreduce

__all__ = ["DataParallel", "data_parallel_step", "params_checksum", "check_params_in_sync",
           "apply_updates", "NONFINITE_MODES"]

log = logging.getLogger("funcgrad.dist")

#: what a data-parallel step does when a rank's gradient holds NaN or Inf before the allreduce:
#: raise NonFiniteGradientError on every rank, skip the step on every rank, or not check
NONFINITE_MODES = ("raise", "skip", None)
_REPORT_LEAVES = 8          # non-finite leaves per rank named in the report


def _check_nonfinite_mode(nonfinite, who):
    if nonfinite == "off":
        return None
    if nonfinite not in NONFINITE_MODES:
        raise ValueError(f"{who}: nonfinite must be 'raise', 'skip' or None (no check), "
                         f"received {nonfinite!r}")
    return nonfinite


def _all_finite(a) -> bool:
    """Whether every value of the contiguous floating array ``a`` is finite: one summing pass
    (a NaN or Inf anywhere makes the sum non-finite), and an exact look only when the sum is
    not finite (it may also have overflowed)."""
    return math.isfinite(float(np.add.reduce(a.reshape(-1)))) or bool(np.isfinite(a).all())


def _nonfinite_outcome(w, mode, step, leaves, paths, timeout):
    """After a reduction whose non-finite flag is set (the same on every rank): every rank learns
    which ranks and leaves were non-finite (one fixed-size allgather), then raises the same
    NonFiniteGradientError (``mode="raise"``) or logs the skipped step (``"skip"``)."""
    mine = np.full(1 + 3 * _REPORT_LEAVES, -1, dtype=np.int64)
    bad = []
    for i, a in enumerate(leaves):
        a = np.asarray(a)
        if a.dtype.kind in "fc" and not _all_finite(np.ascontiguousarray(a)):
            bad.append((i, int(np.isnan(a).sum()), int(np.isinf(a).sum())))
    mine[0] = len(bad)
    for k, (i, nn, ni) in enumerate(bad[:_REPORT_LEAVES]):
        mine[1 + 3 * k:4 + 3 * k] = (i, nn, ni)
    if w.comm is not None and w.size > 1:
        allv = np.empty((w.size, mine.size), dtype=np.int64)
        seq = w.next_seq()
        req = w.comm.Iallgather(mine, allv)
        w.wait([req], f"DataParallel step {step}: non-finite gradient report", timeout=timeout, seq=seq)
    else:
        allv = mine[None, :]
    ranks = [r for r in range(len(allv)) if allv[r, 0] > 0]
    per, names = [], {}
    for r in ranks:
        items = []
        for k in range(min(int(allv[r, 0]), _REPORT_LEAVES)):
            i, nn, ni = (int(v) for v in allv[r, 1 + 3 * k:4 + 3 * k])
            path = f"params{paths[i]}" if i < len(paths) else f"leaf {i}"
            size = np.asarray(leaves[i]).size if i < len(leaves) else "?"
            what = " and ".join(x for x in (f"{nn} NaN" if nn else "", f"{ni} Inf" if ni else "") if x)
            items.append(f"{path} ({what} of {size} values)")
            names.setdefault(r, []).append(path)
        more = int(allv[r, 0]) - _REPORT_LEAVES
        per.append(f"rank {r}: " + ", ".join(items) + (f" and {more} more leaves" if more > 0 else ""))
    if not ranks:      # every rank finite alone: the sum over ranks overflowed
        per.append("every rank's gradient is finite, but their sum overflowed")
    where = "; ".join(per)
    if mode == "skip":
        if w.rank == 0:
            log.warning("funcgrad.dist: DataParallel step %s skipped on every rank: non-finite "
                        "gradient (%s)", step, where)
        return ranks
    raise NonFiniteGradientError(
        f"DataParallel step {step}: non-finite gradient before the allreduce on {where}. Every rank "
        f"stops here: averaged in, it would have made every rank's parameters NaN. Look at that "
        f"rank's batch and loss (log of 0, division by 0, a learning rate too large), or pass "
        f"nonfinite='skip' to skip such steps on every rank (as mixed-precision loss scalers do), "
        f"or nonfinite=None to switch the check off.", ranks=ranks, step=step, leaves=names)


def apply_updates(params, updates):
    """``params + updates`` leaf by leaf (``funcgrad.optim.apply_updates``)."""
    return _optim_apply_updates(params, updates)


def params_checksum(params) -> int:
    """crc32 over every leaf's bytes in canonical order (plus shapes), as a non-negative int."""
    crc = 0
    for leaf in STAGING.to_host(ftree.tree_leaves(params), "checksum"):
        a = np.ascontiguousarray(np.asarray(leaf))
        crc = zlib.crc32(f"{a.dtype.str}{a.shape}".encode(), crc)
        crc = zlib.crc32(a.reshape(-1).view(np.uint8), crc)
    return crc


def check_params_in_sync(params, step=None, *, timeout=None, comm: World | None = None):
    """Raise :class:`ParameterDivergenceError` on every rank unless all ranks hold bit-identical params."""
    w = comm if comm is not None else world()
    if w.comm is None or w.size == 1:
        return
    crc = params_checksum(params)
    try:
        w.check_same("parameter checksum", {"checksum": crc}, timeout=timeout)
    except CommMismatchError as e:
        at = f" after step {step}" if step is not None else ""
        raise ParameterDivergenceError(
            f"parameters diverged across ranks{at}: their crc32 checksums differ.\n{e}\n"
            f"Every rank must start from the same parameters (broadcast_tree), see the same "
            f"averaged gradients and apply the same optimizer; a rank that updates its parameters "
            f"outside the data-parallel step breaks this.") from None


def _resolve_grad(loss_fn):
    """(``funcgrad.value_and_grad(loss_fn)``, True): the gradient function of ``loss_fn``."""
    return _value_and_grad(loss_fn), True


def _split(batch, k):
    """Split every array of ``batch`` along axis 0 into k nearly equal parts -> [(weight, mb)]."""
    n = len(batch[0])
    bounds = np.linspace(0, n, k + 1).round().astype(int)
    out = []
    for i in range(k):
        lo, hi = bounds[i], bounds[i + 1]
        if hi > lo:
            out.append(((hi - lo) / n, tuple(b[lo:hi] for b in batch)))
    return out


def _scaled(a, wgt):
    if is_device_array(a):
        return CUDA.namespace().multiply(a, wgt)
    return np.asarray(a) * wgt


def _plus_scaled(acc, b, wgt):
    if is_device_array(b):
        K = CUDA.namespace()
        return K.add(acc, K.multiply(b, wgt))
    return acc + np.asarray(b) * wgt


def _local_grads(grad_fn, params, batch, accum_steps, micro_batches, returns_loss):
    """This rank's gradient (averaged over its micro-batches) and loss (or None)."""
    if micro_batches is not None:
        if batch:
            raise TypeError("data_parallel_step: pass either *batch or micro_batches=, not both")
        mbs = [(1.0 / len(micro_batches), tuple(mb)) for mb in micro_batches]
    elif accum_steps and accum_steps > 1:
        mbs = _split(batch, int(accum_steps))
    else:
        mbs = [(1.0, batch)]
    if not mbs:
        raise ValueError("data_parallel_step: empty batch")
    acc = None
    loss = 0.0 if returns_loss else None
    for wgt, mb in mbs:
        r = grad_fn(params, *mb)
        if returns_loss:
            l, g = r
            loss += wgt * float(l)
        else:
            g = r
        if len(mbs) == 1:
            acc = g
        elif acc is None:
            acc = ftree.tree_map(lambda a: _scaled(a, wgt), g)
        else:
            acc = ftree.tree_map(lambda a, b: _plus_scaled(a, b, wgt), acc, g)
    return acc, loss


def data_parallel_step(grad_fn, optimizer, params, opt_state, *batch, accum_steps=1,
                       micro_batches=None, returns_loss=False, bucket_bytes=DEFAULT_BUCKET_BYTES,
                       timeout=None, comm: World | None = None, nonfinite="raise", step=None,
                       _sig_state=None):
    """One synchronous data-parallel step; returns ``(params, opt_state, loss)``.

    ``grad_fn(params, *micro_batch)`` returns the local mean gradient (or
    ``(loss, grads)`` when ``returns_loss``). With ``accum_steps=k`` the
    local batch is split along axis 0 into ``k`` micro-batches whose
    gradients are averaged (weighted by size) before the one allreduce;
    ``micro_batches=[(x, y), ...]`` passes them explicitly (equal weights).
    ``loss`` is the mean over ranks of the local loss, or ``None``.
    ``nonfinite`` (see :class:`DataParallel`) says what a NaN or Inf in any rank's gradient does;
    ``step`` numbers the step in its messages.
    """
    w = comm if comm is not None else world()
    nonfinite = _check_nonfinite_mode(nonfinite, "data_parallel_step")
    acc, loss = _local_grads(grad_fn, params, batch, accum_steps, micro_batches, returns_loss)
    return _reduce_and_apply(w, optimizer, params, opt_state, acc, loss, returns_loss, bucket_bytes,
                             timeout, _sig_state, nonfinite, step)


def _reduce_and_apply(w, optimizer, params, opt_state, acc, loss, returns_loss, bucket_bytes, timeout,
                      _sig_state, nonfinite="raise", step=None):
    """The generic step after the local gradient: allreduce_tree, optimizer leaf by leaf. GPU gradients are
    staged to pinned host buffers once here (the reduction and the non-finite check read those); the
    reduced gradient goes back to the GPU for the optimizer, so GPU parameters stay on the GPU."""
    on_device = None
    g0, gtd = ftree.tree_flatten(acc)
    if has_device_leaves(g0):
        on_device = g0
        acc = ftree.tree_unflatten(gtd, STAGING.to_host(g0, "gradients"))
    # the loss rides in the gradients' bucket (same dtype) instead of costing a bucket of its own
    gdt = {np.asarray(l).dtype for l in ftree.tree_leaves(acc)}
    ldt = gdt.pop() if len(gdt) == 1 else np.dtype(np.float64)
    if ldt.kind != "f":
        ldt = np.dtype(np.float64)
    payload = {"g": acc, "loss": np.asarray(loss if loss is not None else 0.0, dtype=ldt)}
    g_leaves = ftree.tree_leaves(acc)
    if nonfinite is not None:
        # one flag per rank rides in the same buckets: > 0 after the mean when any rank was bad
        ok = all(np.asarray(a).dtype.kind not in "fc" or _all_finite(np.ascontiguousarray(a))
                 for a in g_leaves)
        payload["nonfinite"] = np.asarray(0.0 if ok else 1.0, dtype=ldt)
    if _sig_state is None:
        red = allreduce_tree(payload, op="mean", bucket_bytes=bucket_bytes, timeout=timeout, comm=w)
    else:
        # DataParallel: check the gradient tree against the other ranks on the first step only;
        # later steps compare it locally with the checked signature (no extra round trip).
        first = _sig_state.get("sig") is None
        red = allreduce_tree(payload, op="mean", bucket_bytes=bucket_bytes, timeout=timeout, comm=w,
                             check=first, _expect_signature=_sig_state.get("sig"))
        if first and w.size > 1:
            leaves, td = ftree.tree_flatten(payload)
            _sig_state["sig"] = _plan_for([np.asarray(l) for l in leaves], td, bucket_bytes)[0]
    if nonfinite is not None and float(red["nonfinite"]) != 0.0:
        paths = [p for p, _ in ftree.tree_flatten_with_path(acc)[0]]
        _nonfinite_outcome(w, nonfinite, step, g_leaves, paths, timeout)
        if _sig_state is not None:
            _sig_state["skipped"] = step
        return params, opt_state, (float(red["loss"]) if returns_loss else None)   # skipped
    grads = red["g"]
    if on_device is not None:
        grads = ftree.tree_unflatten(gtd, STAGING.to_device(ftree.tree_leaves(grads), on_device))
    updates, opt_state = optimizer.update(grads, opt_state, params)
    params = apply_updates(params, updates)
    return params, opt_state, (float(red["loss"]) if returns_loss else None)


def _persistent_buckets(w, lay):
    """Per bucket of ``lay``: a persistent ``Allreduce_init`` from ``gbuf`` into ``rbuf`` where
    ring_allreduce would use MPI's allreduce anyway (below its ring threshold), else None.

    Created once, right after every rank agreed on the layout, so every rank creates the
    same requests at the same point; then each step is ``Start`` + a deadline-bounded poll,
    without building a new nonblocking schedule per call."""
    MPI = w.MPI
    out = []
    for lo, hi in lay.buckets:
        req = None
        if (hi - lo) * lay.dtype.itemsize < _small_bytes(w):
            try:
                with _mpit.small_allreduce_algorithm(w, (hi - lo) * lay.dtype.itemsize):
                    req = w.comm.Allreduce_init(lay.gbuf[lo:hi], lay.rbuf[lo:hi], op=MPI.SUM)
            except (AttributeError, NotImplementedError, MPI.Exception):   # MPI before 4.0
                req = None
        out.append(req)
    return out


class _FlatLayout:
    """One parameter layout kept flat: every leaf a view of one vector (canonical leaf order).

    The gradient buffer holds the gradient leaves, the loss and the non-finite flag, reduced in contiguous
    buckets of at most ``bucket_bytes`` (leaves kept whole, like allreduce_tree's)."""

    def __init__(self, treedef, shapes, dtype, bucket_bytes):
        self.treedef, self.shapes, self.dtype = treedef, shapes, dtype
        sizes = [int(np.prod(sh, dtype=np.int64)) for sh in shapes]
        self.offs = [0]
        for sz in sizes:
            self.offs.append(self.offs[-1] + sz)
        self.n = n = self.offs[-1]
        self.spans = [(self.offs[i], self.offs[i] + sizes[i], shapes[i]) for i in range(len(sizes))]
        bounds, cur = [0], 0
        for sz in sizes + [2]:
            if cur > 0 and (cur + sz) * dtype.itemsize > bucket_bytes:
                bounds.append(bounds[-1] + cur)
                cur = 0
            cur += sz
        bounds.append(bounds[-1] + cur)
        self.buckets = list(zip(bounds[:-1], bounds[1:]))
        self.gbuf = np.empty(n + 2, dtype=dtype)
        self.rbuf = np.empty(n + 2, dtype=dtype)   # receive buffer of the persistent allreduces
        self.persistent = None                     # per bucket: a persistent request or None (ring)
        self.gviews = self.views(self.gbuf)
        self.sig = zlib.crc32(repr((repr(treedef), shapes, dtype.str, self.buckets)).encode())

    def views(self, flat):
        return [flat[lo:hi].reshape(sh) for lo, hi, sh in self.spans]

    def pack(self, leaves):
        out = np.empty(self.n, dtype=self.dtype)
        for (lo, hi, _), a in zip(self.spans, leaves):
            out[lo:hi] = a.reshape(-1)
        return out


class DataParallel:
    """Synchronous data-parallel trainer.

    >>> dp = DataParallel(funcgrad.optim.sgd(0.1), grad_fn=my_grad)       # doctest: +SKIP
    >>> params, opt_state = dp.init(params)           # rank 0's params everywhere
    >>> for x, y in shard_batches:                    # each rank its own shard
    ...     params, opt_state = dp.step(params, opt_state, x, y)

    ``grad_fn(params, *batch) -> grads`` (``returns_loss=True``: ``-> (loss,
    grads)``), or ``loss_fn`` whose gradient ``funcgrad.value_and_grad``
    builds on first use. ``accum_steps`` micro-batches per step;
    ``check_every`` steps between parameter checksums (0: never);
    ``timeout`` the deadline of every collective. ``last_loss`` holds the
    rank-averaged loss of the last step when known.

    ``fused`` (default: when the optimizer is elementwise, i.e. its ``update``
    carries ``elementwise = True`` as funcgrad.optim's sgd/adam/adamw/rmsprop/
    adagrad do, and every parameter is an ndarray of one floating dtype):
    keep the parameters and the optimizer state flat. The gradient leaves are
    packed once into a reused buffer (the loss in its last slot), averaged in
    place of ``allreduce_tree`` straight into one fresh vector, and the
    optimizer and the parameter update run once over that vector instead of
    once per leaf; the returned ``params`` and the state's parameter-shaped
    trees are views of fresh flat vectors, which the next step reuses without
    repacking when it receives them back unchanged. Bit for bit the result of
    the per-leaf path (same reduction, same elementwise arithmetic).
    ``fused=False`` always takes the per-leaf path.

    ``nonfinite``: every step checks the packed local gradient for NaN and Inf
    before the allreduce (one summing pass; a flag rides in the reduction, so
    no extra collective). ``"raise"`` (default): :class:`NonFiniteGradientError`
    on every rank, naming the rank(s), the step and the parameter leaves;
    ``"skip"``: every rank skips the update (parameters and optimizer state
    unchanged, the step listed in ``skipped_steps``, a warning on the
    ``funcgrad.dist`` logger), as mixed-precision loss scalers do; ``None``:
    no check (a NaN on one rank then turns every rank's parameters into NaN).
    """

    def __init__(self, optimizer, grad_fn=None, *, loss_fn=None, returns_loss=False, accum_steps=1,
                 check_every=100, bucket_bytes=DEFAULT_BUCKET_BYTES, timeout=None,
                 comm: World | None = None, fused=None, nonfinite="raise"):
        if not (hasattr(optimizer, "init") and hasattr(optimizer, "update")):
            raise TypeError(f"DataParallel: optimizer must have .init(params) and "
                            f".update(grads, state, params), received {type(optimizer).__name__}")
        if grad_fn is None and loss_fn is None:
            raise TypeError("DataParallel: pass grad_fn=(params, *batch) -> grads or loss_fn=")
        if accum_steps < 1:
            raise ValueError(f"DataParallel: accum_steps must be >= 1, received {accum_steps}")
        self.nonfinite = _check_nonfinite_mode(nonfinite, "DataParallel")
        self.skipped_steps = []        # steps skipped for a non-finite gradient (nonfinite='skip')
        self.optimizer = optimizer
        self._grad_fn = grad_fn
        self._loss_fn = loss_fn
        self.returns_loss = returns_loss
        self.accum_steps = int(accum_steps)
        self.check_every = int(check_every or 0)
        self.bucket_bytes = bucket_bytes
        self.timeout = timeout
        self.world = comm if comm is not None else world()
        self.step_count = 0
        self.last_loss = None
        self._sig_state = {}
        self.fused = fused
        self._layouts = {}
        self._checked = None           # the flat layout already agreed with the other ranks
        self._p_cache = None           # (params tree returned, its leaves, flat vector, layout)
        self._s_cache = None           # (state returned, {field: (leaves, flat)}, flat state)

    @property
    def rank(self):
        return self.world.rank

    @property
    def size(self):
        return self.world.size

    def _grad(self):
        if self._grad_fn is None:
            self._grad_fn, self.returns_loss = _resolve_grad(self._loss_fn)
        return self._grad_fn

    def init(self, params, root=0):
        """Broadcast ``root``'s params to all ranks and initialise the optimizer state."""
        params = broadcast_tree(params, root=root, timeout=self.timeout, comm=self.world)
        return params, self.optimizer.init(params)

    def sampler(self, n, shuffle=True, seed=0, drop_last=True):
        """``funcgrad.data.DistributedSampler`` for this rank."""
        return DistributedSampler(n, rank=self.rank, world_size=self.size, shuffle=shuffle,
                                  seed=seed, drop_last=drop_last)

    def step(self, params, opt_state, *batch, micro_batches=None):
        w = self.world
        w.context = f"DataParallel step {self.step_count + 1}"   # named if a peer goes away
        r = None
        if self.fused is not False:
            r = self._fused_step(params, opt_state, batch, micro_batches)
        if r is None:
            r = data_parallel_step(
                self._grad(), self.optimizer, params, opt_state, *batch, accum_steps=self.accum_steps,
                micro_batches=micro_batches, returns_loss=self.returns_loss,
                bucket_bytes=self.bucket_bytes, timeout=self.timeout, comm=self.world,
                nonfinite=self.nonfinite, step=self.step_count + 1, _sig_state=self._sig_state)
        params, opt_state, loss = r
        if self._sig_state.pop("skipped", None) is not None:
            self.skipped_steps.append(self.step_count + 1)
        self.step_count += 1
        w.steps_done = self.step_count
        w.context = f"the code after DataParallel step {self.step_count}"
        self.last_loss = loss
        if self.check_every and self.step_count % self.check_every == 0:
            self.check(params)
        return params, opt_state

    # ------------------------------------------------------------- fused path
    def _flat_params(self, params):
        """(layout, flat vector, leaves) of ``params``, or None when they cannot be kept flat."""
        leaves, td = ftree.tree_flatten(params)
        c = self._p_cache
        if c is not None and params is c[0] and len(leaves) == len(c[1]) \
                and all(a is b for a, b in zip(leaves, c[1])):
            return c[3], c[2], leaves
        if not leaves:
            return None
        dt = None
        for a in leaves:
            if type(a) is not np.ndarray or a.dtype.kind != "f" or (dt is not None and a.dtype != dt):
                return None
            dt = a.dtype
        key = (td, tuple(a.shape for a in leaves), dt)
        lay = self._layouts.get(key)
        if lay is None:
            lay = self._layouts[key] = _FlatLayout(td, key[1], dt, self.bucket_bytes)
        return lay, lay.pack(leaves), leaves

    def _flat_state(self, state, lay):
        """(flat state, converted field indices) with the parameter-shaped trees of a
        NamedTuple/tuple state packed flat, or None when the state has another form."""
        if not isinstance(state, tuple):
            return None
        c = self._s_cache
        reuse = c is not None and state is c[0]
        fields = list(state)
        conv = []
        for i, v in enumerate(fields):
            if v is None or isinstance(v, (int, float, np.integer, np.floating)):
                continue
            leaves, td = ftree.tree_flatten(v)
            if reuse and i in c[1] and len(leaves) == len(c[1][i][0]) \
                    and all(a is b for a, b in zip(leaves, c[1][i][0])):
                fields[i] = c[1][i][1]
            elif td == lay.treedef and all(type(a) is np.ndarray and a.shape == sh and a.dtype == lay.dtype
                                           for a, (_, _, sh) in zip(leaves, lay.spans)):
                fields[i] = lay.pack(leaves)
            else:
                return None
            conv.append(i)
        flat = type(state)(*fields) if hasattr(type(state), "_fields") else type(state)(fields)
        return flat, conv

    def _fused_step(self, params, opt_state, batch, micro_batches):
        """The flat step (see the class docstring), or None when it does not apply."""
        if not getattr(getattr(self.optimizer, "update", None), "elementwise", False):
            if self.fused:
                raise TypeError("DataParallel(fused=True): the optimizer's update is not marked "
                                "elementwise (update.elementwise = True)")
            return None
        fp = self._flat_params(params)
        fs = self._flat_state(opt_state, fp[0]) if fp is not None else None
        if fs is None:
            if self.fused:
                raise TypeError("DataParallel(fused=True) needs parameters that are ndarrays of one "
                                "floating dtype and an optimizer state of parameter-shaped trees")
            return None
        lay, pflat, _ = fp
        sflat, conv = fs
        w = self.world
        acc, loss = _local_grads(self._grad(), params, batch, self.accum_steps, micro_batches,
                                 self.returns_loss)
        g_leaves, gtd = ftree.tree_flatten(acc)
        if gtd != lay.treedef or len(g_leaves) != len(lay.spans) or not all(
                isinstance(g, np.ndarray) and g.dtype == lay.dtype and g.shape == sh
                for g, (_, _, sh) in zip(g_leaves, lay.spans)):
            # not the parameters' layout and dtype: the per-leaf path reduces (and reports) it
            return _reduce_and_apply(w, self.optimizer, params, opt_state, acc, loss, self.returns_loss,
                                     self.bucket_bytes, self.timeout, self._sig_state, self.nonfinite,
                                     self.step_count + 1)
        for v, g in zip(lay.gviews, g_leaves):
            v[...] = g
        n = lay.n
        lay.gbuf[n] = loss if loss is not None else 0.0
        # the non-finite check: one pass over the packed gradient; its flag rides in the allreduce
        check = self.nonfinite is not None
        lay.gbuf[n + 1] = 0.0 if not check or _all_finite(lay.gbuf[:n]) else 1.0
        res = np.empty(n + 2, dtype=lay.dtype)
        if w.comm is not None and w.size > 1:
            if self._checked is not lay:   # first step with this layout: agree on it across ranks
                w.check_same("DataParallel.step", {"tree signature": lay.sig}, timeout=self.timeout,
                             detail=lambda: tree_detail(
                                 [(pth, sh, lay.dtype) for (pth, _), (_, _, sh)
                                  in zip(ftree.tree_flatten_with_path(params)[0], lay.spans)],
                                 lay.treedef, root="params"))
                self._checked = lay
            if lay.persistent is None:
                lay.persistent = _persistent_buckets(w, lay)
            for (lo, hi), preq in zip(lay.buckets, lay.persistent):
                if preq is None:
                    ring_allreduce(lay.gbuf[lo:hi], op="mean", out=res[lo:hi], timeout=self.timeout,
                                   check=False, comm=w)
                    continue
                seq = w.next_seq()
                preq.Start()
                if not preq.Test():
                    w.wait([preq], lambda: f"DataParallel.step gradient allreduce #{seq} (n={hi - lo})",
                           timeout=self.timeout, seq=seq)
                np.true_divide(lay.rbuf[lo:hi], w.size, out=res[lo:hi])   # the mean, as ring_allreduce's
        else:
            res[...] = lay.gbuf
        if check and res[n + 1] != 0.0:
            paths = [p for p, _ in ftree.tree_flatten_with_path(params)[0]]
            step = self.step_count + 1
            _nonfinite_outcome(w, self.nonfinite, step, lay.views(lay.gbuf), paths, self.timeout)
            self.skipped_steps.append(step)
            return params, opt_state, (float(res[n]) if self.returns_loss else None)
        updates, new_state = self.optimizer.update(res[:n], sflat, pflat)
        new_p = np.add(pflat, updates)
        if new_p.dtype != lay.dtype:
            new_p = new_p.astype(lay.dtype)
        p_leaves = lay.views(new_p)
        params_out = ftree.tree_unflatten(lay.treedef, p_leaves)
        fields = list(new_state)
        scache = {}
        for i in conv:
            v = fields[i]
            if isinstance(v, np.ndarray) and v.shape == (n,):
                sl = lay.views(v)
                fields[i] = ftree.tree_unflatten(lay.treedef, sl)
                scache[i] = (sl, v)
        state_out = type(new_state)(*fields) if hasattr(type(new_state), "_fields") else type(new_state)(fields)
        self._p_cache = (params_out, p_leaves, new_p, lay)
        self._s_cache = (state_out, scache, new_state)
        return params_out, state_out, (float(res[n]) if self.returns_loss else None)

    def check(self, params):
        """Cross-rank checksum of ``params``; raises ParameterDivergenceError on every rank."""
        check_params_in_sync(params, self.step_count, timeout=self.timeout, comm=self.world)

    # ------------------------------------------------------------ checkpoints
    def save(self, path, params, opt_state, metadata=None):
        """Rank 0 writes ``{params, opt_state}`` + step atomically; every rank waits for it."""
        if self.world.rank == 0:
            meta = {"step": self.step_count, "world_size": self.world.size}
            if metadata:
                meta["user"] = metadata
            _ckpt.save(path, {"params": params, "opt_state": opt_state}, metadata=meta)
        self.world.barrier("DataParallel.save barrier", timeout=self.timeout)

    def restore(self, path, params, opt_state):
        """Resume: rank 0 reads ``path`` (``params``/``opt_state`` give the structure) and
        broadcasts; returns ``(params, opt_state)`` and sets ``step_count``."""
        like = {"params": params, "opt_state": opt_state}
        step = np.zeros((), dtype=np.int64)
        if self.world.rank == 0:
            if not os.path.exists(path):
                raise FileNotFoundError(f"DataParallel.restore: no checkpoint at {path!r}")
            tree, meta = _ckpt.load(path, like=like)
            step = np.asarray(int((meta or {}).get("step", 0)), dtype=np.int64)
        else:
            tree = like
        tree, step = broadcast_tree((tree, step), timeout=self.timeout, comm=self.world)
        self.step_count = int(step)
        return tree["params"], tree["opt_state"]
