"""``fixed_point`` as HIPS autograd's ``autograd.misc.fixed_points`` has it, with its implicit derivative.

``fixed_point(f, a, x0, distance, tol)`` iterates ``x <- f(a)(x)`` from ``x0`` until ``distance(x, x_prev) <=
tol`` and returns ``x``. Its derivative with respect to ``a`` is not the derivative of the iterations but the
implicit one at the fixed point ``x* = F(a, x*)`` (``F(a, x) = f(a)(x)``), and every linear equation it needs
is itself a fixed point, iterated from zeros with the same ``distance`` and ``tol``, as autograd does for the
adjoint. ``x0``, ``f``, ``distance`` and ``tol`` get no derivative.

* Reverse mode (``grad``, ``vjp``): the cotangent ``u`` of ``x*`` solves ``u = g + F_x^T u``; ``a`` gets
  ``F_a^T u``, as autograd computes it (bit for bit).
* Forward mode (``jvp``, ``jacfwd``): the tangent solves ``t = F_a da + F_x t``. The rule ``_fixed_point_jvp``
  is a custom_vjp function of its own, so reverse over forward (``grad(grad(f))``, ``hessian``, the order-2
  checks) goes through it: its VJP takes the implicit derivative of ``t = Phi(a, x*, da, t)``, ``Phi(a, x, da,
  s) = F_a da + F_x s`` (funcgrad's reverse mode over funcgrad.jvp of ``F``), and of ``x*``. Forward over
  forward (``jacfwd(jacfwd(f))``) uses ``_fixed_point_jvp_jvp``: the tangent of ``t`` solves ``dt = F_x dt +
  d Phi``, ``d Phi`` the tangent of ``Phi`` in the other direction.

Each linear fixed point stops at ``distance <= tol`` like the primal, so the derivatives are the implicit ones
to about ``tol / (1 - |F_x|)``, as autograd's are; at second order they are taken in another order than
autograd's (funcgrad's ``grad(grad(f))`` is reverse over forward, autograd's reverse over reverse), so the two
agree to that accuracy, not bit for bit. A third derivative through ``fixed_point`` is refused.
"""
from __future__ import annotations

import numpy as np

from ..api import vjp
from ..custom import custom_vjp, second_order_rule
from ..errors import NoDerivativeError
from ..forward_mode import _wrapper as _source_function, jvp
from ..tree import tree_flatten, tree_map, tree_unflatten

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


# --------------------------------------------------------------------------- forward mode and second order
_MAPS: dict = {}


def _maps(f):
    """``(F, Phi)`` for the user's ``f``: ``F(a, x) = f(a)(x)`` and ``Phi(a, x, da, s) = F_a da + F_x s``, as
    Python source funcgrad reads, made once per ``f`` (funcgrad caches its transforms on them)."""
    got = _MAPS.get(f)
    if got is None:
        if len(_MAPS) > 64:
            _MAPS.clear()
        F = _source_function("fixed_point_map", ["a", "x"], ["return f(a)(x)"], {"f": f})
        Phi = _source_function("fixed_point_linear_map", ["a", "x", "da", "s"],
                               ["return jvp(F, (a, x), (da, s))[1]"], {"jvp": jvp, "F": F})
        got = _MAPS[f] = (F, Phi)
    return got


def _zeros(x):
    """A zero tangent (or cotangent) like ``x``: float zeros in its structure."""
    return tree_map(lambda v: np.zeros(np.shape(v)) if isinstance(v, np.ndarray) else 0.0, x)


def _is_float(x):
    leaves = tree_flatten(x)[0]
    return bool(leaves) and all(np.issubdtype(np.result_type(v), np.floating) for v in leaves)


def _direction(a, d):
    """The tangent of ``a`` as a float tree like ``a``: forward mode passes ``None`` or a zero placeholder
    for an argument that does not move; a non-float ``a`` (a constant for jvp) is passed as itself."""
    if not _is_float(a):
        return a
    if d is None:
        return _zeros(a)
    leaves, td = tree_flatten(a)
    d_leaves, d_td = tree_flatten(d)
    if d_td == td:
        return tree_unflatten(td, [np.asarray(v, dtype=np.float64) if isinstance(u, np.ndarray) else float(v)
                                   for u, v in zip(leaves, d_leaves)])
    if all(not np.any(np.asarray(v)) for v in d_leaves):
        return _zeros(a)
    raise NoDerivativeError("fixed_point: the tangent of its parameter a does not have a's structure")


