"""HIPS autograd's remaining differential operators under their autograd names, built on funcgrad's
transforms (:func:`funcgrad.vjp`, :func:`funcgrad.jvp`, :func:`funcgrad.grad`, the forward-over-reverse
Hessian-vector product of :mod:`funcgrad.forward_mode`).

Each takes ``(fun, argnum=0)`` as autograd's does and returns a function of ``fun``'s arguments:

* ``make_vjp(fun)(*args) -> (vjp_fn, ans)`` (autograd's order) and ``make_jvp(fun)(*args) -> jvp_fn`` with
  ``jvp_fn(v) -> (ans, J v)``;
* ``make_hvp(fun)(*args) -> (hvp_fn, grad)`` with ``hvp_fn(v) = H v``;
* ``hessian_tensor_product(fun)(*args, v) = H v`` (alias ``hessian_vector_product``), and
  ``tensor_jacobian_product(fun)(*args, v)``: the Jacobian contracted with ``v`` over the output's leading
  ``v.ndim`` axes (alias ``vector_jacobian_product``);
* ``grad_named(fun, argname)``, ``grad_and_aux(fun)(*args) -> (grad, aux)``,
  ``multigrad_dict(fun)(*args, **kwargs) -> OrderedDict(argname: gradient)`` (every parameter,
  defaults applied), ``make_ggnvp(f, g, f_argnum)(*args) -> ggnvp_fn`` with
  ``ggnvp_fn(v) = J^T H_g J v``.

``argnum`` is an int or a tuple of ints (a tuple differentiates with respect to the tuple of those
arguments, as autograd's ``unary_to_nary``). Where every argument is an array, a number or a string
(positional, no ``**kwargs``), the transform of ``fun`` itself is used and cached across calls; otherwise
``fun`` is bound to its other arguments as generated source (compiled per call). Called inside a function
funcgrad transforms, these are refused at the user's line (``grad_named`` and ``grad_and_aux`` return
:func:`funcgrad.grad` transforms, which work there).
"""
from __future__ import annotations

import inspect
from collections import OrderedDict

import numpy as np

from . import api as _api
from . import forward_mode as _fm
from .differential import (_named, _positional_call, _transform_kwargs, _vjp_at, bind_argnum, check_argnum,
                           normalize_argnum, source_function)
from .tree import tree_flatten, tree_map, tree_unflatten

__all__ = ["make_vjp", "make_jvp", "make_hvp", "hessian_tensor_product", "hessian_vector_product",
           "tensor_jacobian_product", "vector_jacobian_product", "grad_named", "grad_and_aux", "multigrad_dict",
           "make_ggnvp"]


def _zeros_tree(a):
    """Zero tangents of ``a``'s structure (a non-differentiated argument's tangent)."""
    return tree_map(lambda v: np.zeros(np.shape(v)) if isinstance(v, np.ndarray) else 0.0, a)


def _refuse_inside(what):
    """A ``_funcgrad_inline`` hook refusing ``what(f)(x)`` inside a transformed function, at the user's line."""
    def hook(nz, args, kwargs, scope, out, node):
        raise _fm._refuse(scope, node, what, "this autograd operator is not supported there",
                          "compute it outside the transformed function, or use grad, value_and_grad, jvp, vjp, "
                          "elementwise_grad or deriv inside, which are supported there")
    return hook


def _finish(op, fn, fun, argnum):
    fn = _named(_api._user_facing(fn), op, fun, argnum)
    fn._funcgrad_inline = _refuse_inside(op)   # called inside a transformed function: refused at that line
    return fn


def _jvp_at(fun, args, kwargs, argnum, tk):
    """``(single, jvp_fn)``: ``jvp_fn(v) -> (ans, J v)`` of ``fun`` at ``args`` along argument(s) ``argnum``."""
    single, nums = normalize_argnum(argnum, len(args))
    full = _positional_call(fun, args, kwargs)
    if full is not None:
        def jvp_fn(v):
            vs = (v,) if single else tuple(v)
            if len(vs) != len(nums):
                raise ValueError(f"the tangent has {len(vs)} parts for {len(nums)} differentiated arguments")
            tans = [_zeros_tree(a) for a in full]
            for i, t in zip(nums, vs):
                tans[i] = t
            return _fm.jvp(fun, tuple(full), tuple(tans), **tk)
        return single, _api._user_facing(jvp_fn)
    f, x = bind_argnum(fun, args, kwargs, argnum)
    return single, lambda v: _fm.jvp(f, (x,), (v if single else tuple(v),), **tk)


