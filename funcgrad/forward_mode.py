"""Forward mode: ``jvp`` (tangents pushed through the function beside its values) and ``jacfwd``.

``jvp(f, primals, tangents)`` returns ``(f(*primals), J @ tangents)`` with JAX's signature
(tuples of pytrees in and out). The generated code is ``f``'s own statements, each followed by
its tangent (the primitives' JVP lines, :mod:`funcgrad.transform.forward`): loops stay loops and
compile with Numba as the reverse mode's do. ``funcgrad.source`` prints it.

Also here: ``linearize``; second order (``hvp``, ``hessian``, ``grad`` of ``grad``: funcgrad's
transforms applied to the generated forward code); ``jvp``/``vjp`` called inside a transformed function (the
generated code inlined, see ``_inline_jvp``); and reverse mode over a ``custom_jvp`` function (its rule
transposed, ``_transpose_custom_jvp``).
"""
from __future__ import annotations

import ast
import functools
import inspect
import linecache

import numpy as np

from . import api as _api
from . import custom as _custom
from .api import _jit_disabled, _match, _Transformed, _user_facing
from .errors import (ArgumentTypeError, DeviceError, FuncgradError, NoDerivativeError, TreeStructureError,
                     UnsupportedSyntaxError)
from .kernels.base import get_backend, is_device_array
from .kernels.cuda_backend import CUDA
from .transform.fence import error
from .transform.normalize.calls import _local_as_function, _value_tree
from .transform.normalize.common import LocalFunction
from .transform.pipeline import build
from .transform.specs import is_float_leaf, leaf_spec
from .transform.values import Dyn, Static, Struct, map_struct
from .tree import tree_flatten, tree_flatten_with_path, tree_map, tree_unflatten

__all__ = ["jvp", "jacfwd", "linearize", "hvp", "hessian", "vjp_of_jvp", "jvp_of_jvp"]


class _JVP(_Transformed):
    """``f`` transformed to compute outputs and output tangents; cached per signature."""

    def __init__(self, fn, mode=None, jit=True, backend=None):
        super().__init__(fn, "jvp", 0, False, mode, jit, backend)

    def _build(self, sig, force_mode=None):
        policy = force_mode or ("nojit" if _jit_disabled() else self.policy)
        return build(self.fn, sig, self._backend_for(sig), policy, kind="jvp")

    @_user_facing
    def run(self, primals, tangents):
        if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
            raise TypeError("jvp(f, primals, tangents): primals and tangents must be tuples (one entry per "
                            f"argument of f); received {type(primals).__name__} and {type(tangents).__name__}")
        if len(primals) != len(tangents):
            raise ValueError(f"jvp: {len(primals)} primals but {len(tangents)} tangents; give one tangent per primal")
        primals = tuple(primals)
        if self._fast:
            plan = self._fast.get(_api._fast_key(primals))
            if plan is not None:
                out = self._fast_run(plan, primals, tangents)
                if out is not _api._MISS:
                    return out
        _refuse_space_tangents(primals, tangents)
        self.argnums = _tangent_argnums(primals)
        built, single, nums, flat, trees, cap, key = self._lookup(primals)
        leaves = _runtime_leaves(flat, key)
        tleaves = []
        for i in nums:
            x, v = primals[i], tangents[i]
            if type(x) is np.ndarray and type(v) is np.ndarray and v.dtype == x.dtype and v.shape == x.shape:
                tleaves.append(v)     # the common case, as it is
                continue
            tl, ttd = tree_flatten(tangents[i])
            if ttd != trees[i]:
                raise TreeStructureError(f"jvp: the tangent of argument {i} has structure {ttd!r} but the primal "
                                         f"has {trees[i]!r}")
            for x, v in zip(flat[i], tl):
                if np.shape(v) != np.shape(x):
                    raise ValueError(f"jvp: a tangent of shape {np.shape(v)} was given for argument {i}'s value "
                                     f"of shape {np.shape(x)}")
                tleaves.append(_device_tangent(v, x, i) if is_device_array(x) or is_device_array(v) else
                               _match(np.asarray(v, dtype=np.result_type(x)), x) if isinstance(x, np.ndarray)
                               else float(v) if isinstance(x, float) else np.asarray(x).dtype.type(v))
        built, (outs, touts) = self._invoke(built, key, "fn", (*leaves, *cap, *tleaves), len(leaves))
        outs, touts = list(outs), list(touts)
        touts = [_match(tv, o) if o is not None and not isinstance(o, (str, bool, int)) else tv
                 for tv, o in zip(touts, outs)]
        if len(leaves) == len(primals) and not isinstance(built.out_tree, (Struct, Static)) and \
                self.cache.get(key) is built:
            fk = _api._fast_key(primals)
            if fk is not None:   # the next call with arrays and floats of these dtypes and ndims skips the above
                self._fast[fk] = (built, key, tuple(nums))
        return self._outputs(built, outs), self._outputs(built, touts, tangents=True)

    def _fast_run(self, plan, primals, tangents):
        """A call of a signature seen before whose primals are arrays and floats and whose tangents match them
        exactly (same type, dtype and shape): the general path's checks without flattening or key building;
        ``_MISS`` sends anything else down the general path."""
        built, key, nums = plan
        if built.captured:
            cap = [g() for _, g in built.captured]
            if built.cap_specs != tuple(leaf_spec(c) for c in cap):
                return _api._MISS
        else:
            cap = ()
        if built.static_checks and not _api._statics_unchanged(built.static_checks):
            return _api._MISS
        tleaves = []
        for i in nums:
            x, v = primals[i], tangents[i]
            if type(v) is not type(x) or (type(x) is np.ndarray and (v.dtype != x.dtype or v.shape != x.shape)):
                return _api._MISS
            tleaves.append(v)
        got, (outs, touts) = self._invoke(built, key, "fn", (*primals, *cap, *tleaves), len(primals))
        if got is not built:
            return _api._MISS
        out, tout = outs[0], touts[0]
        if out is not None and not isinstance(out, (str, bool, int)):
            tout = _match(tout, out)
        return out, tout


def _device_tangent(v, x, i):
    """The tangent ``v`` of the GPU array ``x`` (argument ``i``): a GPU array of its dtype. A host array paired
    with a GPU primal, or the other way round, is refused (funcgrad never copies between them on its own)."""
    if not (is_device_array(x) and is_device_array(v)):
        where, other = ("GPU", "host") if is_device_array(x) else ("host", "GPU")
        raise DeviceError(f"jvp: argument {i} is a {where} array but its tangent is a {other} value; give the "
                          f"tangent where the primal is (funcgrad.device_put / funcgrad.device_get)")
    K = CUDA.namespace()
    v = K.as_device(v)
    return v if v.dtype == x.dtype else K.astype(v, x.dtype)


def _refuse_space_tangents(primals, tangents, what="jvp"):
    """A value of a user's vector space among the primals is a constant of forward mode: refused where its tangent
    is anything but a zero number (or None), which would otherwise be dropped."""
    for i, (p, t) in enumerate(zip(primals, tangents)):
        if not any(_custom.is_user_vspace_value(x) for x in tree_flatten(p)[0]):
            continue
        if all(t is None or isinstance(t, (int, float, np.number, np.ndarray)) and not np.any(t)
               for t in tree_flatten(t)[0]):
            continue
        raise ArgumentTypeError(
            f"{what}: primal {i} holds a {type(p).__name__ if _custom.is_user_vspace_value(p) else 'value'} of a "
            "vector space registered with VSpace.register, with a tangent; forward mode (jvp, hvp, linearize) does "
            "not differentiate with respect to such values. Use grad or vjp (reverse mode), which take its "
            "derivative from the rules (defvjp) of the primitives it is given to.")


