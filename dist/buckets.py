"""Pytree collectives: :func:`allreduce_tree` and :func:`broadcast_tree`.

Owns the packing of a pytree's leaves into contiguous buffers in one
canonical order (``funcgrad.tree.tree_flatten``: dicts by sorted key), the
reuse of those buffers across steps (cached per tree signature), and the
agreement check that makes a rank passing a different tree fail on every rank
with :class:`CommMismatchError` instead of reducing garbage; the message names
each leaf that differs (``tree['W1']: rank 0 (64, 64) float64, rank 1 (64, 80)
float64``, or ``missing`` on the ranks that lack it).

``allreduce_tree`` groups consecutive leaves of one dtype into buckets of at
most ``bucket_bytes`` (a larger leaf gets a bucket of its own) and runs one
:func:`ring_allreduce` per bucket, in place. ``broadcast_tree`` packs every
leaf into one byte buffer and broadcasts it with a deadline-bounded
``Ibcast``. Results are fresh arrays (the reused buffers are never handed
out; the leaves of one bucket are views of one fresh array, so no leaf is
copied twice); Python scalars come back as the same Python type.
"""
from __future__ import annotations

import zlib

import numpy as np

import funcgrad.tree as ftree

from .agreement import tree_detail
from .comm import World, world
from .errors import CommMismatchError
from .device import STAGING, has_device_leaves
from .ring import OPS, ring_allreduce

__all__ = ["allreduce_tree", "broadcast_tree", "tree_signature"]

DEFAULT_BUCKET_BYTES = 25 * 2 ** 20


def _as_leaf_array(leaf):
    a = np.asarray(leaf)
    if a.dtype == object:
        raise TypeError(f"funcgrad.dist: pytree leaves must be numbers or numeric arrays, received "
                        f"{type(leaf).__name__}")
    return a


def tree_signature(leaves, treedef) -> int:
    """A 63-bit hash of the tree structure plus every leaf's shape and dtype."""
    parts = [repr(treedef)]
    for a in leaves:
        parts.append(f"{a.dtype.str}{a.shape}")
    return zlib.crc32("|".join(parts).encode()) | (len(leaves) << 32)


def _detail(tree, arrays, treedef):
    """This rank's tree for a mismatch report: key path, shape and dtype of every leaf."""
    paths = [pth for pth, _ in ftree.tree_flatten_with_path(tree)[0]]
    return tree_detail([(pth, a.shape, a.dtype) for pth, a in zip(paths, arrays)], treedef)


def _restore(orig, arr):
    """Give back the same kind of leaf the caller passed (Python scalar or array)."""
    if isinstance(orig, np.ndarray):
        return arr
    if isinstance(orig, (bool, int, float, complex)) and not isinstance(orig, np.generic):
        return type(orig)(arr.item())
    if isinstance(orig, np.generic):
        return arr.dtype.type(arr.item()) if arr.ndim == 0 else arr
    return arr


class _Plan:
    """Buckets for one tree signature: (dtype, [(leaf index, offset, size, shape)], total), with
    the reused pack buffer of each bucket and, per leaf, a view of it shaped like the leaf."""

    def __init__(self, arrays, bucket_bytes):
        self.buckets = []
        cur = None
        for i, a in enumerate(arrays):
            if (cur is None or cur[0] != a.dtype or
                    (cur[2] > 0 and (cur[2] + a.size) * a.dtype.itemsize > bucket_bytes)):
                cur = [a.dtype, [], 0]
                self.buckets.append(cur)
            cur[1].append((i, cur[2], a.size, a.shape))
            cur[2] += a.size
        self.buffers = [np.empty(max(b[2], 1), dtype=b[0])[: b[2]] for b in self.buckets]
        # (bucket dtype, total, buffer, [(leaf index, shaped view of the buffer, offset, size, shape)])
        self.packing = [(b[0], b[2], buf, [(i, buf[off:off + size].reshape(shape), off, size, shape)
                                           for i, off, size, shape in b[1]])
                        for b, buf in zip(self.buckets, self.buffers)]


_PLANS: dict = {}
_MAX_PLANS = 16


def _plan_for(arrays, treedef, bucket_bytes):
    """(signature, plan) for this tree layout; cached so steady-state steps allocate nothing."""
    key = (treedef, tuple((a.shape, a.dtype.str) for a in arrays), int(bucket_bytes))
    hit = _PLANS.get(key)
    if hit is None:
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.pop(next(iter(_PLANS)))
        hit = _PLANS[key] = (tree_signature(arrays, treedef), _Plan(arrays, bucket_bytes))
    return hit


