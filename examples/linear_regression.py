"""Linear regression with funcgrad: recover known weights from noisy synthetic data.

    python examples/linear_regression.py                        # 20 epochs
    python examples/linear_regression.py --resume --epochs 30   # continue from runs/linear_regression/

The data are ``y = X @ w_true + b_true + noise`` with ``w_true``, ``b_true`` drawn
from ``--seed`` and Gaussian noise of standard deviation ``--noise``. The loss is
the mean squared error written in plain NumPy; ``funcgrad.value_and_grad`` reads
its source and writes the gradient. SGD with momentum, a shuffling DataLoader,
an atomic checkpoint after every epoch (``--resume`` continues bit-exactly) and
a PNG of the curves in ``--out``. The "accuracy" of a regression is its R^2
(1 - residual variance / variance of y; 1 - noise**2 / var(y) at best). The
script ends by comparing the learned weights with the true ones.
"""
from __future__ import annotations

import os

# One BLAS thread: tiny matrices on a shared machine (see lenet_digits.py).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402

import numpy as np  # noqa: E402

import funcgrad  # noqa: E402
from funcgrad import optim  # noqa: E402
from funcgrad.data import ArrayDataset, DataLoader, train_test_split  # noqa: E402
from _common import checkpoint_path, fit, resume_args  # noqa: E402  (examples/_common.py)


# --------------------------------------------------------------------------- data and model

N_SAMPLES, N_FEATURES = 2000, 8


def make_data(seed, noise):
    """Synthetic ``(X, y, w_true, b_true)``: standard normal features, a known linear map plus noise."""
    rng = np.random.default_rng([seed, 1234])
    w_true = rng.uniform(-2.0, 2.0, N_FEATURES)
    b_true = float(rng.uniform(-1.0, 1.0))
    X = rng.standard_normal((N_SAMPLES, N_FEATURES))
    y = X @ w_true + b_true + noise * rng.standard_normal(N_SAMPLES)
    return X, y, w_true, b_true


def init_params(seed):
    """Zeros: the problem is convex, any start works (``seed`` kept for the common signature)."""
    return {"w": np.zeros(N_FEATURES), "b": np.zeros(())}


def predict(params, x):
    """x @ w + b."""
    return x @ params["w"] + params["b"]


def loss(params, x, y):
    """Mean squared error, plain NumPy."""
    r = predict(params, x) - y
    return np.mean(r * r)


def evaluate(params, x, y):
    """(mean squared error, R^2) over a whole split."""
    mse = float(np.mean((predict(params, x) - y) ** 2))
    return mse, 1.0 - mse / float(np.var(y))


# --------------------------------------------------------------------------- training

HPARAMS = ("batch_size", "lr", "lr_decay", "noise")   # saved with the checkpoint; a resume warns if they differ


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=20, help="total epochs (also when resuming)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.01, help="SGD learning rate of the first epoch")
    ap.add_argument("--lr-decay", type=float, default=0.8, help="learning-rate factor per epoch")
    ap.add_argument("--seed", type=int, default=None, help="data, split and shuffling (default 0)")
    ap.add_argument("--noise", type=float, default=0.1, help="standard deviation of the label noise")
    ap.add_argument("--out", default="runs/linear_regression", help="checkpoint and curves go here")
    ap.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.npz")
    args = ap.parse_args(argv)
    meta = resume_args(args, checkpoint_path(args), HPARAMS)

    X, y, w_true, b_true = make_data(args.seed, args.noise)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, seed=args.seed)
    loader = DataLoader(ArrayDataset(X_train, y_train), batch_size=args.batch_size, shuffle=True, seed=args.seed)

    # The learning rate decays once per epoch (the schedule counts steps): unlike a schedule over
    # --epochs, it does not depend on how long the run is, so stopping and resuming changes nothing.
    lr = optim.exponential_decay(args.lr, args.lr_decay, transition_steps=len(loader), staircase=True)

    def describe(params):
        n_params = sum(p.size for p in funcgrad.tree_leaves(params))
        return (f"linear regression: {n_params} parameters, {len(X_train)} train / {len(X_test)} test samples, "
                f"noise {args.noise}, batch {args.batch_size}, SGD lr {args.lr} x {args.lr_decay}/epoch, "
                f"momentum 0.9, seed {args.seed}")

    params = fit(args, meta, loader, optim.sgd(lr, momentum=0.9), init_params(args.seed), loss, evaluate,
                 (X_train, y_train), (X_test, y_test), HPARAMS, describe,
                 f"linear regression, {N_FEATURES} features", names=("mse", "R^2"), digits=6,
                 loss_label="mean squared error", acc_label="R^2", loss_floor=args.noise ** 2)
    _, test_acc = evaluate(params, X_test, y_test)
    err = max(float(np.max(np.abs(params["w"] - w_true))), abs(float(params["b"]) - b_true))
    print("true    w:", np.array2string(w_true, precision=4), f"b: {b_true:.4f}")
    print("learned w:", np.array2string(params["w"], precision=4), f"b: {float(params['b']):.4f}")
    A = np.hstack([X_train, np.ones((len(X_train), 1))])  # the closed-form least-squares fit, for reference
    ols = np.linalg.lstsq(A, y_train, rcond=None)[0]
    ols_err = float(np.max(np.abs(ols - np.append(w_true, b_true))))
    print(f"max |learned - true| = {err:.4f}  (closed-form least squares on the same data: {ols_err:.4f})")
    print(f"final test accuracy (R^2): {test_acc:.4f}")


if __name__ == "__main__":
    main()