def _entry(d, i, n):
    return d[i] if isinstance(d, (tuple, list)) and len(d) == n else None


def _add(a, b):
    if a is None:
        return b
    if b is None:
        return a
    la, td = tree_flatten(a)
    return tree_unflatten(td, [x + y for x, y in zip(la, tree_flatten(b)[0])])


def _solve_tangent(F, a, x_star, rhs, distance, tol):
    """``s = F_x s + rhs`` iterated from zeros (``rhs``: a tree like ``x*``)."""
    za = _zeros(a) if _is_float(a) else a
    return _iterate(lambda s: _add(jvp(F, (a, x_star), (za, s), jit=False)[1], rhs), _zeros(x_star), distance,
                    tol)


def _jvp_parts(primals, tangents):
    f, a, x0, distance, tol = primals
    F = _maps(f)[0]
    x_star = _iterate(f(a), x0, distance, tol)
    da = _direction(a, _entry(tangents, 1, 5))
    t = _iterate(lambda s: jvp(F, (a, x_star), (da, s), jit=False)[1], _zeros(x_star), distance, tol)
    return (x_star, t), (f, a, x_star, da, t, distance, tol)


def _fixed_point_jvp_fun(primals, tangents):
    return _jvp_parts(primals, tangents)[0]


def _fixed_point_jvp_bwd(res, g):
    """Cotangents of (primals, tangents) for cotangents ``(g_x, g_t)`` of ``(x*, t)``: ``t = Phi(a, x*, da, t)``
    and ``x* = F(a, x*)`` differentiated implicitly, each adjoint a fixed point iterated from zeros."""
    f, a, x_star, da, t, distance, tol = res
    F, Phi = _maps(f)
    g_x, g_t = g     # a pair, or an array of two stacked like (x*, t)
    _, pull = vjp(F, a, x_star, jit=False)
    ct_a = ct_da = None
    x_bar = g_x
    if g_t is not None and any(np.any(np.asarray(v)) for v in tree_flatten(g_t)[0]):
        lam = _iterate(lambda l: _add(pull(l)[1], g_t), _zeros(x_star), distance, tol)
        ct_a, x_phi, ct_da = vjp(Phi, a, x_star, da, t, argnums=(0, 1, 2), jit=False)[1](lam)
        x_bar = _add(x_bar, x_phi)
    if x_bar is not None:
        u = _iterate(lambda v: _add(pull(v)[1], x_bar), _zeros(x_star), distance, tol)
        ct_a = _add(ct_a, pull(u)[0])
    return (None, ct_a, None, None, None), (None, ct_da, None, None, None)


def _fixed_point_jvp_jvp(primals2, tangents2):
    """Forward mode over the JVP rule: ``(x*, t)`` moved in the direction ``(da2, dda)`` of ``(a, da)``: ``dx*``
    solves ``dx* = F_a da2 + F_x dx*`` and ``dt`` solves ``dt = d Phi + F_x dt`` with ``d Phi`` the tangent of
    ``Phi(a, x*, da, t)`` in the direction ``(da2, dx*, dda, 0)``."""
    primals, tangents = primals2
    (x_star, t), (f, a, _, da, _, distance, tol) = _jvp_parts(primals, tangents)
    F, Phi = _maps(f)
    da2 = _direction(a, _entry(_entry(tangents2, 0, 2), 1, 5))
    dda = _direction(a, _entry(_entry(tangents2, 1, 2), 1, 5))
    dx = _iterate(lambda s: jvp(F, (a, x_star), (da2, s), jit=False)[1], _zeros(x_star), distance, tol)
    d_phi = jvp(Phi, (a, x_star, da, t), (da2, dx, dda, _zeros(t)), jit=False)[1]
    dt = _solve_tangent(F, a, x_star, d_phi, distance, tol)
    return (x_star, t), (dx, dt)


_fixed_point_jvp = second_order_rule("fixed_point", _fixed_point_jvp_fun, _jvp_parts, _fixed_point_jvp_bwd,
                                     _fixed_point_jvp_jvp)
fixed_point.defjvp(_fixed_point_jvp)
