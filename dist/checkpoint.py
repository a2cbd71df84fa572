"""Checkpoint files for the distributed layer (rank-0 and per-server files).

Owns the :func:`save` / :func:`load` calls the data-parallel trainer and the
parameter servers use; both are :mod:`funcgrad.checkpoint` (``.npz`` plus JSON
structure, written atomically, never unpickled), with the directory created
on save and ``load`` returning ``(tree, metadata)`` checked against ``like``.
"""
from __future__ import annotations

import os

import funcgrad.checkpoint as _ck

__all__ = ["save", "load"]


def save(path, tree, metadata=None):
    """Write ``tree`` (and JSON-able ``metadata``) to ``path`` atomically."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    _ck.save(path, tree, metadata=metadata)


def load(path, like):
    """Read ``(tree, metadata)`` from ``path``; ``like`` gives the structure, shapes and dtypes."""
    return _ck.load(os.fspath(path), like=like, with_metadata=True)