def _signature(args, kwargs):
    """What fixes the generated code's output ranks: the structure, types, ndims and dtypes of the arguments."""
    leaves, td = tree_flatten((args, kwargs))
    return td, tuple((type(v), np.ndim(v), np.result_type(v) if not isinstance(v, str) else None) for v in leaves)


def _check_scalar(what, fun, args, kwargs, argnum, tk, seen):
    """Refuse a ``fun`` whose value is not one real number (a scalar or an array of size 1) (a Hessian of anything else is not defined; funcgrad's hvp
    would give the Hessian of the sum), once per argument signature (``seen``)."""
    try:
        key = _signature(args, kwargs)
        hash(key)
    except TypeError:
        key = None
    if key is not None and key in seen:
        return
    single, jvp_fn = _jvp_at(fun, args, kwargs, argnum, tk)
    single, nums = normalize_argnum(argnum, len(args))
    x = args[nums[0]] if single else tuple(args[i] for i in nums)
    y = jvp_fn(_zeros_tree(x))[0]
    if isinstance(y, (tuple, list, dict)) or np.size(y) != 1 or np.iscomplexobj(y):
        shape = "" if isinstance(y, (tuple, list, dict)) else f" of shape {np.shape(y)}"
        raise TypeError(f"{what} of {getattr(fun, '__name__', 'fun')}: the function must return one real value (as "
                        f"autograd's grad); it returned a {type(y).__name__}{shape}")
    if key is not None:
        seen.add(key)


def _hvp_at(fun, args, kwargs, argnum, tk):
    """``hvp_fn(v) = H v``: the Hessian of scalar ``fun`` in argument(s) ``argnum`` times ``v``."""
    single, nums = normalize_argnum(argnum, len(args))
    full = _positional_call(fun, args, kwargs) if single else None
    if full is not None:
        def hvp_fn(v):
            tans = [_zeros_tree(a) for a in full]
            tans[nums[0]] = v
            return _fm._hvp_of_arg(fun, tuple(full), tuple(tans), nums[0], jit=tk.get("jit", True),
                                   backend=tk.get("backend"), mode=tk.get("mode"))
        return _api._user_facing(hvp_fn)
    f, x = bind_argnum(fun, args, kwargs, argnum)
    return lambda v: _fm.hvp(f, (x,), (v if single else tuple(v),), **tk)


# ----------------------------------------------------------------------------- make_vjp, make_jvp, make_hvp
def make_vjp(fun, argnum=0, *, jit=True, backend=None, mode=None):
    """``make_vjp(fun, argnum)(*args) -> (vjp_fn, ans)``: ``vjp_fn(g)`` is the cotangent of argument(s)
    ``argnum`` for the output cotangent ``g`` (``ans``'s structure)."""
    check_argnum(argnum)
    tk = _transform_kwargs(jit, backend, mode)

    def make_vjp_fn(*args, **kwargs):
        single, nums, ans, pull = _vjp_at(fun, args, kwargs, argnum, tk)

        def vjp_fn(g):
            r = pull(g)
            return r[0] if single else tuple(r)
        return _api._user_facing(vjp_fn), ans

    return _finish("make_vjp", make_vjp_fn, fun, argnum)


def make_jvp(fun, argnum=0, *, jit=True, backend=None, mode=None):
    """``make_jvp(fun, argnum)(*args) -> jvp_fn`` with ``jvp_fn(v) -> (ans, J v)`` (forward mode; ``v`` has
    argument ``argnum``'s structure, a tuple of them for a tuple ``argnum``)."""
    check_argnum(argnum)
    tk = _transform_kwargs(jit, backend, mode)

    def make_jvp_fn(*args, **kwargs):
        return _jvp_at(fun, args, kwargs, argnum, tk)[1]

    return _finish("make_jvp", make_jvp_fn, fun, argnum)


def make_hvp(fun, argnum=0, *, jit=True, backend=None, mode=None):
    """``make_hvp(fun, argnum)(*args) -> (hvp_fn, grad)``: ``grad`` is the gradient of scalar ``fun`` at
    ``args`` and ``hvp_fn(v)`` the Hessian times ``v`` there (forward over reverse)."""
    check_argnum(argnum)
    tk = _transform_kwargs(jit, backend, mode)

    def make_hvp_fn(*args, **kwargs):
        g = _api.grad(fun, argnum, **tk)(*args, **kwargs)
        return _hvp_at(fun, args, kwargs, argnum, tk), g

    return _finish("make_hvp", make_hvp_fn, fun, argnum)


