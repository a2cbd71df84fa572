"""The primitive registry: every differentiable operation declared once.

A primitive is keyed by the function object users call (``numpy.exp``,
``numpy.matmul``, ``funcgrad.nn.conv2d``). Its declaration gives, side by side:

* the forward: a Python function whose signature is the primitive's signature
  and whose body calls the kernel of the same name in the kernel namespace
  ``K`` (``funcgrad.kernels.cpu``); generated code calls ``K.<name>(...)``;
* the VJP template: a function ``(y, *params)`` whose body assigns
  ``d[param] = expr``; ``y`` is the result and ``d[y]`` its cotangent. The
  template is parsed, never executed: the reverse pass fills it in with the
  names at each call site. Parameters never assigned in ``d[...]`` are not
  differentiable (axes, shapes, flags): a differentiated value flowing into
  one is refused at the user's line, unless the template declares the
  parameter as having no derivative with ``d[param] = None`` (an operand read
  for its shape only, a mask argument: piecewise constant, a buffer);
* the JVP line, in the same template: ``t[y] = expr`` where ``t[param]`` is the
  tangent of an input (linear in the tangents). The forward pass fills it in,
  treating the tangent of an inactive input as zero (terms vanish);
* a ``sample`` spec the registry-driven property test draws arguments from.

:func:`defvjp` declares all of it in one place (the forward is the backend
kernel of the template's name); ``@primitive`` + ``@vjp`` remain for the few
primitives whose forward is not a kernel call (indexing). :func:`nondiff`
declares functions whose derivative is zero.

Guarantee: ``lookup(obj)`` returns the :class:`Primitive` for any registered
callable (also for ``ndarray`` methods normalized to functions), and every
registered primitive has a sample spec, so the property test covers it.
"""
from __future__ import annotations

import ast
import builtins
import copy
import inspect
import sys
import textwrap
import types
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..kernels import cpu as _cpu_kernels

__all__ = ["Primitive", "defvjp", "primitive", "vjp", "d", "t", "lookup", "registry", "alias", "nondiff",
           "is_nondiff", "define", "definition", "Definition", "RUNTIME", "when_imported", "template_calls",
           "rules_calling", "definitions_calling"]


class _Cotangents:
    """``d`` in VJP templates: ``d[x]`` names the cotangent of ``x``. Never evaluated."""

    def __getitem__(self, item):  # pragma: no cover - templates are parsed, not run
        raise RuntimeError("VJP templates are source templates; they are parsed, not executed")

    __setitem__ = __getitem__


d = _Cotangents()


class _Tangents:
    """``t`` in JVP lines of templates: ``t[x]`` names the tangent of ``x``. Never evaluated."""

    def __getitem__(self, item):  # pragma: no cover - templates are parsed, not run
        raise RuntimeError("JVP templates are source templates; they are parsed, not executed")

    __setitem__ = __getitem__


t = _Tangents()


@dataclass
class Template:
    params: list[str]           # template parameter names after the result name
    result: str                 # name bound to the primitive's result
    body: list[ast.stmt]        # statements assigning d[param] = expr (and template temporaries)
    diff_params: list[str]      # params with a cotangent assignment
    jvp_body: list | None       # template temporaries and the one ``t[result] = expr`` (None: no JVP)
    globals: dict               # the template function's globals (resolves np, K, helpers)
    filename: str
    lineno: int
    nondiff: list = field(default_factory=list)   # params declared ``d[p] = None``: no derivative, by design

    @property
    def jvp_params(self) -> set:
        """The params whose tangent ``t[p]`` the JVP line reads."""
        return {n.slice.id for s in (self.jvp_body or []) for n in ast.walk(s) if _is_t(n)}

    def undeclared(self, p, forward=False) -> bool:
        """True when a differentiated value flowing into param ``p`` has no rule (neither a ``d[p]`` line, or
        for forward mode a ``t[p]`` in the JVP line, nor a ``d[p] = None`` declaration)."""
        if p in self.nondiff:
            return False
        return p not in (self.jvp_params if forward else self.diff_params)


