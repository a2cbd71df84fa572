"""User-defined derivatives: ``custom_vjp``, ``custom_jvp`` and ``stop_gradient``.

Sits below the transformer (as JAX's ``custom_derivatives`` sits below its
``api``): the passes recognise these objects by type; nothing here imports
the transformer (reverse mode over a ``custom_jvp`` function transposes its
JVP rule through a hook the layer above fills in, :data:`_TRANSPOSE`).

A call of a custom function inside a differentiated function runs ``fun`` as
it is (Python). Forward mode (``jvp``, ``jacfwd``, ``hessian``, ``hvp``)
replaces it by the JVP rule ``rule(primals, tangents) -> (out, tangent)``;
reverse mode (``grad``, ``vjp``) uses ``bwd(residuals, g)`` where one is
given (``defvjp``), else the VJP of the rule's tangent, which is linear in the
tangents (what JAX derives by transposition), computed by funcgrad's reverse
mode over the rule's code. Higher orders differentiate the rule's code again,
as JAX does.

:class:`VSpace` (autograd's, re-exported by ``funcgrad.extend``) registers a user's
vector space: a differentiated argument of a registered type gets a cotangent of
that space (``vspace(x).zeros()``, ``.add``), made by the rules it is given to.
"""
from __future__ import annotations

import functools
import linecache
import types

import numpy as np

from .errors import FuncgradError, NoDerivativeError
from .ops import core as _core
from .ops.registry import alias

__all__ = ["custom_vjp", "custom_jvp", "CustomFunction", "CustomVJPFunction", "CustomJVPFunction",
           "stop_gradient", "checkpoint_range", "checkpointed", "remat", "Rematerialized", "VSpace", "vspace",
           "is_user_vspace_value"]


def checkpoint_range(*args, segment=None, snapshots=None):
    """``range(*args)``; a differentiated loop over it is checkpointed: its gradient stores the loop's carried
    state every ``segment`` iterations (about sqrt(trip count) by default) instead of a tape entry per
    iteration, and recomputes each segment's iterations in the reverse sweep (one more forward run of the
    loop). With ``snapshots=s`` the gradient keeps at most ``s`` copies of the state and reverses the loop with
    Griewank's binomial schedule (revolve) over steps of ``segment`` iterations (1 by default): the fewest
    recomputed steps for ``s`` snapshots (T <= C(s + r, s) steps are reversed recomputing none more than r
    times). Outside a differentiated function it is ``range``."""
    for key, k in (("segment", segment), ("snapshots", snapshots)):
        if k is not None and (not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1):
            raise ValueError(f"checkpoint_range: {key} must be a positive int; received {k!r}")
    return range(*args)


def checkpointed(cond, segment=None):
    """``bool(cond)``; as the test of a ``while`` loop in a differentiated function
    (``while funcgrad.checkpointed(err > tol, segment=k):``) the loop is checkpointed: its gradient stores the
    loop's carried state every ``segment`` iterations (1,000 by default: the trip count is not known when the
    loop starts) instead of a tape entry per iteration, and recomputes each segment's iterations in the reverse
    sweep. Outside a differentiated function it is ``bool(cond)``."""
    if segment is not None and (not isinstance(segment, (int, np.integer)) or isinstance(segment, bool)
                                or segment < 1):
        raise ValueError(f"checkpointed: segment must be a positive int; received {segment!r}")
    return bool(cond)


class Rematerialized:
    """A helper whose intermediates a gradient recomputes instead of storing (see :func:`remat`)."""

    def __init__(self, fun):
        if not callable(fun):
            raise TypeError(f"funcgrad.checkpoint expects a function; received {fun!r}")
        self.fun = fun
        functools.update_wrapper(self, fun)

    def __call__(self, *args, **kwargs):
        return self.fun(*args, **kwargs)

    def __deepcopy__(self, memo):
        return self


def remat(fun):
    """``jax.checkpoint`` (alias ``remat``) for a helper called inside a differentiated function: the
    gradient stores none of its intermediates (only what the call's inputs need, as for any statement) and
    recomputes them in the reverse sweep, just before the helper's adjoint runs: less tape for one more
    forward run of the helper. ``funcgrad.checkpoint(helper)`` is the same. Outside a differentiated function
    it is the helper itself."""
    return Rematerialized(fun)


