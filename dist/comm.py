"""The communicator: who am I, how long do I wait, and what happens on failure.

Owns :func:`world` (rank, size and local rank on a duplicated ``COMM_WORLD``),
the deadline-bounded wait every other module uses instead of a blocking
``Wait`` (:meth:`World.wait`, :meth:`World.poll`), the look for ranks that
exited or finished their script while a wait is stuck (:meth:`World.lost`,
raising :class:`RankFailure`), the diagnosis that names the ranks that never
joined a collective (:meth:`World.diagnose`), the shutdown barrier, and the
job-wide abort on an uncaught exception (:func:`install_abort_hook`).

A World holds, for more than one rank, the agreement check
(:class:`~funcgrad.dist.agreement.Control`, behind :meth:`World.check_same`),
ring_allreduce's speculative rounds
(:class:`~funcgrad.dist.speculation.Speculation`) and, created on first use,
the node shared-memory region (:class:`~funcgrad.dist.shm.NodeShm`); each is
owned by its own module.

A plain ``python train.py`` (no ``mpiexec``) is a world of size 1, also when
mpi4py is not installed; multi-rank features then raise
:class:`MPIUnavailableError` with what to install or how to launch.

Polling yields the core (``sched_yield``) after ``FUNCGRAD_COMM_YIELD_AFTER``
failed tests: 1 when the node runs more ranks than cores, 2000 otherwise
(spinning like MPI's own blocking calls). Oversubscribed, it then yields
after every ``FUNCGRAD_COMM_TESTS_PER_YIELD`` (3) failed tests rather than
after each (a yield right after a failed test gives the core away before
MPI's progress engine has finished its part of the exchange). After
``FUNCGRAD_COMM_SLEEP_AFTER`` seconds (default 1 ms) of waiting it sleeps
``FUNCGRAD_COMM_SLEEP`` (20 us) between tests so a long wait for a straggler
frees its core. The measurements behind these defaults are in
``benchmarks/dist_tuning.md``.

Deadline: ``timeout=`` arguments everywhere, else ``FUNCGRAD_COMM_TIMEOUT``
(seconds) from the environment, else 120 s (:mod:`~funcgrad.dist.deadline`).
"""
from __future__ import annotations

import atexit
import os
import platform
import signal
import sys
import threading
import time
import traceback
import zlib

import numpy as np

from . import _mpit
from .agreement import Control
from .deadline import default_timeout, dup, user_site
from .errors import CommTimeout, MPIUnavailableError, RankFailure
from .shm import NodeShm
from .speculation import Speculation

__all__ = ["World", "world", "default_timeout", "install_abort_hook"]

_DIAG_TAG_BASE = 1 << 20           # tags on the diagnosis communicator
_YIELD_AFTER_ENV = os.environ.get("FUNCGRAD_COMM_YIELD_AFTER")  # polls before yielding the core
_YIELD_AFTER = 1
_TESTS_PER_YIELD_ENV = os.environ.get("FUNCGRAD_COMM_TESTS_PER_YIELD")  # polls between yields
_TESTS_PER_YIELD = 3
_SLEEP_AFTER = float(os.environ.get("FUNCGRAD_COMM_SLEEP_AFTER", "1e-3"))  # seconds of polling before sleeping
_SLEEP = float(os.environ.get("FUNCGRAD_COMM_SLEEP", "2e-5"))


def _import_mpi():
    """mpi4py.MPI, or (None, reason) when it cannot be imported."""
    try:
        from mpi4py import MPI  # noqa: WPS433
    except (ImportError, RuntimeError, OSError) as e:  # missing mpi4py or missing MPI library
        return None, f"{type(e).__name__}: {e}"
    return MPI, None


def _launched_by_mpiexec() -> bool:
    keys = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALRANKID",
            "HYDRA_CONTROL_FD", "PMI_FD")
    return any(k in os.environ for k in keys)


_ABORT_HOOK_INSTALLED = False


def _write_all(fd, text):
    """Write all of ``text`` to file descriptor ``fd`` (one ``os.write`` per pipe-sized piece, so
    the launcher forwards a whole traceback even when the job is torn down right after)."""
    data = text.encode("utf-8", "replace")
    while data:
        try:
            n = os.write(fd, data)
        except InterruptedError:
            continue
        except OSError:
            return
        data = data[n:]


