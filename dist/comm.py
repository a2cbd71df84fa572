"""The communicator: who am I, how long do I wait, and what happens on failure.

Owns :func:`world` (rank, size and local rank on a duplicated ``COMM_WORLD``),
the deadline-bounded wait every other module uses instead of a blocking
``Wait`` (:meth:`World.wait`), the cross-rank agreement check that turns
mismatched lengths/dtypes/trees into the same clear error on every rank
(:meth:`World.check_same`, folded into one fixed-size persistent allreduce
that small floating messages share, see :class:`_Control`; ring_allreduce's
speculative rounds, :class:`_Speculation`; the node shared-memory region that
reduces its repeated mid-size calls, :class:`_NodeShm`), the diagnosis that names the ranks that never
joined a collective, and the job-wide abort on an uncaught exception.

A plain ``python train.py`` (no ``mpiexec``) is a world of size 1, also when
mpi4py is not installed; multi-rank features then raise
:class:`MPIUnavailableError` with what to install or how to launch.

Polling yields the core (``sched_yield``) after ``FUNCGRAD_COMM_YIELD_AFTER``
failed tests: 1 when the node runs more ranks than cores (measured at p = 4 on
2 cores, small ring_allreduce calls: 1.94x ``comm.Allreduce`` against 2.57x
when yielding after 8), 2000 otherwise (spinning like MPI's own blocking
calls). Oversubscribed, it then yields after every ``FUNCGRAD_COMM_TESTS_PER_YIELD``
(3) failed tests rather than after each: measured at p = 4 on 2 cores, a
persistent allreduce polled with 1, 2, 3, 4, 6 and 10 tests per yield took
1.29, 1.04, 0.92, 0.94, 0.99 and 1.03x ``comm.Allreduce`` at 1e3 float32 and
1.31, 1.17, 1.11, 1.14, 1.27 and 1.22x at 1e4 (a yield right after a failed
test gives the core away before MPI's progress engine has finished its
part of the exchange). After ``FUNCGRAD_COMM_SLEEP_AFTER`` seconds (default 1 ms) of
waiting sleeps ``FUNCGRAD_COMM_SLEEP`` (20 us) between tests so a long wait
for a straggler frees its core.

Deadline: ``timeout=`` arguments everywhere, else ``FUNCGRAD_COMM_TIMEOUT``
(seconds) from the environment, else 120 s.
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
from .errors import CommMismatchError, CommTimeout, MPIUnavailableError, RankFailure

__all__ = ["World", "world", "default_timeout", "install_abort_hook"]

_DEFAULT_TIMEOUT = 120.0
_DIAG_TAG_BASE = 1 << 20           # tags on the diagnosis communicator
_YIELD_AFTER_ENV = os.environ.get("FUNCGRAD_COMM_YIELD_AFTER")  # polls before yielding the core
_YIELD_AFTER = 1
_TESTS_PER_YIELD_ENV = os.environ.get("FUNCGRAD_COMM_TESTS_PER_YIELD")  # polls between yields
_TESTS_PER_YIELD = 3
_SLEEP_AFTER = float(os.environ.get("FUNCGRAD_COMM_SLEEP_AFTER", "1e-3"))  # seconds of polling before sleeping
_SLEEP = float(os.environ.get("FUNCGRAD_COMM_SLEEP", "2e-5"))


def default_timeout() -> float:
    """The deadline in seconds: ``FUNCGRAD_COMM_TIMEOUT`` or 120."""
    v = os.environ.get("FUNCGRAD_COMM_TIMEOUT")
    if v is None or v.strip() == "":
        return _DEFAULT_TIMEOUT
    try:
        t = float(v)
    except ValueError:
        raise ValueError(f"FUNCGRAD_COMM_TIMEOUT must be a number of seconds, received {v!r}") from None
    if not t > 0:
        raise ValueError(f"FUNCGRAD_COMM_TIMEOUT must be > 0 seconds, received {v!r}")
    return t


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


_PKG_DIRS = (os.path.dirname(os.path.abspath(__file__)),)


def user_site() -> str:
    """``file:line`` of the innermost caller outside funcgrad.dist (for error messages)."""
    f = sys._getframe(1)
    while f is not None:
        fn = os.path.abspath(f.f_code.co_filename)
        if not fn.startswith(_PKG_DIRS):
            return f"{f.f_code.co_filename}:{f.f_lineno}"
        f = f.f_back
    return "<unknown>"


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
        self.node_shm = False        # see _agree_at_start and _NodeShm
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
        self._diag = _dup(comm, self.timeout, "world(): duplicating the communicator for diagnostics") \
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
        self._ctl = _Control(self) if self.size > 1 else None
        self._spec = _Speculation(self) if self.size > 1 else None

    def _agree_at_start(self, oversubscribed):
        """(every rank can give its small persistent allreduces recursive doubling (``_mpit``),
        some node runs more ranks than cores, every rank allows the node shared-memory
        reduction of :class:`_NodeShm`). Each chooses algorithms every rank must run alike (a
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
        """The node's shared-memory region (:class:`_NodeShm`), created on first use; None when
        the ranks do not all share one node or it is switched off. Collective: every rank must
        ask at the same point (a new speculative signature, which every rank agreed on)."""
        f = self._shm
        if f is None:
            f = self._shm = _NodeShm(self)
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
    def check_same(self, what: str, fields: dict, timeout=None):
        """Every rank must pass equal integer ``fields``; else the same
        :class:`CommMismatchError` is raised on every rank, listing each
        rank's values. One round of the control allreduce (see
        :class:`_Control`) on the fast path."""
        if self.comm is None or self.size == 1:
            return
        self._ctl.run(what, tuple(fields), tuple(int(v) for v in fields.values()), what,
                      timeout=timeout)

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


def _varint(v, out):
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return


def _signed64(v):
    v &= _MASK64
    return v - (1 << 64) if v >> 63 else v


class _Control:
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
        self.comm = _dup(w.comm, w.timeout, "world(): duplicating the communicator for agreement checks")
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
            _varint(v & _MASK64, payload)
        flag = 0
        if len(payload) > 2 * (_HDR_LIMBS - 3):   # does not fit: a 144-bit hash of the fields instead
            import hashlib
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
        mine[1:1 + len(vals)] = [_signed64(v) for v in vals]
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


# limb width (bits) of a speculative round's header, by buffer dtype, and the largest world for
# which its sums of squares stay exact: float64 and int64 16 bits, float32 and int32 8 bits
_SPEC_DTYPES = {"f8": (16, 1 << 20), "i8": (16, 1 << 20), "f4": (8, 258), "i4": (8, 1 << 14)}
_SPEC_PAYLOAD = 18          # bytes of the varint-coded signature (n, dtype code, op, algorithm)


#: int64 words per agreement row: the operation code and the 4 signature fields
ROW_WORDS = 5
#: Message sizes (bytes per rank) that ring_allreduce reduces through node shared memory.
#: Below the lower bound MPI's one small allreduce beats two barriers (measured against
#: comm.Allreduce at p = 4 on 2 cores, float32, the region's steps alone: 2.23x at 4 KB,
#: 1.92x at 10 KB, 1.27x at 20 KB, 1.04x at 40 KB, 0.71x at 400 KB; p = 2: 1.90x, 1.45x,
#: 0.91x, 0.89x, 0.76x)
NODE_SHM_MIN_BYTES = 16 << 10
NODE_SHM_BYTES = 1 << 20
_NODE_SHM_TOTAL = 32 << 20     # and the data part of the region stays under this many bytes
_CRC_RING = zlib.crc32(b"ring_allreduce")


class _NodeShm:
    """A node shared-memory region for ring_allreduce's repeated mid-size calls.

    When every rank of the job shares one node, an ``MPI_Win_allocate_shared``
    window holds, per rank, an arrival counter, a reduction counter, two
    agreement rows (by call parity) and an input slot of ``cap`` bytes, plus
    two output slots (by parity). A call ``c`` with the current speculative
    signature (``_Spec.shm``) then needs no MPI call at all:

    1. copy ``x`` into my input slot, write my call's signature row (parity
       ``c % 2``), set my arrival counter to ``c``;
    2. wait until every arrival counter is ``c``; every rank now reads the
       same rows: all equal to the current signature, or else every rank stops
       here and decides alike (:meth:`_Speculation.decide_rows`: the plain
       path, or the same CommMismatchError) -- the agreement check rides in
       the barrier the reduction needs anyway;
    3. sum my chunk (:func:`ring._chunk_bounds`) of every rank's input, in
       rank order, into output ``c % 2`` and set my reduction counter;
    4. wait until every reduction counter is ``c``; the caller copies the
       output (every rank the same bytes, as with the ring).

    A rank reuses its input slot only after step 4, when every rank has read
    it; output ``c % 2`` is written again at call ``c + 2``, after every rank
    has arrived there, so after every rank has copied it. Each wait has the
    world's deadline and names the ranks whose counters lag. Every rank moves
    ``x`` in, ``1/p`` of every input through the adder and the result out:
    fewer copies than MPI's shared-memory allreduce, which also moves every
    step's message through its cells (measured at p = 4 on 2 cores, 1e5
    float32: 0.71x ``comm.Allreduce``; 0.76x at p = 2). Stores and loads are
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
        lo, hi = _chunk_bounds(n, self.p)[rank:rank + 2]
        mk = lambda k: np.ndarray(buffer=self.buf, dtype=dt, shape=(n,), offset=self.head + k * self.cap)  # noqa: E731
        ins = [mk(k) for k in range(self.p)]
        outs = [mk(self.p + k) for k in range(2)]
        return ins, [a[lo:hi] for a in ins], outs, [a[lo:hi] for a in outs]


class _Spec:
    """One agreed ring_allreduce signature and its persistent allreduce (see _Speculation)."""

    def __init__(self, w, comm, sig, dt, with_data):
        bits, _ = _SPEC_DTYPES[dt.str[1:]]
        self.sig, self.dt, self.bits = sig, dt, bits
        self.L = _SPEC_PAYLOAD * 8 // bits
        self.shm = None            # the node region when it reduces this signature (see _NodeShm)
        nbytes = sig[0] * dt.itemsize
        if sig[3] == 0 and w.node_shm and NODE_SHM_MIN_BYTES <= nbytes <= NODE_SHM_BYTES:
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
        return np.array([_CRC_RING, *(_signed64(v) for v in sig)], dtype=np.int64)

    def header(self, sig):
        h = self.headers.get(sig)
        if h is None:
            payload = bytearray()
            for v in sig:
                _varint(int(v) & _MASK64, payload)
            if len(payload) > _SPEC_PAYLOAD:      # cannot happen for 4 fields of <= 64 bits; be safe
                import hashlib
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


class _Speculation:
    """ring_allreduce's agreement check folded into the data collective of repeated calls.

    Training loops reduce the same signature (length, dtype, op, algorithm)
    step after step. Once two consecutive checked calls had the same agreed
    signature, every rank holds the same :class:`_Spec`: a persistent
    allreduce, on a communicator of its own, of ``[data | header]`` in the
    call's own dtype (the data only for messages below the ring threshold;
    a ring-size message sends the header alone). While it is current, every
    checked call of every rank runs exactly that collective -- whatever its
    own arguments, so the MPI calls always match -- with the header of its
    actual signature in the limb code of :class:`_Control` (``f`` and ``f*f``,
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
        self.comm = _dup(w.comm, w.timeout, "world(): duplicating the communicator for ring_allreduce")
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
                ent = _SPEC_DTYPES.get(dt.str[1:])
                if ent is None or w.size > ent[1]:
                    self.last = sig
                    return
                try:
                    spec = _Spec(w, self.comm, sig, dt, with_data)
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
        """:meth:`round` through the node region (see :class:`_NodeShm` for the steps)."""
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
            return self.decide_rows(w, spec, sig, rows.copy())
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
            _Speculation._shm_wait(w, counters, c, timeout)
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

    def decide_rows(self, w, spec, sig, rows):
        """:meth:`result` for a node shared-memory round, from every rank's signature row (the
        same rows on every rank, not all equal to ``spec``'s): every rank with one other
        signature: None; else raise the same CommMismatchError on every rank."""
        self.cur = None
        if (rows == rows[0]).all():
            self.last = sig
            return None
        self.last = None
        raise mismatch_error(w, "ring_allreduce", ("length", "dtype", "op", "algorithm"),
                             _CRC_RING, rows)

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
        names = ("length", "dtype", "op", "algorithm")
        mine = np.zeros(len(names) + 1, dtype=np.int64)
        mine[0] = zlib.crc32(b"ring_allreduce")
        mine[1:] = [_signed64(v) for v in sig]
        allv = np.empty((spec.p, mine.size), dtype=np.int64)
        w._seq += 1
        req = self.comm.Iallgather(mine, allv)
        w.wait([req], "ring_allreduce (mismatch report)", timeout=timeout, seq=w._seq)
        raise mismatch_error(w, "ring_allreduce", names, int(mine[0]), allv)


def chunk_bounds(n, p):
    """Offsets of ``p`` contiguous chunks of ``n`` elements (sizes differ by at most one)."""
    q, r = divmod(n, p)
    offs = [0] * (p + 1)
    for i in range(p):
        offs[i + 1] = offs[i] + q + (1 if i < r else 0)
    return offs


_chunk_bounds = chunk_bounds

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


def _dup(comm, timeout, what):
    """``comm.Idup()`` completed before the deadline (every rank must call world())."""
    new, req = comm.Idup()
    deadline = time.monotonic() + timeout
    while not req.Test():
        os.sched_yield()
        if time.monotonic() > deadline:
            me = comm.Get_rank()
            others = [r for r in range(comm.Get_size()) if r != me]
            raise CommTimeout(f"{what} timed out after {timeout:g} s on rank {me}: not every rank of "
                              f"{others} called funcgrad.dist.world() (or a collective using it)",
                              ranks=others, operation=what, timeout=timeout)
    return new


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
    comm = _dup(base, t, "world(): duplicating COMM_WORLD")
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
