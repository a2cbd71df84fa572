"""The CUDA kernel namespace ``K``: the names generated code calls, on numba.cuda device arrays.

Owns the compute behind the primitives the GPU backend runs (see
:mod:`funcgrad.kernels.cuda_backend`). Every array this module returns is a
C-contiguous numba.cuda device array; every kernel is generated from a small
template the first time a (template, operand kinds, rank) is met, compiled by
``numba.cuda.jit`` and reused:

* **elementwise** (``add``, ``tanh``, ``where``...): one thread per output element,
  grid-stride; each operand is *flat* (same shape as the output: read at the
  thread's index), a *scalar* (a host number, passed by value in the output's
  dtype), or *broadcast* (read through element strides that are 0 on the
  broadcast axes). NumPy's promotion decides the output dtype;
* **reductions** over ``axis``/``keepdims``: one thread per output element walking
  the reduced axes (coalesced for the batch-axis sums of bias gradients); a full
  reduction is a two-pass shared-memory tree and returns a **host scalar** (the
  loss: the only device-to-host copy of a training step);
* **matmul** through cuBLAS (CuPy's, over ``__cuda_array_interface__``, no copy)
  when CuPy is installed, else a tiled shared-memory GEMM (what the CUDA simulator
  runs in CI);
* **axis kernels** (``softmax``, ``log_softmax``, ``logsumexp`` and their VJPs): one
  thread per row of the (outer, axis, inner) view.

Operands are device arrays and host numbers. A NumPy array (host memory) meeting
a device array is refused with :class:`DeviceMismatchError`: funcgrad never
copies between host and device behind the user's back.
"""
from __future__ import annotations

import builtins as _b
import hashlib
import math
import operator
import sys
import threading
import weakref
from collections import OrderedDict

import numpy as np
import numba
from numba import config, cuda

from ..errors import DeviceError as DeviceMismatchError
from .base import is_device_array
from . import cpu_nn as _cpu_nn
from . import cuda_blas as _blas
from .cuda_launch import LOCAL as _LOCAL, TIMING as _TIMING, current_context as _current_context, \
    go as _go, host_read as _host_read, timed as _timed

SIM = bool(config.ENABLE_CUDASIM)
_THIS = sys.modules[__name__]

if SIM:   # the simulator's device arrays
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray as _DevArray
else:
    from numba.cuda.cudadrv.devicearray import DeviceNDArray as _DevArray

__all__ = ["DeviceMismatchError", "is_device_array", "as_device", "SIM"]

_TPB = 8 if SIM else 256            # threads per block (the simulator runs one Python thread per CUDA thread)
_MAX_BLOCKS = 4 if SIM else 65535
_LOCK = threading.Lock()


# ----------------------------------------------------------------------------- operands
def as_device(x):
    """``x`` as a numba.cuda device array (no copy for objects exposing ``__cuda_array_interface__``)."""
    if type(x) is Lazy:
        return x.value()
    if isinstance(x, _DevArray):
        return x
    return cuda.as_cuda_array(x)


def _host_scalar(x):
    return isinstance(x, (bool, int, float, complex, np.generic)) or (isinstance(x, np.ndarray) and x.ndim == 0)


def _operand(x, what="an operand"):
    """A device array (made C-contiguous) or a host scalar; a host array is refused."""
    if type(x) is Lazy:
        return x.value()
    if getattr(x, "_fg_flat", None) is not None:   # made here: contiguous
        return x
    if isinstance(x, _DevArray):
        return x if _is_c(x) else _contiguous(x)
    if _host_scalar(x):
        return x[()] if isinstance(x, np.ndarray) else x
    if hasattr(x, "__cuda_array_interface__"):
        return _operand(cuda.as_cuda_array(x), what)
    if isinstance(x, (np.ndarray, list, tuple)):
        raise DeviceMismatchError(
            f"a host (NumPy) array of shape {np.shape(x)} meets GPU arrays in one operation; funcgrad does not copy "
            "between host and device on its own: move it first with funcgrad.device_put(x, 'cuda'), or keep every "
            "array of the call on the host")
    raise DeviceMismatchError(f"{what} of type {type(x).__name__} cannot be used in GPU code")


def _is_c(a):
    if a.ndim <= 1:
        return a.ndim == 0 or a.strides[0] == a.dtype.itemsize or a.shape[0] <= 1
    expect = a.dtype.itemsize
    for n, s in zip(reversed(a.shape), reversed(a.strides)):
        if n != 1 and s != expect:
            return False
        expect *= n
    return True


def _shape(x):
    return tuple(x.shape) if isinstance(x, (_DevArray, Lazy)) else ()


#: where new arrays come from: "numba" (cuMemAlloc through numba.cuda) or "cupy" (CuPy's memory pool, no
#: allocation call per array); set by :func:`set_allocator`, default "cupy" when CuPy is installed
_ALLOC = [None]


def set_allocator(kind):
    """"numba" or "cupy" (CuPy's caching pool: a training step allocates nothing from the driver)."""
    if kind not in ("numba", "cupy"):
        raise ValueError(f"allocator must be 'numba' or 'cupy'; received {kind!r}")
    if kind == "cupy" and _cupy() is None:
        raise DeviceMismatchError("the 'cupy' allocator needs CuPy (pip install 'funcgrad[cuda]') and a GPU")
    _ALLOC[0] = kind


def _empty(shape, dtype):
    shape = tuple(int(s) for s in shape)
    if _ALLOC[0] is None:
        _ALLOC[0] = "cupy" if _cupy() is not None else "numba"
    n = _size(shape)
    if _ALLOC[0] == "cupy":   # the shaped array and its flat view wrapped from the pool's memory (no reshape)
        c = _CUPY[0].empty((n,), dtype=np.dtype(dtype))
        flat = _from_cupy(c)
        out = flat if len(shape) == 1 else _from_cupy(c, shape)
    else:
        flat = cuda.device_array((n,), dtype=np.dtype(dtype))
        out = flat if len(shape) == 1 else flat.reshape(shape)
    if out is flat:
        return flat
    try:
        out._fg_flat = flat   # the flat view kernels index, made once
    except AttributeError:    # pragma: no cover - a device array type without a __dict__
        pass
    return out


_WRAP = [None]   # numba-cuda's MemoryPointer and context lookup, or False: wrap through as_cuda_array


def _from_cupy(c, shape=None):
    """The C-contiguous CuPy array ``c`` (seen with ``shape``) as a numba device array that keeps it alive.

    ``cuda.as_cuda_array`` reads the array interface and makes a stream object each time (15 us on an H200's
    host, as much as a kernel launch); this builds the same DeviceNDArray from the pointer directly, falling
    back to ``as_cuda_array`` where numba-cuda's internals differ."""
    w = _WRAP[0]
    if w is None:
        try:
            from numba.cuda.cudadrv import driver as _drv
            w = _WRAP[0] = (_drv.MemoryPointer, _drv.binding.CUdeviceptr, lambda: _current_context()[1])
        except Exception:   # noqa: BLE001
            w = _WRAP[0] = False
    shape = tuple(c.shape) if shape is None else shape
    if w is False:
        return cuda.as_cuda_array(c.reshape(shape), sync=False)
    MemoryPointer, devptr, context = w
    item = c.dtype.itemsize
    strides, acc = [], item
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    try:
        data = MemoryPointer(context(), devptr(c.data.ptr), size=c.nbytes, owner=c)
        return _DevArray(shape=shape, strides=tuple(reversed(strides)), dtype=c.dtype, gpu_data=data)
    except Exception:   # noqa: BLE001
        _WRAP[0] = False
        return cuda.as_cuda_array(c.reshape(shape), sync=False)


def address(a):
    """The device address of ``a``'s first element (the simulator's: its host memory)."""
    p = getattr(a, "device_ctypes_pointer", None)
    if p is not None:
        return p.value or 0
    return a._ary.__array_interface__["data"][0]   # pragma: no cover - (simulator arrays)


def _to_host(a):
    """``a`` copied to a NumPy array (refused while a CUDA graph is recorded: the value does not exist yet)."""
    _host_read()
    return a.copy_to_host()


#: device copies of small host arrays the kernels made (index positions, masks), by device and content:
#: a function indexing with the same constant indices copies them once, and a CUDA graph can be recorded
#: around it (the recording keeps what it read alive). Read-only: no kernel writes into them.
_DEV_CACHE: "OrderedDict" = OrderedDict()
_DEV_CACHE_BYTES = [0]
_DEV_CACHE_LOCK = threading.Lock()
_CACHE_ONE = 4 << 20      # arrays larger than this are copied every time
_CACHE_ALL = 64 << 20     # bytes held, at most (least recently used dropped first)


def _to_device(a):
    """The host array ``a`` on the device: a cached copy of the same content where there is one, else a new
    copy (refused while a CUDA graph is recorded: the copy would happen once, into memory the graph does not
    own; a cached copy is fine, and the recording keeps it)."""
    a = np.ascontiguousarray(a)
    rec = _LOCAL.recording
    key = None
    if a.nbytes <= _CACHE_ONE:
        digest = hashlib.blake2b(a.view(np.uint8).reshape(-1) if a.size else b"", digest_size=16).digest()
        key = (0 if SIM else _current_context()[0], a.dtype.str, a.shape, digest)
        with _DEV_CACHE_LOCK:
            hit = _DEV_CACHE.get(key)
            if hit is not None:
                _DEV_CACHE.move_to_end(key)
        if hit is not None:
            if rec is not None:
                rec.keep.append(hit)
            return hit
    _host_read("a host array copied to the device")
    d = cuda.to_device(a)
    if key is not None:
        with _DEV_CACHE_LOCK:
            if key not in _DEV_CACHE:
                _DEV_CACHE[key] = d
                _DEV_CACHE_BYTES[0] += a.nbytes
                while _DEV_CACHE_BYTES[0] > _CACHE_ALL or len(_DEV_CACHE) > 1024:
                    _, old = _DEV_CACHE.popitem(last=False)
                    _DEV_CACHE_BYTES[0] -= old.size * old.dtype.itemsize
    return d


def _flat(a):
    if a.ndim == 1:
        return a
    f = getattr(a, "_fg_flat", None)
    if f is not None:
        return f
    n = 1
    for s in a.shape:
        n *= s
    try:
        return a.reshape((n,))
    except NotImplementedError:   # numba's contiguity test rejects odd strides of length-1 axes: copy
        return _contiguous(a).reshape((n,))


def _size(shape):
    n = 1
    for s in shape:
        n *= s
    return n


#: kernel launches (and cuBLAS calls) since import: benchmarks/gpu_step.py reports launches per step
LAUNCHES = [0]


