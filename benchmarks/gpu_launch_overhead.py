"""What one GPU operation costs the host, by way of launching it: the floor under funcgrad's GPU step.

A training step of a small model on a fast GPU is bound by the host: each kernel runs for microseconds,
and what decides the step's time is how long Python takes to launch each one. This script times, on one
device, in alternating blocks (each contender N calls, then the next, R rounds; the minimum of the block
medians), per call:

* a numba.cuda kernel of 4 array arguments launched through its dispatcher (``k[grid, block](...)``);
* the same compiled kernel launched by funcgrad (``funcgrad.kernels.cuda_launch.go``), funcgrad's
  allocation of an array, and one fused elementwise operation computed (allocation + launch + bookkeeping);
* a CuPy ElementwiseKernel of the same arithmetic, and ``torch.add`` (PyTorch's eager dispatch);
* making a device array: ``numba.cuda.device_array``, ``cupy.empty``, and the wrapping of a CuPy array as a
  numba device array (``cuda.as_cuda_array``) and back (``cupy.asarray``).

Every call is followed by nothing: a block ends with a synchronisation, so queued work is counted.

Usage: python benchmarks/gpu_launch_overhead.py [--n 1024] [--reps 2000] [--rounds 3]
"""
import argparse
import os
import sys
import time

import numpy as np
from numba import cuda

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def blocks(fns, reps, rounds, sync):
    best = {k: float("inf") for k in fns}
    for fn in fns.values():
        for _ in range(20):
            fn()
    sync()
    for _ in range(rounds):
        for name, fn in fns.items():
            t = time.perf_counter()
            for _ in range(reps):
                fn()
            sync()
            best[name] = min(best[name], (time.perf_counter() - t) / reps)
    return best


@cuda.jit
def fma(out, a, b, c, n):
    i = cuda.grid(1)
    if i < n:
        out[i] = a[i] * b[i] + c[i]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from funcgrad.kernels import cuda as K

    n = args.n
    a, b, c, out = (cuda.to_device(np.random.rand(n).astype(np.float32)) for _ in range(4))

    grid = (n + 255) // 256
    fns = {"numba dispatcher k[g, b](4 arrays)": lambda: fma[grid, 256](out, a, b, c, n)}
    from funcgrad.kernels.cuda_launch import go, STATS
    go(fma, grid, 256, out, a, b, c, n)
    fns["funcgrad's launch path (same kernel)"] = lambda: go(fma, grid, 256, out, a, b, c, n)
    fns["funcgrad: an empty array (K._empty)"] = lambda: K._empty((n,), np.float32)
    fns["funcgrad: x + 1 of a device array, computed"] = lambda: K.materialize(K.add(a, 1.0))
    fns["numba.cuda.device_array(n)"] = lambda: cuda.device_array((n,), np.float32)
    try:
        import cupy as cp
        ca, cb, cc = (cp.asarray(x) for x in (a, b, c))
        ek = cp.ElementwiseKernel("T a, T b, T c", "T o", "o = a * b + c", "fg_fma")
        co = cp.empty(n, cp.float32)
        fns["cupy ElementwiseKernel (4 arrays)"] = lambda: ek(ca, cb, cc, co)
        fns["cupy.empty(n)"] = lambda: cp.empty(n, cp.float32)
        fns["cuda.as_cuda_array(cupy array)"] = lambda: cuda.as_cuda_array(co, sync=False)
        fns["cupy.asarray(numba device array)"] = lambda: cp.asarray(a)
    except ImportError:
        cp = None
    try:
        import torch
        ta, tb = (torch.rand(n, device="cuda") for _ in range(2))
        fns["torch.add (eager)"] = lambda: torch.add(ta, tb)
    except ImportError:
        torch = None
    best = blocks(fns, args.reps, args.rounds, cuda.synchronize)
    dev = cuda.get_current_device()
    name = getattr(dev, "name", "the CUDA simulator")
    name = name.decode() if isinstance(name, bytes) else name
    print(f"device: {name}; {n} float32 elements; min over {args.rounds} rounds of {args.reps} calls each; "
          f"funcgrad's fast launches {STATS['fast']}, through numba {STATS['numba']}")
    for k, v in best.items():
        print(f"  {k:<45s} {v * 1e6:8.1f} us/call")


if __name__ == "__main__":
    main()
