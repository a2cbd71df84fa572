"""Autograd's differential operators on top of funcgrad's transforms: jacobian, elementwise_grad, deriv,
holomorphic_grad.

Each takes ``(fun, argnum=0)`` as HIPS autograd's does (``argnum`` an int or a
tuple of ints) and returns a function with ``fun``'s arguments:

* ``jacobian(fun)(x)``: the full Jacobian, shape ``out.shape + x.shape``, one
  reverse-mode VJP per output element (funcgrad has no vmap to batch them);
* ``elementwise_grad(fun)(x)``: the VJP of a ones cotangent, the sum of each
  column of the Jacobian (the diagonal when the Jacobian is diagonal);
* ``deriv(fun)(x)``: the Jacobian times a tangent of ones (``1 + 1j`` for a
  complex input, autograd's ``vspace(x).ones()``), in one forward pass
  (:func:`funcgrad.forward_mode.jvp`);
* ``holomorphic_grad(fun)(z)``: the gradient of ``real(fun(z))`` (for a
  holomorphic ``fun``, its complex derivative ``fun'(z)``), with autograd's
  warning when ``z`` is not complex.

Also owns :func:`bind_argnum`, a one-argument function of ``fun``'s argument
``argnum`` written as real source (so funcgrad can read it), shared with
``funcgrad.testing``.
"""
from __future__ import annotations

import functools
import inspect
import itertools
import linecache
import warnings

import numpy as np

from . import api as _api
from .custom import is_user_vspace_value
from .errors import FuncgradError
from . import forward_mode as _fm
from .forward_mode import jvp as _jvp
from .tree import tree_flatten, tree_unflatten

__all__ = ["jacobian", "jacrev", "elementwise_grad", "deriv", "holomorphic_grad", "bind_argnum", "source_function",
           "value_expr", "check_argnum", "normalize_argnum", "ComplexNotSupportedError"]

_COUNTER = itertools.count(1)


class ComplexNotSupportedError(FuncgradError, TypeError):
    """An operator was asked for something that has no meaning for complex values (the Jacobian of a complex
    output: autograd's standard basis of a complex space has two vectors per element)."""


# ----------------------------------------------------------------------------- helpers
def _ident(name):
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in str(name))
    return name if name and not name[0].isdigit() else "f_" + name


def source_function(name, params, expr, env):
    """A real Python function ``def name(*params): return expr`` over the globals ``env``, its source in
    linecache so that funcgrad's transforms can read it."""
    fname = _ident(name)
    src = f"def {fname}({', '.join(params)}):\n    return {expr}\n"
    filename = f"<funcgrad {fname} #{next(_COUNTER)}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    ns = dict(env)
    exec(compile(src, filename, "exec"), ns)
    return ns[fname]


def _literal(v):
    """``repr(v)`` when it evaluates back to ``v`` as a compile-time constant (None, bools, ints, strings,
    slices and tuples/lists of them), else None: those become constants of the generated code, as
    ``axis=0`` written in the caller's source would be."""
    if v is None or v is Ellipsis or isinstance(v, (bool, int, str)):
        return repr(v)
    if isinstance(v, np.integer):
        return repr(int(v))
    if isinstance(v, np.bool_):
        return repr(bool(v))
    if type(v) in (tuple, list):
        parts = [_literal(x) for x in v]
        if any(p is None for p in parts):
            return None
        if type(v) is tuple:
            return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
        return "[" + ", ".join(parts) + "]"
    if isinstance(v, slice):
        parts = [_literal(x) for x in (v.start, v.stop, v.step)]
        return None if any(p is None for p in parts) else f"slice({', '.join(parts)})"
    return None


def value_expr(v, name, env):
    lit = _literal(v)
    if lit is not None:
        return lit
    env[name] = v
    return name


def check_argnum(argnum, what="argnum"):
    """Refuse an ``argnum`` that is neither an int nor a tuple/list of ints (when the operator is made)."""
    ok = lambda i: isinstance(i, (int, np.integer)) and not isinstance(i, bool)  # noqa: E731
    if not (ok(argnum) or isinstance(argnum, (tuple, list)) and all(ok(i) for i in argnum)):
        raise TypeError(f"{what} must be an int or a tuple of ints; received {argnum!r}")


