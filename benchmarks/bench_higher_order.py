"""What forward mode and second order cost: jvp / function and hvp / gradient, on three functions.

    (a) mlp:        an MLP-ish loss, tanh(x @ W1 + b1) @ W2, squared error (matmuls, tanh), a dict of params
    (b) loop:       a 10,000-step scalar recurrence x <- x + dt (a x - b x^2) in a Python loop, p = (a, b)
    (c) rosenbrock: the Rosenbrock function on 1000 dimensions, vectorized NumPy

For each: f, jvp (one tangent), grad and hvp (one Hessian-vector product, reverse over forward, no
Hessian formed), all with the default jit="auto" (the loop compiled whole with Numba, the array code
run as Python over compiled kernels), after a warm-up call. Timing alternates blocks of the two
things compared (A for N reps, B for N reps, repeated R times) and takes the minimum over blocks of
each block's median, so a slow stretch of a shared machine hits both alike. Prints the times and
the ratios jvp/f (goal 1.5-3x) and hvp/grad (goal <= about 4x). The function is timed both as written
(plain Python: for the loop that is the interpreter, so jvp/f is far below 1) and as funcgrad.jit(f,
mode="auto") compiles it, with the strategy jvp uses (the fair baseline for the generated code).

Usage: python benchmarks/bench_higher_order.py [--reps 20] [--rounds 7] [--only mlp,loop,rosenbrock]
"""
import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # a shared machine: BLAS threads would only add noise

import numpy as np  # noqa: E402

import funcgrad  # noqa: E402

DT = 1e-3


# ----------------------------------------------------------------------------- the functions
def mlp_loss(params, x, y):
    h = np.tanh(x @ params["W1"] + params["b1"])
    out = h @ params["W2"] + params["b2"]
    return np.mean((out - y) ** 2)


def loop_fn(p, n):
    a = p[0]
    b = p[1]
    x = 0.1
    for t in range(n):
        x = x + DT * (a * x - b * x * x)
    return x


def rosenbrock(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def cases():
    rng = np.random.default_rng(0)
    params = {"W1": rng.normal(size=(32, 64)) / 6, "b1": np.zeros(64),
              "W2": rng.normal(size=(64, 10)) / 8, "b2": np.zeros(10)}
    x = rng.normal(size=(128, 32))
    y = rng.normal(size=(128, 10))
    vp = {k: rng.normal(size=v.shape) for k, v in params.items()}
    z = rng.normal(size=1000) * 0.5
    vz = rng.normal(size=1000)
    return {
        "mlp": (lambda p: mlp_loss(p, x, y), params, vp, "MLP loss, x (128, 32), W1 (32, 64), W2 (64, 10)"),
        "loop": (lambda p: loop_fn(p, 10_000), np.array([1.5, 0.7]), np.array([1.0, -0.5]),
                 "10,000-step scalar recurrence, p = (a, b)"),
        "rosenbrock": (rosenbrock, z, vz, "Rosenbrock, 1000 dimensions"),
    }


# ----------------------------------------------------------------------------- timing
def block_median(fn, reps):
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def alternating(a, b, reps, rounds):
    """min over rounds of the block medians of ``a`` and of ``b`` (blocks alternate: a, b, a, b, ...)."""
    ma, mb = [], []
    for _ in range(rounds):
        ma.append(block_median(a, reps))
        mb.append(block_median(b, reps))
    return min(ma), min(mb)


def check(f, x, v, jvp_fn, grad_fn, hvp_fn):
    """The derivatives timed are right (central differences), so the numbers time real work."""
    leaves, td = funcgrad.tree_flatten(x)
    vl = funcgrad.tree_flatten(v)[0]
    eps = 1e-6

    def moved(s):
        return funcgrad.tree_unflatten(td, [a + s * b for a, b in zip(leaves, vl)])

    fd = (f(moved(eps)) - f(moved(-eps))) / (2 * eps)
    _, t = jvp_fn()
    gv = sum(np.sum(g * b) for g, b in zip(funcgrad.tree_flatten(grad_fn())[0], vl))
    assert np.isclose(t, fd, rtol=1e-5, atol=1e-8) and np.isclose(gv, fd, rtol=1e-5, atol=1e-8), (t, gv, fd)
    g = funcgrad.grad(f)
    fd2 = [(a - b) / (2 * eps) for a, b in zip(funcgrad.tree_flatten(g(moved(eps)))[0],
                                                 funcgrad.tree_flatten(g(moved(-eps)))[0])]
    hv = funcgrad.tree_flatten(hvp_fn())[0]
    for a, b in zip(hv, fd2):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6 * max(1.0, float(np.max(np.abs(b)))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20, help="calls per block")
    ap.add_argument("--rounds", type=int, default=7, help="blocks of each")
    ap.add_argument("--only", default="mlp,loop,rosenbrock")
    args = ap.parse_args()
    table = cases()
    rows = []
    for name in args.only.split(","):
        f, x, v, what = table[name]
        grad = funcgrad.grad(f)
        jvp_fn = lambda: funcgrad.jvp(f, (x,), (v,))          # noqa: E731
        grad_fn = lambda: grad(x)                                # noqa: E731
        hvp_fn = lambda: funcgrad.hvp(f, (x,), (v,))            # noqa: E731
        f_fn = lambda: f(x)                                      # noqa: E731
        fj = funcgrad.jit(f, mode="auto")                        # the primal as funcgrad runs it (same strategy)
        fj_fn = lambda: fj(x)                                    # noqa: E731
        t0 = time.perf_counter()
        check(f, x, v, jvp_fn, grad_fn, hvp_fn)                  # also the warm-up (transform, compile)
        fj_fn()
        first = time.perf_counter() - t0
        t_f, t_jvp = alternating(f_fn, jvp_fn, args.reps, args.rounds)
        t_fj, _ = alternating(fj_fn, jvp_fn, args.reps, args.rounds)
        t_grad, t_hvp = alternating(grad_fn, hvp_fn, args.reps, args.rounds)
        rows.append((name, what, t_f, t_fj, t_jvp, t_grad, t_hvp, first))

    print(f"forward mode and second order, float64, jit='auto'; min over {args.rounds} alternating blocks of "
          f"the median of {args.reps} calls")
    print(f"{'case':11s} {'f (ms)':>9s} {'jit(f)':>9s} {'jvp':>9s} {'grad':>9s} {'hvp':>9s} "
          f"{'jvp/f':>7s} {'jvp/jit(f)':>10s} {'hvp/grad':>9s}  first calls (s)")
    for name, what, t_f, t_fj, t_jvp, t_grad, t_hvp, first in rows:
        print(f"{name:11s} {t_f * 1e3:9.4f} {t_fj * 1e3:9.4f} {t_jvp * 1e3:9.4f} {t_grad * 1e3:9.4f} "
              f"{t_hvp * 1e3:9.4f} {t_jvp / t_f:6.2f}x {t_jvp / t_fj:9.2f}x {t_hvp / t_grad:8.2f}x  {first:6.1f}")
    print("goals: jvp about 1.5-3x the function, hvp <= about 4x the gradient")
    print("f: the plain Python/NumPy function; jit(f): funcgrad.jit(f, mode='auto'), the primal compiled with the "
          "strategy jvp uses (the loop compiled whole, array code as Python over kernels), through the same "
          "call machinery")
    for name, what, *_ in rows:
        print(f"  {name}: {what}")


if __name__ == "__main__":
    main()
