"""Pytrees: nested containers of arrays.

Owns flatten/unflatten/map over tuple, list, dict, None and NamedTuple, plus
user types registered with :func:`register_pytree_node`. Leaves are anything
that is not a registered container. Dicts flatten in sorted-key order so the
same tree always gives the same leaf order (the canonical order used by the
gradient code, the optimizers, checkpoints and the MPI buckets).

Structure mismatches raise :class:`funcgrad.errors.TreeStructureError` naming
the key path where the two trees first differ (``params['W1'][0]``).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .errors import TreeStructureError

__all__ = [
    "TreeDef", "tree_flatten", "tree_unflatten", "tree_leaves", "tree_structure",
    "tree_map", "tree_flatten_with_path", "register_pytree_node", "keystr",
]

# type -> (flatten(node) -> (children, aux), unflatten(aux, children) -> node)
_REGISTRY: dict[type, tuple[Callable, Callable]] = {}


def register_pytree_node(cls: type, flatten: Callable, unflatten: Callable) -> None:
    """Register a container type.

    ``flatten(node) -> (children: sequence, aux_data)`` and
    ``unflatten(aux_data, children) -> node``; ``aux_data`` must be hashable
    and comparable with ``==`` (it is part of the tree structure).
    """
    if not isinstance(cls, type):
        raise TypeError(f"register_pytree_node expects a class, received {cls!r}")
    _REGISTRY[cls] = (flatten, unflatten)
    _PLAIN_LEAVES.discard(cls)


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _dict_keys(d):
    """A dict's children in canonical order: sorted keys, else insertion order."""
    try:
        return sorted(d)
    except TypeError:
        return list(d)


def _node_kind(x: Any):
    """(kind, aux, children, child keys) for a container, or None for a leaf."""
    t = type(x)
    if t in _REGISTRY:
        children, aux = _REGISTRY[t][0](x)
        children = list(children)
        return ("custom", (t, aux), children, [f".<{i}>" for i in range(len(children))])
    if x is None:
        return ("none", None, [], [])
    if _is_namedtuple(x):
        return ("namedtuple", t, list(x), [f".{f}" for f in t._fields])
    if t is tuple:
        return ("tuple", len(x), list(x), [f"[{i}]" for i in range(len(x))])
    if t is list:
        return ("list", len(x), list(x), [f"[{i}]" for i in range(len(x))])
    if t is dict:
        keys = _dict_keys(x)
        return ("dict", tuple(keys), [x[k] for k in keys], [f"[{k!r}]" for k in keys])
    return None


class TreeDef:
    """The structure of a pytree (everything but the leaves); hashable."""

    __slots__ = ("kind", "aux", "children", "num_leaves", "_hash")

    def __init__(self, kind, aux, children):
        self.kind = kind
        self.aux = aux
        self.children = tuple(children)
        self.num_leaves = 1 if kind == "leaf" else sum(c.num_leaves for c in self.children)
        self._hash = hash((kind, _hashable(aux), self.children))

    def __eq__(self, other):
        return (isinstance(other, TreeDef) and self._hash == other._hash and self.kind == other.kind
                and self.aux == other.aux and self.children == other.children)

    def __hash__(self):
        return self._hash

    def __repr__(self):
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        inner = ", ".join(map(repr, self.children))
        if self.kind == "tuple":
            return f"({inner}{',' if len(self.children) == 1 else ''})"
        if self.kind == "list":
            return f"[{inner}]"
        if self.kind == "dict":
            return "{" + ", ".join(f"{k!r}: {c!r}" for k, c in zip(self.aux, self.children)) + "}"
        if self.kind == "namedtuple":
            return f"{self.aux.__name__}({inner})"
        return f"{self.aux[0].__name__}({inner})"

    def unflatten(self, leaves):
        return tree_unflatten(self, leaves)


def _hashable(aux):
    try:
        hash(aux)
        return aux
    except TypeError:
        return repr(aux)


_LEAF = TreeDef("leaf", None, ())
#: leaf types no one registers as pytree nodes (checked by exact type)
_PLAIN_LEAVES = {np.ndarray, float, int, bool, complex, np.float64, np.float32, np.int64,
                 np.int32, np.bool_}


def _flatten(x, leaves, is_leaf):
    if is_leaf is not None and is_leaf(x):
        leaves.append(x)
        return _LEAF
    t = type(x)
    if t in _PLAIN_LEAVES:                 # the common leaves and containers, without building
        leaves.append(x)                   # the child path strings _node_kind makes for paths
        return _LEAF
    if t is dict and t not in _REGISTRY:
        keys = _dict_keys(x)
        return TreeDef("dict", tuple(keys), [_flatten(x[k], leaves, is_leaf) for k in keys])
    if (t is tuple or t is list) and t not in _REGISTRY:
        return TreeDef("tuple" if t is tuple else "list", len(x), [_flatten(c, leaves, is_leaf) for c in x])
    node = _node_kind(x)
    if node is None:
        leaves.append(x)
        return _LEAF
    kind, aux, children, _ = node
    return TreeDef(kind, aux, [_flatten(c, leaves, is_leaf) for c in children])