def _launch(n):
    LAUNCHES[0] += 1
    blocks = _b.max(1, _b.min((n + _TPB - 1) // _TPB, _MAX_BLOCKS))
    return blocks, _TPB


def _elem_strides(shape):
    st, acc = [], 1
    for s in reversed(shape):
        st.append(acc)
        acc *= s
    return tuple(reversed(st))


def _unravel(ndim):
    """Kernel source lines turning the flat output index ``i`` into coordinates ``c0``..: C order over ``shape``."""
    lines = ["        r = i"]
    for d in range(ndim - 1, -1, -1):
        lines += [f"        c{d} = r % shape[{d}]", f"        r = r // shape[{d}]"]
    return lines


def _bstrides(shape, nd):
    """Element strides reading a C-contiguous array of ``shape`` broadcast to ``nd`` dimensions (0 on the
    broadcast axes)."""
    st = _elem_strides(shape)
    lead = nd - len(shape)
    return tuple(0 if d < lead or shape[d - lead] == 1 else st[d - lead] for d in range(nd))


def _compile(src, name, extra=None):
    ns = {"cuda": cuda, "math": math, "float64": numba.float64}
    if extra:
        ns.update(extra)
    exec(compile(src, f"<funcgrad cuda kernel {name}>", "exec"), ns)
    return cuda.jit(ns[name])


# ----------------------------------------------------------------------------- elementwise
# expression templates: {0}, {1}, {2} are the operands (already read); results cast on store
_UNARY = {
    "exp": "math.exp({0})", "log": "math.log({0})", "log1p": "math.log1p({0})", "expm1": "math.expm1({0})",
    "sqrt": "math.sqrt({0})", "sin": "math.sin({0})", "cos": "math.cos({0})", "tan": "math.tan({0})",
    "tanh": "math.tanh({0})", "sinh": "math.sinh({0})", "cosh": "math.cosh({0})", "arctan": "math.atan({0})",
    "arcsin": "math.asin({0})", "arccos": "math.acos({0})", "arcsinh": "math.asinh({0})",
    "arccosh": "math.acosh({0})", "arctanh": "math.atanh({0})", "absolute": "abs({0})", "fabs": "abs({0})",
    "negative": "-{0}", "square": "{0} * {0}", "reciprocal": "1.0 / {0}", "exp2": "2.0 ** {0}",
    "log2": "math.log({0}) / 0.6931471805599453", "log10": "math.log({0}) / 2.302585092994046",
    "sign": "(1.0 if {0} > 0 else (-1.0 if {0} < 0 else ({0} if {0} != {0} else 0.0)))",
    "logical_not": "not {0}", "invert": "~{0}", "copy": "{0}", "stop_gradient": "{0}",
    "sigmoid": "(1.0 / (1.0 + math.exp(-{0})) if {0} >= 0 else math.exp({0}) / (1.0 + math.exp({0})))",
    "relu": "({0} if {0} > 0 else 0.0 * abs({0}))",
    "softplus": "(max({0}, 0.0) + math.log1p(math.exp(-abs({0}))))",
    "deg2rad": "{0} * 0.017453292519943295", "rad2deg": "{0} * 57.29577951308232",
}
_BINARY = {
    "add": "{0} + {1}", "subtract": "{0} - {1}", "multiply": "{0} * {1}", "divide": "{0} / {1}",
    "true_divide": "{0} / {1}", "power": "{0} ** {1}",
    "maximum": "({0} if ({0} >= {1} or {0} != {0}) else {1})",
    "minimum": "({0} if ({0} <= {1} or {0} != {0}) else {1})",
    "fmax": "({0} if ({0} >= {1} or {1} != {1}) else {1})", "fmin": "({0} if ({0} <= {1} or {1} != {1}) else {1})",
    "remainder": "{0} % {1}", "floor_divide": "{0} // {1}", "bitwise_and": "{0} & {1}", "bitwise_or": "{0} | {1}",
    "arctan2": "math.atan2({0}, {1})", "hypot": "math.hypot({0}, {1})",
    "equal": "{0} == {1}", "not_equal": "{0} != {1}", "less": "{0} < {1}", "less_equal": "{0} <= {1}",
    "greater": "{0} > {1}", "greater_equal": "{0} >= {1}", "logical_and": "({0} and {1})",
    "logical_or": "({0} or {1})",
    "logaddexp": "(max({0}, {1}) + math.log1p(math.exp(-abs({0} - {1}))) if {0} != {1} else {0} + 0.6931471805599453)",
    "relu_grad": "({0} if {1} > 0 else 0.0 * abs({0}))",                   # relu_grad(g, x)
    "sigmoid_grad": "{0} * {1} * (1.0 - {1})",                          # sigmoid_grad(g, y)
    "mask": "{0}",                                                       # mask(c, like): cast on store
}
_TERNARY = {
    "where": "({1} if {0} else {2})",
    "clip": "({1} if {0} < {1} else ({2} if {0} > {2} else {0}))",
    "in_range": "(1.0 if ({0} >= {1} and {0} <= {2}) else 0.0)",
    "tie_weight": "((1.0 if {0} == {2} else 0.0) * (0.5 if {0} == {1} else 1.0))",
    "add_scaled": "{0} + {2} * {1}",          # add_scaled(p, u, s) = p + s * u: an optimizer step in one pass
}
_BOOL_OUT = {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and",
             "logical_or", "logical_not"}
_FLOAT_OUT = set(_UNARY) - {"absolute", "negative", "square", "sign", "logical_not", "invert", "copy", "stop_gradient",
                            "relu", "fabs"} | {"divide", "true_divide", "arctan2", "hypot", "logaddexp"}

_EW_KERNELS: dict = {}


def _ew_kernel(expr, kinds, ndim):
    """The kernel computing ``expr`` (of the values ``v0``, ``v1``...) for every element of a flat output."""
    key = (expr, kinds, ndim)
    k = _EW_KERNELS.get(key)
    if k is not None:
        return k
    args = ["out", "n"]
    if "b" in kinds:
        args.append("shape")
    reads = []
    for j, kd in enumerate(kinds):
        args.append(f"a{j}")
        if kd == "b":
            args.append(f"s{j}")
    body = ["    start = cuda.grid(1)", "    step = cuda.gridsize(1)", "    for i in range(start, n, step):"]
    if "b" in kinds:
        body += _unravel(ndim)
    for j, kd in enumerate(kinds):
        if kd == "f":
            reads.append(f"a{j}[i]")
        elif kd == "s":
            reads.append(f"a{j}")
        else:
            off = " + ".join(f"c{d} * s{j}[{d}]" for d in range(ndim)) or "0"
            reads.append(f"a{j}[{off}]")
    for j, r in enumerate(reads):
        body.append(f"        v{j} = {r}")
    body.append(f"        out[i] = {expr}")
    src = "def ew_k(" + ", ".join(args) + "):\n" + "\n".join(body) + "\n"
    with _LOCK:
        k = _EW_KERNELS[key] = _compile(src, "ew_k", _CASTS)
    return k


_CASTS = {"float64": numba.float64, "float32": numba.float32, "int64": numba.int64, "int32": numba.int32,
          "uint64": numba.uint64, "uint8": numba.uint8, "int8": numba.int8, "int16": numba.int16,
          "complex128": numba.complex128, "complex64": numba.complex64}


def _is_arr(o):
    return isinstance(o, (_DevArray, Lazy))


def _broadcast_shapes(shapes):
    """``np.broadcast_shapes`` (10 us a call: it makes arrays), without it where the shapes agree."""
    first = None
    for sh in shapes:
        if sh:
            if first is None:
                first = sh
            elif sh != first:
                return np.broadcast_shapes(*shapes)
    return first if first is not None else ()


def _result_dtype(name, ops):
    def dt_of(o):
        return o.dtype if _is_arr(o) else o
    arrays = [o.dtype for o in ops if _is_arr(o)]
    scalars = [o for o in ops if not _is_arr(o)]
    if name in _BOOL_OUT:
        return np.dtype(np.bool_)
    if name == "where":
        return np.result_type(*[dt_of(o) for o in ops[1:]])
    if name == "mask":
        return np.result_type(dt_of(ops[1]))
    if name == "add_scaled":
        return np.result_type(dt_of(ops[0]))
    if name in ("relu_grad", "sigmoid_grad"):
        return np.result_type(*[dt_of(o) for o in ops])
    if name in ("in_range", "clip"):
        return np.result_type(dt_of(ops[0]))
    if name == "tie_weight":
        return np.result_type(dt_of(ops[2]))
    dt = np.result_type(*arrays, *scalars)
    if name in _FLOAT_OUT and dt.kind in "biu":
        dt = np.dtype(np.float64)
    return dt


#: elementwise operations are fused: each returns a :class:`Lazy` expression, computed by one generated kernel
#: when something else needs its values (a reduction, a matmul, the function's result)
_FUSE = [True]
_MAX_NODES = 24   # an expression this large is computed at once (Python loops must not grow one forever)


class Lazy:
    """An elementwise expression of device arrays and host numbers, not yet computed.

    Kernels that need values (anything but elementwise operations) call :meth:`value`, which runs one
    generated kernel for the whole expression and keeps the result; shape, dtype and ``[...]`` work as on a
    device array."""

    __slots__ = ("template", "args", "shape", "dtype", "nodes", "_value", "__weakref__")

    def __init__(self, template, args, shape, dtype, nodes):
        self.template, self.args, self.shape, self.dtype, self.nodes = template, args, shape, dtype, nodes
        self._value = None
        _PENDING.add(self)

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return _size(self.shape)

    def value(self):
        if self._value is None:
            self._value = _materialize(self)
            self.args = None   # the operands' memory can go
            _PENDING.discard(self)
        return self._value

    def __getitem__(self, idx):
        return self.value()[idx]

    def __len__(self):
        return self.shape[0]

    @property
    def T(self):
        return transpose(self.value())

    def copy_to_host(self, *a, **k):
        _host_read()
        return self.value().copy_to_host(*a, **k)

    @property
    def __cuda_array_interface__(self):
        return self.value().__cuda_array_interface__

    def __repr__(self):
        return f"<funcgrad lazy device array shape={self.shape} dtype={self.dtype}>"


_PENDING = weakref.WeakSet()   # expressions not computed yet (an in-place write computes them first)


def _before_write():
    """Compute every pending expression: one may read memory that an in-place write is about to change
    (NumPy would have computed it before the write)."""
    for n in list(_PENDING):
        n.value()
    _PENDING.clear()


def _materialize(root):
    leaves, seen = [], {}

    def leaf(x):
        key = id(x)
        j = seen.get(key)
        if j is None or not isinstance(x, _DevArray):
            j = seen[key] = len(leaves)
            leaves.append(x)
        return f"v{j}"

    def expr(n):
        if type(n) is Lazy:
            if n._value is not None:
                return leaf(n._value)
            inner = "(" + n.template.format(*[expr(a) for a in n.args]) + ")"
            cast = n.dtype.name
            return f"{cast}({inner})" if cast in _CASTS else inner
        return leaf(n)

    e = expr(root)
    shape = root.shape
    out = _empty(shape, root.dtype)
    n = _size(shape)
    if n == 0:
        return out
    ndim = len(shape)
    kinds, args = [], []
    for o in leaves:
        if not isinstance(o, _DevArray):
            kinds.append("s")
            args.append(o)
        elif tuple(o.shape) == shape:
            kinds.append("f")
            args.append(_flat(o))
        else:
            kinds.append("b")
            args.extend((_flat(o), _bstrides(tuple(o.shape), ndim)))
    k = _ew_kernel(e, tuple(kinds), ndim)
    b, t = _launch(n)
    head = [_flat(out), n] + ([tuple(int(s) for s in shape)] if "b" in kinds else [])
    _go(k, b, t, *head, *args)
    return out


def materialize(tree):
    """``tree`` (nested tuples and lists) with every :class:`Lazy` computed."""
    if type(tree) is Lazy:
        return tree.value()
    if isinstance(tree, tuple) and type(tree) is not tuple and hasattr(tree, "_fields"):   # a NamedTuple
        return type(tree)(*(materialize(t) for t in tree))
    if isinstance(tree, (tuple, list)):
        return type(tree)(materialize(t) for t in tree)
    return tree


def _elementwise(name, template, *ops):
    ops = [o if type(o) is Lazy else _operand(o) for o in ops]
    if not any(_is_arr(o) for o in ops):   # all host scalars: NumPy computes it
        return getattr(np, name)(*ops) if hasattr(np, name) else _host_fallback(name, *ops)
    dt = _result_dtype(name, ops)
    shape = _broadcast_shapes([_shape(o) for o in ops])
    if dt.kind == "f":   # host numbers in the result's precision, as NumPy's weak scalars
        ops = [dt.type(o) if not _is_arr(o) and not isinstance(o, (bool, np.bool_)) else o for o in ops]
    nodes = 1 + _b.sum(o.nodes for o in ops if type(o) is Lazy)
    node = Lazy(template, ops, tuple(int(s) for s in shape), dt, nodes)
    if not _FUSE[0] or nodes >= _MAX_NODES:
        return node.value()
    return node


def _host_fallback(name, *ops):
    if name == "sigmoid":
        x = ops[0]
        return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))
    if name == "relu":
        return ops[0] if ops[0] > 0 else 0.0 * _b.abs(ops[0])
    if name == "relu_grad":
        return ops[0] if ops[1] > 0 else 0.0 * _b.abs(ops[0])
    if name == "sigmoid_grad":
        return ops[0] * ops[1] * (1.0 - ops[1])
    if name == "mask":
        return np.result_type(ops[1]).type(ops[0])
    if name == "in_range":
        return 1.0 if ops[1] <= ops[0] <= ops[2] else 0.0
    if name == "tie_weight":
        return (1.0 if ops[0] == ops[2] else 0.0) * (0.5 if ops[0] == ops[1] else 1.0)
    if name == "softplus":
        return float(np.logaddexp(0.0, ops[0]))
    if name in ("copy", "stop_gradient"):
        return ops[0]
    raise DeviceMismatchError(f"{name} of host values in GPU code")  # pragma: no cover


def _make_ew(name, template):
    def f(*ops):
        return _elementwise(name, template, *ops)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"NumPy's {name}, elementwise on device arrays (broadcasting)."
    return f


for _n, _t in {**_UNARY, **_BINARY, **_TERNARY}.items():
    globals()[_n] = _make_ew(_n, _t)
    __all__.append(_n)
abs = absolute  # noqa: A001


def _python_op(pyop, kernel):
    """Python's operator on host values (tuples, strings, numbers keep their meaning), the elementwise
    kernel where an operand is a device array."""
    def f(a, b):
        if _is_arr(a) or _is_arr(b) or hasattr(a, "__cuda_array_interface__") \
                or hasattr(b, "__cuda_array_interface__"):
            return kernel(a, b)
        return pyop(a, b)
    return f


op_eq = _python_op(operator.eq, equal)            # noqa: F821  (made by the loop above)
op_ne = _python_op(operator.ne, not_equal)        # noqa: F821
op_lt = _python_op(operator.lt, less)             # noqa: F821
op_le = _python_op(operator.le, less_equal)       # noqa: F821
op_gt = _python_op(operator.gt, greater)          # noqa: F821
op_ge = _python_op(operator.ge, greater_equal)    # noqa: F821
op_mod = _python_op(operator.mod, remainder)      # noqa: F821
op_floordiv = _python_op(operator.floordiv, floor_divide)   # noqa: F821