def stop_gradient(x):
    """The identity; inside a differentiated function its derivative is zero."""
    return x


alias(stop_gradient, _core.stop_gradient)

# reverse mode over a custom_jvp function with no bwd: ``_TRANSPOSE[0](cf, args, g)`` -> cotangents of args
# (filled in by funcgrad.forward_mode, which runs funcgrad's reverse mode over the JVP rule)
_TRANSPOSE: list = [None]
# forward mode over a custom function with a VJP only: ``_DERIVE_JVP[0](cf)`` -> a JVP rule transposing its bwd
# (filled in by funcgrad.forward_mode, which runs funcgrad's reverse mode over the user's bwd)
_DERIVE_JVP: list = [None]


class CustomFunction:
    """A function with user-supplied derivative rules: a JVP rule (``defjvp``/``defjvps``), used by forward
    mode, and/or a VJP (``defvjp``), used by reverse mode. See :func:`custom_jvp` and :func:`custom_vjp`."""

    kind = "custom"

    def __init__(self, fun):
        if not callable(fun):
            raise TypeError(f"{self.kind} expects a function; received {fun!r}")
        self.fun = fun
        self.jvp = None     # rule(primals, tangents) -> (primal_out, tangent_out)
        self.fwd = None
        self.bwd = None
        self._tangent_fn = None
        self._derived = None   # the JVP rule derived from fwd/bwd (jvp_rule), made on first use
        functools.update_wrapper(self, fun)

    # ------------------------------------------------------------------ rules
    def defjvp(self, jvp):
        """``jvp(primals, tangents) -> (primal_out, tangent_out)``, JAX's convention: ``primals`` and
        ``tangents`` are tuples with one entry per argument (an argument that is not differentiated gets a
        zero tangent); ``tangent_out`` must be linear in the tangents. Returns ``jvp``, so it works as a
        decorator (``@f.defjvp``)."""
        if not callable(jvp):
            raise TypeError(f"{self.kind} {self._label}.defjvp: the rule must be a function; received {jvp!r}")
        self.jvp = jvp
        self._tangent_fn = None
        return jvp

    def defjvps(self, *jvps):
        """One rule per argument, JAX's ``defjvps``: ``jvps[i](t_i, primal_out, *primals)`` is the part of the
        output tangent due to argument ``i`` (``None``: that argument has no effect on the output)."""
        for j in jvps:
            if j is not None and not callable(j):
                raise TypeError(f"{self.kind} {self._label}.defjvps: each rule must be a function or None; "
                                f"received {j!r}")
        n = len(jvps)
        xs = [f"x{i}" for i in range(n)]
        ts = [f"t{i}" for i in range(n)]
        terms = [f"_jvp{i}({ts[i]}, ans, {', '.join(xs)})" for i, j in enumerate(jvps) if j is not None]
        name = "".join(c if c.isalnum() else "_" for c in self._label.split(".")[-1]) + "_jvps"
        src = (f"def {name}(primals, tangents):\n"
               f"    {', '.join(xs)}{',' if n == 1 else ''} = primals\n"
               f"    {', '.join(ts)}{',' if n == 1 else ''} = tangents\n"
               f"    ans = _f({', '.join(xs)})\n"
               f"    return ans, {' + '.join(terms) if terms else 'ans * 0.0'}\n")
        filename = f"<funcgrad: the JVP rules of {self._label} (defjvps) #{id(self):x}>"
        linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
        ns = {"_f": self, "__name__": __name__}
        ns.update({f"_jvp{i}": j for i, j in enumerate(jvps) if j is not None})
        exec(compile(src, filename, "exec"), ns)
        self.defjvp(ns[name])
        return self

    def defvjp(self, fwd, bwd):
        """``fwd(*args) -> (out, residuals)``; ``bwd(residuals, g) -> tuple of cotangents, one per arg``
        (``None`` for a zero cotangent)."""
        for what, f in (("fwd", fwd), ("bwd", bwd)):
            if not callable(f):
                raise TypeError(f"{self.kind} {self._label}.defvjp: {what} must be a function; received {f!r}")
        self.fwd, self.bwd = fwd, bwd
        self._derived = None
        return self

    @property
    def jvp_rule(self):
        """The JVP rule forward mode calls: the user's (``defjvp``), else one derived from the VJP by
        transposing ``bwd`` (linear in its cotangent), made once."""
        if self.jvp is not None:
            return self.jvp
        if self._derived is None and self.fwd is not None and _DERIVE_JVP[0] is not None:
            self._derived = _DERIVE_JVP[0](self)
        return self._derived

    # ------------------------------------------------------------------ calls
    def __call__(self, *args):
        return self.fun(*args)

    def __deepcopy__(self, memo):
        return self

    def __get__(self, obj, objtype=None):
        """A method: ``@primitive`` on ``def __call__(self, x)`` binds as a function does (``obj(x)`` and
        ``obj.method(x)`` call it with ``obj`` first); read from the class it is the custom function itself."""
        return self if obj is None else types.MethodType(self, obj)

    @property
    def _label(self):
        """The function's name as users write it (``f``, not ``outer.<locals>.f``)."""
        return getattr(self.fun, "__name__", None) or getattr(self.fun, "__qualname__", None) or repr(self.fun)

    def bwd_from_args(self, args, g):
        """The cotangents of ``args`` for output cotangent ``g``: ``bwd(residuals of fwd(*args), g)``, or, with
        no ``bwd``, the transpose of the JVP rule's tangent map (its VJP with respect to the tangents)."""
        if self.fwd is None:
            if self.jvp is not None and _TRANSPOSE[0] is not None:
                return _TRANSPOSE[0](self, args, g)
            raise FuncgradError(f"{self.kind} function {self._label} has no rule for reverse mode: call "
                                f".defvjp(fwd, bwd)" + ("" if self.kind == "custom_vjp" else " or .defjvp(rule)"))
        pair = self.fwd(*args)
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise FuncgradError(f"the fwd rule of {self._label} must return a pair (output, residuals); it "
                                f"returned {type(pair).__name__}"
                                + (f" of length {len(pair)}" if isinstance(pair, tuple) else ""))
        cts = self.bwd(pair[1], g)
        if not isinstance(cts, tuple) or len(cts) != len(args):
            raise FuncgradError(f"the bwd rule of {self._label} must return a tuple of {len(args)} "
                                f"cotangents (one per argument); it returned {type(cts).__name__}"
                                + (f" of length {len(cts)}" if isinstance(cts, tuple) else ""))
        # None is a zero cotangent (as in JAX): the argument does not change the result, by the user's rule
        return tuple(c if c is not None else np.zeros_like(a) if isinstance(a, (np.ndarray, np.generic, float))
                     else vspace(a).zeros() if is_user_vspace_value(a) else None for a, c in zip(args, cts))

    def tangent_fn(self, n):
        """``tangent_out(primals, t0, ..., t<n-1>)``: the rule's tangent for ``n`` arguments, a Python function
        funcgrad reads (reverse mode differentiates it with respect to the tangents to transpose the rule)."""
        if self._tangent_fn is None:
            self._tangent_fn = {}
        fn = self._tangent_fn.get(n)
        if fn is None:
            label = self._label
            name = "".join(c if c.isalnum() else "_" for c in label.split(".")[-1]) + "_tangent"
            ts = [f"t{i}" for i in range(n)]
            src = (f"def {name}(primals, {', '.join(ts)}):\n"
                   f"    return _rule(primals, ({', '.join(ts)}{',' if n == 1 else ''}))[1]\n")
            filename = f"<funcgrad: the tangent of {label}'s JVP rule #{id(self):x}.{n}>"
            linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
            ns = {"_rule": self.jvp, "__name__": __name__}
            exec(compile(src, filename, "exec"), ns)
            fn = self._tangent_fn[n] = ns[name]
        return fn


