"""LeNet training step: funcgrad vs PyTorch (and JAX when installed), ratios from the same run.

float32, batch 64, 1x28x28 -> conv 6@5x5 -> relu -> maxpool 2 -> conv 16@5x5 -> relu
-> maxpool 2 -> dense 120 -> relu -> dense 84 -> relu -> dense 10 -> cross-entropy;
one step = forward + backward + SGD update (in place for every framework).

Timed in alternating blocks (--steps steps of each contestant in turn, --rounds rounds; the minimum of
the block medians, benchmarks/_timing.py):

* funcgrad: ``funcgrad.grad`` of the loss written in plain NumPy with funcgrad.nn
  (the real thing), then the SGD update;
* manual: the same kernels called directly in the order the generated adjoint calls
  them (what the kernels cost without the AD layer);
* torch: the same network with torch.nn.functional, autograd, in-place SGD;
* jax: jax.jit(value_and_grad) + SGD, when jax is importable.

OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE (set on some machines, they slow BLAS) are
removed for this run only: the script re-executes itself without them and says so.
It also sets OPENBLAS_NUM_THREADS=1 unless you set it: funcgrad's conv and pool kernels
split the batch over their own threads, so NumPy's BLAS (used by funcgrad for the dense
layers only) runs on one thread, as the examples run it; OpenBLAS threads spinning after
each call would otherwise steal the cores from whichever contestant runs next. This only
slows funcgrad's dense layers; torch and JAX keep their own thread pools. For the same reason it
sets NUMBA_THREADING_LAYER=workqueue unless you set it: Numba's default OpenMP layer leaves its
threads spinning after each parallel kernel, and torch's OpenMP threads then fight them for the 2
cores (measured in alternating blocks: torch 27 ms a step instead of 2.3 ms). With
OMP_WAIT_POLICY=PASSIVE instead, funcgrad takes 2.3 ms and torch 4.1 ms (its own threads stop
spinning too): the workqueue layer is the fairer setting for both.

Importing PyTorch speeds funcgrad's step up (2026-11-28: 3.6-3.7 ms in a process without it, 2.3 ms with it,
benchmarks/results/lenet_step_malloc_2026-11-28_s18.txt): without it glibc hands the step's large temporaries
(conv outputs, im2col buffers: 0.2-1 MB each) fresh mmapped pages every step, ~850 page faults a step; torch's
import leaves glibc's mmap threshold raised, so they are reused. The script prints funcgrad's page faults a
step before torch is imported and after the timing, so a run shows which regime it timed.

    .venv/bin/python benchmarks/lenet_step.py [--steps 20] [--rounds 5] [--warmup 5] [--threads N]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

_BLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
if (any(v in os.environ for v in _BLAS_VARS) or "OPENBLAS_NUM_THREADS" not in os.environ
        or "NUMBA_THREADING_LAYER" not in os.environ) and "_LENET_REEXEC" not in os.environ:
    env = {k: v for k, v in os.environ.items() if k not in _BLAS_VARS}
    env["_LENET_REEXEC"] = ",".join(v for v in _BLAS_VARS if v in os.environ)
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env.setdefault("NUMBA_THREADING_LAYER", "workqueue")
    os.execve(sys.executable, [sys.executable] + sys.argv, env)

import numpy as np  # noqa: E402

import funcgrad  # noqa: E402
import funcgrad.nn as nn  # noqa: E402
from funcgrad.kernels import cpu_nn as K  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import alternating_blocks  # noqa: E402

BATCH = 64
LR = 0.01
SHAPES = {"c1w": (6, 1, 5, 5), "c1b": (6,), "c2w": (16, 6, 5, 5), "c2b": (16,),
          "f1w": (256, 120), "f1b": (120,), "f2w": (120, 84), "f2b": (84,), "f3w": (84, 10), "f3b": (10,)}


def init_params(seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    p = {}
    for k, s in SHAPES.items():
        fan_in = int(np.prod(s[1:])) if k.startswith("c") and k.endswith("w") else s[0]
        if k.endswith("b"):
            p[k] = np.zeros(s, dtype)
        else:
            bound = 1.0 / np.sqrt(fan_in)
            p[k] = rng.uniform(-bound, bound, s).astype(dtype)
    return p


def lenet_loss(params, x, y):
    h = nn.conv2d(x, params["c1w"], params["c1b"])
    h = nn.relu(h)
    h = nn.max_pool2d(h, 2)
    h = nn.conv2d(h, params["c2w"], params["c2b"])
    h = nn.relu(h)
    h = nn.max_pool2d(h, 2)
    h = np.reshape(h, (h.shape[0], 256))
    h = nn.relu(h @ params["f1w"] + params["f1b"])
    h = nn.relu(h @ params["f2w"] + params["f2b"])
    logits = h @ params["f3w"] + params["f3b"]
    return nn.cross_entropy(logits, y)


def sgd_(params, grads):
    for k in params:
        params[k] -= LR * grads[k]


# ----------------------------------------------------------------------------- the steps
def make_funcgrad_step():
    g = funcgrad.grad(lenet_loss)

    def step(params, x, y):
        sgd_(params, g(params, x, y))
    return step


def conv_forward(x, p):
    """The convolutional half of the forward pass by funcgrad's kernels: (c1, r1, m1, c2, r2, m2)."""
    c1 = K.conv2d(x, p["c1w"], p["c1b"])
    r1 = K.relu(c1)
    m1 = K.max_pool2d(r1, 2)
    c2 = K.conv2d(m1, p["c2w"], p["c2b"])
    r2 = K.relu(c2)
    return c1, r1, m1, c2, r2, K.max_pool2d(r2, 2)


