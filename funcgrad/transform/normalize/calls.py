"""Calls: primitives bound to their signatures, methods, custom_vjp functions, non-differentiable
library calls kept as they are, and the user's own helpers inlined with fresh names."""
from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import linecache
import operator
import re
import sys
import types
import warnings

import numpy as np
from numba.core.registry import cpu_target

from .. import annotations as A
from ...builtins import SUBSTITUTES as _AUTOGRAD_BUILTINS
from ...custom import CustomFunction as CustomVJPFunction, Rematerialized, checkpoint_range, checkpointed, rule_pullback  # custom_vjp and custom_jvp functions
from ...errors import FuncgradError, NoDerivativeError, UnsupportedSyntaxError
from ...ops.numpy_shape import asarray_dtype as _asarray_dtype, astype as _astype
from ...ops.registry import RUNTIME, Primitive, definition, lookup, unwrap_kernel
from ..activity import display_name, users_calling
from ..fence import check as fence_check, error
from ..public_names import public_name
from ..parse import MISSING, parse
from ..values import Dyn, Obj, Splat, Static, Struct, VSElement, leaves as _leaves, map_struct as _map_struct
from ...tree import tree_flatten, tree_map, tree_unflatten
from ..specs import leaf_spec
from .lowerings import lower_call, lowering_for
from .lists import RListPop, has_runtime_list
from ...ops.numpy_shape import pick
from ..astutil import ast_walk
from .common import (_DictView, _is_metadata, lookup_getitem, _Partial, _NJIT_BUILTINS, _STATIC_BUILTINS, _is_static_tree, _is_user_code, LocalFunction, Scope, _BUILTIN_MAP, _BoundMethod, _Iter, _METHODS, _Range,
                     _LIBRARY_ROOTS, is_library_file, _default_value, _np_attr, _static_value, primitive_method, tag_file, shown_as,
                     generated_file, place_at_call)

# operator.add(a, b) is a + b (autograd's tests pass operator functions as the function to check)
_OPERATOR_BINOPS = {operator.add: ast.Add, operator.sub: ast.Sub, operator.mul: ast.Mult, operator.truediv: ast.Div,
                    operator.floordiv: ast.FloorDiv, operator.mod: ast.Mod, operator.pow: ast.Pow,
                    operator.matmul: ast.MatMult}
# operator.eq(a, b) is a == b (and K.op_eq, as backends without operator syntax write a comparison, read back)
_OPERATOR_CMPS = {operator.eq: ast.Eq, operator.ne: ast.NotEq, operator.lt: ast.Lt, operator.le: ast.LtE,
                  operator.gt: ast.Gt, operator.ge: ast.GtE}



_PYTHON_DTYPES = (int, float, bool, complex)
#: NumPy functions taking a dtype as a positional argument, and its position
_DTYPE_POSITION = {np.zeros: 1, np.ones: 1, np.empty: 1, np.full: 2, np.zeros_like: 1, np.ones_like: 1,
                   np.empty_like: 1, np.full_like: 2, np.array: 1, np.asarray: 1, np.identity: 1, np.eye: 3,
                   np.arange: 3}


def _numpy_dtype_arguments(fn, args, kwargs):
    """A Python type given as a NumPy function's dtype (``np.zeros(n, dtype=int)``) as the NumPy scalar type it
    means (``np.int64`` here): the same array, and code Numba compiles (its NumPy functions take NumPy dtypes
    only)."""
    def convert(v):
        if isinstance(v, Static) and any(v.obj is t for t in _PYTHON_DTYPES):
            return Static(np.dtype(v.obj).type)
        return v
    if not (isinstance(fn, np.ufunc) or str(getattr(fn, "__module__", None) or "").startswith("numpy")):
        return args, kwargs
    if "dtype" in kwargs:
        new = convert(kwargs["dtype"])
        if new is not kwargs["dtype"]:
            kwargs = dict(kwargs)
            kwargs["dtype"] = new
    k = _DTYPE_POSITION.get(fn)
    if k is not None and len(args) > k:
        new = convert(args[k])
        if new is not args[k]:
            args = list(args)
            args[k] = new
    return args, kwargs


def _class_of_spec(sp):
    """The class of a value of leaf spec ``sp`` (an argument's, or a primitive's result on arguments of known
    specs): ``float`` for a Python float, ``np.float64`` for a NumPy scalar of that dtype, ``np.ndarray`` for an
    array; None where the spec does not say."""
    if not sp:
        return None
    kind = sp[0]
    if kind == "a":
        return np.ndarray
    if kind in ("s", "e"):
        return np.dtype(sp[1]).type
    return {"f": float, "i": int, "b": bool, "c": complex}.get(kind)


def _all_static(v):
    """A value known while transforming, containers of such values included (``argnums=(0, 1)``)."""
    return isinstance(v, Static) or (isinstance(v, Struct) and all(isinstance(x, Static) for x in _leaves(v)))


def _value_tree(v):
    """A :class:`Struct` as the Python container of its leaf values (tree_flatten then orders them as the
    arguments' own leaves are ordered)."""
    if isinstance(v, Struct):
        vals = [_value_tree(x) for x in v.values()]
        if v.kind == "dict":
            return dict(zip(v.items.keys(), vals))
        if v.kind == "namedtuple":
            return v.cls(*vals)
        return tuple(vals) if v.kind == "tuple" else list(vals)
    return v


def _call_method(obj, name, *args, **kwargs):
    """``obj.name(*args, **kwargs)``: a method with no rule, called as it is in the generated code."""
    return getattr(obj, name)(*args, **kwargs)


_METHOD_MARKERS: dict = {}


def _method_marker(name):
    """What a refusal names for ``.name()`` (the method has no derivative rule)."""
    m = _METHOD_MARKERS.get(name)
    if m is None:
        def m():  # pragma: no cover - never called
            pass
        m.__name__ = m.__qualname__ = f"the method .{name}()"
        m.__module__ = "builtins"
        _METHOD_MARKERS[name] = m
    return m


class _Unknown:
    """A value only known when the function runs, inside a probe (comparing it raises TypeError)."""

    def __lt__(self, other):
        raise TypeError("a runtime value")

    __gt__ = __le__ = __ge__ = __lt__


def _probe(v):
    """A value as a Python object for a sort key: constants themselves, runtime values unknowns."""
    if isinstance(v, Static):
        return v.obj
    if isinstance(v, Struct):
        vals = [_probe(x) for x in v.values()]
        return dict(zip(v.items.keys(), vals)) if v.kind == "dict" else (
            v.cls(*vals) if v.kind == "namedtuple" else tuple(vals) if v.kind == "tuple" else list(vals))
    return _Unknown()


_LOCAL_FUNCTIONS: dict = {}


def _local_as_function(lf, scope):
    """``(F, extras)``: the nested def or lambda ``lf`` as a real Python function (its source in linecache),
    with the enclosing function's values it reads (runtime values) as leading parameters, and those values;
    None for signatures other than plain positional parameters, or when it reads an enclosing local function."""
    fdef = lf.node
    a = fdef.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.defaults or a.posonlyargs:
        return None
    params = [x.arg for x in a.args]
    loaded = {n.id for n in ast_walk(fdef) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    stored = {n.id for n in ast_walk(fdef) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    stored |= {n.name for n in ast_walk(fdef) if isinstance(n, (ast.FunctionDef, ast.Lambda)) and n is not fdef
               and hasattr(n, "name")}
    env, extras, key = {}, [], [id(fdef)]
    for name in sorted(loaded - set(params) - stored):
        s, v = lf.scope, MISSING
        while s is not None:
            if name in s.vars:
                v = s.vars[name]
                break
            s = s.parent
        if v is MISSING:
            obj = lf.parsed.lookup(name)
            if obj is not MISSING:
                env[name] = obj
                key.append((name, id(obj)))
        elif isinstance(v, Static):
            env[name] = v.obj
            key.append((name, id(v.obj)))
        elif isinstance(v, (Dyn, Struct)):
            extras.append((name, v))
            key.append(name)
        else:
            return None
    key = tuple(key)
    hit = _LOCAL_FUNCTIONS.get(key)
    # the key holds ids: the entry keeps the definition alive and must be this one (a definition freed with
    # its function, its id reused by another program's lambda reading the same globals, got the first one's)
    F = hit[1] if hit is not None and hit[0] is fdef else None
    if F is None:
        name = fdef.name if fdef.name.isidentifier() else "_lambda"
        new = ast.FunctionDef(name=name, args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=n) for n, _ in extras]
                                                            + list(a.args), kwonlyargs=[], kw_defaults=[],
                                                            defaults=[]),
                              body=fdef.body, decorator_list=[], returns=None, type_params=[])
        src = ast.unparse(ast.fix_missing_locations(ast.Module(body=[new], type_ignores=[]))) + "\n"
        filename = f"<funcgrad local function {name} #{len(_LOCAL_FUNCTIONS) + 1}>"
        linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
        ns = dict(lf.parsed.globals)
        ns.update(env)
        exec(compile(src, filename, "exec"), ns)
        F = ns[name]
        _LOCAL_FUNCTIONS[key] = (fdef, F)
    return F, [v for _, v in extras]

class StaticArgumentNeeded(Exception):
    """Not an error: an int or bool argument leaf (the ``position``-th runtime leaf of the arguments, in
    flatten order) is used where generated code needs a constant. The transform rebuilds with that leaf
    as part of the signature (its value becomes a specialization key)."""

    def __init__(self, position):
        super().__init__(position)
        self.position = position


def _probe_value(sp, n):
    """An example value of spec ``sp`` whose arrays have every dimension ``n`` (0.5 in every entry)."""
    tag = sp[0]
    if tag == "const":
        return sp[1]
    if tag == "a":
        return np.full((n,) * sp[2], 0.5).astype(sp[1]) if np.dtype(sp[1]).kind != "b" else np.ones((n,) * sp[2], bool)
    if tag in ("e", "s"):
        return np.dtype(sp[1]).type(0.5) if np.dtype(sp[1]).kind in "fc" else np.dtype(sp[1]).type(1)
    return {"f": 0.5, "i": 1, "b": True, "c": 0.5 + 0j}[tag]


def _is_int_spec(sp):
    """Whether a leaf spec is an integer scalar (a Python int, or an integer NumPy scalar or array element)."""
    return sp is not None and (sp[0] == "i" or sp[0] in ("e", "s") and np.dtype(sp[1]).kind in "iu")


def _is_shape(e):
    return isinstance(e, ast.Attribute) and e.attr == "shape" or (
        isinstance(e, ast.Subscript) and isinstance(e.slice, ast.Slice) and _is_shape(e.value))