def rule_pullback(fwd, bwd, args, g):
    """``bwd_from_args`` written as code funcgrad reads: a derivative of generated reverse-mode code (``grad`` of
    ``grad``, ``hessian``) differentiates the user's ``fwd`` and ``bwd`` themselves, as JAX does with a
    ``custom_vjp`` function's rules at higher orders (and as autograd differentiates a ``defvjp`` maker). A
    ``None`` cotangent stays ``None`` here: the caller makes it a zero."""
    return bwd(fwd(*args)[1], g)


class CustomVJPFunction(CustomFunction):
    """A function with a user-supplied VJP, JAX-style (see :func:`custom_vjp`)."""

    kind = "custom_vjp"


class CustomJVPFunction(CustomFunction):
    """A function with a user-supplied JVP rule, JAX-style (see :func:`custom_jvp`)."""

    kind = "custom_jvp"


def custom_vjp(fun):
    """Give ``fun`` a hand-written VJP: ``f = custom_vjp(f); f.defvjp(fwd, bwd)``.

    Inside differentiated code the call runs ``fun`` forward and, in the
    adjoint, ``bwd(residuals, g)`` where ``residuals`` come from ``fwd``.
    ``fun`` may be any callable, a library routine with no rule included
    (``custom_vjp(scipy.special.multigammaln)``). ``fun``, ``fwd`` and ``bwd``
    run as Python, so a function calling it runs as Python over the compiled
    kernels: ``jit="auto"`` chooses that even with loops, and ``jit="whole"``
    refuses at the call's line. Forward mode (``jvp``, ``hessian``) uses a JVP
    rule where one is given (``f.defjvp(rule)``, see :func:`custom_jvp`), else
    derives one by transposing ``bwd`` (linear in its cotangent); a second
    derivative differentiates ``fwd`` and ``bwd`` themselves, as JAX does, so
    they must then be code funcgrad reads.
    """
    return CustomVJPFunction(fun)