def install_abort_hook():
    """Make an uncaught exception on any rank abort the whole job (``MPI_Abort``).

    Installed when ``funcgrad.dist`` is imported under ``mpiexec`` (and by
    :func:`world` when the world has more than one rank). The whole traceback
    is written first, in one piece and headed by the rank, so the job's output
    shows which rank failed and why even when another rank aborts at once.
    """
    global _ABORT_HOOK_INSTALLED
    if _ABORT_HOOK_INSTALLED:
        return
    MPI, _ = _import_mpi()
    if MPI is None:
        return
    previous = sys.excepthook

    def _hook(etype, value, tb):
        try:
            rank = MPI.COMM_WORLD.Get_rank()
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except Exception:  # noqa: BLE001 (a closed stream must not stop the abort)
                pass
            text = "".join(traceback.format_exception(etype, value, tb))
            _write_all(2, f"[funcgrad.dist] rank {rank}: uncaught {etype.__name__}; aborting the job\n"
                          f"{text}")
            if previous not in (sys.__excepthook__, _hook):
                previous(etype, value, tb)
            time.sleep(0.2)   # let the launcher forward this rank's output before the job is killed
        finally:
            if not issubclass(etype, (SystemExit,)):
                MPI.COMM_WORLD.Abort(1)

    sys.excepthook = _hook
    # Threads too: an exception in a worker thread must not leave the job hanging.
    threading.excepthook = lambda args: _hook(args.exc_type, args.exc_value, args.exc_traceback)
    _ABORT_HOOK_INSTALLED = True