def _bool_or_bits(logical, bitwise):
    def f(a, b):
        a, b = _operand(a), _operand(b)
        dts = [o.dtype for o in (a, b) if isinstance(o, _DevArray)]
        return (logical if all(d == np.bool_ for d in dts) else bitwise)(a, b)
    return f


op_and = _python_op(operator.and_, _bool_or_bits(logical_and, bitwise_and))   # noqa: F821
op_or = _python_op(operator.or_, _bool_or_bits(logical_or, bitwise_or))       # noqa: F821


def op_invert(a):
    """``~a``: logical not of a bool array, bitwise not of integers; Python's ``~`` on host values."""
    if not (_is_arr(a) or hasattr(a, "__cuda_array_interface__")):
        return operator.invert(a)
    a = _operand(a)
    return logical_not(a) if a.dtype == np.bool_ else invert(a)   # noqa: F821


# ----------------------------------------------------------------------------- copies and views
def _gather(x, shape, st):
    """A new C-contiguous array of ``shape``: element c reads flat ``x`` at sum(c * st) (the elementwise
    copy kernel with ``x`` as a strided operand)."""
    out = _empty(shape, x.dtype)
    n = _size(shape)
    if n:
        b, t = _launch(n)
        _go(_ew_kernel("v0", ("b",), len(shape)), b, t, _flat(out), n, tuple(int(v) for v in shape), _flat(x),
                                                    tuple(int(v) for v in st))
    return out


_STRIDED: dict = {}


def _contiguous(x):
    """A C-contiguous copy of a strided device array (a slice's view)."""
    nd = x.ndim
    k = _STRIDED.get(nd)
    if k is None:
        lines = ["def strided_k(out, n, shape, x):", "    start = cuda.grid(1)", "    step = cuda.gridsize(1)",
                 "    for i in range(start, n, step):"] + _unravel(nd)
        lines.append(f"        out[i] = x[{', '.join(f'c{d}' for d in range(nd))}]")
        with _LOCK:
            k = _STRIDED[nd] = _compile("\n".join(lines) + "\n", "strided_k")
    out = _empty(x.shape, x.dtype)
    n = _size(x.shape)
    if n:
        b, t = _launch(n)
        _go(k, b, t, _flat(out), n, tuple(x.shape), x)
    return out


def broadcast_to(x, shape):
    x = _operand(x)
    shape = tuple(int(s) for s in shape)
    if not isinstance(x, _DevArray):
        return full(shape, x)
    if tuple(x.shape) == shape:
        return x
    return _gather(x, shape, _bstrides(tuple(x.shape), len(shape)))


def full(shape, value, dtype=None):
    dt = np.dtype(dtype) if dtype is not None else np.result_type(value)
    out = _empty(shape, dt)
    if out.size:
        _fill(out, value)
    return out


def _fill(out, value):
    k = _EW_KERNELS.get(("fill",))
    if k is None:
        k = _EW_KERNELS[("fill",)] = _compile(
            "def fill_k(out, n, v):\n    start = cuda.grid(1)\n    step = cuda.gridsize(1)\n"
            "    for i in range(start, n, step):\n        out[i] = v\n", "fill_k")
    b, t = _launch(out.size)
    _go(k, b, t, _flat(out), out.size, out.dtype.type(value))


def zeros_like(x):
    x = _operand(x)
    if not isinstance(x, _DevArray):
        return 0.0 * x
    return full(x.shape, 0, x.dtype)


def ones_like(x):
    x = _operand(x)
    if not isinstance(x, _DevArray):
        return 1.0 + 0.0 * x
    return full(x.shape, 1, x.dtype)


def reshape(x, shape):
    x = _operand(x)
    if not isinstance(x, _DevArray):
        return np.reshape(x, shape)
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    shape = list(int(s) for s in shape)
    if -1 in shape:
        i = shape.index(-1)
        rest = _size(shape[:i] + shape[i + 1:])
        shape[i] = x.size // rest if rest else 0
    if _size(shape) != x.size:
        raise ValueError(f"cannot reshape an array of size {x.size} into shape {tuple(shape)}")
    try:
        return x.reshape(tuple(shape)) if x.ndim else _flat(x).reshape(tuple(shape))
    except NotImplementedError:   # (see _flat)
        return _contiguous(x).reshape(tuple(shape))


def ravel(x):
    return reshape(x, (-1,))


def transpose(x, axes=None):
    x = _operand(x)
    if not isinstance(x, _DevArray):
        return x
    nd = x.ndim
    axes = tuple(range(nd))[::-1] if axes is None else tuple(int(a) % nd for a in axes)
    st = _elem_strides(x.shape)
    return _gather(x, tuple(x.shape[a] for a in axes), tuple(st[a] for a in axes))


def untranspose(g, axes=None):
    g = _operand(g)
    if axes is None or not isinstance(g, _DevArray):
        return transpose(g)
    inv = [0] * len(axes)
    for i, a in enumerate(axes):
        inv[int(a) % len(axes)] = i
    return transpose(g, inv)


def expand_dims(x, axis):
    x = _operand(x)
    shape = list(_shape(x))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    nd = len(shape) + len(axes)
    for a in sorted(int(a) % nd for a in axes):
        shape.insert(a, 1)
    return reshape(x, shape) if isinstance(x, _DevArray) else np.reshape(x, shape)


def squeeze(x, axis=None):
    x = _operand(x)
    sh = _shape(x)
    if axis is None:
        new = [s for s in sh if s != 1]
    else:
        axes = {int(a) % len(sh) for a in ((axis,) if isinstance(axis, (int, np.integer)) else axis)}
        new = [s for i, s in enumerate(sh) if i not in axes]
    return reshape(x, new) if isinstance(x, _DevArray) else np.reshape(x, new)


_ROWS: dict = {}
_ROWS_SRC = {
    "gather": """
def rows_k(out, x, base, B, n):
    start = cuda.grid(1)
    step = cuda.gridsize(1)
    for t in range(start, n * B, step):
        out[t] = x[base[t // B] * B + t % B]
""",
    "put": """
def rows_k(out, g, base, B, n):
    start = cuda.grid(1)
    step = cuda.gridsize(1)
    for t in range(start, n * B, step):
        out[base[t // B] * B + t % B] = g[t]
""",
    "scatter": """
def rows_k(out, g, base, B, n):
    start = cuda.grid(1)
    step = cuda.gridsize(1)
    for t in range(start, n * B, step):
        cuda.atomic.add(out, base[t // B] * B + t % B, g[t])
""",
}


def _advanced(idx):
    """An index of integer/boolean arrays (lists) over the leading axes, or None for a basic index."""
    items = idx if isinstance(idx, tuple) else (idx,)
    if all(it is None or it is Ellipsis or isinstance(it, (slice, int, np.integer)) for it in items):
        return None
    return items


def _mixed(items):
    """Advanced indices that are not all over the leading axes: slices, None or Ellipsis among them, or a
    boolean mask beside other indices (NumPy's placement rules then decide the result's axes)."""
    if any(isinstance(it, (slice, type(None))) or it is Ellipsis for it in items):
        return True
    return len(items) > 1 and any(np.dtype(getattr(it, "dtype", None) or np.asarray(it).dtype) == np.bool_
                                  for it in items if not isinstance(it, (int, np.integer)))


def _leading_blocks(shape, items, what):
    """For an index of integer arrays over the leading axes of ``shape``: (the flat offset of each selected
    block, in units of the block size, as a device int64 array; the index's shape; the block shape). The
    index arrays are read on the host (they are index data, usually constants of the function)."""
    arrs = []
    for it in items:
        if is_device_array(it):
            it = _to_host(as_device(it))
        a = np.asarray(it)
        if a.dtype == np.bool_:
            if len(items) != 1:
                raise DeviceMismatchError(f"{what}: a boolean mask mixed with other indices is not available on "
                                          "the GPU backend yet")
            arrs.extend(np.nonzero(a))
            lead = a.ndim
            break
        if a.dtype.kind not in "iu":
            raise DeviceMismatchError(f"{what}: a GPU array indexed by {a.dtype} values; integer arrays, boolean "
                                      "masks over the leading axes, ints and slices are what the GPU backend takes")
        arrs.append(a)
    else:
        lead = len(arrs)
    if lead > len(shape):
        raise IndexError(f"too many indices for an array of {len(shape)} dimensions")
    arrs = np.broadcast_arrays(*arrs)
    flat = np.zeros(arrs[0].shape, np.int64)
    for d, a in enumerate(arrs):
        n = shape[d]
        if a.size and (a.min() < -n or a.max() >= n):
            raise IndexError(f"index {int(a.max()) if a.max() >= n else int(a.min())} is out of bounds for axis "
                             f"{d} with size {n}")
        flat = flat * n + np.where(a < 0, a + n, a)
    return _to_device(np.ascontiguousarray(flat.ravel())), arrs[0].shape, tuple(shape[lead:])


def _rows(kind, out, src, base, B, n):
    k = _ROWS.get(kind)
    if k is None:
        with _LOCK:
            k = _ROWS[kind] = _compile(_ROWS_SRC[kind], "rows_k")
    if n * B:
        b, t = _launch(n * B)
        _go(k, b, t, _flat(out), _flat(src), base, B, n)
    return out


def untake(g, x, idx):
    """Zeros like ``x`` with ``g`` added at ``idx`` (the VJP of ``x[idx]``): repeated indices accumulate
    (atomic adds)."""
    g, x = _operand(g), _operand(x)
    items = _advanced(idx)
    if items is None or _mixed(items):   # any index: NumPy's positions, one per element of g
        pos = _positions(x, idx)
        flat = np.ascontiguousarray(pos.ravel())
        out = full(tuple(x.shape), 0, x.dtype)
        if not flat.size:
            return out
        gb = broadcast_to(g, pos.shape) if isinstance(g, _DevArray) else full(pos.shape, g, x.dtype)
        return _rows("scatter", out, astype(gb, x.dtype), _to_device(flat), 1, flat.size)
    base, ishape, block = _leading_blocks(tuple(x.shape), items, "indexing")
    out = full(tuple(x.shape), 0, x.dtype)
    gb = broadcast_to(g, ishape + block) if tuple(_shape(g)) != ishape + block else g
    if not isinstance(gb, _DevArray):
        gb = full(ishape + block, gb, x.dtype)
    return _rows("scatter", out, astype(gb, x.dtype), base, _size(block), _size(ishape))


def index_add(out, idx, g):
    """``out[idx] += g`` in place with ``np.add.at`` semantics (a repeated index accumulates); returns ``out``.
    The positions are worked out on the host (an integer per element of ``out``)."""
    out, g = _operand(out), _operand(g)
    _before_write()
    _writing(out)
    pos = _positions(out, idx)
    flat = np.ascontiguousarray(pos.ravel())
    if not flat.size:
        return out
    gb = broadcast_to(g, pos.shape) if isinstance(g, _DevArray) else full(pos.shape, g, out.dtype)
    return _rows("scatter", out, astype(gb, out.dtype), _to_device(flat), 1, flat.size)


def _writing(out):
    """Refuse, while a graph is recorded, an in-place write into an argument of the recorded function (replaying
    it would write into the graph's copy of the argument, not into the caller's array)."""
    rec = _LOCAL.recording
    if rec is not None and address(out) in rec.input_ptrs:
        _host_read("an in-place write into an argument")


def _positions(out, idx):
    items = idx if isinstance(idx, tuple) else (idx,)
    host = tuple(_to_host(as_device(it)) if is_device_array(it) else it for it in items)
    pos = np.arange(out.size, dtype=np.int64).reshape(tuple(out.shape))[host if isinstance(idx, tuple) else host[0]]
    return np.asarray(pos)


def index_put(out, idx, v):
    """``out[idx] = v`` in place (an in-place write inside a differentiated function); returns ``out``. An index
    that names an element twice is refused (which write wins is NumPy's order, not a GPU's)."""
    out, v = _operand(out), _operand(v)
    _before_write()
    _writing(out)
    pos = _positions(out, idx)
    flat = np.ascontiguousarray(pos.ravel())
    if not flat.size:
        return out
    if np.unique(flat).size != flat.size:
        raise DeviceMismatchError("an assignment through an index that repeats an element is not available on the "
                                  "GPU backend (NumPy keeps the last write)")
    vb = broadcast_to(v, pos.shape) if isinstance(v, _DevArray) else full(pos.shape, v, out.dtype)
    return _rows("put", out, astype(vb, out.dtype), _to_device(flat), 1, flat.size)


def written(dx, idx):
    """``dx[idx]`` where each element written by ``x[idx] = v`` counts once: for a repeated index only its last
    occurrence (the write that stays) gets the cotangent, earlier ones get zero."""
    dx = _operand(dx)
    pos = _positions(dx, idx)
    flat = np.ascontiguousarray(pos.ravel())
    if not flat.size:
        return _empty(pos.shape, dx.dtype)
    _, first_from_end = np.unique(flat[::-1], return_index=True)
    keep = np.zeros(flat.size, dtype=dx.dtype)
    keep[flat.size - 1 - first_from_end] = 1
    piece = _rows("gather", _empty(pos.shape, dx.dtype), dx, _to_device(flat), 1, flat.size)
    return multiply(piece, _to_device(keep.reshape(pos.shape)))