def _list_grown_at_run_time(built):
    """``(the user's file:line, "'name' ")`` of an append to a list grown at run time in the code ``built`` (its
    rows promoted with ``list_promote`` before each append), or ``()``."""
    try:
        tree = ast.parse(built.source)
    except (SyntaxError, TypeError, ValueError):
        return ()
    for n in ast_walk(tree):
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Attribute) \
                and n.value.func.attr == "list_promote" and isinstance(n.targets[0], ast.Name):
            fl = (built.line_map or {}).get(n.lineno)
            where = f"{fl[0]}:{fl[1]}" if fl else "a line of the function"
            grown = re.search(r"(\w+)\s*\.\s*(?:append|extend)\b|(\w+)\s*\+=", linecache.getline(*fl) if fl else "")
            name = (grown.group(1) or grown.group(2)) if grown else ""
            return where, (f"'{name}' " if name.isidentifier() else "")
    return ()


class Calls:
    # ------------------------------------------------------------ calls
    def call(self, node, scope, out):
        P = scope.parsed
        fval = self.expr(node.func, scope, out)
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):  # f(*args): the elements of a container known now
                v = self.expr(a.value, scope, out)
                if isinstance(v, Dyn) and _is_shape(v.expr) and self.splat_ok(fval):
                    args.append(Splat(v.expr))   # rs.randn(*x.shape), x.reshape(*y.shape): passed on as it is
                    continue
                args.extend(self.static_items(v, a, scope))
            else:
                args.append(self.expr(a, scope, out))
        kwargs = {}
        for k in node.keywords:
            v = self.expr(k.value, scope, out)
            if k.arg is not None:
                kwargs[k.arg] = v
            elif isinstance(v, Struct) and v.kind == "dict":  # f(**kw)
                kwargs.update(v.items)
            elif isinstance(v, Static) and isinstance(v.obj, dict):
                kwargs.update({kk: Static(vv) for kk, vv in v.obj.items()})
            else:
                raise error(P, k.value, "'**' needs a dict known before the function runs", None)
        return self.call_value(fval, args, kwargs, scope, out, node)

    def splat_ok(self, fval):
        """Whether ``fval(*t.shape)`` can pass the runtime tuple on unexpanded: a call run as it is (a method of a
        library object, a library function with no rule) or ``reshape``/``transpose``, which take the tuple."""
        if isinstance(fval, _BoundMethod):
            return fval.name in ("reshape", "transpose") or _METHODS.get(fval.name) is None
        if not isinstance(fval, Static):
            return False
        fn = fval.obj
        try:
            if fn in _STATIC_BUILTINS or fn in _BUILTIN_MAP or fn in _NJIT_BUILTINS:
                return False
        except TypeError:   # unhashable
            return False
        return (callable(fn) and not isinstance(fn, (type, CustomVJPFunction)) and lookup(fn) is None
                and lowering_for(fn) is None and definition(fn) is None
                and not (isinstance(fn, types.FunctionType) and _is_user_code(fn)))

    def remat_call(self, fn, args, kwargs, scope, out, node):
        """A ``funcgrad.checkpoint`` helper: inlined as the body of a one-trip checkpointed loop (the reverse
        pass runs it untaped, and re-runs it taped just before its adjoint)."""
        if not (isinstance(fn.fun, types.FunctionType) and _is_user_code(fn.fun)):
            raise error(scope.parsed, node, "funcgrad.checkpoint needs a Python function funcgrad can read "
                                            f"(received {fn.fun!r})", "wrap your own helper function")
        body = []
        res = self.inline_function(fn.fun, args, kwargs, body, node, scope)

        def named(v):   # the results as names bound inside the loop
            if isinstance(v, Struct):
                items = ({k: named(x) for k, x in v.items.items()} if v.kind == "dict" else
                         [named(x) for x in v.items])
                return Struct(v.kind, items, v.cls)
            if isinstance(v, Dyn) and not isinstance(v.expr, (ast.Name, ast.Constant)):
                t = self.names.fresh("_remat")
                body.append(ast.copy_location(ast.Assign(targets=[ast.Name(t, ast.Store())], value=v.expr), node))
                return Dyn(ast.Name(t, ast.Load()))
            return v
        res = named(res)
        self.has_loops = True
        it = self.names.fresh("_once")
        loop = ast.copy_location(ast.For(target=ast.Name(it, ast.Store()), iter=ast.Call(
            func=ast.Name("range", ast.Load()), args=[ast.Constant(1)], keywords=[]), body=body or [ast.Pass()],
            orelse=[]), node)
        A.put(loop, A.CHECKPOINT, 1)
        out.append(loop)
        return res

    def call_value(self, fval, args, kwargs, scope, out, node):
        P = scope.parsed
        if isinstance(fval, _BoundMethod):
            return self.method(fval, args, kwargs, scope, out, node)
        if isinstance(fval, LocalFunction):
            return self.inline(fval.node, fval.parsed, fval.scope, args, kwargs, out, node, local_defaults=fval.defaults)
        if isinstance(fval, _DictView):
            return self.dict_method(fval, args, kwargs, scope, out, node)
        if isinstance(fval, RListPop):
            return self.runtime_pop(fval.rl, args, kwargs, scope, out, node)
        if isinstance(fval, _Partial):
            return self.call_value(fval.fn, list(fval.args) + list(args), {**fval.kwargs, **kwargs}, scope, out, node)
        if isinstance(fval, Static) and fval.obj is functools.partial and args:  # partial(f, x) made here
            return _Partial(args[0], list(args[1:]), dict(kwargs))
        if isinstance(fval, Obj):   # an object made inside the function, called: its class's __call__
            meth = inspect.getattr_static(fval.cls, "__call__", None)
            if not isinstance(meth, types.FunctionType):
                raise error(P, node, f"'{fval.cls.__name__}' object is not callable", None)
            return self.call_value(Static(meth), [fval] + list(args), kwargs, scope, out, node)
        if isinstance(fval, VSElement):   # f(x) of a differentiated object whose class's __call__ has a rule
            call = primitive_method(fval.cls, "__call__")
            if call is None:
                raise self.refuse_vspace(fval, scope, node, "calls")
            return self.custom_vjp_call(call, [fval] + list(args), kwargs, scope, out, node)
        if not isinstance(fval, Static):
            raise error(P, node, "only functions known when the function is transformed can be called",
                        "call a module-level function, a nested def, a lambda or a NumPy function")
        fn = fval.obj
        return self.call_object(fn, args, kwargs, scope, out, node)

    def dict_method(self, view, args, kwargs, scope, out, node):
        st = view.struct
        if view.attr in ("items", "keys", "values") and not args:
            return view
        if view.attr == "get" and args and isinstance(args[0], Static):
            return st.items.get(args[0].obj, args[1] if len(args) > 1 else Static(None))
        if view.attr == "_replace" and not args:
            fields = st.cls._fields
            vals = [kwargs.get(f, v) for f, v in zip(fields, st.items)]
            return Struct("namedtuple", vals, st.cls)
        raise error(scope.parsed, node, f"'.{view.attr}(...)' with these arguments is not supported", None)

    def call_object(self, fn, args, kwargs, scope, out, node):
        P = scope.parsed
        fn = unwrap_kernel(fn)   # generated code read back, from a backend whose kernels wrap the CPU's
        args, kwargs = _numpy_dtype_arguments(fn, args, kwargs)
        if getattr(fn, "__dict__", {}).get("_funcgrad_inline"):   # funcgrad.jvp/vjp inside: forward_mode inlines
            return fn._funcgrad_inline(self, args, kwargs, scope, out, node)
        fn = _AUTOGRAD_BUILTINS.get(fn, fn) if isinstance(fn, type) else fn  # funcgrad.builtins.tuple: tuple
        if isinstance(fn, Rematerialized):
            return self.remat_call(fn, args, kwargs, scope, out, node)
        if fn is checkpointed:   # (the test of a while loop is read by the loop: statements.checkpointed_test)
            raise error(scope.parsed, node, "funcgrad.checkpointed(cond) marks the test of a while loop to checkpoint",
                        "write 'while funcgrad.checkpointed(cond):'; elsewhere use bool(cond)")
        if fn is _call_method and len(args) >= 2 and isinstance(args[1], Static):   # generated code read again
            return self.method(_BoundMethod(args[0], args[1].obj, node), list(args[2:]), kwargs, scope, out, node)
        if fn in (operator.itemgetter, operator.attrgetter) and all(isinstance(a, Static) for a in args) and not kwargs:
            return Static(fn(*[a.obj for a in args]))   # a key function made in the function
        if getattr(fn, "__func__", None) is CustomVJPFunction.bwd_from_args:   # generated code read again
            cv = fn.__self__
            if cv.fwd is not None and all(isinstance(r, types.FunctionType) and _is_user_code(r)
                                          for r in (cv.fwd, cv.bwd)):
                return self.rule_pullback(cv, args, scope, out, node)
            raise error(P, node, f"{cv.kind} function '{cv._label}' has a VJP rule in Python only: a second "
                                 "derivative through it needs a forward-mode rule",
                        f"give it one with {cv._label}.defjvp(rule) (rule(primals, tangents) -> (out, tangent))",
                        cls=NoDerivativeError)
        if getattr(fn, "_funcgrad_static_call", False) and all(
                _all_static(a) for a in list(args) + list(kwargs.values())):
            # grad(f) written inside the function (argnums=(0, 1) included): the transform object, made now
            return Static(fn(*[_static_value(a) for a in args], **{k: _static_value(v) for k, v in kwargs.items()}))
        if getattr(fn, "_funcgrad_static_call", False) and args and isinstance(args[0], LocalFunction) and all(
                _all_static(a) for a in list(args[1:]) + list(kwargs.values())):
            made = self.grad_of_local(fn, args, kwargs, scope, node)
            if made is not None:
                return made
        if hasattr(fn, "transform_at") and not isinstance(fn, type):   # grad of grad (forward_mode's object)
            try:
                if hasattr(fn, "_bind"):   # every parameter of the innermost function, defaults included
                    args, kwargs = list(fn._bind(tuple(args), dict(kwargs))), {}
                t = fn.transform_at(self.example_args(fn, args, kwargs, scope, node))
            except (LookupError, TypeError):
                t = None
            if t is not None:
                nested = self.nested_gradient(t, args, kwargs, scope, out, node)
                if nested is not None:
                    return nested
        if getattr(type(fn), "_funcgrad_transform", False):  # funcgrad.jit(f)(x) inside: f(x)
            if fn.kind == "primal":
                return self.call_value(Static(fn.fn), args, kwargs, scope, out, node)
            nested = self.nested_gradient(fn, args, kwargs, scope, out, node)
            if nested is not None:
                return nested
            if getattr(fn, "has_aux", False):
                raise error(P, node, "a transform with has_aux=True called inside a function funcgrad transforms is "
                                     "not supported", "return the auxiliary value from the outer function, or "
                                     "call the transform outside", cls=UnsupportedSyntaxError)
            inner = getattr(getattr(fn, "fn", None), "__name__", None) or "f"
            raise error(P, node, f"'{inner}' here is a function returned by a funcgrad "
                                 "transform: inside a function funcgrad transforms, grad(f)(x) and "
                                 "value_and_grad(f)(x) are supported where x's kinds and ndims are known while "
                                 "transforming (arguments of the function, constants, containers of them), "
                                 "not vjp or a value computed inside", "pass the value as an argument, or compute "
                                 "the derivative outside", cls=UnsupportedSyntaxError)
        if isinstance(fn, types.BuiltinFunctionType) and fn in _OPERATOR_BINOPS and len(args) == 2 and not kwargs:
            return self.binop(_OPERATOR_BINOPS[fn](), args[0], args[1], scope, out, node)
        if isinstance(fn, types.BuiltinFunctionType) and fn in _OPERATOR_CMPS and len(args) == 2 and not kwargs:
            if all(isinstance(a, Static) for a in args):
                return Static(fn(args[0].obj, args[1].obj))
            return Dyn(ast.Compare(left=self.as_expr(args[0], scope, node), ops=[_OPERATOR_CMPS[fn]()],
                                   comparators=[self.as_expr(args[1], scope, node)]))
        if fn is operator.neg and len(args) == 1 and not kwargs:
            if isinstance(args[0], Static):
                return Static(-args[0].obj)
            return self.call_prim(lookup(np.negative), args, {}, scope, out, node)
        if isinstance(fn, functools.partial):  # partial(f, a, k=v)(b): f(a, b, k=v)
            fixed = [self.constant_value(v, scope, node) for v in fn.args]
            fixed_kw = {k: self.constant_value(v, scope, node) for k, v in fn.keywords.items()}
            return self.call_value(self.constant_value(fn.func, scope, node) if not isinstance(
                fn.func, (types.FunctionType, types.MethodType)) else Static(fn.func), fixed + list(args),
                {**fixed_kw, **kwargs}, scope, out, node)
        if isinstance(fn, types.MethodType) and isinstance(fn.__func__, CustomVJPFunction):
            # a method made a primitive (@primitive def __call__(self, x)): self is its first argument
            return self.custom_vjp_call(fn.__func__, [Static(fn.__self__)] + list(args), kwargs, scope, out, node)
        if not isinstance(fn, (type, CustomVJPFunction)) and isinstance(getattr(type(fn), "__call__", None),
                                                                         CustomVJPFunction):
            return self.custom_vjp_call(type(fn).__call__, [Static(fn)] + list(args), kwargs, scope, out, node)
        if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType) and \
                not isinstance(fn.__self__, types.ModuleType) and _is_user_code(fn.__func__):
            # a method of the user's own class: self is the instance, known now
            return self.inline_function(fn.__func__, [Static(fn.__self__)] + list(args), kwargs, out, node, scope)
        if not isinstance(fn, (type, types.FunctionType, types.BuiltinFunctionType, np.ufunc, types.MethodType)) \
                and isinstance(getattr(type(fn), "__call__", None), types.FunctionType) and \
                _is_user_code(type(fn).__call__) and not isinstance(fn, CustomVJPFunction):
            return self.inline_function(type(fn).__call__, [Static(fn)] + list(args), kwargs, out, node, scope)
        if has_runtime_list(list(args) + list(kwargs.values())) and not (
                isinstance(fn, types.FunctionType) and _is_user_code(fn)):
            done, args, kwargs = self.runtime_list_call(fn, args, kwargs, scope, out, node)
            if done is not None:
                return done
        static = self.static_builtin(fn, args, kwargs, scope, out, node)
        if static is not None:
            return static
        if (fn is min or fn is max) and len(args) > 2 and not kwargs:   # min(a, b, c): pairwise, left to right
            acc = args[0]
            for a in args[1:]:
                acc = self.call_object(fn, [acc, a], {}, scope, out, node)
            return acc
        fn = _BUILTIN_MAP.get(fn, fn) if isinstance(fn, types.BuiltinFunctionType) and len(args) != 1 or fn is abs else fn
        if isinstance(fn, CustomVJPFunction):
            return self.custom_vjp_call(fn, args, kwargs, scope, out, node)
        defn = definition(fn)
        if defn is not None:  # defined over primitives (np.linalg.eigh): inlined at this line
            return self.inline_definition(fn, defn, args, kwargs, scope, out, node)
        low = lowering_for(fn)
        if low is not None:   # a NumPy function that is other primitives in disguise (np.ravel, np.split...)
            if all(isinstance(a, Static) for a in list(args) + list(kwargs.values())):
                try:
                    return Static(fn(*[a.obj for a in args], **{k: v.obj for k, v in kwargs.items()}))
                except Exception:
                    pass
            r = lower_call(self, fn, low, args, kwargs, scope, out, node)
            if r is not NotImplemented:
                return r
        prim = lookup(fn)
        if prim is not None:
            if all(isinstance(a, Static) for a in list(args) + list(kwargs.values())) and prim.name != "stop_gradient":
                try:
                    return Static(fn(*[a.obj for a in args], **{k: v.obj for k, v in kwargs.items()}))
                except Exception:
                    pass
            if prim.name == "clip":
                return self.clip(prim, args, kwargs, scope, out, node)
            return self.call_prim(prim, args, kwargs, scope, out, node)
        if fn is slice and all(isinstance(a, Static) for a in args):
            return Static(slice(*[a.obj for a in args]))
        if fn is slice and 1 <= len(args) <= 3 and not kwargs and all(isinstance(a, (Static, Dyn)) for a in args):
            # slice(lo, hi) of runtime integers: kept as its three parts, written as lo:hi where it indexes
            parts = [Static(None), args[0], Static(None)] if len(args) == 1 else list(args) + [Static(None)] * (3 - len(args))
            return Struct("slice", parts)
        if fn is range or fn is checkpoint_range:
            seg = None
            if fn is checkpoint_range:
                extra = set(kwargs) - {"segment", "snapshots"}
                for key in ("segment", "snapshots"):
                    s_val = kwargs.get(key, Static(None))
                    if extra or not isinstance(s_val, Static) or not (s_val.obj is None or (
                            isinstance(s_val.obj, (int, np.integer)) and not isinstance(s_val.obj, bool)
                            and s_val.obj >= 1)):
                        raise error(scope.parsed, node, f"checkpoint_range(..., {key}=k) needs k a positive int known "
                                                        "when the function is transformed", None)
                seg = int(kwargs.get("segment", Static(None)).obj or 0)
                snaps = kwargs.get("snapshots", Static(None)).obj
                if snaps is not None:   # binomial: (trips per step, snapshots)
                    seg = (seg or 1, int(snaps))
            rargs = []
            for a in args:
                if isinstance(a, Static) and not isinstance(a.obj, (int, np.integer)):
                    raise TypeError(f"'{type(a.obj).__name__}' object cannot be interpreted as an integer")
                e = self.as_expr(a, scope, node)
                kind = self.param_kinds.get(e.id) if isinstance(e, ast.Name) else None
                if kind in ("f8", "f4"):
                    raise TypeError("'float' object cannot be interpreted as an integer")
                if not isinstance(e, ast.Constant) and kind not in ("i", "b") and not _is_metadata(e):
                    # range(5.7) raises in Python; Numba would truncate: check at run time
                    e = ast.Call(func=ast.Attribute(value=ast.Name("K", ast.Load()), attr="index_arg",
                                                    ctx=ast.Load()), args=[e], keywords=[])
                rargs.append(e)
            return _Range(rargs, seg)
        if fn is reversed and len(args) == 1 and not kwargs:
            a = args[0]
            if isinstance(a, _Range) and a.checkpoint is None:
                return self.reversed_range(a, scope, out, node)
            if isinstance(a, Struct) and a.kind in ("list", "tuple"):
                return Struct("tuple", list(reversed(a.values())))
            if isinstance(a, Dyn):   # an array: its rows, last first
                return self.call_prim(lookup_getitem(), [a, Static(slice(None, None, -1))], {}, scope, out, node)
        if fn is enumerate:
            if not args or len(args) > 2 or set(kwargs) - {"start"} or len(args) == 2 and kwargs:
                raise error(P, node, "enumerate() takes an iterable and a start", None)
            start = args[1] if len(args) == 2 else kwargs.get("start")
            return _Iter(fn, [args[0]], None if isinstance(start, Static) and start.obj == 0 else start)
        if fn is zip:
            return _Iter(fn, args)
        if fn is len:
            (a,) = args
            if isinstance(a, Struct):
                return Static(len(a.values()))
            if isinstance(a, Static):
                return Static(len(a.obj))
            if isinstance(a, _Range):
                return self.range_length(a, scope, out, node)
            return Dyn(ast.Subscript(value=ast.Attribute(value=self.as_expr(a, scope, node), attr="shape",
                                                         ctx=ast.Load()), slice=ast.Constant(0), ctx=ast.Load()))
        if fn in (np.float64, np.float32, np.float16, np.complex128, np.complex64) and len(args) == 1 and \
                not kwargs and isinstance(args[0], Dyn):   # np.float64(x): x cast (an array stays an array)
            return self.cast(args[0], Static(fn), False, scope, out, node)
        if fn in (float, int, bool):
            (a,) = args
            if isinstance(a, Static):
                return Static(fn(a.obj))
            if fn is float:
                e = a.expr if isinstance(a, Dyn) else None
                if isinstance(e, ast.Name) and self.param_kinds.get(e.id) == "f8":
                    return a
                # a float64, as Python's float(s) is: an int (s = 0 on the path taken) or a float32 comes back
                # widened; a float's value and derivative pass through
                return self.cast(a, Static(np.float64), False, scope, out, node)
            return Dyn(ast.Call(func=ast.Name(fn.__name__, ast.Load()), args=[self.as_expr(a, scope, node)],
                                keywords=[]))
        if fn is complex and not kwargs and 1 <= len(args) <= 2 and not any(isinstance(a, Static) and isinstance(
                a.obj, str) for a in args):   # complex(re, im) of computed numbers: re + im * 1j
            if all(isinstance(a, Static) for a in args):
                return Static(complex(*[a.obj for a in args]))
            re = self.cast(args[0], Static(np.complex128), False, scope, out, node) if isinstance(args[0], Dyn) \
                else Static(complex(args[0].obj))
            if len(args) == 1:
                return re
            return self.binop(ast.Add(), re, self.binop(ast.Mult(), args[1], Static(1j), scope, out, node), scope,
                              out, node)
        if fn in (tuple, list) and len(args) == 1 and isinstance(args[0], Struct):
            return Struct(fn.__name__, args[0].values())
        if fn is dict:
            return Struct("dict", dict(kwargs))
        if isinstance(fn, type) and issubclass(fn, tuple) and hasattr(fn, "_fields"):
            vals = list(args) + [kwargs[f] for f in fn._fields[len(args):] if f in kwargs]
            return Struct("namedtuple", vals, fn)
        if fn in (np.array, np.asarray, np.asanyarray, np.ascontiguousarray) and len(args) == 1 and \
                set(kwargs) <= {"dtype"}:
            a = args[0]
            dt = kwargs.get("dtype", Static(None))
            if isinstance(a, Struct) and all(isinstance(v, Static) for v in _leaves(a)) and isinstance(dt, Static):
                return Static(fn(_static_value(a), dtype=dt.obj))  # a constant array (index lists, coefficients)
            if not isinstance(dt, Static):
                raise error(P, node, f"np.{fn.__name__}(..., dtype=...) needs a dtype known before the function "
                                     "runs", "write the dtype itself (np.float64)")
            if isinstance(a, Struct):
                a = self.array_of(a, scope, out, node)
                if dt.obj is None:
                    return a
                return self.cast(a, dt, False, scope, out, node)
            if isinstance(a, Dyn):   # np.array copies (a later in-place write must not reach the original)
                if dt.obj is not None:
                    return self.cast(a, dt, fn is np.array, scope, out, node)
                return self.call_prim(lookup(np.copy), [a], {}, scope, out, node) if fn is np.array else a
        if getattr(fn, "_funcgrad_static_call", False):
            # grad(f, argnums=k) with k computed when the function runs: funcgrad's own code is not the user's
            name = getattr(fn, "__name__", "grad")
            raise error(P, node, f"funcgrad.{name}(...) inside a differentiated function needs the function and its "
                                 "options (argnums, mode, ...) known while transforming; here one is computed when "
                                 "the function runs", "write them as constants (argnums=1), or call "
                                 f"funcgrad.{name} outside the function", cls=UnsupportedSyntaxError)
        if isinstance(fn, types.FunctionType) and _is_user_code(fn):
            return self.inline_function(fn, args, kwargs, out, node, scope)
        # a call with no rule (np.zeros, math.lgamma, scipy.special.*, any installed library's routine,
        # a C extension): called as it is, never read; the reverse pass refuses it at this line if a
        # differentiated value flows into it
        if callable(fn) and (not isinstance(fn, type) or _is_library_class(fn) or fn is str):
            if not _numba_can_call(fn):
                self.opaque_calls = True  # whole-function Numba cannot call it: auto runs this function as Python
            fexpr = self.func_expr(fn)
            call = ast.Call(func=fexpr, args=[self.as_expr(a, scope, node) for a in args],
                            keywords=[ast.keyword(arg=k, value=self.as_expr(v, scope, node)) for k, v in kwargs.items()])
            ast.copy_location(call, node)
            A.put(call, A.NONDIFF, fn)
            A.put(call, A.SRC, (P.filename, getattr(node, "lineno", None)))
            return Dyn(call)
        if fn is super and not kwargs:   # super() in a method of an object made inside the function
            return self.super_of(args, scope, node)
        if isinstance(fn, type) and _user_class(fn):
            return self.new_object(fn, args, kwargs, scope, out, node)
        if isinstance(fn, type):
            raise error(P, node, f"creating a '{public_name(fn)}' object inside a differentiated function is not "
                                 "supported", "create it outside and pass it in, or use a tuple, dict or NamedTuple",
                        cls=UnsupportedSyntaxError)
        raise error(P, node, f"'{public_name(fn)}' is not callable", None, cls=UnsupportedSyntaxError)

    def new_object(self, cls, args, kwargs, scope, out, node):
        """``Cls(...)`` of the user's own class: an :class:`Obj` whose attributes its ``__init__`` sets (inlined
        with the object as ``self``), or a dataclass's generated ``__init__``: its fields from the arguments and
        defaults, then ``__post_init__``."""
        P = scope.parsed
        marks = getattr(self, "_cf_scope_mark", None)
        obj = Obj(cls, {}, marks[-1] if getattr(self, "cf_depth", 0) and marks else None)
        init = cls.__init__
        if init is object.__init__:
            if args or kwargs:
                raise error(P, node, f"{cls.__name__}() takes no arguments", None)
            return obj
        if dataclasses.is_dataclass(cls) and (not _is_user_code(init) or init.__code__.co_filename.startswith("<")):
            fields = [f for f in dataclasses.fields(cls) if f.init]
            if len(args) > len(fields):
                raise error(P, node, f"{cls.__name__}() takes {len(fields)} positional arguments but {len(args)} "
                                     "were given", None)
            given = dict(zip([f.name for f in fields], args))
            for k, v in kwargs.items():
                if k in given or k not in {f.name for f in fields}:
                    raise error(P, node, f"{cls.__name__}() got {'multiple values for' if k in given else 'an unexpected keyword'} argument '{k}'", None)
                given[k] = v
            for f in fields:
                if f.name in given:
                    v = given[f.name]
                elif f.default is not dataclasses.MISSING:
                    v = self.constant_value(f.default, scope, node)
                elif f.default_factory in (list, dict, tuple):
                    v = Struct(f.default_factory.__name__, {} if f.default_factory is dict else [])
                elif f.default_factory is not dataclasses.MISSING:
                    raise error(P, node, f"the default_factory of field '{f.name}' of {cls.__name__} is not "
                                         "supported here (list, dict and tuple are)", "pass the field's value")
                else:
                    raise error(P, node, f"{cls.__name__}() missing required argument '{f.name}'", None)
                self.set_attribute(obj, f.name, v, scope, out, node, init=True)
            post = inspect.getattr_static(cls, "__post_init__", None)
            if isinstance(post, types.FunctionType) and _is_user_code(post):
                self.inline_function(post, [obj], {}, out, node, scope)
            return obj
        if isinstance(init, types.FunctionType) and _is_user_code(init):
            self.inline_function(init, [obj] + list(args), kwargs, out, node, scope)
            return obj
        raise error(P, node, f"creating a '{public_name(cls)}' object inside a differentiated function is not "
                             "supported (its __init__ is not Python code funcgrad can read)",
                    "create it outside and pass it in, or use a tuple, dict or NamedTuple")

    def super_of(self, args, scope, node):
        """``super()`` (or ``super(Cls, self)``) in a method of an object made inside the function: the object
        seen from the class after the method's own in its class's method resolution order."""
        P = scope.parsed
        if len(args) == 2 and isinstance(args[0], Static) and isinstance(args[1], Obj):
            start, obj = args[0].obj, args[1]
        elif not args and scope.fdef is not None and (scope.fdef.args.posonlyargs + scope.fdef.args.args):
            obj = scope.vars.get((scope.fdef.args.posonlyargs + scope.fdef.args.args)[0].arg)   # (self)
            code = self.inline_stack[-1] if self.inline_stack else None
            start = next((c for c in getattr(getattr(obj, "cls", None), "__mro__", ()) if any(
                getattr(getattr(v, "__func__", v), "__code__", None) is code for v in vars(c).values())), None)
        else:
            obj = start = None
        if not isinstance(obj, Obj) or start is None or start not in obj.cls.__mro__:
            raise error(P, node, "super() is supported in a method of an object made inside the function", None)
        return Obj(obj.cls, obj.attrs, obj.cf_mark, after=start, of=obj)

    def set_attribute(self, obj, attr, val, scope, out, node, init=False):
        """``obj.attr = val`` of an object made inside the function (its attribute now holds ``val``). Inside a
        loop or branch that runs at run time, only of an object made inside it."""
        P = scope.parsed
        params = getattr(obj.cls, "__dataclass_params__", None)
        if params is not None and params.frozen and not init:
            raise error(P, node, f"cannot assign to field '{attr}' of a frozen dataclass "
                                 f"({obj.cls.__name__}): Python raises FrozenInstanceError", None)
        marks = getattr(self, "_cf_scope_mark", None)
        if getattr(self, "cf_depth", 0) and (not marks or obj.cf_mark != marks[-1]):
            raise error(P, node, f"setting an attribute of a '{obj.cls.__name__}' object inside a loop or branch "
                                 "that runs at run time is supported only for an object made inside it",
                        "make the object inside the loop or branch, or keep the changing value in a variable")
        obj.attrs[attr] = self.held(val, scope, out, node)

    def reversed_range(self, rng, scope, out, node):
        """``reversed(range(start, stop, step))`` as the range it iterates: ``range(stop - 1, start - 1, -1)``
        for step 1 (empty when ``stop <= start``, as the original is), ``range(stop + 1, start + 1)`` for
        step -1, else from the first item ``start + (len - 1) * step`` down to ``start - step``."""
        vals = [Static(e.value) if isinstance(e, ast.Constant) else Dyn(e) for e in rng.args]
        start, stop = (Static(0), vals[0]) if len(vals) == 1 else (vals[0], vals[1])
        step = vals[2] if len(vals) == 3 else Static(1)
        if not isinstance(step, Static) or not isinstance(step.obj, (int, np.integer)) or step.obj == 0:
            raise error(scope.parsed, node, "reversed() of a range whose step is computed when the function runs "
                                            "is not supported", "use a constant step",
                        cls=UnsupportedSyntaxError)
        s = int(step.obj)
        if s == 1:
            first, end = self.binop(ast.Sub(), stop, Static(1), scope, out, node), \
                self.binop(ast.Sub(), start, Static(1), scope, out, node)
        elif s == -1:
            first, end = self.binop(ast.Add(), stop, Static(1), scope, out, node), \
                self.binop(ast.Add(), start, Static(1), scope, out, node)
        else:
            n = self.range_length(rng, scope, out, node)
            last = self.binop(ast.Mult(), self.binop(ast.Sub(), n, Static(1), scope, out, node), Static(s),
                              scope, out, node)
            first = self.binop(ast.Add(), start, last, scope, out, node)
            end = self.binop(ast.Sub(), start, Static(s), scope, out, node)
        return _Range([self.as_expr(first, scope, node), self.as_expr(end, scope, node), ast.Constant(-s)])

    def range_length(self, rng, scope, out, node):
        """``len(range(...))`` of bounds known when the function runs: ``max(stop - start, 0)``, or with a
        constant step ``s``, ``max((stop - start + s - 1) // s, 0)`` (``s < 0`` mirrored). Generated loop code
        sizes its tapes this way, so this is what lets a gradient with loops be read back and differentiated."""
        vals = [Static(e.value) if isinstance(e, ast.Constant) else Dyn(e) for e in rng.args]
        if all(isinstance(v, Static) for v in vals):
            return Static(len(range(*[v.obj for v in vals])))
        start, stop = (Static(0), vals[0]) if len(vals) == 1 else (vals[0], vals[1])
        step = vals[2] if len(vals) == 3 else Static(1)
        if not isinstance(step, Static) or not isinstance(step.obj, (int, np.integer)) or step.obj == 0:
            raise error(scope.parsed, node, "len() of a range whose step is computed when the function runs is not "
                                            "supported", "use a constant step", cls=UnsupportedSyntaxError)
        s = int(step.obj)
        hi, lo = (stop, start) if s > 0 else (start, stop)
        span = self.binop(ast.Sub(), hi, lo, scope, out, node) if not (isinstance(lo, Static) and lo.obj == 0) else hi
        if abs(s) != 1:
            span = self.binop(ast.FloorDiv(), self.binop(ast.Add(), span, Static(abs(s) - 1), scope, out, node),
                              Static(abs(s)), scope, out, node)
        return self.call_object(max, [span, Static(0)], {}, scope, out, node)

    def array_of(self, a, scope, out, node):
        """``np.array([...])`` of a (nested) list whose entries are computed: a stack of stacks."""
        if all(isinstance(v, Static) for v in _leaves(a)):
            return Static(np.array(_static_value(a)))
        items = [self.array_of(v, scope, out, node) if isinstance(v, Struct) else v for v in a.values()]
        return self.call_prim(lookup(np.stack), [Struct("tuple", items)], {}, scope, out, node)

    def _static_captures(self, v):
        """:meth:`as_static_capture` of ``v`` and of the entries of a tuple written at the call."""
        if isinstance(v, Struct) and v.kind == "tuple":
            items = [self._static_captures(x) for x in v.items]
            return v if all(a is b for a, b in zip(items, v.items)) else Struct("tuple", items, v.cls)
        return self.as_static_capture(v)

    def inline_definition(self, fn, defn, args, kwargs, scope, out, node):
        """A call of a function defined over primitives (``ops.registry.define``): refused by the
        definition's check, or inlined with its statements and errors placed at the caller's line."""
        P = scope.parsed
        name = getattr(fn, "__name__", "this function")

        def known(v):
            if isinstance(v, Struct) and all(isinstance(x, Static) for x in _leaves(v)):
                return _static_value(v)
            return v.obj if isinstance(v, Static) else RUNTIME

        # a captured int (an axis in a closure, a global band width in ``(l, u)``) is a definition's static
        # configuration: its value now
        args = [self._static_captures(a) for a in args]
        kwargs = {k: self._static_captures(v) for k, v in kwargs.items()}
        try:
            inspect.signature(defn.fn).bind(*args, **kwargs)
        except TypeError as e:
            raise error(P, node, f"bad arguments to {name}: {e}", None) from None
        why = defn.check and defn.check(*[known(a) for a in args], **{k: known(v) for k, v in kwargs.items()})
        if why:
            raise error(P, node, why[0], why[1])
        start = len(out)
        try:
            res = self.inline_function(defn.fn, args, kwargs, out, node, scope)
        except UnsupportedSyntaxError as e:
            if getattr(defn.fn, "kernel_name", None):   # a helper kernel of a derivative, in code read back: named
                # as the functions the user called whose rules use it (np.einsum, not einsum_vjp)
                prim = lookup(fn)
                users = users_calling(prim, P.line_text(getattr(node, "lineno", None))) if prim is not None else []
                name = " / ".join(users) or "the derivative of this line"
            raise error(P, node, f"{name}: {e.msg.split(chr(10))[0]}", e.hint) from None
        where = (P.filename, getattr(node, "lineno", None))
        for n in [n for st in out[start:] for n in ast_walk(st)] + [
                n for v in _leaves(res) if isinstance(v, Dyn) for n in ast_walk(v.expr)]:
            if hasattr(n, "lineno"):
                ast.copy_location(n, node)
            if isinstance(n, ast.stmt):
                A.put(n, A.FILE, P.filename)
            if A.has(n, A.SRC):
                A.put(n, A.SRC, where)
        return res

    def example_args(self, fn, args, kwargs, scope, node):
        """Values with the specs of the call's arguments (bound to ``fn``'s parameters), for building a nested
        transform's signature; LookupError where a spec is not known here."""
        bound = fn._bind(tuple(args), dict(kwargs)) if hasattr(fn, "_bind") else tuple(args)
        bound = [a if isinstance(a, (Dyn, Static, Struct)) else self.constant_value(a, scope, node) for a in bound]
        return tuple(tree_map(self._example_leaf, _value_tree(a)) for a in bound)

    def grad_of_local(self, fn, args, kwargs, scope, node):
        """``grad(g)`` of a function ``g`` defined inside the function being transformed: ``g`` as a real
        function (closure conversion: the enclosing function's values it reads become leading parameters),
        and the transform of it, called with those values first. None where ``g`` cannot be converted."""
        conv = _local_as_function(args[0], scope)
        if conv is None:
            return None
        F, extras = conv
        k = len(extras)
        kw = {kk: _static_value(v) for kk, v in kwargs.items()}
        pos = [_static_value(a) for a in args[1:]]
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            params = {}
        # the maker's own spelling (jacobian and elementwise_grad say argnum, grad says argnums; jit has none):
        # the numbers move past the captured values F now takes first
        key = next((n for n in ("argnums", "argnum") if n in params), None)
        if key is not None:
            second = list(params)[1] == key if len(params) > 1 else False
            nums = pos[0] if pos and second else kw.get(key, params[key].default)
            nums = nums + k if isinstance(nums, int) else tuple(i + k for i in nums)
            if pos and second:
                pos[0] = nums
            else:
                kw[key] = nums
        return _Partial(Static(fn(F, *pos, **kw)), list(extras), {})

    def _spec_of(self, e):
        """The leaf spec of expression ``e`` where it is known now: an argument's, or ``("a", dtype, ndim)`` /
        ``("e", dtype)`` of an array argument indexed by integer constants, or of a value computed from those by
        primitives (:meth:`infer_spec`); else None."""
        if isinstance(e, ast.Name):
            sp = self.param_specs.get(e.id)
            return sp if sp is not None else getattr(self, "value_specs", {}).get(e.id)
        prim = A.get(e, A.PRIM, None) if isinstance(e, ast.Call) else None
        if prim is not None and prim is not lookup_getitem():
            return self.infer_spec(e)
        if prim is None or prim is not lookup_getitem() or len(e.args) != 2:
            return None
        base = self._spec_of(e.args[0])
        idx = e.args[1].elts if isinstance(e.args[1], ast.Tuple) else [e.args[1]]
        if base is None or base[0] != "a":
            return None
        rank, used = base[2], 0
        for i in idx:   # integers drop an axis, slices (of any bounds) keep one, None adds one
            if isinstance(i, ast.Constant) and type(i.value) is int:
                rank, used = rank - 1, used + 1
            elif isinstance(i, ast.Slice):
                used += 1
            elif isinstance(i, ast.Constant) and i.value is None:
                rank += 1
            elif isinstance(i, ast.Name) and _is_int_spec(self._spec_of(i)):   # x[k] with k an integer
                rank, used = rank - 1, used + 1
            else:
                return None
        if used > base[2]:
            return None
        return ("a", base[1], rank) if rank else ("e", base[1])

    def infer_spec(self, e):
        """The spec of a primitive call ``e`` whose arguments' specs are known (``np.sum(x) / np.sum(r + x)``): the
        primitive run on small example arguments of two sizes; None where the results' specs differ (an ndim or
        dtype that depends on sizes), an argument is not known, or the primitive fails on the examples."""
        prim = A.get(e, A.PRIM, None) if isinstance(e, ast.Call) else None
        budget = getattr(self, "_spec_budget", 400)
        if prim is None or budget <= 0:
            return None
        self._spec_budget = budget - 1
        arg_specs = []
        for a in list(e.args) + [k.value for k in e.keywords]:
            if isinstance(a, (ast.Constant, ast.Tuple)):
                try:
                    arg_specs.append(("const", ast.literal_eval(a)))
                    continue
                except ValueError:
                    return None
            sp = self._spec_of(a)
            if sp is None or sp[0] == "static":
                return None
            arg_specs.append(sp)
        got = []
        for n in (2, 3):
            ex = [_probe_value(sp, n) for sp in arg_specs]
            pos, kw = ex[:len(e.args)], dict(zip([k.arg for k in e.keywords], ex[len(e.args):]))
            try:
                with np.errstate(all="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    r = prim.impl(*pos, **kw)
            except Exception:
                return None
            got.append(leaf_spec(r) if isinstance(r, (np.ndarray, np.generic, float, int, complex)) else None)
        return got[0] if got[0] is not None and got[0] == got[1] else None

    def remember_spec(self, outname, expr):
        """``outname = expr`` outside loops and branches: the spec of the value, where it can be inferred, for a
        ``grad(f)(value)`` later in the function (a name rebound inside a loop or branch forgets it)."""
        specs = self.__dict__.setdefault("value_specs", {})
        if getattr(self, "cf_depth", 0):
            specs.pop(outname, None)
            return
        sp = self._spec_of(expr) if isinstance(expr, (ast.Call, ast.Name)) else None
        if sp is None:
            specs.pop(outname, None)
        else:
            specs[outname] = sp

    def nested_gradient(self, fn, args, kwargs, scope, out, node):
        """``grad(f)(x)`` (or ``value_and_grad``) inside a transformed function, where the signature of ``x`` is
        known (arguments of the function and constants): the reverse-mode code funcgrad generates for ``f`` at
        that signature, inlined as a call of its Python function. That code is primitives with rules, so the
        outer transform differentiates it again (forward or reverse over reverse). None when ``x``'s signature
        is not known here (the caller refuses)."""
        if not hasattr(fn, "return_value") or fn.has_aux:
            return None
        try:
            bound = fn._bind(tuple(args), dict(kwargs))
        except TypeError:
            return None
        bound = [a if isinstance(a, (Dyn, Static, Struct)) else self.constant_value(a, scope, node) for a in bound]
        trees = [_value_tree(a) for a in bound]
        try:
            examples = tuple(tree_map(self._example_leaf, t) for t in trees)
        except LookupError:
            return None
        built, single, nums, flat, tdefs, cap, key = fn._lookup(examples)
        call = []
        for t, (_, specs, _) in zip(trees, key):
            for v, sp in zip(tree_flatten(t)[0], specs):
                if sp[0] != "static":
                    call.append(v)
        call += [Static(c) for c in cap]
        call += [Static(1.0)] + [Static(0.0)] * (len(built.out_atoms) - 1)
        self.refuse_ragged_tapes(built, scope, node)
        try:
            res = self.inline_function(built.py_fn, call, {}, out, node, scope)
        except FuncgradError as e:   # a refusal inside the generated code: reported at the user's call of it
            if getattr(e, "filename", None) == scope.parsed.filename:
                raise
            if getattr(fn, "checkpoint_loops", None) is not None:
                # a loop it checkpoints: segments re-run from snapshots, its tape cut back by a while loop of
                # pops, which is not read back
                raise error(scope.parsed, node, "differentiating this gradient again: a gradient that checkpoints "
                                                "its loops (checkpoint_loops) cannot be differentiated again",
                            "take the inner gradient without checkpoint_loops (the outer transform can checkpoint)",
                            cls=UnsupportedSyntaxError) from None
            text = str(getattr(e, "msg", None) or e)
            hint = getattr(e, "hint", None) or (text.split("\n  hint: ", 1)[1].split("\n")[0]
                                                if "\n  hint: " in text else None)
            first = text.split("\n")[0]
            first = first.split(": ", 1)[1] if first.startswith(("<", "/")) and ": " in first else first
            raise error(scope.parsed, node, f"differentiating this gradient again: {first}", hint,
                        cls=NoDerivativeError if isinstance(e, NoDerivativeError) else UnsupportedSyntaxError) from None
        outs, grads = res.values()
        grads = grads.values()
        result, k = [], 0
        for i in nums:
            n = len(flat[i])
            result.append(_map_struct(tree_unflatten(tdefs[i], grads[k:k + n]), lambda path, leaf: leaf))
            k += n
        g = result[0] if single else Struct("tuple", result)
        return Struct("tuple", [outs.values()[0], g]) if fn.return_value else g

    def refuse_ragged_tapes(self, built, scope, node):
        """Refuse, at the user's call, reading back reverse-mode code that tapes a list grown at run time: the list
        is the rows of a buffer that doubles as it grows, and the tape of that buffer holds arrays of changing
        length, which a list read back (rows of one buffer itself) cannot hold."""
        found = built.__dict__.get("_ragged_tape")
        if found is None:
            found = built.__dict__["_ragged_tape"] = _list_grown_at_run_time(built)
        if found:
            where, name = found
            raise error(scope.parsed, node, f"differentiating this gradient again: the list {name}appended to at "
                                            f"{where} grows while the function runs (in a loop or a branch on "
                                            "values), and the gradient's record of it cannot be differentiated again",
                        "collect the values in an array instead (y = np.zeros(n) before the loop, y[i] = ... in it)",
                        cls=UnsupportedSyntaxError)

    def _example_leaf(self, v):
        """A value with the spec of the value ``v`` (for building a nested transform's signature): an argument
        or a constant, or an argument indexed by integers (``x[1]``: its ndim less one per index)."""
        if isinstance(v, Static):
            return v.obj
        spec = self._spec_of(v.expr) if isinstance(v, Dyn) else None
        if spec is None:
            raise LookupError(v)
        tag = spec[0]
        if tag == "a":
            return np.zeros((1,) * spec[2], dtype=spec[1])
        if tag == "e":   # an element of an array argument: a NumPy scalar
            return np.dtype(spec[1]).type(0)
        if tag == "s":
            return np.dtype(spec[1]).type(0)
        return {"f": 0.0, "i": 0, "b": False, "c": 0j}[tag]

    def sorted_items(self, items, kwargs, node, scope):
        """``sorted(items, key=..., reverse=...)`` of items known now; the key may read only what is known now
        (``sorted(d.items(), key=operator.itemgetter(0))``: the keys)."""
        key = kwargs.get("key", Static(None)).obj
        rev = bool(kwargs.get("reverse", Static(False)).obj)
        probes = [_probe(v) for v in items]
        try:
            order = sorted(range(len(items)), key=(lambda i: probes[i]) if key is None else (lambda i: key(probes[i])),
                           reverse=rev)
        except TypeError:
            raise error(scope.parsed, node, "sorted() by values computed when the function runs is not supported",
                        "sort by keys or constants") from None
        return Struct("list", [items[i] for i in order])

    def sorted_runtime(self, items, kwargs, scope, out, node):
        """``sorted(seq, key=..., reverse=...)`` of a list or tuple written in the code whose items (or keys) are
        computed when the function runs: an odd-even transposition network (each item is picked by the comparison
        of two keys, so derivatives follow the items to their places). It swaps only on a strict comparison, so
        items with equal keys keep their order: Python's sort is stable, with ``reverse=True`` too."""
        key = kwargs.get("key", Static(None))
        rev = bool(kwargs["reverse"].obj) if "reverse" in kwargs else False
        items = list(items)
        if all(isinstance(v, Static) for v in items) and isinstance(key, Static):
            return self.sorted_items(items, kwargs, node, scope)
        if len(items) > 32:
            raise error(scope.parsed, node, f"sorted() of {len(items)} values computed when the function runs is not "
                                            "supported (up to 32)", "stack them into an array and use np.sort")
        keys = items if isinstance(key, Static) and key.obj is None else [
            self.call_value(key, [v], {}, scope, out, node) for v in items]
        seqs = [items] if keys is items else [items, keys]

        def exchange(i, swap):   # items i and i + 1 (and their keys) swapped where ``swap`` holds
            for seq in seqs:
                if isinstance(swap, Static):
                    if swap.obj:
                        seq[i], seq[i + 1] = seq[i + 1], seq[i]
                    continue
                seq[i], seq[i + 1] = (self.call_prim(lookup(pick), [swap, seq[i + 1], seq[i]], {}, scope, out, node),
                                      self.call_prim(lookup(pick), [swap, seq[i], seq[i + 1]], {}, scope, out, node))

        n = len(items)
        for p in range(n):
            for i in range(p % 2, n - 1, 2):
                a, b = (keys[i + 1], keys[i]) if rev else (keys[i], keys[i + 1])
                swap = self.call_object(operator.gt, [a, b], {}, scope, out, node)
                exchange(i, swap if isinstance(swap, Static) else self.snapshot(swap, scope, out, node))
        return Struct("list", items)

    def constant_value(self, v, scope, node):
        """A Python object fixed in a partial or a default, as a value."""
        if isinstance(v, np.ndarray) or isinstance(v, (float, int)) and not isinstance(v, bool):
            return Static(v)
        if isinstance(v, (tuple, list, dict)) and not _is_static_tree(v):
            return _map_struct(v, lambda path, leaf: Static(leaf))
        return Static(v)

    def static_builtin(self, fn, args, kwargs, scope, out, node):
        """Builtins applied to values known now (``isinstance(cfg, dict)``, ``sum(list)``, ``map(f, xs)``)."""
        P = scope.parsed
        allv = list(args) + list(kwargs.values())
        if fn in (isinstance, type) and args:
            subject = args[0]
            rank = self.param_ranks.get(subject.expr.id) if isinstance(subject, Dyn) and isinstance(
                subject.expr, ast.Name) else None
            # the class the value has, known now: an object made here, a container, an array argument (its
            # ndim is in the signature)
            rep = subject.cls if isinstance(subject, Obj) else {"dict": dict, "list": list, "tuple": tuple}.get(
                subject.kind, subject.cls) if isinstance(subject, Struct) else np.ndarray if rank else None
            if rep is None and isinstance(subject, Dyn):   # a number whose kind the signature fixes
                rep = _class_of_spec(self._spec_of(subject.expr))
            if rep is not None:
                if fn is type:
                    return Static(rep)
                cls = args[1] if len(args) > 1 else None
                if isinstance(cls, Struct) and all(isinstance(v, Static) for v in _leaves(cls)):
                    cls = Static(_static_value(cls))   # a tuple of classes passed as an argument
                if isinstance(cls, Static):
                    return Static(issubclass(rep, cls.obj))
            if isinstance(subject, Dyn):
                raise error(P, node, f"{fn.__name__}() of a value computed when the function runs is not "
                                     "supported (arrays and numbers are only known then)",
                            "decide on types outside the differentiated function, or pass a flag")
        if fn in (sorted, reversed, len, list, tuple, any, all) and len(args) == 1 and (isinstance(
                args[0], (_DictView, _Iter)) or isinstance(args[0], Struct) and args[0].kind == "dict"):
            items = self.static_items(args[0], node, scope)   # of a dict: its keys
            if fn is len:
                return Static(len(items))
            if fn is sorted and set(kwargs) <= {"key", "reverse"} and all(
                    isinstance(v, Static) for v in kwargs.values()):
                return self.sorted_items(items, kwargs, node, scope)
            if fn in (sorted, any, all):
                if not all(isinstance(v, Static) for v in items):
                    raise error(P, node, f"{fn.__name__}() of values computed when the function runs is not "
                                         "supported", None)
                return Static(fn(v.obj for v in items))
            return Struct("tuple" if fn is tuple else "list", list(reversed(items)) if fn is reversed else items)
        if fn in _STATIC_BUILTINS and all(isinstance(a, Static) for a in allv):
            return Static(fn(*[a.obj for a in args], **{k: v.obj for k, v in kwargs.items()}))
        if fn is sum and args and isinstance(args[0], (Struct, _DictView, _Iter)):
            items = self.static_items(args[0], node, scope)
            acc = args[1] if len(args) > 1 else kwargs.get("start", Static(0))
            for v in items:
                acc = self.binop_value(np.add, acc, v, scope, out, node)
            return acc
        if fn is sum and args and isinstance(args[0], Dyn) and set(kwargs) <= {"start"}:
            # sum(array): Python adds the array's rows, NumPy's sum along axis 0
            acc = self.call_prim(lookup(np.sum), [args[0]], {"axis": Static(0)}, scope, out, node)
            start = args[1] if len(args) > 1 else kwargs.get("start", Static(0))
            return self.binop_value(np.add, start, acc, scope, out, node)
        if fn in (max, min) and len(args) == 1 and isinstance(args[0], Struct) and set(kwargs) <= {"default"}:
            items = self.static_items(args[0], node, scope)
            if not items:   # max([], default=d) is d; without one, Python's error
                if "default" in kwargs:
                    return kwargs["default"]
                raise error(P, node, f"{fn.__name__}() arg is an empty sequence", None)
            acc = items[0]
            for v in items[1:]:
                acc = self.binop_value(np.maximum if fn is max else np.minimum, acc, v, scope, out, node)
            return acc
        if fn is sorted and len(args) == 1 and isinstance(args[0], Struct) and args[0].kind in ("list", "tuple") \
                and set(kwargs) <= {"key", "reverse"} and isinstance(kwargs.get("reverse", Static(False)), Static):
            return self.sorted_runtime(args[0].values(), kwargs, scope, out, node)
        if fn is list and len(args) == 1 and not kwargs and isinstance(args[0], Dyn) and not (
                isinstance(args[0].expr, ast.Name) and self.param_ranks.get(args[0].expr.id) == 0):
            return self.runtime_list_of_rows(args[0], scope, out, node)   # list(array)
        if fn in (max, min) and len(args) == 1 and set(kwargs) == {"default"} and isinstance(args[0], Dyn):
            raise error(P, node, f"{fn.__name__}(array, default=...) is not supported (whether the array is empty is "
                                 "only known when the function runs)",
                        f"call {fn.__name__}(array) where the array is not empty, or np.{fn.__name__}(array, initial=...)")
        if fn in (max, min) and len(args) == 1 and not kwargs and isinstance(args[0], Dyn):
            # max(array): Python compares the items along the first axis, NumPy's max along axis 0
            return self.call_prim(lookup(np.max if fn is max else np.min), [args[0]], {"axis": Static(0)},
                                  scope, out, node)
        if fn is sorted and len(args) == 1 and isinstance(args[0], Dyn) and set(kwargs) <= {"reverse"} and \
                isinstance(kwargs.get("reverse", Static(False)), Static):
            # sorted(array): its items (rows of a 1-D array: numbers) in order, as np.sort along axis 0
            r = self.call_object(np.sort, [args[0]], {"axis": Static(0)}, scope, out, node)
            if kwargs.get("reverse", Static(False)).obj:
                r = self.call_prim(lookup_getitem(), [r, Static(slice(None, None, -1))], {}, scope, out, node)
            return r
        if fn is np.where and len(args) == 1 and not kwargs:   # np.where(cond): the indices where it holds
            return self.call_object(np.nonzero, list(args), {}, scope, out, node)
        if fn is pow and len(args) == 2 and not kwargs:   # pow(a, b) is a ** b (pow(a, b, m) is integers' own)
            return self.binop_value(np.power, args[0], args[1], scope, out, node)
        if fn is map and len(args) >= 2:
            cols = [self.static_items(a, node, scope) for a in args[1:]]
            return Struct("list", [self.call_value(args[0], list(t), {}, scope, out, node) for t in zip(*cols)])
        if fn is filter and len(args) == 2:
            keep = []
            for v in self.static_items(args[1], node, scope):
                c = self.call_value(args[0], [v], {}, scope, out, node) if not (
                    isinstance(args[0], Static) and args[0].obj is None) else v
                if not isinstance(c, Static):
                    raise error(P, node, "filter() with a condition on array values is not supported",
                                "use a mask (boolean indexing, np.where)")
                if c.obj:
                    keep.append(v)
            return Struct("list", keep)
        if fn in (tuple, list) and len(args) == 1 and isinstance(args[0], (_DictView, _Iter)):
            return Struct(fn.__name__, self.static_items(args[0], node, scope))
        if fn is dict and len(args) == 1 and isinstance(args[0], (Struct, _DictView, _Iter)):
            pairs = self.static_items(args[0], node, scope) if not (isinstance(args[0], Struct) and
                                                                    args[0].kind == "dict") else None
            if pairs is None:
                return Struct("dict", {**args[0].items, **kwargs})
            d = {}
            for pr in pairs:
                k, v = self.unpack(pr, 2, scope, out, node)
                if not isinstance(k, Static):
                    raise error(P, node, "dict keys must be known before the function runs", None)
                d[k.obj] = v
            d.update(kwargs)
            return Struct("dict", d)
        return None

    def binop_value(self, fn, a, b, scope, out, node):
        if isinstance(a, Static) and isinstance(b, Static):
            return Static(fn(a.obj, b.obj))
        if isinstance(a, Static) and fn is np.add and not isinstance(a.obj, np.ndarray) and a.obj == 0:
            return b  # sum() starts from 0
        return self.call_prim(lookup(fn), [a, b], {}, scope, out, node)

    def func_expr(self, fn):
        if getattr(np, getattr(fn, "__name__", None) or "_", None) is fn:  # np.zeros (not scipy's ufuncs)
            return _np_attr(fn.__name__)
        return self.external(fn)

    def method(self, m: "_BoundMethod", args, kwargs, scope, out, node):
        P = scope.parsed
        name = m.name
        if name in ("reshape", "transpose") and any(isinstance(a, Splat) for a in args):
            if len(args) != 1:
                raise error(P, node, f"{name}(...) of a runtime shape together with other sizes is not supported",
                            f"build the shape as one tuple: x.{name}(y.shape[:1] + (n,))")
            args = [Dyn(args[0].expr)]   # x.reshape(*y.shape) is x.reshape(y.shape)
        if name in ("reshape", "transpose") and len(args) > 1:
            args = [Struct("tuple", list(args))]
        if name == "transpose" and not args:
            args = []
        if name in ("ravel", "flatten"):
            r = self.call_object(np.ravel, [m.base] + list(args), kwargs, scope, out, node)
            # flatten copies (a write into it must not reach x); ravel is a view, as in NumPy
            return self.call_prim(lookup(np.copy), [r], {}, scope, out, node) if name == "flatten" else r
        if name == "item" and not kwargs and not args:   # x.item(): its one element, a number (as np.sum of it)
            return self.call_prim(lookup(np.sum), [m.base], {}, scope, out, node)
        if name == "item" and not kwargs and len(args) == 1:   # x.item(k): the k-th element
            flat = self.call_object(np.ravel, [m.base], {}, scope, out, node)
            return self.call_prim(lookup_getitem(), [flat, args[0] if args else Static(0)], {}, scope, out, node)
        if name == "astype":
            dt = args[0] if args else kwargs.get("dtype")
            if isinstance(dt, Static) and set(kwargs) <= {"dtype", "copy"}:
                return self.cast(m.base, dt, True, scope, out, node)
            return Dyn(ast.Call(func=ast.Attribute(value=m.base.expr, attr="astype", ctx=ast.Load()),
                                args=[self.as_expr(dt, scope, node)], keywords=[]))
        fn = _METHODS.get(name)
        if fn is None:
            # any other method (rng.randn(n) of a RandomState made in the function) runs as it is; the reverse
            # pass refuses it at this line if a differentiated value reaches it (the object or an argument)
            self.opaque_calls = True
            call = ast.Call(func=self.external(_call_method),
                            args=[self.as_expr(m.base, scope, node), ast.Constant(name)] +
                            [self.as_expr(a, scope, node) for a in args],
                            keywords=[ast.keyword(arg=k, value=self.as_expr(v, scope, node)) for k, v in kwargs.items()])
            ast.copy_location(call, node)
            A.put(call, A.NONDIFF, _method_marker(name))
            A.put(call, A.SRC, (P.filename, getattr(node, "lineno", None)))
            return Dyn(call)
        return self.call_object(fn, [m.base] + list(args), kwargs, scope, out, node)

    def cast(self, a, dt, copy, scope, out, node):
        """``a`` cast to the dtype ``dt`` (a Static): a primitive with a derivative for floating and complex
        dtypes (a new array when ``copy``, else ``a`` itself when it has that dtype, as np.asarray does); a
        cast to integers or booleans is piecewise constant: kept as a call with no derivative."""
        try:
            dtype = np.dtype(dt.obj)
        except TypeError:
            raise error(scope.parsed, node, f"{dt.obj!r} is not a NumPy dtype", None) from None
        if dtype.kind in "fc":
            return self.call_prim(lookup(_astype if copy else _asarray_dtype), [a, Static(dtype.type)], {}, scope,
                                  out, node)
        if dtype.kind not in "biu":
            raise error(scope.parsed, node, f"casting to {dtype} inside a differentiated function is not "
                                            "supported", "cast to a floating, complex, integer or boolean dtype")
        call = ast.Call(func=ast.Attribute(value=ast.Name("K", ast.Load()), attr="astype", ctx=ast.Load()),
                        args=[self.as_expr(a, scope, node), self.as_expr(Static(dtype.type), scope, node)],
                        keywords=[])
        ast.copy_location(call, node)
        A.put(call, A.NONDIFF, np.ndarray.astype)
        A.put(call, A.SRC, (scope.parsed.filename, getattr(node, "lineno", None)))
        return Dyn(call)

    def array_like(self, v, scope, out, node):
        """An element of a sequence argument (``np.stack``'s arrays) as NumPy reads it: a nested list or tuple
        holding runtime values is an array, stacked (``np.array([[x, x], [x, x]])``)."""
        if isinstance(v, Struct) and v.kind != "dict" and any(isinstance(x, Dyn) for x in _leaves(v)):
            return self.call_prim(lookup(np.stack), [v], {}, scope, out, node)
        return v

    def clip(self, prim, args, kwargs, scope, out, node):
        """``np.clip`` with a bound of None is one-sided: ``np.minimum(x, hi)`` or ``np.maximum(x, lo)``."""
        try:
            ba = prim.signature.bind(*args, **kwargs)
        except TypeError:
            return self.call_prim(prim, args, kwargs, scope, out, node)   # reports the bad arguments
        x, lo, hi = (ba.arguments.get(p) for p in prim.params)
        none = [isinstance(v, Static) and v.obj is None for v in (lo, hi)]
        if none == [True, True]:
            return x
        if none[0]:
            return self.call_prim(lookup(np.minimum), [x, hi], {}, scope, out, node)
        if none[1]:
            return self.call_prim(lookup(np.maximum), [x, lo], {}, scope, out, node)
        return self.call_prim(prim, args, kwargs, scope, out, node)

    def refuse_vspace(self, v, scope, node, what):
        """The refusal of an operation on a differentiated object of a user's vector space that no rule covers:
        ``what`` says what the user's line does to it (``"calls"``, ``"applies np.sin to"``)."""
        name = v.cls.__name__
        return error(scope.parsed, node,
                     f"'{ast.unparse(node)}' {what} a differentiated {name}, a value of a vector space registered "
                     f"with VSpace.register: funcgrad takes its derivative only from the rules of the functions it "
                     "is given to, and this has none",
                     f"do this inside a function with a derivative rule (funcgrad.extend.primitive + defvjp, which "
                     f"may be a method of {name}) and give {name} values only to such functions",
                     cls=NoDerivativeError)

    def call_prim(self, prim: Primitive, args, kwargs, scope, out, node):
        P = scope.parsed
        for v in list(args) + list(kwargs.values()):
            for leaf in _leaves(v) if isinstance(v, Struct) else [v]:
                if isinstance(leaf, VSElement):
                    raise self.refuse_vspace(leaf, scope, node, f"applies {display_name(prim)} to")
        self.opaque_calls |= prim.python_only   # no nopython kernel (scipy.special): auto runs this as Python
        try:
            ba = prim.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise error(P, node, f"bad arguments to {prim.name}: {e}", None, cls=UnsupportedSyntaxError) from None
        pos, kws = [], []
        params = list(prim.signature.parameters.values())
        diff = set(prim.template.diff_params) if prim.template is not None else set()
        for p in params:
            if p.name in ba.arguments:
                v = ba.arguments[p.name]
                if p.default is not p.empty and p.name not in diff:
                    self.need_static(v)
                if p.name == "indices" and isinstance(v, Struct) and v.kind in ("tuple", "list") and all(
                        isinstance(leaf, Static) for leaf in _leaves(v)):   # np.take(x, [0, 2, 1]): an index array
                    v = Static(np.asarray(_static_value(v)))
                if isinstance(v, Struct) and v.kind in ("tuple", "list"):  # nested lists of computed values
                    v = Struct(v.kind, [self.array_of(x, scope, out, node) if isinstance(x, Struct) and not all(
                        isinstance(leaf, Static) for leaf in _leaves(x)) and x.kind != "slice" else x
                        for x in v.values()])  # are arrays; a slice of run-time bounds in an index stays a slice
                e = self.as_expr(v, scope, node) if not isinstance(v, Struct) or v.kind == "slice" else ast.Tuple(
                    elts=[self.as_expr(x if isinstance(x, Struct) and x.kind == "slice" else
                                       self.array_like(x, scope, out, node), scope, node) for x in v.values()],
                    ctx=ast.Load())
                if p.default is p.empty:
                    pos.append(e)
                else:
                    kws.append(ast.keyword(arg=p.name, value=e))
        call = ast.Call(func=ast.Attribute(value=ast.Name("K", ast.Load()), attr=prim.name, ctx=ast.Load()),
                        args=pos, keywords=kws)
        A.put(call, A.PRIM, prim)
        ast.copy_location(call, node)
        A.put(call, A.SRC, (P.filename, getattr(node, "lineno", None)))
        return Dyn(call)

    def promote_int_argument(self):
        """A recursion whose depth is not known while transforming: its depth usually comes from an int argument
        (``fib(x, n)``), so the first int argument still known only when the function runs becomes a
        specialization key (:class:`StaticArgumentNeeded`) and the function is normalized again; with none
        left, the caller refuses the recursion."""
        arg_leaves = self.argument_leaves()
        for name in arg_leaves:
            if self.param_kinds.get(name) == "i" and self.param_ranks.get(name) == 0:
                raise StaticArgumentNeeded(arg_leaves.index(name))

    def need_static(self, v):
        """A primitive's static parameter (an axis, keepdims) given an int or bool argument of the
        function: the generated code needs its value, so the transform makes that argument leaf a
        specialization key (:class:`StaticArgumentNeeded`) and normalizes again."""
        for leaf in _leaves(v) if isinstance(v, Struct) else [v]:
            e = leaf.expr if isinstance(leaf, Dyn) else None
            if isinstance(e, ast.Name) and self.param_kinds.get(e.id) in ("i", "b") and \
                    self.param_ranks.get(e.id) == 0:
                arg_leaves = self.argument_leaves()
                if e.id in arg_leaves:
                    raise StaticArgumentNeeded(arg_leaves.index(e.id))

    def argument_leaves(self):
        """The generated names of the arguments' runtime leaves, in flatten order (StaticArgumentNeeded's
        positions)."""
        captured = {c[0] for c in self.captured_list}
        return [n for n in self.param_kinds if n not in captured]

    def rule_pullback(self, cv, args, scope, out, node):
        """``cv.bwd_from_args(args, g)`` in generated reverse-mode code that is differentiated again: the user's
        ``fwd`` and ``bwd`` read as helpers (JAX's higher-order semantics for ``custom_vjp``), each ``None``
        cotangent made the zero of its argument."""
        primals, g = args
        cts = self.inline_function(rule_pullback, [Static(cv.fwd), Static(cv.bwd), primals, g], {}, out, node,
                                   scope)
        n = len(primals.values()) if isinstance(primals, Struct) else None
        if not isinstance(cts, Struct) or cts.kind not in ("tuple", "list") or len(cts.values()) != n:
            raise error(scope.parsed, node, f"the bwd rule of {cv._label} must return a tuple of {n} cotangents "
                                            "(one per argument)", None)
        zero = lookup(np.zeros_like)
        vals = [self.call_prim(zero, [a], {}, scope, out, node) if isinstance(c, Static) and c.obj is None
                and isinstance(a, Dyn) else c for a, c in zip(primals.values(), cts.values())]
        return Struct("tuple", vals)

    def custom_vjp_call(self, cv, args, kwargs, scope, out, node):
        if kwargs:
            raise error(scope.parsed, node, "custom_vjp functions take positional arguments only", None)
        # the user's fun, fwd and bwd are Python functions called as they are (they may call anything):
        # whole-function Numba cannot call them, so auto runs this function as Python over the kernels
        self.opaque_calls = True
        fname = self.external(cv)
        call = ast.Call(func=fname, args=[self.as_expr(a, scope, node) for a in args], keywords=[])
        A.put(call, A.CUSTOM, cv)
        ast.copy_location(call, node)
        return Dyn(call)

    def inline_function(self, fn, args, kwargs, out, node, scope):
        if fn.__code__ in self.inline_stack:
            # recursion: written out call by call, which ends when its condition is known while transforming
            # (a depth given as a constant); one decided only when it runs would never end: refused
            self.recursive_inlines = getattr(self, "recursive_inlines", 0) + 1
            if self.recursive_inlines > 500:
                self.promote_int_argument()
                raise error(scope.parsed, node, f"recursive call of '{fn.__qualname__}' whose depth is not known "
                                                "while transforming is not supported",
                            "write the recursion as a loop, or make its depth a constant")
        p = parse(fn)
        fence_check(p, allow_control_flow=self.allow_control_flow, entry=False)
        start = len(out)
        res = self.inline(p.node, p, None, args, kwargs, out, node, code=fn.__code__, defaults=fn)
        if generated_file(p.filename) and not generated_file(scope.parsed.filename):
            place_at_call(out[start:], scope.parsed.filename, node)
        return res

    def inline(self, fdef, parsed, parent_scope, args, kwargs, out, node, code=None, defaults=None,
               local_defaults=None):
        if parent_scope is not None:
            fence_check(parsed, node=fdef, allow_control_flow=self.allow_control_flow, entry=False, nested=True)
        self.depth += 1
        if self.depth > 50:
            self.promote_int_argument()
            raise error(parsed, node, "helper calls nest more than 50 deep (a recursion whose depth is not known "
                                      "while transforming?)", "write the recursion as a loop")
        self.inline_stack.append(code)
        scope = Scope(parsed, parent_scope, prefix=f"{fdef.name}_" if fdef.name != "<lambda>" else "", fdef=fdef)
        a = fdef.args
        names = [x.arg for x in a.posonlyargs + a.args]
        if len(args) > len(names) and a.vararg is None:
            raise error(scope.parsed, node, f"{fdef.name}() takes {len(names)} positional arguments but "
                                            f"{len(args)} were given", None)
        bound = dict(zip(names, args))
        if a.vararg is not None:
            bound[a.vararg.arg] = Struct("tuple", list(args[len(names):]))
        extra = {}
        known = set(names) | {k.arg for k in a.kwonlyargs}
        for k, v in kwargs.items():
            if k in bound:
                raise error(scope.parsed, node, f"{fdef.name}() got multiple values for argument '{k}'", None)
            if k not in known:
                if a.kwarg is None:
                    raise error(scope.parsed, node, f"{fdef.name}() got an unexpected keyword argument '{k}'", None)
                extra[k] = v
                continue
            bound[k] = v
        if a.kwarg is not None:
            bound[a.kwarg.arg] = Struct("dict", extra)
        # defaults
        pos_defaults = a.defaults
        dnames = names[len(names) - len(pos_defaults):]
        outer = parent_scope
        for n_, dnode in list(zip(dnames, pos_defaults)) + [(k.arg, dv) for k, dv in zip(a.kwonlyargs, a.kw_defaults)]:
            if n_ not in bound:
                if local_defaults is not None and n_ in local_defaults:   # evaluated where the def ran
                    bound[n_] = local_defaults[n_]
                elif defaults is not None:
                    dv_obj = _default_value(defaults, n_)
                    if dv_obj is MISSING:
                        bound[n_] = self.expr(dnode, scope, out)
                    elif isinstance(dv_obj, np.ndarray):  # bound when the def ran: read that object
                        bound[n_] = self.capture(n_, dv_obj, scope, getter=lambda v=dv_obj: v)
                    else:
                        bound[n_] = Static(dv_obj)
                else:
                    bound[n_] = self.expr(dnode, outer, out)
        for n_ in names + [k.arg for k in a.kwonlyargs]:
            if n_ not in bound:
                raise error(scope.parsed, node, f"{fdef.name}() missing required argument '{n_}'", None)
        for k, v in bound.items():
            if isinstance(v, Dyn) and not isinstance(v.expr, (ast.Name, ast.Constant)):
                tmp = self.names.fresh(scope.prefix + k, shown=shown_as(k, scope))
                out.append(ast.copy_location(ast.Assign(targets=[ast.Name(tmp, ast.Store())], value=v.expr), node))
                v = Dyn(ast.Name(tmp, ast.Load()))
            scope.vars[k] = v
        body = self.structured(parsed, fdef, scope)
        start = len(out)
        ret = self.block(body, scope, out)
        tag_file(out[start:], parsed.filename)
        self.inline_stack.pop()
        self.depth -= 1
        if ret is None:   # no return statement runs: the call's value is None, as in Python (plot(ax, x) with ax None)
            return Static(None)
        return ret


def _user_class(cls):
    """A class of the user's own code that an object made inside the function can stand for: a plain class
    (no metaclass, no ``__new__``, no custom attribute access), every class it derives from the user's too."""
    if type(cls) is not type or cls.__new__ is not object.__new__ or issubclass(cls, BaseException):
        return False
    for base in cls.__mro__[:-1]:
        mod = sys.modules.get(base.__module__)
        f = getattr(mod, "__file__", None)
        if not f or base.__module__.split(".")[0] in _LIBRARY_ROOTS or is_library_file(f):
            return False
        frozen = getattr(vars(base).get("__dataclass_params__"), "frozen", False)   # (its __setattr__ refuses)
        if any(k in vars(base) for k in ("__getattr__", "__getattribute__", "__init_subclass__",
                                          "__class_getitem__") + (() if frozen else ("__setattr__", "__delattr__"))):
            return False
    return True


def _is_library_class(cls):
    """NumPy's scalar and array classes (np.float64(n), np.dtype(...)), constructed as any library call is.
    Other classes are refused: an object built inside the function (an OrderedDict, a user's class) would
    hold differentiated values where no pass can follow them."""
    return (getattr(cls, "__module__", None) or "").split(".")[0] == "numpy"


_NUMBA_CALLABLE: dict = {}   # id(fn) -> (fn, whether whole-function Numba code can call it)


def _numba_can_call(fn):
    """Whether Numba's nopython mode knows ``fn`` (NumPy functions it implements, math, print, @njit
    functions); anything else is opaque to it, and auto runs a function calling it as Python."""
    if fn in _NJIT_BUILTINS:
        return True
    hit = _NUMBA_CALLABLE.get(id(fn))
    if hit is not None and hit[0] is fn:
        return hit[1]
    try:
        ctx = cpu_target.typing_context
        if not getattr(_numba_can_call, "_refreshed", False):
            cpu_target.target_context.refresh()   # registers NumPy's implementations with typing
            ctx.refresh()
            _numba_can_call._refreshed = True
        ok = ctx.resolve_value_type(fn) is not None
    except Exception:
        ok = False
    _NUMBA_CALLABLE[id(fn)] = (fn, ok)
    return ok
