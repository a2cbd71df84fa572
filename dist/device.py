"""GPU arrays in the distributed layer: one GPU per rank, reductions staged through pinned host memory.

Owns :func:`local_device` (the GPU of this rank, chosen from its rank on the node) and
:class:`Staging`, which the collectives (``allreduce_tree``, ``broadcast_tree``) and
:class:`~funcgrad.dist.DataParallel` use for trees with GPU leaves (``funcgrad.device_put``
arrays, or anything exposing ``__cuda_array_interface__``).

Guarantees:

* The ``mpich`` wheel is not CUDA-aware: MPI only ever receives host buffers. Every GPU leaf is
  copied into a page-locked (pinned) host buffer, queued on one CUDA stream so the copies of
  consecutive leaves run back to back, and the host waits once for all of them; results go back
  to the GPU the same way. The buffers are kept per (leaf position, shape, dtype) and reused on
  the next step (at most ``_MAX_BUFFERS``), so a training loop allocates them once.
* A staged result is always a fresh GPU array (the pinned buffers are reused, never handed out
  to the caller as a result); leaves that were host arrays stay host arrays.
* Ranks agree on trees by shape and dtype, so a rank holding a tree on the GPU and one holding the
  same tree on the host reduce together.
"""
from __future__ import annotations

import threading

import numpy as np

from ..errors import DeviceError
from ..kernels.base import is_device_array
from ..kernels.cuda_backend import CUDA, device_put, devices
from .comm import world

__all__ = ["local_device", "has_device_leaves", "Staging", "STAGING"]

_MAX_BUFFERS = 512


def _kernels():
    return CUDA.namespace()


def has_device_leaves(leaves) -> bool:
    return any(is_device_array(x) for x in leaves)


def local_device(comm=None) -> str:
    """Select this rank's GPU, ``"cuda:<local rank mod the node's GPU count>"``, for the calling thread and
    return its name (pass it to ``funcgrad.device_put`` and ``DataLoader(device=...)``).

    Launched as ``mpiexec -n 4 python -m mpi4py train.py`` on a node with 4 GPUs, rank ``r`` gets
    ``cuda:r``. Raises :class:`funcgrad.DeviceError` when numba.cuda sees no GPU.
    """
    w = comm if comm is not None else world()
    names = devices()
    if not names:
        raise DeviceError("funcgrad.dist.local_device: numba.cuda sees no GPU on this node "
                          "(funcgrad.devices() is empty); train on the CPU, or install funcgrad[cuda]")
    name = names[w.local_rank % len(names)]
    device_put(None, name)   # selects it for this thread
    return name


class Staging:
    """Reused pinned host buffers for the GPU leaves of the trees a rank reduces or broadcasts."""

    def __init__(self):
        self._bufs: dict = {}
        self._lock = threading.Lock()

    def _buffer(self, key, shape, dtype):
        buf = self._bufs.get(key)
        if buf is None:
            if len(self._bufs) >= _MAX_BUFFERS:
                self._bufs.clear()
            buf = self._bufs[key] = _kernels().cuda.pinned_array(shape, dtype=dtype)
        return buf

    def to_host(self, leaves, tag=""):
        """Host arrays for ``leaves``: each GPU leaf copied into its pinned buffer (valid until the next
        ``to_host`` with the same ``tag`` and layout), other leaves as they are."""
        K = _kernels()
        out = list(leaves)
        with self._lock:
            stream = None
            for i, x in enumerate(leaves):
                if not is_device_array(x):
                    continue
                d = K.as_device(x)
                if not d.is_c_contiguous():
                    d = K.as_device(K.copy(d))
                dt = np.dtype(d.dtype)
                buf = self._buffer((tag, i, tuple(d.shape), dt.str), tuple(d.shape), dt)
                if stream is None:
                    stream = K.cuda.stream()
                d.copy_to_host(buf, stream=stream)
                out[i] = buf
            if stream is not None:
                stream.synchronize()
        return out

    @staticmethod
    def to_device(host_leaves, like_leaves):
        """``host_leaves`` with each one whose ``like_leaves`` partner is a GPU array copied to the GPU."""
        K = _kernels()
        out = list(host_leaves)
        stream = None
        for i, (h, like) in enumerate(zip(host_leaves, like_leaves)):
            if is_device_array(like):
                if stream is None:
                    stream = K.cuda.stream()
                out[i] = K.cuda.to_device(np.ascontiguousarray(h), stream=stream)
        if stream is not None:
            stream.synchronize()
        return out


STAGING = Staging()
