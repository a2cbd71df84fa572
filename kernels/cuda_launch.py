"""Launching funcgrad's numba.cuda kernels with less host work per launch.

A training step of a small model on a fast GPU is bound by the host: each kernel runs for microseconds and
numba.cuda's launch path (``k[grid, block](*args)``: a launch-configuration object, the dispatcher's type
resolution of every argument, then ``_Kernel.launch`` marshalling each argument through its extension
hooks) costs about 35 microseconds on an H200's host (``benchmarks/gpu_launch_overhead.py``), as much as the
kernel. funcgrad's kernels take a few argument kinds only (1-D C-contiguous device arrays, numbers and
tuples of ints), so :func:`go` resolves the compiled overload once per kernel and argument types (the first
launch goes through numba, which compiles it) and afterwards packs the arguments as numba's own launch
does (``meminfo, parent, size, itemsize, data, shape, strides`` for an array) and calls the same
``cuda.core`` launch.

Anything else (another argument kind, a kernel with extensions, cooperative or debug kernels, the simulator,
a numba-cuda without these internals) takes numba's path, and ``FUNCGRAD_CUDA_FAST_LAUNCH=0`` turns the fast
path off. If the fast path ever raises, it is switched off for the process and the launch is redone by numba.
"""
from __future__ import annotations

import ctypes
import os
import threading
import warnings

import numpy as np
from numba import config

_ON = [not config.ENABLE_CUDASIM and os.environ.get("FUNCGRAD_CUDA_FAST_LAUNCH", "1") != "0"]
_ENTRIES: dict = {}     # (kernel, argument key) -> (compiled kernel, packers), or None: numba's path
_CONFIGS: dict = {}     # (grid, block) -> cuda.core LaunchConfig
_RT: list = []          # [launch, LaunchConfig, config keyword, stream]: numba-cuda's own launch pieces
STATS = {"fast": 0, "numba": 0}

class _Local(threading.local):
    """Per thread: while this thread records a CUDA graph (:mod:`funcgrad.kernels.cuda_graph`), the stream its
    launches go to (a cuda.core stream for the fast path, a numba stream for numba's) and the recording; None
    otherwise (launches go to the legacy default stream)."""
    stream = None
    nstream = None
    stream_ptr = 0
    recording = None


LOCAL = _Local()


class NotRecordable(Exception):
    """Raised inside a recording by an operation that cannot be replayed from a CUDA graph (it reads a device
    value on the host, or copies host data to the device): the call runs as it always does instead."""


def host_read(what="a device value read on the host"):
    """Refuse, while a graph is recorded, an operation that needs device data on the host now."""
    if LOCAL.recording is not None:
        raise NotRecordable(what)

if not config.ENABLE_CUDASIM:
    from numba.cuda.cudadrv.devicearray import DeviceNDArray as _DevArray
else:   # pragma: no cover - the simulator never takes the fast path
    _DevArray = None


_CTX: list = []         # [cuCtxGetCurrent], or [None]: numba's get_context each time
_NUMBA_CTX: dict = {}   # current context's handle -> numba's Context object for it


def current_context():
    """(handle of the calling thread's current CUDA context, numba's Context for it).

    numba's ``get_context()`` costs several microseconds (a driver call through its error-checking wrapper,
    then a lookup), and a launch and a wrapped array each asked for it: 68 times in an MLP step. The handle
    comes straight from ``cuCtxGetCurrent``; the Context object is looked up once per handle."""
    if not _CTX:
        try:
            from numba.cuda.cudadrv import driver as _drv
            _CTX.append(_drv.binding.cuCtxGetCurrent)
        except Exception:   # noqa: BLE001
            _CTX.append(None)
    get = _CTX[0]
    if get is not None:
        err, h = get()
        h = int(h) if not int(err) else 0
        if h:
            ctx = _NUMBA_CTX.get(h)
            if ctx is None:
                from numba.cuda.cudadrv import devices
                ctx = _NUMBA_CTX[h] = devices.get_context()
            return h, ctx
    from numba.cuda.cudadrv import devices
    ctx = devices.get_context()
    return id(ctx), ctx


def _runtime():
    if not _RT:
        from numba.cuda import dispatcher as _disp
        from numba.cuda.cudadrv import driver as _drv
        try:
            from numba.cuda._compat import CUDA_CORE_GE_1_0 as ge10
        except ImportError:   # pragma: no cover - older numba-cuda
            ge10 = True
        _RT.extend([_disp.launch, _disp.LaunchConfig, "is_cooperative" if ge10 else "cooperative_launch",
                    _drv._to_core_stream(0)])
    return _RT


def _arg_key(a):
    """What numba's typing of ``a`` depends on, for the argument kinds the fast path packs (None: other)."""
    t = type(a)
    if t is _DevArray:
        if len(a.shape) == 1 and a.strides[0] == a.dtype.itemsize:
            return a.dtype
        return None
    if t is tuple:
        for v in a:
            if type(v) is not int:
                return None
        return len(a)
    if t is int or t is float or t is bool or isinstance(a, np.generic):
        return t
    return None


def _pack_array(a, out):
    ptr = a.device_ctypes_pointer.value
    out += (0, 0, a.size, a.dtype.itemsize, ptr or 0, a.shape[0], a.strides[0])


