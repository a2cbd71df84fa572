"""Data-parallel training of an MLP on the 8x8 digits, one shard of every batch per rank.

    mpiexec -n 4 python -m mpi4py examples/ddp_digits.py [--epochs 15] [--batch 128]
    python examples/ddp_digits.py              # the same, as a world of one rank

Every rank starts from rank 0's parameters (``DataParallel.init``), takes its
own shard of the data (``funcgrad.data.DistributedSampler``), computes the
gradient of its share of the global batch with ``funcgrad.value_and_grad``
(``--handwritten`` uses a hand-written gradient instead), averages the
gradients with a ring allreduce and applies the same optimizer step. Progress
and the final test accuracy are printed once, by rank 0.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import funcgrad
import funcgrad.dist as fd


def mlp_loss(params, x, y1h):
    h = np.tanh(x @ params["W1"] + params["b1"])
    z = h @ params["W2"] + params["b2"]
    m = np.max(z, axis=1, keepdims=True)
    lse = np.log(np.sum(np.exp(z - m), axis=1, keepdims=True)) + m
    return -np.mean(np.sum(y1h * (z - lse), axis=1))


def mlp_loss_and_grad_by_hand(params, x, y1h):
    """The same loss with its gradient written out (for --handwritten)."""
    h = np.tanh(x @ params["W1"] + params["b1"])
    z = h @ params["W2"] + params["b2"]
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    s = e / e.sum(axis=1, keepdims=True)
    n = x.shape[0]
    loss = -np.mean(np.sum(y1h * np.log(s), axis=1))
    dz = (s - y1h) / n
    dh = dz @ params["W2"].T * (1.0 - h * h)
    return loss, {"W1": x.T @ dh, "b1": dh.sum(0), "W2": h.T @ dz, "b2": dz.sum(0)}


def make_grad(handwritten, x, y1h, rank=0):
    """``(value_and_grad, description)``: funcgrad's by default, built once here so a failure of the
    AD core shows up before training; then the hand-written gradient is used instead (and said so)."""
    if handwritten:
        return mlp_loss_and_grad_by_hand, "hand-written"
    try:
        vg = funcgrad.value_and_grad(mlp_loss)
        vg(init_mlp(0, d_in=x.shape[1]), x[:2], y1h[:2])      # same signature as the real batches
        return vg, "funcgrad.value_and_grad"
    except Exception as e:  # noqa: BLE001 -- reported, then the example goes on
        if rank == 0:
            print(f"warning: funcgrad.value_and_grad failed ({type(e).__name__}: {e}); "
                  f"using the hand-written gradient", flush=True)
        return mlp_loss_and_grad_by_hand, "hand-written (funcgrad.grad failed)"


def init_mlp(seed, d_in=64, hidden=64, d_out=10):
    g = np.random.default_rng(seed)
    return {"W1": g.standard_normal((d_in, hidden)) / np.sqrt(d_in), "b1": np.zeros(hidden),
            "W2": g.standard_normal((hidden, d_out)) / np.sqrt(hidden), "b2": np.zeros(d_out)}


def predict(params, x):
    return np.argmax(np.tanh(x @ params["W1"] + params["b1"]) @ params["W2"] + params["b2"], axis=1)


def load_data(seed=0, n_test=297):
    try:
        from funcgrad.data import load_digits
        X, y = load_digits(dtype=np.float64)
    except Exception:  # funcgrad.data missing: the same data straight from scikit-learn
        from sklearn.datasets import load_digits as sk
        d = sk()
        X, y = d.data / 16.0, d.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(X))
    X, y = X[order], y[order]
    return (X[n_test:], y[n_test:]), (X[:n_test], y[:n_test])


def shard_indices(n, rank, size, epoch, seed):
    try:
        from funcgrad.data import DistributedSampler
        s = DistributedSampler(n, rank=rank, world_size=size, shuffle=True, seed=seed, drop_last=True)
        s.set_epoch(epoch)
        return np.asarray(s.indices())
    except ImportError:
        order = np.random.default_rng([seed, epoch]).permutation(n)
        per = n // size
        return order[rank * per:(rank + 1) * per]


def make_optimizer(lr):
    try:
        import funcgrad.optim as optim
        return optim.sgd(lr, momentum=0.9)
    except ImportError:
        class SGD:  # stand-in with the optax-style interface
            def init(self, params):
                return {k: np.zeros_like(v) for k, v in params.items()}

            def update(self, grads, state, params):
                state = {k: 0.9 * state[k] + grads[k] for k in grads}
                return {k: -lr * v for k, v in state.items()}, state
        return SGD()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--batch", type=int, default=128, help="global batch (split over the ranks)")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--accum", type=int, default=1, help="micro-batches per step (gradient accumulation)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--checkpoint", default=None, help="rank 0 writes this .npz after every epoch")
    ap.add_argument("--resume", action="store_true", help="start from --checkpoint")
    ap.add_argument("--handwritten", action="store_true", help="hand-written gradient instead of funcgrad's")
    a = ap.parse_args()

    w = fd.world()
    (Xtr, ytr), (Xte, yte) = load_data(a.seed)
    Y1h = np.eye(10)[ytr]
    per_rank = max(1, a.batch // w.size)
    grad_fn, grad_desc = make_grad(a.handwritten, Xtr, Y1h, w.rank)
    dp = fd.DataParallel(make_optimizer(a.lr), grad_fn=grad_fn, returns_loss=True, accum_steps=a.accum,
                         check_every=50)
    params, opt_state = dp.init(init_mlp(a.seed))
    start_epoch = 0
    if a.resume and a.checkpoint:
        params, opt_state = dp.restore(a.checkpoint, params, opt_state)
        steps_per_epoch = len(shard_indices(len(Xtr), w.rank, w.size, 0, a.seed)) // per_rank
        start_epoch = dp.step_count // max(1, steps_per_epoch)
    if w.rank == 0:
        print(f"ddp_digits: {w.size} rank(s), global batch {per_rank * w.size} ({per_rank}/rank), "
              f"{len(Xtr)} train / {len(Xte)} test samples, gradient: {grad_desc}", flush=True)
    t0 = time.perf_counter()
    seen = 0
    for epoch in range(start_epoch, a.epochs):
        idx = shard_indices(len(Xtr), w.rank, w.size, epoch, a.seed)
        losses = []
        for s in range(len(idx) // per_rank):
            b = idx[s * per_rank:(s + 1) * per_rank]
            params, opt_state = dp.step(params, opt_state, Xtr[b], Y1h[b])
            losses.append(dp.last_loss)
            seen += per_rank * w.size
        if a.checkpoint:
            dp.save(a.checkpoint, params, opt_state, metadata={"epoch": epoch + 1})
        if w.rank == 0:
            acc = float(np.mean(predict(params, Xte) == yte))
            print(f"epoch {epoch + 1:3d}/{a.epochs}  loss {np.mean(losses):.4f}  test acc {acc:.3f}  "
                  f"({seen / (time.perf_counter() - t0):.0f} samples/s)", flush=True)
    dp.check(params)
    if w.rank == 0:
        acc = float(np.mean(predict(params, Xte) == yte))
        print(f"final test accuracy: {acc:.4f}", flush=True)


if __name__ == "__main__":
    main()
