"""The benchmarks' one way of timing contenders against each other: alternating blocks.

Each contender runs a block of ``reps`` calls, then the next contender its block, and so on for ``rounds``
rounds; a contender's figure is the minimum over rounds of its block's median call. Interleaving single
calls would lie: a thread pool one framework leaves spinning slows the next call of another.
"""
import time

import numpy as np


def alternating_blocks(contenders, reps, rounds, warmup=2):
    """``{name: seconds per call}`` for ``contenders`` (``{name: zero-argument callable}``)."""
    for fn in contenders.values():
        for _ in range(warmup):
            fn()
    best = {k: float("inf") for k in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            ts = []
            for _ in range(reps):
                t = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t)
            best[name] = min(best[name], float(np.median(ts)))
    return best
