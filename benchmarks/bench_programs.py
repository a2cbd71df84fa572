"""First-call times of the real programs in tests/programs/ (issue 15's budget: a cold first call <= 5 s).

For each program and strategy, two fresh processes share one new cache directory:

* cold: the first ``value_and_grad`` call in a process whose funcgrad cache (generated sources and
  Numba's disk cache) is empty: transforming, generating and compiling included;
* warm: the first call in a second process, served from the disk cache;

then the steady-state time of one more call in the warm process. Numba's own start-up (importing it,
its first compilation of anything) is inside the first call, as a user sees it.

    python benchmarks/bench_programs.py                      # every program, jit="auto"
    python benchmarks/bench_programs.py --jit auto kernels   # several strategies
    python benchmarks/bench_programs.py --programs mlp hmm --size large
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUDGET_S = 5.0

_CHILD = r"""
import importlib, json, sys, time
t0 = time.perf_counter()
import numpy as np
import funcgrad
t_import = time.perf_counter() - t0
name, jit, size = sys.argv[1], sys.argv[2], sys.argv[3]
jit = {"False": False}.get(jit, jit)
m = importlib.import_module("tests.programs." + name)
f = m
for part in m.PROGRAM["f"].split("."):
    f = getattr(f, part)
args, kwargs = m.make_inputs(size=size)
g = funcgrad.value_and_grad(f, argnums=m.PROGRAM["argnums"], jit=jit)
t0 = time.perf_counter()
g(*args, **kwargs)
first = time.perf_counter() - t0
t0 = time.perf_counter()
n = 0
while n < 3 or time.perf_counter() - t0 < 0.2:
    g(*args, **kwargs)
    n += 1
steady = (time.perf_counter() - t0) / n
print(json.dumps({"import": t_import, "first": first, "steady": steady}))
"""


def run_child(name, jit, size, cache):
    env = dict(os.environ, FUNCGRAD_CACHE_DIR=cache, PYTHONWARNINGS="ignore")
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", _CHILD, name, str(jit), size], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": last[:120], "wall": wall}
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["wall"] = wall
    return out


def main(argv=None):
    sys.path.insert(0, ROOT)
    from tests.programs import NAMES
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--programs", nargs="*", default=NAMES)
    ap.add_argument("--jit", nargs="*", default=["auto"])
    ap.add_argument("--size", default="small", choices=["small", "large"])
    a = ap.parse_args(argv)
    print(f"{'program':<14}{'jit':<9}{'cold first':>12}{'warm first':>12}{'steady':>11}  budget (cold <= {BUDGET_S:g} s)")
    over = 0
    for name in a.programs:
        for jit in a.jit:
            with tempfile.TemporaryDirectory(prefix="funcgrad-bench-") as cache:
                cold = run_child(name, jit, a.size, cache)
                warm = run_child(name, jit, a.size, cache) if "error" not in cold else cold
            if "error" in cold:
                print(f"{name:<14}{jit!s:<9}  error: {cold['error']}")
                over += 1
                continue
            ok = cold["first"] <= BUDGET_S
            over += not ok
            print(f"{name:<14}{jit!s:<9}{cold['first']:>11.2f}s{warm['first']:>11.2f}s{warm['steady'] * 1e3:>9.2f}ms  "
                  f"{'ok' if ok else 'OVER'}", flush=True)
    print(f"{over} over budget or failing" if over else "all within budget")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
