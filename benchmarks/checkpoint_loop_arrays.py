"""Gradient of a loop whose state is an array (where bounded snapshots matter): x of 12,500 floats (100 kB),
T = 4000 trips of x = x + DT * a * sin(x) * cos(x). Taped (a 2 GB tape) vs checkpoint_range(n) (the two-level
schedule: 63 snapshots and a 63-trip tape) vs checkpoint_range(n, snapshots=5) (revolve over single trips) vs
checkpoint_loops="5MB" (K.revolve_plan sizes steps and snapshots within 5 MB) vs "1GB" (the two-level schedule
fits). Times in alternating blocks (2 calls a block, 3 rounds, minimum of block medians); peak memory as in
checkpoint_loop.py (growth of VmHWM over one call, in a fresh process).

Usage: python benchmarks/checkpoint_loop_arrays.py
"""
import os
import subprocess
import sys

import numpy as np

import funcgrad

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import alternating_blocks  # noqa: E402

DT = 1e-3


def taped(a, x0, n):
    x = x0
    for t in range(n):
        x = x + DT * a * np.sin(x) * np.cos(x)
    return np.sum(x)


def ckpt(a, x0, n):
    x = x0
    for t in funcgrad.checkpoint_range(n):
        x = x + DT * a * np.sin(x) * np.cos(x)
    return np.sum(x)


def snaps5(a, x0, n):
    x = x0
    for t in funcgrad.checkpoint_range(n, snapshots=5):
        x = x + DT * a * np.sin(x) * np.cos(x)
    return np.sum(x)


FNS = {"taped": (taped, False), "checkpointed": (ckpt, False), "snapshots=5": (snaps5, False),
       "auto-5MB": (taped, "5MB"), "auto-1GB": (taped, "1GB")}


def grad(k):
    f, b = FNS[k]
    return funcgrad.grad(f, argnums=(0, 1), checkpoint_loops=b)


def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024


X = np.linspace(0.1, 1.0, 12_500)
T = 4000
if len(sys.argv) > 1:
    g = grad(sys.argv[1]); g(0.7, X, 10)
    open("/proc/self/clear_refs", "w").write("5"); base = status("VmRSS")
    g(0.7, X, T); print(max(status("VmHWM") - base, 0)); sys.exit()
gs = {k: grad(k) for k in FNS}
ref = gs["taped"](0.7, X, T)
for k, g in gs.items():
    v = g(0.7, X, T)
    np.testing.assert_allclose(v[0], ref[0], rtol=1e-9); np.testing.assert_allclose(v[1], ref[1], rtol=1e-9)
t = alternating_blocks({k: (lambda g=g: g(0.7, X, T)) for k, g in gs.items()}, 2, 3, warmup=1)
for k in FNS:
    m = int(subprocess.run([sys.executable, __file__, k], capture_output=True, text=True, check=True).stdout.split()[-1])
    print(f"{k:>13}: {t[k]*1e3:8.1f} ms ({t[k]/t['taped']:.2f}x taped), peak memory +{m/1e6:8.1f} MB")
