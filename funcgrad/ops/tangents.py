"""Primitives the forward pass generates (not NumPy functions users call).

``broadcast_like(g, x)``: a tangent ``g`` broadcast to the shape of ``x`` as a fresh array; the
tangent of a broadcasting sum ``x + c`` whose other operand ``c`` is constant (its term vanished,
so the remaining tangent may have an operand's smaller shape).

``no_tangent(t, msg)``: refuses (``NoDerivativeError(msg)``) when the tangent ``t`` flowing into a
parameter with no derivative rule is not zero; forward mode gives every float argument a tangent, and
a zero one (a hyperparameter passed as an argument) needs no rule.
"""
from __future__ import annotations

import numpy as np

from . import samples as S
from .core import unbroadcast
from .registry import d, defvjp, t


def _sample_broadcast_like(draw, dt, st, array, shapes):
    xs = shapes(draw, 0, 3)
    gs = [1 if draw(st.booleans()) else n for n in xs[draw(st.integers(0, len(xs))):]]
    return (array(draw, tuple(gs), dt), array(draw, xs, dt)), {}


@defvjp(None, sample=S.custom(_sample_broadcast_like))
def broadcast_like(y, g, x):
    """``g`` broadcast to the shape of ``x`` (a fresh array unless the shapes already agree)."""
    d[g] = unbroadcast(d[y], g)
    d[x] = None                  # read for its shape only
    t[y] = broadcast_like(t[g], x)




@defvjp(None, sample=S.custom(lambda draw, dt, st, array, shapes: ((np.zeros(shapes(draw), dtype=dt),
                                                                    "a tangent with no rule"), {})))
def no_tangent(y, t, msg):
    """Zero derivative: a check, its value (0.0) unused."""
    pass
