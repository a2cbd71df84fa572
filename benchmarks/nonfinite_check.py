"""Cost of DataParallel's non-finite gradient check on the digits MLP (issue 19).

Run: .venv/bin/mpiexec -n 2 .venv/bin/python benchmarks/nonfinite_check.py
Times DataParallel steps of examples/ddp_digits.py's MLP (hand-written gradient, global batch
128) with nonfinite="raise" and nonfinite=None, interleaved in blocks, and the check's own pass
(ddp._all_finite over the packed gradient); rank 0 prints the medians and the ratio.
"""
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import ddp_digits as ex  # noqa: E402

import funcgrad.dist as fd  # noqa: E402
from funcgrad.dist import ddp as _ddp  # noqa: E402

w = fd.world()
(Xtr, ytr), _ = ex.load_data(0)
Y1h = np.eye(10)[ytr]
per = 128 // w.size
grad_fn, _ = ex.make_grad(True, Xtr, Y1h, w.rank)
runs = {}
for mode in ("raise", None):
    dp = fd.DataParallel(ex.make_optimizer(0.1), grad_fn=grad_fn, returns_loss=True, check_every=0,
                         nonfinite=mode)
    prm, st = dp.init(ex.init_mlp(0))
    runs[mode] = [dp, prm, st, []]
rng = np.random.default_rng(w.rank)
for block in range(40):
    for mode in ("raise", None):
        dp, prm, st, ts = runs[mode]
        for _ in range(10):
            b = rng.integers(0, len(Xtr), per)
            t0 = time.perf_counter()
            prm, st = dp.step(prm, st, Xtr[b], Y1h[b])
            ts.append(time.perf_counter() - t0)
        runs[mode][1:3] = prm, st
lay = next(iter(runs["raise"][0]._layouts.values()))
g = lay.gbuf[:lay.n]
t = []
for _ in range(2000):
    t0 = time.perf_counter()
    _ddp._all_finite(g)
    t.append(time.perf_counter() - t0)
on, off, chk = (float(np.median(v)) for v in (runs["raise"][3], runs[None][3], t))
if w.rank == 0:
    print(f"p={w.size} n={lay.n} float64: step with check {on * 1e6:.0f} us, without {off * 1e6:.0f} us; "
          f"the check's pass {chk * 1e6:.1f} us = {100 * chk / off:.2f}% of a step")
