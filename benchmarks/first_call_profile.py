"""Where a first call's time goes: funcgrad's transform, Numba compiling the kernels, Numba compiling the
generated function (typing, lowering, LLVM), in a fresh process with empty caches (or warm ones).

For each program (``bundle``: tests/programs/bundle.py at 2,000 observations; ``ba``, ``lstm``, ``gmm``:
benchmarks/adbench_objectives.py at adbench.py's small size) a child process calls ``value_and_grad(jit="auto")``
once and reports, in CPU seconds of the process (user + system; the machine is shared, wall time is printed
too):

* Numba's first-use set-up (its typing and target registries, paid once by any process that compiles or loads
  compiled code), done first on its own;
* funcgrad's transform (parse to generated source, written and imported);
* every Numba compilation, from Numba's event API (``numba:compile``), as a tree: the generated function's own
  time (exclusive of what it compiles inside) and each kernel specialisation it compiles (inclusive), with the
  generated function's pipeline passes (Numba's own wall-clock timings; type inference includes the kernels'
  compiles; native lowering includes LLVM's optimisation and code generation).

    python benchmarks/first_call_profile.py                      # bundle, cold (empty caches)
    python benchmarks/first_call_profile.py --tasks bundle lstm --warm-kernels
    python benchmarks/first_call_profile.py --tasks ba --warm     # the second process: served from disk

``--warm-kernels``: a first process fills the caches, then the generated code's caches are deleted (funcgrad's
and Numba's for it) and the kernels' Numba cache is kept: a user's second program. ``--warm``: the second
process, every cache kept.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))

_CHILD = r"""
import collections, json, resource, sys, time
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
sys.path.insert(0, sys.argv[1])
task = sys.argv[2]
import numpy as np
import funcgrad
import funcgrad.api as api
from numba.core import event
from numba.core.registry import cpu_target
out = {}
c = cpu()
cpu_target.typing_context.refresh()
cpu_target.target_context.refresh()
out["numba_setup"] = cpu() - c
builds = []
real_build = api.build
def build(*a, **k):
    c = cpu()
    r = real_build(*a, **k)
    builds.append(cpu() - c)
    return r
api.build = build
stack, compiles = [], []
class Listener(event.Listener):
    def on_start(self, e):
        stack.append([cpu(), 0.0])
    def on_end(self, e):
        c0, inner = stack.pop()
        dt = cpu() - c0
        if stack:
            stack[-1][1] += dt
        d = e.data or {}
        f = getattr(d.get("dispatcher"), "py_func", None)
        compiles.append({"depth": len(stack), "name": getattr(f, "__qualname__", "?"),
                         "module": getattr(f, "__module__", None) or "", "args": str(d.get("args"))[:90],
                         "incl": dt, "excl": dt - inner})
event.register("numba:compile", Listener())
if task == "bundle":
    from tests.programs import bundle as m
    args, _ = m.make_inputs(size="large", n_obs=2000)
    g = funcgrad.value_and_grad(m.reprojection_error, argnums=(0, 1, 2), jit="auto")
else:
    import adbench
    args = adbench.make_inputs(task, "small")
    g = funcgrad.value_and_grad(getattr(adbench.A, adbench.OBJECTIVE[task]), argnums=adbench.ARGNUMS[task],
                                jit="auto")
t, c = time.perf_counter(), cpu()
g(*args)
out["first_cpu"], out["first_wall"] = cpu() - c, time.perf_counter() - t
out["transform"] = sum(builds)
out["compiles"] = compiles
passes = {}
import gc
import numba
for o in gc.get_objects():
    if isinstance(o, numba.core.registry.CPUDispatcher) and (o.py_func.__module__ or "").startswith(
            "funcgrad_generated_"):
        for cres in o.overloads.values():
            times = collections.Counter()
            for k, v in (getattr(cres, "metadata", None) or {}).get("pipeline_times", {}).get("nopython", {}).items():
                times[k.split("_", 1)[1]] += v.init + v.run + v.finalize
            if times:
                passes[o.py_func.__name__] = dict(times.most_common(4))
out["passes"] = passes
print(json.dumps(out))
"""


def run(task, cache):
    env = dict(os.environ, FUNCGRAD_CACHE_DIR=cache, NUMBA_CACHE_DIR=os.path.join(cache, "numba"),
               PYTHONWARNINGS="ignore")
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-c", _CHILD, HERE, task], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=1800)
    if p.returncode != 0:
        raise RuntimeError((p.stderr.strip().splitlines() or ["?"])[-1])
    return json.loads(p.stdout.strip().splitlines()[-1])


def forget_generated(cache):
    """Delete the generated code and Numba's cache of it; keep the kernels' Numba cache."""
    shutil.rmtree(os.path.join(cache, "generated"), ignore_errors=True)
    for d in glob.glob(os.path.join(cache, "numba", "generated*")):
        shutil.rmtree(d, ignore_errors=True)


def report(task, how, r, top):
    cs = r["compiles"]
    gen = [c for c in cs if c["depth"] == 0 and c["module"].startswith("funcgrad_generated_")]
    kernels = [c for c in cs if c["depth"] == 1]
    print(f"\n{task} ({how}): first call {r['first_cpu']:.2f} s CPU ({r['first_wall']:.2f} s wall), plus Numba's "
          f"first-use set-up {r['numba_setup']:.2f} s")
    print(f"  funcgrad transform                 {r['transform']:6.2f} s")
    for c in gen:
        print(f"  Numba: {c['name'][:26]:26s}   {c['excl']:6.2f} s  (its own typing, lowering, LLVM)")
    print(f"  Numba: {len(kernels):3d} kernel specialisations  {sum(c['incl'] for c in kernels):6.2f} s  "
          f"({len(cs)} compilations in all)")
    for c in sorted(kernels, key=lambda c: -c["incl"])[:top]:
        print(f"      {c['incl']:5.2f} s  {c['module'][-22:]:22s} {c['name'][:34]:34s} {c['args'][:60]}")
    for name, times in r["passes"].items():
        print(f"  passes of {name} (Numba's wall-clock timings): " +
              ", ".join(f"{k} {v:.2f} s" for k, v in times.items()))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", nargs="*", default=["bundle"], choices=["bundle", "ba", "lstm", "gmm"])
    ap.add_argument("--warm-kernels", action="store_true", help="kernels' Numba cache kept (a second program)")
    ap.add_argument("--warm", action="store_true", help="every cache kept (a second process)")
    ap.add_argument("--top", type=int, default=8, help="kernel specialisations listed")
    a = ap.parse_args(argv)
    for task in a.tasks:
        with tempfile.TemporaryDirectory(prefix="funcgrad-profile-") as cache:
            how = "cold: empty caches"
            if a.warm or a.warm_kernels:
                run(task, cache)
                how = "warm: every cache kept"
                if a.warm_kernels:
                    forget_generated(cache)
                    how = "the kernels' Numba cache kept, the generated code's deleted"
            report(task, how, run(task, cache), a.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
