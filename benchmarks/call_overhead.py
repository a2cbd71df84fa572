"""Per-call overhead: the gradient of ``np.sum(x * x)`` on 3 elements, where the arithmetic is nothing.

Prints, from one run, microseconds per call of

* funcgrad.grad with jit="whole" (the generated adjoint compiled by Numba), jit="auto" (loop-free code runs
  as Python over compiled kernels: no compile wait), jit="kernels";
* the floor: a plain Python call of the function itself, and a hand-written ``@njit`` gradient (``2 * x``)
  called from Python (Numba's own dispatch);
* JAX's ``jit(grad(f))`` when JAX is installed;
* the same for a loss whose parameters are a list of two ``(W, b)`` pairs (2x2), as a model keeps them: funcgrad's
  fast path for containers of arrays, a plain call of that loss, JAX.

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


def tree_loss(params, x):
    """Parameters as a model keeps them: a list of (W, b) pairs (tiny: the arithmetic is nothing)."""
    (W1, b1), (W2, b2) = params
    return np.sum(np.tanh(x @ W1 + b1) @ W2 + b2)


def contenders():
    x = np.array([0.5, -1.0, 2.0])
    out = {}
    for jit in ("whole", "auto", "kernels"):
        g = funcgrad.grad(f, jit=jit)
        np.testing.assert_allclose(g(x), 2.0 * x)
        out[f"funcgrad grad, jit={jit!r}"] = (lambda g=g: g(x))
    out["plain Python call of f"] = lambda: f(x)
    rng = np.random.default_rng(0)
    params = [(rng.standard_normal((2, 2)), rng.standard_normal(2)) for _ in range(2)]
    xt = rng.standard_normal((1, 2))
    gt = funcgrad.grad(tree_loss, jit="whole")
    gt(params, xt)
    out["funcgrad grad, params [(W, b)] x2"] = lambda: gt(params, xt)
    out["plain call of that loss"] = lambda: tree_loss(params, xt)
    hand_grad(x)
    out["hand-written @njit gradient"] = lambda: hand_grad(x)
    try:
        import jax
        jax.config.update("jax_enable_x64", True)
        jg = jax.jit(jax.grad(lambda v: jax.numpy.sum(v * v)))
        xj = jax.numpy.asarray(x)
        jg(xj).block_until_ready()
        out["JAX jit(grad(f))"] = lambda: jg(xj).block_until_ready()
        jt = jax.jit(jax.grad(lambda p, v: jax.numpy.sum(jax.numpy.tanh(v @ p[0][0] + p[0][1]) @ p[1][0] + p[1][1])))
        pj, xtj = jax.tree_util.tree_map(jax.numpy.asarray, params), jax.numpy.asarray(xt)
        jax.block_until_ready(jt(pj, xtj))
        out["JAX jit(grad), params [(W, b)] x2"] = lambda: jax.block_until_ready(jt(pj, xtj))
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