@dataclass
class Primitive:
    key: Any
    name: str
    impl: Callable
    signature: inspect.Signature
    sample: Any = None
    elementwise: bool = False
    tested_via: Any = None        # a primitive whose VJP exercises this one (list-valued helpers)
    operator: str | None = None   # emitted as Python operator syntax ("+", "@", "neg", ...)
    extra_keys: list = field(default_factory=list)
    python_only: bool = False     # its kernel has no nopython version: jit="auto" runs its callers as Python
    _vjp_fn: Any = field(default=None, repr=False)            # the template function, read at first use
    _template: Template | None = field(default=None, repr=False)

    @property
    def template(self) -> Template | None:
        """The VJP/JVP template, parsed from its source the first time it is needed (parsing all of them
        at ``import funcgrad`` took seconds)."""
        if self._template is None and self._vjp_fn is not None:
            self._template = _parse_template(self, self._vjp_fn)
        return self._template

    @property
    def params(self) -> list[str]:
        return list(self.signature.parameters)

    @property
    def differentiable(self) -> bool:
        return self.template is not None

    def __repr__(self):
        return f"<primitive {self.name}>"

    def __deepcopy__(self, memo):  # AST nodes carry primitives; copying a tree shares them
        return self


_BY_KEY: dict[int, Primitive] = {}
_BY_NAME: dict[str, Primitive] = {}
_KEEPALIVE: list = []


def _ident(obj):
    """The registry key of a callable: its id; a bound method (``scipy.stats.norm.logpdf``, a new object at
    every attribute access) is known by its instance and function."""
    if isinstance(obj, types.MethodType):
        return ("method", id(obj.__self__), id(obj.__func__))
    return id(obj)


def _register_key(key, prim):
    _KEEPALIVE.append(key)
    _BY_KEY[_ident(key)] = prim


def primitive(key=None, *, name: str | None = None, sample=None, elementwise=False, operator=None,
              tested_via=None, python_only=False):
    """Declare the forward of a primitive keyed by ``key`` (default: the decorated function)."""

    def deco(fn):
        k = fn if key is None else key
        nm = name or fn.__name__
        if nm in _BY_NAME:
            raise ValueError(f"primitive {nm!r} is declared twice")
        # a kernel with no nopython version says so itself (kernels/cpu_linalg.py's sqrtm) or the declaration does
        python_only_ = python_only or bool(getattr(getattr(_cpu_kernels, nm, None), "python_only", False))
        prim = Primitive(key=k, name=nm, impl=fn, signature=inspect.signature(fn), sample=sample,
                         elementwise=elementwise, operator=operator, tested_via=tested_via, python_only=python_only_)
        _BY_NAME[nm] = prim
        _register_key(k, prim)
        if k is not fn:
            _register_key(fn, prim)
        return fn

    return deco


def alias(key, target_key):
    """Make ``key`` (another callable) resolve to the primitive registered for ``target_key``."""
    prim = lookup(target_key)
    if prim is None:
        raise KeyError(f"alias: {target_key!r} is not a registered primitive")
    prim.extra_keys.append(key)
    _register_key(key, prim)


def defvjp(key=None, *, name: str | None = None, sample=None, elementwise=False, operator=None, also=(),
           tested_via=None, python_only=False):
    """Declare a primitive in one place: its VJP template, keyed by the function users call.

    ``@defvjp(np.arcsin, sample=S.unary("unit"), elementwise=True, also=[math.asin])`` over
    ``def arcsin(y, x): d[x] = d[y] / np.sqrt(1 - x * x)`` declares everything: the primitive's
    name is the template's name, its signature the template's parameters after the result ``y``
    (defaults mark non-differentiable parameters such as ``axis``), its forward the backend kernel
    of the same name (``K.arcsin``, which must exist: checked here for the CPU backend), ``also``
    lists other callables that mean the same (``math.asin``). A template that assigns no ``d[...]``
    (only ``pass``) declares a function whose derivative is zero. One more line, ``t[y] = t[x] /
    np.sqrt(1 - x * x)``, is the JVP (forward mode): it is linear in the ``t[...]`` of the inputs.
    ``python_only=True``: the kernel runs in Python only (scipy.special), so ``jit="auto"`` runs code
    calling it as Python over compiled kernels.
    """

    def deco(fn):
        nm = name or fn.__name__
        kernel = getattr(_cpu_kernels, nm, None)
        if kernel is None:
            raise TypeError(f"primitive {nm!r} has no kernel: add {nm} to funcgrad/kernels/cpu.py")
        sig = inspect.signature(fn)
        fsig = sig.replace(parameters=list(sig.parameters.values())[1:])

        def forward(*args, **kwargs):
            return getattr(_cpu_kernels, nm)(*args, **kwargs)

        forward.__name__ = forward.__qualname__ = nm
        forward.__signature__ = fsig
        forward.__doc__ = fn.__doc__
        primitive(key, name=nm, sample=sample, elementwise=elementwise, operator=operator,
                  tested_via=tested_via, python_only=python_only)(forward)
        vjp(key if key is not None else forward)(fn)
        for other in also:
            alias(other, key if key is not None else forward)
        return forward if key is None else fn

    return deco