def custom_jvp(fun):
    """Give ``fun`` a hand-written JVP rule, as ``jax.custom_jvp`` does::

        @funcgrad.custom_jvp
        def f(x, y):
            return np.sin(x) * y

        @f.defjvp
        def f_jvp(primals, tangents):
            x, y = primals
            x_dot, y_dot = tangents
            out = f(x, y)
            return out, np.cos(x) * x_dot * y + np.sin(x) * y_dot

    Forward mode (``jvp``, ``jacfwd``, ``hessian``, ``hvp``) uses the rule in place of ``fun``'s own
    derivative (``fun`` may be any callable, one funcgrad cannot read included); reverse mode (``grad``,
    ``vjp``) uses the transpose of the rule's tangent map, computed by funcgrad's reverse mode over the
    rule, which must then be code funcgrad differentiates and linear in the tangents (or give a VJP too,
    ``f.defvjp(fwd, bwd)``). Higher orders differentiate the rule itself. ``f.defjvps(j0, j1, ...)`` gives
    one rule per argument, ``j_i(t_i, out, *primals)``. The rule and ``fun`` run as Python, so a function
    calling ``f`` runs as Python over compiled kernels (``jit="auto"``), as with :func:`custom_vjp`.
    """
    return CustomJVPFunction(fun)


def second_order_rule(name, jvp_fun, jvp_fwd, jvp_bwd, jvp_jvp):
    """The JVP rule (for ``f.defjvp``) of a library function ``name`` whose derivatives are solved rather than
    read from code (odeint, fixed_point): ``jvp_fun`` with its VJP (``jvp_fwd``, ``jvp_bwd``: reverse over
    forward) and its own JVP ``jvp_jvp`` (forward over forward), each a second derivative; a third is refused,
    naming ``name``, which the rules are named for (a refusal that names the function reads well)."""
    def no_third(*_):
        raise NoDerivativeError(
            f"{name} gives first and second derivatives; a third derivative through it is not supported\n"
            f"  hint: take at most two derivatives (grad of grad, hessian, jacfwd of jacfwd) of a function calling "
            f"{name}")

    def jvp_jvp_fwd(primals2, tangents2):
        return jvp_jvp(primals2, tangents2), None

    jvp_fun.__name__ = jvp_jvp.__name__ = name
    second = custom_vjp(jvp_jvp)
    second.defvjp(jvp_jvp_fwd, no_third)
    second.defjvp(no_third)
    rule = custom_vjp(jvp_fun)
    rule.defvjp(jvp_fwd, jvp_bwd)
    rule.defjvp(second)
    return rule


