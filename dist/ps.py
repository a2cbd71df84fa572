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
from .errors import CommMismatchError, WorkerFailure
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
        return _Server(self).run()


class _Server:
    """One server rank's side of :meth:`ParameterServer.run`: its slice, optimizer state and
    clocks, and the message loop. Each message kind the workers send has its handler
    (:attr:`HANDLERS`: PUSH, PULL, DONE); between messages, :meth:`idle` watches for dead
    or silent workers; :meth:`finish` exchanges the final slices."""

    def __init__(self, ps):
        self.ps = ps
        self.me = me = ps.rank
        self.j = j = ps.server_index
        self.lo, self.hi = lo, hi = ps._slice(j)
        m = hi - lo
        self.m = m
        self.mode = ps.mode
        self.theta = ps._flat0[lo:hi].copy()
        self.opt_state = ps.optimizer.init(self.theta)
        workers = ps.workers
        self.wclock = {w: 0 for w in workers}
        self.clock = 0
        if ps.resume and ps.checkpoint_dir and os.path.exists(ps._ckpt_path(j)):
            path = ps._ckpt_path(j)
            tree, meta = _ckpt.load(path, like={"theta": self.theta, "opt_state": self.opt_state})
            if (meta.get("lo"), meta.get("hi"), meta.get("mode")) != (lo, hi, ps.mode):
                raise CommMismatchError(f"ParameterServer: checkpoint {path} is for slice "
                                        f"[{meta.get('lo')}, {meta.get('hi')}) mode {meta.get('mode')!r}, "
                                        f"this server holds [{lo}, {hi}) mode {ps.mode!r}")
            self.theta, self.opt_state = np.asarray(tree["theta"]), tree["opt_state"]
            self.clock = int(meta["clock"])
            self.wclock = {w: int(meta["wclock"].get(str(w), self.clock)) for w in workers}
            log.info("server %d resumed at clock %d from %s", me, self.clock, path)
        self.last_ckpt = self.clock
        self.alive = set(workers)
        self.done = set()
        self.dropped = set()
        self.got = set()                  # sync: workers whose gradient for `clock` arrived
        self.pending = {}                 # worker -> (requested clock, hello)
        self.push = {w: _Msg(m, ps.dtype) for w in workers}
        self.out = {w: _Msg(m, ps.dtype) for w in workers}
        self.hdr = np.zeros(HDR, dtype=np.int64)
        self.junk = _Msg(m, ps.dtype)
        self.now = time.monotonic
        self.last_heard = {w: self.now() for w in workers}
        self.clock_started = self.now()

    # ------------------------------------------------------------ state changes
    def apply(self, g):
        ps = self.ps
        updates, self.opt_state = ps.optimizer.update(g, self.opt_state, self.theta)
        self.theta = np.asarray(apply_updates(self.theta, updates), dtype=ps.dtype)
        ps.stats["pushes_applied"] += 1

    def slowest(self):
        act = [self.wclock[w] for w in self.alive if w not in self.done]
        return min(act) if act else 1 << 62

    def reply(self, w, kind=PARAMS, aux=0):
        ps = self.ps
        o = self.out[w]
        if o.req is not None:
            ps._wait([o.req], f"server {self.me}: previous reply to worker {w}", [w])
        o.hdr[:] = (kind, self.me, self.clock if self.mode == "sync" else self.wclock[w], aux)
        o.data[:] = self.theta
        o.req = ps.comm.Isend([o.raw, ps.MPI.BYTE], dest=w, tag=kind)
        self.last_heard[w] = self.now()   # its silence is counted from when it got what it waited for

    def try_grant(self, w):
        c, hello = self.pending[w]
        if hello:
            del self.pending[w]
            self.reply(w, aux=self.slowest() if self.mode == "ssp" else 0)
            return
        if self.mode == "sync":
            if self.clock >= c:
                del self.pending[w]
                self.reply(w)
        elif self.mode == "async":
            del self.pending[w]
            self.reply(w)
        else:
            s_min = self.slowest()
            if s_min >= c - self.ps.staleness:
                del self.pending[w]
                self.reply(w, aux=s_min)

    def grant_pending(self):
        for w in list(self.pending):
            self.try_grant(w)

    def maybe_checkpoint(self, cl):
        ps = self.ps
        if not (ps.checkpoint_dir and ps.checkpoint_every):
            return
        every = ps.checkpoint_every
        if cl - self.last_ckpt >= every or (cl % every == 0 and cl != self.last_ckpt):
            _ckpt.save(ps._ckpt_path(self.j), {"theta": self.theta, "opt_state": self.opt_state},
                       metadata={"clock": int(cl), "mode": self.mode, "lo": self.lo, "hi": self.hi,
                                 "num_servers": ps.num_servers,
                                 "wclock": {str(w): int(v) for w, v in self.wclock.items()}})
            self.last_ckpt = cl

    def drop(self, w, why):
        ps = self.ps
        self.alive.discard(w)
        self.dropped.add(w)
        self.pending.pop(w, None)
        self.got.discard(w)
        o = self.out[w]
        if o.req is not None:
            try:
                o.req.Cancel()
            except Exception:
                pass
            o.req = None
        ps.world.dead.add(w)
        ps.stats["dropped"].append(w)
        log.warning("funcgrad.dist: server %d dropped worker rank %d (%s); training goes on with "
                    "workers %s", self.me, w, why, sorted(self.alive))

    def sync_aggregate(self):
        order = sorted(self.got)
        acc = self.push[order[0]].data.copy()
        for w in order[1:]:
            acc += self.push[w].data
        acc /= len(order)
        self.apply(acc)
        self.clock += 1
        self.got.clear()
        self.clock_started = self.now()
        self.maybe_checkpoint(self.clock)
        if self.ps._on_clock is not None:
            self.ps._on_clock(self.clock)
        self.grant_pending()

    # ----------------------------------------------------------------- handlers
    def on_push(self, src, msg, status):
        """A worker's gradient slice: sync collects the clock's gradients, async/ssp apply it."""
        ps, MPI = self.ps, self.ps.MPI
        push = self.push[src]
        nbytes = status.Get_count(MPI.BYTE)
        if nbytes != push.raw.size:
            raise CommMismatchError(f"ParameterServer: server {self.me} got a {nbytes}-byte push from "
                                    f"rank {src}, expected {push.raw.size}")
        rq = msg.Irecv([push.raw, MPI.BYTE])
        ps._wait([rq], f"server {self.me}: push from worker {src}", [src])
        c = int(push.hdr[2])
        if self.mode == "sync":
            if c != self.clock:
                raise CommMismatchError(f"ParameterServer(sync): worker {src} pushed clock {c} "
                                        f"while server {self.me} is at clock {self.clock}")
            self.got.add(src)
            self.wclock[src] = c + 1
            if self.got >= (self.alive - self.done):
                self.sync_aggregate()
            return
        before = self.slowest()
        self.apply(push.data.copy())
        self.wclock[src] = c + 1
        act = [self.wclock[w] for w in self.alive if w not in self.done]
        if act:
            ps.stats["server_max_spread"] = max(ps.stats["server_max_spread"], max(act) - min(act))
        after = self.slowest()
        if after > before:
            self.maybe_checkpoint(after)
            if ps._on_clock is not None and after < (1 << 62):
                ps._on_clock(after)
            self.grant_pending()

    def _header(self, src, msg):
        rq = msg.Irecv([self.hdr, self.ps.MPI.INT64_T])
        self.ps._wait([rq], f"server {self.me}: message from worker {src}", [src])
        return self.hdr

    def on_pull(self, src, msg, status):
        """A worker asks for the parameters of a clock: answered when its mode allows."""
        hdr = self._header(src, msg)
        self.pending[src] = (int(hdr[2]), bool(hdr[3]))
        self.try_grant(src)

    def on_done(self, src, msg, status):
        """A worker pushed its last clock."""
        self._header(src, msg)
        self.done.add(src)
        if self.mode == "sync" and self.got and self.got >= (self.alive - self.done):
            self.sync_aggregate()
        self.grant_pending()

    def on_unexpected(self, src, msg, status):
        self._header(src, msg)
        raise CommMismatchError(f"ParameterServer: server {self.me} got an unexpected message kind "
                                f"{status.Get_tag()} from rank {src}")

    HANDLERS = {PUSH: on_push, PULL: on_pull, DONE: on_done}

    def discard(self, src, msg, status):
        """A message from a dropped worker (or a rank that is no worker): received and ignored."""
        MPI = self.ps.MPI
        junk = self.junk
        rq = msg.Irecv([junk.raw, MPI.BYTE]) if status.Get_count(MPI.BYTE) <= junk.raw.size \
            else msg.Irecv([np.empty(status.Get_count(MPI.BYTE), np.uint8), MPI.BYTE])
        self.ps._wait([rq], f"server {self.me}: discard message from rank {src}", [src])

    # ------------------------------------------------------------ between messages
    def idle(self, t):
        """No message for a while: look for workers that died (sync: stop the job; else drop
        them) or, by ``worker_timeout``, went silent."""
        ps, me = self.ps, self.me
        if t > self.watch_at:
            # a worker whose process is gone (exit, SIGKILL, OOM killer) is known at once
            self.watch_at = t + WATCH_EVERY
            gone = [v for v, how in ps.world.lost(sorted(self.alive - self.done), True).items()
                    if how == "exited"]
            if gone and self.mode == "sync":
                raise WorkerFailure(
                    f"ParameterServer(mode='sync'): server rank {me}: worker rank(s) {gone} "
                    f"exited or were killed at clock {self.clock}; a synchronous step needs every "
                    f"worker, so the job stops. Use mode='async' or 'ssp' to drop failed "
                    f"workers and go on (launched with mpiexec -disable-auto-cleanup).")
            for v in gone:
                self.drop(v, "its process exited or was killed")
            if gone:
                self.grant_pending()
                return
        if self.mode == "sync":
            waiting = sorted(w for w in self.alive if w not in self.got and w not in self.done)
            if waiting and t - self.clock_started > ps.worker_timeout:
                silent = [w for w in waiting if t - self.last_heard[w] > ps.worker_timeout] or waiting
                raise WorkerFailure(
                    f"ParameterServer(mode='sync'): server rank {me} waited "
                    f"{ps.worker_timeout:g} s at clock {self.clock} for the gradient of worker "
                    f"rank(s) {silent}; a synchronous step needs every worker, so the job "
                    f"stops. Use mode='async' or 'ssp' to drop failed workers, or raise "
                    f"worker_timeout / FUNCGRAD_COMM_TIMEOUT if they are just slow.")
        else:
            for w in sorted(self.alive - self.done):
                # a worker whose pull we have not answered yet is waiting on us, not silent
                if w not in self.pending and t - self.last_heard[w] > ps.worker_timeout:
                    self.drop(w, f"silent for {t - self.last_heard[w]:.1f} s")
                    self.grant_pending()

    # -------------------------------------------------------------------- loop
    def run(self):
        ps = self.ps
        comm, MPI = ps.comm, ps.MPI
        status = MPI.Status()
        handlers = self.HANDLERS
        polls = 0
        self.watch_at = self.now() + WATCH_EVERY
        while self.alive - self.done:
            msg = comm.Improbe(MPI.ANY_SOURCE, MPI.ANY_TAG, status)
            if msg is None:
                polls += 1
                if polls > 64:
                    time.sleep(0.0002)
                else:
                    os.sched_yield()
                if polls % 64 == 0:
                    self.idle(self.now())
                continue
            polls = 0
            src = status.Get_source()
            if src in self.dropped or src not in self.wclock:
                self.discard(src, msg, status)
                continue
            self.last_heard[src] = self.now()
            handlers.get(status.Get_tag(), _Server.on_unexpected)(self, src, msg, status)
        return self.finish()

    def finish(self):
        """Every live worker is done: the final slices to every other server and live worker;
        returns the whole final parameter tree."""
        ps, me, mode = self.ps, self.me, self.mode
        comm, MPI = ps.comm, ps.MPI
        ps.stats["clock"] = self.clock if mode == "sync" else self.slowest() if self.alive - self.done \
            else max(self.wclock.values(), default=0)
        if mode == "sync":
            self.maybe_checkpoint(self.clock)
        for w, o in list(self.out.items()):
            if o.req is not None and w in self.alive:
                ps._wait([o.req], f"server {me}: reply to worker {w}", [w])
        flat = ps._flat0.copy()
        flat[self.lo:self.hi] = self.theta
        fin = _Msg(self.m, ps.dtype)
        fin.hdr[:] = (FINAL, me, self.clock, 1 if self.dropped else 0)
        fin.data[:] = self.theta
        dests = [r for r in ps.servers if r != me] + sorted(self.alive)
        others = {s: _Msg(ps._slice(s)[1] - ps._slice(s)[0], ps.dtype) for s in ps.servers if s != me}
        rqs = [comm.Irecv([others[s].raw, MPI.BYTE], source=s, tag=FINAL) for s in others]
        rqs += [comm.Isend([fin.raw, MPI.BYTE], dest=d, tag=FINAL) for d in dests]
        ps._wait(rqs, f"server {me}: final exchange", dests, timeout=ps.timeout + ps.worker_timeout)
        for s, mm in others.items():
            slo, shi = ps._slice(s)
            flat[slo:shi] = mm.data
            if mm.hdr[3]:
                ps.world.dead.add(-1)
        if self.dropped:
            ps.world.dead.add(-1)
        return ps.unflatten(flat)