def vjp(key):
    """Declare the VJP template of the primitive keyed by ``key``."""

    def deco(fn):
        prim = lookup(key)
        if prim is None:
            raise KeyError(f"vjp: {key!r} has no @primitive declaration; declare the forward first")
        params = list(inspect.signature(fn).parameters)[1:]
        if params != prim.params:
            raise TypeError(f"vjp template of {prim.name}: parameters {params} must match the forward's {prim.params}")
        prim._vjp_fn, prim._template = fn, None
        return fn

    return deco


def _parse_template(prim, fn) -> Template:
    """Read a template function's source: its VJP lines, its JVP line, its temporaries."""
    try:
        src = textwrap.dedent(inspect.getsource(fn))
        fdef = ast.parse(src).body[0]
    except (OSError, SyntaxError, IndexError):
        fdef = None
    code = fn.__code__
    if not isinstance(fdef, ast.FunctionDef) or fdef.name != code.co_name or \
            [a.arg for a in fdef.args.args] != list(code.co_varnames[:code.co_argcount]):
        # templates are read from their file when first used: a file changed on disk since funcgrad was
        # imported (an upgrade in a running session) holds another function at that line now
        raise RuntimeError("funcgrad's installed files changed after it was imported (an upgrade or an edit while "
                           f"this Python process ran), so its derivative rule for {prim.name} cannot be read; restart "
                           "the Python process")
    names = [a.arg for a in fdef.args.args]
    result, params = names[0], names[1:]
    stmts = [s for s in fdef.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    nondiff_ = [s.targets[0].slice.id for s in stmts if isinstance(s, ast.Assign) and _is_d(s.targets[0])
                and isinstance(s.value, ast.Constant) and s.value.value is None]
    stmts = [s for s in stmts if not (isinstance(s, ast.Assign) and _is_d(s.targets[0])
                                      and isinstance(s.value, ast.Constant) and s.value.value is None)]
    body = [s for s in stmts if not (isinstance(s, ast.Assign) and _is_t(s.targets[0]))]
    jvp_lines = [s for s in stmts if isinstance(s, ast.Assign) and _is_t(s.targets[0])]
    diff = []
    for s in ast.walk(fdef):
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and _is_d(s.targets[0]) and \
                s.targets[0].slice.id not in nondiff_:
            diff.append(s.targets[0].slice.id)
    for p in nondiff_:
        if p not in params:
            raise TypeError(f"template of {prim.name}: d[{p}] = None names no parameter")
    jvp_body = None
    if jvp_lines:
        if len(jvp_lines) != 1 or jvp_lines[0].targets[0].slice.id != result:
            raise TypeError(f"template of {prim.name}: the JVP is one line assigning t[{result}]")
        if not diff:   # the reverse pass would read a template with no d[...] line as a zero derivative
            raise TypeError(f"template of {prim.name}: a JVP line needs the VJP's d[...] lines beside it")
        jvp_body = [s for s in stmts if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name)
                    and not _reads_d(s.value)]   # temporaries of the VJP (reading d[...]) are not the JVP's
        jvp_body += jvp_lines
    elif not diff and all(isinstance(s, ast.Pass) for s in body):
        jvp_body = []     # a zero derivative: the tangent of the result is zero too
    return Template(params=params, result=result, body=body, diff_params=diff, jvp_body=jvp_body,
                    globals=fn.__globals__, filename=inspect.getsourcefile(fn), lineno=fn.__code__.co_firstlineno,
                    nondiff=nondiff_)


def _reads_d(node) -> bool:
    return any(isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == "d"
               for n in ast.walk(node))


def _is_t(node) -> bool:
    return (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "t"
            and isinstance(node.slice, ast.Name))


def _is_d(node) -> bool:
    return (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "d"
            and isinstance(node.slice, ast.Name))


_NONDIFF: dict = {}   # id -> function whose result is piecewise constant in its inputs (zero derivative)