def normalize_argnum(argnum, nargs, what="argnum"):
    """``argnum`` (an int, or a tuple/list of ints) as non-negative positions into ``nargs`` arguments."""
    check_argnum(argnum, what)
    single = not isinstance(argnum, (tuple, list))
    nums = (argnum,) if single else argnum
    out = []
    for i in nums:
        if not -nargs <= i < nargs:
            raise ValueError(f"{what}={argnum!r} names argument {i}, but the function was called with "
                             f"{nargs} positional argument(s)")
        out.append(int(i) % nargs)
    return single, tuple(out)


def bind_argnum(fun, args, kwargs, argnum, name=None):
    """``(f, x)``: ``f(x)`` calls ``fun(*args, **kwargs)`` with ``x`` in place of argument ``argnum`` (a tuple
    ``x`` in place of the arguments of a tuple ``argnum``), as autograd's ``unary_to_nary`` does. ``f`` is
    written as source: other arguments that are constants (ints, None, strings, ...) are literals in it,
    arrays and floats are its captured values."""
    single, nums = normalize_argnum(argnum, len(args))
    env = {"_fun": fun}
    where = {nums[0]: "x"} if single else {i: f"x[{k}]" for k, i in enumerate(nums)}
    parts = [where[i] if i in where else value_expr(a, f"_a{i}", env) for i, a in enumerate(args)]
    for j, (k, v) in enumerate(kwargs.items()):
        if not k.isidentifier():
            raise TypeError(f"keyword argument {k!r} is not a Python identifier")
        parts.append(f"{k}={value_expr(v, f'_k{j}_{k}', env)}")
    f = source_function(name or getattr(fun, "__name__", "fun"), ["x"], f"_fun({', '.join(parts)})", env)
    x = args[nums[0]] if single else tuple(args[i] for i in nums)
    return f, x


def _is_complex(tree):
    return any(np.iscomplexobj(leaf) for leaf in tree_flatten(tree)[0])


def _transform_kwargs(jit, backend, mode):
    """The transform options that differ from the defaults (so a transform need accept only those)."""
    tk = {"jit": jit, "backend": backend, "mode": mode}
    return {k: v for k, v in tk.items() if v is not (True if k == "jit" else None)}


def _positional_call(fun, args, kwargs):
    """Every parameter of ``fun`` as a positional argument (keywords and defaults resolved), when ``fun``
    has only positional parameters and every argument is a value funcgrad passes at run time; else None.
    The transform of ``fun`` itself is then cached on ``fun`` across calls."""
    try:
        sig = inspect.signature(fun)
    except (TypeError, ValueError):
        return None
    if any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in sig.parameters.values()):
        return None
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    full = bound.args
    plain = (np.ndarray, np.generic, float, int, complex, str, type(None))
    if not all(isinstance(leaf, plain) for a in full for leaf in tree_flatten(a)[0]):
        return None
    return full


def _vjp_at(fun, args, kwargs, argnum, tk):
    """``(single, nums, y, pull)``: funcgrad's VJP of ``fun`` at ``args`` with respect to ``argnum``."""
    single, nums = normalize_argnum(argnum, len(args))
    full = _positional_call(fun, args, kwargs)
    if full is not None:
        y, pull = _api.vjp(fun, *full, argnums=nums, **tk)
        return single, nums, y, pull
    f, x = bind_argnum(fun, args, kwargs, argnum)
    y, pull_x = _api.vjp(f, x, **tk)
    return single, nums, y, (lambda ct: pull_x(ct)[0] if not single else pull_x(ct))


def _named(f, op, fun, argnum):
    f.__name__ = f"{op}_of_{getattr(fun, '__name__', 'fun')}_wrt_argnum_{argnum}"
    f.__qualname__ = f.__name__
    f.__doc__ = (f"{op} of function {getattr(fun, '__name__', 'fun')} with respect to argument number "
                 f"{argnum}. Takes the same arguments as the function but returns the {op}.")
    return f