def manual_step(params, x, y):
    """The kernels in the order the generated adjoint calls them (no AD layer)."""
    p = params
    c1, r1, m1, c2, r2, m2 = conv_forward(x, p)
    f = m2.reshape(m2.shape[0], 256)
    a1 = f @ p["f1w"] + p["f1b"]
    h1 = K.relu(a1)
    a2 = h1 @ p["f2w"] + p["f2b"]
    h2 = K.relu(a2)
    z = h2 @ p["f3w"] + p["f3b"]
    # loss value computed like the real step does (value is not used)
    K.cross_entropy(z, y, "mean")
    g = {}
    dz = K.cross_entropy_grad(1.0, z, y, "mean")
    g["f3w"] = h2.T @ dz
    g["f3b"] = dz.sum(0)
    da2 = K.relu_grad(dz @ p["f3w"].T, a2)
    g["f2w"] = h1.T @ da2
    g["f2b"] = da2.sum(0)
    da1 = K.relu_grad(da2 @ p["f2w"].T, a1)
    g["f1w"] = f.T @ da1
    g["f1b"] = da1.sum(0)
    dm2 = (da1 @ p["f1w"].T).reshape(m2.shape)
    dc2 = K.relu_grad(K.max_pool2d_grad(dm2, r2, 2), c2)
    g["c2w"] = K.conv2d_weight_grad(dc2, m1, p["c2w"].shape)
    g["c2b"] = K.channel_sum(dc2)
    dm1 = K.conv2d_input_grad(dc2, p["c2w"], m1.shape)
    dc1 = K.relu_grad(K.max_pool2d_grad(dm1, r1, 2), c1)
    g["c1w"] = K.conv2d_weight_grad(dc1, x, p["c1w"].shape)
    g["c1b"] = K.channel_sum(dc1)
    sgd_(params, g)


def make_torch_step(params, threads):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}

    def step(_params, x, y):
        xt, yt = torch.from_numpy(x), torch.from_numpy(y)
        h = F.max_pool2d(F.relu(F.conv2d(xt, tp["c1w"], tp["c1b"])), 2)
        h = F.max_pool2d(F.relu(F.conv2d(h, tp["c2w"], tp["c2b"])), 2)
        h = h.reshape(h.shape[0], 256)
        h = F.relu(h @ tp["f1w"] + tp["f1b"])
        h = F.relu(h @ tp["f2w"] + tp["f2b"])
        loss = F.cross_entropy(h @ tp["f3w"] + tp["f3b"], yt)
        for v in tp.values():
            v.grad = None
        loss.backward()
        with torch.no_grad():
            for v in tp.values():
                v -= LR * v.grad
    return step, tp, torch.__version__


