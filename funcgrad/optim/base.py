"""What an optimizer is: a :class:`GradientTransformation`, a pure pair of functions.

``init(params) -> state`` and ``update(grads, state, params=None) ->
(updates, new_state)`` never modify their inputs; ``state`` is a pytree of
NamedTuples, ints and arrays (it checkpoints with :mod:`funcgrad.checkpoint`).
:func:`apply_updates` adds updates to params. An ``update`` function may carry
``update.elementwise = True``: its rule treats every element on its own with
the same hyperparameters, so running it once on all leaves concatenated into
one vector gives bit for bit what it gives leaf by leaf, and callers that keep
parameters flat (``funcgrad.dist.DataParallel``) may do that instead of a
pass per leaf.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from funcgrad.tree import tree_map
from ._checks import DK, check_grads, dev_leaf, on_device

__all__ = ["GradientTransformation", "EmptyState", "identity", "apply_updates"]


class GradientTransformation(NamedTuple):
    """A pure optimizer: ``init(params) -> state``, ``update(grads, state, params=None) -> (updates, state)``."""
    init: Callable
    update: Callable


class EmptyState(NamedTuple):
    """State of a stateless transformation."""


def identity() -> GradientTransformation:
    """Return the gradients unchanged."""
    return GradientTransformation(lambda params: EmptyState(),
                                  lambda grads, state, params=None: (grads, state))


def apply_updates(params, updates):
    """``params + updates`` leaf-wise, keeping each parameter's dtype."""
    check_grads(updates, params, "apply_updates")  # names the key path on mismatch

    def add(p, u):
        if on_device(p):   # on the GPU: one kernel, the parameter's dtype kept
            K = DK()
            return K.materialize(K.add(K.as_device(p), dev_leaf(u, p)))
        pa = np.asarray(p)
        out = np.add(pa, u)
        if isinstance(p, np.ndarray):
            return np.asarray(out, dtype=pa.dtype)  # stays an ndarray (0-d too), in the param's dtype
        return out.astype(pa.dtype) if np.issubdtype(pa.dtype, np.floating) else out
    return tree_map(add, params, updates)