def written_cast(g, x):
    """The cotangent ``g`` of a value written into array ``x``, or zero where ``x`` holds integers or booleans (the
    write casts the value to them: a piecewise constant)."""
    x = _operand(x)
    kind = x.dtype.kind if isinstance(x, _DevArray) else np.asarray(x).dtype.kind
    return g if kind in "fc" else zeros_like(g)


def match_complex(g, x):
    """``g`` as the cotangent of ``x`` (real arrays only on the GPU: ``g`` itself)."""
    g, x = _operand(g), _operand(x)
    for v in (g, x):
        if isinstance(v, _DevArray) and v.dtype.kind == "c":
            raise DeviceMismatchError("complex arrays are not available on the GPU backend yet")
    return g


def getitem(x, idx):
    """``x[idx]`` of a device array: basic indices (ints, slices, None, Ellipsis) as a contiguous copy (a full
    integer index gives a host scalar); integer arrays or a boolean mask over the leading axes gather. A Python
    container indexes as Python."""
    if isinstance(x, (tuple, list, dict, str)):
        return x[idx]
    x = _operand(x)
    items = idx if isinstance(idx, tuple) else (idx,)
    adv = _advanced(idx)
    if adv is not None:
        if _mixed(adv):   # integer arrays with slices: NumPy's positions, one per element of the result
            pos = _positions(x, idx)
            flat = np.ascontiguousarray(pos.ravel())
            return _rows("gather", _empty(pos.shape, x.dtype), x, _to_device(flat), 1, flat.size)
        base, ishape, block = _leading_blocks(tuple(x.shape), adv, "indexing")
        out = _empty(ishape + block, x.dtype)
        return _rows("gather", out, x, base, _size(block), _size(ishape))
    nones = [i for i, it in enumerate(items) if it is None]
    core = tuple(it for it in items if it is not None)
    if any(it is Ellipsis for it in core):   # numba's device arrays take no Ellipsis: spell it as slices
        i = next(j for j, it in enumerate(core) if it is Ellipsis)
        fill = x.ndim - (len(core) - 1)
        core = core[:i] + (slice(None),) * fill + core[i + 1:]
    r = x[core] if core else x
    if not isinstance(r, _DevArray):
        return r
    if nones:   # None inserts a length-1 axis
        shape = list(r.shape)
        pos = 0
        out_shape = []
        for it in items:
            if it is None:
                out_shape.append(1)
            elif it is Ellipsis:
                k = r.ndim - _b.sum(1 for j in core if j is not Ellipsis and not isinstance(j, (int, np.integer)))
                out_shape.extend(shape[pos:pos + k])
                pos += k
            elif isinstance(it, slice):
                out_shape.append(shape[pos])
                pos += 1
        out_shape.extend(shape[pos:])
        r = _contiguous(r) if not _is_c(r) else r
        return reshape(r, out_shape)
    return r if _is_c(r) else _contiguous(r)


# ----------------------------------------------------------------------------- reductions
_RED_INIT = {"sum": "0", "mean": "0", "prod": "1", "max": "-math.inf", "min": "math.inf"}
_RED_STEP = {"sum": "acc += v", "mean": "acc += v", "prod": "acc *= v",
             "max": "acc = v if (v > acc or v != v) else acc", "min": "acc = v if (v < acc or v != v) else acc"}
_RED: dict = {}


def _norm_axes(axis, nd):
    if axis is None:
        return tuple(range(nd))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    out = []
    for a in axes:
        a = int(a)
        if not -nd <= a < nd:
            raise np.exceptions.AxisError(a, nd)
        out.append(a % nd)
    return tuple(sorted(set(out)))


def _axis_reduce_kernel(op, nk, nr):
    key = (op, nk, nr)
    k = _RED.get(key)
    if k is None:
        lines = ["def red_k(out, n, kshape, kst, x, rshape, rst, nr, scale):",
                 "    start = cuda.grid(1)", "    step = cuda.gridsize(1)",
                 "    for i in range(start, n, step):", "        r = i", "        base = 0"]
        for d in range(nk - 1, -1, -1):
            lines += [f"        base += (r % kshape[{d}]) * kst[{d}]", f"        r = r // kshape[{d}]"]
        lines += [f"        acc = {_RED_INIT[op]}", "        for j in range(nr):", "            q = j",
                  "            off = base"]
        for d in range(nr - 1, -1, -1):
            lines += [f"            off += (q % rshape[{d}]) * rst[{d}]", f"            q = q // rshape[{d}]"]
        lines += ["            v = x[off]", "            " + _RED_STEP[op]]
        lines.append("        out[i] = acc * scale" if op == "mean" else "        out[i] = acc")
        with _LOCK:
            k = _RED[key] = _compile("\n".join(lines) + "\n", "red_k")
    return k


def _axis_reduce_block_kernel(op, nk, nr):
    """Reduction over axes with one block per result element: its threads split the reduced elements and
    combine them in shared memory (a fixed tree). One thread per result element (``red_k``) left a bias
    gradient of a convolution (6 results, 36,864 terms each) 6 threads long: 28 ms of a 35 ms LeNet step."""
    key = ("block", op, nk, nr)
    k = _RED.get(key)
    if k is None:
        lines = ["def redb_k(out, kshape, kst, x, rshape, rst, nr, scale):",
                 f"    sm = cuda.shared.array({_TPB}, dtype=float64)", "    i = cuda.blockIdx.x",
                 "    tid = cuda.threadIdx.x", "    r = i", "    base = 0"]
        for d in range(nk - 1, -1, -1):
            lines += [f"    base += (r % kshape[{d}]) * kst[{d}]", f"    r = r // kshape[{d}]"]
        lines += [f"    acc = {_RED_INIT[op]}", "    j = tid", "    while j < nr:", "        q = j", "        off = base"]
        for d in range(nr - 1, -1, -1):
            lines += [f"        off += (q % rshape[{d}]) * rst[{d}]", f"        q = q // rshape[{d}]"]
        lines += ["        v = x[off]", "        " + _RED_STEP[op], f"        j += {_TPB}",
                  "    sm[tid] = acc", "    cuda.syncthreads()", f"    s = {_TPB // 2}", "    while s > 0:",
                  "        if tid < s:", "            acc = sm[tid]", "            v = sm[tid + s]",
                  "            " + _RED_STEP[op], "            sm[tid] = acc", "        cuda.syncthreads()",
                  "        s //= 2", "    if tid == 0:",
                  "        out[i] = sm[0] * scale" if op == "mean" else "        out[i] = sm[0]"]
        with _LOCK:
            k = _RED[key] = _compile("\n".join(lines) + "\n", "redb_k")
    return k


_FULL: dict = {}


def _full_reduce_kernel(op):
    k = _FULL.get(op)
    if k is None:
        src = f"""
def full_k(x, n, partial):
    sm = cuda.shared.array({_TPB}, dtype=partial_dtype)
    t = cuda.threadIdx.x
    acc = {_RED_INIT[op]}
    i = cuda.blockIdx.x * cuda.blockDim.x + t
    step = cuda.gridDim.x * cuda.blockDim.x
    while i < n:
        v = x[i]
        {_RED_STEP[op]}
        i += step
    sm[t] = acc
    cuda.syncthreads()
    s = {_TPB // 2}
    while s > 0:
        if t < s:
            acc = sm[t]
            v = sm[t + s]
            {_RED_STEP[op]}
            sm[t] = acc
        cuda.syncthreads()
        s //= 2
    if t == 0:
        partial[cuda.blockIdx.x] = sm[0]
"""
        k = _FULL[op] = {"src": src}
    return k


def _full_reduce(op, x, dt):
    """The reduction of every element of ``x`` as a host scalar of dtype ``dt`` (two kernel passes)."""
    rec = _full_reduce_kernel(op)
    acc_dt = np.dtype(np.float64) if dt.kind in "fc" or op == "mean" else np.dtype(np.int64)
    if dt == np.float32 and op in ("max", "min"):
        acc_dt = dt
    k = rec.get(acc_dt)
    if k is None:
        with _LOCK:
            k = rec[acc_dt] = _compile(rec["src"], "full_k", {"partial_dtype": numba.from_dtype(acc_dt)})
    src = _flat(x)
    n = x.size
    blocks = _b.max(1, _b.min((n + _TPB - 1) // _TPB, 1024 if not SIM else 2))
    part = _empty((blocks,), acc_dt)
    LAUNCHES[0] += 1 + (blocks > 1)
    _go(k, blocks, _TPB, src, n, part)
    if blocks > 1:
        fin = _empty((1,), acc_dt)
        _go(k, 1, _TPB, part, blocks, fin)
        part = fin
    if _LOCAL.recording is not None:   # a graph is recorded: the value stays on the device (0-d), read after replay
        r = part.reshape(())
        if op == "mean":
            r = true_divide(r, n) if n else full((), np.nan, acc_dt)
        return astype(r, dt)
    v = part.copy_to_host()[0]
    if op == "mean":
        v = v / n if n else np.nan
    return dt.type(v)


def _reduce(op, x, axis=None, keepdims=False, dtype=None):
    x = _operand(x)
    if not isinstance(x, _DevArray):
        return getattr(np, op)(x, axis=axis, keepdims=keepdims)
    nd = x.ndim
    axes = _norm_axes(axis, nd)
    if dtype is not None:
        dt = np.dtype(dtype)
    elif op == "mean":
        dt = x.dtype if x.dtype.kind in "fc" else np.dtype(np.float64)
    elif op in ("sum", "prod") and x.dtype.kind in "biu":
        dt = np.dtype(np.int64) if x.dtype.kind != "u" else np.dtype(np.uint64)
    else:
        dt = x.dtype
    if op in ("max", "min") and any(x.shape[a] == 0 for a in axes):
        raise ValueError(f"zero-size array to reduction operation {op} which has no identity")
    kshape = tuple(s for i, s in enumerate(x.shape) if i not in axes)
    if len(axes) == nd and not keepdims:
        return _full_reduce(op, x, dt) if x.size else dt.type(0 if op != "prod" else 1) if op != "mean" else dt.type(np.nan)
    out_shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape)) if keepdims else kshape
    out = _empty(out_shape, dt)
    n = _size(kshape)
    if n == 0:
        return out
    st = _elem_strides(x.shape)
    rshape = tuple(x.shape[a] for a in axes)
    nr = _size(rshape)
    if nr >= _TPB and dt.kind == "f" and x.dtype.kind == "f":   # long reductions: a block per result element
        LAUNCHES[0] += 1
        _go(_axis_reduce_block_kernel(op, len(kshape), len(rshape)), n, _TPB, _flat(out),
            tuple(int(s) for s in kshape) or (1,), tuple(int(st[i]) for i in range(nd) if i not in axes) or (0,),
            _flat(x), tuple(int(s) for s in rshape) or (1,), tuple(int(st[a]) for a in axes) or (0,), nr,
            1.0 / nr if nr else math.nan)
        return out
    k = _axis_reduce_kernel(op, len(kshape), len(rshape))
    b, t = _launch(n)
    _go(k, b, t, _flat(out), n, tuple(int(s) for s in kshape) or (1,),
            tuple(int(st[i]) for i in range(nd) if i not in axes) or (0,), _flat(x),
            tuple(int(s) for s in rshape) or (1,), tuple(int(st[a]) for a in axes) or (0,), nr,
            1.0 / nr if nr else math.nan)
    return out


def sum(x, axis=None, keepdims=False, dtype=None):  # noqa: A001
    return _reduce("sum", x, axis, keepdims, dtype)


def mean(x, axis=None, keepdims=False, dtype=None):
    return _reduce("mean", x, axis, keepdims, dtype)


def prod(x, axis=None, keepdims=False, dtype=None):
    return _reduce("prod", x, axis, keepdims, dtype)


def max(x, axis=None, keepdims=False):  # noqa: A001
    return _reduce("max", x, axis, keepdims)


def min(x, axis=None, keepdims=False):  # noqa: A001
    return _reduce("min", x, axis, keepdims)


amax, amin = max, min


def reduced_count(x, axis=None):
    sh = _shape(_operand(x))
    n = 1
    for a in _norm_axes(axis, len(sh)):
        n *= sh[a]
    return n


def unbroadcast(g, x):
    """Sum ``g`` down to the shape of ``x`` (undo NumPy broadcasting)."""
    g, x = _operand(g), _operand(x)
    gs, xs = _shape(g), _shape(x)
    if gs == xs:
        return g
    if not isinstance(g, _DevArray):
        return full(xs, g)
    if not xs:
        r = sum(g)
        return r if not isinstance(x, _DevArray) else full((), r)
    lead = len(gs) - len(xs)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(xs) if n == 1 and gs[lead + i] != 1)
    return reshape(sum(g, axis=axes), xs)


