"""Deadlines, and what the modules below :class:`~funcgrad.dist.comm.World` share.

Owns the default deadline (:func:`default_timeout`: ``timeout=`` arguments
everywhere, else ``FUNCGRAD_COMM_TIMEOUT`` seconds from the environment, else
120 s), the deadline-bounded duplication of a communicator (:func:`dup`: every
rank must call ``world()``, and one that does not is named instead of hanging)
and the user's ``file:line`` that every error message of funcgrad.dist starts
with (:func:`user_site`). The deadline-bounded wait itself is
:meth:`World.wait <funcgrad.dist.comm.World.wait>`.
"""
from __future__ import annotations

import os
import sys
import time

from .errors import CommTimeout

__all__ = ["default_timeout", "dup", "user_site"]

_DEFAULT_TIMEOUT = 120.0


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


def dup(comm, timeout, what):
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

