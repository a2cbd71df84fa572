"""Replaying a generated GPU function as one CUDA graph: the host's work per call becomes a few copies.

On the GPU backend the generated code runs as Python that launches one kernel (or cuBLAS call) per primitive.
A small model's training step is then bound by the host: 30-50 launches of 10-90 microseconds of Python each,
while the GPU runs each kernel in a few. CUDA graphs remove that cost: the launches of one call are recorded
once (stream capture) and replayed by a single ``cudaGraphLaunch``.

How a call of a compiled function is served (:class:`Graphs`, one per compiled function):

* The key is everything the host code's decisions can depend on: each device argument's shape and dtype (its
  address is not: the graph reads copies), the value of each host number, and the device. An argument of any
  other kind (a non-contiguous array, an object) means no graph for that call.
* The first call with a key runs as always (it compiles the kernels). The second records: the arguments are
  copied into buffers the graph owns, the function runs once on a private stream and memory pool (so that the
  pool holds every block the recording needs), then runs again under stream capture. The recording is then
  launched for this call, and for every later call with the key after copying the arguments in; the results
  are copied out into new arrays, so a result never changes under the caller when the graph runs again.
* Right or not at all: anything that needs a device value on the host while recording (a loss read as a
  number, a label check, indices copied to the host, a host array copied to the device) raises
  :class:`~funcgrad.kernels.cuda_launch.NotRecordable` in funcgrad's kernels; anything else does so in CUDA
  itself (the capture stream is a blocking stream captured in global mode, so a launch or copy on the legacy
  stream, an allocation from the driver or a synchronization fails and invalidates the capture). The call then
  runs as always, and after two failed recordings the key is not recorded again. Full reductions, which return
  host numbers, return 0-d device arrays while recording; results that were host numbers in the first run are
  read back after each replay (one small copy, as the run without a graph makes), and label checks read their
  flag after each replay and raise the same error.

Graphs need CuPy (its memory pool, streams and graph API; cuBLAS runs through it already) and a real GPU; not the
simulator, not the ``numba`` allocator, not the kernel-timing diagnostic. ``FUNCGRAD_CUDA_GRAPHS=0`` turns them
off. A function keeps at most :data:`MAX_GRAPHS` recordings (the least recently used is dropped) and records at
most :data:`MAX_RECORDINGS` times; each recording holds a copy of the arguments, the results and the pool it
used, and none is made that would hold more than half the GPU memory that is free.
"""
from __future__ import annotations

import gc
import os
import threading
import traceback
from collections import OrderedDict

import numpy as np

from . import cuda_launch as _L

#: recordings kept per compiled function
MAX_GRAPHS = 4
#: failed recordings of one key before it is left to run without a graph
MAX_FAILURES = 2
#: recordings made per compiled function, at most (a function called with ever new shapes or host numbers
#: stops recording rather than record for every one); keys remembered per function, at most
MAX_RECORDINGS = 16
MAX_KEYS = 256
#: why recordings failed, by reason (a diagnostic: benchmarks/gpu_step.py prints it), and counts of events
STATS = {"recorded": 0, "replayed": 0, "failed": 0, "reasons": {}, "where": {}}
#: graphs on (``FUNCGRAD_CUDA_GRAPHS=0`` starts with them off; a benchmark or test may flip ``ENABLED[0]``)
ENABLED = [os.environ.get("FUNCGRAD_CUDA_GRAPHS", "1") != "0"]
#: held while a graph is recorded, and by funcgrad's own host<->device copies (funcgrad.device_put / device_get,
#: a data loader's prefetch): a copy on the legacy stream from another thread would invalidate the recording
DEVICE_LOCK = threading.RLock()
_FAILED = object()


def enabled(K):
    return ENABLED[0] and not K.SIM and not _L.TIMING[0] and K._cupy() is not None and K._ALLOC[0] in (None, "cupy")


class Recording:
    """What the kernels consult while a graph is recorded (``cuda_launch.LOCAL.recording``)."""

    def __init__(self, input_ptrs):
        self.input_ptrs = input_ptrs
        self.checks = []   # (device flag array, exception type, message): raise if the flag is set after a replay
        self.keep = []     # device arrays the graph reads that it does not own (the kernels' cached copies)


def _ptr(a):
    return a.device_ctypes_pointer.value or 0   # (a real device array: graphs never run on the simulator)


