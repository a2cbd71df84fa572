"""Primitives the forward pass generates (not NumPy functions users call).

``broadcast_like(g, x)``: a tangent ``g`` broadcast to the shape of ``x`` as a fresh array; the
tangent of a broadcasting sum ``x + c`` whose other operand ``c`` is constant (its term vanished,
so the remaining tangent may have an operand's smaller shape).
"""
from __future__ import annotations



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
    t[y] = broadcast_like(t[g], x)


