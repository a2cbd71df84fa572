"""Argument specs: what a compiled specialization depends on about each argument leaf.

A spec is the leaf's kind, dtype and ndim (never its values); the transform
cache is keyed by the specs of every leaf, and the pipeline builds the
abstract values of the arguments from them.
"""
from __future__ import annotations


import numpy as np

from ..kernels.base import is_device_array

__all__ = ["leaf_spec", "scalar_kind", "is_float_leaf", "is_static_leaf"]


def leaf_spec(x):
    """``("a", dtype, ndim)`` for arrays, ``("f",)``/``("i",)``/``("b",)``/``("c",)`` for Python numbers,
    ``("s", dtype)`` for NumPy scalars, ``("static", repr)`` for strings, None and any other object."""
    t = type(x)
    if t is np.ndarray:
        return ("a", x.dtype.str, x.ndim)
    if t is float:
        return ("f",)
    if t is int:
        return ("i",)
    if isinstance(x, np.ndarray):
        return ("a", x.dtype.str, x.ndim)
    if isinstance(x, np.generic):   # before float: np.float64 is a float, but NumPy does not treat it as weak
        return ("s", x.dtype.str)
    if isinstance(x, bool):
        return ("b",)
    if isinstance(x, int):
        return ("i",)
    if isinstance(x, float):
        return ("f",)
    if isinstance(x, complex):
        return ("c",)
    if is_device_array(x):   # a GPU array: the same code as for a NumPy array (the cuda backend runs it)
        return ("a", np.dtype(x.dtype).str, len(x.shape))
    if isinstance(x, (str, type(None))):
        return ("static", repr(x))
    return ("static", _static_key(x))


def _is_data(x):
    return isinstance(x, (np.ndarray, np.generic, bool, int, float, complex))


def is_static_leaf(x):
    """Leaves that are part of the signature itself, not runtime values: strings, None, slices, ``...``,
    dtypes, types, functions (``np.tanh``, a helper: called or inlined as if captured) and any other
    non-numeric object (a module, ``f(x, _r=np.sum)``), a constant of the generated code as autograd takes it."""
    return not _is_data(x)


def _static_key(x):
    """What a specialization keys a static leaf by: its value where equality means the same code (slices,
    dtypes), the object itself otherwise (held by the cache, so its id is never reused)."""
    if isinstance(x, slice):
        return ("slice", x.start, x.stop, x.step)
    try:
        hash(x)
    except TypeError:
        return ("id", type(x).__name__, id(x), repr(x))
    return ("obj", x)


def scalar_kind(x):
    """"f8"/"f4"/"i"/"b" for scalars and arrays' element type (what the reverse pass may tape in arrays)."""
    if isinstance(x, bool):
        return "b"
    if isinstance(x, int):
        return "i"
    if isinstance(x, float):
        return "f8"
    dt = np.asarray(x).dtype
    return {"f": "f8" if dt == np.float64 else "f4" if dt == np.float32 else None,
            "i": "i", "u": None, "b": "b"}.get(dt.kind)


def is_float_leaf(x):
    """A leaf that can be differentiated: real or complex floating point (complex follows autograd)."""
    if isinstance(x, (np.ndarray, np.generic)) or is_device_array(x):
        return np.issubdtype(x.dtype, np.inexact)
    return isinstance(x, (float, complex))


def spec_kind(spec):
    """:func:`scalar_kind` from a leaf spec."""
    tag = spec[0]
    if tag == "f":
        return "f8"
    if tag == "i":
        return "i"
    if tag == "b":
        return "b"
    if tag in ("a", "s"):
        return scalar_kind(np.empty(0, dtype=spec[1]))
    return None
