"""One MLP training step: funcgrad vs hand-written NumPy backprop vs PyTorch / JAX, and against the floor.

float32, batch 128, 784-512-512-10, ReLU, softmax cross-entropy, forward + backward + SGD.
Prints, from one run timed in alternating blocks (benchmarks/_timing.py), the step time of each and
of the floor, the step's 8 GEMMs alone through NumPy's BLAS (issue 18's goal: funcgrad <= 1.15x it),
as ratios; then funcgrad's value_and_grad against the forward pass alone at batch 256 (the cost of
reverse mode over GEMM-bound code, ~3x; goal <= 3.5x); then funcgrad's first-call time (transform +
compile) in a fresh process with a cold cache and with a warm one.

This machine sets OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE, which slow NumPy's BLAS; with
--unset-openblas-env this script re-runs itself without both (it says so in its output).
Every implementation in one run sees the same BLAS settings.

Usage: python benchmarks/mlp_step.py [--reps 20] [--rounds 5] [--unset-openblas-env]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import funcgrad

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import alternating_blocks  # noqa: E402

LR = 0.01


def loss(params, x, y):
    h1 = np.maximum(x @ params["W1"] + params["b1"], 0.0)
    h2 = np.maximum(h1 @ params["W2"] + params["b2"], 0.0)
    logits = h2 @ params["W3"] + params["b3"]
    logits = logits - np.max(logits, axis=1, keepdims=True)
    logp = logits - np.log(np.sum(np.exp(logits), axis=1, keepdims=True))
    return -np.mean(np.sum(logp * y, axis=1))


def init(seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    p = {}
    for i, (a, b) in enumerate([(784, 512), (512, 512), (512, 10)], 1):
        p[f"W{i}"] = (rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(dtype)
        p[f"b{i}"] = np.zeros(b, dtype)
    return p


def data(seed=1, dtype=np.float32, batch=128):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, 784)).astype(dtype)
    y = np.eye(10, dtype=dtype)[rng.integers(0, 10, batch)]
    return x, y


def gemms_alone(p, x):
    """The floor: the step's 8 matrix products (3 forward, 5 backward; the first layer's input gradient is
    not needed) on arrays of the step's shapes, nothing else."""
    h1 = np.empty((x.shape[0], 512), np.float32)
    h2 = np.empty_like(h1)
    lg = np.empty((x.shape[0], 10), np.float32)
    g = np.ones_like(lg)

    def run():
        np.matmul(x, p["W1"], out=h1)
        np.matmul(h1, p["W2"], out=h2)
        np.matmul(h2, p["W3"], out=lg)
        h2.T @ g
        g2 = g @ p["W3"].T
        h1.T @ g2
        g1 = g2 @ p["W2"].T
        x.T @ g1
    return run


def hand_step(p, x, y):
    """Hand-written NumPy forward + backward + SGD (what funcgrad is measured against)."""
    z1 = x @ p["W1"] + p["b1"]
    h1 = np.maximum(z1, 0)
    z2 = h1 @ p["W2"] + p["b2"]
    h2 = np.maximum(z2, 0)
    logits = h2 @ p["W3"] + p["b3"]
    logits = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(logits)
    s = e.sum(axis=1, keepdims=True)
    probs = e / s
    loss_v = -np.mean(np.sum((logits - np.log(s)) * y, axis=1))
    n = x.shape[0]
    g3 = (probs - y) / n
    gW3 = h2.T @ g3
    gb3 = g3.sum(0)
    g2 = (g3 @ p["W3"].T) * (z2 > 0)
    gW2 = h1.T @ g2
    gb2 = g2.sum(0)
    g1 = (g2 @ p["W2"].T) * (z1 > 0)
    gW1 = x.T @ g1
    gb1 = g1.sum(0)
    for k, g in (("W1", gW1), ("b1", gb1), ("W2", gW2), ("b2", gb2), ("W3", gW3), ("b3", gb3)):
        p[k] -= LR * g
    return loss_v


FIRST_CALL = """
import time, sys
t0 = time.perf_counter()
import funcgrad
sys.path.insert(0, {here!r})
from mlp_step import loss, init, data
t1 = time.perf_counter()
p = init(); x, y = data()
t2 = time.perf_counter()
g = funcgrad.grad(loss)(p, x, y)
t3 = time.perf_counter()
print(t1 - t0, t3 - t2)
"""


