"""MPICH's control variables through the MPI tool interface (MPI_T), via ctypes.

Owns :func:`small_allreduce_algorithm`: a context in which the persistent
allreduces funcgrad creates for small messages (the control allreduce, the
speculative rounds of ``ring_allreduce``, DataParallel's small gradient
buckets) get MPICH's recursive-doubling schedule instead of its default
choice. A persistent request keeps the schedule it was created with, so the
variable is set only around ``Allreduce_init`` and then restored; nothing
else in the process sees it.

Recursive doubling pays up to :data:`MAX_BYTES` and not above (the figures
are in ``benchmarks/dist_tuning.md``).

Every rank must make the same choice (a collective's ranks must run the same
schedule): it depends only on the message size and on ``World.small_rd``,
which ``world()`` agrees on across ranks once (:func:`available`, reduced
with MIN). It is skipped, so the
library's default stands, when the MPI is not MPICH, when MPI_T or the
variable is missing, when the user set ``MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM``
themselves, or when ``FUNCGRAD_COMM_SMALL_ALGORITHM=default``.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import re

#: Largest persistent allreduce (bytes) that gets recursive doubling (see the module docstring).
MAX_BYTES = 64 * 1024 + 1024

_VAR = "MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM"
_WANT = "sched_recursive_doubling"
_STATE: dict = {}


def _libmpi():
    """The libmpi this process has loaded (mpi4py's), found in /proc/self/maps."""
    pat = re.compile(r"/libmpi(?:ch)?\.so(?:\.\d+)*$")
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rsplit(None, 1)[-1]
                if pat.search(path):
                    return ctypes.CDLL(path)
    except OSError:
        return None
    return None


def _setup(MPI):
    """(library, cvar handle, value for recursive doubling) or None when unavailable."""
    if os.environ.get("FUNCGRAD_COMM_SMALL_ALGORITHM", "").strip().lower() == "default":
        return None
    if _VAR in os.environ:                        # the user chose; leave it to them
        return None
    try:
        if MPI.get_vendor()[0] != "MPICH":
            return None
    except Exception:
        return None
    lib = _libmpi()
    if lib is None:
        return None
    try:
        c_int, byref = ctypes.c_int, ctypes.byref
        provided = c_int()
        if lib.MPI_T_init_thread(0, byref(provided)) != 0:
            return None
        idx = c_int()
        if lib.MPI_T_cvar_get_index(_VAR.encode(), byref(idx)) != 0:
            return None
        name = ctypes.create_string_buffer(256)
        desc = ctypes.create_string_buffer(8192)
        nlen, dlen = c_int(256), c_int(8192)
        verb, dtype, bind, scope = c_int(), c_int(), c_int(), c_int()
        enum = ctypes.c_void_p()
        if lib.MPI_T_cvar_get_info(idx, name, byref(nlen), byref(verb), byref(dtype), byref(enum),
                                   desc, byref(dlen), byref(bind), byref(scope)) != 0:
            return None
        if dtype.value != MPI._handleof(MPI.INT):
            return None
        # MPICH lists the choices in the order of their integer values, one per line: "name - text"
        names = [m.group(1) for m in (re.match(r"\s*([a-z_]+)\s+-\s", ln)
                                      for ln in desc.value.decode(errors="replace").splitlines()[1:]) if m]
        if _WANT not in names or names[0] != "auto":
            return None
        handle = ctypes.c_void_p()
        count = c_int()
        if lib.MPI_T_cvar_handle_alloc(idx, None, byref(handle), byref(count)) != 0 or count.value != 1:
            return None
        return lib, handle, names.index(_WANT)
    except (AttributeError, OSError, ValueError):
        return None


def _state(MPI):
    if "s" not in _STATE:
        _STATE["s"] = _setup(MPI)
    return _STATE["s"]


def read(MPI):
    """The variable's current integer value, or None when it is not available."""
    st = _state(MPI)
    if st is None:
        return None
    lib, handle, _ = st
    v = ctypes.c_int()
    return v.value if lib.MPI_T_cvar_read(handle, ctypes.byref(v)) == 0 else None


def available(MPI) -> bool:
    """Whether this process can set the variable (agree on it across ranks before use)."""
    return _state(MPI) is not None


@contextlib.contextmanager
def small_allreduce_algorithm(w, nbytes):
    """Inside: persistent allreduces of ``nbytes`` created now on ``w``'s ranks use recursive
    doubling when ``nbytes <= MAX_BYTES`` and every rank can set it (see the module docstring)."""
    st = _state(w.MPI) if nbytes <= MAX_BYTES and getattr(w, "small_rd", False) else None
    if st is None:
        yield False
        return
    lib, handle, want = st
    old = ctypes.c_int()
    if lib.MPI_T_cvar_read(handle, ctypes.byref(old)) != 0:
        yield False
        return
    new = ctypes.c_int(want)
    if lib.MPI_T_cvar_write(handle, ctypes.byref(new)) != 0:
        yield False
        return
    try:
        yield True
    finally:
        lib.MPI_T_cvar_write(handle, ctypes.byref(old))
