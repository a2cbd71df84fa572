"""Checkpoint files for the distributed layer (rank-0 and per-server files).

Owns :func:`save` and :func:`load` as used by the data-parallel trainer and
the parameter servers. They delegate to :mod:`funcgrad.checkpoint` (``.npz``
plus JSON structure, written atomically, never unpickled) when it is
available, and otherwise use the small equivalent here: leaves ``leaf_<i>``
in canonical tree order plus ``__meta__`` (UTF-8 JSON), written to a
temporary file and ``os.replace``-d; loading needs a ``like`` template with
the same structure and reads with ``allow_pickle=False``.
"""
from __future__ import annotations

import json
import os
import tempfile

import numpy as np

import funcgrad.tree as ftree

__all__ = ["save", "load"]


def _core():
    try:
        import funcgrad.checkpoint as ck  # noqa: WPS433
        if hasattr(ck, "save") and hasattr(ck, "load"):
            return ck
    except Exception:
        pass
    return None


def save(path, tree, metadata=None):
    """Write ``tree`` (and JSON-able ``metadata``) to ``path`` atomically."""
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    ck = _core()
    if ck is not None:
        ck.save(path, tree, metadata=metadata)
        return
    leaves, _ = ftree.tree_flatten(tree)
    arrays = {f"leaf_{i}": np.asarray(l) for i, l in enumerate(leaves)}
    arrays["__meta__"] = np.frombuffer(json.dumps(metadata).encode(), dtype=np.uint8)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".npz.tmp", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load(path, like):
    """Read ``(tree, metadata)`` from ``path``; ``like`` gives the structure, shapes and dtypes."""
    path = os.fspath(path)
    ck = _core()
    if ck is not None:
        tree, meta = ck.load(path, like=like, with_metadata=True)
        return tree, meta
    leaves, treedef = ftree.tree_flatten(like)
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(bytes(z["__meta__"]).decode()) if "__meta__" in z.files else None
        n = len([k for k in z.files if k.startswith("leaf_")])
        if n != len(leaves):
            raise ValueError(f"checkpoint {path} has {n} leaves, the template has {len(leaves)}")
        out = []
        for i, l in enumerate(leaves):
            a = z[f"leaf_{i}"]
            ref = np.asarray(l)
            if a.shape != ref.shape or a.dtype != ref.dtype:
                raise ValueError(f"checkpoint {path}: leaf {i} is {a.dtype}{a.shape}, the template "
                                 f"expects {ref.dtype}{ref.shape}")
            out.append(type(l)(a.item()) if isinstance(l, (int, float, bool)) else a)
    return ftree.tree_unflatten(treedef, out), meta
