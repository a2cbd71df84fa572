"""What a custom_vjp call inside a loop costs, and what the alternatives would.

    .venv/bin/python benchmarks/custom_vjp_loop.py [--n 2000] [--reps 5]

A recurrence of ``n`` steps, each with a few scalar operations and one call of
a ``custom_vjp`` function (softplus with a hand-written VJP). Rows:

* ``custom, auto``: what ships: auto runs the function as Python over the
  compiled kernels (its fun/fwd/bwd are Python); first call (build, no
  compile) and steady state per gradient;
* ``custom, forced whole first call``: the previous behaviour of auto (try whole-function
  Numba, fail, warn, rebuild as Python), measured as the time ``jit="whole"``
  takes to refuse plus the Python build: the compile attempt auto no longer makes;
* ``inline formula, whole``: the same recurrence with softplus written inline,
  compiled whole (what a custom_vjp call would cost if it could be compiled:
  the floor);
* ``objmode call per step``: the per-call price of the other option (calling
  the user's Python from whole-function code through ``numba.objmode``),
  measured on a bare njit loop that enters object mode once per step, against
  the same loop without it.
"""
from __future__ import annotations

import argparse
import time

import numba
import numpy as np

import funcgrad


@funcgrad.custom_vjp
def softplus(x):
    return np.log1p(np.exp(x))


softplus.defvjp(lambda x: (np.log1p(np.exp(x)), x), lambda x, g: (g / (1.0 + np.exp(-x)),))


def rec_custom(a, x0, n):
    x = x0
    for i in range(n):
        x = 0.5 * x + 0.1 * softplus(a * x) - 0.01 * x * x
    return x


def rec_inline(a, x0, n):
    x = x0
    for i in range(n):
        x = 0.5 * x + 0.1 * np.log1p(np.exp(a * x)) - 0.01 * x * x
    return x


def _py_softplus(x):
    return np.log1p(np.exp(x))


@numba.njit
def _loop_objmode(x, n):
    s = 0.0
    for i in range(n):
        with numba.objmode(y="float64"):
            y = _py_softplus(x + i * 1e-6)
        s += y
    return s


@numba.njit
def _loop_plain(x, n):
    s = 0.0
    for i in range(n):
        s += np.log1p(np.exp(x + i * 1e-6))
    return s


def _time(f, reps):
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    n, reps = args.n, args.reps
    rows = []

    g = funcgrad.grad(rec_custom, argnums=(0, 1))
    t0 = time.perf_counter()
    g(0.8, 0.3, n)
    rows.append(("custom, auto: first call", time.perf_counter() - t0))
    rows.append(("custom, auto: per gradient", _time(lambda: g(0.8, 0.3, n), reps)))
    assert list(g.cache.values())[0].mode == "python"

    w = funcgrad.grad(rec_custom, argnums=(0, 1), jit="whole")
    t0 = time.perf_counter()
    try:
        w(0.8, 0.3, n)
    except funcgrad.CompileError:
        pass
    rows.append(("custom, forced whole: time to refuse (the compile auto no longer tries)", time.perf_counter() - t0))

    h = funcgrad.grad(rec_inline, argnums=(0, 1), jit="whole")
    t0 = time.perf_counter()
    h(0.8, 0.3, n)
    rows.append(("inline formula, whole: first call (compile)", time.perf_counter() - t0))
    rows.append(("inline formula, whole: per gradient", _time(lambda: h(0.8, 0.3, n), reps)))
    hp = funcgrad.grad(rec_inline, argnums=(0, 1), jit="kernels")
    hp(0.8, 0.3, n)
    rows.append(("inline formula, python: per gradient", _time(lambda: hp(0.8, 0.3, n), reps)))

    _loop_objmode(0.1, 10)
    _loop_plain(0.1, 10)
    t_obj = _time(lambda: _loop_objmode(0.1, n), reps)
    t_plain = _time(lambda: _loop_plain(0.1, n), reps)
    rows.append(("objmode: one object-mode call per step, per step", (t_obj - t_plain) / n))

    a, b = g(0.8, 0.3, n), h(0.8, 0.3, n)
    print(f"n = {n}; gradients agree: {np.allclose(a, b, rtol=1e-10)}")
    for name, t in rows:
        unit = (t * 1e6, "us") if t < 1e-2 else (t * 1e3, "ms")
        print(f"  {name:<75s} {unit[0]:10.2f} {unit[1]}")


if __name__ == "__main__":
    main()
