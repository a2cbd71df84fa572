"""Parameter-server training of an MLP on the 8x8 digits.

    mpiexec -n 4 python -m mpi4py examples/ps_digits.py --mode sync  --servers 1
    mpiexec -n 4 python -m mpi4py examples/ps_digits.py --mode async --servers 2
    mpiexec -n 4 python -m mpi4py examples/ps_digits.py --mode ssp --staleness 2

Ranks ``0 .. servers-1`` hold the parameters (sharded by contiguous slices)
and run the optimizer; the other ranks are workers that pull parameters,
compute the gradient of a mini-batch of their data shard with
``funcgrad.value_and_grad`` (``--handwritten``: a hand-written gradient) and
push it. Progress and the final test accuracy are printed once, by rank 0.
To let ``--mode async``/``ssp`` survive a worker that dies, launch with
``mpiexec -disable-auto-cleanup`` (MPICH).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import funcgrad.dist as fd  # noqa: E402
from ddp_digits import (init_mlp, load_data, make_grad, make_optimizer,  # noqa: E402
                        predict, shard_indices)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["sync", "async", "ssp"], default="sync")
    ap.add_argument("--servers", type=int, default=1)
    ap.add_argument("--staleness", type=int, default=2, help="SSP bound s")
    ap.add_argument("--clocks", type=int, default=300, help="clocks (mini-batches) per worker")
    ap.add_argument("--batch", type=int, default=32, help="mini-batch per worker")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--checkpoint-dir", default=None)
    ap.add_argument("--checkpoint-every", type=int, default=0)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--handwritten", action="store_true", help="hand-written gradient instead of funcgrad's")
    a = ap.parse_args()

    w = fd.world()
    w.require_multi(f"ps_digits.py ({a.servers} server(s) + at least one worker)", a.servers + 1)
    (Xtr, ytr), (Xte, yte) = load_data(a.seed)
    Y1h = np.eye(10)[ytr]
    lr = a.lr / (w.size - a.servers) if a.mode != "sync" else a.lr   # async applies every push
    ps = fd.ParameterServer(init_mlp(a.seed), make_optimizer(lr), mode=a.mode, num_servers=a.servers,
                            staleness=a.staleness, checkpoint_dir=a.checkpoint_dir,
                            checkpoint_every=a.checkpoint_every, resume=a.resume)
    vg, grad_desc = make_grad(a.handwritten, Xtr, Y1h, w.rank)
    shard = None
    if ps.is_worker:
        shard = shard_indices(len(Xtr), ps.worker_index, ps.num_workers, 0, a.seed)

    def grad_fn(params, clock):
        per_epoch = max(1, len(shard) // a.batch)
        s = clock % per_epoch
        b = shard[s * a.batch:(s + 1) * a.batch]
        return vg(params, Xtr[b], Y1h[b])[1]

    t0 = time.perf_counter()
    every = max(1, a.clocks // 5)

    def progress(clock):
        if w.rank == 0 and (clock % every == 0 or clock == a.clocks):
            print(f"clock {clock:4d}/{a.clocks}  ({time.perf_counter() - t0:.1f} s)", flush=True)

    if w.rank == 0:
        print(f"ps_digits: mode={a.mode} servers={a.servers} workers={ps.num_workers}"
              f"{f' staleness={a.staleness}' if a.mode == 'ssp' else ''}, batch {a.batch}/worker, "
              f"gradient: {grad_desc}", flush=True)
    params = ps.run(grad_fn, a.clocks, on_clock=progress)
    if w.rank == 0:
        acc = float(np.mean(predict(params, Xte) == yte))
        extra = f", dropped workers {ps.stats['dropped']}" if ps.stats["dropped"] else ""
        print(f"final test accuracy: {acc:.4f} after {a.clocks} clocks "
              f"({time.perf_counter() - t0:.1f} s{extra})", flush=True)


if __name__ == "__main__":
    main()
