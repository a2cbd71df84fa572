"""What the training examples share: resuming a run's arguments and plotting its curves."""
import os

import numpy as np

from funcgrad import checkpoint


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
