"""Neural-network kernels for the CPU (conv, pools, activations, norms, losses); see funcgrad.nn.

Owns: the compute behind every primitive declared in ``funcgrad/nn.py``. The
kernel of primitive ``p`` is ``p`` here (re-exported by ``funcgrad.kernels.cpu``),
with the primitive's parameters in the same order.

Guarantee: every name in ``__all__`` is callable both from plain Python on
NumPy arrays and from inside ``@njit`` code, with the same results (up to
BLAS rounding). Two shapes of kernel do that:

* an ``@njit(cache=True)`` function (most array kernels); ``stride``/``padding``
  style parameters accept an int or a pair in both worlds through ``_pair``;
* a plain Python function plus a ``numba.extending.overload`` when the result
  type depends on a static argument (``reduction="none"|"sum"|"mean"``, integer
  vs probability labels, scalar vs array inputs).

Conventions: NCHW activations, OIHW conv weights, float32 or float64 (results
keep the input's dtype); conv2d is an im2col + BLAS GEMM per image, and conv and
the pools split the batch over threads (see ``_chunked``). With
``NUMBA_DISABLE_JIT=1`` every kernel is plain NumPy/Python (the oracle).
"""
import math

import numpy as np
import numba
from numba import njit, prange, types
from numba.core import errors as _nberrors
from numba.extending import overload, register_jitable
from numba.np.unsafe.ndarray import to_fixed_tuple
import os as _os

# Conv and pool kernels split the batch over threads (see _chunked);
# FUNCGRAD_NN_PARALLEL=0 runs them on the calling thread only.
_PARALLEL = _os.environ.get("FUNCGRAD_NN_PARALLEL", "1") != "0"

__all__ = [
    # convolution and pooling
    "conv2d", "conv2d_input_grad", "conv2d_weight_grad", "channel_sum", "channel_broadcast",
    "max_pool2d", "max_pool2d_grad", "max_pool2d_select", "avg_pool2d", "avg_pool2d_grad",
    # activations
    "relu", "relu_grad", "leaky_relu", "leaky_relu_grad", "elu", "elu_grad", "gelu", "gelu_grad",
    "gelu_grad2", "sigmoid", "sigmoid_grad", "softplus",
    # softmax family
    "softmax", "softmax_grad", "softmax_grad_y", "log_softmax", "log_softmax_grad",
    "logsumexp", "logsumexp_grad",
    # regularization, normalization, lookup
    "dropout", "batch_norm", "batch_norm_grad_input", "batch_norm_grad_gamma", "batch_norm_stats",
    "layer_norm", "layer_norm_grad_input", "layer_norm_grad_gamma", "layer_norm_grad_beta",
    "embedding", "embedding_grad",
    # losses
    "mse", "mse_grad", "huber", "huber_grad",
    "binary_cross_entropy", "binary_cross_entropy_grad", "binary_cross_entropy_grad_target",
    "binary_cross_entropy_with_logits", "binary_cross_entropy_with_logits_grad",
    "binary_cross_entropy_with_logits_grad_target",
    "cross_entropy", "cross_entropy_grad", "cross_entropy_grad_target", "nll", "nll_grad",
]

_NEG_INF = -np.inf


# --------------------------------------------------------------------------- static-argument helpers
def _pair(v):
    """int or 2-sequence -> (int, int)."""
    if isinstance(v, (tuple, list)):
        return int(v[0]), int(v[1])
    return int(v), int(v)


@overload(_pair)
def _ov_pair(v):
    if isinstance(v, types.Omitted):
        val = _pair(v.value)
        return lambda v: val
    if isinstance(v, types.Integer):
        return lambda v: (int(v), int(v))
    if isinstance(v, (types.UniTuple, types.Tuple)):
        return lambda v: (int(v[0]), int(v[1]))
    raise _nberrors.TypingError(f"expected an int or a pair of ints, got {v}")


def _pair_or(v, default):
    """Like _pair, but None -> default (already a pair)."""
    if v is None:
        return default
    return _pair(v)


@overload(_pair_or)
def _ov_pair_or(v, default):
    if isinstance(v, (types.NoneType, types.Omitted)) or v is None:
        return lambda v, default: default
    return lambda v, default: _pair(v)


def _drop_axis(shape, ax):
    return tuple(s for k, s in enumerate(shape) if k != ax)


@overload(_drop_axis)
def _ov_drop_axis(shape, ax):
    m = len(shape) - 1

    def impl(shape, ax):
        a = np.empty(max(m, 1), np.int64)
        k = 0
        for i in range(m + 1):
            if i != ax:
                a[k] = shape[i]
                k += 1
        return to_fixed_tuple(a, m)
    return impl


def _flat(g):
    """Cotangent (scalar, 0-d or n-d array) -> contiguous 1-d float array."""
    return np.ascontiguousarray(np.asarray(g, dtype=np.float64) if np.ndim(g) == 0 else g).reshape(-1)


@overload(_flat)
def _ov_flat(g):
    if isinstance(g, types.Array):
        return lambda g: np.ascontiguousarray(g).reshape(-1)
    if isinstance(g, (types.Float, types.Integer)):
        return lambda g: np.full(1, g, np.float64)
    raise _nberrors.TypingError(f"cotangent must be a number or an array, got {g}")


def _static_str(v):
    """Typing-time value of a static string argument, or None when it is not known yet."""
    if isinstance(v, str):
        return v
    if isinstance(v, types.Omitted):
        return v.value
    if isinstance(v, types.StringLiteral):
        return v.literal_value
    return None


@njit(cache=True)
def _axis3(shape, axis):
    """View an n-d array as (outer, n, inner) around ``axis``."""
    nd = len(shape)
    ax = axis + nd if axis < 0 else axis
    if ax < 0 or ax >= nd:
        raise ValueError("axis out of range")
    outer = 1
    inner = 1
    for i in range(ax):
        outer *= shape[i]
    for i in range(ax + 1, nd):
        inner *= shape[i]
    return ax, outer, shape[ax], inner


# --------------------------------------------------------------------------- parallel launch
# Kernels that split their work over the batch are written once, as a serial *body*
# over a range [lo, hi) of the leading axis (compiled with nogil). ``_chunked(body)``
# gives the launcher ``launch(args, M, work)``:
#
# * called from Python (how CNN code runs: the generated adjoint calls the kernels
#   from Python), it runs the chunks on a small thread pool, the calling thread
#   taking the first;
# * called inside njit code (through an overload) it runs a prange driver over the
#   same body.
#
# The glue functions (``_conv2d_impl`` ...) check shapes, allocate and launch the
# bodies. They are plain Python run as they are, and the same
# source compiled with njit for callers inside njit code. So a model that runs from
# Python compiles only the bodies it uses: no unused route, no parfor driver, no
# glue (a cold start of the LeNet example: 46 s of compilation before, 10 s after).
_PAR_MIN_WORK = 1 << 18      # multiply-adds (or elements) below which kernels run serially
# Chunks (threads) per kernel call. FUNCGRAD_NN_PARALLEL=0 runs every kernel serially.
# A constant inside compiled code; it only sets how work is split, never results.
_PAR_CHUNKS = max(1, int(numba.config.NUMBA_NUM_THREADS)) if _PARALLEL else 1


def _nchunks(total, work):
    if work < _PAR_MIN_WORK:
        return 1
    return max(1, min(total, _PAR_CHUNKS))


_nchunks_jit = njit(cache=True)(_nchunks)
_POOL = []


def _thread_pool():
    if not _POOL:
        from concurrent.futures import ThreadPoolExecutor
        _POOL.append(ThreadPoolExecutor(max_workers=max(1, _PAR_CHUNKS - 1), thread_name_prefix="funcgrad-nn"))
    return _POOL[0]


def _find_numba_blas_threads():
    """(get, set) of the thread count of the BLAS that Numba's np.dot calls (SciPy's
    OpenBLAS), or None where it cannot be found (another BLAS, another platform)."""
    try:
        import ctypes
        import glob
        import scipy
        libs = glob.glob(_os.path.join(_os.path.dirname(scipy.__file__) + ".libs", "libscipy_openblas*"))
        for path in libs:
            lib = ctypes.CDLL(path)
            for prefix in ("scipy_openblas", "openblas"):
                get = getattr(lib, prefix + "_get_num_threads", None)
                put = getattr(lib, prefix + "_set_num_threads", None)
                if get is not None and put is not None:
                    put.argtypes = [ctypes.c_int]
                    return get, put
    except (ImportError, OSError):
        pass
    return None


_BLAS_THREADS = []


class _one_blas_thread:
    """Run the BLAS inside kernel bodies on one thread: the bodies already split the batch
    over the cores, and nested OpenBLAS threads on top oversubscribe them (LeNet step on 2
    cores: 58 ms instead of 7.6 ms). The previous setting is restored on exit."""
    __slots__ = ("prev",)

    def __enter__(self):
        if not _BLAS_THREADS:
            _BLAS_THREADS.append(_find_numba_blas_threads())
        self.prev = 1
        if _BLAS_THREADS[0] is not None:
            get, put = _BLAS_THREADS[0]
            self.prev = get()
            if self.prev != 1:
                put(1)

    def __exit__(self, *exc):
        if self.prev != 1:
            _BLAS_THREADS[0][1](self.prev)