def _basis_rows(y, pull, what):
    """``[pull(e_k) for every standard basis cotangent e_k of the array or scalar y]``."""
    y_arr = np.asarray(y)
    if np.iscomplexobj(y_arr):
        raise ComplexNotSupportedError(f"{what}: the function returns complex values; a Jacobian needs a real "
                                       "output (take np.real and np.imag of it in turn, or use funcgrad.vjp)")
    rows = []
    for k in range(y_arr.size):
        e = np.zeros(y_arr.shape, dtype=y_arr.dtype)
        e.reshape(-1)[k] = 1
        rows.append(pull(e if e.shape else e[()]))
    return rows


# ----------------------------------------------------------------------------- operators
def jacobian(fun, argnum=0, *, jit=True, backend=None, mode=None):
    """The Jacobian of ``fun`` with respect to argument ``argnum`` (an array or a float).

    For an input of shape ``(i1, i2, ...)`` and an output of shape
    ``(o1, o2, ...)`` the result has shape ``(o1, o2, ..., i1, i2, ...)``, as in
    autograd. With a tuple ``argnum`` it returns a tuple of Jacobians, one per
    argument. The output must be an array or a scalar (not a container).
    """
    check_argnum(argnum)
    tk = _transform_kwargs(jit, backend, mode)

    def jacobian_fn(*args, **kwargs):
        _api.refuse_device_args(args, "jacobian (jacrev)")
        single, nums, y, pull = _vjp_at(fun, args, kwargs, argnum, tk)
        fname = getattr(fun, "__name__", "fun")
        if len(tree_flatten(y)[0]) != 1 or isinstance(y, (tuple, list, dict)):
            raise TypeError(f"jacobian of {fname}: the function must return one array or scalar; it returned "
                            f"a {type(y).__name__}")
        for i in nums:
            if isinstance(args[i], (tuple, list, dict)) or is_user_vspace_value(args[i]):
                raise TypeError(f"jacobian of {fname}: argument {i} is a {type(args[i]).__name__}; jacobian "
                                "differentiates with respect to an array or a float (use funcgrad.vjp for "
                                + ("containers)" if not is_user_vspace_value(args[i]) else
                                   "a value of a vector space registered with VSpace.register, or funcgrad.grad)"))
        rows = _basis_rows(y, pull, f"jacobian of {fname}")
        out = []
        for k, i in enumerate(nums):
            x_shape = np.shape(args[i])
            x_dtype = np.result_type(args[i])
            if rows:
                jac = np.stack([np.asarray(r[k], dtype=x_dtype) for r in rows])
            else:
                jac = np.zeros((0,) + x_shape, dtype=x_dtype)
            out.append(np.reshape(jac, np.shape(y) + x_shape))
        return out[0] if single else tuple(out)

    jacobian_fn._funcgrad_inline = functools.partial(_fm.inline_jacobian, fun, argnum, "jacobian")  # inside: a loop
    return _named(jacobian_fn, "jacobian", fun, argnum)


def jacrev(fun, argnums=0, *, jit=True, backend=None, mode=None):
    """The Jacobian by reverse mode (JAX's name for autograd's ``jacobian``): one VJP per output element;
    shape ``out.shape + in.shape``, a tuple of them for a tuple ``argnums``."""
    jac = jacobian(fun, argnums, jit=jit, backend=backend, mode=mode)
    jac._funcgrad_inline = functools.partial(_fm.inline_jacobian, fun, argnums, "jacrev")
    return jac


jacrev._funcgrad_static_call = True   # written inside a transformed function: made while transforming


