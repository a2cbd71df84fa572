"""The exception types of funcgrad.dist.

Owns every error the distributed layer raises. Each message says what was
wrong, which ranks are involved and what to do instead.
"""
from __future__ import annotations

from funcgrad.errors import FuncgradError

__all__ = ["DistError", "CommTimeout", "CommMismatchError", "ParameterDivergenceError",
           "MPIUnavailableError", "WorkerFailure", "RankFailure", "NonFiniteGradientError"]


class DistError(FuncgradError):
    """Base class of funcgrad.dist's errors."""


class CommTimeout(DistError, TimeoutError):
    """A blocking communication did not complete before its deadline.

    ``ranks`` are the ranks it waited for (the ones that never showed up when
    that could be determined, else the direct peers), ``operation`` names the
    call and ``timeout`` is the deadline in seconds.
    """

    def __init__(self, message, ranks=(), operation="", timeout=None):
        super().__init__(message)
        self.ranks = tuple(int(r) for r in ranks)
        self.operation = operation
        self.timeout = timeout


class CommMismatchError(DistError, ValueError):
    """Ranks called the same collective with different shapes, dtypes, ops or trees.

    Raised on every rank at once. The message names what differs and each rank's value: the
    shape (``shape: rank 0: (3, 4), rank 1: (4, 3)``), or for pytrees each leaf by its key path
    (``tree['W1']: rank 0 (64, 64) float64, rank 1 (64, 80) float64``; ``missing`` where a
    rank lacks it).
    """


class ParameterDivergenceError(DistError, RuntimeError):
    """Parameters that must be bit-identical on every rank are not."""


class MPIUnavailableError(DistError, RuntimeError):
    """A multi-rank feature was asked for but mpi4py is missing or the world has one rank."""


class WorkerFailure(DistError, RuntimeError):
    """A parameter-server worker stopped responding where the mode cannot go on without it."""


class RankFailure(CommTimeout):
    """A rank this one was waiting for has exited, been killed, or finished its script.

    Raised by every deadline-bounded wait as soon as that is seen (within about
    a second), instead of waiting for the deadline. ``ranks`` are the ranks
    that went away; ``how`` maps each to what happened (``"exited"`` when its
    process is gone, ``"finished"`` when it reached the end of its script).
    A subclass of :class:`CommTimeout`, so code that handles timeouts handles it.
    """

    def __init__(self, message, ranks=(), operation="", timeout=None, how=None):
        super().__init__(message, ranks=ranks, operation=operation, timeout=timeout)
        self.how = dict(how or {})


class NonFiniteGradientError(DistError, FloatingPointError):
    """A rank's gradient held NaN or Inf before the data-parallel reduction.

    Raised on every rank (the reduction would have spread it to all of them).
    ``ranks`` lists the ranks whose gradient was non-finite, ``step`` the
    step number, ``leaves`` the key paths of the non-finite leaves on each of
    those ranks (``{rank: ["['W1']", ...]}``).
    """

    def __init__(self, message, ranks=(), step=None, leaves=None):
        super().__init__(message)
        self.ranks = tuple(int(r) for r in ranks)
        self.step = step
        self.leaves = dict(leaves or {})