def tree_flatten(tree, is_leaf: Callable | None = None):
    """Return ``(leaves, treedef)``."""
    leaves: list = []
    td = _flatten(tree, leaves, is_leaf)
    return leaves, td


def tree_leaves(tree, is_leaf=None) -> list:
    return tree_flatten(tree, is_leaf)[0]


def tree_structure(tree, is_leaf=None) -> TreeDef:
    return tree_flatten(tree, is_leaf)[1]


def _build(td: TreeDef, it):
    if td.kind == "leaf":
        return next(it)
    children = [_build(c, it) for c in td.children]
    if td.kind == "none":
        return None
    if td.kind == "tuple":
        return tuple(children)
    if td.kind == "list":
        return children
    if td.kind == "dict":
        return dict(zip(td.aux, children))
    if td.kind == "namedtuple":
        return td.aux(*children)
    cls, aux = td.aux
    return _REGISTRY[cls][1](aux, children)


def tree_unflatten(treedef: TreeDef, leaves):
    leaves = list(leaves)
    if len(leaves) != treedef.num_leaves:
        raise TreeStructureError(
            f"tree_unflatten: the structure {treedef!r} has {treedef.num_leaves} leaves, "
            f"received {len(leaves)}")
    return _build(treedef, iter(leaves))


def tree_flatten_with_path(tree, is_leaf=None):
    """Return ``([(path, leaf), ...], treedef)``; path is a string like ``['W1'][0]``."""
    out = []

    def walk(x, path):
        if is_leaf is not None and is_leaf(x):
            out.append((path, x))
            return
        node = _node_kind(x)
        if node is None:
            out.append((path, x))
            return
        for c, k in zip(node[2], node[3]):
            walk(c, path + k)

    walk(tree, "")
    return out, tree_structure(tree, is_leaf)


def keystr(path: str, root: str = "tree") -> str:
    return root + path


def _mismatch(a, b, path, root):
    """Raise a TreeStructureError naming the first key path where a and b differ."""
    na, nb = _node_kind(a), _node_kind(b)
    if na is None and nb is None:
        return
    where = keystr(path, root)
    if (na is None) != (nb is None):
        raise TreeStructureError(
            f"pytree structures differ at {where}: one is a leaf ({type(a if na is None else b).__name__}), "
            f"the other a container ({type(b if na is None else a).__name__})")
    if na[0] != nb[0] or (na[0] in ("tuple", "list", "namedtuple") and na[1] != nb[1]):
        raise TreeStructureError(
            f"pytree structures differ at {where}: {_describe(a)} vs {_describe(b)}")
    if na[0] == "dict" and na[1] != nb[1]:
        ka, kb = set(na[1]), set(nb[1])
        raise TreeStructureError(
            f"pytree structures differ at {where}: dict keys {sorted(map(repr, ka - kb))} only in the first, "
            f"{sorted(map(repr, kb - ka))} only in the second")
    if na[0] == "custom" and na[1] != nb[1]:
        raise TreeStructureError(f"pytree structures differ at {where}: {na[1]!r} vs {nb[1]!r}")
    for ca, cb, k in zip(na[2], nb[2], na[3]):
        _mismatch(ca, cb, path + k, root)


def _describe(x):
    if _is_namedtuple(x):
        return f"{type(x).__name__} with fields {type(x)._fields}"
    if isinstance(x, (tuple, list)):
        return f"{type(x).__name__} of length {len(x)}"
    return type(x).__name__


def assert_same_structure(a, b, root: str = "tree") -> None:
    _mismatch(a, b, "", root)
    if tree_structure(a) != tree_structure(b):  # registered types with differing aux etc.
        raise TreeStructureError(f"pytree structures differ: {tree_structure(a)!r} vs {tree_structure(b)!r}")


def tree_map(fn: Callable, tree, *rest, is_leaf=None):
    """Apply ``fn`` leaf-wise over one or more trees of the same structure."""
    leaves, td = tree_flatten(tree, is_leaf)
    if not rest:
        return tree_unflatten(td, [fn(x) for x in leaves])
    others = []
    for i, r in enumerate(rest):
        lr, tdr = tree_flatten(r, is_leaf)
        if tdr != td:
            _mismatch(tree, r, "", "tree")
            raise TreeStructureError(f"tree_map: argument {i + 1} has structure {tdr!r}, expected {td!r}")
        others.append(lr)
    return tree_unflatten(td, [fn(*xs) for xs in zip(leaves, *others)])
