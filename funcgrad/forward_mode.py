"""Forward mode: ``jvp`` (tangents pushed through the function beside its values) and ``jacfwd``.

``jvp(f, primals, tangents)`` returns ``(f(*primals), J @ tangents)`` with JAX's signature
(tuples of pytrees in and out). The generated code is ``f``'s own statements, each followed by
its tangent (the primitives' JVP lines, :mod:`funcgrad.transform.forward`): loops stay loops and
compile with Numba as the reverse mode's do. ``funcgrad.source`` prints it.
"""
from __future__ import annotations

import numpy as np

from .api import _jit_disabled, _match, _Transformed, _user_facing
from .errors import TreeStructureError
from .kernels.base import get_backend
from .transform.pipeline import build
from .transform.specs import is_float_leaf
from .tree import tree_flatten, tree_unflatten

__all__ = ["jvp", "jacfwd"]


class _JVP(_Transformed):
    """``f`` transformed to compute outputs and output tangents; cached per signature."""

    def __init__(self, fn, mode=None, jit=True, backend=None):
        super().__init__(fn, "jvp", 0, False, mode, jit, backend)

    def _build(self, sig, force_mode=None):
        policy = force_mode or ("nojit" if _jit_disabled() else self.policy)
        return build(self.fn, sig, self.backend, policy, kind="jvp")

    @_user_facing
    def run(self, primals, tangents):
        if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
            raise TypeError("jvp(f, primals, tangents): primals and tangents must be tuples (one entry per "
                            f"argument of f); received {type(primals).__name__} and {type(tangents).__name__}")
        if len(primals) != len(tangents):
            raise ValueError(f"jvp: {len(primals)} primals but {len(tangents)} tangents; give one tangent per primal")
        primals = tuple(primals)
        self.argnums = tuple(i for i, p in enumerate(primals)
                             if all(is_float_leaf(x) for x in tree_flatten(p)[0]) and tree_flatten(p)[0])
        built, single, nums, flat, trees, cap, key = self._lookup(primals)
        leaves = [x for ls in flat for x in ls if not isinstance(x, (str, type(None)))]
        tleaves = []
        for i in nums:
            tl, ttd = tree_flatten(tangents[i])
            if ttd != trees[i]:
                raise TreeStructureError(f"jvp: the tangent of argument {i} has structure {ttd!r} but the primal "
                                         f"has {trees[i]!r}")
            for x, v in zip(flat[i], tl):
                if np.shape(v) != np.shape(x):
                    raise ValueError(f"jvp: a tangent of shape {np.shape(v)} was given for argument {i}'s value "
                                     f"of shape {np.shape(x)}")
                tleaves.append(_match(np.asarray(v, dtype=np.result_type(x)), x) if isinstance(x, np.ndarray)
                               else float(v) if isinstance(x, float) else np.asarray(x).dtype.type(v))
        built, (outs, touts) = self._invoke(built, key, "fn", (*leaves, *cap, *tleaves), len(leaves))
        outs, touts = list(outs), list(touts)
        touts = [_match(tv, o) if o is not None and not isinstance(o, (str, bool, int)) else tv
                 for tv, o in zip(touts, outs)]
        return self._outputs(built, outs), self._outputs(built, touts)


_JVP_CACHE_ATTR = "__funcgrad_jvp__"


def _cached(fun, mode, jit, backend):
    per = getattr(fun, "__dict__", {}).get(_JVP_CACHE_ATTR) if hasattr(fun, "__dict__") else None
    if per is None:
        per = {}
        try:
            setattr(fun, _JVP_CACHE_ATTR, per)
        except (AttributeError, TypeError):
            return _JVP(fun, mode, jit, backend)
    t = per.get((mode, jit, backend))
    if t is None:
        t = per[(mode, jit, backend)] = _JVP(fun, mode, jit, backend)
    return t


def jvp(fun, primals, tangents, *, jit=True, backend=None, mode=None):
    """``(fun(*primals), J(primals) @ tangents)``: the Jacobian-vector product in one forward sweep.

    ``primals`` and ``tangents`` are tuples with one entry (a pytree) per argument; each tangent has its
    primal's structure and shapes. Arguments that hold non-float leaves (ints, strings) are constants.
    """
    return _cached(fun, mode, jit, get_backend(backend)).run(primals, tangents)


def jacfwd(fun, argnums=0, *, jit=True, backend=None, mode=None):
    """The Jacobian by forward mode: one ``jvp`` per input element; shape ``out.shape + in.shape``."""
    def jac(*args):
        single = isinstance(argnums, int)
        nums = (argnums,) if single else tuple(argnums)
        res = []
        for i in nums:
            x = np.asarray(args[i], dtype=np.result_type(args[i], np.float64))
            cols = []
            for k in range(max(x.size, 1)):
                e = np.zeros(x.size)
                e[k] = 1.0
                tans = tuple(np.reshape(e, x.shape) if j == i else
                             tree_unflatten(tree_flatten(a)[1], [np.zeros_like(np.asarray(v, dtype=float)) if
                                                                 np.ndim(v) else 0.0 for v in tree_flatten(a)[0]])
                             for j, a in enumerate(args))
                prim = tuple(x if j == i and isinstance(args[i], np.ndarray) else
                             (float(x) if j == i else a) for j, a in enumerate(args))
                if j_is_scalar(args[i]):
                    tans = tuple(float(e[0]) if j == i else t for j, t in enumerate(tans))
                _, t = jvp(fun, prim, tans, jit=jit, backend=backend, mode=mode)
                cols.append(np.asarray(t, dtype=float))
            y = cols[0]
            J = np.stack(cols, axis=-1).reshape(np.shape(y) + x.shape)
            res.append(J)
        return res[0] if single else tuple(res)
    return jac


def j_is_scalar(a):
    return not isinstance(a, np.ndarray)