def _key(args, K):
    """The recording key of a call (see the module's docstring), or None: no graph for this call."""
    DevArray = K._DevArray
    key = []
    for a in args:
        t = type(a)
        if t is DevArray:
            if not K._is_c(a):
                return None
            key.append((a.shape, a.dtype.str))
        elif t is float or t is int or t is bool or t is complex or isinstance(a, np.generic) or a is None:
            key.append((t, a))
        else:
            return None
    key.append(0 if K.SIM else _L.current_context()[0])   # (the device: its context)
    return tuple(key)


def _flatten(tree, leaves):
    """The leaves of nested tuples/lists (NamedTuples too), and how to rebuild the tree from an iterator."""
    if isinstance(tree, (tuple, list)):
        parts = [_flatten(t, leaves) for t in tree]
        if isinstance(tree, tuple) and type(tree) is not tuple and hasattr(tree, "_fields"):
            return lambda it, T=type(tree): T(*(p(it) for p in parts))
        return lambda it, T=type(tree): T(p(it) for p in parts)
    leaves.append(tree)
    return lambda it: next(it)


_COPY_SRC = r"""
extern "C" __global__ void fg_copies(const long long* tab, int n) {
    // entry e = blockIdx.y of the table: (source address, destination address, bytes)
    int e = blockIdx.y;
    if (e >= n) return;
    const char* src = (const char*)tab[3 * e];
    char* dst = (char*)tab[3 * e + 1];
    long long nb = tab[3 * e + 2];
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    long long step = (long long)gridDim.x * blockDim.x;
    long long bits = (long long)src | (long long)dst | nb;
    if ((bits & 15) == 0) {
        const int4* s = (const int4*)src; int4* d = (int4*)dst;
        for (long long m = nb >> 4; i < m; i += step) d[i] = s[i];
    } else if ((bits & 3) == 0) {
        const int* s = (const int*)src; int* d = (int*)dst;
        for (long long m = nb >> 2; i < m; i += step) d[i] = s[i];
    } else {
        for (; i < nb; i += step) dst[i] = src[i];
    }
}
"""
_COPY: list = []


def _copy_kernel(cp):
    """One kernel copying every buffer a table lists (so that a replay's copies in and out are two nodes of the
    graph, and the host writes one table instead of making a copy call per argument and result)."""
    if not _COPY:
        _COPY.append(cp.RawKernel(_COPY_SRC, "fg_copies"))
    return _COPY[0]