def _float_argnums(primals):
    """The arguments made of floating-point leaves only (jvp differentiates those; ints are constants)."""
    out = []
    for i, p in enumerate(primals):
        if type(p) is np.ndarray:
            ok = p.dtype.kind in "fc"
        elif type(p) is float:
            ok = True
        else:
            ls = tree_flatten(p)[0]
            ok = bool(ls) and all(is_float_leaf(x) for x in ls)
        if ok:
            out.append(i)
    return tuple(out)


def _tangent_argnums(primals):
    """:func:`_float_argnums` of a forward-mode call, refused in words when no argument can carry a tangent."""
    nums = _float_argnums(primals)
    if not nums:
        kinds = ", ".join(f"{type(p).__name__} ({p!r})" if np.ndim(p) == 0 and not isinstance(p, (dict, list, tuple))
                          else type(p).__name__ for p in primals) or "no arguments"
        raise ArgumentTypeError(f"forward mode (jvp, linearize, hvp): no argument is made of floating-point values "
                                f"(received {kinds}); tangents are taken along float arguments: pass floats "
                                "(3.0 for 3) or float arrays")
    return nums


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


_POSITIONAL_ATTR = "__funcgrad_positional__"


def _positional(fun, n):
    """``fun`` for ``n`` positional primals: ``fun`` itself, or, where the call ``fun(*primals)`` also binds
    defaults, keyword-only parameters or an empty ``**kwargs``, a generated wrapper of ``n`` parameters that
    calls it (funcgrad reads the wrapper and binds the rest at that call, as reverse mode does)."""
    per = getattr(fun, "__dict__", None)
    if per is None:
        return fun
    store = per.get(_POSITIONAL_ATTR)
    if store is None:
        store = {}
        try:
            setattr(fun, _POSITIONAL_ATTR, store)
        except (AttributeError, TypeError):
            return fun
    if n in store:
        return store[n]
    w = fun
    try:
        params = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        params = None
    if params is not None and not isinstance(fun, _custom.CustomFunction):
        named = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        var = [p.name for p in params if p.kind == p.VAR_POSITIONAL]
        if any(p.kind == p.VAR_KEYWORD for p in params) or n < len(named):
            pos = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][:n]
            pos += [f"{var[0] if var else 'arg'}{k}" for k in range(n - len(pos))]
            w = _api._wrapper(fun, pos, [], getattr(fun, "__qualname__", getattr(fun, "__name__", "f")))
    store[n] = w
    return w


def jvp(fun, primals, tangents, *, jit=True, backend=None, mode=None):
    """``(fun(*primals), J(primals) @ tangents)``: the Jacobian-vector product in one forward sweep.

    ``primals`` and ``tangents`` are tuples with one entry (a pytree) per argument; each tangent has its
    primal's structure and shapes. Arguments that hold non-float leaves (ints, strings) are constants.
    """
    if isinstance(primals, (tuple, list)):
        fun = _positional(fun, len(primals))
    return _cached(fun, mode, jit, get_backend(backend)).run(primals, tangents)


def jacfwd(fun, argnums=0, *, jit=True, backend=None, mode=None):
    """The Jacobian by forward mode: one ``jvp`` per input element; shape ``out.shape + in.shape``."""
    @_user_facing
    def jac(*args):
        _api.refuse_device_args(args, "jacfwd")
        single = isinstance(argnums, int)
        nums = (argnums,) if single else tuple(argnums)
        res = []
        for i in nums:
            if not -len(args) <= i < len(args):
                raise ValueError(f"jacfwd: argnums={argnums!r} is out of range for {len(args)} arguments")
            a = args[i]
            if not (is_float_leaf(a) or isinstance(a, (int, np.integer)) and not isinstance(a, bool)):
                raise TypeError(f"jacfwd of {getattr(fun, '__name__', 'f')}: argument {i} is a "
                                f"{type(a).__name__}; jacfwd differentiates with respect to an array or a float "
                                "(use funcgrad.jvp for containers)")
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
    jac._funcgrad_inline = functools.partial(inline_jacobian, fun, argnums, "jacfwd")   # inside a transform
    return jac


def linearize(fun, *primals, jit=True, backend=None, mode=None):
    """``(fun(*primals), f_jvp)`` with ``f_jvp(*tangents) == jvp(fun, primals, tangents)[1]``, JAX's
    ``linearize``: the primals are fixed, ``f_jvp`` takes one tangent per primal (a pytree like it).

    ``fun(*primals)`` is computed once, here. ``f_jvp`` runs the generated forward code (compiled once per
    signature), which computes the primal values its tangents read beside them: no intermediate values
    are stored between calls, so each call costs one ``jvp`` (about 1.5-3 times ``fun``), not less."""
    primals = tuple(primals)
    _refuse_space_tangents(primals, primals, "linearize")   # (every primal is linearized, with a tangent)
    t = _cached(fun, mode, jit, get_backend(backend))
    nargs = len(primals)
    y = jvp(fun, primals, tuple(_zeros_like_tree(p) for p in primals), jit=jit, backend=backend, mode=mode)[0]

    @_user_facing
    def f_jvp(*tangents):
        if len(tangents) != nargs:
            raise TypeError(f"linearize: the linear function takes {nargs} tangent(s), one per primal; "
                            f"received {len(tangents)}")
        return t.run(primals, tangents)[1]

    f_jvp.__name__ = f"{getattr(fun, '__name__', 'f')}_jvp"
    return y, f_jvp


def _zeros_like_tree(p):
    leaves, td = tree_flatten(p)
    return tree_unflatten(td, [_device_zeros(v, v.dtype) if is_device_array(v) else
                               np.zeros(np.shape(v), dtype=np.result_type(v)) if isinstance(v, np.ndarray)
                               else (0j if isinstance(v, complex) else 0.0) for v in leaves])


def _device_zeros(v, dtype=np.float64):
    """Zeros of the GPU array ``v``'s shape, on the GPU (a tangent or seed the caller did not give)."""
    return CUDA.namespace().full(tuple(v.shape), 0, np.dtype(dtype))


def _float_tangent(v):
    """A tangent leaf as the second-order helpers pass it to the generated code: float64 (a GPU array stays
    on the GPU), or a Python float."""
    if is_device_array(v):
        K = CUDA.namespace()
        v = K.as_device(v)
        return v if v.dtype == np.float64 else K.astype(v, np.float64)
    return np.asarray(v, dtype=float) if np.ndim(v) else float(v)


def j_is_scalar(a):
    return not isinstance(a, np.ndarray)


# ----------------------------------------------------------------------------- second order
# funcgrad reads the code it generated like any other Python: the reverse pass applied to the forward
# pass's output gives Hessian-vector products (reverse over forward), the forward pass applied to it
# again gives second directional derivatives, and grad of grad is grad of a jvp.
_COUNTER = [0]


