"""Parameter server: server ranks hold the parameters, worker ranks compute gradients.

Owns :class:`ParameterServer`. Ranks ``0 .. num_servers-1`` are servers,
the rest are workers. The parameters (a pytree of floating arrays) are
flattened in canonical order into one vector and sharded over the servers
by contiguous slices; each server runs the optimizer (any optax-style
``init``/``update``, e.g. ``funcgrad.optim.sgd``) on its slice, which is
exact for element-wise optimizers (SGD, momentum, Adam, ...).

Each worker clock ``c``: pull the parameters from every server, call
``grad_fn(params, c)``, push the gradient slices. Modes:

``sync``  (BSP) a server applies clock ``c`` once every live worker's
          gradient for ``c`` has arrived, summed in worker-rank order and
          divided by the number of workers: deterministic, and equal to
          sequential SGD on the averaged gradient. A pull for clock ``c``
          is answered once clock ``c - 1`` is applied.
``async`` every push is applied as its own optimizer step on arrival;
          pulls are answered at once.
``ssp``   stale-synchronous: pushes applied on arrival; a worker at clock
          ``c`` gets its parameters only when the slowest live worker has
          pushed ``c - s`` clocks (``staleness=s``); the gap ``c - slowest``
          each worker observed is in ``stats['gaps']``.

Wire format: no pickle. Each message is one byte buffer: a header of four
int64 ``(kind, sender rank, clock, aux)`` followed, for pushes and
parameter replies, by the float payload; the MPI tag is the kind. Servers
take messages with ``Improbe``/``Message.Irecv`` from any source, workers
post ``Irecv``s before sending their pull. Every wait has a deadline.

Faults: under ``sync`` a worker silent for ``worker_timeout`` seconds
stops the job with :class:`WorkerFailure` naming it (the exception aborts
every rank). Under ``async`` and ``ssp`` it is dropped (logged on the
``funcgrad.dist`` logger) and training goes on with the others; to let the
survivors live on after a process dies, MPICH's launcher needs
``mpiexec -disable-auto-cleanup``: hydra otherwise kills every rank as soon
as one process ends without ``MPI_Finalize``, whatever its exit code (checked
with an ``os._exit(0)``), and nothing inside the dying process or the
survivors can prevent that. A worker on the servers' node whose process is gone
(exit, SIGKILL, OOM killer) is seen within about ``comm.WATCH_EVERY`` seconds by
its process id, without waiting for ``worker_timeout``; a rank killed by a
signal makes hydra kill every rank even with ``-disable-auto-cleanup``, unless
each rank runs in a shell that outlives it (``sh -c "trap '' USR1; python ..."``,
see the README). Workers wait ``timeout + worker_timeout`` for the servers, so
the server's diagnosis is the one reported. With ``checkpoint_dir`` and
``checkpoint_every=k`` each server writes its slice, optimizer state and
clocks every ``k`` clocks (``ps_server<j>.npz``); ``resume=True`` restarts
from those files (exactly, in ``sync`` mode).

Shutdown: workers send DONE after their last push; when every live worker
is done the servers send their final slice to every live rank, so
:meth:`ParameterServer.run` returns the final parameters on every rank.
"""
from __future__ import annotations

import logging
import os
import time

import numpy as np

import funcgrad.tree as ftree

from . import checkpoint as _ckpt
from .buckets import broadcast_tree
from .comm import WATCH_EVERY, World, world
from .ddp import apply_updates
from .errors import CommMismatchError, CommTimeout, WorkerFailure
from .ring import _chunk_bounds

__all__ = ["ParameterServer"]

log = logging.getLogger("funcgrad.dist")

PULL, PUSH, DONE, PARAMS, FINAL = 1, 2, 3, 4, 5
_KIND = {PULL: "PULL", PUSH: "PUSH", DONE: "DONE", PARAMS: "PARAMS", FINAL: "FINAL"}
HDR = 4                # int64 header words
HDR_BYTES = 8 * HDR
MODES = ("sync", "async", "ssp")


