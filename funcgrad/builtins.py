"""``isinstance``, ``tuple``, ``list`` and ``dict`` as HIPS autograd's ``autograd.builtins`` offers them.

Autograd needs its own versions because its arrays are boxed while a gradient
is traced; funcgrad reads the source instead, so these are the builtins under
autograd's names: ``tuple(xs)``, ``list(xs)`` and ``dict(...)`` build plain
containers, and ``isinstance(x, funcgrad.builtins.tuple)`` is true of every
tuple. Code written for autograd (``from autograd import tuple as ag_tuple``)
runs unchanged. Inside a differentiated function the transform treats each of
them as the builtin it stands for (``SUBSTITUTES``).

They are attributes of the ``funcgrad`` package too, but not in its
``__all__``: ``from funcgrad import *`` never shadows the builtins.
"""
from __future__ import annotations

import builtins as _b

__all__ = ["isinstance", "tuple", "list", "dict", "SUBSTITUTES"]

isinstance = _b.isinstance


class _TupleMeta(type):
    def __instancecheck__(cls, instance):
        return _b.isinstance(instance, _b.tuple)

    def __subclasscheck__(cls, sub):
        return _b.issubclass(sub, _b.tuple)


class _ListMeta(type):
    def __instancecheck__(cls, instance):
        return _b.isinstance(instance, _b.list)

    def __subclasscheck__(cls, sub):
        return _b.issubclass(sub, _b.list)


class _DictMeta(type):
    def __instancecheck__(cls, instance):
        return _b.isinstance(instance, _b.dict)

    def __subclasscheck__(cls, sub):
        return _b.issubclass(sub, _b.dict)


class tuple(_b.tuple, metaclass=_TupleMeta):
    """``tuple(xs)``: a plain builtin tuple of ``xs``."""

    def __new__(cls, xs=()):
        return _b.tuple(xs)


class list(_b.list, metaclass=_ListMeta):
    """``list(xs)``: a plain builtin list of ``xs``."""

    def __new__(cls, xs=()):
        return _b.list(xs)


class dict(_b.dict, metaclass=_DictMeta):
    """``dict(...)``: a plain builtin dict, with the builtin's arguments."""

    def __new__(cls, *args, **kwargs):
        return _b.dict(*args, **kwargs)


# what the source transform calls in place of each (funcgrad/transform/normalize/calls.py)
SUBSTITUTES = {tuple: _b.tuple, list: _b.list, dict: _b.dict}
