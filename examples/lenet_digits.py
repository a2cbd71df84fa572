"""A small LeNet on the 8x8 digits, trained with funcgrad.

    python examples/lenet_digits.py                        # 12 epochs, about 99% test accuracy
    python examples/lenet_digits.py --epochs 20 --out runs/lenet
    python examples/lenet_digits.py --resume --epochs 20   # continue from runs/lenet_digits/checkpoint.npz
    python examples/lenet_digits.py --device cuda          # on a GPU (pip install 'funcgrad[cuda]')

The model is LeNet-5's pattern shrunk to 1x8x8 inputs (padding keeps the 3x3
convolutions from eating the tiny images):

    conv 3x3, 32 ch, pad 1 -> relu -> max pool 2   (32 x 4 x 4)
    conv 3x3, 64 ch, pad 1 -> relu -> max pool 2   (64 x 2 x 2)
    flatten -> dense 128 -> relu -> dense 10

The loss is a plain function of a dict of parameters; ``funcgrad.value_and_grad``
reads its source and writes the gradient. Adam with a per-epoch exponential
learning-rate decay, a shuffling DataLoader, an atomic checkpoint after every
epoch (``--resume`` continues bit-exactly) and a PNG of the curves in ``--out``.
"""
from __future__ import annotations

import os

# Small matrices on a 2-core machine: OpenBLAS's worker threads fight Numba's (and other
# processes) for the cores and make the GEMMs inside the conv kernels several times slower
# (measured: an epoch of LeNet gradients took 1.6 s with two BLAS threads, 0.28 s with one).
# Set before NumPy loads OpenBLAS; an OPENBLAS_NUM_THREADS from the environment wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402

import numpy as np  # noqa: E402

import funcgrad  # noqa: E402
from funcgrad import initializers, nn, optim  # noqa: E402
from funcgrad.data import ArrayDataset, DataLoader, load_digits, train_test_split  # noqa: E402
from _common import checkpoint_path, fit, resume_args  # noqa: E402  (examples/_common.py)


# --------------------------------------------------------------------------- model

def init_params(seed, dtype=np.float32, channels=(32, 64, 128)):
    """He-uniform weights for the ReLU layers, Glorot for the output layer, zero biases (``channels``: of the
    two convolutions and the hidden dense layer)."""
    c1, c2, hid = channels
    s = np.random.default_rng(seed).integers(0, 2**31 - 1, 4)

    def he(k, shape, **kw):
        return initializers.kaiming_uniform(int(s[k]), shape, nonlinearity="relu", dtype=dtype, **kw)
    return {
        "conv1": {"w": he(0, (c1, 1, 3, 3)), "b": np.zeros(c1, dtype)},
        "conv2": {"w": he(1, (c2, c1, 3, 3)), "b": np.zeros(c2, dtype)},
        "fc1": {"w": he(2, (c2 * 2 * 2, hid), in_axis=0, out_axis=1), "b": np.zeros(hid, dtype)},
        "fc2": {"w": initializers.glorot_uniform(int(s[3]), (hid, 10), dtype=dtype, in_axis=0, out_axis=1),
                "b": np.zeros(10, dtype)},
    }


def forward(params, x):
    """Logits (N, 10) of NCHW images x (N, 1, 8, 8)."""
    h = nn.relu(nn.conv2d(x, params["conv1"]["w"], params["conv1"]["b"], 1, 1))
    h = nn.max_pool2d(h, 2)
    h = nn.relu(nn.conv2d(h, params["conv2"]["w"], params["conv2"]["b"], 1, 1))
    h = nn.max_pool2d(h, 2)
    h = np.reshape(h, (h.shape[0], -1))
    h = nn.relu(h @ params["fc1"]["w"] + params["fc1"]["b"])
    return h @ params["fc2"]["w"] + params["fc2"]["b"]


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
    ap.add_argument("--epochs", type=int, default=12, help="total epochs (also when resuming)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate of the first epoch")
    ap.add_argument("--lr-decay", type=float, default=0.85, help="learning-rate factor per epoch")
    ap.add_argument("--seed", type=int, default=None, help="split, initialization and shuffling (default 0)")
    ap.add_argument("--out", default="runs/lenet_digits", help="checkpoint and curves go here")
    ap.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.npz")
    ap.add_argument("--device", default="cpu", help="'cpu', or 'cuda' / 'cuda:N' to train on a GPU (numba.cuda)")
    ap.add_argument("--limit", type=int, default=None, help="use only the first LIMIT images (quick runs)")
    ap.add_argument("--channels", default="32,64,128", help="conv1,conv2,dense widths")
    args = ap.parse_args(argv)
    meta = resume_args(args, checkpoint_path(args), HPARAMS)

    X, y = load_digits(images=True)  # (1797, 1, 8, 8) float32 in [0, 1], int64 labels
    if args.limit:
        X, y = X[:args.limit], y[:args.limit]
    channels = tuple(int(c) for c in args.channels.split(","))
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, seed=args.seed, stratify=y)
    loader = DataLoader(ArrayDataset(X_train, y_train), batch_size=args.batch_size, shuffle=True, seed=args.seed)

    # The learning rate decays once per epoch (the schedule counts steps): unlike a schedule over
    # --epochs, it does not depend on how long the run is, so stopping and resuming changes nothing.
    lr = optim.exponential_decay(args.lr, args.lr_decay, transition_steps=len(loader), staircase=True)

    def describe(params):
        n_params = sum(p.size for p in funcgrad.tree_leaves(params))
        return (f"LeNet on digits: {n_params} parameters, {len(X_train)} train / {len(X_test)} test images, "
                f"batch {args.batch_size}, Adam lr {args.lr} x {args.lr_decay}/epoch, seed {args.seed}")

    params = fit(args, meta, loader, optim.adam(lr), init_params(args.seed, channels=channels), loss, evaluate, (X_train, y_train),
                 (X_test, y_test), HPARAMS, describe, "LeNet on 8x8 digits")
    _, test_acc = evaluate(params, X_test, y_test)
    print(f"final test accuracy: {test_acc:.4f}")


if __name__ == "__main__":
    main()