# ----------------------------------------------------------------------------- products
def hessian_tensor_product(fun, argnum=0, *, jit=True, backend=None, mode=None):
    """``hessian_tensor_product(fun, argnum)(*args, v, **kwargs)``: the Hessian of scalar ``fun`` in
    argument ``argnum`` times ``v`` (``v`` has that argument's shape), without forming the Hessian."""
    check_argnum(argnum)
    tk = _transform_kwargs(jit, backend, mode)
    seen = set()

    def hessian_tensor_product_fn(*args, **kwargs):
        if not args:
            raise TypeError("hessian_tensor_product: call it as f(*args, vector)")
        args, vector = args[:-1], args[-1]
        single, nums = normalize_argnum(argnum, len(args))
        x = args[nums[0]] if single else tuple(args[i] for i in nums)
        xs, vs = tree_flatten(x)[0], tree_flatten(vector)[0]
        if len(xs) != len(vs) or any(np.shape(a) != np.shape(b) for a, b in zip(xs, vs)):
            raise ValueError(f"hessian_tensor_product: the vector has shape(s) {[np.shape(b) for b in vs]} but "
                             f"argument {argnum} has {[np.shape(a) for a in xs]}; they must match (autograd's "
                             "tensordot of the gradient with the vector must be a scalar)")
        _check_scalar("hessian_tensor_product", fun, args, kwargs, argnum, tk, seen)
        return _hvp_at(fun, args, kwargs, argnum, tk)(vector)

    return _finish("hessian_tensor_product", hessian_tensor_product_fn, fun, argnum)


hessian_vector_product = hessian_tensor_product


def tensor_jacobian_product(fun, argnum=0, *, jit=True, backend=None, mode=None):
    """``tensor_jacobian_product(fun, argnum)(*args, v, **kwargs)``: the Jacobian of ``fun`` in argument
    ``argnum`` left-multiplied by ``v``, i.e. the Jacobian of ``np.tensordot(v, fun(*args), v.ndim)``: shape
    ``out.shape[v.ndim:] + x.shape`` (a vector-Jacobian product when ``v`` has the output's shape)."""
    check_argnum(argnum)
    tk = _transform_kwargs(jit, backend, mode)

    def tensor_jacobian_product_fn(*args, **kwargs):
        if not args:
            raise TypeError("tensor_jacobian_product: call it as f(*args, vector)")
        args, vector = args[:-1], args[-1]
        single, nums, y, pull = _vjp_at(fun, args, kwargs, argnum, tk)
        fname = getattr(fun, "__name__", "fun")
        if isinstance(y, (tuple, list, dict)):
            raise TypeError(f"tensor_jacobian_product of {fname}: the function must return one array or scalar")
        v = np.asarray(vector)
        ys = np.shape(y)
        if ys[:v.ndim] != v.shape:
            raise ValueError(f"tensor_jacobian_product of {fname}: the vector has shape {v.shape}, which is not "
                             f"the leading part of the output's shape {ys}")
        rest = ys[v.ndim:]
        dtype = np.result_type(np.asarray(y).dtype, v.dtype)
        rows = []
        for k in range(int(np.prod(rest, dtype=np.int64))):
            e = np.zeros(rest, dtype=dtype)
            e.reshape(-1)[k] = 1
            ct = np.multiply.outer(v, e).astype(dtype)
            rows.append(pull(ct if ct.shape else ct[()]))
        out = []
        for j, i in enumerate(nums):
            xi = args[i]
            if not rest:
                out.append(rows[0][j])
                continue
            leaves, td = tree_flatten(xi)
            if len(leaves) != 1 or td.kind != "leaf":
                raise TypeError(f"tensor_jacobian_product of {fname}: argument {i} is a container; with a "
                                "non-scalar product the argument must be an array or a float")
            out.append(np.reshape(np.stack([np.asarray(r[j]) for r in rows]), rest + np.shape(xi)))
        return out[0] if single else tuple(out)

    return _finish("tensor_jacobian_product", tensor_jacobian_product_fn, fun, argnum)


vector_jacobian_product = tensor_jacobian_product