def _wrapper(label, params, body_lines, scope):
    """A real Python function (with source funcgrad can read) built from lines of code."""
    _COUNTER[0] += 1
    name = "_" + "".join(c if c.isalnum() or c == "_" else "_" for c in label) + f"_{_COUNTER[0]}"
    src = f"def {name}({', '.join(params)}):\n" + "".join(f"    {ln}\n" for ln in body_lines)
    filename = f"<funcgrad {label} wrapper {_COUNTER[0]}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    ns = dict(scope)
    ns["np"] = np
    exec(compile(src, filename, "exec"), ns)
    return ns[name]


def _jvp_built(fun, primals, mode, jit, backend):
    fun = _positional(fun, len(primals))
    t = _cached(fun, mode, jit, get_backend(backend))
    t.argnums = _tangent_argnums(primals)
    built, single, nums, flat, trees, cap, key = t._lookup(tuple(primals))
    return t, built, nums, flat, trees, cap, key


def _readable(built):
    """The generated Python function of ``built`` that funcgrad reads and transforms again: the GPU backend's
    wrapper (which computes lazy arguments and results) unwrapped."""
    fn = built.py_fn
    return getattr(fn, "__wrapped__", fn)


def _runtime_leaves(flat, key):
    """The leaves of the arguments (``flat``: per argument) that the generated code takes, as its signature
    ``key`` says: not those fixed into it (strings, None, and bools that are not differentiated)."""
    return [x for ls, (_, specs, _) in zip(flat, _api._host_key(key)) for x, sp in zip(ls, specs) if sp[0] != "static"]


class _SecondOrder:
    """Per (function, signature): the generated jvp as Python, and transforms of it, built once."""

    def __init__(self, fun, primals, mode, jit, backend):
        self.t, self.built, self.nums, self.flat, self.trees, cap, key = _jvp_built(fun, primals, mode, jit, backend)
        # which leaves the generated code takes: not those fixed into it (strings, None, and flags: bools that are
        # not differentiated), as its signature says
        self.runtime = [[sp[0] != "static" for sp in specs] for _, specs, _ in _api._host_key(key)]
        self.n = sum(map(sum, self.runtime))
        self.diff_pos = []
        pos = 0
        for i, ls in enumerate(self.flat):
            for x, rt in zip(ls, self.runtime[i]):
                if not rt:
                    continue
                if i in self.nums:
                    self.diff_pos.append(pos)
                pos += 1
        self.n_tan = len(self.diff_pos)
        self.n_out = len(self.built.out_atoms)
        xs = [f"x{i}" for i in range(self.n)]
        ts = [f"tan{i}" for i in range(self.n_tan)]   # not t<n>: its adjoint d_t<n> is a temporary's adjoint's name
        caps = [f"_cap{i}" for i in range(len(cap))]
        self.scope = {"_jvpfn": _readable(self.built)}
        self.scope.update({c: v for c, v in zip(caps, cap)})
        self.call = f"_jvpfn({', '.join(xs + caps + ts)})"
        self.xs, self.ts, self.caps = xs, ts, caps
        self._rof = {}
        self._fof = None

    def leaves(self, primals):
        return [x for a, rt in zip(primals, self.runtime) for x, r in zip(tree_flatten(a)[0], rt) if r]

    def rev_over_fwd(self, outs_used, mode, jit, wrt=None):
        """grad of ``sum_k <c_k, tangent_k>`` w.r.t. the primal leaves and the tangents; with ``wrt`` (positions
        in ``diff_pos``), w.r.t. those primal leaves only (a Hessian's argument: the others' derivatives are
        never computed, so a parameter with no rule elsewhere is not refused)."""
        key = (tuple(outs_used), mode, jit, wrt)
        if key not in self._rof:
            cs = [f"c{k}" for k in outs_used]
            terms = " + ".join(f"np.sum(_r[1][{k}] * c{k})" for k in outs_used) or "0.0"
            w = _wrapper("vjp_of_jvp", self.xs + self.ts + cs, [f"_r = {self.call}", f"return {terms}"], self.scope)
            nums = tuple(self.diff_pos) + tuple(range(self.n, self.n + self.n_tan)) if wrt is None else \
                tuple(self.diff_pos[k] for k in wrt)
            self._rof[key] = _api.grad(w, argnums=nums, jit=jit, mode=mode)
        return self._rof[key]

    def fwd_over_fwd(self, mode, jit):
        if self._fof is None:
            outs = ", ".join(f"_r[1][{k}]" for k in range(self.n_out))
            self._fof = _wrapper("jvp_of_jvp", self.xs + self.ts, [f"_r = {self.call}", f"return ({outs},)"],
                                 self.scope)
        return self._fof


def _so(fun, primals, mode, jit, backend, complex_ok=False):
    """The cached :class:`_SecondOrder` of ``fun`` at the signature of ``primals``. ``complex_ok``: the caller
    passes its own tangents of the primals' dtypes to the generated code (the second-order helpers here seed
    real tangents, so they refuse complex arguments)."""
    fun = _positional(fun, len(primals))
    t = _cached(fun, mode, jit, get_backend(backend))
    t.argnums = _tangent_argnums(primals)
    if not complex_ok and any(np.iscomplexobj(x) for i in t.argnums for x in tree_flatten(primals[i])[0]):
        raise TypeError("second-order derivatives (hessian, hvp, grad of grad, jvp of jvp) of functions of complex "
                        "arguments are not supported; pass the real and imaginary parts as real arguments "
                        "(complex values inside the function are fine)")
    key = t._prepare(tuple(primals))[-1]
    store = t.__dict__.setdefault("_second_order", {})
    so = store.get(key)
    if so is None:
        so = store[key] = _SecondOrder(fun, primals, mode, jit, backend)
    return so


def _tangent_leaves(so, tangents):
    out = []
    for i in so.nums:
        out.extend(_float_tangent(v) for v in tree_flatten(tangents[i])[0])
    return out


@_user_facing
def vjp_of_jvp(fun, primals, tangents, cotangents, *, jit=True, backend=None, mode=None):
    """``(d/dprimals <c, J(x) v>, J(x)^T c)`` for output cotangents ``c`` (one per output leaf), by the
    reverse pass over the generated forward pass. With a scalar ``fun`` and ``c = 1`` the first is the
    Hessian-vector product ``H v``."""
    so = _so(fun, primals, mode, jit, backend)
    cts = [c for c in cotangents]
    g = so.rev_over_fwd(list(range(len(cts))), mode, jit)(*so.leaves(primals), *_tangent_leaves(so, tangents), *cts)
    g = list(g)
    dx, dt = g[:len(so.diff_pos)], g[len(so.diff_pos):]
    return _unflatten(so, dx), _unflatten(so, dt)


def _unflatten(so, leaves):
    res, k = [], 0
    for i in so.nums:
        n = len(tree_flatten(tree_unflatten(so.trees[i], [0] * so.trees[i].num_leaves))[0])
        res.append(tree_unflatten(so.trees[i], leaves[k:k + n]))
        k += n
    return tuple(res)


@_user_facing
def hvp(fun, primals, tangents, *, jit=True, backend=None, mode=None):
    """The Hessian-vector product of a scalar function: ``H(primals) @ tangents``, one per primal, without
    forming the Hessian (reverse mode over forward mode)."""
    _refuse_space_tangents(primals, tangents, "hvp")
    _require_scalar_output(_so(fun, primals, mode, jit, backend), primals, fun, "hvp")
    hx, _ = vjp_of_jvp(fun, primals, tangents, [1.0], jit=jit, backend=backend, mode=mode)
    return hx if len(hx) != 1 else hx[0]