def unreduce(g, x, axis=None, keepdims=False):
    """Broadcast the reduced ``g`` back to the shape of ``x`` (undo a reduction)."""
    g, x = _operand(g), _operand(x)
    xs = _shape(x)
    if not isinstance(g, _DevArray):
        return full(xs, g, np.result_type(g, *([x.dtype] if isinstance(x, _DevArray) else []))) if xs else g
    if not keepdims and axis is not None:
        axes = _norm_axes(axis, len(xs))
        g = reshape(g, tuple(1 if i in axes else n for i, n in enumerate(xs)))
    return broadcast_to(g, xs)


# ----------------------------------------------------------------------------- matmul
_CUPY = []


def _cupy():
    """CuPy (for cuBLAS), or None: absent, or the simulator (its arrays have no __cuda_array_interface__)."""
    if not _CUPY:
        cp = None
        if not SIM:
            try:
                import cupy as cp   # optional: cuBLAS through CuPy; without it the tiled kernel runs
            except Exception:       # noqa: BLE001  (not installed, or no CUDA runtime it can load)
                cp = None
        _CUPY.append(cp)
    return _CUPY[0]


_TILE = 16 if not SIM else 4
_GEMM: dict = {}


def _tiled_src(name, a_at, b_at, batched=False):
    """A tiled shared-memory GEMM kernel ``name(a, b, c, M, N, K)``: ``a_at``/``b_at`` read the operands (a
    batched kernel takes batch item ``z`` from the grid's third axis)."""
    z = "\n    z = cuda.blockIdx.z" if batched else ""
    c_at = "c[z, row, col]" if batched else "c[row, col]"
    return f"""
def {name}(a, b, c, M, N, K):
    sa = cuda.shared.array(({_TILE}, {_TILE}), dtype=acc_t)
    sb = cuda.shared.array(({_TILE}, {_TILE}), dtype=acc_t)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y{z}
    row = cuda.blockIdx.y * {_TILE} + ty
    col = cuda.blockIdx.x * {_TILE} + tx
    acc = 0.0
    for k0 in range(0, K, {_TILE}):
        if row < M and k0 + tx < K:
            sa[ty, tx] = {a_at}
        else:
            sa[ty, tx] = 0.0
        if col < N and k0 + ty < K:
            sb[ty, tx] = {b_at}
        else:
            sb[ty, tx] = 0.0
        cuda.syncthreads()
        for kk in range({_TILE}):
            acc += sa[ty, kk] * sb[kk, tx]
        cuda.syncthreads()
    if row < M and col < N:
        {c_at} = acc
"""


def _gemm_kernel(ta, tb):
    key = (ta, tb)
    k = _GEMM.get(key)
    if k is None:
        a_at = "a[k0 + tx, row]" if ta else "a[row, k0 + tx]"
        b_at = "b[col, k0 + ty]" if tb else "b[k0 + ty, col]"
        k = {"src": _tiled_src("gemm_k", a_at, b_at)}
        _GEMM[key] = k
    return k