def elementwise_grad(fun, argnum=0, *, jit=True, backend=None, mode=None):
    """The VJP of ``fun`` at a cotangent of ones: the sum of each column of the Jacobian, in one pass.

    When the Jacobian is diagonal (an elementwise function) this is its
    diagonal. The function must return real values (arrays, floats or a
    container of them).
    """
    check_argnum(argnum)
    tk = _transform_kwargs(jit, backend, mode)

    def elementwise_grad_fn(*args, **kwargs):
        single, nums, y, pull = _vjp_at(fun, args, kwargs, argnum, tk)
        if _is_complex(y):
            raise TypeError("elementwise_grad only applies to real-output functions")
        leaves, td = tree_flatten(y)
        ones = [np.ones(np.shape(o), dtype=np.result_type(o)) if np.ndim(o) else np.ones((), np.result_type(o))[()]
                for o in leaves]
        g = pull(tree_unflatten(td, ones))
        return g[0] if single else tuple(g)

    elementwise_grad_fn._funcgrad_inline = functools.partial(_fm.inline_elementwise_grad, fun, argnum)  # inside
    return _named(elementwise_grad_fn, "elementwise_grad", fun, argnum)


def deriv(fun, argnum=0, *, jit=True, backend=None, mode=None):
    """The Jacobian of ``fun`` times a tangent of ones in argument ``argnum``, by forward mode.

    For a scalar input this is the ordinary derivative, with the output's
    structure. As in autograd the tangent is ``vspace(x).ones()``: ``1`` for
    real values, ``1 + 1j`` for complex ones.
    """
    check_argnum(argnum)
    tk = _transform_kwargs(jit, backend, mode)

    def deriv_fn(*args, **kwargs):
        fname = getattr(fun, "__name__", "fun")
        f, x = bind_argnum(fun, args, kwargs, argnum, name=fname)
        leaves, td = tree_flatten(x)
        ones = tree_unflatten(td, [_ones_like(v) for v in leaves])
        return _jvp(f, (x,), (ones,), **tk)[1]

    deriv_fn._funcgrad_inline = functools.partial(_fm.inline_deriv, fun, argnum)   # inside a transform
    return _named(deriv_fn, "deriv", fun, argnum)


def _ones_like(v):
    """autograd's ``vspace(v).ones()``: ones of ``v``'s kind, shape and dtype; ``1 + 1j`` for complex ``v``."""
    one = (1 + 1j) if np.iscomplexobj(v) else 1
    if isinstance(v, np.ndarray):
        return np.full(v.shape, one, dtype=v.dtype)
    if isinstance(v, np.generic):
        return v.dtype.type(one)
    return complex(one) if isinstance(v, complex) else float(one)


def holomorphic_grad(fun, argnum=0, *, jit=True, backend=None, mode=None):
    """The complex derivative of a holomorphic ``fun`` (autograd's ``holomorphic_grad``).

    The gradient of ``real(fun(z))`` with respect to ``z`` in autograd's
    convention, which for a holomorphic ``fun`` is ``fun'(z)``. The function
    must return a scalar. A real input gets autograd's warning ("Input to
    holomorphic_grad is not complex") and the gradient of the real part.
    """
    check_argnum(argnum)
    tk = _transform_kwargs(jit, backend, mode)

    def holomorphic_grad_fn(*args, **kwargs):
        fname = getattr(fun, "__name__", "fun")
        single, nums = normalize_argnum(argnum, len(args))
        x = args[nums[0]] if single else tuple(args[i] for i in nums)
        if not _is_complex(x):
            warnings.warn("Input to holomorphic_grad is not complex", stacklevel=2)
        f, x = bind_argnum(fun, args, kwargs, argnum, name=fname)
        real_part = source_function(f"real_{fname}", ["x"], "_np.real(_f(x))", {"_f": f, "_np": np})
        return _api.grad(real_part, **tk)(x)

    holomorphic_grad_fn._funcgrad_inline = _fm.refuse_inline("holomorphic_grad")
    return _named(holomorphic_grad_fn, "holomorphic_grad", fun, argnum)


# written inside a transformed function, these are made while transforming (as grad(f) is); calling the result
# there reaches its _funcgrad_inline hook (elementwise_grad and deriv are written out, the others refused)
for _op in (jacobian, elementwise_grad, deriv, holomorphic_grad):
    _op._funcgrad_static_call = True