def _require_scalar_output(so, primals, fun, what):
    """Refuse (once per signature, cached) a function whose output is not one real scalar (or size-1 array):
    seeding its tangent with 1 would silently give the Hessian of the outputs' sum."""
    ok = so.__dict__.get("_scalar_output")
    if ok is None:
        tans = tuple(tree_unflatten(tree_flatten(a)[1], [_device_zeros(v) if is_device_array(v) else
                                                         np.zeros(np.shape(v)) if np.ndim(v) else 0.0
                                                         for v in tree_flatten(a)[0]]) for a in primals)
        y, _ = so.t.run(tuple(primals), tans)
        ys = tree_flatten(y)[0]
        ok = len(ys) == 1 and np.size(ys[0]) == 1 and not np.iscomplexobj(ys[0])
        so._scalar_output = ok
        so._output_desc = (f"{len(ys)} values" if len(ys) != 1 else
                           f"an array of shape {np.shape(ys[0])}" if np.size(ys[0]) != 1 else "a complex value")
    if not ok:
        raise TypeError(f"{what} needs a function with one real scalar output; "
                        f"{getattr(fun, '__qualname__', 'the function')} returns {so._output_desc}: take a scalar "
                        "of it (its sum, one element) to differentiate, or use jacfwd/jacrev for first derivatives")


def _hvp_of_args(fun, primals, tangents, argnums, *, jit, backend, mode):
    """The parts of ``hvp`` for the arguments ``argnums`` (the reverse pass differentiates those alone)."""
    so = _so(fun, primals, mode, jit, backend)
    wrt = []
    for a in argnums:
        if a not in so.nums:
            raise TypeError(f"hessian: argument {a} has no floating-point leaves to differentiate")
        first = sum(len(tree_flatten(primals[i])[0]) for i in so.nums if i < a)
        wrt.extend(range(first, first + len(tree_flatten(primals[a])[0])))
    g = so.rev_over_fwd([0], mode, jit, tuple(wrt))(*so.leaves(primals), *_tangent_leaves(so, tangents), 1.0)
    g = list(g) if isinstance(g, tuple) else [g]
    out, k = [], 0
    for a in argnums:
        n = len(tree_flatten(primals[a])[0])
        out.append(tree_unflatten(so.trees[a], g[k:k + n]))
        k += n
    return out


def _hvp_of_arg(fun, primals, tangents, argnum, *, jit, backend, mode):
    """The part of ``hvp`` for argument ``argnum`` alone (the reverse pass differentiates that argument only)."""
    return _hvp_of_args(fun, primals, tangents, (argnum,), jit=jit, backend=backend, mode=mode)[0]


def _zero_like_arg(a):
    return tree_unflatten(tree_flatten(a)[1], [np.zeros(np.shape(v)) if np.ndim(v) else 0.0
                                               for v in tree_flatten(a)[0]])


def hessian(fun, argnums=0, *, jit=True, backend=None, mode=None):
    """The Hessian of a scalar function, one Hessian-vector product per input element. With an int
    ``argnums``, an array of shape ``x.shape + x.shape``; with a tuple, as JAX gives it, a tuple of tuples:
    ``H[i][j]`` has shape ``x_i.shape + x_j.shape`` (the second derivative in ``argnums[i]`` and
    ``argnums[j]``). The arguments differentiated are arrays or floats."""
    single = isinstance(argnums, (int, np.integer))
    if not single and not (isinstance(argnums, (tuple, list)) and argnums
                           and all(isinstance(i, (int, np.integer)) for i in argnums)):
        raise TypeError(f"hessian: argnums must be an int or a non-empty tuple of ints; received {argnums!r}")
    nums_in = (int(argnums),) if single else tuple(int(i) for i in argnums)

    @_user_facing
    def hess(*args):
        _api.refuse_device_args(args, "hessian (a full matrix, one Hessian-vector product per element: hvp is)")
        nums = tuple(i + len(args) if i < 0 else i for i in nums_in)
        for i in nums:
            if not 0 <= i < len(args):
                raise ValueError(f"hessian: argnums={argnums!r} is out of range for {len(args)} arguments")
            if not (is_float_leaf(args[i]) or isinstance(args[i], (int, np.integer))
                    and not isinstance(args[i], bool)):
                raise TypeError(f"hessian: argument {i} is a {type(args[i]).__name__}, not an array or float: "
                                "pass the arrays to differentiate as arguments of their own, or use hvp")
        args = tuple(float(a) if i in nums and isinstance(a, (int, np.integer)) else a for i, a in enumerate(args))
        xs = [np.asarray(args[i], dtype=float) for i in nums]
        _require_scalar_output(_so(fun, args, mode, jit, backend), args, fun, "hessian")
        blocks = [[[] for _ in nums] for _ in nums]      # blocks[b][a]: columns d/dx_a of the gradient in x_b
        for a, (i, xa) in enumerate(zip(nums, xs)):
            for k in range(max(xa.size, 1)):
                e = np.zeros(xa.size)
                e[k] = 1.0
                tans = tuple((e.reshape(xa.shape) if isinstance(args[i], np.ndarray) else float(e[0])) if j == i
                             else _zero_like_arg(v) for j, v in enumerate(args))
                hs = _hvp_of_args(fun, args, tans, nums, jit=jit, backend=backend, mode=mode)
                for b, h in enumerate(hs):
                    blocks[b][a].append(np.asarray(h, dtype=float).reshape(-1))
        H = tuple(tuple(np.stack(blocks[b][a], axis=-1).reshape(xs[b].shape + xs[a].shape)
                        for a in range(len(nums))) for b in range(len(nums)))
        return H[0][0] if single else H
    hess._funcgrad_inline = refuse_inline("hessian")
    return hess


@_user_facing
def jvp_of_jvp(fun, primals, tangents, dprimals, dtangents, *, jit=True, backend=None, mode=None):
    """The forward pass over the forward pass: the derivative of ``(x, v) -> J(x) v`` along ``(dx, dv)``,
    i.e. ``f''(x)[v, dx] + J(x) dv``."""
    so = _so(fun, primals, mode, jit, backend)
    w = so.fwd_over_fwd(mode, jit)
    xl = so.leaves(primals)
    dxl = [0.0 if not is_float_leaf(x) else v for x, v in zip(xl, so.leaves(dprimals))]
    args = (*xl, *_tangent_leaves(so, tangents))
    dargs = (*dxl, *_tangent_leaves(so, dtangents))
    y, ty = jvp(w, args, dargs, jit=jit, backend=backend, mode=mode)
    return y, ty


