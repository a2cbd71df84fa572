"""autograd's way of giving a function its own derivative: ``primitive``, then ``defvjp`` / ``defjvp``.

For code written for HIPS autograd (``from autograd.extend import primitive, defvjp``); funcgrad's own
spelling is :func:`funcgrad.custom_vjp` / :func:`funcgrad.custom_jvp`, which these build on::

    @primitive
    def logsumexp(x):
        m = np.max(x)
        return m + np.log(np.sum(np.exp(x - m)))

    defvjp(logsumexp, lambda ans, x: lambda g: g * np.exp(x - ans))   # one maker per argument
    defjvp(logsumexp, lambda g, ans, x: np.sum(g * np.exp(x - ans)))

A VJP maker is ``maker(ans, *args) -> (g -> cotangent of that argument)``; a JVP maker is
``maker(g, ans, *args) -> the output's tangent due to that argument``; ``None`` (or an argument with no
maker) contributes nothing. The function runs as Python (as every ``custom_vjp`` function does).
``@primitive`` on a method binds as a function does (``obj.method(x)``, ``obj(x)`` for ``__call__``).

User vector spaces: ``VSpace`` (subclass it with ``zeros``, ``_add``, ``_scalar_mul``, ``_inner_prod``;
``MySpace.register(MyType)``) and ``vspace(x)``. A gradient with respect to a ``MyType`` argument is an element
of its space, made by the rules of the primitives the value is given to (README: autograd compatibility).
``Box`` exists for code that subclasses and registers it (``class MyBox(Box, MyType)``; ``MyBox.register(MyType)``):
funcgrad reads the function's source instead of tracing, so boxes are never made.
"""
from __future__ import annotations

from .custom import CustomFunction, CustomVJPFunction, VSpace, vspace

__all__ = ["primitive", "defvjp", "defjvp", "Box", "VSpace", "vspace"]


class Box:
    """autograd's tracing box, kept for code that subclasses it together with its own class and registers it.
    funcgrad does not trace (it reads the function's source), so it never makes one; ``Box.register`` records
    the pairing only."""

    type_mappings: dict = {}
    types: set = set()
    __slots__ = ("_value", "_trace", "_node")

    def __init__(self, value, trace=None, node=None):
        self._value, self._trace, self._node = value, trace, node

    @classmethod
    def register(cls, value_type):
        Box.types.add(cls)
        Box.type_mappings[value_type] = cls
        Box.type_mappings[cls] = cls


def primitive(fun):
    """``fun`` as a function funcgrad does not look inside; give its derivatives with :func:`defvjp` and/or
    :func:`defjvp`."""
    return CustomVJPFunction(fun)


def _check(prim, what):
    if not isinstance(prim, CustomFunction):
        raise TypeError(f"{what} expects a function made with funcgrad.extend.primitive (or funcgrad.custom_vjp); "
                        f"received {prim!r}")


def _by_argnum(makers, argnums, what):
    argnums = tuple(range(len(makers))) if argnums is None else tuple(argnums)
    if len(argnums) != len(makers):
        raise TypeError(f"{what}: {len(makers)} rules for argnums {argnums}")
    for m in makers:
        if m is not None and not callable(m):
            raise TypeError(f"{what}: each rule must be a function or None; received {m!r}")
    return dict(zip(argnums, makers))


def defvjp(prim, *vjpmakers, argnums=None):
    """One VJP maker per argument (in order, or for ``argnums``): ``maker(ans, *args)`` returns the function
    ``g -> cotangent`` of that argument."""
    _check(prim, "defvjp")
    makers = _by_argnum(vjpmakers, argnums, "defvjp")

    def fwd(*args):
        # prim itself, not prim.fun: a second derivative reads this code, and ans's derivative is then the
        # rule's (autograd differentiates a maker with ans boxed as the primitive's output)
        ans = prim(*args)
        return ans, (ans, args)

    def bwd(res, g):
        ans, args = res
        return tuple(makers[i](ans, *args)(g) if makers.get(i) is not None else None for i in range(len(args)))

    prim.defvjp(fwd, bwd)
    return prim


def defjvp(prim, *jvpmakers, argnums=None):
    """One JVP maker per argument (in order, or for ``argnums``): ``maker(g, ans, *args)`` is the output's
    tangent due to that argument's tangent ``g``."""
    _check(prim, "defjvp")
    makers = _by_argnum(jvpmakers, argnums, "defjvp")
    n = max(makers) + 1 if makers else 0
    prim.defjvps(*[makers.get(i) for i in range(n)])
    return prim
