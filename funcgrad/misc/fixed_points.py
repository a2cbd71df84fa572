"""``fixed_point`` as HIPS autograd's ``autograd.misc.fixed_points`` has it, with its implicit derivative.

``fixed_point(f, a, x0, distance, tol)`` iterates ``x <- f(a)(x)`` from ``x0`` until ``distance(x, x_prev) <=
tol`` and returns ``x``. Its derivative with respect to ``a`` is not the derivative of the iterations: at the
fixed point ``x* = f(a)(x*)``, the cotangent ``u`` of ``x*`` solves ``u = g + (d f(a)(x) / dx)^T u`` (the
adjoint is itself a fixed point, iterated from zeros with the same ``distance`` and ``tol``), and ``a`` gets
``(d f(a)(x*) / da)^T u``, as autograd computes it. ``x0``, ``f``, ``distance`` and ``tol`` get no cotangent.

Reverse mode (``grad``, ``vjp``) at first order; forward mode and second derivatives through it are refused
at the caller's line (the rule is a VJP written in Python).
"""
from __future__ import annotations

import numpy as np

from ..api import vjp
from ..custom import custom_vjp

__all__ = ["fixed_point"]


def _iterate(step, x0, distance, tol):
    x, x_prev = step(x0), x0
    while distance(x, x_prev) > tol:
        x, x_prev = step(x), x
    return x


@custom_vjp
def fixed_point(f, a, x0, distance, tol):
    """The fixed point of ``f(a)`` reached from ``x0`` (iterating until ``distance(x, x_prev) <= tol``)."""
    return _iterate(f(a), x0, distance, tol)


def _fwd(f, a, x0, distance, tol):
    x_star = _iterate(f(a), x0, distance, tol)
    return x_star, (f, a, x_star, distance, tol)


def _bwd(res, g):
    f, a, x_star, distance, tol = res
    # Python mode: these small pullbacks are built for each call, and compiling them would cost more than they run
    _, pull_x = vjp(lambda x: f(a)(x), x_star, jit=False)
    u = _iterate(lambda u: pull_x(u)[0] + g, np.zeros_like(np.asarray(x_star, dtype=float))
                 if np.ndim(x_star) else 0.0, distance, tol)
    _, pull_a = vjp(lambda a_, x: f(a_)(x), a, x_star, argnums=(0,), jit=False)
    (ga,) = pull_a(u)
    return None, ga, None, None, None


fixed_point.defvjp(_fwd, _bwd)