# ----------------------------------------------------------------------------- grad of grad
def _scalar_jvp_function(f, argnum, args, mode, jit, backend):
    """A Python function (with source) equal to ``grad(f, argnum)`` at the signature of ``args``, for a
    scalar argument ``argnum``: the generated jvp of ``f`` with tangent 1 on that argument."""
    x = args[argnum]
    leaves_a = tree_flatten(x)[0]
    if len(leaves_a) != 1 or np.size(leaves_a[0]) != 1:
        raise TypeError(f"grad of grad: the inner gradient is taken with respect to argument {argnum}, which is "
                        f"{'an array of shape ' + str(np.shape(leaves_a[0])) if len(leaves_a) == 1 else 'a pytree'}"
                        "; an outer grad needs a scalar function. Use funcgrad.hessian or funcgrad.hvp for arrays.")
    so = _so(f, args, mode, jit, backend)
    store = so.__dict__.setdefault("_grad_fns", {})
    if argnum in store:
        return store[argnum]
    # the wrapper takes the arguments as the user passes them (containers, strings and flags included: the outer
    # grad is called with them) and hands the generated jvp their leaves, read by their paths
    params = [f"a{i}" for i in range(len(args))]
    leaves = []
    for i, a in enumerate(args):
        leaves += [(i, f"a{i}{path}", v) for (path, v), rt in zip(tree_flatten_with_path(a)[0], so.runtime[i]) if rt]
    if len(leaves) != so.n:   # pragma: no cover - the jvp's leaves are these
        raise TypeError("grad of grad: the arguments' leaves do not match the inner function's")
    tans = [("1.0" if i == argnum else "0.0") if not isinstance(v, np.ndarray) else
            f"np.{'ones' if i == argnum else 'zeros'}({src}.shape)"
            for i, src, v in leaves if i in so.nums]
    call = f"_jvpfn({', '.join([src for _, src, _ in leaves] + so.caps + tans)})"
    w = _wrapper(f"grad_{getattr(f, '__name__', 'f')}", params, [f"_r = {call}", "return _r[1][0]"], so.scope)
    store[argnum] = w
    return w


class _GradOfGrad:
    """``grad`` of a function returned by ``grad``: at each signature, the inner gradient is a generated
    Python function (the jvp of the inner function along its scalar argument), and this is ``grad`` of that."""

    def __init__(self, inner, argnums, has_aux, jit, backend, mode, return_value, checkpoint_loops=False):
        if has_aux:
            raise TypeError("grad of grad with has_aux=True is not supported")
        self.inner, self.argnums, self.return_value = inner, argnums, return_value
        # the reverse pass over the inner derivative's forward code: the budget asked here, else the inner one's
        self.checkpoint_loops = _api._checkpoint_budget(checkpoint_loops) if checkpoint_loops is not False else \
            getattr(inner, "checkpoint_loops", None)
        self.jit, self.backend, self.mode = jit, backend, mode
        self._outer: dict = {}
        functools.update_wrapper(self, getattr(inner, "fn", inner), updated=())

    def _base(self, args):
        """(a Python function f, argnum) with ``self.inner == grad(f, argnum)`` at these arguments."""
        inner = self.inner
        if isinstance(inner, _GradOfGrad):
            return inner._as_function(args), inner.argnums
        if inner.has_aux or not isinstance(inner.argnums, int):
            raise TypeError("grad of grad: the inner grad must have one integer argnums and no aux")
        if inner.return_value:
            raise TypeError("grad of value_and_grad: differentiate a function returning a scalar (use grad inside)")
        return inner.fn, inner.argnums

    def _as_function(self, args):
        f, a = self._base(args)
        return _scalar_jvp_function(f, a, args, self.mode, self.jit, self.backend)

    def _bind(self, args, kwargs):
        """The arguments as every parameter of the innermost function (keywords and defaults resolved: the
        generated jvp takes them all)."""
        inner = self.inner
        while isinstance(inner, _GradOfGrad):
            inner = inner.inner
        fn = getattr(inner, "fn", None)
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            if kwargs:
                raise TypeError("grad of grad: keyword arguments need a function with a signature") from None
            return tuple(args)
        if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in sig.parameters.values()):
            if kwargs:
                raise TypeError("grad of grad: keyword arguments of a function with *args or **kwargs") from None
            return tuple(args)
        if not kwargs and len(args) == len(sig.parameters):   # bound already (keyword-only ones in order too)
            return tuple(args)
        ba = sig.bind(*args, **kwargs)
        ba.apply_defaults()
        return tuple(ba.arguments[n] for n in sig.parameters)

    def transform_at(self, args):
        """The ``grad`` transform this is at the signature of ``args`` (what a transformed function that calls
        this inlines: normalize builds its code for the signature it knows)."""
        args = self._bind(args, {})   # (idempotent: callers bind first)
        w = self._as_function(args)
        g = self._outer.get(id(w))
        if g is None:
            g = self._outer[id(w)] = (w, _api._ValueAndGrad(w, self.argnums, False, self.mode, self.jit, self.backend,
                                                       return_value=self.return_value,
                                                       checkpoint_loops=self.checkpoint_loops))
        return g[1]

    @_user_facing
    def __call__(self, *args, **kwargs):
        args = self._bind(args, kwargs)
        return self.transform_at(args)(*args)


def _nested(fun, argnums, has_aux, jit, backend, mode, return_value, checkpoint_loops=False):
    return _GradOfGrad(fun, argnums, has_aux, jit, backend, mode, return_value, checkpoint_loops)


_api._NESTED[0] = (_GradOfGrad, _nested)


# ----------------------------------------------------------------------------- jvp and vjp called inside
# ``funcgrad.jvp(f, primals, tangents)`` or ``y, pull = funcgrad.vjp(f, x)`` written inside a function funcgrad
# transforms: where the primals' kinds and ndims are known while transforming (arguments of the function,
# constants, containers of them), the code funcgrad generates for ``f`` at that signature is inlined as a call
# of its Python function, which the outer transform differentiates again (as grad(f)(x) inside is, see
# normalize's nested_gradient). normalize calls ``_funcgrad_inline`` of these functions.
_INLINE_HINT = ("call it on the function's arguments (or constants, or containers of them), whose shapes are known "
                "while transforming, or compute the derivative outside the transformed function")


def _refuse(nz_scope, node, what, msg, hint=_INLINE_HINT):
    return error(nz_scope.parsed, node, f"funcgrad.{what} inside a transformed function: {msg}", hint,
                 cls=UnsupportedSyntaxError)


def _static_options(kwargs, allowed, scope, node, what):
    opts = {}
    for k, v in kwargs.items():
        if k not in allowed or not isinstance(v, Static):
            raise _refuse(scope, node, what, f"the keyword argument {k}= is not supported there",
                          f"pass only {', '.join(allowed)} with constant values")
        opts[k] = v.obj
    return opts


def _inline_fun(nz, f, scope, node, what):
    """``(python function, leading values)`` for the function argument of jvp/vjp: a function known now, or a
    nested def/lambda as a real function of its enclosing values (closure conversion) and its own arguments."""
    if isinstance(f, Static) and callable(f.obj):
        return f.obj, []
    if isinstance(f, LocalFunction):
        conv = _local_as_function(f, scope)
        if conv is not None:
            F, extras = conv
            return F, list(extras)
    raise _refuse(scope, node, what, "the function to differentiate must be known while transforming (a function "
                                     "of a module, a nested def or a lambda with positional parameters)")


def _example_leaf(nz, v):
    """A value with the spec of ``v``: normalize's example of an argument or constant, or the current value of a
    captured global (the outer transform is rebuilt when its spec changes)."""
    try:
        return nz._example_leaf(v)
    except LookupError:
        name = getattr(getattr(v, "expr", None), "id", None)
        for outname, getter in nz.captured_list:
            if outname == name:
                return getter()
        raise


