"""Gradient clipping: :func:`clip_by_global_norm` and the :func:`global_norm` it measures."""
from __future__ import annotations

import math

import numpy as np

from funcgrad.tree import tree_flatten, tree_map
from ._checks import DK, check_hparam, float_dtype, fresh, on_device
from .base import EmptyState, GradientTransformation

__all__ = ["global_norm", "clip_by_global_norm"]


def global_norm(tree) -> float:
    """sqrt of the sum of squares of every leaf (float64 accumulation)."""
    total = 0.0
    for x in tree_flatten(tree)[0]:
        if on_device(x):   # a GPU reduction: one host number comes back
            K = DK()
            a = K.as_device(x)
            total += float(K.sum(K.multiply(a, a), dtype=np.float64)) if a.size else 0.0
            continue
        a = np.asarray(x)
        total += float(np.vdot(a, a).real) if a.size else 0.0
    return math.sqrt(total)


def clip_by_global_norm(max_norm: float) -> GradientTransformation:
    """Scale all gradients by ``min(1, max_norm / (global_norm + 1e-6))`` (``torch.nn.utils.clip_grad_norm_``)."""
    check_hparam("max_norm", max_norm, opt="clip_by_global_norm")
    max_norm = float(max_norm)

    def update(grads, state, params=None):
        norm = global_norm(grads)
        if not math.isfinite(norm):
            raise FloatingPointError(f"clip_by_global_norm: the gradient norm is {norm}; "
                                     "a gradient contains nan or inf")
        coef = max_norm / (norm + 1e-6)
        if coef >= 1.0:
            return grads, state
        return tree_map(lambda g: DK().materialize(DK().multiply(g, g.dtype.type(coef))) if on_device(g)
                        else fresh(np.multiply, g, coef, float_dtype(np.asarray(g))), grads), state

    return GradientTransformation(lambda params: EmptyState(), update)
