"""User-defined derivatives: ``custom_vjp`` and ``stop_gradient``.

Sits below the transformer (as JAX's ``custom_derivatives`` sits below its
``api``): the passes recognise these objects by type; nothing here imports
the transformer.
"""
from __future__ import annotations

import functools

import numpy as np

from .errors import FuncgradError
from .ops import core as _core
from .ops.registry import alias

__all__ = ["custom_vjp", "CustomVJPFunction", "stop_gradient"]


def stop_gradient(x):
    """The identity; inside a differentiated function its derivative is zero."""
    return x


alias(stop_gradient, _core.stop_gradient)


class CustomVJPFunction:
    """A function with a user-supplied VJP, JAX-style (see :func:`custom_vjp`)."""

    def __init__(self, fun):
        self.fun = fun
        self.fwd = None
        self.bwd = None
        functools.update_wrapper(self, fun)

    def defvjp(self, fwd, bwd):
        """``fwd(*args) -> (out, residuals)``; ``bwd(residuals, g) -> tuple of cotangents, one per arg``
        (``None`` for a zero cotangent)."""
        self.fwd, self.bwd = fwd, bwd
        return self

    def __call__(self, *args):
        return self.fun(*args)

    def __deepcopy__(self, memo):
        return self

    def bwd_from_args(self, args, g):
        if self.fwd is None:
            raise FuncgradError(f"custom_vjp function {self.fun.__qualname__} has no rule: call .defvjp(fwd, bwd)")
        _, res = self.fwd(*args)
        cts = self.bwd(res, g)
        if not isinstance(cts, tuple) or len(cts) != len(args):
            raise FuncgradError(f"the bwd rule of {self.fun.__qualname__} must return a tuple of {len(args)} "
                                f"cotangents (one per argument); it returned {type(cts).__name__}"
                                + (f" of length {len(cts)}" if isinstance(cts, tuple) else ""))
        # None is a zero cotangent (as in JAX): the argument does not change the result, by the user's rule
        return tuple(np.zeros_like(a) if c is None and isinstance(a, (np.ndarray, np.generic, float)) else c
                     for a, c in zip(args, cts))


def custom_vjp(fun):
    """Give ``fun`` a hand-written VJP: ``f = custom_vjp(f); f.defvjp(fwd, bwd)``.

    Inside differentiated code the call runs ``fun`` forward and, in the
    adjoint, ``bwd(residuals, g)`` where ``residuals`` come from ``fwd``.
    Functions using it run as Python over the kernels (not whole-``njit``).
    """
    return CustomVJPFunction(fun)
