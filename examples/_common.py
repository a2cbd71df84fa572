"""What the training examples share: resuming a run, its training loop and its curves."""
import os

import numpy as np

from funcgrad import checkpoint


def checkpoint_path(args):
    """OUT/checkpoint.npz (OUT is created)."""
    os.makedirs(args.out, exist_ok=True)
    return os.path.join(args.out, "checkpoint.npz")


def resume_args(args, ckpt_path, keys):
    """Metadata of the checkpoint to resume from (or None); sets ``args.seed``.

    A resumed run takes the seed (data split, shuffling) from the checkpoint and warns when
    one of ``keys`` (hyperparameters) differs from the checkpoint's.
    """
    meta = None
    if args.resume:
        if os.path.exists(ckpt_path):
            meta = checkpoint.load_metadata(ckpt_path)
            if args.seed is not None and args.seed != meta["seed"]:
                print(f"note: --seed {args.seed} ignored, resuming with the checkpoint's seed {meta['seed']}")
            args.seed = meta["seed"]
            for k in keys:
                if meta["args"][k] != getattr(args, k):
                    print(f"warning: --{k.replace('_', '-')} {getattr(args, k)} differs from the checkpoint's "
                          f"{meta['args'][k]}; the run will not match an uninterrupted one")
        else:
            print(f"no checkpoint at {ckpt_path}: starting from scratch")
    if args.seed is None:
        args.seed = 0
    return meta


def plot_curves(history, path, title, loss_label="cross-entropy", acc_label="accuracy", loss_floor=None):
    """Loss and accuracy per epoch (train and test) side by side, written to ``path``."""
    import matplotlib
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    epochs = np.arange(1, len(history["train_loss"]) + 1)
    fig, (ax_l, ax_a) = plt.subplots(1, 2, figsize=(10, 4))
    ax_l.plot(epochs, history["train_loss"], "o-", label="train")
    ax_l.plot(epochs, history["test_loss"], "o-", label="test")
    if loss_floor is not None:
        ax_l.axhline(loss_floor, color="gray", ls="--", label="noise variance (best possible)")
    ax_l.set(xlabel="epoch", ylabel=loss_label, yscale="log", title="loss")
    ax_a.plot(epochs, history["train_acc"], "o-", label="train")
    ax_a.plot(epochs, history["test_acc"], "o-", label="test")
    ax_a.set(xlabel="epoch", ylabel=acc_label, title=acc_label if acc_label == "accuracy" else f"accuracy ({acc_label})")
    for ax in (ax_l, ax_a):
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def fit(args, meta, loader, opt, params, loss, evaluate, train, test, hparams, describe, plot_title,
        names=("loss", "acc"), digits=4, **plot_kw):
    """The examples' training loop: resume, epochs with a tqdm bar, a checkpoint and a line per epoch.

    ``args`` carries epochs, seed and out; ``meta`` is what :func:`resume_args` returned (called
    first: the seed picks the data split); ``hparams`` names the arguments saved with the
    checkpoint; ``train``/``test`` are (x, y) splits that ``evaluate(params, x, y) -> (loss,
    metric)`` scores after every epoch; ``describe(params)`` is the run's one-line summary.
    Returns the trained params.
    """
    import time

    from tqdm import tqdm

    import funcgrad
    from funcgrad import optim

    ckpt_path = checkpoint_path(args)
    opt_state = opt.init(params)
    value_and_grad = funcgrad.value_and_grad(loss)
    device = getattr(args, "device", "cpu")
    on_gpu = device != "cpu"

    start = 0
    history = {"train_loss": [], "train_acc": [], "test_loss": [], "test_acc": []}
    if meta is not None:
        state = checkpoint.load(ckpt_path, like={"params": params, "opt_state": opt_state, "epoch": 0, "seed": 0})
        params, opt_state, start = state["params"], state["opt_state"], state["epoch"]
        history = meta["history"]
        print(f"resumed from {ckpt_path} after epoch {start}")
    print(describe(params))
    if on_gpu:   # parameters and optimizer state live on the GPU; batches are copied there as they come
        params, opt_state = funcgrad.device_put((params, opt_state), device)

    t_start = time.perf_counter()
    for epoch in range(start, args.epochs):
        t0 = time.perf_counter()
        loader.set_epoch(epoch)  # the shuffle order is a function of (seed, epoch): resumable
        bar = tqdm(loader, desc=f"epoch {epoch + 1}/{args.epochs}", unit="batch", leave=False)
        for x, targets in bar:
            if on_gpu:
                x, targets = funcgrad.device_put((x, targets), device)
            value, grads = value_and_grad(params, x, targets)
            updates, opt_state = opt.update(grads, opt_state, params)
            params = optim.apply_updates(params, updates)
            bar.set_postfix(loss=f"{float(value):.4f}", refresh=False)
        bar.close()

        host_params, host_state = funcgrad.device_get((params, opt_state)) if on_gpu else (params, opt_state)
        scores = evaluate(host_params, *train) + evaluate(host_params, *test)
        for k, v in zip(history, scores):
            history[k].append(v)
        checkpoint.save(ckpt_path, {"params": host_params, "opt_state": host_state, "epoch": epoch + 1,
                                    "seed": args.seed},
                        metadata={"epoch": epoch + 1, "seed": args.seed, "history": history,
                                  "args": {k: getattr(args, k) for k in hparams}})
        (l, m), f = names, f".{digits}f"
        print(f"epoch {epoch + 1:3d}/{args.epochs}  train {l} {scores[0]:{f}} {m} {scores[1]:{f}}  "
              f"test {l} {scores[2]:{f}} {m} {scores[3]:{f}}  ({time.perf_counter() - t0:.1f} s)", flush=True)

    png = os.path.join(args.out, "curves.png")
    if history["test_acc"]:
        plot_curves(history, png, f"{plot_title} (seed {args.seed})", **plot_kw)
    print(f"trained {args.epochs - start} epoch(s) in {time.perf_counter() - t_start:.1f} s; "
          f"checkpoint {ckpt_path}, curves {png}")
    return funcgrad.device_get(params) if on_gpu else params
