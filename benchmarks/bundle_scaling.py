"""Bundle adjustment's gradient as the observations grow (issue 18): loops over small arrays.

``tests/programs/bundle.py`` sums a reprojection error over observations in a Python ``for`` loop, each
iteration doing 3-vector work through helpers. For each number of observations (20 cameras, 300
points) this prints the time of ``value_and_grad(reprojection_error, argnums=(0, 1, 2), jit=JIT)``,
the time of the same Python source under plain ``numba.njit`` (the helpers njit-ed too) and under
``funcgrad.jit`` (which, like the gradient, holds the small arrays as scalars: the like-for-like
primal), the ratios, and microseconds per observation (flat when the gradient scales linearly). The two are timed
in alternating blocks (A for ``--reps`` calls, B for ``--reps`` calls, repeated ``--blocks`` times);
each figure is the minimum over blocks of the block's median.

Then the first call as a user meets it, in fresh processes sharing one new cache directory: cold
(empty funcgrad and Numba caches: transforming, generating and compiling included) and warm (a second
process, served from the disk cache), at the first size, wall and CPU seconds (the machine is shared).

    python benchmarks/bundle_scaling.py                        # 2k, 8k, 32k observations, jit="auto"
    python benchmarks/bundle_scaling.py --n-obs 2000 --no-first
    python benchmarks/bundle_scaling.py --jit whole --blocks 7 --reps 5
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import tempfile
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CHILD = r"""
import json, resource, sys, time
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
t0 = time.perf_counter()
import numpy as np
import funcgrad
from tests.programs import bundle as m
t_import = time.perf_counter() - t0
jit, n_obs = sys.argv[1], int(sys.argv[2])
jit = {"False": False, "True": True}.get(jit, jit)
args, _ = m.make_inputs(size="large", n_obs=n_obs)
g = funcgrad.value_and_grad(m.reprojection_error, argnums=(0, 1, 2), jit=jit)
t0, c0 = time.perf_counter(), cpu()
g(*args)
first, first_cpu = time.perf_counter() - t0, cpu() - c0
print(json.dumps({"import": t_import, "first": first, "cpu": first_cpu}))
"""


def first_call(jit, n_obs, cache):
    env = dict(os.environ, FUNCGRAD_CACHE_DIR=cache, NUMBA_CACHE_DIR=os.path.join(cache, "numba"),
               PYTHONWARNINGS="ignore")
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-c", _CHILD, str(jit), str(n_obs)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise RuntimeError((p.stderr.strip().splitlines() or ["?"])[-1])
    return json.loads(p.stdout.strip().splitlines()[-1])


def plain_njit(module):
    """``module``'s functions compiled with ``numba.njit`` as written (helpers njit-ed, so calls resolve)."""
    import numba
    ns = {"__name__": module.__name__ + "_njit"}
    exec(compile(inspect.getsource(module), module.__file__, "exec"), ns)
    for k, v in list(ns.items()):
        if isinstance(v, types.FunctionType) and v.__module__ == ns["__name__"] and k != "make_inputs":
            ns[k] = numba.njit(v)
    return ns


def main(argv=None):
    sys.path.insert(0, ROOT)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _timing import alternating_blocks
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n-obs", type=int, nargs="*", default=[2000, 8000, 32000])
    ap.add_argument("--jit", default="auto")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--no-first", action="store_true", help="skip the cold/warm first-call processes")
    a = ap.parse_args(argv)
    jit = {"False": False, "True": True}.get(a.jit, a.jit)

    import numpy as np
    import funcgrad
    from tests.programs import bundle as m

    primal = plain_njit(m)["reprojection_error"]
    g = funcgrad.value_and_grad(m.reprojection_error, argnums=(0, 1, 2), jit=jit)
    fj = funcgrad.jit(m.reprojection_error)   # funcgrad's own compiled primal (small arrays held as scalars too)
    print(f"bundle adjustment, value_and_grad(jit={jit!r}) vs plain numba.njit and funcgrad.jit of the same source; "
          f"min over {a.blocks} alternating blocks of the median of {a.reps} calls")
    print(f"{'n_obs':>7}{'gradient':>12}{'njit primal':>13}{'ratio':>8}{'funcgrad.jit':>14}{'ratio':>8}"
          f"{'grad us/obs':>13}")
    for n in a.n_obs:
        args, _ = m.make_inputs(size="large", n_obs=n)
        val, grads = g(*args)
        pv, jv = primal(*args), fj(*args)
        assert np.allclose(val, pv) and np.allclose(jv, pv), (val, pv, jv)
        t = alternating_blocks({"gradient": lambda: g(*args), "primal": lambda: primal(*args),
                                "funcgrad.jit": lambda: fj(*args)}, a.reps, a.blocks)
        tg, tp, tj = t["gradient"], t["primal"], t["funcgrad.jit"]
        print(f"{n:>7}{tg * 1e3:>10.3f}ms{tp * 1e3:>11.3f}ms{tg / tp:>7.2f}x{tj * 1e3:>12.3f}ms{tg / tj:>7.2f}x"
              f"{tg / n * 1e6:>12.3f}", flush=True)

    if not a.no_first:
        with tempfile.TemporaryDirectory(prefix="funcgrad-bench-") as cache:
            cold = first_call(jit, a.n_obs[0], cache)
            warm = first_call(jit, a.n_obs[0], cache)
        print(f"first call at n_obs={a.n_obs[0]}: cold {cold['first']:.2f} s ({cold['cpu']:.2f} s CPU), warm "
              f"{warm['first']:.2f} s ({warm['cpu']:.2f} s CPU) (import funcgrad: {warm['import']:.2f} s, not "
              "included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