def _examples(nz, values, scope, node, what):
    try:
        return tuple(tree_map(lambda v: _example_leaf(nz, v), _value_tree(a)) for a in values)
    except LookupError:
        raise _refuse(scope, node, what, "the kinds and ndims of its inputs must be known while transforming; "
                                         "here one is a value computed inside the function") from None


def _runtime_call_leaves(values, key):
    call = []
    for v, (_, specs, _) in zip(values, key):
        for leaf, sp in zip(tree_flatten(_value_tree(v))[0], specs):
            if sp[0] != "static":
                call.append(leaf)
    return call


def _rebuild(tree, it):
    """The output value tree of generated code (``Built.out_tree``) with its leaves taken from ``it``."""
    if isinstance(tree, Struct):
        items = [_rebuild(v, it) for v in tree.values()]
        if tree.kind == "dict":
            return Struct("dict", dict(zip(tree.items.keys(), items)))
        return Struct(tree.kind, items, tree.cls)
    v = next(it)
    return tree if isinstance(tree, Static) else v


def _zero_tangent_value(nz, v, scope, out, node):
    def zero(path, leaf):
        if isinstance(leaf, Static):
            return Static(np.zeros_like(leaf.obj) if isinstance(leaf.obj, np.ndarray) else 0.0)
        return nz.call_object(np.zeros_like, [leaf], {}, scope, out, node) if isinstance(leaf, Dyn) else leaf
    return map_struct(_value_tree(v), zero)


def _inline_jvp(nz, args, kwargs, scope, out, node):
    what = "jvp"
    _static_options(kwargs, ("jit", "mode", "backend"), scope, node, what)
    if len(args) != 3:
        raise _refuse(scope, node, what, "call it as jvp(f, primals, tangents)", None)
    fun, extras = _inline_fun(nz, args[0], scope, node, what)
    prim, tans = args[1], args[2]
    if not (isinstance(prim, Struct) and prim.kind in ("tuple", "list") and isinstance(tans, Struct)
            and tans.kind in ("tuple", "list") and len(prim.values()) == len(tans.values())):
        raise _refuse(scope, node, what, "primals and tangents must be tuples with one entry per argument of f, "
                                         "written in the call", None)
    primals = list(extras) + prim.values()
    tangents = [_zero_tangent_value(nz, v, scope, out, node) for v in extras] + tans.values()
    examples = _examples(nz, primals, scope, node, what)
    t = _cached(_positional(fun, len(primals)), None, True, get_backend(None))   # defaults bound, as outside
    t.argnums = _float_argnums(examples)
    built, single, nums, flat, trees, cap, key = t._lookup(examples)
    call = _runtime_call_leaves(primals, key) + [_static(c) for c in cap]
    for i in nums:
        tl = tree_flatten(_value_tree(tangents[i]))[0]
        if len(tl) != len(flat[i]):
            raise _refuse(scope, node, what, f"the tangent of argument {i} has {len(tl)} leaves but the primal has "
                                             f"{len(flat[i])}", "give each tangent its primal's structure")
        call.extend(tl)
    res = nz.inline_function(_readable(built), call, {}, out, node, scope)
    outs, touts = res.values()
    return Struct("tuple", [_rebuild(built.out_tree, iter(outs.values())),
                            _rebuild(built.out_tree, iter(touts.values()))])


def _static(c):
    return Static(c)


class _InlinePull:
    """The ``vjp_fn`` of ``funcgrad.vjp`` called inside a transformed function: calling it inlines the reverse-mode
    code of ``f`` at the primals' signature with the cotangent as its seed."""

    def __init__(self, built, nums, flat, trees, call):
        self.built, self.nums, self.flat, self.trees, self.call = built, nums, flat, trees, call
        self._funcgrad_inline = self._inline

    def __call__(self, *args):   # pragma: no cover - only ever called while transforming
        raise TypeError("this vjp function exists only inside a transformed function")

    def _inline(self, nz, args, kwargs, scope, out, node):
        what = "vjp"
        if kwargs or len(args) != 1:
            raise _refuse(scope, node, what, "the vjp function takes one cotangent, like the output", None)
        cts = tree_flatten(_value_tree(args[0]))[0]
        n_out = len(self.built.out_atoms)
        if len(cts) != n_out:
            raise _refuse(scope, node, what, f"the cotangent has {len(cts)} leaves but the output has {n_out}",
                          "give the cotangent the output's structure")
        nz.refuse_ragged_tapes(self.built, scope, node)
        res = nz.inline_function(_readable(self.built), list(self.call) + cts, {}, out, node, scope)
        _, grads = res.values()
        grads = grads.values()
        result, k = [], 0
        for i in self.nums:
            n = len(self.flat[i])
            result.append(map_struct(tree_unflatten(self.trees[i], grads[k:k + n]), lambda path, leaf: leaf))
            k += n
        return Struct("tuple", result)


def _inline_vjp(nz, args, kwargs, scope, out, node):
    what = "vjp"
    opts = _static_options(kwargs, ("argnums", "jit", "mode", "backend"), scope, node, what)
    if not args:
        raise _refuse(scope, node, what, "call it as vjp(f, *primals)", None)
    fun, extras = _inline_fun(nz, args[0], scope, node, what)
    primals = list(extras) + list(args[1:])
    argnums = opts.get("argnums")
    nums = tuple(range(len(extras), len(primals))) if argnums is None else \
        tuple(len(extras) + i for i in ((argnums,) if isinstance(argnums, int) else argnums))
    examples = _examples(nz, primals, scope, node, what)
    t = _api._cached_vjp(_positional(fun, len(primals)), None, True, get_backend(None))   # defaults bound
    t.argnums = nums
    built, single, nums, flat, trees, cap, key = t._lookup(examples)
    call = _runtime_call_leaves(primals, key) + [_static(c) for c in cap]
    value = nz.call_value(Static(fun), primals, {}, scope, out, node)
    # one object per (code, operands): a loop body normalized again binds the same vjp function
    memo = built.__dict__.setdefault("_inline_pulls", {})
    mkey = (nums, tuple(ast.dump(v.expr) if hasattr(v, "expr") else repr(getattr(v, "obj", v)) for v in call))
    pull = memo.get(mkey)
    if pull is None:
        pull = memo[mkey] = _InlinePull(built, nums, flat, trees, call)
    return Struct("tuple", [value, Static(pull)])


def _nested_transform(fn, inline):
    fn._funcgrad_inline = inline
    return fn


def inline_elementwise_grad(fun, argnum, nz, args, kwargs, scope, out, node):
    """``elementwise_grad(fun, argnum)(*args)`` inside a transformed function: vjp with a cotangent of ones."""
    what = "elementwise_grad"
    if kwargs:
        raise _refuse(scope, node, what, "keyword arguments are not supported there", "pass them positionally")
    nums = (argnum,) if isinstance(argnum, int) else tuple(argnum)
    res = _inline_vjp(nz, [Static(fun)] + list(args), {"argnums": Static(tuple(nums))}, scope, out, node)
    y, pull = res.values()
    if not isinstance(y, (Dyn, Static)):
        raise _refuse(scope, node, what, "the function must return one array or number there", None)
    ones = nz.call_object(np.ones_like, [y], {}, scope, out, node)
    g = pull.obj._inline(nz, [ones], {}, scope, out, node).values()
    return g[0] if isinstance(argnum, int) else Struct("tuple", g)


