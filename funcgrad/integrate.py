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

Forward mode (``jvp``, ``jacfwd``, ``hessian``, ``hvp``) uses the JVP rule ``_odeint_jvp``: the forward
sensitivities integrated beside the state (see the section below). That rule is a custom_vjp function
too, whose VJP is the adjoint method on the augmented system, so reverse mode over forward mode (the
order-2 checks, ``grad`` of a function calling ``jvp``) goes through it.
"""
from __future__ import annotations

import numpy as np

from .api import vjp
from .errors import FuncgradError
from .forward_mode import _wrapper as _source_function, jvp
from .custom import custom_vjp, second_order_rule
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


def _call(func, tfirst, y, s, args):
    return func(s, y, *args) if tfirst else func(y, s, *args)


def _rhs_vjp(func, tfirst, y, s, args, diff, a):
    """``f(y, s)`` (flat) and the cotangents of ``y`` (flat), ``s`` (a float) and the args numbered ``diff``
    (trees like them) for the output cotangent ``a``."""
    prim = (s, y) + tuple(args) if tfirst else (y, s) + tuple(args)
    nums = (0, 1) + tuple(2 + i for i in diff)
    out, f_vjp = vjp(func, *prim, argnums=nums)
    cts = f_vjp(np.reshape(a, np.shape(out)))
    cy, cs = (cts[1], cts[0]) if tfirst else (cts[0], cts[1])
    return (np.ravel(np.asarray(out, dtype=np.float64)), np.ravel(np.asarray(cy, dtype=np.float64)),
            float(np.asarray(cs)), list(cts[2:]))


def _aug_options(options):
    """The options of an augmented system: no Jacobian or band of the user's, y first, per-component
    tolerances made scalar."""
    aug = dict(zip(_OPTIONS, options), Dfun=None, col_deriv=0, ml=None, mu=None, tcrit=None, tfirst=False)
    for k in ("rtol", "atol"):
        if aug[k] is not None and np.ndim(aug[k]):
            aug[k] = float(np.min(aug[k]))
    return tuple(aug[k] for k in _OPTIONS)


def _tree_add(a, b):
    if a is None:
        return b
    la, td = tree_flatten(a)
    return tree_unflatten(td, [x + y for x, y in zip(la, tree_flatten(b)[0])])


def _like(x, flat):
    """``flat`` (a float or an array) in the shape and kind of the argument ``x``."""
    if isinstance(x, np.ndarray) or np.ndim(x):
        return np.reshape(np.asarray(flat, dtype=np.float64), np.shape(x))
    return float(np.reshape(flat, -1)[0])


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

    def augmented(state, s):
        y, a = state[:n_y], state[n_y:2 * n_y]
        f, cy, cs, cts = _rhs_vjp(func, tfirst, y, s, args, diff, -a)
        cp = [np.reshape(np.asarray(x, dtype=np.float64), -1) for c in cts for x in tree_flatten(c)[0]]
        return np.concatenate([f, cy, [cs]] + cp)

    aug_options = _aug_options(options)
    a = g[-1].copy()
    a_t0 = 0.0
    a_p = np.zeros(n_p)
    d_t = np.zeros(n_t)
    for i in range(n_t - 1, 0, -1):
        f_i = np.ravel(np.asarray(_call(func, tfirst, yt[i], t[i], args), dtype=np.float64))
        d_t[i] = float(np.dot(f_i, g[i]))       # moving an output time moves that output
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
            pieces.append(_like(x, a_p[offset:offset + n]).astype(np.result_type(x))
                          if isinstance(x, np.ndarray) else _like(x, a_p[offset:offset + n]))
            offset += n
        d_args[i] = tree_unflatten(td, pieces)
    return (None, None, _like(y0, a), np.reshape(d_t, np.shape(t)), *d_args)


# --------------------------------------------------------------------------- forward mode: sensitivities
# The JVP of odeint integrates the forward sensitivity S = dy/d(inputs) . tangents beside the state:
#     y' = f(y, s, p),   S' = J_y f . S + J_p f . p_dot,   S(t0) = y0_dot - f(y0, t0) t0_dot,
# and the tangent of the output at t_i is S(t_i) + f(y(t_i), t_i) t_i_dot. The rule is itself a custom_vjp
# function (reverse mode over forward mode, funcgrad's second order, goes through it): its VJP is the adjoint
# method above applied to the augmented system, whose right-hand side funcgrad differentiates (it calls
# funcgrad.jvp of the user's func), plus the VJPs of the two places where f is evaluated directly.
_SENSITIVITY: dict = {}


def _sensitivity(func, tfirst, n, n_args, diff):
    """The augmented right-hand side ``(z, s, a0.., d<i>..) -> [f(y, s), J f . (S, d)]`` for ``z = [y, S]``,
    as Python source funcgrad reads (one per user function, state size and differentiated args)."""
    key = (func, bool(tfirst), n, n_args, tuple(diff))
    fn = _SENSITIVITY.get(key)
    if fn is not None:
        return fn
    if len(_SENSITIVITY) > 64:
        _SENSITIVITY.clear()
    a = [f"a{i}" for i in range(n_args)]
    d = {i: f"d{i}" for i in diff}
    # jvp of func itself (its transform is cached on it): s gets a zero tangent, a constant arg its own value
    # as a placeholder (jvp leaves non-float arguments constant)
    prim = ["s", "y"] if tfirst else ["y", "s"]
    tans = ["0.0", "S"] if tfirst else ["S", "0.0"]
    body = ["y = z[:%d]" % n, "S = z[%d:]" % n,
            f"out, tan = jvp(func, ({', '.join(prim + a)},), ({', '.join(tans + [d.get(i, a[i]) for i in range(n_args)])},))",
            "return np.concatenate((np.ravel(out), np.ravel(tan)))"]
    fn = _SENSITIVITY[key] = _source_function("odeint_sensitivity", ["z", "s"] + a + list(d.values()), body,
                                              {"jvp": jvp, "func": func})
    return fn


def _tangent_tree(x, tan, what):
    """The tangent of ``x`` as a float tree like ``x``: forward mode passes a zero placeholder (``0.0``, or
    ``zeros_like`` of the whole value, ``None`` here) for an argument that does not depend on the inputs."""
    leaves, td = tree_flatten(x)
    t_leaves, t_td = tree_flatten(0.0 if tan is None else tan)
    if t_td == td and all(np.shape(u) == np.shape(v) for u, v in zip(leaves, t_leaves)):
        return tree_unflatten(td, [np.asarray(v, dtype=np.float64) if isinstance(u, np.ndarray)
                                   else float(np.asarray(v)) for u, v in zip(leaves, t_leaves)])
    if all(not np.any(np.asarray(v)) for v in t_leaves):
        return tree_unflatten(td, [np.zeros(np.shape(u)) if isinstance(u, np.ndarray) else 0.0 for u in leaves])
    raise FuncgradError(f"odeint: the tangent of {what} does not have its structure")


def _odeint_jvp_fwd(primals, tangents):
    func, options, y0, t = primals[:4]
    args = tuple(primals[4:])
    tfirst = dict(zip(_OPTIONS, options))["tfirst"]
    t_arr = np.reshape(np.asarray(t, dtype=np.float64), -1)
    n_t = t_arr.size
    y0v = np.reshape(np.asarray(y0, dtype=np.float64), -1)
    n = y0v.size
    diff = tuple(i for i, a in enumerate(args) if _is_float(a))
    y0_dot = np.reshape(np.broadcast_to(np.asarray(tangents[2], dtype=np.float64), np.shape(y0)), -1)
    t_dot = np.reshape(np.broadcast_to(np.asarray(tangents[3], dtype=np.float64), np.shape(t)), -1)
    dots = tuple(_tangent_tree(args[i], tangents[4 + i], f"argument {i} of args") for i in diff)
    f0 = np.reshape(np.asarray(_call(func, tfirst, y0v, t_arr[0], args), dtype=np.float64), -1)
    z0 = np.concatenate([y0v, y0_dot - f0 * t_dot[0]])
    rhs = _sensitivity(func, tfirst, n, len(args), diff)
    aug_args = args + dots
    aug_options = _aug_options(options)
    zt = np.asarray(_scipy_odeint(rhs, aug_options, z0, t_arr, aug_args), dtype=np.float64)
    yt = _scipy_odeint(func, options, y0, t, args)    # the primal exactly as odeint gives it (zt's y is close)
    ft = np.stack([np.reshape(np.asarray(_call(func, tfirst, zt[i, :n], t_arr[i], args), dtype=np.float64), -1)
                   for i in range(n_t)])
    yt_dot = np.reshape(zt[:, n:] + ft * t_dot[:, None], np.shape(yt))
    res = (primals, tangents, tfirst, t_arr, t_dot, y0v, diff, dots, f0, z0, rhs, aug_options, aug_args, zt, ft)
    return (yt, yt_dot), res


def _odeint_jvp_fun(primals, tangents):
    return _odeint_jvp_fwd(primals, tangents)[0]


def _odeint_jvp_bwd(res, g):
    primals, tangents, tfirst, t_arr, t_dot, y0v, diff, dots, f0, z0, rhs, aug_options, aug_args, zt, ft = res
    func, options, y0, t = primals[:4]
    args = tuple(primals[4:])
    n_t, n = t_arr.size, y0v.size
    g_y, g_yd = (np.zeros((n_t, n)) if c is None else np.reshape(np.asarray(c, dtype=np.float64), (n_t, n))
                 for c in g)
    g_z = np.concatenate([g_y, g_yd], axis=1)
    g_t = np.zeros(n_t)
    g_tdot = np.einsum("ij,ij->i", ft, g_yd)        # the output tangent's term f(y_i, t_i) t_i_dot
    g_args = {i: None for i in diff}
    for i in range(n_t):
        if t_dot[i] != 0.0 and np.any(g_yd[i]):
            _, cy, cs, cts = _rhs_vjp(func, tfirst, zt[i, :n], t_arr[i], args, diff, g_yd[i] * t_dot[i])
            g_z[i, :n] += cy
            g_t[i] += cs
            for i_arg, c in zip(diff, cts):
                g_args[i_arg] = _tree_add(g_args[i_arg], c)
    cts = _odeint_bwd((rhs, aug_options, z0, t_arr, aug_args, zt), g_z)
    g_z0 = cts[2]
    g_t += cts[3]
    for i in diff:
        g_args[i] = _tree_add(g_args[i], cts[4 + i])
    g_dots = {i: cts[4 + len(args) + k] for k, i in enumerate(diff)}
    g_y0, g_s0 = g_z0[:n].copy(), g_z0[n:]
    g_tdot[0] -= float(np.dot(f0, g_s0))             # S(t0) = y0_dot - f(y0, t0) t0_dot
    if t_dot[0] != 0.0 and np.any(g_s0):
        _, cy, cs, cts0 = _rhs_vjp(func, tfirst, y0v, t_arr[0], args, diff, -g_s0 * t_dot[0])
        g_y0 += cy
        g_t[0] += cs
        for i_arg, c in zip(diff, cts0):
            g_args[i_arg] = _tree_add(g_args[i_arg], c)
    ct_primals = (None, None, _like(y0, g_y0), np.reshape(g_t, np.shape(t)),
                  *[g_args.get(i) for i in range(len(args))])
    ct_tangents = (None, None, _like(y0, g_s0), np.reshape(g_tdot, np.shape(t)),
                   *[g_dots.get(i) for i in range(len(args))])
    return ct_primals, ct_tangents


def _entries(d, n):
    """The ``n`` per-argument entries of a tangent of an argument tuple (forward mode may pass one zero
    placeholder for the whole tuple): ``None`` where zero."""
    if isinstance(d, (tuple, list)) and len(d) == n:
        return list(d)
    return [None] * n


def _flat_dir(d, like):
    """A direction for ``like`` (a state or the times), flat float64: zeros for ``None``."""
    if d is None:
        return np.zeros(int(np.size(like)))
    return np.reshape(np.broadcast_to(np.asarray(d, dtype=np.float64), np.shape(like)), -1).copy()


def _jvp_call(func, tfirst, y, s, args, diff, dy, ds, dargs):
    """The tangent of ``f(y, s, *args)`` (flat) in the direction ``(dy, ds, dargs[i] for i in diff)``."""
    prim = (s, y) + tuple(args) if tfirst else (y, s) + tuple(args)
    tan = [ds, dy] if tfirst else [dy, ds]
    for i, a in enumerate(args):
        tan.append(dargs[i] if i in diff else a)     # constants: their own value, a placeholder jvp ignores
    _, t_out = jvp(func, prim, tuple(tan))
    return np.reshape(np.asarray(t_out, dtype=np.float64), -1)


def _odeint_jvp_jvp(primals2, tangents2):
    """Forward mode over the JVP rule (forward over forward, as ``jacfwd(jacfwd(f))`` and the order-2
    checks in forward mode need): ``(y, y_dot)`` moves with the primals as the rule's own tangent says, and
    ``y_dot = S + f(y, t) t_dot`` moves with ``S``, the augmented system's solution, whose tangent is the
    JVP rule applied to the augmented system (its sensitivity system differentiates the user's func twice)."""
    primals, tangents = primals2
    func, options, y0, t = primals[:4]
    args = tuple(primals[4:])
    n_args = len(args)
    d_prim = _entries(_entries(tangents2, 2)[0], 4 + n_args)
    d_tan = _entries(_entries(tangents2, 2)[1], 4 + n_args)
    (yt, yt_dot), res = _odeint_jvp_fwd(primals, tangents)
    _, _, tfirst, t_arr, t_dot, y0v, diff, dots, f0, z0, rhs, aug_options, aug_args, zt, ft = res
    n_t, n = t_arr.size, y0v.size
    dy0, dt = _flat_dir(d_prim[2], y0), _flat_dir(d_prim[3], t)
    ddy0, ddt = _flat_dir(d_tan[2], y0), _flat_dir(d_tan[3], t)
    dargs = {i: _tangent_tree(args[i], d_prim[4 + i], f"argument {i} of args") for i in diff}
    ddots = tuple(_tangent_tree(args[i], d_tan[4 + i], f"argument {i} of args") for i in diff)
    # the output y: the rule in the primals' direction
    _, d_yt = _odeint_jvp_fun(primals, (None, None, np.reshape(dy0, np.shape(y0)), np.reshape(dt, np.shape(t)),
                                        *[dargs.get(i) for i in range(n_args)]))
    # its tangent y_dot: S from the augmented system, moved by the rule over that system
    jf0 = _jvp_call(func, tfirst, y0v, t_arr[0], args, diff, dy0, dt[0], dargs)
    dz0 = np.concatenate([dy0, ddy0 - jf0 * t_dot[0] - f0 * ddt[0]])
    aug_dirs = [dargs.get(i) for i in range(n_args)] + list(ddots)
    _, d_zt = _odeint_jvp_fun((rhs, aug_options, z0, t_arr) + tuple(aug_args), (None, None, dz0, dt, *aug_dirs))
    d_zt = np.reshape(np.asarray(d_zt, dtype=np.float64), (n_t, 2 * n))
    d_ft = np.stack([_jvp_call(func, tfirst, zt[i, :n], t_arr[i], args, diff, d_zt[i, :n], dt[i], dargs)
                     for i in range(n_t)])
    d_yt_dot = d_zt[:, n:] + d_ft * t_dot[:, None] + ft * ddt[:, None]
    return (yt, yt_dot), (np.reshape(d_yt, np.shape(yt)), np.reshape(d_yt_dot, np.shape(yt)))


_odeint_jvp = second_order_rule("odeint", _odeint_jvp_fun, _odeint_jvp_fwd, _odeint_jvp_bwd, _odeint_jvp_jvp)


_odeint = custom_vjp(_odeint_fun)
_odeint.defvjp(_odeint_fwd, _odeint_bwd)
_odeint.defjvp(_odeint_jvp)


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