# ----------------------------------------------------------------------------- gradients by name, with aux
def grad_named(fun, argname, *, jit=True, backend=None, mode=None):
    """The gradient with respect to the parameter named ``argname`` (not ``*args`` or ``**kwargs``)."""
    params = inspect.getfullargspec(fun).args
    if argname not in params:
        raise ValueError(f"grad_named: {getattr(fun, '__name__', 'the function')} has no positional parameter "
                         f"named {argname!r} (its parameters: {', '.join(params) or 'none'})")
    return _api.grad(fun, params.index(argname), jit=jit, backend=backend, mode=mode)


def grad_and_aux(fun, argnum=0, *, jit=True, backend=None, mode=None):
    """``grad_and_aux(fun, argnum)(*args) -> (gradient, aux)`` for ``fun`` returning ``(scalar, aux)``: the
    gradient of the first output, and the second unchanged (:func:`funcgrad.grad` with ``has_aux=True``)."""
    check_argnum(argnum)
    return _api.grad(fun, argnum, has_aux=True, jit=jit, backend=backend, mode=mode)


def multigrad_dict(fun, *, jit=True, backend=None, mode=None):
    """``multigrad_dict(fun)(*args, **kwargs)``: an ``OrderedDict`` from each parameter's name to the gradient
    with respect to it (defaults applied; ``*args`` as a tuple, ``**kwargs`` as a dict), in one pass."""
    sig = inspect.signature(fun)
    tk = _transform_kwargs(jit, backend, mode)
    names = list(sig.parameters)
    parts = []
    for k, (name, p) in enumerate(sig.parameters.items()):
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            parts.append(f"x[{k}]")
        elif p.kind == p.VAR_POSITIONAL:
            parts.append(f"*x[{k}]")
        elif p.kind == p.KEYWORD_ONLY:
            parts.append(f"{name}=x[{k}]")
        else:
            parts.append(f"**x[{k}]")
    every = source_function(getattr(fun, "__name__", "fun"), ["x"], f"_fun({', '.join(parts)})", {"_fun": fun})
    g = _api.grad(every, **tk)

    def multigrad_dict_fn(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        values = []
        for name in names:
            v = bound.arguments[name]
            p = sig.parameters[name]
            values.append(tuple(v) if p.kind == p.VAR_POSITIONAL else dict(v) if p.kind == p.VAR_KEYWORD else v)
        grads = g(tuple(values))
        return OrderedDict(zip(names, grads))

    multigrad_dict_fn = _api._user_facing(multigrad_dict_fn)
    multigrad_dict_fn.__name__ = f"multigrad_dict_of_{getattr(fun, '__name__', 'fun')}"
    multigrad_dict_fn._funcgrad_inline = _refuse_inside("multigrad_dict")
    return multigrad_dict_fn


# ----------------------------------------------------------------------------- generalized Gauss-Newton
def _half_sum_squares(x):
    return 1.0 / 2 * np.sum(x**2, axis=-1)


def make_ggnvp(f, g=_half_sum_squares, f_argnum=0, *, jit=True, backend=None, mode=None):
    """``make_ggnvp(f, g, f_argnum)(*args) -> ggnvp_fn`` with ``ggnvp_fn(v) = J^T H_g J v``: ``J`` is the
    Jacobian of ``f`` in argument ``f_argnum`` at ``args`` and ``H_g`` the Hessian of the scalar ``g`` at
    ``f(*args)`` (default ``g``: half the sum of squares over the last axis)."""
    check_argnum(f_argnum, "f_argnum")
    tk = _transform_kwargs(jit, backend, mode)
    seen = set()

    def make_ggnvp_fn(*args, **kwargs):
        single, nums, f_x, f_vjp = _vjp_at(f, args, kwargs, f_argnum, tk)
        _, f_jvp = _jvp_at(f, args, kwargs, f_argnum, tk)

        _check_scalar("make_ggnvp: g", g, (f_x,), {}, 0, tk, seen)

        def ggnvp(v):
            jv = f_jvp(v)[1]
            hjv = _fm.hvp(g, (f_x,), (jv,), **tk)
            r = f_vjp(hjv)
            return r[0] if single else tuple(r)
        return _api._user_facing(ggnvp)

    return _finish("make_ggnvp", make_ggnvp_fn, f, f_argnum)


# written inside a transformed function, these are made while transforming (as grad(f) is); calling the result
# there reaches its _funcgrad_inline hook (refused), or is a funcgrad.grad transform (grad_named, grad_and_aux)
for _op in (make_vjp, make_jvp, make_hvp, hessian_tensor_product, tensor_jacobian_product, grad_named,
            grad_and_aux, multigrad_dict, make_ggnvp):
    _op._funcgrad_static_call = True