def _gemm(a, b, ta=False, tb=False, tiled=False):
    """``op(a) @ op(b)`` of 2-D device arrays (``op`` transposes where ``ta``/``tb``): cuBLAS when CuPy is
    there, else (or with ``tiled``) the shared-memory kernel."""
    M = a.shape[1] if ta else a.shape[0]
    K = a.shape[0] if ta else a.shape[1]
    N = b.shape[0] if tb else b.shape[1]
    dt = np.result_type(a.dtype, b.dtype)
    if a.dtype != dt:
        a = _cast_to(a, dt)
    if b.dtype != dt:
        b = _cast_to(b, dt)
    cp = _cupy()
    LAUNCHES[0] += 1
    if cp is not None and dt.kind == "f" and not tiled:
        if _TIMING[0]:   # (the launch-timing diagnostic: cuBLAS's share)
            return _timed("cublas_gemm", lambda: _gemm(a, b, ta, tb, tiled))
        C = _blas.gemm(_THIS, a, b, ta, tb, M, N, K, dt)   # cuBLAS called directly: recordable in a CUDA graph
        if C is not None:
            return C
        A = cp.asarray(a)
        B = cp.asarray(b)
        C = cp.matmul(A.T if ta else A, B.T if tb else B)
        # both libraries use the legacy default stream: ordered
        return _from_cupy(C) if C.flags.c_contiguous else cuda.as_cuda_array(C, sync=False)
    out = _empty((M, N), dt)
    if M == 0 or N == 0:
        return out
    if K == 0:
        _fill(out, 0)
        return out
    rec = _gemm_kernel(ta, tb)
    k = rec.get(dt)
    if k is None:
        with _LOCK:
            k = rec[dt] = _compile(rec["src"], "gemm_k", {"acc_t": numba.from_dtype(dt)})
    grid = ((N + _TILE - 1) // _TILE, (M + _TILE - 1) // _TILE)
    _go(k, grid, (_TILE, _TILE), a, b, out, M, N, K)
    return out


def _cast_to(x, dt):
    return _materialize(Lazy("{0}", [x], tuple(x.shape), np.dtype(dt), 1))


def astype(x, dtype):
    x = _operand(x)
    if not isinstance(x, _DevArray):
        return np.dtype(dtype).type(x)
    return x if x.dtype == np.dtype(dtype) else _cast_to(x, np.dtype(dtype))


def _need2d(name, *xs, nd_ok=False):
    for x in xs:
        if not isinstance(x, _DevArray):
            raise DeviceMismatchError(f"{name} of a host number and a GPU array: multiply instead")
        if x.ndim > 2 and not nd_ok:
            raise DeviceMismatchError(f"{name} of arrays of rank 3 or more is not available on the GPU backend yet "
                                      "(received shapes " + ", ".join(str(tuple(v.shape)) for v in xs) + ")")


_BGEMM: dict = {}
_BGEMM_SRC = _tiled_src("bgemm_k", "a[z, row, k0 + tx]", "b[z, k0 + ty, col]", batched=True)


def _bgemm(a, b, tiled=False):
    """``a[z] @ b[z]`` for every ``z`` of C-contiguous 3-D device arrays ``a`` (B, M, K) and ``b`` (B, K, N):
    CuPy's batched cuBLAS when there, else (or with ``tiled``) the tiled kernel with one grid layer per ``z``."""
    Bn, M, K = a.shape
    N = b.shape[2]
    dt = np.result_type(a.dtype, b.dtype)
    if a.dtype != dt:
        a = _cast_to(a, dt)
    if b.dtype != dt:
        b = _cast_to(b, dt)
    cp = _cupy()
    LAUNCHES[0] += 1
    if cp is not None and dt.kind == "f" and not tiled:
        return cuda.as_cuda_array(cp.matmul(cp.asarray(a), cp.asarray(b)), sync=False)
    out = _empty((Bn, M, N), dt)
    if Bn == 0 or M == 0 or N == 0:
        return out
    if K == 0:
        _fill(out, 0)
        return out
    k = _BGEMM.get(dt)
    if k is None:
        with _LOCK:
            k = _BGEMM[dt] = _compile(_BGEMM_SRC, "bgemm_k", {"acc_t": numba.from_dtype(dt)})
    grid = ((N + _TILE - 1) // _TILE, (M + _TILE - 1) // _TILE, Bn)
    _go(k, grid, (_TILE, _TILE, 1), a, b, out, M, N, K)
    return out


def _swap_last(x):
    nd = x.ndim
    return transpose(x, tuple(range(nd - 2)) + (nd - 1, nd - 2))


def _promote_mm(x, y):
    """NumPy's matmul promotion: a 1-D ``x`` is a row (1, K), a 1-D ``y`` a column (K, 1)."""
    xp = reshape(x, (1, x.shape[0])) if x.ndim == 1 else x
    yp = reshape(y, (y.shape[0], 1)) if y.ndim == 1 else y
    return xp, yp


def _mm_nd(x, y, tiled=False):
    """``x @ y`` where an operand has rank 3 or more: batch axes broadcast, 1-D operands promoted and their
    axis removed again (NumPy's matmul). A 2-D right operand is one GEMM over the left's rows."""
    xp, yp = _promote_mm(x, y)
    xs, ys = tuple(xp.shape), tuple(yp.shape)   # (device shapes take no negative index)
    if xs[-1] != ys[-2]:
        raise ValueError(f"matmul: shapes {tuple(x.shape)} and {tuple(y.shape)} are not aligned "
                         f"({xs[-1]} != {ys[-2]})")
    M, K, N = xs[-2], xs[-1], ys[-1]
    batch = tuple(np.broadcast_shapes(xs[:-2], ys[:-2]))
    nb = int(np.prod(batch, dtype=np.int64))
    if yp.ndim == 2 and not tiled:    # (..., M, K) @ (K, N): the batch folds into the rows
        r = _gemm(_operand(reshape(xp, (int(np.prod(xs[:-1], dtype=np.int64)), K))), yp)
    else:
        a = reshape(broadcast_to(xp, batch + (M, K)), (nb, M, K))
        b = reshape(broadcast_to(yp, batch + (K, N)), (nb, K, N))
        r = _bgemm(_operand(a), _operand(b), tiled=tiled)
    r = reshape(r, batch + (M, N))
    if x.ndim == 1:
        r = reshape(r, batch + (N,))
    elif y.ndim == 1:
        r = reshape(r, batch + (M,))
    return r


def _mm_nd_grads(g, x, y):
    """Cotangents of ``x`` and ``y`` in ``x @ y`` with an operand of rank 3 or more."""
    xp, yp = _promote_mm(x, y)
    gs = tuple(g.shape)
    if x.ndim == 1:
        g = reshape(g, gs[:-1] + (1, gs[-1]))
    elif y.ndim == 1:
        g = reshape(g, gs + (1,))
    g = _operand(g)
    return g, xp, yp


def matmul(x, y):
    x, y = _operand(x), _operand(y)
    _need2d("matmul", x, y, nd_ok=True)
    if x.ndim == 0 or y.ndim == 0:
        raise ValueError("matmul: Input operand does not have enough dimensions")
    if x.ndim > 2 or y.ndim > 2:
        return _mm_nd(x, y)
    a = reshape(x, (1, x.shape[0])) if x.ndim == 1 else x
    b = reshape(y, (y.shape[0], 1)) if y.ndim == 1 else y
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul: shapes {tuple(x.shape)} and {tuple(y.shape)} are not aligned "
                         f"({a.shape[1]} != {b.shape[0]})")
    r = _gemm(a, b)
    if x.ndim == 1 and y.ndim == 1:
        return sum(r)
    if x.ndim == 1:
        return reshape(r, (r.shape[1],))
    if y.ndim == 1:
        return reshape(r, (r.shape[0],))
    return r


def matmul_dx(g, x, y):
    g, x, y = _operand(g), _operand(x), _operand(y)
    _need2d("matmul", x, y, nd_ok=True)
    if x.ndim > 2 or y.ndim > 2:
        gp, xp, yp = _mm_nd_grads(g, x, y)
        return reshape(unbroadcast(_mm_nd(gp, _operand(_swap_last(yp))), xp), tuple(x.shape))
    if y.ndim == 1:
        return outer(g, y) if x.ndim == 2 else multiply(g, y)
    if x.ndim == 2:
        return _gemm(g, y, tb=True)
    return reshape(_gemm(reshape(g, (1, g.shape[0])), y, tb=True), (x.shape[0],))


def matmul_dy(g, x, y):
    g, x, y = _operand(g), _operand(x), _operand(y)
    _need2d("matmul", x, y, nd_ok=True)
    if x.ndim > 2 or y.ndim > 2:
        gp, xp, yp = _mm_nd_grads(g, x, y)
        return reshape(unbroadcast(_mm_nd(_operand(_swap_last(xp)), gp), yp), tuple(y.shape))
    if x.ndim == 1:
        return outer(x, g) if y.ndim == 2 else multiply(g, x)
    if y.ndim == 2:
        return _gemm(x, g, ta=True)
    return reshape(_gemm(x, reshape(g, (g.shape[0], 1)), ta=True), (y.shape[0],))


def outer(x, y):
    x, y = _operand(x), _operand(y)
    if not isinstance(x, _DevArray) or not isinstance(y, _DevArray):
        return multiply(x, y)
    return multiply(reshape(x, (x.size, 1)), reshape(y, (1, y.size)))


def _dot_parts(x, y):
    """np.dot of N-D operands as one GEMM: ``x`` as (rows, J), ``y`` with its second-to-last axis first as
    (J, cols); the result's shape ``x.shape[:-1] + y.shape[:-2] + y.shape[-1:]``."""
    xs, ys = tuple(x.shape), tuple(y.shape)
    J = xs[-1]
    if len(ys) == 1:   # against a vector: the last axis of x summed, as a (J, 1) column
        if ys[0] != J:
            raise ValueError(f"shapes {xs} and {ys} not aligned: {J} (dim {len(xs) - 1}) != {ys[0]} (dim 0)")
        return _operand(reshape(x, (_size(xs[:-1]), J))), _operand(reshape(y, (J, 1))), (0, 1), xs[:-1]
    if ys[-2] != J:
        raise ValueError(f"shapes {xs} and {ys} not aligned: {J} (dim {len(xs) - 1}) != {ys[-2]} (dim {len(ys) - 2})")
    perm = (len(ys) - 2,) + tuple(i for i in range(len(ys)) if i != len(ys) - 2)
    yt = _operand(reshape(transpose(y, perm), (J, _size(ys) // J if J else _size(ys[:-2] + ys[-1:]))))
    x2 = _operand(reshape(x, (_size(xs[:-1]), J)))
    return x2, yt, perm, xs[:-1] + ys[:-2] + ys[-1:]


def _dot_nd(x, y):
    return x.ndim > 2 or y.ndim > 2 and x.ndim > 1


def dot(x, y):
    """``np.dot``: 1-D and 2-D operands as matmul; an operand of rank 3 or more by NumPy's dot rule (the last
    axis of ``x`` against the second-to-last of ``y``) as one GEMM."""
    x, y = _operand(x), _operand(y)
    _need2d("dot", x, y, nd_ok=True)
    if _dot_nd(x, y):
        x2, yt, _, shape = _dot_parts(x, y)
        return reshape(_gemm(x2, yt), shape)
    if y.ndim > 2:   # a vector against a stack: v @ y[..., :, m] for every leading index
        return reshape(dot(reshape(x, (1, x.shape[0])), y), tuple(y.shape)[:-2] + tuple(y.shape)[-1:])
    return matmul(x, y)


def dot_dx(g, x, y):
    g, x, y = _operand(g), _operand(x), _operand(y)
    _need2d("dot", x, y, nd_ok=True)
    if x.ndim > 2 or y.ndim > 2:
        xp = reshape(x, (1, x.shape[0])) if x.ndim == 1 else x
        x2, yt, _, shape = _dot_parts(xp, y)
        g2 = _operand(reshape(g, (x2.shape[0], yt.shape[1])))
        return reshape(_gemm(g2, yt, tb=True), tuple(x.shape))
    return matmul_dx(g, x, y)


def dot_dy(g, x, y):
    g, x, y = _operand(g), _operand(x), _operand(y)
    _need2d("dot", x, y, nd_ok=True)
    if x.ndim > 2 or y.ndim > 2:
        xp = reshape(x, (1, x.shape[0])) if x.ndim == 1 else x
        x2, yt, perm, shape = _dot_parts(xp, y)
        g2 = _operand(reshape(g, (x2.shape[0], yt.shape[1])))
        dyt = _gemm(x2, g2, ta=True)                       # (J, cols)
        ys = tuple(y.shape) if y.ndim > 1 else (y.shape[0], 1)
        moved = tuple(ys[p] for p in perm)
        inv = [0] * len(perm)
        for i, p_ in enumerate(perm):
            inv[p_] = i
        return reshape(transpose(reshape(dyt, moved), tuple(inv)), tuple(y.shape))
    return matmul_dy(g, x, y)


# ----------------------------------------------------------------------------- axis kernels (softmax family)
_AXIS: dict = {}
_AXIS_SRC = {
    "softmax": ("x", """
        m = -math.inf
        for j in range(n):
            v = x[base + j * I]
            if v > m:
                m = v
        s = 0.0
        for j in range(n):
            s += math.exp(x[base + j * I] - m)
        for j in range(n):
            out[base + j * I] = math.exp(x[base + j * I] - m) / s"""),
    "log_softmax": ("x", """
        m = -math.inf
        for j in range(n):
            v = x[base + j * I]
            if v > m:
                m = v
        s = 0.0
        for j in range(n):
            s += math.exp(x[base + j * I] - m)
        lse = m + math.log(s)
        for j in range(n):
            out[base + j * I] = x[base + j * I] - lse"""),
    "softmax_grad": ("g, y", """
        s = 0.0
        for j in range(n):
            s += g[base + j * I] * y[base + j * I]
        for j in range(n):
            out[base + j * I] = y[base + j * I] * (g[base + j * I] - s)"""),
    "log_softmax_grad": ("g, y", """
        s = 0.0
        for j in range(n):
            s += g[base + j * I]
        for j in range(n):
            out[base + j * I] = g[base + j * I] - math.exp(y[base + j * I]) * s"""),
}


def _axis3(shape, axis):
    nd = len(shape)
    ax = int(axis) % nd if nd else 0
    O = _size(shape[:ax])
    I = _size(shape[ax + 1:])
    return ax, O, shape[ax] if nd else 1, I


def _axis_op(name, axis, *arrays):
    arrays = [_operand(a) for a in arrays]
    for a in arrays:
        if not isinstance(a, _DevArray):
            raise DeviceMismatchError(f"{name} of a host value in GPU code")
    ref = arrays[-1]
    ax, O, n, I = _axis3(tuple(ref.shape), axis)
    k = _AXIS.get(name)
    if k is None:
        params, body = _AXIS_SRC[name]
        src = (f"def axis_k(out, {params}, O, n, I):\n    start = cuda.grid(1)\n    step = cuda.gridsize(1)\n"
               f"    for t in range(start, O * I, step):\n        base = (t // I) * n * I + t % I{body}\n")
        with _LOCK:
            k = _AXIS[name] = _compile(src, "axis_k")
    out = _empty(ref.shape, ref.dtype)
    if O * I:
        b, t = _launch(O * I)
        _go(k, b, t, _flat(out), *[_flat(a) for a in arrays], O, n, I)
    return out


def softmax(x, axis=-1):
    return _axis_op("softmax", axis, x)


def log_softmax(x, axis=-1):
    return _axis_op("log_softmax", axis, x)


def softmax_grad(g, y, axis=-1):
    return _axis_op("softmax_grad", axis, g, y)


def log_softmax_grad(g, y, axis=-1):
    return _axis_op("log_softmax_grad", axis, g, y)


def logsumexp(x, axis=-1):
    x = _operand(x)
    m = max(x, axis=axis, keepdims=True)
    s = sum(exp(subtract(x, m)), axis=axis, keepdims=True)
    return squeeze(add(log(s), m), axis=axis)


def logsumexp_grad(g, x, y, axis=-1):
    g, x, y = _operand(g), _operand(x), _operand(y)
    ge = expand_dims(g, axis)
    ye = expand_dims(y, axis)
    return multiply(ge, exp(subtract(x, ye)))


# ----------------------------------------------------------------------------- softmax cross-entropy
_CE: dict = {}
_CE_BODY = {
    # per row i of (N, C) logits z: lse, then the loss / the cotangent of the logits / of the targets
    "loss_int": """
        k = y[i]
        if k < 0 or k >= C:
            bad[0] = 1
            out[i] = math.nan
        else:
            out[i] = lse - z[i * C + k]""",
    "loss_prob": """
        acc = 0.0
        for j in range(C):
            acc += y[i * C + j] * (lse - z[i * C + j])
        out[i] = acc""",
    "grad_int": """
        gi = scale * G
        for j in range(C):
            out[i * C + j] = gi * math.exp(z[i * C + j] - lse)
        k = y[i]
        if k >= 0 and k < C:
            out[i * C + k] -= gi""",
    "grad_prob": """
        gi = scale * G
        st = 0.0
        for j in range(C):
            st += y[i * C + j]
        for j in range(C):
            out[i * C + j] = gi * (math.exp(z[i * C + j] - lse) * st - y[i * C + j])""",
    "gradt_prob": """
        gi = scale * G
        for j in range(C):
            out[i * C + j] = gi * (lse - z[i * C + j])""",
}


def _ce_kernel(kind, g_vector):
    key = (kind, g_vector)
    k = _CE.get(key)
    if k is None:
        G = "g[i]" if g_vector else "g"
        body = _CE_BODY[kind].replace("G", G)
        src = ("def ce_k(out, z, y, g, scale, bad, N, C):\n    start = cuda.grid(1)\n    step = cuda.gridsize(1)\n"
               "    for i in range(start, N, step):\n        m = -math.inf\n        for j in range(C):\n"
               "            if z[i * C + j] > m:\n                m = z[i * C + j]\n        s = 0.0\n"
               "        for j in range(C):\n            s += math.exp(z[i * C + j] - m)\n"
               "        lse = m + math.log(s)" + body + "\n")
        with _LOCK:
            k = _CE[key] = _compile(src, "ce_k")
    return k


def _ce_args(logits, labels, name):
    z, y = _operand(logits), _operand(labels)
    if not isinstance(z, _DevArray) or not isinstance(y, _DevArray) or z.ndim != 2:
        raise DeviceMismatchError(f"{name} on the GPU takes (N, C) logits and labels on the device")
    is_int = y.dtype.kind in "iu"
    if (is_int and tuple(y.shape) != (z.shape[0],)) or (not is_int and tuple(y.shape) != tuple(z.shape)):
        raise ValueError(f"{name}: labels of shape {tuple(y.shape)} for logits of shape {tuple(z.shape)}")
    return z, y, is_int


def _ce_run(kind, out, z, y, g, scale):
    N, C = z.shape
    g_vec = isinstance(g, _DevArray)
    bad = _empty((1,), np.int32)
    _fill(bad, 0)
    b, t = _launch(N)
    _go(_ce_kernel(kind, g_vec), b, t, _flat(out), _flat(z), _flat(y), _flat(g) if g_vec else z.dtype.type(g),
                                  z.dtype.type(scale), bad, N, C)
    return bad


def _check_labels(bad, name):
    rec = _LOCAL.recording
    if rec is not None:   # a graph is recorded: the flag is read after each replay
        rec.checks.append((bad, IndexError, f"{name}: a label is out of range"))
        return
    if bad.copy_to_host()[0]:
        raise IndexError(f"{name}: a label is out of range")


def cross_entropy(logits, labels, reduction="mean"):
    z, y, is_int = _ce_args(logits, labels, "cross_entropy")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"cross_entropy: reduction must be 'mean', 'sum' or 'none'; received {reduction!r}")
    rows = _empty((z.shape[0],), z.dtype)
    if z.shape[0]:
        bad = _ce_run("loss_int" if is_int else "loss_prob", rows, z, y, 0.0, 1.0)
        if is_int:
            _check_labels(bad, "cross_entropy")
    if reduction == "none":
        return rows
    return sum(rows) if reduction == "sum" else mean(rows)


def _ce_scale(z, reduction):
    return 1.0 / z.shape[0] if reduction == "mean" and z.shape[0] else 1.0


def cross_entropy_grad(g, logits, labels, reduction="mean"):
    z, y, is_int = _ce_args(logits, labels, "cross_entropy")
    g = _operand(g)
    out = _empty(z.shape, z.dtype)
    if z.size:
        _ce_run("grad_int" if is_int else "grad_prob", out, z, y, g, _ce_scale(z, reduction))
    return out


def cross_entropy_grad_target(g, logits, labels, reduction="mean"):
    z, y, is_int = _ce_args(logits, labels, "cross_entropy")
    if is_int:
        return full(tuple(y.shape), 0, z.dtype)
    g = _operand(g)
    out = _empty(z.shape, z.dtype)
    if z.size:
        _ce_run("gradt_prob", out, z, y, g, _ce_scale(z, reduction))
    return out


# ----------------------------------------------------------------------------- convolution and pools (NCHW, OIHW)
# Direct kernels, one thread per element of the result, gathering (no atomics: every result element is
# written by one thread, so repeated contributions add up in a fixed order).
_NN_SRC = {
    "conv": """
def conv_k(out, x, w, b, has_b, N, C, H, W, O, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw):
    start = cuda.grid(1)
    step = cuda.gridsize(1)
    for t in range(start, N * O * OH * OW, step):
        ow = t % OW
        oh = (t // OW) % OH
        o = (t // (OW * OH)) % O
        n = t // (OW * OH * O)
        acc = b[o] if has_b else 0.0 * b[0]
        for c in range(C):
            for i in range(KH):
                h = oh * sh - ph + i * dh
                if h < 0 or h >= H:
                    continue
                for j in range(KW):
                    q = ow * sw - pw + j * dw
                    if q >= 0 and q < W:
                        acc += x[((n * C + c) * H + h) * W + q] * w[((o * C + c) * KH + i) * KW + j]
        out[t] = acc
""",
    "conv_dx": """
def conv_dx_k(out, dy, w, N, C, H, W, O, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw):
    start = cuda.grid(1)
    step = cuda.gridsize(1)
    for t in range(start, N * C * H * W, step):
        q = t % W
        h = (t // W) % H
        c = (t // (W * H)) % C
        n = t // (W * H * C)
        acc = 0.0 * w[0]
        for o in range(O):
            for i in range(KH):
                a = h + ph - i * dh
                if a < 0 or a % sh != 0 or a // sh >= OH:
                    continue
                oh = a // sh
                for j in range(KW):
                    e = q + pw - j * dw
                    if e >= 0 and e % sw == 0 and e // sw < OW:
                        acc += dy[((n * O + o) * OH + oh) * OW + e // sw] * w[((o * C + c) * KH + i) * KW + j]
        out[t] = acc
""",
    "conv_dw": """
def conv_dw_k(out, dy, x, N, C, H, W, O, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw):
    start = cuda.grid(1)
    step = cuda.gridsize(1)
    for t in range(start, O * C * KH * KW, step):
        j = t % KW
        i = (t // KW) % KH
        c = (t // (KW * KH)) % C
        o = t // (KW * KH * C)
        acc = 0.0 * x[0]
        for n in range(N):
            for oh in range(OH):
                h = oh * sh - ph + i * dh
                if h < 0 or h >= H:
                    continue
                for ow in range(OW):
                    q = ow * sw - pw + j * dw
                    if q >= 0 and q < W:
                        acc += dy[((n * O + o) * OH + oh) * OW + ow] * x[((n * C + c) * H + h) * W + q]
        out[t] = acc
""",
    # one block per weight element: its threads split the N * OH * OW products and add them up in shared
    # memory (a fixed tree: the same sum every run). One thread per element (conv_dw) left a 5x5 kernel of one
    # input channel 150 threads each summing 36,864 products: 30x PyTorch's LeNet step on an H200
    "conv_dwb": f"""
def conv_dwb_k(out, dy, x, N, C, H, W, O, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw):
    sm = cuda.shared.array({_TPB}, dtype=float64)
    t = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    j = t % KW
    i = (t // KW) % KH
    c = (t // (KW * KH)) % C
    o = t // (KW * KH * C)
    acc = 0.0
    r = tid
    total = N * OH * OW
    while r < total:
        ow = r % OW
        oh = (r // OW) % OH
        n = r // (OW * OH)
        h = oh * sh - ph + i * dh
        q = ow * sw - pw + j * dw
        if h >= 0 and h < H and q >= 0 and q < W:
            acc += dy[((n * O + o) * OH + oh) * OW + ow] * x[((n * C + c) * H + h) * W + q]
        r += {_TPB}
    sm[tid] = acc
    cuda.syncthreads()
    s = {_TPB // 2}
    while s > 0:
        if tid < s:
            sm[tid] += sm[tid + s]
        cuda.syncthreads()
        s //= 2
    if tid == 0:
        out[t] = sm[0]
""",
    # the (first) maximum of window (p, oh, ow) of plane p: its flat index h * W + w, -1 if all padding
    "argmax": """
@cuda.jit(device=True)
def window_argmax(x, p, oh, ow, H, W, kh, kw, sh, sw, ph, pw):
    best = -1
    m = x[0]
    for i in range(kh):
        h = oh * sh - ph + i
        if h < 0 or h >= H:
            continue
        for j in range(kw):
            q = ow * sw - pw + j
            if q < 0 or q >= W:
                continue
            v = x[(p * H + h) * W + q]
            if best < 0 or v > m:
                m = v
                best = h * W + q
    return best
""",
    "maxpool": """
def maxpool_k(out, x, P, H, W, OH, OW, kh, kw, sh, sw, ph, pw):
    start = cuda.grid(1)
    step = cuda.gridsize(1)
    for t in range(start, P * OH * OW, step):
        ow = t % OW
        oh = (t // OW) % OH
        p = t // (OW * OH)
        k = window_argmax(x, p, oh, ow, H, W, kh, kw, sh, sw, ph, pw)
        out[t] = x[p * H * W + k] if k >= 0 else -math.inf
""",
    "maxpool_grad": """
def maxpool_grad_k(out, dy, x, P, H, W, OH, OW, kh, kw, sh, sw, ph, pw):
    start = cuda.grid(1)
    step = cuda.gridsize(1)
    for t in range(start, P * H * W, step):
        q = t % W
        h = (t // W) % H
        p = t // (W * H)
        acc = 0.0 * dy[0]
        for oh in range(OH):
            if h < oh * sh - ph or h >= oh * sh - ph + kh:
                continue
            for ow in range(OW):
                if q < ow * sw - pw or q >= ow * sw - pw + kw:
                    continue
                if window_argmax(x, p, oh, ow, H, W, kh, kw, sh, sw, ph, pw) == h * W + q:
                    acc += dy[(p * OH + oh) * OW + ow]
        out[t] = acc
""",
    "maxpool_select": """
def maxpool_select_k(out, g, x, P, H, W, OH, OW, kh, kw, sh, sw, ph, pw):
    start = cuda.grid(1)
    step = cuda.gridsize(1)
    for t in range(start, P * OH * OW, step):
        ow = t % OW
        oh = (t // OW) % OH
        p = t // (OW * OH)
        k = window_argmax(x, p, oh, ow, H, W, kh, kw, sh, sw, ph, pw)
        out[t] = g[p * H * W + k] if k >= 0 else 0.0 * g[0]
""",
    "avgpool": """
def avgpool_k(out, x, P, H, W, OH, OW, kh, kw, sh, sw, ph, pw):
    start = cuda.grid(1)
    step = cuda.gridsize(1)
    for t in range(start, P * OH * OW, step):
        ow = t % OW
        oh = (t // OW) % OH
        p = t // (OW * OH)
        acc = 0.0 * x[0]
        for i in range(kh):
            h = oh * sh - ph + i
            if h < 0 or h >= H:
                continue
            for j in range(kw):
                q = ow * sw - pw + j
                if q >= 0 and q < W:
                    acc += x[(p * H + h) * W + q]
        out[t] = acc / (kh * kw)
""",
    "avgpool_grad": """
def avgpool_grad_k(out, dy, P, H, W, OH, OW, kh, kw, sh, sw, ph, pw):
    start = cuda.grid(1)
    step = cuda.gridsize(1)
    for t in range(start, P * H * W, step):
        q = t % W
        h = (t // W) % H
        p = t // (W * H)
        acc = 0.0 * dy[0]
        for oh in range(OH):
            if h < oh * sh - ph or h >= oh * sh - ph + kh:
                continue
            for ow in range(OW):
                if q >= ow * sw - pw and q < ow * sw - pw + kw:
                    acc += dy[(p * OH + oh) * OW + ow]
        out[t] = acc / (kh * kw)
""",
}
_NN: dict = {}


def _nn_kernel(name):
    k = _NN.get(name)
    if k is None:
        extra = {}
        if name.startswith("maxpool"):
            ns = {"cuda": cuda, "math": math}
            exec(compile(_NN_SRC["argmax"], "<funcgrad cuda kernel window_argmax>", "exec"), ns)
            extra["window_argmax"] = ns["window_argmax"]
        with _LOCK:
            k = _NN[name] = _compile(_NN_SRC[name], name + "_k", extra)
    return k


def _pair(v, what):
    if isinstance(v, (int, np.integer)):
        return int(v), int(v)
    v = tuple(int(a) for a in v)
    if len(v) != 2:
        raise ValueError(f"{what} must be an int or a pair; received {v!r}")
    return v


def _conv_geom(x_shape, w_shape, stride, padding, dilation):
    N, C, H, W = x_shape
    O, Cw, KH, KW = w_shape
    if Cw != C:
        raise ValueError(f"conv2d: the input has {C} channels but the weight expects {Cw}")
    sh, sw = _pair(stride, "stride")
    ph, pw = _pair(padding, "padding")
    dh, dw = _pair(dilation, "dilation")
    OH = (H + 2 * ph - dh * (KH - 1) - 1) // sh + 1
    OW = (W + 2 * pw - dw * (KW - 1) - 1) // sw + 1
    if OH <= 0 or OW <= 0:
        raise ValueError("conv2d: the kernel is larger than the padded input")
    return N, C, H, W, O, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw


def _run_nn(name, out, n, *args):
    if n:
        b, t = _launch(n)
        _go(_nn_kernel(name), b, t, _flat(out), *args)
    return out


def conv2d(x, w, b=None, stride=1, padding=0, dilation=1):
    x, w = _operand(x), _operand(w)
    g = _conv_geom(tuple(x.shape), tuple(w.shape), stride, padding, dilation)
    N, C, H, W, O, KH, KW, OH, OW = g[:9]
    dt = np.result_type(x.dtype, w.dtype)
    has_b = b is not None
    bb = _operand(b) if has_b else full((1,), 0, dt)
    out = _empty((N, O, OH, OW), dt)
    return _run_nn("conv", out, N * O * OH * OW, _flat(x), _flat(w), _flat(bb), has_b, *g)


def conv2d_input_grad(dy, w, x_shape, stride=1, padding=0, dilation=1):
    dy, w = _operand(dy), _operand(w)
    g = _conv_geom(tuple(int(s) for s in x_shape), tuple(w.shape), stride, padding, dilation)
    N, C, H, W = g[:4]
    out = _empty((N, C, H, W), dy.dtype)
    return _run_nn("conv_dx", out, N * C * H * W, _flat(dy), _flat(w), *g)


def conv2d_weight_grad(dy, x, w_shape, stride=1, padding=0, dilation=1):
    dy, x = _operand(dy), _operand(x)
    g = _conv_geom(tuple(x.shape), tuple(int(s) for s in w_shape), stride, padding, dilation)
    O, C, KH, KW = (g[4], g[1], g[5], g[6])
    out = _empty((O, C, KH, KW), dy.dtype)
    n = O * C * KH * KW
    if dy.dtype.kind != "f" or x.dtype.kind != "f" or not n:
        return _run_nn("conv_dw", out, n, _flat(dy), _flat(x), *g)
    LAUNCHES[0] += 1
    _go(_nn_kernel("conv_dwb"), n, _TPB, _flat(out), _flat(dy), _flat(x), *g)
    return out


def channel_sum(x):
    x = _operand(x)
    return sum(x, axis=tuple(i for i in range(x.ndim) if i != 1))


def channel_broadcast(g, shape):
    g = _operand(g)
    shape = tuple(int(s) for s in shape)
    return broadcast_to(reshape(g, (1, shape[1]) + (1,) * (len(shape) - 2)), shape)


def _pool_geom(x_shape, kernel_size, stride, padding):
    N, C, H, W = x_shape
    kh, kw = _pair(kernel_size, "kernel_size")
    sh, sw = _pair(stride, "stride") if stride is not None else (kh, kw)
    ph, pw = _pair(padding, "padding")
    OH = (H + 2 * ph - kh) // sh + 1
    OW = (W + 2 * pw - kw) // sw + 1
    if OH <= 0 or OW <= 0:
        raise ValueError("pool: window larger than the padded input")
    return N, C, H, W, OH, OW, kh, kw, sh, sw, ph, pw


def _pool(name, x, kernel_size, stride, padding, out_like_input=False, extra=()):
    N, C, H, W, OH, OW, *k = _pool_geom(tuple(x.shape), kernel_size, stride, padding)
    out = _empty((N, C, H, W) if out_like_input else (N, C, OH, OW), x.dtype)
    n = N * C * (H * W if out_like_input else OH * OW)
    return _run_nn(name, out, n, *extra, N * C, H, W, OH, OW, *k)


def max_pool2d(x, kernel_size, stride=None, padding=0):
    x = _operand(x)
    return _pool("maxpool", x, kernel_size, stride, padding, extra=(_flat(x),))


def max_pool2d_grad(dy, x, kernel_size, stride=None, padding=0):
    dy, x = _operand(dy), _operand(x)
    return _pool("maxpool_grad", x, kernel_size, stride, padding, True, (_flat(dy), _flat(x)))


def max_pool2d_select(g, x, kernel_size, stride=None, padding=0):
    g, x = _operand(g), _operand(x)
    return _pool("maxpool_select", x, kernel_size, stride, padding, extra=(_flat(g), _flat(x)))


def avg_pool2d(x, kernel_size, stride=None, padding=0):
    x = _operand(x)
    return _pool("avgpool", x, kernel_size, stride, padding, extra=(_flat(x),))


def avg_pool2d_grad(dy, x_shape, kernel_size, stride=None, padding=0):
    dy = _operand(dy)
    N, C, H, W, OH, OW, *k = _pool_geom(tuple(int(s) for s in x_shape), kernel_size, stride, padding)
    out = _empty((N, C, H, W), dy.dtype)
    return _run_nn("avgpool_grad", out, N * C * H * W, _flat(dy), N * C, H, W, OH, OW, *k)


# ----------------------------------------------------------------------------- the namespace
def names():
    """Every kernel name this namespace defines (the GPU backend's coverage; fixed once the module is loaded)."""
    if not _NAMES:
        _NAMES.update(n for n, v in globals().items() if callable(v) and not n.startswith("_")
                      and getattr(v, "__module__", None) == __name__ and n not in _NOT_KERNELS)
    return _NAMES


_NAMES: set = set()


_NOT_KERNELS = {"is_device_array", "as_device", "names", "DeviceMismatchError", "add_scaled", "set_allocator",
                "materialize", "Lazy"}


# ----------------------------------------------------------------------------- nn: activations, losses, norms
# Composed from the kernels above (fused elementwise expressions and axis reductions), with the CPU kernels'
# semantics (kernels/cpu_nn.py): the same clamps, the same reductions, the same dropout masks.
_NN_EW = {
    "_leaky_relu_e": "({0} if {0} > 0 else {1} * {0})",                           # (x, slope)
    "_leaky_relu_g": "({0} if {1} > 0 else {2} * {0})",                           # (g, x, slope)
    "_elu_e": "({0} if {0} > 0 else {1} * math.expm1({0}))",                      # (x, alpha)
    "_elu_g": "({0} if {1} > 0 else {0} * {2} * math.exp({1}))",                  # (g, x, alpha)
    "gelu": "0.5 * {0} * (1.0 + math.erf({0} * 0.7071067811865476))",
    "gelu_grad": "{0} * (0.5 * (1.0 + math.erf({1} * 0.7071067811865476)) + {1} * 0.3989422804014327 * "
                 "math.exp(-0.5 * {1} * {1}))",
    "gelu_grad2": "{0} * 0.3989422804014327 * math.exp(-0.5 * {1} * {1}) * (2.0 - {1} * {1})",
    "_huber_e": "(0.5 * abs({0} - {1}) * abs({0} - {1}) if abs({0} - {1}) <= {2} else "
                "{2} * (abs({0} - {1}) - 0.5 * {2}))",                             # (p, t, delta)
    "_huber_g": "(({0} - {1}) if abs({0} - {1}) <= {2} else ({2} if {0} - {1} > 0 else -{2}))",
    "_clog": "(math.log({0}) if {0} > 3.720075976020836e-44 else -100.0)",       # log clamped at -100 (PyTorch)
    "_bce_g": "({0} - {1}) / max({0} * (1.0 - {0}), 1e-12)",                    # (p, t)
    "_bcel_e": "(max({0}, 0.0) - {0} * {1} + math.log1p(math.exp(-abs({0}))))",  # (z, t)
}
for _n, _t in _NN_EW.items():
    globals()[_n] = _make_ew(_n, _t)
    if not _n.startswith("_"):
        __all__.append(_n)


def _host_nn(name, *args, **kw):
    """An nn kernel on host values only (no device array among them): the CPU kernel computes it."""
    return getattr(_cpu_nn, name)(*args, **kw)


def leaky_relu(x, negative_slope=0.01):
    x = _operand(x)
    return _leaky_relu_e(x, float(negative_slope)) if _is_arr(x) else _host_nn("leaky_relu", x, negative_slope)


def leaky_relu_grad(g, x, negative_slope=0.01):
    g, x = _operand(g), _operand(x)
    if not (_is_arr(g) or _is_arr(x)):
        return _host_nn("leaky_relu_grad", g, x, negative_slope)
    return _leaky_relu_g(g, x, float(negative_slope))


def elu(x, alpha=1.0):
    x = _operand(x)
    return _elu_e(x, float(alpha)) if _is_arr(x) else _host_nn("elu", x, alpha)


def elu_grad(g, x, alpha=1.0):
    g, x = _operand(g), _operand(x)
    if not (_is_arr(g) or _is_arr(x)):
        return _host_nn("elu_grad", g, x, alpha)
    return _elu_g(g, x, float(alpha))


def _reduced(e, reduction, name):
    if reduction == "none":
        return _operand(e)
    if reduction == "sum":
        return sum(e)
    if reduction == "mean":
        n = _size(_shape(e))
        return sum(e) / _b.max(n, 1)
    raise ValueError(f"{name}: reduction must be 'none', 'sum' or 'mean', got {reduction!r}")


def _scale(reduction, n, name):
    if reduction == "mean":
        return 1.0 / _b.max(n, 1)
    if reduction in ("sum", "none"):
        return 1.0
    raise ValueError(f"{name}: reduction must be 'none', 'sum' or 'mean', got {reduction!r}")


def _loss_grad(core, g, scale):
    """``scale * g * core`` (``g`` a host number for a reduced loss, a device array for ``reduction='none'``)."""
    g = _operand(g)
    return _operand(multiply(multiply(core, scale), g))


def mse(a, b, reduction="mean"):
    return _reduced(square(subtract(_operand(a), _operand(b))), reduction, "mse")


def mse_grad(g, a, b, reduction="mean"):
    a, b = _operand(a), _operand(b)
    return _loss_grad(multiply(subtract(a, b), 2.0), g, _scale(reduction, _size(_shape(a)), "mse_grad"))


def huber(a, b, delta=1.0, reduction="mean"):
    return _reduced(_huber_e(_operand(a), _operand(b), float(delta)), reduction, "huber")


def huber_grad(g, a, b, delta=1.0, reduction="mean"):
    a, b = _operand(a), _operand(b)
    return _loss_grad(_huber_g(a, b, float(delta)), g, _scale(reduction, _size(_shape(a)), "huber_grad"))


def binary_cross_entropy(probs, target, reduction="mean"):
    p, t = _operand(probs), _operand(target)
    e = negative(add(multiply(t, _clog(p)), multiply(subtract(1.0, t), _clog(subtract(1.0, p)))))
    return _reduced(e, reduction, "binary_cross_entropy")


def binary_cross_entropy_grad(g, probs, target, reduction="mean"):
    p, t = _operand(probs), _operand(target)
    return _loss_grad(_bce_g(p, t), g, _scale(reduction, _size(_shape(p)), "binary_cross_entropy_grad"))


def binary_cross_entropy_grad_target(g, probs, target, reduction="mean"):
    p = _operand(probs)
    core = subtract(_clog(subtract(1.0, p)), _clog(p))
    return _loss_grad(core, g, _scale(reduction, _size(_shape(p)), "binary_cross_entropy_grad_target"))


def binary_cross_entropy_with_logits(logits, target, reduction="mean"):
    return _reduced(_bcel_e(_operand(logits), _operand(target)), reduction, "binary_cross_entropy_with_logits")


def binary_cross_entropy_with_logits_grad(g, logits, target, reduction="mean"):
    z, t = _operand(logits), _operand(target)
    return _loss_grad(subtract(sigmoid(z), t), g,
                      _scale(reduction, _size(_shape(z)), "binary_cross_entropy_with_logits_grad"))


def binary_cross_entropy_with_logits_grad_target(g, logits, target, reduction="mean"):
    z = _operand(logits)
    return _loss_grad(negative(z), g,
                      _scale(reduction, _size(_shape(z)), "binary_cross_entropy_with_logits_grad_target"))


def _label_rows(lp, labels, name):
    """(row indices, labels) as host int arrays, labels checked against the class count."""
    y = _to_host(as_device(labels)) if is_device_array(labels) else np.asarray(labels)
    N, C = tuple(lp.shape)
    if y.size and (y.min() < 0 or y.max() >= C):
        raise IndexError(f"{name}: label out of range")
    return np.arange(N), y


def nll(logp, labels, reduction="mean"):
    lp = _operand(logp)
    rows, y = _label_rows(lp, labels, "nll")
    return _reduced(negative(getitem(lp, (rows, y))), reduction, "nll")


def nll_grad(g, logp, labels, reduction="mean"):
    lp = _operand(logp)
    rows, y = _label_rows(lp, labels, "nll")
    s = _scale(reduction, lp.shape[0], "nll_grad")
    g = _operand(g)
    vals = multiply(g, -s) if _is_arr(g) else full((lp.shape[0],), -s * g, lp.dtype)
    return untake(vals, lp, (rows, y))


def _norm_parts(x, axes, eps):
    """``x - mean`` and ``1 / sqrt(var + eps)`` over ``axes`` (biased variance), both keeping the axes."""
    mu = mean(x, axis=axes, keepdims=True)
    xc = _operand(subtract(x, mu))
    var = mean(square(xc), axis=axes, keepdims=True)
    return xc, _operand(divide(1.0, sqrt(add(var, eps))))


def layer_norm(x, gamma, beta, eps=1e-5):
    x = _operand(x)
    xc, inv = _norm_parts(x, -1, float(eps))
    return _operand(add(multiply(multiply(xc, inv), _operand(gamma)), _operand(beta)))


def layer_norm_grad_input(dy, x, gamma, eps=1e-5):
    x, dy = _operand(x), _operand(dy)
    D = tuple(x.shape)[-1]
    xc, inv = _norm_parts(x, -1, float(eps))
    xh = _operand(multiply(xc, inv))
    gh = _operand(multiply(dy, _operand(gamma)))
    s1 = sum(gh, axis=-1, keepdims=True)
    s2 = sum(multiply(gh, xh), axis=-1, keepdims=True)
    return _operand(multiply(inv, subtract(subtract(gh, divide(s1, D)), multiply(xh, divide(s2, D)))))


def _rows_of(a):
    """``a`` as (rows, last axis)."""
    s = tuple(a.shape)
    return _operand(reshape(a, (_size(s[:-1]), s[-1])))


def layer_norm_grad_gamma(dy, x, eps=1e-5):
    x, dy = _operand(x), _operand(dy)
    xc, inv = _norm_parts(x, -1, float(eps))
    return sum(_rows_of(_operand(multiply(dy, multiply(xc, inv)))), axis=0)


def layer_norm_grad_beta(dy):
    return sum(_rows_of(_operand(dy)), axis=0)


def _ncs(x):
    s = tuple(x.shape)
    N, C = s[0], s[1]
    return _operand(reshape(x, (N, C, _size(s) // _b.max(N * C, 1)))), N, C


def _per_channel(v, C):
    return _operand(reshape(_operand(v), (1, C, 1)))


def _bn_stats(x3, C, running_mean, running_var, train, eps):
    if train:
        xc, inv = _norm_parts(x3, (0, 2), eps)
        return xc, inv
    xc = _operand(subtract(x3, _per_channel(running_mean, C)))
    return xc, _operand(divide(1.0, sqrt(add(_per_channel(running_var, C), eps))))


def batch_norm(x, gamma, beta, running_mean, running_var, train=True, eps=1e-5):
    x = _operand(x)
    x3, N, C = _ncs(x)
    xc, inv = _bn_stats(x3, C, running_mean, running_var, train, float(eps))
    out = add(multiply(multiply(xc, inv), _per_channel(gamma, C)), _per_channel(beta, C))
    return _operand(reshape(_operand(out), tuple(x.shape)))


def batch_norm_grad_input(dy, x, gamma, running_mean, running_var, train=True, eps=1e-5):
    x = _operand(x)
    x3, N, C = _ncs(x)
    dy3 = _operand(reshape(_operand(dy), tuple(x3.shape)))
    xc, inv = _bn_stats(x3, C, running_mean, running_var, train, float(eps))
    gi = _operand(multiply(_per_channel(gamma, C), inv))
    if not train:
        return _operand(reshape(_operand(multiply(dy3, gi)), tuple(x.shape)))
    M = N * tuple(x3.shape)[2]
    xh = _operand(multiply(xc, inv))
    s1 = sum(dy3, axis=(0, 2), keepdims=True)
    s2 = sum(multiply(dy3, xh), axis=(0, 2), keepdims=True)
    out = multiply(gi, subtract(subtract(dy3, divide(s1, M)), multiply(xh, divide(s2, M))))
    return _operand(reshape(_operand(out), tuple(x.shape)))


def batch_norm_grad_gamma(dy, x, running_mean, running_var, train=True, eps=1e-5):
    x = _operand(x)
    x3, N, C = _ncs(x)
    dy3 = _operand(reshape(_operand(dy), tuple(x3.shape)))
    xc, inv = _bn_stats(x3, C, running_mean, running_var, train, float(eps))
    return sum(multiply(dy3, multiply(xc, inv)), axis=(0, 2))


def batch_norm_stats(x, running_mean, running_var, momentum=0.1):
    """New running statistics after one training batch, stacked (2, C): [mean, unbiased var] blended."""
    x = _operand(x)
    x3, N, C = _ncs(x)
    M = N * tuple(x3.shape)[2]
    m = mean(x3, axis=(0, 2))
    v = mean(square(subtract(x3, reshape(m, (1, C, 1)))), axis=(0, 2))
    corr = M / (M - 1.0) if M > 1 else 1.0
    rm, rv = _operand(running_mean), _operand(running_var)
    new_m = _operand(add(multiply(rm, 1.0 - momentum), multiply(m, momentum)))
    new_v = _operand(add(multiply(rv, 1.0 - momentum), multiply(v, momentum * corr)))
    out = _empty((2, C), rm.dtype)
    index_put(out, 0, new_m)
    index_put(out, 1, new_v)
    return out


def _ids_on_host(ids, V, name):
    h = _to_host(as_device(ids)) if is_device_array(ids) else np.asarray(ids)
    if h.size and (h.min() < 0 or h.max() >= V):
        raise IndexError(f"{name}: id out of range")
    return h


def embedding(table, ids):
    table = _operand(table)
    return getitem(table, _ids_on_host(ids, table.shape[0], "embedding"))


def embedding_grad(dy, ids, table_shape):
    V, D = (int(s) for s in table_shape)
    h = _ids_on_host(ids, V, "embedding")
    dy = _operand(dy)
    out = full((V, D), 0, dy.dtype)
    flat = np.ascontiguousarray(h.reshape(-1).astype(np.int64))
    if flat.size and D:
        _rows("scatter", out, dy, _to_device(flat), D, flat.size)
    return out


def dropout(x, rate, seed):
    """The CPU kernel's dropout (the mask a function of ``seed`` and the element index, so both backends drop
    the same elements): the scaled mask is made on the host, the product on the device."""
    x = _operand(x)
    if not _is_arr(x):
        return _host_nn("dropout", x, rate, seed)
    mask = _cpu_nn.dropout(np.ones(tuple(x.shape), dtype=x.dtype), float(rate), int(seed))
    return _operand(multiply(x, _to_device(mask)))