def allreduce_tree(tree, op="mean", bucket_bytes=DEFAULT_BUCKET_BYTES, *, timeout=None, check=True,
                   comm: World | None = None, _expect_signature=None):
    """Allreduce every leaf of ``tree`` (sum or mean over ranks); same structure back.

    One agreement check per call (tree structure, shapes, dtypes, op; skip it
    with ``check=False`` only when the ranks are known to agree) and one
    :func:`ring_allreduce` per bucket. Bucket buffers are allocated on the
    first call with a given tree layout and reused afterwards. In a world of
    size 1 the leaves are returned as copies. GPU leaves are reduced through pinned host buffers and
    come back as GPU arrays (:mod:`funcgrad.dist.device`).
    """
    w = comm if comm is not None else world()
    leaves, treedef = ftree.tree_flatten(tree)
    if has_device_leaves(leaves):
        host = ftree.tree_unflatten(treedef, STAGING.to_host(leaves, "allreduce"))
        red = allreduce_tree(host, op, bucket_bytes, timeout=timeout, check=check, comm=w,
                             _expect_signature=_expect_signature)
        return ftree.tree_unflatten(treedef, STAGING.to_device(ftree.tree_leaves(red), leaves))
    if op not in OPS:
        raise ValueError(f"allreduce_tree: op must be 'sum' or 'mean', received {op!r}")
    if not bucket_bytes or bucket_bytes <= 0:
        raise ValueError(f"allreduce_tree: bucket_bytes must be > 0, received {bucket_bytes!r}")
    leaves, treedef = ftree.tree_flatten(tree)
    arrays = [_as_leaf_array(l) for l in leaves]
    if op == "mean":
        for a in arrays:
            if a.dtype.kind != "f":
                raise TypeError(f"allreduce_tree: op='mean' needs floating leaves, received a leaf of "
                                f"dtype {a.dtype}; cast it or use op='sum'")
    if w.comm is None or w.size == 1:
        return ftree.tree_unflatten(treedef, [_restore(l, a.copy()) for l, a in zip(leaves, arrays)])
    sig, plan = _plan_for(arrays, treedef, bucket_bytes)
    if check:
        w.check_same("allreduce_tree", {"tree signature": sig, "op": OPS[op],
                                        "bucket_bytes": int(bucket_bytes)}, timeout=timeout,
                     detail=lambda: _detail(tree, arrays, treedef))
    elif _expect_signature is not None and sig != _expect_signature:
        raise CommMismatchError(
            f"allreduce_tree on rank {w.rank}: the tree changed since it was checked against the other "
            f"ranks (now {treedef} with shapes {[a.shape for a in arrays]}); every step must reduce the "
            f"same structure, shapes and dtypes on every rank")
    out_leaves = [None] * len(arrays)
    for dt, total, buf, items in plan.packing:
        for i, view, _, _, _ in items:
            view[...] = arrays[i]
        # out of place into one fresh array: the results are views of it (nothing copied per
        # leaf, nothing aliases the reused pack buffer)
        res = np.empty(total, dtype=dt)
        ring_allreduce(buf, op=op, out=res, timeout=timeout, check=False, comm=w)
        for i, _, off, size, shape in items:
            leaf = leaves[i]
            r = res[off:off + size].reshape(shape)
            out_leaves[i] = r if type(leaf) is np.ndarray else _restore(leaf, r)
    return ftree.tree_unflatten(treedef, out_leaves)


def broadcast_tree(tree, root=0, *, timeout=None, comm: World | None = None):
    """Every rank gets ``root``'s leaves, in the structure every rank passed.

    All ranks pass a tree of the same structure, shapes and dtypes (e.g. the
    freshly initialised parameters); a mismatch raises
    :class:`CommMismatchError` on every rank. One ``Ibcast`` of one packed
    byte buffer. GPU leaves travel through pinned host buffers and come back as GPU arrays.
    """
    w = comm if comm is not None else world()
    leaves, treedef = ftree.tree_flatten(tree)
    if has_device_leaves(leaves):
        host = ftree.tree_unflatten(treedef, STAGING.to_host(leaves, "broadcast"))
        out = broadcast_tree(host, root, timeout=timeout, comm=w)
        return ftree.tree_unflatten(treedef, STAGING.to_device(ftree.tree_leaves(out), leaves))
    arrays = [_as_leaf_array(l) for l in leaves]
    if w.comm is None or w.size == 1:
        if root != 0:
            w.require_multi(f"broadcast_tree(root={root})", min_size=root + 1)
        return ftree.tree_unflatten(treedef, [_restore(l, a.copy()) for l, a in zip(leaves, arrays)])
    if not 0 <= root < w.size:
        raise ValueError(f"broadcast_tree: root must be a rank in [0, {w.size}), received {root}")
    sig = tree_signature(arrays, treedef)
    w.check_same("broadcast_tree", {"tree signature": sig, "root": root}, timeout=timeout,
                 detail=lambda: _detail(tree, arrays, treedef))
    sizes = [a.nbytes for a in arrays]
    offs = np.concatenate([[0], np.cumsum([(s + 7) // 8 * 8 for s in sizes])]).astype(int)
    buf = np.empty(max(int(offs[-1]), 1), dtype=np.uint8)
    if w.rank == root:
        for a, o, s in zip(arrays, offs, sizes):
            buf[o:o + s] = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    seq = w.next_seq()
    req = w.comm.Ibcast(buf, root=root)
    w.wait([req], lambda: f"broadcast_tree #{seq} from rank {root}",
           peers=[root] if w.rank != root else None, timeout=timeout, seq=seq)
    out = []
    for l, a, o, s in zip(leaves, arrays, offs, sizes):
        b = np.empty(a.shape, dtype=a.dtype)
        b.reshape(-1).view(np.uint8)[:] = buf[o:o + s]
        out.append(_restore(l, b))
    return ftree.tree_unflatten(treedef, out)