def _packer(ty):
    """A function appending the launch arguments of a value of numba type ``ty`` (as ``_Kernel.launch`` makes
    them), or None for a type the fast path leaves to numba."""
    from numba.core import types
    if isinstance(ty, types.Array):
        if ty.ndim != 1 or ty.layout != "C":
            return None
        return _pack_array
    if isinstance(ty, types.Boolean):
        return lambda v, out: out.append(v)
    if isinstance(ty, types.Integer):
        c = getattr(ctypes, f"c_{ty}", None)
        return None if c is None else (lambda v, out: out.append(c(v)))
    if ty == types.float64:
        return lambda v, out: out.append(ctypes.c_double(v))
    if ty == types.float32:
        return lambda v, out: out.append(ctypes.c_float(v))
    if isinstance(ty, types.BaseTuple):
        inner = [_packer(t) for t in ty]
        if any(p is None for p in inner):
            return None

        def pack_tuple(v, out):
            for p, x in zip(inner, v):
                p(x, out)
        return pack_tuple
    return None


def _numba_launch(k, grid, block, args):
    STATS["numba"] += 1
    with warnings.catch_warnings():   # numba's occupancy advice is about funcgrad's kernels, not the user's code
        warnings.simplefilter("ignore")
        ns = LOCAL.nstream
        if ns is not None:   # recording a graph: on its stream
            k[grid, block, ns](*args)
        else:
            k[grid, block](*args)


def _learn(k, key, grid, block, args):
    """Launch through numba (compiling on the first call), then remember the overload it ran."""
    _numba_launch(k, grid, block, args)
    entry = None
    try:
        argtypes = tuple(k.typeof_pyval(a) for a in args)
        kern = k.overloads.get(argtypes)
        if kern is not None and not getattr(kern, "cooperative", False) and not getattr(kern, "debug", False) \
                and not getattr(kern, "extensions", None):
            packers = [_packer(t) for t in argtypes]
            if all(p is not None for p in packers):
                _runtime()
                entry = (kern, packers, {})   # (its loaded function per context, filled as launched)
    except Exception:   # noqa: BLE001  (a numba-cuda whose internals differ: numba's path for this kernel)
        entry = None
    _ENTRIES[key] = entry


def _dims(d):
    if type(d) is int:
        return (d, 1, 1)
    d = tuple(int(v) for v in d)
    return d + (1,) * (3 - len(d))


#: with ``TIMING[0]`` on (``FUNCGRAD_CUDA_KERNEL_TIMES=1``), every launch synchronizes the device before and after
#: and adds its seconds to ``KERNEL_TIMES[kernel name]`` (a diagnostic: where a step's GPU time goes, without
#: a profiler; it serializes the host and the GPU, so never for timing the step itself)
TIMING = [os.environ.get("FUNCGRAD_CUDA_KERNEL_TIMES", "0") == "1"]
KERNEL_TIMES: dict = {}


def go(k, grid, block, *args):
    """``k[grid, block](*args)``, by the fast path where it applies."""
    if TIMING[0]:
        import time
        from numba import cuda
        cuda.synchronize()
        t0 = time.perf_counter()
        _go(k, grid, block, args)
        cuda.synchronize()
        name = getattr(getattr(k, "py_func", None), "__name__", "kernel")
        n, t = KERNEL_TIMES.get(name, (0, 0.0))
        KERNEL_TIMES[name] = (n + 1, t + time.perf_counter() - t0)
        return None
    return _go(k, grid, block, args)


def timed(name, fn):
    """``fn()`` with the timing diagnostic off inside, its synchronized time added to ``KERNEL_TIMES[name]``."""
    import time
    from numba import cuda
    TIMING[0] = False
    try:
        cuda.synchronize()
        t0 = time.perf_counter()
        out = fn()
        cuda.synchronize()
    finally:
        TIMING[0] = True
    n, t = KERNEL_TIMES.get(name, (0, 0.0))
    KERNEL_TIMES[name] = (n + 1, t + time.perf_counter() - t0)
    return out


def _go(k, grid, block, args):
    if not _ON[0]:
        return _numba_launch(k, grid, block, args)
    sig = [k]
    for a in args:
        c = _arg_key(a)
        if c is None:
            return _numba_launch(k, grid, block, args)
        sig.append(c)
    key = tuple(sig)
    entry = _ENTRIES.get(key, False)
    if entry is False:
        return _learn(k, key, grid, block, args)
    if entry is None:
        return _numba_launch(k, grid, block, args)
    try:
        kern, packers, kfuncs = entry
        kargs = []
        for p, a in zip(packers, args):
            p(a, kargs)
        launch, LaunchConfig, coop, stream = _RT
        dims = (grid, block)
        cfg = _CONFIGS.get(dims)
        if cfg is None:
            cfg = _CONFIGS[dims] = LaunchConfig(grid=_dims(grid), block=_dims(block), shmem_size=0, **{coop: False})
        h = current_context()[0]
        fn = kfuncs.get(h)
        if fn is None:
            fn = kfuncs[h] = kern._codelibrary.get_cufunc().kernel
        launch(LOCAL.stream or stream, cfg, fn, *kargs)
        STATS["fast"] += 1
    except Exception as e:   # noqa: BLE001  (never worse than numba: switch the fast path off, launch again)
        if LOCAL.recording is not None:   # (a launch a graph recording refused: the recording fails, not the path)
            raise
        _ON[0] = False
        warnings.warn(f"funcgrad: the fast CUDA launch path failed ({type(e).__name__}: {e}); launching "
                      "through numba from now on", RuntimeWarning, stacklevel=2)
        _numba_launch(k, grid, block, args)