def nondiff(*fns):
    """Declare functions with no derivative (``np.argmax``, comparisons, ``np.floor``...): a call of one
    on a differentiated value contributes nothing to the gradient, and no rule is needed."""
    for f in fns:
        _KEEPALIVE.append(f)
        _NONDIFF[id(f)] = f


def is_nondiff(obj) -> bool:
    return id(obj) in _NONDIFF and _NONDIFF[id(obj)] is obj


def register_kernels(namespace):
    """Make generated code readable again: each primitive's kernel in ``namespace`` (``K.tanh``, and the
    Python function behind a Numba dispatcher) resolves to the primitive, so funcgrad can transform the
    code it generated (``jvp`` of ``jvp``, ``grad`` of ``jvp``)."""
    for name, prim in list(_BY_NAME.items()):
        k = getattr(namespace, name, None)
        for obj in (k, getattr(k, "py_func", None), getattr(k, "__wrapped__", None)):
            if obj is not None and id(obj) not in _BY_KEY and callable(obj):
                _register_key(obj, prim)
    # a backend whose kernels wrap another's (``functools.wraps``: counting, profiling): read back, a wrapper is
    # what it wraps (``K.op_eq`` wrapping ``operator.eq``: the wrapper's own body was inlined as user code)
    for name in dir(namespace):
        k = getattr(namespace, name, None)
        inner = getattr(k, "__wrapped__", None)
        if inner is not None and isinstance(k, types.FunctionType):   # (not a Numba dispatcher: its __wrapped__
            _WRAPPED_KERNELS[id(k)] = (k, inner)                        # is its own Python function)


_WRAPPED_KERNELS: dict = {}   # id(wrapper) -> (wrapper, the kernel it wraps)


def unwrap_kernel(fn):
    """The kernel a backend's wrapper in a kernel namespace wraps (``fn`` itself for anything else)."""
    hit = _WRAPPED_KERNELS.get(id(fn))
    return hit[1] if hit is not None and hit[0] is fn else fn
class _Runtime:
    """Stands for an argument a definition's ``check`` cannot see: one computed when the function runs."""

    def __repr__(self):
        return "RUNTIME"


RUNTIME = _Runtime()


@dataclass
class Definition:
    """A function users call (``np.linalg.eigh``), defined by a Python function over primitives."""
    fn: Callable                  # read and inlined by normalize at the call site
    check: Callable | None = None  # (*args, **kwargs) with values known while transforming -> refusal or None


_DEFINED: dict = {}   # _ident(key) -> (key, Definition)


def define(*keys, check=None):
    """Define the callables ``keys`` by the decorated Python function, written over primitives.

    Normalize inlines it where the user calls one of ``keys``, as it inlines the user's own helpers, and
    places its statements (and their errors) at the user's line. A definition can do what one primitive
    cannot: return several results computed once (a tuple or a NumPy NamedTuple of ``getitem``s of one
    packed primitive result: ``w, v = np.linalg.eigh(a)``), pick primitives by static arguments
    (``scipy.special.logsumexp(a, b=..., return_sign=True)``), and accept another signature
    (``scipy.linalg.inv(a, overwrite_a=False)``). ``check(*args, **kwargs)`` runs while transforming with
    every argument known then (arguments computed at run time are :data:`RUNTIME`); it returns ``None``
    or ``(message, hint)``, which refuses the call at the user's line. Keys living in a module ``import
    funcgrad`` does not import are defined from a :func:`when_imported` registration.
    """
    def deco(fn):
        for k in keys:
            _KEEPALIVE.append(k)
            _DEFINED[_ident(k)] = (k, Definition(fn, check))
        return fn
    return deco


def definition(obj) -> Definition | None:
    """The :class:`Definition` of ``obj`` if :func:`define` defined it."""
    hit = _DEFINED.get(_ident(obj))
    if hit is None and _DEFERRED and _run_deferred():
        hit = _DEFINED.get(_ident(obj))
    return hit[1] if hit is not None else None


def lookup(obj) -> Primitive | None:
    prim = _BY_KEY.get(_ident(obj))
    if prim is None and _DEFERRED and _run_deferred():
        prim = _BY_KEY.get(_ident(obj))
    return prim


_DEFERRED: dict = {}   # module name -> functions registering keys that live in that module


