"""GEMM through the cuBLAS library CuPy loaded, called directly (ctypes), on the stream funcgrad launches on.

CuPy's own cuBLAS wrappers refuse to run while a stream is captured ("calling cuBLAS API during stream capture
is currently unsupported": a check in CuPy, not a limit of cuBLAS, which records into CUDA graphs since CUDA
11.5 given a fixed workspace), so a training step's GEMMs would keep it from being recorded as a CUDA graph
(:mod:`funcgrad.kernels.cuda_graph`). This module calls ``cublas{S,D}gemm_v2`` of the same library with a
handle of its own per thread and device, its stream set to the one the calling thread launches on (the legacy
default stream, or the recording's), and a workspace of its own (32 MiB, NVIDIA's advice for Hopper) set again
after each stream change (cuBLAS resets it then). It also spares the CuPy path's work per call (two CuPy views
of the operands and the result wrapped back).

:func:`gemm` returns None where it does not apply (no CuPy or no cuBLAS library found in the process, a dtype
other than float32/float64, operands that are not C-contiguous); the caller then takes CuPy's path.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from . import cuda_launch as _L

_LIB: list = []        # [ctypes library] or [None]
_WORKSPACE = 32 << 20
_N, _T = 0, 1          # CUBLAS_OP_N, CUBLAS_OP_T


class _Handles(threading.local):
    by_ctx = None      # context handle -> [cublas handle, stream it was last set to, workspace array]


_H = _Handles()
_ONE = {np.dtype(np.float32): ctypes.c_float(1.0), np.dtype(np.float64): ctypes.c_double(1.0)}
_ZERO = {np.dtype(np.float32): ctypes.c_float(0.0), np.dtype(np.float64): ctypes.c_double(0.0)}
_ONE_P = {k: ctypes.addressof(v) for k, v in _ONE.items()}
_ZERO_P = {k: ctypes.addressof(v) for k, v in _ZERO.items()}


def _library():
    if not _LIB:
        lib = None
        try:
            path = None
            with open("/proc/self/maps") as f:   # the libcublas CuPy's cuBLAS module loaded (one library, one version)
                for line in f:
                    if "libcublas.so" in line and "libcublasLt" not in line:
                        path = line.split()[-1]
                        break
            if path is None:
                import cupy_backends.cuda.libs.cublas   # noqa: F401  (loads it)
                with open("/proc/self/maps") as f:
                    for line in f:
                        if "libcublas.so" in line and "libcublasLt" not in line:
                            path = line.split()[-1]
                            break
            if path is not None:
                lib = ctypes.CDLL(path)
                vp, i, s = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
                lib.cublasCreate_v2.argtypes = [ctypes.POINTER(vp)]
                lib.cublasSetStream_v2.argtypes = [vp, vp]
                lib.cublasSetWorkspace_v2.argtypes = [vp, vp, s]
                for name in ("cublasSgemm_v2", "cublasDgemm_v2"):
                    getattr(lib, name).argtypes = [vp, i, i, i, i, i, vp, vp, i, vp, i, vp, vp, i]
        except Exception:   # noqa: BLE001  (no /proc, no library, other symbols: CuPy's path)
            lib = None
        _LIB.append(lib)
    return _LIB[0]


def _handle(K, stream_ptr):
    lib = _library()
    if lib is None:
        return None
    by_ctx = _H.by_ctx
    if by_ctx is None:
        by_ctx = _H.by_ctx = {}
    ctx = _L.current_context()[0]
    entry = by_ctx.get(ctx)
    if entry is None:
        h = ctypes.c_void_p()
        if lib.cublasCreate_v2(ctypes.byref(h)) != 0:
            return None
        ws = K._cupy().cuda.Memory(_WORKSPACE)   # (its own allocation: never a recording's pool, freed with it)
        entry = by_ctx[ctx] = [h, None, ws]
    h = entry[0]
    if entry[1] != stream_ptr:
        if lib.cublasSetStream_v2(h, stream_ptr) != 0 or \
                lib.cublasSetWorkspace_v2(h, entry[2].ptr, _WORKSPACE) != 0:
            return None
        entry[1] = stream_ptr
    return h


def gemm(K, a, b, ta, tb, M, N, Kd, dt):
    """``op(a) @ op(b)`` (``M`` x ``N``, inner size ``Kd``) into a new C-contiguous array, or None (see above)."""
    if dt not in _ONE or not (K._is_c(a) and K._is_c(b)):
        return None
    h = _handle(K, _L.LOCAL.stream_ptr)   # (0, the legacy default stream, unless a graph is being recorded)
    if h is None:
        return None
    out = K._empty((M, N), dt)
    if M == 0 or N == 0:
        return out
    if Kd == 0:
        K._fill(out, 0)
        return out
    # row-major C = op(a) op(b) is column-major C^T = op(b)^T op(a)^T: b's buffer read as column-major is b^T
    fn = _LIB[0].cublasSgemm_v2 if dt == np.float32 else _LIB[0].cublasDgemm_v2
    st = fn(h, _T if tb else _N, _T if ta else _N, N, M, Kd, _ONE_P[dt],
            K.address(b), Kd if tb else N, K.address(a), M if ta else Kd, _ZERO_P[dt],
            K.address(out), N)
    if st != 0:
        raise RuntimeError(f"cuBLAS gemm failed (status {st})")
    return out
