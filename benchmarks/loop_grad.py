"""Gradient of a 10,000-step scalar recurrence: funcgrad vs a hand-written Numba adjoint vs JAX.

    x_{t+1} = x_t + dt * (a * x_t - b * x_t**2),  x0 = 0.1, dt = 1e-3, float64

Prints, from one run, timed in alternating blocks (each contender ``--reps`` calls per block, contenders
in turn, ``--rounds`` rounds; per contender the minimum over rounds of the block's median):
d x_T / d(a, b) by funcgrad (T passed at run time, the call through ``value_and_grad``), by a hand-written
@njit forward + adjoint, and by JAX's lax.fori_loop under jit when installed; the plain @njit function
(the floor: no derivative at all); the ratios (issue 18's goals: <= 1.3x the hand adjoint, <= 2.0x the
function); funcgrad's first call in a fresh process with an empty cache directory (cold: transform +
Numba compile) and in a second fresh process sharing that directory (warm: Numba's disk cache); that a
new T does not recompile; and funcgrad's peak memory for T = 10^6 (its tape: O(T) floats).

Usage: python benchmarks/loop_grad.py [--T 10000] [--reps 200] [--rounds 7]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from numba import njit

import funcgrad
from funcgrad.transform.pipeline import STATS

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import alternating_blocks  # noqa: E402

DT = 1e-3


def logistic(a, b, x0, n):
    x = x0
    for t in range(n):
        x = x + DT * (a * x - b * x * x)
    return x


@njit(cache=True)
def hand_vjp(a, b, x0, n):
    xs = np.empty(n)
    x = x0
    for t in range(n):
        xs[t] = x
        x = x + DT * (a * x - b * x * x)
    da = 0.0
    db = 0.0
    dx = 1.0
    for t in range(n - 1, -1, -1):
        xt = xs[t]
        da += dx * DT * xt
        db -= dx * DT * xt * xt
        dx = dx * (1.0 + DT * (a - 2.0 * b * xt))
    return x, da, db


@njit(cache=True)
def plain(a, b, x0, n):
    x = x0
    for t in range(n):
        x = x + DT * (a * x - b * x * x)
    return x


def first_calls():
    """(cold, warm) seconds of the first gradient call (``import funcgrad`` not included), each in a fresh
    process; both share one new cache directory (funcgrad's generated sources and their Numba disk cache),
    empty for the cold one. funcgrad's own kernels keep the Numba cache they have after any earlier use."""
    code = f"""
import sys, time
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
import funcgrad
from loop_grad import logistic
g = funcgrad.value_and_grad(logistic, argnums=(0, 1))
t = time.perf_counter()
g(1.5, 0.7, 0.1, 10000)
print(time.perf_counter() - t)
"""
    out = []
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, FUNCGRAD_CACHE_DIR=d)   # funcgrad's kernels keep their installed Numba cache
        for _ in range(2):
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
            out.append(float(r.stdout.strip().splitlines()[-1]))
    return out


def peak_memory(T):
    """Peak RSS growth of one gradient call at T, measured in a fresh process (MiB)."""
    code = f"""
import numpy as np, funcgrad, sys
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
from loop_grad import logistic
def hwm():
    return int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) / 1024
g = funcgrad.value_and_grad(logistic, argnums=(0, 1))
g(1.5, 0.7, 0.1, 10)
before = hwm()
g(1.5, 0.7, 0.1, {T})
print(hwm() - before)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    T = args.T
    a, b, x0 = 1.5, 0.7, 0.1

    gf = funcgrad.value_and_grad(logistic, argnums=(0, 1))
    v, (da, db) = gf(a, b, x0, T)
    builds = STATS["builds"]
    gf(a, b, x0, T // 2)  # another T: same compiled function
    assert STATS["builds"] == builds, "a new T recompiled"

    hx, hda, hdb = hand_vjp(a, b, x0, T)
    assert abs(hda - da) < 1e-9 * max(1, abs(hda)) and abs(hdb - db) < 1e-9 * max(1, abs(hdb)), (da, db, hda, hdb)
    assert plain(a, b, x0, T) == v

    contenders = {"funcgrad value_and_grad (T at run time)": lambda: gf(a, b, x0, T),
                  "hand-written @njit adjoint": lambda: hand_vjp(a, b, x0, T),
                  "plain @njit function (no derivative)": lambda: plain(a, b, x0, T)}
    try:
        import jax
        import jax.numpy as jnp
        jax.config.update("jax_enable_x64", True)

        def jx(a, b):
            return jax.lax.fori_loop(0, T, lambda i, x: x + DT * (a * x - b * x * x), jnp.float64(x0))

        jg = jax.jit(jax.grad(jx, argnums=(0, 1)))
        jax.block_until_ready(jg(a, b))
        contenders[f"JAX {jax.__version__} lax.fori_loop + jit"] = lambda: jax.block_until_ready(jg(a, b))
    except ImportError:
        print("(JAX not installed: its row is left out)")
    best = alternating_blocks(contenders, args.reps, args.rounds)
    t_fg = best["funcgrad value_and_grad (T at run time)"]
    t_hand = best["hand-written @njit adjoint"]
    t_plain = best["plain @njit function (no derivative)"]

    print(f"gradient of a {T}-step logistic recurrence w.r.t. (a, b), float64; alternating blocks of "
          f"{args.reps} calls, {args.rounds} rounds, minimum of block medians")
    print(f"{'implementation':42s} {'time (ms)':>10s} {'vs hand':>8s} {'vs function':>12s}")
    for name, tm in best.items():
        print(f"{name:42s} {tm * 1e3:10.4f} {tm / t_hand:7.2f}x {tm / t_plain:11.2f}x")
    print(f"funcgrad: {t_fg / t_hand:.2f}x the hand-written adjoint (goal <= 1.3x), "
          f"{t_fg / t_plain:.2f}x the function (goal <= 2.0x)")
    for name, tm in best.items():
        if name.startswith("JAX"):
            print(f"funcgrad vs JAX fori_loop: {t_fg / tm:.2f}x")
    cold, warm = first_calls()
    print(f"funcgrad first call in a new process: cold {cold:.2f} s (transform + compile; goal <= 1.0 s), "
          f"warm {warm:.2f} s (disk cache; goal <= 0.2 s); a different T reuses the code (no recompilation)")
    print(f"funcgrad peak memory growth at T = 10^6: {peak_memory(1_000_000):.1f} MiB "
          f"(tape: the values the adjoint needs, O(T))")


if __name__ == "__main__":
    main()
