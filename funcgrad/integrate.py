"""scipy.integrate.odeint inside differentiated functions, by the adjoint method.

Owns what funcgrad reads for ``scipy.integrate.odeint(func, y0, t, args=(), **options)``,
differentiated in ``y0``, ``t`` and the float ``args`` as autograd does (Froehlich et al. 2017,
sec. 2.4.2): the cotangent is carried backwards from each output time to the one before by
integrating the augmented system (the state, its adjoint, the time and argument cotangents)
with odeint itself, and each evaluation of that system takes the VJP of the user's ``func``
with :func:`funcgrad.vjp`. ``func`` is an argument, not a fixed function, so no primitive
template can hold the rule (a template calls primitives; this VJP calls a transform of a value
known only at the call, and needs :mod:`funcgrad.api`, a layer above the primitives): the rule is
the :func:`funcgrad.custom_vjp` function ``_odeint``, and calls of scipy's odeint are read as
:func:`odeint` below (a definition, :func:`funcgrad.ops.registry.define`, registered when
scipy.integrate is imported), which fixes the options (static) and passes the arrays
positionally. ``full_output`` is refused (its result is not an array). Called directly,
:func:`odeint` is scipy's odeint.
"""
from __future__ import annotations

import numpy as np

from .api import vjp
from .custom import custom_vjp
from .ops.registry import define, when_imported
from .tree import tree_flatten, tree_unflatten


# --------------------------------------------------------------------------- scipy.integrate.odeint
_OPTIONS = ("Dfun", "col_deriv", "ml", "mu", "rtol", "atol", "tcrit", "h0", "hmax", "hmin", "ixpr", "mxstep",
            "mxhnil", "mxordn", "mxords", "printmessg", "tfirst")


def _scipy_odeint(func, options, y0, t, args):
    import scipy.integrate   # lazily: importing scipy.integrate costs about 0.4 s
    return scipy.integrate.odeint(func, y0, t, args=tuple(args), **dict(zip(_OPTIONS, options)))


def _odeint_fun(func, options, y0, t, *args):
    return _scipy_odeint(func, options, y0, t, args)


def _odeint_fwd(func, options, y0, t, *args):
    yt = _scipy_odeint(func, options, y0, t, args)
    return yt, (func, options, y0, t, args, yt)


def _is_float(v):
    leaves = tree_flatten(v)[0]
    return bool(leaves) and all(np.issubdtype(np.result_type(x), np.floating) for x in leaves)


def _odeint_bwd(res, g):
    """Cotangents of (func, options, y0, t, *args) by the adjoint method (see the module docstring)."""
    func, options, y0, t, args, yt = res
    tfirst = dict(zip(_OPTIONS, options))["tfirst"]
    t = np.asarray(t, dtype=np.float64)
    yt = np.asarray(yt, dtype=np.float64)
    g = np.reshape(np.asarray(g, dtype=np.float64), yt.shape)
    n_t, n_y = yt.shape
    diff = [i for i, a in enumerate(args) if _is_float(a)]     # the args that get cotangents (pytrees too)
    sizes = [sum(int(np.size(x)) for x in tree_flatten(args[i])[0]) for i in diff]
    n_p = int(np.sum(sizes))

    def rhs(y, s):
        return np.asarray(func(s, y, *args) if tfirst else func(y, s, *args), dtype=np.float64).reshape(n_y)

    def rhs_vjp(y, s, a):
        """f(y, s) and the cotangents of y, s and the differentiated args for the cotangent ``a``."""
        prim = (s, y) + tuple(args) if tfirst else (y, s) + tuple(args)
        nums = (0, 1) + tuple(2 + i for i in diff)
        out, f_vjp = vjp(func, *prim, argnums=nums)
        cts = f_vjp(np.reshape(a, np.shape(out)))
        cy, cs = (cts[1], cts[0]) if tfirst else (cts[0], cts[1])
        cargs = [np.reshape(np.asarray(x, dtype=np.float64), -1) for c in cts[2:] for x in tree_flatten(c)[0]]
        return (np.asarray(out, dtype=np.float64).reshape(n_y), np.reshape(np.asarray(cy, dtype=np.float64), n_y),
                float(np.asarray(cs)), np.concatenate(cargs) if cargs else np.zeros(0))

    def augmented(state, s):
        y, a = state[:n_y], state[n_y:2 * n_y]
        f, cy, cs, cp = rhs_vjp(y, s, -a)
        return np.concatenate([f, cy, [cs], cp])

    # the augmented system: no Jacobian or band of the user's, y first, per-component tolerances made scalar
    aug = dict(zip(_OPTIONS, options), Dfun=None, col_deriv=0, ml=None, mu=None, tcrit=None, tfirst=False)
    for k in ("rtol", "atol"):
        if aug[k] is not None and np.ndim(aug[k]):
            aug[k] = float(np.min(aug[k]))
    aug_options = tuple(aug[k] for k in _OPTIONS)
    a = g[-1].copy()
    a_t0 = 0.0
    a_p = np.zeros(n_p)
    d_t = np.zeros(n_t)
    for i in range(n_t - 1, 0, -1):
        d_t[i] = float(np.dot(rhs(yt[i], t[i]), g[i]))       # moving an output time moves that output
        a_t0 -= d_t[i]
        state = np.concatenate([yt[i], a, [a_t0], a_p])
        back = _scipy_odeint(augmented, aug_options, state, np.array([t[i], t[i - 1]]), ())[1]
        a = back[n_y:2 * n_y] + g[i - 1]
        a_t0 = back[2 * n_y]
        a_p = back[2 * n_y + 1:]
    d_t[0] = a_t0
    d_args = [None] * len(args)
    offset = 0
    for i in diff:
        leaves, td = tree_flatten(args[i])
        pieces = []
        for x in leaves:
            n = int(np.size(x))
            piece = a_p[offset:offset + n]
            offset += n
            pieces.append(float(piece[0]) if np.ndim(x) == 0 and not isinstance(x, np.ndarray) else
                          np.reshape(piece, np.shape(x)).astype(np.result_type(x)))
        d_args[i] = tree_unflatten(td, pieces)
    d_y0 = np.reshape(a, np.shape(y0)) if isinstance(y0, np.ndarray) else (
        float(a[0]) if np.ndim(y0) == 0 else np.reshape(a, np.shape(y0)))
    return (None, None, d_y0, np.reshape(d_t, np.shape(t)), *d_args)


_odeint = custom_vjp(_odeint_fun)
_odeint.defvjp(_odeint_fwd, _odeint_bwd)


def odeint(func, y0, t, args=(), Dfun=None, col_deriv=0, ml=None, mu=None, rtol=None, atol=None, tcrit=None,
           h0=0.0, hmax=0.0, hmin=0.0, ixpr=0, mxstep=0, mxhnil=0, mxordn=12, mxords=5, printmessg=0, tfirst=False):
    """What funcgrad reads for ``scipy.integrate.odeint``: the options fixed when transforming, the arrays
    passed to the custom_vjp function ``_odeint`` (``full_output`` is not accepted)."""
    return _odeint(func, (Dfun, col_deriv, ml, mu, rtol, atol, tcrit, h0, hmax, hmin, ixpr, mxstep, mxhnil,
                          mxordn, mxords, printmessg, tfirst), y0, t, *args)


def _register_integrate():
    import scipy.integrate   # lazily (when_imported)
    define(scipy.integrate.odeint)(odeint)


when_imported("scipy.integrate", _register_integrate)
