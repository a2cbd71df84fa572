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
        for what, f in (("fwd", fwd), ("bwd", bwd)):
            if not callable(f):
                raise TypeError(f"custom_vjp {self._label}.defvjp: {what} must be a function; received {f!r}")
        self.fwd, self.bwd = fwd, bwd
        return self

    def __call__(self, *args):
        return self.fun(*args)

    def __deepcopy__(self, memo):
        return self

    @property
    def _label(self):
        return getattr(self.fun, "__qualname__", None) or getattr(self.fun, "__name__", None) or repr(self.fun)

    def bwd_from_args(self, args, g):
        """The cotangents of ``args`` for output cotangent ``g``: ``bwd(residuals of fwd(*args), g)``."""
        if self.fwd is None:
            raise FuncgradError(f"custom_vjp function {self._label} has no rule: call .defvjp(fwd, bwd)")
        pair = self.fwd(*args)
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise FuncgradError(f"the fwd rule of {self._label} must return a pair (output, residuals); it "
                                f"returned {type(pair).__name__}"
                                + (f" of length {len(pair)}" if isinstance(pair, tuple) else ""))
        cts = self.bwd(pair[1], g)
        if not isinstance(cts, tuple) or len(cts) != len(args):
            raise FuncgradError(f"the bwd rule of {self._label} must return a tuple of {len(args)} "
                                f"cotangents (one per argument); it returned {type(cts).__name__}"
                                + (f" of length {len(cts)}" if isinstance(cts, tuple) else ""))
        # None is a zero cotangent (as in JAX): the argument does not change the result, by the user's rule
        return tuple(np.zeros_like(a) if c is None and isinstance(a, (np.ndarray, np.generic, float)) else c
                     for a, c in zip(args, cts))


def custom_vjp(fun):
    """Give ``fun`` a hand-written VJP: ``f = custom_vjp(f); f.defvjp(fwd, bwd)``.

    Inside differentiated code the call runs ``fun`` forward and, in the
    adjoint, ``bwd(residuals, g)`` where ``residuals`` come from ``fwd``.
    ``fun`` may be any callable, a library routine with no rule included
    (``custom_vjp(scipy.special.multigammaln)``). ``fun``, ``fwd`` and ``bwd``
    run as Python, so a function calling it runs as Python over the compiled
    kernels: ``jit="auto"`` chooses that even with loops, and ``jit="whole"``
    refuses at the call's line.
    """
    return CustomVJPFunction(fun)
