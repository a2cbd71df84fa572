"""Combinators: transformations made of other transformations.

Owns :func:`chain` (apply in order; the state is the tuple of their states)
and :func:`multi_transform` (route each parameter to the transformation of
its label, as PyTorch's parameter groups).
"""
from __future__ import annotations

from typing import NamedTuple

from funcgrad.errors import TreeStructureError
from funcgrad.tree import assert_same_structure, tree_flatten, tree_unflatten
from ._checks import check_grads, leaf_paths, need_params
from .base import GradientTransformation

__all__ = ["chain", "multi_transform", "MultiTransformState"]


class MultiTransformState(NamedTuple):
    inner_states: dict


def chain(*transforms: GradientTransformation) -> GradientTransformation:
    """Apply the transformations in order; the state is a tuple of their states."""
    for i, t in enumerate(transforms):
        if not isinstance(t, GradientTransformation):
            raise TypeError(f"chain: argument {i} is {type(t).__name__}, expected a GradientTransformation")

    def init(params):
        return tuple(t.init(params) for t in transforms)

    def update(grads, state, params=None):
        if not isinstance(state, tuple) or len(state) != len(transforms):
            raise ValueError(f"chain: expected a state tuple of length {len(transforms)} (from chain(...).init), "
                             f"received {type(state).__name__}")
        new = []
        for t, s in zip(transforms, state):
            grads, s = t.update(grads, s, params)
            new.append(s)
        return grads, tuple(new)

    return GradientTransformation(init, update)


def multi_transform(transforms: dict, labels) -> GradientTransformation:
    """Route each parameter to the transformation of its label (PyTorch param groups).

    ``labels`` is a pytree with the structure of the params whose leaves are keys of
    ``transforms``, or a callable ``params -> labels``. Each inner transformation sees
    the flat list of its parameters (in canonical leaf order).
    """
    if not isinstance(transforms, dict) or not transforms:
        raise TypeError("multi_transform: transforms must be a non-empty dict {label: GradientTransformation}")
    for k, t in transforms.items():
        if not isinstance(t, GradientTransformation):
            raise TypeError(f"multi_transform: transforms[{k!r}] is {type(t).__name__}, "
                            "expected a GradientTransformation")

    def groups(params, opt="multi_transform"):
        lab = labels(params) if callable(labels) else labels
        lab_leaves, ltd = tree_flatten(lab)
        p_leaves, ptd = tree_flatten(params)
        if ltd != ptd:
            try:
                assert_same_structure(lab, params, root="labels")
            except TreeStructureError as e:
                raise TreeStructureError(f"{opt}: labels do not match params: {e}") from None
            raise TreeStructureError(f"{opt}: labels have structure {ltd!r}, params have {ptd!r}")
        paths = leaf_paths(params)
        idx: dict = {k: [] for k in transforms}
        for i, (path, l) in enumerate(zip(paths, lab_leaves)):
            if l not in transforms:
                raise ValueError(f"{opt}: labels{path} is {l!r}, which is not one of the transforms' labels "
                                 f"{sorted(map(repr, transforms))}")
            idx[l].append(i)
        return idx, ptd

    def init(params):
        idx, _ = groups(params)
        leaves = tree_flatten(params)[0]
        return MultiTransformState({k: transforms[k].init([leaves[i] for i in ix]) for k, ix in idx.items()})

    def update(grads, state, params=None):
        if params is None:
            need_params(params, "multi_transform", "routing by labels")
        g, gtd = check_grads(grads, params, "multi_transform")
        idx, _ = groups(params)
        p_leaves = tree_flatten(params)[0]
        out: list = [None] * len(g)
        new = {}
        for k, ix in idx.items():
            u, new[k] = transforms[k].update([g[i] for i in ix], state.inner_states[k],
                                             [p_leaves[i] for i in ix])
            for i, ui in zip(ix, u):
                out[i] = ui
        return tree_unflatten(gtd, out), MultiTransformState(new)

    return GradientTransformation(init, update)