def _copies(cp, table, n, nbytes):
    """Launch the copies of the ``n`` table entries (at most ``nbytes`` each) on the current stream; with
    ``table`` None, a launch copying nothing (the kernel compiled and loaded before a capture)."""
    if table is None:
        _copy_kernel(cp)((1, 1), (32,), (cp.zeros(3, np.int64), np.int32(1)))
    elif n:
        blocks = max(1, min(1024, (nbytes // 16 + 255) // 256))
        _copy_kernel(cp)((blocks, n), (256,), (table, np.int32(n)))


class _Replay:
    """One recorded graph: its input buffers, its outputs and how each becomes a result.

    The graph begins by copying each argument into its buffer and ends by copying each device result into
    the caller's new array, the addresses read from a table on the device: a replay fills the table on the
    host (the arguments' and new results' addresses), copies it to the device and launches the graph."""

    def __init__(self, K, graph, pool, stream, inputs, outs, rebuild, rec, table, host_table):
        # (the pool holds the memory the graph reads and writes; the stream it was recorded on lives as long)
        self.K, self.graph, self.pool, self.stream = K, graph, pool, stream
        self.inputs = inputs      # [(argument position, buffer, bytes)]
        self.outs = outs          # [(kind, value)]: "dev" buffer, "host" (0-d buffer, type), "const" value
        self.rebuild = rebuild
        self.checks, self.keep = list(rec.checks), list(rec.keep)   # (see Recording)
        self.table, self.host_table = table, host_table   # device int64 table, its host image
        self.lock = threading.Lock()

    def run(self, args):
        K = self.K
        cp = K._cupy()
        rt = cp.cuda.runtime
        results = []
        tab = self.host_table
        with self.lock:   # (everything on the legacy stream, in the order enqueued: other work orders around it)
            j = 0
            for i, _, _ in self.inputs:
                tab[j] = _ptr(args[i])
                j += 3
            for kind, v in self.outs:
                if kind == "dev":
                    new = K._empty(v.shape, v.dtype)
                    tab[j + 1] = _ptr(new)
                    j += 3
                    results.append(new)
                else:
                    results.append(v)
            # (from pageable memory: staged before the call returns, so the table can be written again at once)
            rt.memcpyAsync(self.table.data.ptr, tab.ctypes.data, tab.nbytes, rt.memcpyHostToDevice, 0)
            self.graph.launch(stream=cp.cuda.Stream.null)
            flags = [bad.copy_to_host()[0] for bad, _, _ in self.checks]
            for j, (kind, v) in enumerate(self.outs):
                if kind == "host":
                    buf, conv = v
                    results[j] = conv(buf.copy_to_host()[()])
        STATS["replayed"] += 1
        for f, (_, exc, msg) in zip(flags, self.checks):
            if f:
                raise exc(msg)
        return self.rebuild(iter(results))


def _host_converter(v):
    t = type(v)
    return t if t in (float, int, bool, complex) or isinstance(v, np.generic) else None


def _same_constant(v, w):
    """Whether ``v`` and ``w`` are the same host number (or None), NaN included."""
    if v is None or w is None:
        return v is w
    if type(v) is not type(w) or _host_converter(v) is None:
        return False
    return bool(v == w) or bool(v != v and w != w)


def _classify(K, leaves, warm_kinds):
    """How each result of the recorded run becomes a result of a replay, checked against the first run's:
    ``("dev", buffer)`` copied out, ``("host", (0-d buffer, type))`` read back as the host number the first
    run returned, ``("const", value)``; and the device results in order. Raises NotRecordable on a mismatch."""
    if len(leaves) != len(warm_kinds):
        raise _L.NotRecordable("the results differ between runs")
    outs, dev = [], []
    for v, (was_dev, w) in zip(leaves, warm_kinds):
        if type(v) is K._DevArray:
            if was_dev:
                if not K._is_c(v) or (v.shape, v.dtype) != w:
                    raise _L.NotRecordable("the results differ between runs")
                outs.append(("dev", v))
                dev.append(v)
            else:
                conv = _host_converter(w)
                if conv is None or v.shape != ():
                    raise _L.NotRecordable("the results differ between runs")
                outs.append(("host", (v, conv)))
        elif was_dev or not _same_constant(v, w):
            raise _L.NotRecordable("the results differ between runs")
        else:
            outs.append(("const", v))
    return outs, dev


def too_big(held, free):
    """Whether a recording holding ``held`` bytes (its arguments, results and pool) takes too much of the
    ``free`` device memory: more than half (a graph keeps its memory for good; the program needs the rest)."""
    return 2 * held > free


def _record(K, fn, materialize, args):
    """Record ``fn(*args)`` as a graph (see the module's docstring); raises on any failure."""
    cp = K._cupy()
    rt = cp.cuda.runtime
    pool = cp.cuda.MemoryPool()
    stream = cp.cuda.Stream(non_blocking=False)
    from numba import cuda
    from numba.cuda.cudadrv import driver as _drv
    nstream = cuda.external_stream(stream.ptr)
    core = _drv._to_core_stream(nstream)
    with DEVICE_LOCK, cp.cuda.using_allocator(pool.malloc), stream:
        stream.synchronize()
        inputs, call = [], list(args)
        for i, a in enumerate(args):
            if type(a) is K._DevArray:
                buf = K._empty(a.shape, a.dtype)
                nbytes = a.size * a.dtype.itemsize
                if nbytes:
                    rt.memcpyAsync(_ptr(buf), _ptr(a), nbytes, rt.memcpyDeviceToDevice, stream.ptr)
                inputs.append((i, buf, nbytes))
                call[i] = buf
        rec = Recording({_ptr(b) for _, b, n in inputs if n})
        loc = _L.LOCAL
        gc_was = False
        loc.stream, loc.nstream, loc.stream_ptr = core, nstream, stream.ptr
        try:
            # a first run as without a graph, on the private stream and pool: what it returns says which results
            # are host numbers (full reductions return them: 0-d device arrays while recording)
            warm = materialize(fn(*call))
            warm_leaves = []
            _flatten(warm, warm_leaves)
            warm_kinds = [(type(v) is K._DevArray, v if type(v) is not K._DevArray else (v.shape, v.dtype))
                          for v in warm_leaves]
            del warm, warm_leaves
            n_in, n_out = len(inputs), sum(1 for d, _ in warm_kinds if d)
            host_table = np.zeros(3 * (n_in + n_out) + 3, np.int64)
            for e, (_, buf, nbytes) in enumerate(inputs):
                host_table[3 * e + 1], host_table[3 * e + 2] = _ptr(buf), nbytes
            table = cp.empty(host_table.shape, np.int64)   # (before the capture: from the pool, no allocation in it)
            table_out = table[3 * n_in:]
            _copies(cp, None, 0, 0)
            stream.synchronize()
            # no allocation from the driver, and no freeing, may happen while capturing: the pool's free blocks go
            # back and one block twice the size the first run held takes their place (the recording's arrays
            # are cut from it); garbage (a failed recording's pool, say) is collected now, not in the capture
            reserve = 2 * (pool.total_bytes() - pool.used_bytes()) + (1 << 20)
            pool.free_all_blocks()
            free = rt.memGetInfo()[0]
            if too_big(pool.used_bytes() + reserve, free):
                raise _L.NotRecordable("a recording would hold more than half the GPU memory that is free")
            block = pool.malloc(reserve)
            del block
            gc.collect()
            gc_was = gc.isenabled()
            gc.disable()
            loc.recording = rec
            stream.begin_capture(mode=rt.streamCaptureModeGlobal)
            try:
                _copies(cp, table, n_in, max([n for _, _, n in inputs], default=0))
                out = materialize(fn(*call))
                leaves = []
                rebuild = _flatten(out, leaves)
                outs, dev = _classify(K, leaves, warm_kinds)   # (as many device results as the first run's)
                for e, v in enumerate(dev):
                    host_table[3 * (n_in + e)], host_table[3 * (n_in + e) + 2] = _ptr(v), v.size * v.dtype.itemsize
                _copies(cp, table_out, n_out, max([v.size * v.dtype.itemsize for v in dev], default=0))
            except BaseException:
                try:
                    stream.end_capture()
                except Exception:   # noqa: BLE001  (an invalidated capture ends with an error of its own)
                    pass
                raise
            graph = stream.end_capture()
        finally:
            loc.stream = loc.nstream = loc.recording = None
            loc.stream_ptr = 0
            if gc_was:
                gc.enable()
        stream.synchronize()
    return _Replay(K, graph, pool, stream, inputs, outs, rebuild, rec, table, host_table)


class Graphs:
    """The calls of one compiled GPU function, served by recorded graphs where they can be (module docstring)."""

    def __init__(self, fn, K):
        self.fn, self.K = fn, K
        self.keys = OrderedDict()   # key -> number of calls without a graph, _Replay, or (_FAILED, failures)
        self.lock = threading.Lock()
        self.recordings = 0

    def __call__(self, args, eager):
        K = self.K
        loc = _L.LOCAL
        if loc.stream is not None or loc.recording is not None or not enabled(K):
            return eager(args)   # (a function called inside another's recording, or its first run, runs inline)
        key = _key(args, K)
        if key is None:
            return eager(args)
        with self.lock:
            entry = self.keys.get(key)
            if isinstance(entry, _Replay):
                self.keys.move_to_end(key)
        if isinstance(entry, _Replay):
            return entry.run(args)
        if entry is None:
            with self.lock:
                self.keys[key] = 1
                if len(self.keys) > MAX_KEYS:   # forget the oldest keys without a graph
                    for k in list(self.keys):
                        if len(self.keys) <= MAX_KEYS // 2:
                            break
                        if not isinstance(self.keys[k], _Replay):
                            del self.keys[k]
            return eager(args)   # the first call: compiles what the recording will launch
        if type(entry) is tuple:
            if entry[1] >= MAX_FAILURES:
                return eager(args)
            failures = entry[1]
        else:
            failures = 0
        if self.recordings >= MAX_RECORDINGS:
            return eager(args)
        self.recordings += 1
        try:
            rep = _record(K, self.fn, K.materialize, args)
        except Exception as e:   # noqa: BLE001  (whatever stops a recording, the call runs without one)
            reason = f"{type(e).__name__}: {e}".splitlines()[0][:160]
            STATS["failed"] += 1
            if reason not in STATS["reasons"]:   # where it was raised (a diagnostic)
                STATS["where"][reason] = "".join(traceback.format_exception(e)[-6:-1])[-1500:]
            STATS["reasons"][reason] = STATS["reasons"].get(reason, 0) + 1
            del e
            with self.lock:
                self.keys[key] = (_FAILED, failures + 1)
            return eager(args)
        STATS["recorded"] += 1
        with self.lock:
            self.keys[key] = rep
            n = sum(1 for v in self.keys.values() if isinstance(v, _Replay))
            for k in list(self.keys):
                if n <= MAX_GRAPHS:
                    break
                if isinstance(self.keys[k], _Replay):
                    del self.keys[k]
                    n -= 1
        return rep.run(args)