class _Msg:
    """A reusable message buffer: int64 header view + payload view over one byte array."""

    __slots__ = ("raw", "hdr", "data", "req")

    def __init__(self, n, dtype):
        dtype = np.dtype(dtype)
        self.raw = np.zeros(HDR_BYTES + n * dtype.itemsize, dtype=np.uint8)
        self.hdr = self.raw[:HDR_BYTES].view(np.int64)
        self.data = self.raw[HDR_BYTES:].view(dtype)
        self.req = None


class ParameterServer:
    """Parameter-server training; construct it on every rank with the same arguments.

    Parameters
    ----------
    params : pytree of floating arrays
        Initial parameters (rank 0's are used everywhere).
    optimizer : optax-style object with ``init``/``update``
    mode : "sync", "async" or "ssp"
    num_servers : int
        Server ranks (``0 .. num_servers-1``); at least one worker must remain.
    staleness : int
        The SSP bound ``s``.
    checkpoint_dir, checkpoint_every, resume :
        Server checkpoints every ``checkpoint_every`` clocks; resume from them.
    timeout : float
        Deadline of every wait (default: the world's, ``FUNCGRAD_COMM_TIMEOUT``).
    worker_timeout : float
        Silence after which a worker is declared dead (default: ``timeout``).
    """

    def __init__(self, params, optimizer, *, mode="sync", num_servers=1, staleness=2,
                 checkpoint_dir=None, checkpoint_every=0, resume=False, timeout=None,
                 worker_timeout=None, comm: World | None = None):
        if mode not in MODES:
            raise ValueError(f"ParameterServer: mode must be one of {MODES}, received {mode!r}")
        if not (hasattr(optimizer, "init") and hasattr(optimizer, "update")):
            raise TypeError("ParameterServer: optimizer must have .init(params) and .update(grads, state, params)")
        if int(num_servers) < 1:
            raise ValueError(f"ParameterServer: num_servers must be >= 1, received {num_servers}")
        if int(staleness) < 0:
            raise ValueError(f"ParameterServer: staleness must be >= 0, received {staleness}")
        self.world = w = comm if comm is not None else world()
        w.require_multi(f"ParameterServer (mode={mode!r}, {num_servers} server rank(s) + workers)",
                        min_size=int(num_servers) + 1)
        self.mode = mode
        self.num_servers = k = int(num_servers)
        self.staleness = int(staleness)
        self.optimizer = optimizer
        self.timeout = w.timeout if timeout is None else float(timeout)
        self.worker_timeout = self.timeout if worker_timeout is None else float(worker_timeout)
        self.checkpoint_dir = checkpoint_dir
        self.checkpoint_every = int(checkpoint_every or 0)
        self.resume = bool(resume)
        self.rank = w.rank
        self.servers = list(range(k))
        self.workers = list(range(k, w.size))
        self.num_workers = len(self.workers)
        self.is_server = w.rank < k
        self.is_worker = not self.is_server
        self.worker_index = w.rank - k if self.is_worker else None
        self.server_index = w.rank if self.is_server else None
        # this parameter server's own message space (nonblocking dup, deadline-bounded)
        self.comm, req = w.comm.Idup()
        w.wait([req], "ParameterServer: communicator duplication", timeout=self.timeout)
        self.MPI = w.MPI
        self.stats = {"gaps": [], "max_gap": 0, "pushes_applied": 0, "dropped": [], "clock": 0,
                      "server_max_spread": 0}

        # canonical flat layout; every rank must pass the same structure
        params = broadcast_tree(params, root=0, timeout=self.timeout, comm=w)
        leaves, self.treedef = ftree.tree_flatten(params)
        arrays = [np.asarray(l) for l in leaves]
        for a in arrays:
            if a.dtype.kind != "f":
                raise TypeError(f"ParameterServer: parameters must be floating arrays, received a leaf of "
                                f"dtype {a.dtype}")
        self.dtype = np.result_type(*arrays) if arrays else np.dtype(np.float64)
        self.shapes = [a.shape for a in arrays]
        self.dtypes = [a.dtype for a in arrays]
        sizes = [a.size for a in arrays]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int).tolist()
        self.n = self.offsets[-1]
        self.bounds = _chunk_bounds(self.n, k)
        self._flat0 = np.concatenate([a.reshape(-1).astype(self.dtype) for a in arrays]) \
            if arrays else np.zeros(0, self.dtype)

    # ----------------------------------------------------------- layout
    def _slice(self, j):
        return self.bounds[j], self.bounds[j + 1]

    def unflatten(self, flat):
        """Parameters pytree (fresh arrays) from the flat vector."""
        out = []
        for i, (shape, dt) in enumerate(zip(self.shapes, self.dtypes)):
            out.append(flat[self.offsets[i]:self.offsets[i + 1]].reshape(shape).astype(dt, copy=True))
        return ftree.tree_unflatten(self.treedef, out)

    def flatten_into(self, tree, flat, what="grads"):
        leaves, td = ftree.tree_flatten(tree)
        if td != self.treedef:
            raise CommMismatchError(f"ParameterServer: {what} must have the parameters' structure "
                                    f"{self.treedef}, received {td}")
        for i, l in enumerate(leaves):
            a = np.asarray(l)
            if a.shape != self.shapes[i]:
                raise CommMismatchError(f"ParameterServer: {what} leaf {i} has shape {a.shape}, the "
                                        f"parameter has {self.shapes[i]}")
            flat[self.offsets[i]:self.offsets[i + 1]] = a.reshape(-1)

    # ----------------------------------------------------------- helpers
    def _wait(self, reqs, what, peers, timeout=None):
        """A deadline-bounded wait for ``peers`` only: a dropped worker elsewhere is no failure."""
        self.world.wait(reqs, what, peers=peers, timeout=self.timeout if timeout is None else timeout,
                        watch=[r for r in peers if r not in self.world.dead])

    def _ckpt_path(self, j):
        return os.path.join(self.checkpoint_dir, f"ps_server{j}.npz")

    def run(self, grad_fn, num_clocks, on_clock=None):
        """Train for ``num_clocks`` clocks per worker; returns the final parameters on every rank.

        ``grad_fn(params, clock) -> grads`` (same structure as params) runs on
        the workers; use ``self.worker_index`` / ``self.num_workers`` to pick
        the worker's data shard. ``on_clock(clock)`` is called on the servers
        whenever their clock (sync) or the slowest worker's clock (async,
        ssp) advances, e.g. to print progress on rank 0.
        """
        self._on_clock = on_clock
        if self.is_server:
            return self._serve(int(num_clocks))
        return self._work(grad_fn, int(num_clocks))

    # ----------------------------------------------------------- worker
    def _work(self, grad_fn, num_clocks):
        comm, MPI, me = self.comm, self.MPI, self.rank
        k = self.num_servers
        recv = [_Msg(self._slice(j)[1] - self._slice(j)[0], self.dtype) for j in range(k)]
        send = [_Msg(self._slice(j)[1] - self._slice(j)[0], self.dtype) for j in range(k)]
        ctl = [np.zeros(HDR, dtype=np.int64) for _ in range(k)]
        flat = self._flat0.copy()
        gflat = np.empty(self.n, dtype=self.dtype)
        pending_sends = []

        def pull(c, hello):
            rqs = []
            for j in range(k):
                rqs.append(comm.Irecv([recv[j].raw, MPI.BYTE], source=j, tag=PARAMS))
            for j in range(k):
                ctl[j][:] = (PULL, me, c, 1 if hello else 0)
                rqs.append(comm.Isend([ctl[j], MPI.INT64_T], dest=j, tag=PULL))
            # a server waits up to worker_timeout for a silent worker before it stops the job (sync)
            # or drops it: wait longer than that, so the server's diagnosis is the one the user sees
            self._wait(rqs, f"worker {me}: pull of clock {c} from servers {self.servers}", self.servers,
                       timeout=self.timeout + self.worker_timeout)
            for j in range(k):
                lo, hi = self._slice(j)
                flat[lo:hi] = recv[j].data
            return [int(recv[j].hdr[2]) for j in range(k)], [int(recv[j].hdr[3]) for j in range(k)]

        clocks, _ = pull(0, True)       # hello: the servers tell us where to start (resume)
        c = min(clocks)
        have = c if len(set(clocks)) == 1 else None
        while c < num_clocks:
            if have != c:
                clocks, mins = pull(c, False)
                if self.mode == "ssp":
                    gap = c - min(mins)
                    self.stats["gaps"].append(gap)
                    self.stats["max_gap"] = max(self.stats["max_gap"], gap)
            have = None
            params = self.unflatten(flat)
            grads = grad_fn(params, c)
            self.flatten_into(grads, gflat)
            if pending_sends:
                self._wait(pending_sends, f"worker {me}: push of clock {c - 1}", self.servers)
            pending_sends = []
            for j in range(k):
                lo, hi = self._slice(j)
                m = send[j]
                m.hdr[:] = (PUSH, me, c, 0)
                m.data[:] = gflat[lo:hi]
                pending_sends.append(comm.Isend([m.raw, MPI.BYTE], dest=j, tag=PUSH))
            c += 1
        if pending_sends:
            self._wait(pending_sends, f"worker {me}: last push", self.servers)
        rqs = [comm.Irecv([recv[j].raw, MPI.BYTE], source=j, tag=FINAL) for j in range(k)]
        for j in range(k):
            ctl[j][:] = (DONE, me, c, 0)
            rqs.append(comm.Isend([ctl[j], MPI.INT64_T], dest=j, tag=DONE))
        # the final parameters come when every worker is done: allow the slowest worker's remaining work
        self._wait(rqs, f"worker {me}: final parameters from servers {self.servers}", self.servers,
                   timeout=self.timeout + self.worker_timeout)
        for j in range(k):
            lo, hi = self._slice(j)
            flat[lo:hi] = recv[j].data
            if recv[j].hdr[3]:
                self.world.dead.add(-1)   # someone was dropped: skip MPI_Finalize at exit
        self.stats["clock"] = c
        return self.unflatten(flat)

    # ----------------------------------------------------------- server
    def _serve(self, num_clocks):
        comm, MPI, me = self.comm, self.MPI, self.rank
        j = self.server_index
        lo, hi = self._slice(j)
        m = hi - lo
        theta = self._flat0[lo:hi].copy()
        opt_state = self.optimizer.init(theta)
        workers = self.workers
        wclock = {w: 0 for w in workers}
        clock = 0
        if self.resume and self.checkpoint_dir and os.path.exists(self._ckpt_path(j)):
            tree, meta = _ckpt.load(self._ckpt_path(j), like={"theta": theta, "opt_state": opt_state})
            if (meta.get("lo"), meta.get("hi"), meta.get("mode")) != (lo, hi, self.mode):
                raise CommMismatchError(f"ParameterServer: checkpoint {self._ckpt_path(j)} is for slice "
                                        f"[{meta.get('lo')}, {meta.get('hi')}) mode {meta.get('mode')!r}, "
                                        f"this server holds [{lo}, {hi}) mode {self.mode!r}")
            theta, opt_state = np.asarray(tree["theta"]), tree["opt_state"]
            clock = int(meta["clock"])
            wclock = {w: int(meta["wclock"].get(str(w), clock)) for w in workers}
            log.info("server %d resumed at clock %d from %s", me, clock, self._ckpt_path(j))
        last_ckpt = clock
        alive = set(workers)
        done = set()
        dropped = set()
        got = set()                       # sync: workers whose gradient for `clock` arrived
        pending = {}                      # worker -> (requested clock, hello)
        push = {w: _Msg(m, self.dtype) for w in workers}
        out = {w: _Msg(m, self.dtype) for w in workers}
        hdr = np.zeros(HDR, dtype=np.int64)
        junk = _Msg(m, self.dtype)
        now = time.monotonic
        last_heard = {w: now() for w in workers}
        clock_started = now()
        status = MPI.Status()
        opt = self.optimizer

        def apply(g):
            nonlocal theta, opt_state
            updates, opt_state = opt.update(g, opt_state, theta)
            theta = np.asarray(apply_updates(theta, updates), dtype=self.dtype)
            self.stats["pushes_applied"] += 1

        def slowest():
            act = [wclock[w] for w in alive if w not in done]
            return min(act) if act else 1 << 62

        def reply(w, kind=PARAMS, aux=0):
            o = out[w]
            if o.req is not None:
                self._wait([o.req], f"server {me}: previous reply to worker {w}", [w])
            o.hdr[:] = (kind, me, clock if self.mode == "sync" else wclock[w], aux)
            o.data[:] = theta
            o.req = comm.Isend([o.raw, MPI.BYTE], dest=w, tag=kind)
            last_heard[w] = now()         # its silence is counted from when it got what it waited for

        def try_grant(w):
            c, hello = pending[w]
            if hello:
                del pending[w]
                reply(w, aux=slowest() if self.mode == "ssp" else 0)
                return
            if self.mode == "sync":
                if clock >= c:
                    del pending[w]
                    reply(w)
            elif self.mode == "async":
                del pending[w]
                reply(w)
            else:
                s_min = slowest()
                if s_min >= c - self.staleness:
                    del pending[w]
                    reply(w, aux=s_min)

        def maybe_checkpoint(cl):
            nonlocal last_ckpt
            if not (self.checkpoint_dir and self.checkpoint_every):
                return
            if cl - last_ckpt >= self.checkpoint_every or (cl % self.checkpoint_every == 0 and cl != last_ckpt):
                _ckpt.save(self._ckpt_path(j), {"theta": theta, "opt_state": opt_state},
                           metadata={"clock": int(cl), "mode": self.mode, "lo": lo, "hi": hi,
                                     "num_servers": self.num_servers,
                                     "wclock": {str(w): int(v) for w, v in wclock.items()}})
                last_ckpt = cl

        def drop(w, why):
            alive.discard(w)
            dropped.add(w)
            pending.pop(w, None)
            got.discard(w)
            if out[w].req is not None:
                try:
                    out[w].req.Cancel()
                except Exception:
                    pass
                out[w].req = None
            self.world.dead.add(w)
            self.stats["dropped"].append(w)
            log.warning("funcgrad.dist: server %d dropped worker rank %d (%s); training goes on with "
                        "workers %s", me, w, why, sorted(alive))

        def sync_aggregate():
            nonlocal clock, clock_started
            order = sorted(got)
            acc = push[order[0]].data.copy()
            for w in order[1:]:
                acc += push[w].data
            acc /= len(order)
            apply(acc)
            clock += 1
            got.clear()
            clock_started = now()
            maybe_checkpoint(clock)
            if self._on_clock is not None:
                self._on_clock(clock)
            for w in list(pending):
                try_grant(w)

        polls = 0
        watch_at = now() + WATCH_EVERY
        while alive - done:
            msg = comm.Improbe(MPI.ANY_SOURCE, MPI.ANY_TAG, status)
            if msg is None:
                polls += 1
                if polls > 64:
                    time.sleep(0.0002)
                else:
                    os.sched_yield()
                if polls % 64 == 0:
                    t = now()
                    if t > watch_at:
                        # a worker whose process is gone (exit, SIGKILL, OOM killer) is known at once
                        watch_at = t + WATCH_EVERY
                        gone = [v for v, how in self.world.lost(sorted(alive - done), True).items()
                                if how == "exited"]
                        if gone and self.mode == "sync":
                            raise WorkerFailure(
                                f"ParameterServer(mode='sync'): server rank {me}: worker rank(s) {gone} "
                                f"exited or were killed at clock {clock}; a synchronous step needs every "
                                f"worker, so the job stops. Use mode='async' or 'ssp' to drop failed "
                                f"workers and go on (launched with mpiexec -disable-auto-cleanup).")
                        for v in gone:
                            drop(v, "its process exited or was killed")
                        if gone:
                            for v in list(pending):
                                try_grant(v)
                            continue
                    if self.mode == "sync":
                        waiting = sorted(w for w in alive if w not in got and w not in done)
                        if waiting and t - clock_started > self.worker_timeout:
                            silent = [w for w in waiting if t - last_heard[w] > self.worker_timeout] or waiting
                            raise WorkerFailure(
                                f"ParameterServer(mode='sync'): server rank {me} waited "
                                f"{self.worker_timeout:g} s at clock {clock} for the gradient of worker "
                                f"rank(s) {silent}; a synchronous step needs every worker, so the job "
                                f"stops. Use mode='async' or 'ssp' to drop failed workers, or raise "
                                f"worker_timeout / FUNCGRAD_COMM_TIMEOUT if they are just slow.")
                    else:
                        for w in sorted(alive - done):
                            # a worker whose pull we have not answered yet is waiting on us, not silent
                            if w not in pending and t - last_heard[w] > self.worker_timeout:
                                drop(w, f"silent for {t - last_heard[w]:.1f} s")
                                for v in list(pending):
                                    try_grant(v)
                continue
            polls = 0
            src, tag = status.Get_source(), status.Get_tag()
            if src in dropped or src not in wclock:
                rq = msg.Irecv([junk.raw, MPI.BYTE]) if status.Get_count(MPI.BYTE) <= junk.raw.size \
                    else msg.Irecv([np.empty(status.Get_count(MPI.BYTE), np.uint8), MPI.BYTE])
                self._wait([rq], f"server {me}: discard message from rank {src}", [src])
                continue
            last_heard[src] = now()
            if tag == PUSH:
                nbytes = status.Get_count(MPI.BYTE)
                if nbytes != push[src].raw.size:
                    raise CommMismatchError(f"ParameterServer: server {me} got a {nbytes}-byte push from "
                                            f"rank {src}, expected {push[src].raw.size}")
                rq = msg.Irecv([push[src].raw, MPI.BYTE])
                self._wait([rq], f"server {me}: push from worker {src}", [src])
                c = int(push[src].hdr[2])
                if self.mode == "sync":
                    if c != clock:
                        raise CommMismatchError(f"ParameterServer(sync): worker {src} pushed clock {c} "
                                                f"while server {me} is at clock {clock}")
                    got.add(src)
                    wclock[src] = c + 1
                    if got >= (alive - done):
                        sync_aggregate()
                else:
                    before = slowest()
                    apply(push[src].data.copy())
                    wclock[src] = c + 1
                    act = [wclock[w] for w in alive if w not in done]
                    if act:
                        self.stats["server_max_spread"] = max(self.stats["server_max_spread"],
                                                              max(act) - min(act))
                    after = slowest()
                    if after > before:
                        maybe_checkpoint(after)
                        if self._on_clock is not None and after < (1 << 62):
                            self._on_clock(after)
                        for w in list(pending):
                            try_grant(w)
            else:
                rq = msg.Irecv([hdr, MPI.INT64_T])
                self._wait([rq], f"server {me}: message from worker {src}", [src])
                if tag == PULL:
                    pending[src] = (int(hdr[2]), bool(hdr[3]))
                    try_grant(src)
                elif tag == DONE:
                    done.add(src)
                    if self.mode == "sync" and got and got >= (alive - done):
                        sync_aggregate()
                    for w in list(pending):
                        try_grant(w)
                else:
                    raise CommMismatchError(f"ParameterServer: server {me} got an unexpected message kind "
                                            f"{tag} from rank {src}")
        self.stats["clock"] = clock if self.mode == "sync" else slowest() if alive - done else \
            max(wclock.values(), default=0)
        if self.mode == "sync":
            maybe_checkpoint(clock)
        # ------------------------------------------------------ final exchange
        for w in list(out):
            if out[w].req is not None and w in alive:
                self._wait([out[w].req], f"server {me}: reply to worker {w}", [w])
        flat = self._flat0.copy()
        flat[lo:hi] = theta
        fin = _Msg(m, self.dtype)
        fin.hdr[:] = (FINAL, me, clock, 1 if dropped else 0)
        fin.data[:] = theta
        dests = [r for r in self.servers if r != me] + sorted(alive)
        others = {s: _Msg(self._slice(s)[1] - self._slice(s)[0], self.dtype) for s in self.servers if s != me}
        rqs = [comm.Irecv([others[s].raw, MPI.BYTE], source=s, tag=FINAL) for s in others]
        rqs += [comm.Isend([fin.raw, MPI.BYTE], dest=d, tag=FINAL) for d in dests]
        self._wait(rqs, f"server {me}: final exchange", dests, timeout=self.timeout + self.worker_timeout)
        for s, mm in others.items():
            slo, shi = self._slice(s)
            flat[slo:shi] = mm.data
            if mm.hdr[3]:
                self.world.dead.add(-1)
        if dropped:
            self.world.dead.add(-1)
        return self.unflatten(flat)
