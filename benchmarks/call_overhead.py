"""Per-call overhead: the gradient of ``np.sum(x * x)`` on 3 elements, where the arithmetic is nothing.

Prints, from one run, microseconds per call of

* funcgrad.grad with jit="whole" (the generated adjoint compiled by Numba), jit="auto" (loop-free code runs
  as Python over compiled kernels: no compile wait), jit="kernels";
* the floor: a plain Python call of the function itself, and a hand-written ``@njit`` gradient (``2 * x``)
  called from Python (Numba's own dispatch);
* JAX's ``jit(grad(f))`` when JAX is installed.

Timed in alternating blocks (each contender runs ``--batches`` batches of ``--calls`` calls, then the next
contender; repeated ``--rounds`` times); per contender the minimum over rounds of the block's median batch.
Usage: python benchmarks/call_overhead.py [--rounds 7] [--batches 15] [--calls 500]
"""
import argparse
import time

import numpy as np
from numba import njit

import funcgrad


def f(x):
    return np.sum(x * x)


@njit(cache=True)
def hand_grad(x):
    return 2.0 * x


def contenders():
    x = np.array([0.5, -1.0, 2.0])
    out = {}
    for jit in ("whole", "auto", "kernels"):
        g = funcgrad.grad(f, jit=jit)
        np.testing.assert_allclose(g(x), 2.0 * x)
        out[f"funcgrad grad, jit={jit!r}"] = (lambda g=g: g(x))
    out["plain Python call of f"] = lambda: f(x)
    hand_grad(x)
    out["hand-written @njit gradient"] = lambda: hand_grad(x)
    try:
        import jax
        jax.config.update("jax_enable_x64", True)
        jg = jax.jit(jax.grad(lambda v: jax.numpy.sum(v * v)))
        xj = jax.numpy.asarray(x)
        jg(xj).block_until_ready()
        out["JAX jit(grad(f))"] = lambda: jg(xj).block_until_ready()
    except ImportError:
        print("(JAX not installed: its row is left out)")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--batches", type=int, default=15)
    ap.add_argument("--calls", type=int, default=500)
    a = ap.parse_args()
    cs = contenders()
    best = {k: float("inf") for k in cs}
    for _ in range(a.rounds):
        for name, fn in cs.items():       # one block per contender, in turn
            per = []
            for _ in range(a.batches):
                t = time.perf_counter()
                for _ in range(a.calls):
                    fn()
                per.append((time.perf_counter() - t) / a.calls)
            best[name] = min(best[name], float(np.median(per)))
    floor = best["hand-written @njit gradient"]
    print(f"{'':32s} {'us/call':>8s} {'x njit floor':>13s}")
    for name, t in best.items():
        print(f"{name:32s} {t * 1e6:8.2f} {t / floor:13.2f}")


if __name__ == "__main__":
    main()