def inline_deriv(fun, argnum, nz, args, kwargs, scope, out, node):
    """``deriv(fun, argnum)(*args)`` inside a transformed function: jvp with a tangent of ones (real arguments)."""
    what = "deriv"
    if kwargs or not isinstance(argnum, int):
        raise _refuse(scope, node, what, "only one integer argnum and positional arguments are supported there",
                      None)
    tans = []
    for i, a in enumerate(args):
        z = _zero_tangent_value(nz, a, scope, out, node)
        if i == argnum:
            z = nz.call_object(np.ones_like, [a], {}, scope, out, node) if not isinstance(a, Struct) else None
            if z is None:
                raise _refuse(scope, node, what, "the argument differentiated must be an array or a number there",
                              None)
        tans.append(z)
    res = _inline_jvp(nz, [Static(fun), Struct("tuple", list(args)), Struct("tuple", tans)], {}, scope, out, node)
    return res.values()[1]


_JACOBIAN_LOOP = """
_jac_n = _jac_x.size
_jac_cols = []
for _jac_k in range(_jac_n):
    _jac_e = _jac_np.zeros(_jac_n)
    _jac_e[_jac_k] = 1.0
    _jac_y, _jac_t = _jac_jvp(_jac_f, ({prims},), ({tans},))
    _jac_cols.append(_jac_t)
_jac_s = _jac_np.stack(_jac_cols)
_jac_J = _jac_np.reshape(_jac_np.moveaxis(_jac_s, 0, -1), _jac_s.shape[1:] + _jac_x.shape)
"""


def inline_jacobian(fun, argnum, what, nz, args, kwargs, scope, out, node):
    """``jacobian(fun, argnum)(*args)`` (jacfwd, jacrev) inside a transformed function: one inlined ``jvp`` per
    element of the argument, in a loop that runs at run time (the argument's size need not be known while
    transforming, only its kind and ndim), the columns stacked as ``out.shape + in.shape``."""
    if kwargs or not isinstance(argnum, int):
        raise _refuse(scope, node, what, "only one integer argnum and positional arguments are supported there",
                      None)
    if not 0 <= argnum < len(args) or isinstance(args[argnum], Struct):
        raise _refuse(scope, node, what, "the argument differentiated must be an array or a number there", None)
    x = args[argnum]
    try:
        example = _example_leaf(nz, x)
    except LookupError:
        raise _refuse(scope, node, what, "the kinds and ndims of its inputs must be known while transforming; "
                                         "here one is a value computed inside the function") from None
    tans = [_zero_tangent_value(nz, a, scope, out, node) for a in args]
    if np.ndim(example) == 0:   # a number: one jvp with tangent 1
        tans[argnum] = Static(1.0)
        return _inline_jvp(nz, [Static(fun), Struct("tuple", list(args)), Struct("tuple", tans)], {}, scope, out,
                           node).values()[1]
    inner = type(scope)(scope.parsed, scope, prefix=scope.prefix)
    inner.vars.update({"_jac_x": x, "_jac_f": Static(fun), "_jac_jvp": Static(jvp), "_jac_np": Static(np)})
    prims, tns = [], []
    for i, a in enumerate(args):
        inner.vars[f"_jac_a{i}"] = a
        inner.vars[f"_jac_z{i}"] = tans[i]
        prims.append(f"_jac_a{i}")
        tns.append("_jac_np.reshape(_jac_e, _jac_x.shape)" if i == argnum else f"_jac_z{i}")
    body = ast.parse(_JACOBIAN_LOOP.format(prims=", ".join(prims), tans=", ".join(tns))).body
    for st in body:
        for n in ast.walk(st):
            if isinstance(n, (ast.stmt, ast.expr)):
                ast.copy_location(n, node)
    nz.block(body, inner, out)
    return inner.vars["_jac_J"]


def refuse_inline(what):
    """A ``_funcgrad_inline`` hook refusing ``what(f)(x)`` inside a transformed function at the user's line (its
    result's size, or the number of passes it makes, is known only when it runs)."""
    def hook(nz, args, kwargs, scope, out, node):
        raise _refuse(scope, node, what, "its number of passes depends on sizes known only when the function "
                                         "runs, so it cannot be written out while transforming",
                      "compute it outside the transformed function, or use grad, value_and_grad, jvp, vjp, "
                      "elementwise_grad or deriv inside, which are supported there")
    return hook


_nested_transform(jvp, _inline_jvp)
_nested_transform(_api.vjp, _inline_vjp)
# written inside a transformed function, jacfwd(f) and hessian(f) are made while transforming (as grad(f) is), so
# calling them there reaches their _funcgrad_inline hook
for _f in (jacfwd, hessian):   # jacrev: funcgrad.differential, beside jacobian
    _f._funcgrad_static_call = True
for _f, _name in ((hvp, "hvp"), (vjp_of_jvp, "vjp_of_jvp"), (jvp_of_jvp, "jvp_of_jvp"), (linearize, "linearize")):
    _nested_transform(_f, refuse_inline(_name))


# ----------------------------------------------------------------------------- custom_jvp in reverse mode
def _zero_tangent(a):
    if isinstance(a, np.ndarray):
        return np.zeros(a.shape, dtype=a.dtype if a.dtype.kind in "fc" else np.float64)
    if isinstance(a, (complex, np.complexfloating)):
        return 0j
    return 0.0


def _probe(a):
    """A point at which to differentiate a rule that is linear in it: nonzero and uneven, not zeros. A rule is
    linear there in exact arithmetic, but its code may iterate to a tolerance (an adjoint solved to convergence);
    at zeros such a loop stops at once and its derivative is the first iterate's, a silent wrong value."""
    z = _zero_tangent(a)
    if isinstance(z, np.ndarray):
        return (1.0 + 0.5 * np.sin(np.arange(1, z.size + 1))).reshape(z.shape).astype(z.dtype)
    return type(z)(1.0)


def _transpose_custom_jvp(cf, args, g):
    """Reverse mode over a custom_jvp function with no VJP: the cotangents of ``args`` for output cotangent
    ``g`` are the VJP of ``tangents -> rule(args, tangents)[1]`` (linear in the tangents, so the point does
    not matter in exact arithmetic: :func:`_probe`), by funcgrad's reverse mode over the rule's code."""
    label = cf._label
    nums = tuple(i for i, a in enumerate(args) if is_float_leaf(a))
    tangents = [_probe(a) if is_float_leaf(a) else _zero_tangent(a) for a in args]
    lin = cf.tangent_fn(len(args))
    try:
        _, vjp_fn = _api.vjp(lin, tuple(args), *tangents, argnums=tuple(1 + i for i in nums))
        cts = vjp_fn(g)
    except FuncgradError as e:
        raise NoDerivativeError(
            f"reverse mode (grad, vjp) of custom_jvp function '{label}': funcgrad transposes its JVP rule by "
            f"differentiating the rule's tangent in reverse mode, and that failed:\n  {e}\n"
            f"  hint: give {label} a VJP too, {label}.defvjp(fwd, bwd) as with funcgrad.custom_vjp, or make "
            "the rule's tangent code funcgrad differentiates (linear in the tangents)") from None
    out = [None] * len(args)
    for i, c in zip(nums, cts):
        out[i] = c
    return tuple(out)


