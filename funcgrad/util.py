"""autograd's ``autograd.util`` helpers that programs written for autograd import: ``func``."""
from __future__ import annotations

__all__ = ["func"]


def func(f):
    """The identity (autograd's ``func``): ``defvjp(func(Cls.method), ...)`` names a primitive method."""
    return f
