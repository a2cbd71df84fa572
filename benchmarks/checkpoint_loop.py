"""Gradient of a 10^7-step scalar recurrence: taped (range) vs checkpointed (funcgrad.checkpoint_range) vs the
plain range loop under grad(..., checkpoint_loops=budget) (automatic: checkpointed when trip count x 16 bytes a
trip exceeds the budget; "auto 100MB" does, "auto 1GB" stays taped and shows what carrying both copies costs).
Checkpointed, four ways: "checkpointed" (the default: sqrt(T) iterations a step, a snapshot a step, run by the
binomial schedule's code), "two-level" (segment=3162: the two-level code, which the default replaced),
"binomial-s100" (snapshots=100: revolve over single trips, r = 5 for T = 10^7) and "binomial-s20-k1000"
(snapshots=20, segment=1000: revolve over 10^4 steps of 1,000 trips, r = 4); "auto-10kB" is a budget the
two-level scheme does not fit in (76 kB), sized by K.revolve_plan.

    x_{t+1} = x_t + dt * (a * x_t - b * x_t**2),  x0 = 0.1, dt = 1e-7, float64, T = 10^7

Prints, from one run: d x_T / d(a, b) by both (they must agree); seconds per call of each, timed in
alternating blocks (each ``--reps`` calls per block, the two in turn, ``--rounds`` rounds; per contender the
minimum over rounds of the block's median); and the peak memory of one call of each, measured in a fresh
process as the growth of its peak RSS (VmHWM, reset after a warm-up call at T = 100) over its RSS then (tapes are Numba
arrays, which tracemalloc does not see). Issue 18's goal for the checkpointed one (and the automatic one with a
100 MB budget): <= 100 MB, <= ~3x the taped time.

Usage: python benchmarks/checkpoint_loop.py [--T 10000000] [--reps 3] [--rounds 5]
"""
import argparse
import os
import subprocess
import sys

import numpy as np

import funcgrad

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import alternating_blocks  # noqa: E402

DT = 1e-7


def taped(a, b, x0, n):
    x = x0
    for t in range(n):
        x = x + DT * (a * x - b * x * x)
    return x


def checkpointed(a, b, x0, n):
    x = x0
    for t in funcgrad.checkpoint_range(n):
        x = x + DT * (a * x - b * x * x)
    return x


def two_level(a, b, x0, n):
    x = x0
    for t in funcgrad.checkpoint_range(n, segment=3162):
        x = x + DT * (a * x - b * x * x)
    return x


def binomial_s100(a, b, x0, n):
    x = x0
    for t in funcgrad.checkpoint_range(n, snapshots=100):
        x = x + DT * (a * x - b * x * x)
    return x


def binomial_s20_k1000(a, b, x0, n):
    x = x0
    for t in funcgrad.checkpoint_range(n, snapshots=20, segment=1000):
        x = x + DT * (a * x - b * x * x)
    return x


# contender -> (function, checkpoint_loops)
FNS = {"taped": (taped, False), "checkpointed": (checkpointed, False), "two-level": (two_level, False),
       "binomial-s100": (binomial_s100, False), "binomial-s20-k1000": (binomial_s20_k1000, False),
       "auto-100MB": (taped, "100MB"), "auto-10kB": (taped, "10kB"), "auto-1GB": (taped, "1GB")}


def _grad(which):
    f, budget = FNS[which]
    return funcgrad.grad(f, argnums=(0, 1), checkpoint_loops=budget)


def _status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024


def _peak(which, T):
    """Peak RSS growth (bytes) of one gradient call at ``T``, in this (fresh) process (Linux: the peak is reset
    after the warm-up call, whose compile peaks higher than the call itself)."""
    g = _grad(which)
    g(0.7, 0.4, 0.1, 100)   # compile (or load) first
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")         # reset VmHWM to the current RSS
    base = _status("VmRSS")
    g(0.7, 0.4, 0.1, T)
    return max(_status("VmHWM") - base, 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--T", type=int, default=10_000_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--peak", choices=list(FNS))
    ap.add_argument("--only", help="comma-separated contenders (taped always runs)")
    args = ap.parse_args()
    if args.peak:
        print(_peak(args.peak, args.T))
        return
    names = [k for k in FNS if not args.only or k == "taped" or k in args.only.split(",")]
    grads = {k: _grad(k) for k in names}
    vals = {k: g(0.7, 0.4, 0.1, args.T) for k, g in grads.items()}
    for k in names:
        np.testing.assert_allclose(vals[k], vals["taped"], rtol=1e-10)
    print(f"T = {args.T:,}: d x_T / d(a, b) = {vals['taped'][0]:.10g}, {vals['taped'][1]:.10g} (all agree)")
    times = alternating_blocks({k: (lambda g=g: g(0.7, 0.4, 0.1, args.T)) for k, g in grads.items()},
                               args.reps, args.rounds, warmup=1)
    mem = {}
    for k in names:   # peak memory in fresh processes (a process's peak RSS never goes down)
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--peak", k, "--T", str(args.T)],
                             capture_output=True, text=True, check=True)
        mem[k] = int(out.stdout.split()[-1])
    for k in names:
        print(f"{k:>18}: {times[k] * 1e3:9.1f} ms per gradient ({times[k] / times['taped']:.2f}x taped), "
              f"peak memory +{mem[k] / 1e6:7.1f} MB")
    for k in names:
        if k not in ("taped", "auto-1GB"):
            print(f"{k} / taped time: {times[k] / times['taped']:.2f}x (goal <= ~3x); peak memory "
                  f"{mem[k] / 1e6:.1f} MB (goal <= 100 MB), taped {mem['taped'] / 1e6:.1f} MB")
    if "auto-1GB" in names:
        print(f"auto-1GB (taped copy chosen) / taped time: {times['auto-1GB'] / times['taped']:.2f}x")


if __name__ == "__main__":
    main()