def first_call(cache_dir):
    env = dict(os.environ, FUNCGRAD_CACHE_DIR=cache_dir)
    code = FIRST_CALL.format(here=os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    imp, call = map(float, out.stdout.split())
    return imp, call


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20, help="calls per block")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of blocks")
    ap.add_argument("--unset-openblas-env", action="store_true")
    args = ap.parse_args()
    if args.unset_openblas_env and ("OPENBLAS_CORETYPE" in os.environ or "OPENBLAS_L2_SIZE" in os.environ):
        env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
        env["FUNCGRAD_BENCH_UNSET"] = "1"
        sys.exit(subprocess.call([sys.executable] + sys.argv, env=env))
    note = ("OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE unset for this run" if os.environ.get("FUNCGRAD_BENCH_UNSET")
            else f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")

    x, y = data()
    gf = funcgrad.grad(loss)
    p_fg = init()

    def fg_step():
        g = gf(p_fg, x, y)
        for k in p_fg:
            p_fg[k] -= LR * g[k]

    p_hand = init()
    # the two agree before timing: same gradient, same step
    g = gf(init(), x, y)
    p_chk = init()
    hand_step(p_chk, x, y)
    for k in g:
        np.testing.assert_allclose(init()[k] - LR * g[k], p_chk[k], rtol=1e-4, atol=1e-6)

    contenders = {"funcgrad.grad (generated source over NumPy)": fg_step,
                  "hand-written NumPy backprop": lambda: hand_step(p_hand, x, y),
                  "floor: the step's 8 GEMMs alone": gemms_alone(init(), x)}
    try:
        import torch
        torch.set_num_threads(os.cpu_count() or 1)
        tp = {k: torch.tensor(v, requires_grad=True) for k, v in init().items()}
        tx, ty = torch.tensor(x), torch.tensor(y)

        def torch_step():
            h1 = torch.relu(tx @ tp["W1"] + tp["b1"])
            h2 = torch.relu(h1 @ tp["W2"] + tp["b2"])
            logits = h2 @ tp["W3"] + tp["b3"]
            lv = -(torch.log_softmax(logits, 1) * ty).sum(1).mean()
            for v in tp.values():
                v.grad = None
            lv.backward()
            with torch.no_grad():
                for v in tp.values():
                    v -= LR * v.grad

        contenders[f"PyTorch {torch.__version__} eager autograd"] = torch_step
    except ImportError:
        print("(PyTorch not installed: its row is left out)")
    try:
        import jax
        import jax.numpy as jnp

        def jloss(p, x, y):
            h1 = jax.nn.relu(x @ p["W1"] + p["b1"])
            h2 = jax.nn.relu(h1 @ p["W2"] + p["b2"])
            logits = h2 @ p["W3"] + p["b3"]
            return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits, 1) * y, 1))

        @jax.jit
        def jstep(p, x, y):
            g = jax.grad(jloss)(p, x, y)
            return {k: p[k] - LR * g[k] for k in p}

        jp = {k: jnp.asarray(v) for k, v in init().items()}
        jx, jy = jnp.asarray(x), jnp.asarray(y)
        state = {"p": jp}

        def jax_step():
            state["p"] = jstep(state["p"], jx, jy)
            jax.block_until_ready(state["p"])

        contenders[f"JAX {jax.__version__} jit(grad)"] = jax_step
    except ImportError:
        print("(JAX not installed: its row is left out)")
    best = alternating_blocks(contenders, args.reps, args.rounds)

    hand = best["hand-written NumPy backprop"]
    floor = best["floor: the step's 8 GEMMs alone"]
    t_fg = best["funcgrad.grad (generated source over NumPy)"]
    print(f"MLP step 784-512-512-10, batch 128, float32 ({note}); alternating blocks of {args.reps} steps, "
          f"{args.rounds} rounds, minimum of block medians")
    print(f"{'implementation':46s} {'ms/step':>9s} {'vs hand NumPy':>14s} {'vs GEMM floor':>14s}")
    for name, t in best.items():
        print(f"{name:46s} {t * 1e3:9.3f} {t / hand:13.2f}x {t / floor:13.2f}x")
    print(f"funcgrad / hand-written NumPy: {t_fg / hand:.2f}x (target <= 1.5x); "
          f"funcgrad / the GEMMs alone: {t_fg / floor:.2f}x (goal <= 1.15x)")

    # reverse mode's own cost: value_and_grad against the forward pass, batch 256
    x2, y2 = data(batch=256)
    p2 = init()
    vg = funcgrad.value_and_grad(loss)
    v, _ = vg(p2, x2, y2)
    assert abs(v - loss(p2, x2, y2)) < 1e-4 * abs(v)
    t2 = alternating_blocks({"value_and_grad": lambda: vg(p2, x2, y2), "forward": lambda: loss(p2, x2, y2)},
                            args.reps, args.rounds)
    print(f"batch 256: funcgrad value_and_grad {t2['value_and_grad'] * 1e3:.3f} ms, the forward pass (NumPy) "
          f"{t2['forward'] * 1e3:.3f} ms: {t2['value_and_grad'] / t2['forward']:.2f}x (goal <= 3.5x)")
    with tempfile.TemporaryDirectory() as d:
        imp_c, cold = first_call(d)
        imp_w, warm = first_call(d)
    print(f"funcgrad first call in a fresh process: {cold:.3f} s with a cold cache, {warm:.3f} s warm "
          f"(targets <= 2 s / <= 0.5 s; `import funcgrad` itself: {imp_c:.2f} s)")


if __name__ == "__main__":
    main()
