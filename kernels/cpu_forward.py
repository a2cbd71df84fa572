"""Kernels of the primitives the forward pass generates (see funcgrad.ops.tangents)."""
from __future__ import annotations

import numpy as np
from numba import types
from numba.extending import overload

from ..errors import NoDerivativeError

__all__ = ["broadcast_like", "no_tangent"]


def broadcast_like(g, x):
    """``g`` broadcast to the shape of ``x``: ``g`` itself when the shapes agree, else a fresh array."""
    if np.shape(g) == np.shape(x):
        return g
    return g + np.zeros(np.shape(x), dtype=np.result_type(x))


@overload(broadcast_like)
def _broadcast_like_ov(g, x):
    if not isinstance(x, types.Array):
        return lambda g, x: g
    return lambda g, x: g + np.zeros(x.shape, dtype=x.dtype)


def no_tangent(t, msg):
    """Refuse a nonzero tangent ``t`` flowing into a parameter that has no derivative rule (``msg`` names the
    user's line); a zero tangent contributes nothing, so the JVP without its term is right."""
    if np.any(np.asarray(t) != 0):
        raise NoDerivativeError(msg)
    return 0.0


@overload(no_tangent)
def _no_tangent_ov(t, msg):
    if isinstance(t, types.Array):
        def impl(t, msg):
            if np.any(t != 0):
                raise NoDerivativeError(msg)
            return 0.0
        return impl

    def impl_scalar(t, msg):
        if t != 0:
            raise NoDerivativeError(msg)
        return 0.0
    return impl_scalar