def _process_gone(pid) -> bool:
    """Whether process ``pid`` (on this node) has exited or been killed (gone, or a zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            st = f.read()
    except OSError:
        return False
    return st[st.rindex(b")") + 2:st.rindex(b")") + 3] in (b"Z", b"X")


#: seconds between two looks for vanished peers while a wait is stuck (see World.lost)
WATCH_EVERY = 0.25
#: seconds a wait goes on after a rank it waits for announced the end of its script, before it
#: raises RankFailure (that rank's last messages may still be on their way through a third rank)
FINISH_GRACE = 2.0
_LEAVE_TAG = 7                     # on the diagnosis communicator: "I reached the end of my script"


class World:
    """One process's view of the job.

    Attributes: ``rank``, ``size``, ``local_rank``, ``comm`` (a duplicate of
    ``COMM_WORLD``, or ``None`` without MPI), ``timeout`` (seconds),
    ``MPI`` (the ``mpi4py.MPI`` module or ``None``).
    """

    def __init__(self, comm=None, timeout=None, _mpi=None, _reason=None):
        self.MPI = _mpi
        self._mpi_reason = _reason
        self.timeout = float(timeout) if timeout is not None else default_timeout()
        self._seq = 0
        self._yield_after = _YIELD_AFTER
        self._tests_per_yield = 1
        self.small_rd = False        # see _agree_at_start
        self.oversubscribed = False
        self.node_shm = False        # see _agree_at_start and NodeShm
        self._shm = None
        self.dead = set()            # ranks known to have died (parameter-server drop)
        self.context = ""            # what the training loop is doing (named in RankFailure)
        self.steps_done = -1         # DataParallel steps this rank completed (sent when it leaves)
        self._pids = {}              # rank -> pid, for the other ranks on this node (see lost())
        self._left = {}              # rank -> DataParallel steps it completed before it left
        self._leave_sends = None
        self._ctl = None
        self._spec = None
        if comm is None or _mpi is None:
            self.comm = None
            self._diag = None
            self.rank, self.size, self.local_rank, self.local_size = 0, 1, 0, 1
            return
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self._diag = dup(comm, self.timeout, "world(): duplicating the communicator for diagnostics") \
            if self.size > 1 else None
        self.local_rank, self.local_size = self._local_rank()
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cores = os.cpu_count() or 1
        oversubscribed = self.local_size > cores       # this node runs more ranks than cores
        if _YIELD_AFTER_ENV is not None:
            self._yield_after = int(_YIELD_AFTER_ENV)
        else:
            self._yield_after = _YIELD_AFTER if oversubscribed else 2000
        if _TESTS_PER_YIELD_ENV is not None:
            self._tests_per_yield = max(1, int(_TESTS_PER_YIELD_ENV))
        else:
            self._tests_per_yield = _TESTS_PER_YIELD if self._yield_after < 100 else 1
        self.oversubscribed = oversubscribed
        if self.size > 1:
            self.small_rd, self.oversubscribed, self.node_shm = self._agree_at_start(oversubscribed)
            self._pids = self._node_pids()
        self._ctl = Control(self) if self.size > 1 else None
        self._spec = Speculation(self) if self.size > 1 else None

    def _agree_at_start(self, oversubscribed):
        """(every rank can give its small persistent allreduces recursive doubling (``_mpit``),
        some node runs more ranks than cores, every rank allows the node shared-memory
        reduction of :class:`NodeShm`). Each chooses algorithms every rank must run alike (a
        collective's schedule; ring_allreduce's MPI-or-ring threshold; its shared-memory
        path), so the ranks agree on them once, with one MIN allreduce, instead of each
        deciding from its own node and environment."""
        mine = np.array([1 if _mpit.available(self.MPI) else 0, 0 if oversubscribed else 1,
                         0 if os.environ.get("FUNCGRAD_COMM_NODE_SHM", "1") == "0" else 1],
                        dtype=np.int32)
        agreed = np.zeros(3, dtype=np.int32)
        req = self.comm.Iallreduce(mine, agreed, op=self.MPI.MIN)
        seq = self.next_seq()
        self.wait([req], "world(): agreeing on the small-message allreduce schedule", seq=seq)
        return bool(agreed[0]), not agreed[1], bool(agreed[2])

    def _node_pids(self):
        """{rank: pid} of the other ranks on this node (one allgather at world()): a wait that is
        stuck checks whether they still run (:meth:`lost`), so a rank that exits or is killed is
        named within about a second instead of at the deadline."""
        mine = np.array([zlib.crc32(platform.node().encode()), os.getpid()], dtype=np.int64)
        allv = np.zeros((self.size, 2), dtype=np.int64)
        req = self.comm.Iallgather(mine, allv)
        self.wait([req], "world(): exchanging process ids", seq=self.next_seq(), watch=())
        return {r: int(allv[r, 1]) for r in range(self.size)
                if r != self.rank and allv[r, 0] == mine[0]}

    def lost(self, ranks, finished_ok=False):
        """{rank: how} for those of ``ranks`` that went away: ``"exited"`` (its process on this
        node is gone or a zombie: exited, killed, OOM-killed) or ``"finished"`` (it announced
        the end of its script, see :meth:`_shutdown`; ignored when ``finished_ok``). Ranks on
        other nodes are only seen when they finish, else at the deadline."""
        out = {}
        d = self._diag
        if d is not None:
            MPI = self.MPI
            st = MPI.Status()
            buf = np.zeros(1, dtype=np.int64)
            while d.Iprobe(MPI.ANY_SOURCE, _LEAVE_TAG, st):
                src = st.Get_source()
                d.Recv(buf, source=src, tag=_LEAVE_TAG)
                self._left[src] = int(buf[0])
        for r in ranks:
            pid = self._pids.get(r)
            if pid is not None and _process_gone(pid):
                out[r] = "exited"
            elif r in self._left and not finished_ok:
                out[r] = "finished"
        return out

    def _rank_failure(self, what, how, t):
        """The :class:`RankFailure` for a wait on ``what`` whose peers ``how`` went away."""
        parts = []
        for r in sorted(how):
            if how[r] == "exited":
                parts.append(f"rank {r} (pid {self._pids.get(r)}) exited or was killed")
            else:
                n = self._left.get(r, -1)
                after = f" after {n} DataParallel step(s)" if n >= 0 else ""
                parts.append(f"rank {r} finished its script{after}")
        ranks = sorted(how)
        ctx = f" during {self.context}" if self.context else ""
        msg = (f"{user_site()}: {what}: {'; '.join(parts)}, so it will never join; rank {self.rank} "
               f"was waiting for it{ctx}.")
        if any(v == "finished" for v in how.values()):
            msg += (" The ranks ran different numbers of steps (uneven inputs: a shorter data shard "
                    "or one more batch on some ranks). Give every rank the same number of batches: "
                    "DataParallel.sampler() / funcgrad.data.DistributedSampler gives every rank the "
                    "same count (it pads, or drops the tail with drop_last=True).")
        else:
            msg += " See the output above for that rank's own error, if it printed one."
        return RankFailure(msg, ranks=ranks, operation=what, timeout=t, how=how)

    def node_region(self):
        """The node's shared-memory region (:class:`NodeShm`), created on first use; None when
        the ranks do not all share one node or it is switched off. Collective: every rank must
        ask at the same point (a new speculative signature, which every rank agreed on)."""
        f = self._shm
        if f is None:
            f = self._shm = NodeShm(self)
        return f if f.win is not None else None

    # ------------------------------------------------------------------ info
    def _local_rank(self):
        for rk, sk in (("MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
                       ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
                       ("PMI_LOCAL_RANK", "PMI_LOCAL_SIZE")):
            if rk in os.environ:
                try:
                    return int(os.environ[rk]), int(os.environ.get(sk, self.size))
                except ValueError:
                    pass
        if self.size == 1:
            return 0, 1
        node = self.comm.Split_type(self.MPI.COMM_TYPE_SHARED, key=self.rank)
        try:
            return node.Get_rank(), node.Get_size()
        finally:
            node.Free()

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    def __repr__(self):
        return (f"World(rank={self.rank}, size={self.size}, local_rank={self.local_rank}, "
                f"timeout={self.timeout:g}s, mpi={'yes' if self.comm is not None else 'no'})")

    def require_multi(self, feature: str, min_size: int = 2):
        """Raise a clear error when ``feature`` needs more ranks than we have."""
        if self.size >= min_size:
            return
        if self.MPI is None:
            why = (f"mpi4py could not be imported ({self._mpi_reason}); install it with "
                   f"`pip install 'funcgrad[mpi]'` (mpi4py + an MPI library such as the `mpich` wheel)")
        else:
            why = "this process is a world of size 1 (it was not launched by mpiexec)"
        raise MPIUnavailableError(
            f"{feature} needs at least {min_size} MPI ranks, but {why}. "
            f"Launch it with `mpiexec -n {max(min_size, 2)} python -m mpi4py your_script.py`.")

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    # --------------------------------------------------------------- waiting
    def wait(self, requests, what, peers=None, timeout=None, seq=None, watch=None):
        """Complete every request before the deadline or raise :class:`CommTimeout`.

        Polls ``Request.Test``/``Testall`` (yielding the core between polls,
        which matters when there are more ranks than cores) instead of a
        blocking ``Waitall``. ``what`` is a string or a zero-argument callable
        (formatted only on timeout); ``peers`` the ranks waited for (default:
        all others). On timeout the ranks that never joined collective
        ``seq`` are determined with the other ranks (see :meth:`diagnose`)
        and named in the error. While it waits, the ranks in ``watch`` (default: every other
        rank not known dead) are checked every ``WATCH_EVERY`` seconds (:meth:`lost`); one
        that went away raises :class:`RankFailure` at once, naming it.
        """
        if len(requests) == 1:
            req = requests[0]
            test = req.Test
            if test():
                return
        else:
            testall = self.MPI.Request.Testall
            test = lambda: testall(requests)  # noqa: E731
            if test():
                return
        t = self.timeout if timeout is None else float(timeout)
        res = self.poll(test, t, watch)
        if res is True:
            return
        if callable(what):
            what = what()
        if res is not False:
            raise self._rank_failure(what, res, t)
        if peers is None:
            peers = [r for r in range(self.size) if r != self.rank]
        raise self._timeout(what, peers, t, seq)

    def poll(self, test, t, watch=None, finished_ok=False):
        """Call ``test()`` until it is true (True) or ``t`` seconds have passed (False), yielding
        the core as the module docstring describes. Every ``WATCH_EVERY`` seconds of waiting the
        ranks ``watch`` (None: every other rank not known dead) are checked with :meth:`lost`;
        if any went away (and ``test()`` is still false) returns ``{rank: how}``."""
        yield_after = self._yield_after
        per_yield = self._tests_per_yield
        mono = time.monotonic
        deadline = mono() + t
        polls = 0
        k = 0
        sched_yield = os.sched_yield
        sleep_at = mono() + _SLEEP_AFTER
        watch_at = mono() + WATCH_EVERY
        finished_at = None
        while not test():
            polls += 1
            if polls > yield_after:
                k += 1
                if k < per_yield:
                    continue
                k = 0
                tt = mono()
                if tt > sleep_at:
                    time.sleep(_SLEEP)
                else:
                    sched_yield()
                if tt > deadline:
                    return False
                if tt > watch_at and self.size > 1:
                    watch_at = tt + WATCH_EVERY
                    ranks = watch if watch is not None else \
                        [r for r in range(self.size) if r != self.rank and r not in self.dead]
                    gone = self.lost(ranks, finished_ok) if ranks else None
                    if gone:
                        if "exited" not in gone.values():
                            # a rank that finished may still have its last messages in flight to a
                            # descheduled third rank: it counts once the wait went on for a while
                            if finished_at is None:
                                finished_at = tt
                            if tt - finished_at < FINISH_GRACE:
                                continue
                        end = mono() + 0.05      # what a dead rank sent before it died: received
                        while mono() < end:
                            if test():
                                return True
                        return gone
        return True

    def _timeout(self, what, peers, t, seq):
        missing = self.diagnose(seq) if seq is not None else None
        peers = sorted(set(int(p) for p in peers))
        what = f"{user_site()}: {what}"
        if missing:
            msg = (f"{what} timed out after {t:g} s on rank {self.rank}: rank(s) {missing} never "
                   f"joined it (waited for rank(s) {peers}). Every rank must make the same "
                   f"collective calls in the same order; raise FUNCGRAD_COMM_TIMEOUT if a rank "
                   f"is just slow.")
            ranks = missing
        else:
            msg = (f"{what} timed out after {t:g} s on rank {self.rank} waiting for rank(s) {peers}. "
                   f"Every rank must make the same calls in the same order; raise "
                   f"FUNCGRAD_COMM_TIMEOUT (or pass timeout=) if a rank is just slow.")
            ranks = peers
        return CommTimeout(msg, ranks=ranks, operation=what, timeout=t)

    def diagnose(self, seq, grace=None):
        """After a timeout in collective ``seq``: which ranks never joined it?

        Every rank that times out in the same collective announces itself to
        all others on a separate communicator and listens for a short grace
        period; ranks not heard from are the ones that never arrived.
        """
        if self._diag is None:
            return []
        MPI = self.MPI
        tag = _DIAG_TAG_BASE + (seq % (1 << 20))
        me = np.array([seq], dtype=np.int64)
        others = [r for r in range(self.size) if r != self.rank and r not in self.dead]
        sends = [self._diag.Isend(me, dest=r, tag=tag) for r in others]
        heard = set()
        buf = np.empty(1, dtype=np.int64)
        if grace is None:
            grace = min(max(1.0, 0.25 * self.timeout), 5.0)
        end = time.monotonic() + grace
        status = MPI.Status()
        while time.monotonic() < end and len(heard) < len(others):
            if self._diag.Iprobe(MPI.ANY_SOURCE, tag, status):
                src = status.Get_source()
                self._diag.Recv(buf, source=src, tag=tag)
                heard.add(src)
            else:
                time.sleep(0.002)
        for r in sends:  # eager 8-byte sends: complete locally or are abandoned with the job
            try:
                r.Cancel()
            except Exception:
                pass
        return sorted(set(others) - heard)

    def barrier(self, what="barrier", timeout=None):
        if self.comm is None or self.size == 1:
            return
        seq = self.next_seq()
        req = self.comm.Ibarrier()
        self.wait([req], what, peers=[r for r in range(self.size) if r != self.rank],
                  timeout=timeout, seq=seq)

    # ------------------------------------------------------------- agreement
    def check_same(self, what: str, fields: dict, timeout=None, detail=None):
        """Every rank must pass equal integer ``fields``; else the same
        :class:`CommMismatchError` is raised on every rank, listing each
        rank's values. One round of the control allreduce (see
        :class:`~funcgrad.dist.agreement.Control`) on the fast path. ``detail``
        (a zero-argument callable returning a JSON value, called after a mismatch only)
        describes this rank's arguments for the message: with
        :func:`~funcgrad.dist.agreement.tree_detail` a ``"tree signature"`` field that
        differs is reported leaf by leaf."""
        if self.comm is None or self.size == 1:
            return
        self._ctl.run(what, tuple(fields), tuple(int(v) for v in fields.values()), what,
                      timeout=timeout, detail=detail)

    # --------------------------------------------------------------- shutdown
    def _shutdown(self):
        """At interpreter exit: a deadline-bounded barrier so a dead rank
        makes the job fail instead of hanging in MPI_Finalize."""
        if self.comm is None or self.size == 1:
            return
        if self.dead:
            # Survivors of a dropped worker: MPI_Finalize would wait for the
            # dead rank forever; leave without it (output flushed first).
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        try:
            if self.MPI.Is_finalized():
                return
            # tell the others this rank reached the end of its script: one still waiting for it in
            # a collective (uneven inputs) then says so at once (see lost()) instead of hanging
            mine = np.array([self.steps_done], dtype=np.int64)
            self._leave_sends = (mine, [self._diag.Isend(mine, dest=r, tag=_LEAVE_TAG)
                                        for r in range(self.size) if r != self.rank])
            self.context = "the shutdown barrier at the end of the script"
            seq = self.next_seq()
            req = self.comm.Ibarrier()
            t = self.timeout
            res = self.poll(req.Test, t, finished_ok=True)
            if res is not True:
                what = "shutdown barrier"
                raise self._rank_failure(what, res, t) if res else self._timeout(
                    what, [r for r in range(self.size) if r != self.rank], t, seq)
            self.lost(())          # receive the others' announcements
            f = self._shm
            if f is not None and f.win is not None:
                f.win.Unlock_all()
                f.win.Free()
                self._shm = None
        except CommTimeout as e:
            _write_all(2, f"[funcgrad.dist] rank {self.rank}: {type(e).__name__}: {e}\n")
            time.sleep(0.2)
            self.MPI.COMM_WORLD.Abort(1)

    def abort(self, code=1):
        if self.MPI is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            self.MPI.COMM_WORLD.Abort(code)
        raise SystemExit(code)


_WORLD: World | None = None


def world(timeout=None) -> World:
    """The process's :class:`World` (created once, then cached).

    Duplicates ``COMM_WORLD`` so funcgrad's messages never mix with the
    user's. ``timeout`` (seconds) sets the default deadline; when omitted it
    comes from ``FUNCGRAD_COMM_TIMEOUT`` or is 120 s. With more than one rank
    an uncaught exception on any rank aborts the whole job.
    """
    global _WORLD
    if _WORLD is not None:
        if timeout is not None:
            _WORLD.timeout = float(timeout)
        return _WORLD
    MPI, reason = _import_mpi()
    if MPI is None:
        if _launched_by_mpiexec():
            sys.stderr.write(f"[funcgrad.dist] warning: launched by mpiexec but mpi4py is unavailable "
                             f"({reason}); every process runs as a world of size 1\n")
        _WORLD = World(None, timeout, None, reason)
        return _WORLD
    base = MPI.COMM_WORLD
    t = float(timeout) if timeout is not None else default_timeout()
    if base.Get_size() > 1:
        install_abort_hook()
    comm = dup(base, t, "world(): duplicating COMM_WORLD")
    comm.Set_errhandler(MPI.ERRORS_RETURN)
    w = World(comm, timeout, MPI, None)
    _WORLD = w
    if w.size > 1:
        atexit.register(w._shutdown)
    return w


def _init_under_mpiexec():
    """Under ``mpiexec``: initialise MPI and install the abort hook now, at import.

    A rank that fails before its first ``world()`` call (a data-loading error,
    a bad rank-dependent config) must not leave the others waiting in
    ``MPI_Init`` for it: once every rank has initialised MPI, its uncaught
    exception calls ``MPI_Abort`` and the job ends within seconds, naming it.
    (``mpi4py.MPI`` is imported here, not at module level: a plain
    ``python script.py`` is a world of size 1 and must work without mpi4py.)
    Set ``mpi4py.rc`` options before importing ``funcgrad.dist``.
    """
    if not _launched_by_mpiexec():
        return
    MPI, _ = _import_mpi()
    if MPI is not None and MPI.COMM_WORLD.Get_size() > 1:
        install_abort_hook()
        # MPICH's launcher tells the survivors that a rank was killed by a signal with SIGUSR1
        # (under -disable-auto-cleanup), whose default action kills them too: note it instead;
        # the waits then name the dead rank (World.lost)
        try:
            if signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL:
                signal.signal(signal.SIGUSR1, _note_peer_failure)
        except (ValueError, OSError, AttributeError):   # not the main thread, or no SIGUSR1
            pass


#: how many failure notifications (SIGUSR1 from MPICH's launcher) this process received
PEER_FAILURE_SIGNALS = 0


def _note_peer_failure(signum, frame):
    global PEER_FAILURE_SIGNALS
    PEER_FAILURE_SIGNALS += 1


_init_under_mpiexec()