def _chunked(body):
    """launch(args, M, work): body(*args, t, lo, hi) over the chunks t of range(M)."""
    @njit(cache=True, parallel=_PARALLEL)
    def par(args, M, nch):
        for t in prange(nch):
            body(*args, t, M * t // nch, M * (t + 1) // nch)

    def launch(args, M, work):
        nch = _nchunks(M, work)
        with _one_blas_thread():
            if nch == 1:
                body(*args, 0, 0, M)
                return
            pool = _thread_pool()
            futures = [pool.submit(body, *args, t, M * t // nch, M * (t + 1) // nch) for t in range(1, nch)]
            body(*args, 0, 0, M // nch)
            for f in futures:
                f.result()

    @overload(launch)
    def _ov_launch(args, M, work):
        def impl(args, M, work):
            nch = _nchunks_jit(M, work)
            if nch == 1:
                body(*args, 0, 0, M)
            else:
                par(args, M, nch)
        return impl
    launch.body = body
    return launch


def _kernel(fn):
    """A body: serial, compiled, releasing the GIL so launch's threads run at once."""
    return njit(cache=True, nogil=True)(fn)


# --------------------------------------------------------------------------- conv2d
@njit(cache=True)
def _out_size(n, k, s, p, dl):
    return (n + 2 * p - dl * (k - 1) - 1) // s + 1


@njit(cache=True, nogil=True)
def _im2col_one(x, n, cols, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW):
    """cols (C*KH*KW, OH*OW) = the zero-padded patches of image n of x."""
    C = x.shape[1]
    H = x.shape[2]
    W = x.shape[3]
    if ph == 0 and pw == 0 and sh == 1 and sw == 1 and dh == 1 and dw == 1:
        # unit steps, no padding (LeNet's convolutions): contiguous row copies that LLVM vectorises
        for c in range(C):
            for i in range(KH):
                for j in range(KW):
                    r = (c * KH + i) * KW + j
                    for oh in range(OH):
                        src = x[n, c, oh + i]
                        dst = cols[r]
                        base = oh * OW
                        for ow in range(OW):
                            dst[base + ow] = src[ow + j]
        return
    if ph == 0 and pw == 0:         # every tap is inside the image: plain strided copies
        for c in range(C):
            for i in range(KH):
                for j in range(KW):
                    r = (c * KH + i) * KW + j
                    for oh in range(OH):
                        src = x[n, c, oh * sh + i * dh]
                        base = oh * OW
                        for ow in range(OW):
                            cols[r, base + ow] = src[ow * sw + j * dw]
        return
    for c in range(C):
        for i in range(KH):
            for j in range(KW):
                r = (c * KH + i) * KW + j
                for oh in range(OH):
                    h = oh * sh - ph + i * dh
                    base = oh * OW
                    if h < 0 or h >= H:
                        for ow in range(OW):
                            cols[r, base + ow] = 0
                    else:
                        for ow in range(OW):
                            ww = ow * sw - pw + j * dw
                            if ww >= 0 and ww < W:
                                cols[r, base + ow] = x[n, c, h, ww]
                            else:
                                cols[r, base + ow] = 0


@njit(cache=True, nogil=True)
def _col2im_one(cols, dx, n, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW):
    """The adjoint of _im2col_one: scatter-add cols (C*KH*KW, OH*OW) into image n of dx."""
    C = dx.shape[1]
    H = dx.shape[2]
    W = dx.shape[3]
    if ph == 0 and pw == 0 and sh == 1 and sw == 1 and dh == 1 and dw == 1:   # unit steps: contiguous rows
        for c in range(C):
            for i in range(KH):
                for j in range(KW):
                    r = (c * KH + i) * KW + j
                    src = cols[r]
                    for oh in range(OH):
                        dst = dx[n, c, oh + i]
                        base = oh * OW
                        for ow in range(OW):
                            dst[ow + j] += src[base + ow]
        return
    if ph == 0 and pw == 0:         # every tap is inside the image
        for c in range(C):
            for i in range(KH):
                for j in range(KW):
                    r = (c * KH + i) * KW + j
                    for oh in range(OH):
                        dst = dx[n, c, oh * sh + i * dh]
                        base = oh * OW
                        for ow in range(OW):
                            dst[ow * sw + j * dw] += cols[r, base + ow]
        return
    for c in range(C):
        for i in range(KH):
            for j in range(KW):
                r = (c * KH + i) * KW + j
                for oh in range(OH):
                    h = oh * sh - ph + i * dh
                    if h < 0 or h >= H:
                        continue
                    for ow in range(OW):
                        ww = ow * sw - pw + j * dw
                        if ww >= 0 and ww < W:
                            dx[n, c, h, ww] += cols[r, oh * OW + ow]


@njit(cache=True, nogil=True)
def _images_per_block(R, P, n):
    """How many of ``n`` images one GEMM of the convolution kernels takes: their patches side by side, (R, B*P),
    about 64k numbers (they stay in cache)."""
    return min(n, max(1, (1 << 16) // (R * P)))


@_chunked
@_kernel
def _conv_fwd(x, w2, b, has_b, out, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, t, lo, hi):
    """out[n] (O, OH*OW) = w2 @ im2col(x[n]) + b for the images lo..hi.

    Blocks of images (``_images_per_block``): their im2col side by side (R, B*P), then one GEMM for the block and
    its columns written out image by image (a GEMM per image of a few input channels, LeNet's conv1 with R = 25,
    is too small for BLAS: its forward took 303 us with one GEMM per image, 165-180 us in blocks).
    """
    O, R = w2.shape
    P = OH * OW
    B = _images_per_block(R, P, hi - lo)
    if B <= 0:
        return
    cols = np.empty((R, B * P), x.dtype)
    acc = np.empty((O, B * P), x.dtype)
    n0 = lo
    while n0 < hi:
        nb = min(B, hi - n0)
        for k in range(nb):
            _im2col_one(x, n0 + k, cols[:, k * P:(k + 1) * P], KH, KW, sh, sw, ph, pw, dh, dw, OH, OW)
        if nb == B:
            np.dot(w2, cols, acc)
        else:   # the last, shorter block
            acc[:, :nb * P] = np.dot(w2, np.ascontiguousarray(cols[:, :nb * P]))
        for k in range(nb):
            for o in range(O):
                bo = b[o] if has_b else 0
                src = acc[o, k * P:(k + 1) * P]
                dst = out[n0 + k, o]
                for q in range(P):
                    dst[q] = src[q] + bo
        n0 += nb


@_chunked
@_kernel
def _conv_wgrad(dy3, x, part, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, t, lo, hi):
    """part[t] (float64, O x R) += the weight gradient of images lo..hi.

    Blocks of images (``_images_per_block``): their im2col side by side (R, B*P) and their dy (O, B*P), then one
    GEMM reducing over B*P.
    """
    O = part.shape[1]
    R = part.shape[2]
    P = OH * OW
    B = _images_per_block(R, P, hi - lo)
    if B <= 0:
        return
    cols = np.empty((R, B * P), x.dtype)
    g = np.empty((O, B * P), x.dtype)
    n0 = lo
    while n0 < hi:
        nb = min(B, hi - n0)
        for k in range(nb):
            _im2col_one(x, n0 + k, cols[:, k * P:(k + 1) * P], KH, KW, sh, sw, ph, pw, dh, dw, OH, OW)
            for o in range(O):
                g[o, k * P:(k + 1) * P] = dy3[n0 + k, o]
        # R >= 64: the GEMM as (R, B*P) @ (B*P, O), its result transposed. OpenBLAS, one thread, ran LeNet's conv2
        # (O = 16, R = 150) 1.75x faster so (135 vs 240 us a batch) and larger layers 1.2-1.5x; below R = 64 (conv1,
        # R = 25) the two orders were within 10%, (O, B*P) @ (B*P, R) ahead
        tall = R >= 64
        a, b = (cols, g) if tall else (g, cols)
        if nb == B:
            acc = np.dot(a, b.T)
        else:
            acc = np.dot(np.ascontiguousarray(a[:, :nb * P]), np.ascontiguousarray(b[:, :nb * P]).T)
        for o in range(O):
            for r in range(R):
                part[t, o, r] += acc[r, o] if tall else acc[o, r]
        n0 += nb


@njit(cache=True)
def _sum_parts(part, like):
    """(T, O, R) float64 partial sums -> (O, R) in like's dtype."""
    out = np.zeros(part.shape[1:], like.dtype)
    for t in range(part.shape[0]):
        for o in range(part.shape[1]):
            for r in range(part.shape[2]):
                out[o, r] += part[t, o, r]
    return out


@_chunked
@_kernel
def _conv_igrad(dy3, w2t, dx, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW, t, lo, hi):
    """dx[n] += col2im(w2t @ dy3[n]) for the images lo..hi: blocks of images' dy side by side (O, B*P) in one GEMM,
    then each image's columns scattered."""
    R, O = w2t.shape
    P = OH * OW
    B = _images_per_block(R, P, hi - lo)
    if B <= 0:
        return
    g = np.empty((O, B * P), dy3.dtype)
    dcols = np.empty((R, B * P), dy3.dtype)
    n0 = lo
    while n0 < hi:
        nb = min(B, hi - n0)
        for k in range(nb):
            for o in range(O):
                g[o, k * P:(k + 1) * P] = dy3[n0 + k, o]
        if nb == B:
            np.dot(w2t, g, dcols)
        else:   # the last, shorter block
            dcols[:, :nb * P] = np.dot(w2t, np.ascontiguousarray(g[:, :nb * P]))
        for k in range(nb):
            _col2im_one(dcols[:, k * P:(k + 1) * P], dx, n0 + k, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW)
        n0 += nb


# One route: small GEMMs over per-image (or per-block) im2col buffers kept in cache,
# images split over the threads. On this 2-core machine that beat both fused
# multiply-add loops and a batch-wide im2col + one big GEMM, for every layer of
# the LeNet benchmark and example (forward and input gradient up to 2x, weight
# gradient up to 1.7x; benchmarks/lenet_step.py times the whole step).


def _conv2d_impl(x, w, b, has_b, sh, sw, ph, pw, dh, dw):
    N, C, H, W = x.shape
    O, Cw, KH, KW = w.shape
    if Cw != C:
        raise ValueError("conv2d: input channels of x and w differ")
    OH = _out_size(H, KH, sh, ph, dh)
    OW = _out_size(W, KW, sw, pw, dw)
    if OH <= 0 or OW <= 0:
        raise ValueError("conv2d: kernel larger than the padded input")
    R = C * KH * KW
    w2 = np.ascontiguousarray(w).reshape((O, R))
    out = np.empty((N, O, OH * OW), x.dtype)
    _conv_fwd((x, w2, b, has_b, out, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW), N, N * O * R * OH * OW)
    return out.reshape((N, O, OH, OW))


def _conv2d_input_grad_impl(dy, w, N, C, H, W, sh, sw, ph, pw, dh, dw):
    O, _, KH, KW = w.shape
    OH = dy.shape[2]
    OW = dy.shape[3]
    R = C * KH * KW
    w2t = np.ascontiguousarray(np.ascontiguousarray(w).reshape((O, R)).T)
    dx = np.zeros((N, C, H, W), dy.dtype)
    dy3 = np.ascontiguousarray(dy).reshape((N, O, OH * OW))
    _conv_igrad((dy3, w2t, dx, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW), N, N * O * R * OH * OW)
    return dx


def _conv2d_weight_grad_impl(dy, x, O, C, KH, KW, sh, sw, ph, pw, dh, dw):
    N = x.shape[0]
    OH = dy.shape[2]
    OW = dy.shape[3]
    R = C * KH * KW
    dy3 = np.ascontiguousarray(dy).reshape((N, O, OH * OW))
    part = np.zeros((_PAR_CHUNKS, O, R), np.float64)
    _conv_wgrad((dy3, x, part, KH, KW, sh, sw, ph, pw, dh, dw, OH, OW), N, N * O * R * OH * OW)
    return _sum_parts(part, x).reshape((O, C, KH, KW))


# The glue compiled for callers inside njit code (the overloads below).
_conv2d = njit(cache=True)(_conv2d_impl)
_conv2d_input_grad = njit(cache=True)(_conv2d_input_grad_impl)
_conv2d_weight_grad = njit(cache=True)(_conv2d_weight_grad_impl)


# Public conv kernels: Python functions normalizing the static arguments (int or
# pair, None bias) into plain ints before calling the glue, plus overloads doing
# the same inside njit code. One body specialization per dtype keeps compile time
# and the on-disk cache small.
def _no_bias(w):
    return np.empty(0, w.dtype)


def conv2d(x, w, b=None, stride=1, padding=0, dilation=1):
    """y[n,o] = sum_c x[n,c] (*) w[o,c] + b[o]; NCHW x, OIHW w, b None or (O,)."""
    sh, sw = _pair(stride)
    ph, pw = _pair(padding)
    dh, dw = _pair(dilation)
    x = np.ascontiguousarray(x)       # one compiled specialization per dtype, not per layout
    w = np.ascontiguousarray(w)
    if b is None:
        return _conv2d_impl(x, w, _no_bias(w), False, sh, sw, ph, pw, dh, dw)
    return _conv2d_impl(x, w, np.ascontiguousarray(b), True, sh, sw, ph, pw, dh, dw)


@overload(conv2d)
def _ov_conv2d(x, w, b=None, stride=1, padding=0, dilation=1):
    if b is None or isinstance(b, (types.NoneType, types.Omitted)):
        def impl(x, w, b=None, stride=1, padding=0, dilation=1):
            sh, sw = _pair(stride)
            ph, pw = _pair(padding)
            dh, dw = _pair(dilation)
            return _conv2d(x, w, np.empty(0, w.dtype), False, sh, sw, ph, pw, dh, dw)
        return impl

    def impl_b(x, w, b=None, stride=1, padding=0, dilation=1):
        sh, sw = _pair(stride)
        ph, pw = _pair(padding)
        dh, dw = _pair(dilation)
        return _conv2d(x, w, b, True, sh, sw, ph, pw, dh, dw)
    return impl_b


def conv2d_input_grad(dy, w, x_shape, stride=1, padding=0, dilation=1):
    """d conv2d / d x applied to dy (the transposed convolution), shaped x_shape."""
    sh, sw = _pair(stride)
    ph, pw = _pair(padding)
    dh, dw = _pair(dilation)
    N, C, H, W = x_shape
    return _conv2d_input_grad_impl(np.ascontiguousarray(dy), np.ascontiguousarray(w), N, C, H, W, sh, sw, ph, pw, dh, dw)


@overload(conv2d_input_grad)
def _ov_conv2d_input_grad(dy, w, x_shape, stride=1, padding=0, dilation=1):
    def impl(dy, w, x_shape, stride=1, padding=0, dilation=1):
        sh, sw = _pair(stride)
        ph, pw = _pair(padding)
        dh, dw = _pair(dilation)
        return _conv2d_input_grad(dy, w, x_shape[0], x_shape[1], x_shape[2], x_shape[3], sh, sw, ph, pw, dh, dw)
    return impl


def conv2d_weight_grad(dy, x, w_shape, stride=1, padding=0, dilation=1):
    """d conv2d / d w applied to dy, shaped w_shape."""
    sh, sw = _pair(stride)
    ph, pw = _pair(padding)
    dh, dw = _pair(dilation)
    O, C, KH, KW = w_shape
    return _conv2d_weight_grad_impl(np.ascontiguousarray(dy), np.ascontiguousarray(x), O, C, KH, KW,
                                    sh, sw, ph, pw, dh, dw)


@overload(conv2d_weight_grad)
def _ov_conv2d_weight_grad(dy, x, w_shape, stride=1, padding=0, dilation=1):
    def impl(dy, x, w_shape, stride=1, padding=0, dilation=1):
        sh, sw = _pair(stride)
        ph, pw = _pair(padding)
        dh, dw = _pair(dilation)
        return _conv2d_weight_grad(dy, x, w_shape[0], w_shape[1], w_shape[2], w_shape[3], sh, sw, ph, pw, dh, dw)
    return impl


@njit(cache=True, fastmath=True)
def channel_sum(x):
    """Sum over every axis but 1: (N, C, ...) -> (C,)."""
    N = x.shape[0]
    C = x.shape[1]
    S = x.size // max(N * C, 1)
    x3 = np.ascontiguousarray(x).reshape((N, C, S))
    out = np.zeros(C, x.dtype)
    for c in range(C):
        acc = 0.0
        for n in range(N):
            for s in range(S):
                acc += x3[n, c, s]
        out[c] = acc
    return out


@njit(cache=True)
def channel_broadcast(g, shape):
    """Adjoint of channel_sum: (C,) -> shape, g[c] along axis 1."""
    out = np.empty(shape, g.dtype)
    N = shape[0]
    C = shape[1]
    S = out.size // max(N * C, 1)
    o3 = out.reshape((N, C, S))
    for n in range(N):
        for c in range(C):
            for s in range(S):
                o3[n, c, s] = g[c]
    return out


# --------------------------------------------------------------------------- pools
@njit(cache=True)
def _pool_out(H, W, kh, kw, sh, sw, ph, pw):
    OH = (H + 2 * ph - kh) // sh + 1
    OW = (W + 2 * pw - kw) // sw + 1
    if OH <= 0 or OW <= 0:
        raise ValueError("pool: window larger than the padded input")
    return OH, OW


# Pools work on (N*C, H, W) views: a body over a range of planes, launched over
# plane chunks by the amount of work (see _chunked).
@njit(cache=True, nogil=True)
def _argmax3(x3, nc, oh, ow, kh, kw, sh, sw, ph, pw):
    """Flat index h*W+w of the first maximum of a pooling window (-1 if all padding)."""
    H = x3.shape[1]
    W = x3.shape[2]
    best = -1
    m = _NEG_INF
    h0 = oh * sh - ph
    w0 = ow * sw - pw
    for i in range(kh):
        h = h0 + i
        if h < 0 or h >= H:
            continue
        for j in range(kw):
            ww = w0 + j
            if ww < 0 or ww >= W:
                continue
            v = x3[nc, h, ww]
            if best < 0 or v > m:
                m = v
                best = h * W + ww
    return best


@njit(cache=True)
def _is_2x2(kh, kw, sh, sw, ph, pw):
    return kh == 2 and kw == 2 and sh == 2 and sw == 2 and ph == 0 and pw == 0


@_chunked
@_kernel
def _maxpool(x3, out3, kh, kw, sh, sw, ph, pw, t, lo, hi):
    H = x3.shape[1]
    W = x3.shape[2]
    OH = out3.shape[1]
    OW = out3.shape[2]
    if _is_2x2(kh, kw, sh, sw, ph, pw):          # the common case, no bounds checks
        for nc in range(lo, hi):
            for oh in range(OH):
                r0 = x3[nc, 2 * oh]
                r1 = x3[nc, 2 * oh + 1]
                o = out3[nc, oh]
                for ow in range(OW):
                    m = r0[2 * ow]
                    v = r0[2 * ow + 1]
                    if v > m:
                        m = v
                    v = r1[2 * ow]
                    if v > m:
                        m = v
                    v = r1[2 * ow + 1]
                    if v > m:
                        m = v
                    o[ow] = m
        return
    for nc in range(lo, hi):
        for oh in range(OH):
            h0 = oh * sh - ph
            for ow in range(OW):
                w0 = ow * sw - pw
                m = _NEG_INF
                for i in range(kh):
                    h = h0 + i
                    if h < 0 or h >= H:
                        continue
                    for j in range(kw):
                        ww = w0 + j
                        if ww >= 0 and ww < W:
                            v = x3[nc, h, ww]
                            if v > m:
                                m = v
                out3[nc, oh, ow] = m


@njit(cache=True, nogil=True, inline="always")
def _route_2x2(a, b, c, e, gv):
    """gv routed to the first maximum of the window (a, b / c, e), in the order a, b, c, e (a later value wins only
    when strictly greater, as _argmax3): a tournament of the two rows, branch-free."""
    k01 = b > a
    m01 = b if k01 else a
    k23 = e > c
    m23 = e if k23 else c
    h = m23 > m01
    gl = gv * (not h)
    gh = gv * h
    return gl * (not k01), gl * k01, gh * (not k23), gh * k23


@_chunked
@_kernel
def _maxpool_grad(dy3, x3, dx3, kh, kw, sh, sw, ph, pw, t, lo, hi):
    NC = x3.shape[0]
    H = x3.shape[1]
    W = x3.shape[2]
    OH = dy3.shape[1]
    OW = dy3.shape[2]
    if _is_2x2(kh, kw, sh, sw, ph, pw):
        # windows do not overlap: write all four cells. Even H: the row pairs of all planes lo..hi are one run of
        # (2W)-long rows, one loop over them (LeNet's pool2, 8x8 planes: 75 -> 30 us; a loop per plane cost more
        # than its 4x4 windows)
        if H == 2 * OH:
            x2 = x3.reshape((NC * OH, 2 * W))
            d2 = dx3.reshape((NC * OH, 2 * W))
            g2 = dy3.reshape((NC * OH, OW))
            for rp in range(lo * OH, hi * OH):
                r = x2[rp]
                dd = d2[rp]
                g = g2[rp]
                for ow in range(OW):
                    q = 2 * ow
                    dd[q], dd[q + 1], dd[W + q], dd[W + q + 1] = _route_2x2(r[q], r[q + 1], r[W + q], r[W + q + 1],
                                                                            g[ow])
            return
        for nc in range(lo, hi):
            for oh in range(OH):
                r0 = x3[nc, 2 * oh]
                r1 = x3[nc, 2 * oh + 1]
                d0 = dx3[nc, 2 * oh]
                d1 = dx3[nc, 2 * oh + 1]
                g = dy3[nc, oh]
                for ow in range(OW):
                    q = 2 * ow
                    d0[q], d0[q + 1], d1[q], d1[q + 1] = _route_2x2(r0[q], r0[q + 1], r1[q], r1[q + 1], g[ow])
        return
    for nc in range(lo, hi):
        for oh in range(OH):
            for ow in range(OW):
                k = _argmax3(x3, nc, oh, ow, kh, kw, sh, sw, ph, pw)
                if k >= 0:
                    dx3[nc, k // W, k % W] += dy3[nc, oh, ow]


@_chunked
@_kernel
def _maxpool_select(g3, x3, out3, kh, kw, sh, sw, ph, pw, t, lo, hi):
    W = x3.shape[2]
    OH = out3.shape[1]
    OW = out3.shape[2]
    for nc in range(lo, hi):
        for oh in range(OH):
            for ow in range(OW):
                k = _argmax3(x3, nc, oh, ow, kh, kw, sh, sw, ph, pw)
                out3[nc, oh, ow] = g3[nc, k // W, k % W] if k >= 0 else 0


@_chunked
@_kernel
def _avgpool(x3, out3, kh, kw, sh, sw, ph, pw, t, lo, hi):
    H = x3.shape[1]
    W = x3.shape[2]
    OH = out3.shape[1]
    OW = out3.shape[2]
    inv = 1.0 / (kh * kw)
    for nc in range(lo, hi):
        for oh in range(OH):
            h0 = oh * sh - ph
            for ow in range(OW):
                w0 = ow * sw - pw
                acc = 0.0
                for i in range(kh):
                    h = h0 + i
                    if h < 0 or h >= H:
                        continue
                    for j in range(kw):
                        ww = w0 + j
                        if ww >= 0 and ww < W:
                            acc += x3[nc, h, ww]
                out3[nc, oh, ow] = acc * inv


@_chunked
@_kernel
def _avgpool_grad(dy3, dx3, kh, kw, sh, sw, ph, pw, t, lo, hi):
    H = dx3.shape[1]
    W = dx3.shape[2]
    OH = dy3.shape[1]
    OW = dy3.shape[2]
    inv = 1.0 / (kh * kw)
    for nc in range(lo, hi):
        for oh in range(OH):
            h0 = oh * sh - ph
            for ow in range(OW):
                w0 = ow * sw - pw
                g = dy3[nc, oh, ow] * inv
                for i in range(kh):
                    h = h0 + i
                    if h < 0 or h >= H:
                        continue
                    for j in range(kw):
                        ww = w0 + j
                        if ww >= 0 and ww < W:
                            dx3[nc, h, ww] += g


def _max_pool2d_impl(x, kh, kw, sh, sw, ph, pw):
    N, C, H, W = x.shape
    OH, OW = _pool_out(H, W, kh, kw, sh, sw, ph, pw)
    x3 = np.ascontiguousarray(x).reshape((N * C, H, W))
    out3 = np.empty((N * C, OH, OW), x.dtype)
    _maxpool((x3, out3, kh, kw, sh, sw, ph, pw), N * C, x.size * 2)
    return out3.reshape((N, C, OH, OW))


def _max_pool2d_grad_impl(dy, x, kh, kw, sh, sw, ph, pw):
    N, C, H, W = x.shape
    OH, OW = _pool_out(H, W, kh, kw, sh, sw, ph, pw)
    x3 = np.ascontiguousarray(x).reshape((N * C, H, W))
    dy3 = np.ascontiguousarray(dy).reshape((N * C, OH, OW))
    if _is_2x2(kh, kw, sh, sw, ph, pw) and H % 2 == 0 and W % 2 == 0:
        dx3 = np.empty((N * C, H, W), dy.dtype)       # every cell is written
    else:
        dx3 = np.zeros((N * C, H, W), dy.dtype)
    _maxpool_grad((dy3, x3, dx3, kh, kw, sh, sw, ph, pw), N * C, x.size * 2)
    return dx3.reshape((N, C, H, W))


def _max_pool2d_select_impl(g, x, kh, kw, sh, sw, ph, pw):
    N, C, H, W = x.shape
    OH, OW = _pool_out(H, W, kh, kw, sh, sw, ph, pw)
    x3 = np.ascontiguousarray(x).reshape((N * C, H, W))
    g3 = np.ascontiguousarray(g).reshape((N * C, H, W))
    out3 = np.empty((N * C, OH, OW), g.dtype)
    _maxpool_select((g3, x3, out3, kh, kw, sh, sw, ph, pw), N * C, x.size * 2)
    return out3.reshape((N, C, OH, OW))


def _avg_pool2d_impl(x, kh, kw, sh, sw, ph, pw):
    N, C, H, W = x.shape
    OH, OW = _pool_out(H, W, kh, kw, sh, sw, ph, pw)
    x3 = np.ascontiguousarray(x).reshape((N * C, H, W))
    out3 = np.empty((N * C, OH, OW), x.dtype)
    _avgpool((x3, out3, kh, kw, sh, sw, ph, pw), N * C, x.size * 2)
    return out3.reshape((N, C, OH, OW))


def _avg_pool2d_grad_impl(dy, N, C, H, W, kh, kw, sh, sw, ph, pw):
    OH, OW = _pool_out(H, W, kh, kw, sh, sw, ph, pw)
    dy3 = np.ascontiguousarray(dy).reshape((N * C, OH, OW))
    dx3 = np.zeros((N * C, H, W), dy.dtype)
    _avgpool_grad((dy3, dx3, kh, kw, sh, sw, ph, pw), N * C, N * C * H * W * 2)
    return dx3.reshape((N, C, H, W))


# The glue compiled for callers inside njit code (the overloads below).
_max_pool2d = njit(cache=True)(_max_pool2d_impl)
_max_pool2d_grad = njit(cache=True)(_max_pool2d_grad_impl)
_max_pool2d_select = njit(cache=True)(_max_pool2d_select_impl)
_avg_pool2d = njit(cache=True)(_avg_pool2d_impl)
_avg_pool2d_grad = njit(cache=True)(_avg_pool2d_grad_impl)


def _pool_args(kernel_size, stride, padding):
    kh, kw = _pair(kernel_size)
    sh, sw = _pair_or(stride, (kh, kw))
    ph, pw = _pair(padding)
    return kh, kw, sh, sw, ph, pw


@overload(_pool_args)
def _ov_pool_args(kernel_size, stride, padding):
    def impl(kernel_size, stride, padding):
        kh, kw = _pair(kernel_size)
        sh, sw = _pair_or(stride, (kh, kw))
        ph, pw = _pair(padding)
        return kh, kw, sh, sw, ph, pw
    return impl


def max_pool2d(x, kernel_size, stride=None, padding=0):
    """Max over kh x kw windows of NCHW x (padding counts as -inf); stride defaults to kernel_size."""
    return _max_pool2d_impl(np.ascontiguousarray(x), *_pool_args(kernel_size, stride, padding))


@overload(max_pool2d)
def _ov_max_pool2d(x, kernel_size, stride=None, padding=0):
    def impl(x, kernel_size, stride=None, padding=0):
        kh, kw, sh, sw, ph, pw = _pool_args(kernel_size, stride, padding)
        return _max_pool2d(x, kh, kw, sh, sw, ph, pw)
    return impl


def max_pool2d_grad(dy, x, kernel_size, stride=None, padding=0):
    """Route dy to each window's (first) maximum of x; shaped like x."""
    return _max_pool2d_grad_impl(np.ascontiguousarray(dy), np.ascontiguousarray(x), *_pool_args(kernel_size, stride, padding))


@overload(max_pool2d_grad)
def _ov_max_pool2d_grad(dy, x, kernel_size, stride=None, padding=0):
    def impl(dy, x, kernel_size, stride=None, padding=0):
        kh, kw, sh, sw, ph, pw = _pool_args(kernel_size, stride, padding)
        return _max_pool2d_grad(dy, x, kh, kw, sh, sw, ph, pw)
    return impl


def max_pool2d_select(g, x, kernel_size, stride=None, padding=0):
    """g (shaped like x) read at each window's (first) maximum of x: adjoint of max_pool2d_grad in dy."""
    return _max_pool2d_select_impl(np.ascontiguousarray(g), np.ascontiguousarray(x), *_pool_args(kernel_size, stride, padding))


@overload(max_pool2d_select)
def _ov_max_pool2d_select(g, x, kernel_size, stride=None, padding=0):
    def impl(g, x, kernel_size, stride=None, padding=0):
        kh, kw, sh, sw, ph, pw = _pool_args(kernel_size, stride, padding)
        return _max_pool2d_select(g, x, kh, kw, sh, sw, ph, pw)
    return impl


def avg_pool2d(x, kernel_size, stride=None, padding=0):
    """Mean over kh x kw windows; zero padding counts in the divisor (count_include_pad)."""
    return _avg_pool2d_impl(np.ascontiguousarray(x), *_pool_args(kernel_size, stride, padding))


@overload(avg_pool2d)
def _ov_avg_pool2d(x, kernel_size, stride=None, padding=0):
    def impl(x, kernel_size, stride=None, padding=0):
        kh, kw, sh, sw, ph, pw = _pool_args(kernel_size, stride, padding)
        return _avg_pool2d(x, kh, kw, sh, sw, ph, pw)
    return impl


def avg_pool2d_grad(dy, x_shape, kernel_size, stride=None, padding=0):
    """Adjoint of avg_pool2d (linear), shaped x_shape."""
    N, C, H, W = x_shape
    return _avg_pool2d_grad_impl(np.ascontiguousarray(dy), N, C, H, W, *_pool_args(kernel_size, stride, padding))


@overload(avg_pool2d_grad)
def _ov_avg_pool2d_grad(dy, x_shape, kernel_size, stride=None, padding=0):
    def impl(dy, x_shape, kernel_size, stride=None, padding=0):
        kh, kw, sh, sw, ph, pw = _pool_args(kernel_size, stride, padding)
        return _avg_pool2d_grad(dy, x_shape[0], x_shape[1], x_shape[2], x_shape[3], kh, kw, sh, sw, ph, pw)
    return impl


# --------------------------------------------------------------------------- elementwise activations
# Each activation works on a number or on an array of any shape (same shape out).
# Scalar math lives in a small @njit function (_s_*); _map_x/_map_gx build its array
# loop (_a_*), and _make_ew1/_make_ew2 (or the written-out parametric ones) a Python
# dispatcher with a numba overload for scalar-or-array.

@njit(cache=True)
def _s_relu(v):
    return v if v > 0 else 0.0 * abs(v)


@njit(cache=True)
def _s_relu_grad(g, v):
    return g if v > 0 else 0.0 * abs(g)


@njit(cache=True)
def _s_leaky_relu(v, a):
    return v if v > 0 else a * v


@njit(cache=True)
def _s_leaky_relu_grad(g, v, a):
    return g if v > 0 else a * g


@njit(cache=True)
def _s_elu(v, a):
    return v if v > 0 else a * math.expm1(v)


@njit(cache=True)
def _s_elu_grad(g, v, a):
    return g if v > 0 else g * a * math.exp(v)


_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)


@njit(cache=True)
def _s_gelu(v):
    return 0.5 * v * (1.0 + math.erf(v * _INV_SQRT2))


@njit(cache=True)
def _s_gelu_grad(g, v):
    return g * (0.5 * (1.0 + math.erf(v * _INV_SQRT2)) + v * _INV_SQRT2PI * math.exp(-0.5 * v * v))


@njit(cache=True)
def _s_gelu_grad2(g, v):
    return g * _INV_SQRT2PI * math.exp(-0.5 * v * v) * (2.0 - v * v)


@njit(cache=True)
def _s_sigmoid(v):
    if v >= 0:
        return 1.0 / (1.0 + math.exp(-v))
    e = math.exp(v)
    return e / (1.0 + e)


@njit(cache=True)
def _s_sigmoid_grad(g, y):
    return g * y * (1.0 - y)


@njit(cache=True)
def _s_softplus(v):
    return max(v, 0.0) + math.log1p(math.exp(-abs(v)))


# The array loops (_a_*), built from the scalar kernels by one helper per arity. Each loop is
# its own cached dispatcher: the scalar kernel is a constant of the loop's closure, given as
# its Python function made jitable (register_jitable), which Numba inlines and pickles by
# content into the disk-cache key. (A dispatcher there would pickle with a per-process id:
# the key, so the cache, would never match again; that is why these loops were written out.)
def _loop_of(s, loop):
    """``loop`` compiled, named after its scalar kernel (``_s_relu`` -> ``relu_array``): the
    name is the loop's own disk-cache file."""
    loop.__name__ = loop.__qualname__ = getattr(s, "py_func", s).__name__[3:] + "_array"
    return njit(cache=True)(loop)


def _inlined(s):
    """The scalar kernel ``s`` as a constant a cached loop can close over (see above)."""
    return register_jitable(getattr(s, "py_func", s))


def _map_x(s):
    """``x -> s(x[i], *params)`` for every element: an array of x's shape and dtype."""
    s = _inlined(s)

    def loop(x, *params):
        xf = np.ascontiguousarray(x).reshape(-1)
        out = np.empty(xf.size, x.dtype)
        for i in range(xf.size):
            out[i] = s(xf[i], *params)
        return out.reshape(x.shape)
    return _loop_of(s, loop)


def _map_gx(s):
    """``(g, x) -> s(g[i], x[i], *params)`` for every element (g and x of one size): x's shape and dtype."""
    s = _inlined(s)

    def loop(g, x, *params):
        gf = np.ascontiguousarray(g).reshape(-1)
        xf = np.ascontiguousarray(x).reshape(-1)
        if gf.size != xf.size:
            raise ValueError("elementwise gradient: shapes differ")
        out = np.empty(xf.size, x.dtype)
        for i in range(xf.size):
            out[i] = s(gf[i], xf[i], *params)
        return out.reshape(x.shape)
    return _loop_of(s, loop)


_a_relu, _a_gelu, _a_sigmoid, _a_softplus, _a_leaky_relu, _a_elu = map(
    _map_x, (_s_relu, _s_gelu, _s_sigmoid, _s_softplus, _s_leaky_relu, _s_elu))
_a_relu_grad, _a_gelu_grad, _a_gelu_grad2, _a_sigmoid_grad, _a_leaky_relu_grad, _a_elu_grad = map(
    _map_gx, (_s_relu_grad, _s_gelu_grad, _s_gelu_grad2, _s_sigmoid_grad, _s_leaky_relu_grad, _s_elu_grad))


def _is_arr(t):
    return isinstance(t, types.Array)


def _make_ew1(name, s, arr):
    def kern(x):
        if isinstance(x, np.ndarray):
            return arr(x)
        return s(x)

    @overload(kern)
    def _ov(x):
        if _is_arr(x):
            return lambda x: arr(x)
        return lambda x: s(x)
    kern.__name__ = kern.__qualname__ = name
    return kern


def _make_ew2(name, s, arr):
    def kern(g, x):
        if isinstance(x, np.ndarray) or isinstance(g, np.ndarray):
            return arr(np.asarray(g), np.asarray(x))
        return s(g, x)

    @overload(kern)
    def _ov(g, x):
        if _is_arr(x) and _is_arr(g):
            return lambda g, x: arr(g, x)
        if not _is_arr(x) and not _is_arr(g):
            return lambda g, x: s(g, x)
        raise _nberrors.TypingError(f"{name}: cotangent and input must both be arrays or both numbers")
    kern.__name__ = kern.__qualname__ = name
    return kern


relu = _make_ew1("relu", _s_relu, _a_relu)
gelu = _make_ew1("gelu", _s_gelu, _a_gelu)
sigmoid = _make_ew1("sigmoid", _s_sigmoid, _a_sigmoid)
softplus = _make_ew1("softplus", _s_softplus, _a_softplus)
relu_grad = _make_ew2("relu_grad", _s_relu_grad, _a_relu_grad)
gelu_grad = _make_ew2("gelu_grad", _s_gelu_grad, _a_gelu_grad)
gelu_grad2 = _make_ew2("gelu_grad2", _s_gelu_grad2, _a_gelu_grad2)
sigmoid_grad = _make_ew2("sigmoid_grad", _s_sigmoid_grad, _a_sigmoid_grad)


# the parametric activations, written out so their parameter names match the primitives'
def leaky_relu(x, negative_slope=0.01):
    if isinstance(x, np.ndarray):
        return _a_leaky_relu(x, float(negative_slope))
    return _s_leaky_relu(x, float(negative_slope))


@overload(leaky_relu)
def _ov_leaky_relu(x, negative_slope=0.01):
    if _is_arr(x):
        return lambda x, negative_slope=0.01: _a_leaky_relu(x, float(negative_slope))
    return lambda x, negative_slope=0.01: _s_leaky_relu(x, float(negative_slope))


def leaky_relu_grad(g, x, negative_slope=0.01):
    if isinstance(x, np.ndarray) or isinstance(g, np.ndarray):
        return _a_leaky_relu_grad(np.asarray(g), np.asarray(x), float(negative_slope))
    return _s_leaky_relu_grad(g, x, float(negative_slope))


@overload(leaky_relu_grad)
def _ov_leaky_relu_grad(g, x, negative_slope=0.01):
    if _is_arr(x) and _is_arr(g):
        return lambda g, x, negative_slope=0.01: _a_leaky_relu_grad(g, x, float(negative_slope))
    if not _is_arr(x) and not _is_arr(g):
        return lambda g, x, negative_slope=0.01: _s_leaky_relu_grad(g, x, float(negative_slope))
    raise _nberrors.TypingError("leaky_relu_grad: cotangent and input must both be arrays or both numbers")


def elu(x, alpha=1.0):
    if isinstance(x, np.ndarray):
        return _a_elu(x, float(alpha))
    return _s_elu(x, float(alpha))


@overload(elu)
def _ov_elu(x, alpha=1.0):
    if _is_arr(x):
        return lambda x, alpha=1.0: _a_elu(x, float(alpha))
    return lambda x, alpha=1.0: _s_elu(x, float(alpha))


def elu_grad(g, x, alpha=1.0):
    if isinstance(x, np.ndarray) or isinstance(g, np.ndarray):
        return _a_elu_grad(np.asarray(g), np.asarray(x), float(alpha))
    return _s_elu_grad(g, x, float(alpha))


@overload(elu_grad)
def _ov_elu_grad(g, x, alpha=1.0):
    if _is_arr(x) and _is_arr(g):
        return lambda g, x, alpha=1.0: _a_elu_grad(g, x, float(alpha))
    if not _is_arr(x) and not _is_arr(g):
        return lambda g, x, alpha=1.0: _s_elu_grad(g, x, float(alpha))
    raise _nberrors.TypingError("elu_grad: cotangent and input must both be arrays or both numbers")


# --------------------------------------------------------------------------- softmax family
@njit(cache=True)
def softmax(x, axis=-1):
    ax, O, n, I = _axis3(x.shape, axis)
    x3 = np.ascontiguousarray(x).reshape((O, n, I))
    out = np.empty((O, n, I), x.dtype)
    for o in range(O):
        for k in range(I):
            m = _NEG_INF
            for j in range(n):
                if x3[o, j, k] > m:
                    m = x3[o, j, k]
            s = 0.0
            for j in range(n):
                e = math.exp(x3[o, j, k] - m)
                out[o, j, k] = e
                s += e
            inv = 1.0 / s
            for j in range(n):
                out[o, j, k] *= inv
    return out.reshape(x.shape)


@njit(cache=True)
def softmax_grad(g, y, axis=-1):
    """y * (g - sum(g * y, axis)) for y = softmax(x, axis)."""
    ax, O, n, I = _axis3(y.shape, axis)
    g3 = np.ascontiguousarray(g).reshape((O, n, I))
    y3 = np.ascontiguousarray(y).reshape((O, n, I))
    out = np.empty((O, n, I), y.dtype)
    for o in range(O):
        for k in range(I):
            s = 0.0
            for j in range(n):
                s += g3[o, j, k] * y3[o, j, k]
            for j in range(n):
                out[o, j, k] = y3[o, j, k] * (g3[o, j, k] - s)
    return out.reshape(y.shape)


@njit(cache=True)
def softmax_grad_y(r, g, y, axis=-1):
    """Cotangent of y in r = softmax_grad(g, y): r*(g - <g,y>) - <r,y> g."""
    ax, O, n, I = _axis3(y.shape, axis)
    r3 = np.ascontiguousarray(r).reshape((O, n, I))
    g3 = np.ascontiguousarray(g).reshape((O, n, I))
    y3 = np.ascontiguousarray(y).reshape((O, n, I))
    out = np.empty((O, n, I), y.dtype)
    for o in range(O):
        for k in range(I):
            s = 0.0
            t = 0.0
            for j in range(n):
                s += g3[o, j, k] * y3[o, j, k]
                t += r3[o, j, k] * y3[o, j, k]
            for j in range(n):
                out[o, j, k] = r3[o, j, k] * (g3[o, j, k] - s) - t * g3[o, j, k]
    return out.reshape(y.shape)


@njit(cache=True)
def log_softmax(x, axis=-1):
    ax, O, n, I = _axis3(x.shape, axis)
    x3 = np.ascontiguousarray(x).reshape((O, n, I))
    out = np.empty((O, n, I), x.dtype)
    for o in range(O):
        for k in range(I):
            m = _NEG_INF
            for j in range(n):
                if x3[o, j, k] > m:
                    m = x3[o, j, k]
            s = 0.0
            for j in range(n):
                s += math.exp(x3[o, j, k] - m)
            lse = m + math.log(s)
            for j in range(n):
                out[o, j, k] = x3[o, j, k] - lse
    return out.reshape(x.shape)


@njit(cache=True)
def log_softmax_grad(g, y, axis=-1):
    """g - exp(y) * sum(g, axis) for y = log_softmax(x, axis)."""
    ax, O, n, I = _axis3(y.shape, axis)
    g3 = np.ascontiguousarray(g).reshape((O, n, I))
    y3 = np.ascontiguousarray(y).reshape((O, n, I))
    out = np.empty((O, n, I), y.dtype)
    for o in range(O):
        for k in range(I):
            s = 0.0
            for j in range(n):
                s += g3[o, j, k]
            for j in range(n):
                out[o, j, k] = g3[o, j, k] - math.exp(y3[o, j, k]) * s
    return out.reshape(y.shape)


@njit(cache=True)
def _lse3(x3):
    O, n, I = x3.shape
    out = np.empty((O, I), x3.dtype)
    for o in range(O):
        for k in range(I):
            m = _NEG_INF
            for j in range(n):
                if x3[o, j, k] > m:
                    m = x3[o, j, k]
            if m == _NEG_INF:
                out[o, k] = m
                continue
            s = 0.0
            for j in range(n):
                s += math.exp(x3[o, j, k] - m)
            out[o, k] = m + math.log(s)
    return out


@njit(cache=True)
def logsumexp(x, axis=-1):
    """log(sum(exp(x), axis)), stable; the axis is removed from the shape."""
    ax, O, n, I = _axis3(x.shape, axis)
    out = _lse3(np.ascontiguousarray(x).reshape((O, n, I)))
    return out.reshape(_drop_axis(x.shape, ax))


@njit(cache=True)
def logsumexp_grad(g, x, y, axis=-1):
    """g[..., None] * exp(x - y[..., None]) along axis."""
    ax, O, n, I = _axis3(x.shape, axis)
    x3 = np.ascontiguousarray(x).reshape((O, n, I))
    y2 = np.ascontiguousarray(y).reshape((O, I))
    g2 = np.ascontiguousarray(g).reshape((O, I))
    out = np.empty((O, n, I), x.dtype)
    for o in range(O):
        for k in range(I):
            for j in range(n):
                out[o, j, k] = g2[o, k] * math.exp(x3[o, j, k] - y2[o, k])
    return out.reshape(x.shape)


# --------------------------------------------------------------------------- dropout
_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xBF58476D1CE4E5B9)
_M3 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
_TWO_M53 = 1.0 / 9007199254740992.0


@njit(cache=True)
def _uniform(seed, i):
    """Counter-based uniform in [0, 1) from (seed, i): splitmix64; identical in Python and njit."""
    z = np.uint64(seed) * _M2 + (np.uint64(i) + np.uint64(1)) * _M1
    z = (z ^ (z >> _S30)) * _M2
    z = (z ^ (z >> _S27)) * _M3
    z = z ^ (z >> _S31)
    return float(z >> _S11) * _TWO_M53


@njit(cache=True)
def dropout(x, rate, seed):
    """Zero each element with probability rate (mask from seed), scale the rest by 1/(1-rate).

    Linear in x with a mask fixed by (seed, element index), so its VJP is itself."""
    xf = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(xf.size, x.dtype)
    scale = 1.0 / (1.0 - rate) if rate < 1.0 else 0.0
    for i in range(xf.size):
        out[i] = xf[i] * scale if _uniform(seed, i) >= rate else 0
    return out.reshape(x.shape)


# --------------------------------------------------------------------------- batch norm / layer norm
@njit(cache=True)
def _ncs(x):
    N = x.shape[0]
    C = x.shape[1]
    S = x.size // max(N * C, 1)
    return np.ascontiguousarray(x).reshape((N, C, S)), N, C, S


@njit(cache=True)
def _bn_moments(x3):
    N, C, S = x3.shape
    M = N * S
    mean = np.empty(C)
    var = np.empty(C)
    for c in range(C):
        s = 0.0
        for n in range(N):
            for k in range(S):
                s += x3[n, c, k]
        mu = s / M
        v = 0.0
        for n in range(N):
            for k in range(S):
                t = x3[n, c, k] - mu
                v += t * t
        mean[c] = mu
        var[c] = v / M
    return mean, var


@njit(cache=True)
def _bn_stats(x3, running_mean, running_var, train):
    if train:
        return _bn_moments(x3)
    C = x3.shape[1]
    mean = np.empty(C)
    var = np.empty(C)
    for c in range(C):
        mean[c] = running_mean[c]
        var[c] = running_var[c]
    return mean, var


@njit(cache=True)
def batch_norm(x, gamma, beta, running_mean, running_var, train=True, eps=1e-5):
    """Per channel (axis 1): gamma * (x - mean) / sqrt(var + eps) + beta.

    train: batch statistics (biased variance); else the running statistics."""
    x3, N, C, S = _ncs(x)
    mean, var = _bn_stats(x3, running_mean, running_var, train)
    out = np.empty((N, C, S), x.dtype)
    for c in range(C):
        a = gamma[c] / math.sqrt(var[c] + eps)
        b = beta[c] - mean[c] * a
        for n in range(N):
            for k in range(S):
                out[n, c, k] = x3[n, c, k] * a + b
    return out.reshape(x.shape)


@njit(cache=True)
def batch_norm_grad_input(dy, x, gamma, running_mean, running_var, train=True, eps=1e-5):
    x3, N, C, S = _ncs(x)
    dy3 = np.ascontiguousarray(dy).reshape((N, C, S))
    mean, var = _bn_stats(x3, running_mean, running_var, train)
    out = np.empty((N, C, S), x.dtype)
    M = N * S
    for c in range(C):
        inv = 1.0 / math.sqrt(var[c] + eps)
        gc = gamma[c]
        if train:
            s1 = 0.0
            s2 = 0.0
            for n in range(N):
                for k in range(S):
                    g = dy3[n, c, k]
                    s1 += g
                    s2 += g * (x3[n, c, k] - mean[c]) * inv
            for n in range(N):
                for k in range(S):
                    xh = (x3[n, c, k] - mean[c]) * inv
                    out[n, c, k] = gc * inv * (dy3[n, c, k] - s1 / M - xh * s2 / M)
        else:
            for n in range(N):
                for k in range(S):
                    out[n, c, k] = dy3[n, c, k] * gc * inv
    return out.reshape(x.shape)


@njit(cache=True)
def batch_norm_grad_gamma(dy, x, running_mean, running_var, train=True, eps=1e-5):
    x3, N, C, S = _ncs(x)
    dy3 = np.ascontiguousarray(dy).reshape((N, C, S))
    mean, var = _bn_stats(x3, running_mean, running_var, train)
    out = np.empty(C, x.dtype)
    for c in range(C):
        inv = 1.0 / math.sqrt(var[c] + eps)
        s = 0.0
        for n in range(N):
            for k in range(S):
                s += dy3[n, c, k] * (x3[n, c, k] - mean[c]) * inv
        out[c] = s
    return out


@njit(cache=True)
def batch_norm_stats(x, running_mean, running_var, momentum=0.1):
    """New running statistics after one training batch, stacked (2, C): [mean, var].

    new = (1 - momentum) * running + momentum * batch, with the unbiased batch
    variance (PyTorch's convention)."""
    x3, N, C, S = _ncs(x)
    mean, var = _bn_moments(x3)
    M = N * S
    corr = M / (M - 1.0) if M > 1 else 1.0
    out = np.empty((2, C), running_mean.dtype)
    for c in range(C):
        out[0, c] = (1.0 - momentum) * running_mean[c] + momentum * mean[c]
        out[1, c] = (1.0 - momentum) * running_var[c] + momentum * var[c] * corr
    return out


@njit(cache=True)
def _rows(x):
    D = x.shape[x.ndim - 1]
    R = x.size // max(D, 1)
    return np.ascontiguousarray(x).reshape((R, D)), R, D


@njit(cache=True)
def _ln_row(x2, r, D, eps):
    s = 0.0
    for j in range(D):
        s += x2[r, j]
    mu = s / D
    v = 0.0
    for j in range(D):
        t = x2[r, j] - mu
        v += t * t
    return mu, 1.0 / math.sqrt(v / D + eps)


@njit(cache=True)
def layer_norm(x, gamma, beta, eps=1e-5):
    """Normalize over the last axis: gamma * (x - mean) / sqrt(var + eps) + beta."""
    x2, R, D = _rows(x)
    out = np.empty((R, D), x.dtype)
    for r in range(R):
        mu, inv = _ln_row(x2, r, D, eps)
        for j in range(D):
            out[r, j] = (x2[r, j] - mu) * inv * gamma[j] + beta[j]
    return out.reshape(x.shape)


@njit(cache=True)
def layer_norm_grad_input(dy, x, gamma, eps=1e-5):
    x2, R, D = _rows(x)
    dy2 = np.ascontiguousarray(dy).reshape((R, D))
    out = np.empty((R, D), x.dtype)
    for r in range(R):
        mu, inv = _ln_row(x2, r, D, eps)
        s1 = 0.0
        s2 = 0.0
        for j in range(D):
            gh = dy2[r, j] * gamma[j]
            s1 += gh
            s2 += gh * (x2[r, j] - mu) * inv
        for j in range(D):
            xh = (x2[r, j] - mu) * inv
            out[r, j] = inv * (dy2[r, j] * gamma[j] - s1 / D - xh * s2 / D)
    return out.reshape(x.shape)


@njit(cache=True)
def layer_norm_grad_gamma(dy, x, eps=1e-5):
    x2, R, D = _rows(x)
    dy2 = np.ascontiguousarray(dy).reshape((R, D))
    out = np.zeros(D, x.dtype)
    for r in range(R):
        mu, inv = _ln_row(x2, r, D, eps)
        for j in range(D):
            out[j] += dy2[r, j] * (x2[r, j] - mu) * inv
    return out


@njit(cache=True)
def layer_norm_grad_beta(dy):
    """Sum over every axis but the last."""
    dy2, R, D = _rows(dy)
    out = np.zeros(D, dy.dtype)
    for r in range(R):
        for j in range(D):
            out[j] += dy2[r, j]
    return out


# --------------------------------------------------------------------------- embedding
@njit(cache=True)
def embedding(table, ids):
    """table[ids]: ids of any shape -> ids.shape + (D,)."""
    V = table.shape[0]
    D = table.shape[1]
    idf = np.ascontiguousarray(ids).reshape(-1)
    out = np.empty((idf.size, D), table.dtype)
    for i in range(idf.size):
        k = idf[i]
        if k < 0 or k >= V:
            raise IndexError("embedding: id out of range")
        for j in range(D):
            out[i, j] = table[k, j]
    return out.reshape(ids.shape + (D,))


@njit(cache=True)
def embedding_grad(dy, ids, table_shape):
    """Scatter-add of dy rows into a zero table (adjoint of embedding in table)."""
    V, D = table_shape
    out = np.zeros((V, D), dy.dtype)
    idf = np.ascontiguousarray(ids).reshape(-1)
    dy2 = np.ascontiguousarray(dy).reshape((idf.size, D))
    for i in range(idf.size):
        k = idf[i]
        for j in range(D):
            out[k, j] += dy2[i, j]
    return out


# --------------------------------------------------------------------------- losses
# Each loss has a per-element core (returns the unreduced losses) and a grad core
# taking the cotangent as a flat array (length 1 = broadcast) times a scale.
# reduction is static: "none" (per-element array), "sum", "mean" (numbers).

def _reduce_py(e, reduction):
    if reduction == "none":
        return e
    if reduction == "sum":
        return e.sum()
    if reduction == "mean":
        return e.sum() / max(e.size, 1)
    raise ValueError(f"reduction must be 'none', 'sum' or 'mean', got {reduction!r}")


def _grad_prep_py(g, reduction, n):
    gf = _flat(g)
    if reduction == "mean":
        return gf, 1.0 / max(n, 1)
    if reduction in ("sum", "none"):
        return gf, 1.0
    raise ValueError(f"reduction must be 'none', 'sum' or 'mean', got {reduction!r}")


def _check_red(name, r):
    if r not in ("none", "sum", "mean"):
        raise _nberrors.TypingError(f"{name}: reduction must be 'none', 'sum' or 'mean', got {r!r}")


@njit(cache=True)
def _mean(e):
    return e.sum() / max(e.size, 1)


@njit(cache=True)
def _gscale(n):
    return 1.0 / max(n, 1)


def _make_loss(name, elems, nelems):
    """Forward kernel (a, b, reduction) from elems(a, b) -> per-element losses."""
    def kern(a, b, reduction="mean"):
        return _reduce_py(elems(a, b), reduction)

    @overload(kern)
    def _ov(a, b, reduction="mean"):
        r = _static_str(reduction)
        if r is None:
            return lambda a, b, reduction="mean": numba.literally(reduction)
        _check_red(name, r)
        if r == "none":
            return lambda a, b, reduction="mean": elems(a, b)
        if r == "sum":
            return lambda a, b, reduction="mean": elems(a, b).sum()
        return lambda a, b, reduction="mean": _mean(elems(a, b))
    kern.__name__ = kern.__qualname__ = name
    return kern


def _make_loss_grad(name, core, nelems):
    """Grad kernel (g, a, b, reduction) from core(gflat, scale, a, b); nelems(a) = #losses."""
    def kern(g, a, b, reduction="mean"):
        gf, scale = _grad_prep_py(g, reduction, nelems(a))
        return core(gf, scale, a, b)

    @overload(kern)
    def _ov(g, a, b, reduction="mean"):
        r = _static_str(reduction)
        if r is None:
            return lambda g, a, b, reduction="mean": numba.literally(reduction)
        _check_red(name, r)
        if r == "mean":
            return lambda g, a, b, reduction="mean": core(_flat(g), _gscale(nelems(a)), a, b)
        return lambda g, a, b, reduction="mean": core(_flat(g), 1.0, a, b)
    kern.__name__ = kern.__qualname__ = name
    return kern


@njit(cache=True)
def _n_all(a):
    return a.size


@njit(cache=True)
def _n_rows(a):
    return a.shape[0]


@njit(cache=True)
def _gi(gf, i):
    return gf[0] if gf.size == 1 else gf[i]


# mse ---------------------------------------------------------------
@njit(cache=True)
def _mse_elems(p, t):
    pf = np.ascontiguousarray(p).reshape(-1)
    tf = np.ascontiguousarray(t).reshape(-1)
    out = np.empty(pf.size, p.dtype)
    for i in range(pf.size):
        r = pf[i] - tf[i]
        out[i] = r * r
    return out.reshape(p.shape)


@njit(cache=True)
def _mse_grad(gf, scale, p, t):
    pf = np.ascontiguousarray(p).reshape(-1)
    tf = np.ascontiguousarray(t).reshape(-1)
    out = np.empty(pf.size, p.dtype)
    for i in range(pf.size):
        out[i] = 2.0 * scale * _gi(gf, i) * (pf[i] - tf[i])
    return out.reshape(p.shape)


mse = _make_loss("mse", _mse_elems, _n_all)
mse_grad = _make_loss_grad("mse_grad", _mse_grad, _n_all)


# huber (delta is static and comes before reduction) ------------------
@njit(cache=True)
def _huber_elems(p, t, delta):
    pf = np.ascontiguousarray(p).reshape(-1)
    tf = np.ascontiguousarray(t).reshape(-1)
    out = np.empty(pf.size, p.dtype)
    for i in range(pf.size):
        r = abs(pf[i] - tf[i])
        out[i] = 0.5 * r * r if r <= delta else delta * (r - 0.5 * delta)
    return out.reshape(p.shape)


@njit(cache=True)
def _huber_grad(gf, scale, p, t, delta):
    pf = np.ascontiguousarray(p).reshape(-1)
    tf = np.ascontiguousarray(t).reshape(-1)
    out = np.empty(pf.size, p.dtype)
    for i in range(pf.size):
        r = pf[i] - tf[i]
        c = r if abs(r) <= delta else (delta if r > 0 else -delta)
        out[i] = scale * _gi(gf, i) * c
    return out.reshape(p.shape)


def huber(a, b, delta=1.0, reduction="mean"):
    return _reduce_py(_huber_elems(a, b, float(delta)), reduction)


@overload(huber)
def _ov_huber(a, b, delta=1.0, reduction="mean"):
    r = _static_str(reduction)
    if r is None:
        return lambda a, b, delta=1.0, reduction="mean": numba.literally(reduction)
    _check_red("huber", r)
    if r == "none":
        return lambda a, b, delta=1.0, reduction="mean": _huber_elems(a, b, float(delta))
    if r == "sum":
        return lambda a, b, delta=1.0, reduction="mean": _huber_elems(a, b, float(delta)).sum()
    return lambda a, b, delta=1.0, reduction="mean": _mean(_huber_elems(a, b, float(delta)))


def huber_grad(g, a, b, delta=1.0, reduction="mean"):
    gf, scale = _grad_prep_py(g, reduction, a.size)
    return _huber_grad(gf, scale, a, b, float(delta))


@overload(huber_grad)
def _ov_huber_grad(g, a, b, delta=1.0, reduction="mean"):
    r = _static_str(reduction)
    if r is None:
        return lambda g, a, b, delta=1.0, reduction="mean": numba.literally(reduction)
    _check_red("huber_grad", r)
    if r == "mean":
        return lambda g, a, b, delta=1.0, reduction="mean": _huber_grad(_flat(g), _gscale(a.size), a, b,
                                                                         float(delta))
    return lambda g, a, b, delta=1.0, reduction="mean": _huber_grad(_flat(g), 1.0, a, b, float(delta))


# binary cross-entropy on probabilities (log clamped at -100 like PyTorch) ------
@njit(cache=True)
def _clog(v):
    return math.log(v) if v > 3.720075976020836e-44 else -100.0


@njit(cache=True)
def _bce_elems(p, t):
    pf = np.ascontiguousarray(p).reshape(-1)
    tf = np.ascontiguousarray(t).reshape(-1)
    out = np.empty(pf.size, p.dtype)
    for i in range(pf.size):
        out[i] = -(tf[i] * _clog(pf[i]) + (1.0 - tf[i]) * _clog(1.0 - pf[i]))
    return out.reshape(p.shape)


@njit(cache=True)
def _bce_grad(gf, scale, p, t):
    pf = np.ascontiguousarray(p).reshape(-1)
    tf = np.ascontiguousarray(t).reshape(-1)
    out = np.empty(pf.size, p.dtype)
    for i in range(pf.size):
        q = pf[i]
        out[i] = scale * _gi(gf, i) * (q - tf[i]) / max(q * (1.0 - q), 1e-12)
    return out.reshape(p.shape)


@njit(cache=True)
def _bce_grad_t(gf, scale, p, t):
    pf = np.ascontiguousarray(p).reshape(-1)
    out = np.empty(pf.size, p.dtype)
    for i in range(pf.size):
        out[i] = scale * _gi(gf, i) * (_clog(1.0 - pf[i]) - _clog(pf[i]))
    return out.reshape(p.shape)


binary_cross_entropy = _make_loss("binary_cross_entropy", _bce_elems, _n_all)
binary_cross_entropy_grad = _make_loss_grad("binary_cross_entropy_grad", _bce_grad, _n_all)
binary_cross_entropy_grad_target = _make_loss_grad("binary_cross_entropy_grad_target", _bce_grad_t, _n_all)


# binary cross-entropy on logits --------------------------------------
@njit(cache=True)
def _bcel_elems(z, t):
    zf = np.ascontiguousarray(z).reshape(-1)
    tf = np.ascontiguousarray(t).reshape(-1)
    out = np.empty(zf.size, z.dtype)
    for i in range(zf.size):
        v = zf[i]
        out[i] = max(v, 0.0) - v * tf[i] + math.log1p(math.exp(-abs(v)))
    return out.reshape(z.shape)


@njit(cache=True)
def _bcel_grad(gf, scale, z, t):
    zf = np.ascontiguousarray(z).reshape(-1)
    tf = np.ascontiguousarray(t).reshape(-1)
    out = np.empty(zf.size, z.dtype)
    for i in range(zf.size):
        out[i] = scale * _gi(gf, i) * (_s_sigmoid(zf[i]) - tf[i])
    return out.reshape(z.shape)


@njit(cache=True)
def _bcel_grad_t(gf, scale, z, t):
    zf = np.ascontiguousarray(z).reshape(-1)
    out = np.empty(zf.size, z.dtype)
    for i in range(zf.size):
        out[i] = -scale * _gi(gf, i) * zf[i]
    return out.reshape(z.shape)


binary_cross_entropy_with_logits = _make_loss("binary_cross_entropy_with_logits", _bcel_elems, _n_all)
binary_cross_entropy_with_logits_grad = _make_loss_grad("binary_cross_entropy_with_logits_grad",
                                                        _bcel_grad, _n_all)
binary_cross_entropy_with_logits_grad_target = _make_loss_grad(
    "binary_cross_entropy_with_logits_grad_target", _bcel_grad_t, _n_all)


# cross-entropy over the last axis of (N, C) logits; labels (N,) ints or (N, C) probabilities
@njit(cache=True)
def _row_lse(z, i):
    C = z.shape[1]
    m = _NEG_INF
    for j in range(C):
        if z[i, j] > m:
            m = z[i, j]
    s = 0.0
    for j in range(C):
        s += math.exp(z[i, j] - m)
    return m + math.log(s)


@njit(cache=True)
def _ce_elems_int(z, y):
    N, C = z.shape
    out = np.empty(N, z.dtype)
    for i in range(N):
        k = y[i]
        if k < 0 or k >= C:
            raise IndexError("cross_entropy: label out of range")
        out[i] = _row_lse(z, i) - z[i, k]
    return out


@njit(cache=True)
def _ce_elems_prob(z, t):
    N, C = z.shape
    out = np.empty(N, z.dtype)
    for i in range(N):
        lse = _row_lse(z, i)
        s = 0.0
        for j in range(C):
            s += t[i, j] * (lse - z[i, j])
        out[i] = s
    return out


@njit(cache=True)
def _ce_grad_int(gf, scale, z, y):
    N, C = z.shape
    out = np.empty((N, C), z.dtype)
    for i in range(N):
        lse = _row_lse(z, i)
        g = scale * _gi(gf, i)
        for j in range(C):
            out[i, j] = g * math.exp(z[i, j] - lse)
        out[i, y[i]] -= g
    return out


@njit(cache=True)
def _ce_grad_prob(gf, scale, z, t):
    N, C = z.shape
    out = np.empty((N, C), z.dtype)
    for i in range(N):
        lse = _row_lse(z, i)
        g = scale * _gi(gf, i)
        st = 0.0
        for j in range(C):
            st += t[i, j]
        for j in range(C):
            out[i, j] = g * (math.exp(z[i, j] - lse) * st - t[i, j])
    return out


@njit(cache=True)
def _ce_grad_t_int(gf, scale, z, y):
    return np.zeros(y.shape, z.dtype)


@njit(cache=True)
def _ce_grad_t_prob(gf, scale, z, t):
    N, C = z.shape
    out = np.empty((N, C), z.dtype)
    for i in range(N):
        lse = _row_lse(z, i)
        g = scale * _gi(gf, i)
        for j in range(C):
            out[i, j] = g * (lse - z[i, j])
    return out


def _ce_int_or_prob(int_core, prob_core):
    def kern2(a, b):
        if np.issubdtype(np.asarray(b).dtype, np.integer):
            return int_core(a, b)
        return prob_core(a, b)

    @overload(kern2)
    def _ov2(a, b):
        if isinstance(b, types.Array) and isinstance(b.dtype, types.Integer):
            return lambda a, b: int_core(a, b)
        return lambda a, b: prob_core(a, b)
    return kern2


def _ce_int_or_prob4(int_core, prob_core):
    def kern4(gf, scale, a, b):
        if np.issubdtype(np.asarray(b).dtype, np.integer):
            return int_core(gf, scale, a, b)
        return prob_core(gf, scale, a, b)

    @overload(kern4)
    def _ov4(gf, scale, a, b):
        if isinstance(b, types.Array) and isinstance(b.dtype, types.Integer):
            return lambda gf, scale, a, b: int_core(gf, scale, a, b)
        return lambda gf, scale, a, b: prob_core(gf, scale, a, b)
    return kern4


_ce_elems = _ce_int_or_prob(_ce_elems_int, _ce_elems_prob)
_ce_grad = _ce_int_or_prob4(_ce_grad_int, _ce_grad_prob)
_ce_grad_t = _ce_int_or_prob4(_ce_grad_t_int, _ce_grad_t_prob)

cross_entropy = _make_loss("cross_entropy", _ce_elems, _n_rows)
cross_entropy_grad = _make_loss_grad("cross_entropy_grad", _ce_grad, _n_rows)
cross_entropy_grad_target = _make_loss_grad("cross_entropy_grad_target", _ce_grad_t, _n_rows)


# nll on log-probabilities ------------------------------------------------
@njit(cache=True)
def _nll_elems(lp, y):
    N, C = lp.shape
    out = np.empty(N, lp.dtype)
    for i in range(N):
        k = y[i]
        if k < 0 or k >= C:
            raise IndexError("nll: label out of range")
        out[i] = -lp[i, k]
    return out


@njit(cache=True)
def _nll_grad(gf, scale, lp, y):
    N, C = lp.shape
    out = np.zeros((N, C), lp.dtype)
    for i in range(N):
        out[i, y[i]] = -scale * _gi(gf, i)
    return out


nll = _make_loss("nll", _nll_elems, _n_rows)
nll_grad = _make_loss_grad("nll_grad", _nll_grad, _n_rows)
