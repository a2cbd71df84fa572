"""The CUDA backend: numba.cuda device arrays, the kernel namespace :mod:`funcgrad.kernels.cuda`.

Generated code runs as Python on the host and launches one CUDA kernel per
primitive (cuBLAS for matmul when CuPy is installed): the ``njit`` strategy,
which compiles a whole function for the CPU, means the same here, so loops over
scalars and Python control flow stay on the host while every array operation
runs on the device. Arithmetic is spelled ``K.add(x, y)`` in the generated code
(device arrays have no operators).

Also owns the user-facing device API: :func:`devices`, :func:`device_put`,
:func:`device_get`. ``numba.cuda`` is imported on first use only (it is an
optional dependency: ``pip install funcgrad[cuda]``; the simulator,
``NUMBA_ENABLE_CUDASIM=1``, needs no GPU).
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import os

import numpy as np

from ..errors import DeviceError
from ..tree import tree_map
from .base import FAST_DEVICE_TYPES, Backend, is_device_array, register_backend

__all__ = ["CUDABackend", "CUDA", "devices", "device_put", "device_get"]


_K: list = []


def _kernels():
    """The kernel module :mod:`funcgrad.kernels.cuda`, loaded on first GPU use: it imports numba.cuda, an
    optional dependency (numba-cuda) that costs ~0.5 s to load, which ``import funcgrad`` must neither pay
    for nor need. (By name through importlib, the one deferred import of a funcgrad module, for that reason.)"""
    if not _K:
        try:
            _K.append(importlib.import_module(__package__ + ".cuda"))
        except ImportError as e:   # pragma: no cover - numba brings numba.cuda, or numba-cuda replaces it
            raise DeviceError(f"the GPU backend needs numba-cuda (pip install 'funcgrad[cuda]'): {e}") from None
        FAST_DEVICE_TYPES.add(_K[0]._DevArray)
    return _K[0]


_PURE_MODULES = ("numpy", "math", "cmath", "scipy", "funcgrad")
_PURE_BUILTINS = {len, range, min, max, abs, float, int, bool, complex, sum, zip, enumerate, tuple, list, dict,
                  isinstance, round, divmod, pow, map, sorted, reversed, any, all, slice, getattr, hasattr}


def _replayable(externals):
    """Whether generated code with these externals may be replayed as a CUDA graph: it calls nothing but NumPy,
    SciPy, math and funcgrad's own functions (a replay runs the recorded kernels, not the Python around them:
    a ``print`` or a logging call would run once, when recorded)."""
    for v in externals.values():
        if not callable(v) or v in _PURE_BUILTINS:
            continue
        if isinstance(v, type):
            if issubclass(v, tuple) or dataclasses.is_dataclass(v):   # (a NamedTuple or dataclass of parameters)
                continue
            return False
        mod = getattr(v, "__module__", None) or getattr(type(v), "__module__", "") or ""
        if mod.split(".")[0] not in _PURE_MODULES:
            return False
    return True


def _graphs():
    """:mod:`funcgrad.kernels.cuda_graph` (loaded with the kernels, on first GPU use)."""
    _kernels()
    return importlib.import_module(__package__ + ".cuda_graph")


class CUDABackend(Backend):
    name = "cuda"
    strategies = ("njit", "python", "nojit")
    operators_as_syntax = False

    def __init__(self):
        self._fingerprint = None

    def namespace(self, compiled=True):
        return _kernels()

    def accepts(self, x) -> bool:
        return is_device_array(x)

    def supports(self, name) -> bool:
        return name in _kernels().names()

    def effective_strategy(self, strategy):
        return "nojit" if strategy == "nojit" else "python"

    def compile(self, base_fn, strategy, externals, cache=True):
        # host code launching kernels: every strategy runs the generated function as Python; its results
        # are computed before they leave it (elementwise work is fused lazily: funcgrad.kernels.cuda.Lazy)
        fn = super().compile(base_fn, "python", externals, cache=cache)
        K = _kernels()
        materialize = K.materialize
        if strategy == "nojit" or not _replayable(externals):
            # jit=False, the Python funcgrad reads back (second order), and code calling something for its effect
            # (print, logging, a helper funcgrad did not read) run without CUDA graphs: a replay runs no Python
            def run(*args):   # (a lazy argument is computed once here, not again in every expression using it)
                return materialize(fn(*materialize(args)))
            graphs = None
        else:
            graphs = _graphs().Graphs(fn, K)

            def eager(args):
                return materialize(fn(*args))

            def run(*args):
                return graphs(materialize(args), eager)
        run.__name__ = run.__qualname__ = base_fn.__name__
        run.__wrapped__ = fn
        run._fg_graphs = graphs
        return run

    def fingerprint(self):
        if self._fingerprint is None:
            with open(os.path.join(os.path.dirname(__file__), "cuda.py"), "rb") as f:
                self._fingerprint = f"cuda {hashlib.sha256(f.read()).hexdigest()[:16]}"
        return self._fingerprint


CUDA = register_backend(CUDABackend())


def devices():
    """The CUDA devices numba.cuda sees, as ``"cuda:N"`` names (empty without a GPU or the simulator)."""
    K = _kernels()
    try:
        n = len(K.cuda.gpus)
    except Exception:   # noqa: BLE001  (no driver, no device: numba raises CudaSupportError)
        return []
    return [f"cuda:{i}" for i in range(n)]


def current_device(device="cuda"):
    """``device`` with ``"cuda"`` resolved to the calling thread's current GPU (``"cuda:N"``): another thread
    (a data loader's) must use the device this thread selected, not its own default, device 0."""
    if _device_index(device) is not None:
        return device
    return f"cuda:{getattr(_kernels().cuda.get_current_device(), 'id', 0)}"


def _device_index(device):
    if device in ("cuda", "gpu"):
        return None
    if isinstance(device, str) and device.startswith("cuda:") and device[5:].isdigit():
        return int(device[5:])
    raise ValueError(f"unknown device {device!r}: use 'cuda' or 'cuda:N' (funcgrad.devices() lists them)")


def device_put(tree, device="cuda"):
    """Copy every NumPy array leaf of ``tree`` to the GPU (numba.cuda device arrays, C-contiguous).

    Python and NumPy scalars stay on the host (they are passed to kernels by value); leaves already on the
    device (numba.cuda arrays, CuPy arrays, torch CUDA tensors: anything exposing
    ``__cuda_array_interface__``) are kept without a copy. ``"cuda:N"`` selects device N for this thread first.
    """
    idx = _device_index(device)
    K = _kernels()
    if idx is not None:
        n = len(K.cuda.gpus)
        if idx >= n:
            raise DeviceError(f"device {device!r} does not exist: funcgrad.devices() lists {devices()}")
        if getattr(K.cuda.get_current_device(), "id", 0) != idx:   # (the simulator's device has no id)
            K.cuda.select_device(idx)

    def put(x):
        if is_device_array(x):
            return K.as_device(x)
        if isinstance(x, np.ndarray):
            if x.dtype == object:
                raise DeviceError("an array of Python objects cannot be moved to the GPU")
            return K.cuda.to_device(np.ascontiguousarray(x))
        return x

    with _graphs().DEVICE_LOCK:   # (not while another thread records a CUDA graph: see funcgrad.kernels.cuda_graph)
        return tree_map(put, tree)


def device_get(tree):
    """Copy every device array leaf of ``tree`` back to host memory (NumPy arrays); other leaves as they are."""
    def get(x):
        if is_device_array(x):
            return _kernels().as_device(x).copy_to_host()
        return x

    with _graphs().DEVICE_LOCK:
        return tree_map(get, tree)