_custom._TRANSPOSE[0] = _transpose_custom_jvp


# ----------------------------------------------------------------------------- custom_vjp in forward mode
# A function with a VJP rule only (funcgrad.custom_vjp, autograd's defvjp) gets its JVP by transposing the rule:
# u -> bwd(res, u) is linear (it is J^T u), so the gradient in u of <bwd(res, u), t> is J t, at any u (taken at
# _probe(out), not zeros: a bwd that iterates to a tolerance stops at once at zeros). That is
# funcgrad's reverse mode over the user's bwd (which must then be code funcgrad reads). The derived rule is
# itself a custom_vjp function, so reverse over forward (hessian's and check_grads' second order) goes through
# it: its cotangents are bwd(res, g_out) + grad_x <bwd(fwd(x)[1], g_tan), t> (the symmetry of the second
# derivative: <g_tan, J(x) t> = <J(x)^T g_tan, t>) for the primals, and bwd(res, g_tan) for the tangents.
# Forward over it (a third derivative in forward mode) is not given: give the function a JVP rule.
def _lin_pairing(bwd, res, u, tangents):
    """``<bwd(res, u), tangents>`` over the arguments with a cotangent and a tangent (``None``: neither)."""
    return sum(np.sum(c * t) for c, t in zip(bwd(res, u), tangents) if c is not None and t is not None)


_PRIMAL_GRADS: dict = {}


def _primal_pairing_grad(slots):
    """The gradient in the floating-point primals of ``<bwd(fwd(*primals)[1], u), tangents>``, for primals laid
    out as ``slots`` says (``slots[i]``: primal i's position among the floating-point ones, -1 for a static one,
    read from ``statics``), built once per layout."""
    g = _PRIMAL_GRADS.get(slots)
    if g is None:
        floats = [f"x{k}" for k in range(sum(1 for s in slots if s >= 0))]
        prim = ", ".join(f"x{s}" if s >= 0 else f"statics[{i}]" for i, s in enumerate(slots))
        fn = _wrapper("primal pairing", ["fwd", "bwd", "statics", *floats, "u", "tangents"],
                      [f"return _lin_pairing(bwd, fwd({prim})[1], u, tangents)"], {"_lin_pairing": _lin_pairing})
        g = _PRIMAL_GRADS[slots] = _api.grad(fn, argnums=tuple(range(3, 3 + len(floats))), jit=False)
    return g


_LIN_GRAD = _api.grad(_lin_pairing, argnums=2, jit=False)


def _derived_jvp_refusal(cf, why):
    return NoDerivativeError(
        f"custom_vjp function '{cf._label}' has no forward-mode (JVP) rule, and funcgrad could not derive one "
        f"from its VJP: {why}\n  hint: give it a JVP rule with {cf._label}.defjvp(rule), rule(primals, "
        "tangents) -> (out, tangent_out) as in jax.custom_jvp")


def _float_tangents(cf, primals, tangents):
    """The tangents of the floating-point primals (``None`` for the others and for zero placeholders)."""
    out = []
    for p, t in zip(primals, tangents):
        if is_float_leaf(p):
            if np.iscomplexobj(p):
                raise _derived_jvp_refusal(cf, "a complex argument")
            out.append(t)
            continue
        moving = [v for x, v in zip(tree_flatten(p)[0], tree_flatten(t)[0]) if is_float_leaf(x)] \
            if t is not None and tree_flatten(p)[1] == tree_flatten(t)[1] else []
        if any(np.any(np.asarray(v) != 0) for v in moving):
            raise _derived_jvp_refusal(cf, "an argument that is a container of arrays (pass its arrays as "
                                           "arguments of their own)")
        out.append(None)
    return tuple(out)


def _derived_parts(cf, primals, tangents):
    out, res = cf.fwd(*primals)
    leaves = tree_flatten(out)[0]
    if not leaves or not all(is_float_leaf(v) and not np.iscomplexobj(v) for v in leaves):
        raise _derived_jvp_refusal(cf, "its output is not made of real arrays and floats")
    ts = _float_tangents(cf, primals, tangents)
    try:
        t_out = _LIN_GRAD(cf.bwd, res, tree_map(_probe, out), ts)
    except FuncgradError as e:
        raise _derived_jvp_refusal(cf, f"differentiating its bwd rule failed:\n  {e}") from None
    return (out, t_out), (primals, ts, res)


def _derive_jvp(cf):
    """The JVP rule of a VJP-only custom function ``cf`` (a custom_vjp function of ``(primals, tangents)``)."""
    def rule(primals, tangents):
        return _derived_parts(cf, primals, tangents)[0]

    def rule_fwd(primals, tangents):
        return _derived_parts(cf, primals, tangents)

    def rule_bwd(state, g):
        primals, ts, res = state
        g_out, g_tan = g
        n = len(primals)
        ct_p = list(cf.bwd(res, g_out)) if g_out is not None else [None] * n
        if g_tan is None:
            return tuple(ct_p), (None,) * n
        ct_t = cf.bwd(res, g_tan)       # the tangents enter linearly: J^T g_tan
        slots, floats, k = [], [], 0
        for p in primals:
            if is_float_leaf(p):
                slots.append(k)
                floats.append(p)
                k += 1
            else:
                slots.append(-1)
        statics = tuple(None if s >= 0 else p for p, s in zip(primals, slots))
        if floats and any(t is not None for t in ts):
            try:
                second = _primal_pairing_grad(tuple(slots))(cf.fwd, cf.bwd, statics, *floats, g_tan, ts)
            except FuncgradError as e:
                raise _derived_jvp_refusal(cf, f"differentiating its fwd and bwd rules failed:\n  {e}") from None
            for i, s in enumerate(slots):
                if s >= 0:
                    ct_p[i] = second[s] if ct_p[i] is None else ct_p[i] + second[s]
        return tuple(ct_p), tuple(ct_t)

    def rule_jvp(primals2, tangents2):
        raise NoDerivativeError(
            f"forward mode over forward mode (jacfwd of jacfwd, a forward-mode second-order check) through "
            f"custom_vjp function '{cf._label}': funcgrad derives its first JVP from its VJP, and no further\n"
            f"  hint: give it a JVP rule with {cf._label}.defjvp(rule), rule(primals, tangents) -> (out, "
            "tangent_out), or take the second derivative in reverse mode (hessian, grad of grad)")

    rule.__name__ = rule.__qualname__ = f"{cf._label}_jvp"
    made = _custom.custom_vjp(rule)
    made.defvjp(rule_fwd, rule_bwd)
    made.defjvp(rule_jvp)
    return made


_custom._DERIVE_JVP[0] = _derive_jvp


def source(fun, *example_args, forward=False):
    """The generated source of a transformed function (see :func:`funcgrad.api.source`); with
    ``forward=True``, of the forward-mode (jvp) code of plain function ``fun`` at ``example_args``."""
    if not forward:
        return _api.source(fun, *example_args)
    if not example_args:
        raise ValueError("funcgrad.source(f, *args, forward=True) needs example arguments to specialize on")
    t = _cached(fun, None, True, get_backend(None))
    t.argnums = _float_argnums(example_args)
    built = t._lookup(tuple(example_args))[0]
    return built.source
