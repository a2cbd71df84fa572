"""A multilayer perceptron on the 8x8 digits, trained with funcgrad.

    python examples/mlp_digits.py                        # 20 epochs, about 98% test accuracy
    python examples/mlp_digits.py --epochs 30 --out runs/mlp
    python examples/mlp_digits.py --resume --epochs 30   # continue from runs/mlp_digits/checkpoint.npz
    python examples/mlp_digits.py --device cuda          # on a GPU (pip install 'funcgrad[cuda]')

The model is 64 -> 256 (relu) -> 10 over the flattened images. The loss is a
plain NumPy function of a dict of parameters; ``funcgrad.value_and_grad`` reads
its source and writes the gradient. Adam with a per-epoch exponential
learning-rate decay, a shuffling DataLoader, an atomic checkpoint after every
epoch (``--resume`` continues bit-exactly) and a PNG of the curves in ``--out``.
"""
from __future__ import annotations

import os

# One BLAS thread: small matrices on a shared machine (see lenet_digits.py).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402

import numpy as np  # noqa: E402

import funcgrad  # noqa: E402
from funcgrad import initializers, nn, optim  # noqa: E402
from funcgrad.data import ArrayDataset, DataLoader, load_digits, train_test_split  # noqa: E402
from _common import checkpoint_path, fit, resume_args  # noqa: E402  (examples/_common.py)


# --------------------------------------------------------------------------- model

HIDDEN = 256


def init_params(seed, dtype=np.float32, hidden=HIDDEN):
    """He-uniform hidden layer (it feeds a ReLU), Glorot output layer, zero biases."""
    s = np.random.default_rng(seed).integers(0, 2**31 - 1, 2)
    return {
        "w1": initializers.kaiming_uniform(int(s[0]), (64, hidden), nonlinearity="relu", dtype=dtype,
                                           in_axis=0, out_axis=1),
        "b1": np.zeros(hidden, dtype),
        "w2": initializers.glorot_uniform(int(s[1]), (hidden, 10), dtype=dtype, in_axis=0, out_axis=1),
        "b2": np.zeros(10, dtype),
    }


def forward(params, x):
    """Logits (N, 10) of flattened images x (N, 64)."""
    h = nn.relu(x @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]


def loss(params, x, y):
    """Mean softmax cross-entropy of integer labels y."""
    return nn.cross_entropy(forward(params, x), y)


def evaluate(params, x, y):
    """(mean loss, accuracy) over a whole split."""
    logits = forward(params, x)
    return float(nn.cross_entropy(logits, y)), float(np.mean(np.argmax(logits, axis=1) == y))


# --------------------------------------------------------------------------- training

HPARAMS = ("batch_size", "lr", "lr_decay")   # saved with the checkpoint; a resume warns if they differ


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=20, help="total epochs (also when resuming)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate of the first epoch")
    ap.add_argument("--lr-decay", type=float, default=0.9, help="learning-rate factor per epoch")
    ap.add_argument("--seed", type=int, default=None, help="split, initialization and shuffling (default 0)")
    ap.add_argument("--out", default="runs/mlp_digits", help="checkpoint and curves go here")
    ap.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.npz")
    ap.add_argument("--device", default="cpu", help="'cpu', or 'cuda' / 'cuda:N' to train on a GPU (numba.cuda)")
    ap.add_argument("--limit", type=int, default=None, help="use only the first LIMIT images (quick runs)")
    ap.add_argument("--hidden", type=int, default=HIDDEN, help="hidden units")
    args = ap.parse_args(argv)
    meta = resume_args(args, checkpoint_path(args), HPARAMS)

    X, y = load_digits()  # (1797, 64) float32 in [0, 1], int64 labels
    if args.limit:
        X, y = X[:args.limit], y[:args.limit]
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, seed=args.seed, stratify=y)
    loader = DataLoader(ArrayDataset(X_train, y_train), batch_size=args.batch_size, shuffle=True, seed=args.seed)

    # The learning rate decays once per epoch (the schedule counts steps): unlike a schedule over
    # --epochs, it does not depend on how long the run is, so stopping and resuming changes nothing.
    lr = optim.exponential_decay(args.lr, args.lr_decay, transition_steps=len(loader), staircase=True)

    def describe(params):
        n_params = sum(p.size for p in funcgrad.tree_leaves(params))
        return (f"MLP on digits: {n_params} parameters, {len(X_train)} train / {len(X_test)} test images, "
                f"batch {args.batch_size}, Adam lr {args.lr} x {args.lr_decay}/epoch, seed {args.seed}")

    params = fit(args, meta, loader, optim.adam(lr), init_params(args.seed, hidden=args.hidden), loss, evaluate, (X_train, y_train),
                 (X_test, y_test), HPARAMS, describe, f"MLP 64-{args.hidden}-10 on 8x8 digits")
    _, test_acc = evaluate(params, X_test, y_test)
    print(f"final test accuracy: {test_acc:.4f}")


if __name__ == "__main__":
    main()
