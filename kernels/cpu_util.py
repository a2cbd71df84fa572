"""Helpers the CPU kernel modules share: literal arguments of overloads, axes, compiling generated source.

Owns nothing a primitive calls: :mod:`funcgrad.kernels.cpu` and :mod:`funcgrad.kernels.cpu_math` import
these (here, below both, so neither imports the other for them).
"""
from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.core import errors


def _literal(v, what):
    """The Python value of a literal-typed argument (or its default)."""
    if v is None or isinstance(v, (bool, int, tuple)):
        return v
    if isinstance(v, (types.NoneType, types.Omitted)):
        return getattr(v, "value", None)
    if isinstance(v, types.Literal):
        return v.literal_value
    if isinstance(v, types.BaseTuple):
        vals = []
        for t in v.types:
            if not isinstance(t, types.Literal):
                raise errors.TypingError(f"{what} must be a constant inside compiled code, got {v}")
            vals.append(t.literal_value)
        return tuple(vals)
    raise errors.TypingError(f"{what} must be a constant inside compiled code, got {v}")


def _norm_axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int):
        axis = (axis,)
    out = []
    for a in axis:
        if not -ndim <= a < ndim:
            raise ValueError(f"axis {a} is out of bounds for an array of dimension {ndim}")
        out.append(a % ndim)
    return tuple(sorted(set(out)))


def _compile(src, name, env=None):
    ns = {"np": np, "njit": njit}
    ns.update(env or {})
    exec(compile(src, f"<funcgrad.kernels.cpu:{name}>", "exec"), ns)
    return ns[name]


def _is_scalar_type(t):
    return isinstance(t, (types.Number, types.Boolean))