def make_jax_step(params):
    import jax
    import jax.numpy as jnp

    def loss(p, x, y):
        dn = ("NCHW", "OIHW", "NCHW")
        h = jax.lax.conv_general_dilated(x, p["c1w"], (1, 1), "VALID", dimension_numbers=dn) + p["c1b"][:, None, None]
        h = jax.lax.reduce_window(jax.nn.relu(h), -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
        h = jax.lax.conv_general_dilated(h, p["c2w"], (1, 1), "VALID", dimension_numbers=dn) + p["c2b"][:, None, None]
        h = jax.lax.reduce_window(jax.nn.relu(h), -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
        h = h.reshape(h.shape[0], 256)
        h = jax.nn.relu(h @ p["f1w"] + p["f1b"])
        h = jax.nn.relu(h @ p["f2w"] + p["f2b"])
        z = h @ p["f3w"] + p["f3b"]
        return jnp.mean(jax.nn.logsumexp(z, -1) - jnp.take_along_axis(z, y[:, None], 1)[:, 0])

    @jax.jit
    def upd(p, x, y):
        g = jax.grad(loss)(p, x, y)
        return jax.tree_util.tree_map(lambda a, b: a - LR * b, p, g)

    state = {"p": {k: jnp.asarray(v) for k, v in params.items()}}

    def step(_params, x, y):
        state["p"] = upd(state["p"], x, y)
        jax.block_until_ready(state["p"])
    return step, jax.__version__


def block_medians(steps_by_name, batches, warmup, steps, rounds):
    """Milliseconds per step of each contestant in alternating blocks (benchmarks/_timing.py): ``steps`` steps
    of one, then of the next, for ``rounds`` rounds; the minimum over rounds of each block's median. (One step
    of each in turn would let one framework's spinning threads slow the next.)"""
    calls = {}
    for n, (fn, params) in steps_by_name.items():
        it = {"i": 0}

        def call(fn=fn, params=params, it=it):
            x, y = batches[it["i"] % len(batches)]
            it["i"] += 1
            fn(params, x, y)
        calls[n] = call
    return {n: 1e3 * v for n, v in alternating_blocks(calls, steps, rounds, warmup).items()}


def _faults_per_step(step, params, batches, n=20):
    """Minor page faults per call of ``step`` over ``n`` calls (nan where ``resource`` is missing: Windows)."""
    try:
        import resource
    except ImportError:
        return float("nan")
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for i in range(n):
        step(params, *batches[i % len(batches)])
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / n


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5, help="rounds of alternating blocks of --steps steps")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="torch intra-op threads (numba uses NUMBA_NUM_THREADS)")
    args = ap.parse_args(argv)

    if os.environ.get("_LENET_REEXEC"):
        print(f"note: unset {os.environ['_LENET_REEXEC']} for this run (they slow OpenBLAS)")
    print(f"note: OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')} for NumPy's BLAS "
          f"(funcgrad's conv/pool kernels run on their own threads), "
          f"NUMBA_THREADING_LAYER={os.environ.get('NUMBA_THREADING_LAYER')}")
    import numba
    print(f"machine: {os.cpu_count()} cores; numba {numba.__version__} ({numba.config.NUMBA_NUM_THREADS} threads), "
          f"numpy {np.__version__}")
    rng = np.random.default_rng(0)
    batches = [(rng.normal(size=(BATCH, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, BATCH))
               for _ in range(4)]

    # correctness guard: funcgrad's gradient equals the manual kernels' and torch's
    p0 = init_params()

    t = time.perf_counter()
    fg_step = None
    try:
        fg_step = make_funcgrad_step()
        p = {k: v.copy() for k, v in p0.items()}
        fg_step(p, *batches[0])
        print(f"funcgrad: first call (transform + compile/load) {time.perf_counter() - t:.2f} s")
        pm = {k: v.copy() for k, v in p0.items()}
        manual_step(pm, *batches[0])
        err = max(float(np.max(np.abs(p[k] - pm[k]))) for k in p)
        print(f"funcgrad vs manual kernels after one step: max |diff| = {err:.2e}")
        print(f"funcgrad: {_faults_per_step(fg_step, p, batches):.0f} minor page faults a step (PyTorch not imported)")
    except Exception as e:  # the AD core is young: still report the kernels' speed
        print(f"funcgrad.grad failed ({type(e).__name__}: {e}); timing the manual kernel step only")
        fg_step = None

    contestants = {}
    if fg_step is not None:
        contestants["funcgrad"] = (fg_step, {k: v.copy() for k, v in p0.items()})
    contestants["manual kernels"] = (manual_step, {k: v.copy() for k, v in p0.items()})
    versions = []
    try:
        tstep, tp, tv = make_torch_step(p0, args.threads)
        # one step on the same batch must give the same parameters as funcgrad's manual step
        tstep(None, *batches[0])
        pm = {k: v.copy() for k, v in p0.items()}
        manual_step(pm, *batches[0])
        terr = max(float(np.max(np.abs(tp[k].detach().numpy() - pm[k]))) for k in pm)
        print(f"torch vs funcgrad kernels after one step: max |diff| = {terr:.2e}")
        contestants[f"torch ({args.threads} threads)"] = (tstep, None)
        versions.append(f"torch {tv}")
    except ImportError:
        print("torch not installed: no torch comparison")
    try:
        jstep, jv = make_jax_step(p0)
        contestants["jax (jit)"] = (jstep, None)
        versions.append(f"jax {jv}")
    except ImportError:
        pass
    results = block_medians(contestants, batches, args.warmup, args.steps, args.rounds)
    if fg_step is not None:
        print(f"funcgrad: {_faults_per_step(fg_step, contestants['funcgrad'][1], batches):.0f} minor page faults a "
              f"step after the timing{' (PyTorch imported)' if 'torch' in sys.modules else ''}")

    if versions:
        print("peers: " + ", ".join(versions))
    ref_key = next((k for k in results if k.startswith("torch")), None)
    print(f"\nLeNet step, float32, batch {BATCH}: alternating blocks of {args.steps} steps, {args.rounds} rounds, "
          "minimum of block medians")
    for k, v in results.items():
        ratio = f"  {v / results[ref_key]:.2f}x torch" if ref_key else ""
        print(f"  {k:<22s} {v:8.2f} ms{ratio}")
    return results


if __name__ == "__main__":
    main()
