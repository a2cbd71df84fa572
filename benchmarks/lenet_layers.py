"""Where LeNet's step goes: each convolution and pooling kernel funcgrad's step calls, against PyTorch's op.

The same shapes as benchmarks/lenet_step.py (float32, batch 64), the same environment (that script's
re-exec: OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE removed for this run, OPENBLAS_NUM_THREADS=1,
NUMBA_THREADING_LAYER=workqueue). Per op, funcgrad's kernel (funcgrad.kernels.cpu_nn) and PyTorch's ATen op
(conv2d, convolution_backward for the input's and the weight's gradients, max_pool2d_with_indices and its
backward) are timed in alternating blocks (benchmarks/_timing.py), their results checked equal first. The
dense layers are NumPy's BLAS in both and are left out. It prints each op's time and ratio and the sums, so
a step's gap to PyTorch can be read op by op.

    .venv/bin/python benchmarks/lenet_layers.py [--reps 20] [--rounds 5]   (PyTorch needed: PYTHONPATH)
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lenet_step as L  # noqa: E402  (re-executes this script with lenet_step's environment)
from _timing import alternating_blocks  # noqa: E402

import numpy as np  # noqa: E402

K = L.K


def ops(x, p):
    """``{op: (funcgrad call, torch call)}`` on the activations of one forward pass."""
    import torch
    A = torch.ops.aten
    c1, r1, m1, c2, r2, m2 = L.conv_forward(x, p)
    rng = np.random.default_rng(1)
    g2 = rng.standard_normal(c2.shape).astype(np.float32)
    g1 = rng.standard_normal(c1.shape).astype(np.float32)
    gm2 = rng.standard_normal(m2.shape).astype(np.float32)
    gm1 = rng.standard_normal(m1.shape).astype(np.float32)
    T = {k: torch.from_numpy(v) for k, v in dict(x=x, m1=m1, r1=r1, r2=r2, g1=g1, g2=g2, gm1=gm1, gm2=gm2,
                                                     **p).items()}
    _, i1 = A.max_pool2d_with_indices(T["r1"], [2, 2], [2, 2])
    _, i2 = A.max_pool2d_with_indices(T["r2"], [2, 2], [2, 2])

    def conv_bwd(g, inp, w, mask):
        return A.convolution_backward(g, inp, w, [w.shape[0]], [1, 1], [0, 0], [1, 1], False, [0, 0], 1, mask)

    return {
        "conv1 forward": (lambda: K.conv2d(x, p["c1w"], p["c1b"]),
                          lambda: A.conv2d(T["x"], T["c1w"], T["c1b"])),
        "conv1 weight grad": (lambda: K.conv2d_weight_grad(g1, x, p["c1w"].shape),
                              lambda: conv_bwd(T["g1"], T["x"], T["c1w"], [False, True, False])[1]),
        "pool1 forward": (lambda: K.max_pool2d(r1, 2), lambda: A.max_pool2d_with_indices(T["r1"], [2, 2], [2, 2])),
        "pool1 backward": (lambda: K.max_pool2d_grad(gm1, r1, 2),
                           lambda: A.max_pool2d_with_indices_backward(T["gm1"], T["r1"], [2, 2], [2, 2], [0, 0],
                                                                       [1, 1], False, i1)),
        "conv2 forward": (lambda: K.conv2d(m1, p["c2w"], p["c2b"]),
                          lambda: A.conv2d(T["m1"], T["c2w"], T["c2b"])),
        "conv2 input grad": (lambda: K.conv2d_input_grad(g2, p["c2w"], m1.shape),
                             lambda: conv_bwd(T["g2"], T["m1"], T["c2w"], [True, False, False])[0]),
        "conv2 weight grad": (lambda: K.conv2d_weight_grad(g2, m1, p["c2w"].shape),
                              lambda: conv_bwd(T["g2"], T["m1"], T["c2w"], [False, True, False])[1]),
        "pool2 forward": (lambda: K.max_pool2d(r2, 2), lambda: A.max_pool2d_with_indices(T["r2"], [2, 2], [2, 2])),
        "pool2 backward": (lambda: K.max_pool2d_grad(gm2, r2, 2),
                           lambda: A.max_pool2d_with_indices_backward(T["gm2"], T["r2"], [2, 2], [2, 2], [0, 0],
                                                                       [1, 1], False, i2)),
    }


def _as_array(v):
    v = v[0] if isinstance(v, tuple) else v
    return v.detach().numpy() if hasattr(v, "detach") else np.asarray(v)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch intra-op threads")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("PyTorch is not importable: nothing to compare (put it on PYTHONPATH)")
        return 0
    torch.set_num_threads(args.threads)
    if os.environ.get("_LENET_REEXEC"):
        print(f"note: unset {os.environ['_LENET_REEXEC']} for this run (they slow OpenBLAS)")
    print(f"note: OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}, "
          f"NUMBA_THREADING_LAYER={os.environ.get('NUMBA_THREADING_LAYER')}, torch {torch.__version__} "
          f"({args.threads} threads); alternating blocks of {args.reps} calls, {args.rounds} rounds")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(L.BATCH, 1, 28, 28)).astype(np.float32)
    table = ops(x, L.init_params())
    for name, (f, t) in table.items():   # the same results (and every kernel compiled) before timing
        want = _as_array(t())   # float32 sums of ~10^4 products: agree to float32 rounding of the largest entry
        np.testing.assert_allclose(_as_array(f()), want, rtol=1e-4, atol=1e-5 * float(np.max(np.abs(want))),
                                   err_msg=name)
    calls = {}
    for name, (f, t) in table.items():
        calls[("funcgrad", name)] = f
        calls[("torch", name)] = t
    times = alternating_blocks(calls, args.reps, args.rounds, warmup=3)
    print(f"{'op':<20}{'funcgrad us':>13}{'torch us':>11}{'ratio':>8}")
    tot = {"funcgrad": 0.0, "torch": 0.0}
    for name in table:
        a, b = times[("funcgrad", name)], times[("torch", name)]
        tot["funcgrad"] += a
        tot["torch"] += b
        print(f"{name:<20}{a * 1e6:>13.1f}{b * 1e6:>11.1f}{a / b:>7.2f}x")
    print(f"{'sum':<20}{tot['funcgrad'] * 1e6:>13.1f}{tot['torch'] * 1e6:>11.1f}"
          f"{tot['funcgrad'] / tot['torch']:>7.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