# ---------------------------------------------------------------------------------------------- vector spaces
class VSpace:
    """autograd's vector space of a value type (``funcgrad.extend.VSpace``): what a gradient with respect to a
    value of a user's class (a function object, a sparse vector) needs. Subclass it, give ``zeros()`` and the
    operations ``_add``, ``_scalar_mul``, ``_inner_prod`` (``_covector``: the identity by default) and register
    it: ``MySpace.register(MyType)``. Differentiating with respect to a ``MyType`` argument then gives an
    element of that space: starts from ``zeros()``, accumulates with ``add``, and every contribution comes from
    a function with a derivative rule (``primitive`` + ``defvjp``, or ``custom_vjp``) called with the value."""

    mappings: dict = {}
    iscomplex = False

    def __init__(self, value):
        pass

    def zeros(self):
        raise NotImplementedError(f"{type(self).__name__} gives no zeros(); a vector space needs one")

    def ones(self):
        raise NotImplementedError(f"{type(self).__name__} gives no ones()")

    def standard_basis(self):
        raise NotImplementedError(f"{type(self).__name__} gives no standard_basis()")

    def randn(self):
        raise NotImplementedError(f"{type(self).__name__} gives no randn()")

    def add(self, x, y):
        return self._add(x, y)

    def mut_add(self, x_prev, x_new):
        return self._mut_add(self.zeros() if x_prev is None else x_prev, x_new)

    def scalar_mul(self, x, a):
        return self._scalar_mul(x, a)

    def inner_prod(self, x, y):
        return self._inner_prod(x, y)

    def covector(self, x):
        return self._covector(x)

    def _add(self, x, y):
        return x + y

    def _mut_add(self, x, y):
        x += y
        return x

    def _scalar_mul(self, x, a):
        return x * a

    def _inner_prod(self, x, y):
        raise NotImplementedError(f"{type(self).__name__} gives no _inner_prod(x, y)")

    def _covector(self, x):
        return x

    def __eq__(self, other):
        return type(self) is type(other) and vars(self) == vars(other)

    def __repr__(self):
        return f"{type(self).__name__}_{vars(self)}"

    @classmethod
    def register(cls, value_type, vspace_maker=None):
        """Values of ``value_type`` belong to this space (``vspace_maker(value)`` makes it, default the class)."""
        VSpace.mappings[value_type] = vspace_maker or cls


class _ArrayVSpace(VSpace):
    """The vector space of arrays and numbers (``vspace(np.ones(3))``), as autograd has it."""

    def __init__(self, value):
        value = np.asarray(value)
        self.shape, self.dtype = value.shape, value.dtype
        self.iscomplex = np.iscomplexobj(value)

    @property
    def size(self):
        return int(np.prod(self.shape))

    @property
    def ndim(self):
        return len(self.shape)

    def zeros(self):
        return np.zeros(self.shape, dtype=self.dtype)

    def ones(self):
        return np.ones(self.shape, dtype=self.dtype)

    def standard_basis(self):
        for i in np.ndindex(*self.shape):
            v = self.zeros()
            v[i] = 1
            yield v

    def randn(self):
        return np.random.randn(*self.shape).astype(self.dtype)

    def _inner_prod(self, x, y):
        return np.real(np.dot(np.ravel(np.conj(x)), np.ravel(y)))

    def _covector(self, x):
        return np.conj(x)


def is_user_vspace_value(x):
    """Whether ``x`` is a value of a type registered with :meth:`VSpace.register` (the user's own space)."""
    return type(x) in VSpace.mappings


def vspace(value):
    """The vector space of ``value``: its registered space, or the space of arrays for a number or an array."""
    maker = VSpace.mappings.get(type(value))
    if maker is not None:
        return maker(value)
    if isinstance(value, (np.ndarray, np.generic, float, int, complex)) and not isinstance(value, bool):
        return _ArrayVSpace(value)
    raise TypeError(f"no vector space is registered for a value of type {type(value).__name__}; register one "
                    f"with MySpace.register({type(value).__name__}) (MySpace: a subclass of funcgrad.extend.VSpace)")