def when_imported(module: str, register):
    """Run ``register()`` (it registers keys living in ``module``: ``scipy.stats.norm.logpdf``) once
    ``module`` is imported, by the user's code, before funcgrad reads a call: ``import funcgrad`` does not
    import scipy.stats, scipy.special or scipy.integrate (about a second) for code that never calls them."""
    if module in sys.modules:
        register()
    else:
        _DEFERRED.setdefault(module, []).append(register)


def _run_deferred() -> bool:
    todo = [register for m in [m for m in _DEFERRED if m in sys.modules] for register in _DEFERRED.pop(m)]
    for register in todo:   # popped first: a registration's own lookups do not run it again
        register()
    return bool(todo)


def by_name(name: str) -> Primitive | None:
    return _BY_NAME.get(name)


def registry() -> dict[str, Primitive]:
    """All primitives registered so far, by name (after ``import funcgrad``: every one)."""
    return dict(_BY_NAME)


def template_calls(tpl: Template):
    """Every call in a template's VJP lines and JVP line: ``(part, dotted_name, obj)`` with ``part`` "vjp" or
    "jvp" and ``obj`` what the name resolves to in the template's globals (``None`` when it does not)."""
    out = []
    for part, body in (("vjp", tpl.body), ("jvp", tpl.jvp_body or [])):
        for stmt in body:
            for node in ast.walk(stmt):
                if not isinstance(node, ast.Call):
                    continue
                fn, attrs = node.func, []
                while isinstance(fn, ast.Attribute):
                    attrs.append(fn.attr)
                    fn = fn.value
                if not isinstance(fn, ast.Name) or fn.id in ("d", "t"):
                    continue
                obj = tpl.globals.get(fn.id, getattr(builtins, fn.id, None))
                for a in reversed(attrs):
                    obj = getattr(obj, a, None)
                out.append((part, ".".join([fn.id] + attrs[::-1]), obj))
    return out


def rules_calling(prim: Primitive) -> list:
    """The primitives whose VJP or JVP template calls ``prim`` (a helper kernel inside their rules)."""
    _run_deferred()
    return [p for p in _BY_NAME.values() if p is not prim and p.template is not None
            and any(lookup(obj) is prim for _, _, obj in template_calls(p.template) if obj is not None)]


def definitions_calling(prim: Primitive) -> list:
    """The keys (functions users call: ``scipy.linalg.solve_banded``) whose :func:`define` definition calls the
    primitive ``prim`` directly."""
    _run_deferred()
    keys = []
    for key, dfn in _DEFINED.values():
        g = getattr(dfn.fn, "__globals__", {})
        if any(lookup(g.get(n)) is prim for n in getattr(getattr(dfn.fn, "__code__", None), "co_names", ())
               if callable(g.get(n))):
            keys.append(key)
    return keys


def evaluate_jvp(prim: Primitive, args, kwargs, tangents: dict):
    """Run ``prim``'s JVP line directly (Python, NumPy): the reference the forward pass is tested against.

    ``tangents`` maps parameter names to tangent values; a parameter not in it has a zero tangent
    (``np.zeros_like`` of its value; a tuple parameter gets a tuple of zeros).
    """
    tpl = prim.template
    if tpl is None or tpl.jvp_body is None:
        raise NotImplementedError(f"primitive {prim.name} has no JVP line")
    ba = prim.signature.bind(*args, **kwargs)
    ba.apply_defaults()
    env = dict(ba.arguments)
    y = prim.impl(*args, **kwargs)
    env[tpl.result] = y
    if not tpl.jvp_body:
        return np.zeros_like(y)
    tan = {}
    for p in tpl.params:
        if p in tangents:
            tan[p] = tangents[p]
        elif isinstance(env[p], (tuple, list)):
            tan[p] = tuple(np.zeros_like(v) for v in env[p])
        else:
            tan[p] = np.zeros_like(env[p]) if isinstance(env[p], (np.ndarray, float, np.generic)) else None

    class _T(ast.NodeTransformer):
        def visit_Subscript(self, node):
            if _is_t(node):
                return ast.copy_location(ast.Name("__tan_" + node.slice.id, node.ctx), node)
            return self.generic_visit(node)

    body = [_T().visit(copy.deepcopy(s)) for s in tpl.jvp_body]
    mod = ast.fix_missing_locations(ast.Module(body=body, type_ignores=[]))
    scope = dict(tpl.globals)
    scope.update(env)
    scope.update({"__tan_" + k: v for k, v in tan.items()})
    exec(compile(mod, f"<JVP of {prim.name}>", "exec"), scope)
    return scope["__tan_" + tpl.result]
