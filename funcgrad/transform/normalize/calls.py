"""Calls: primitives bound to their signatures, methods, custom_vjp functions, non-differentiable
library calls kept as they are, and the user's own helpers inlined with fresh names."""
from __future__ import annotations

import ast
import functools
import math
import types

import numpy as np

from .. import annotations as A
from ...custom import CustomVJPFunction
from ...errors import NoDerivativeError, UnsupportedSyntaxError
from ...ops.registry import Primitive, lookup
from ..fence import check as fence_check, error
from ..parse import MISSING, parse
from ..values import Dyn, Static, Struct, leaves as _leaves, map_struct as _map_struct
from .common import (_DictView, _is_metadata, _Partial, _NJIT_BUILTINS, _STATIC_BUILTINS, _is_static_tree, _is_user_code, LocalFunction, Scope, _BUILTIN_MAP, _BoundMethod, _Iter, _METHODS, _Range,
                     _default_value, _is_numpy_callable, _np_attr, _static_value, tag_file)


class Calls:
    # ------------------------------------------------------------ calls
    def call(self, node, scope, out):
        P = scope.parsed
        fval = self.expr(node.func, scope, out)
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):  # f(*args): the elements of a container known now
                args.extend(self.static_items(self.expr(a.value, scope, out), a, scope))
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

    def call_value(self, fval, args, kwargs, scope, out, node):
        P = scope.parsed
        if isinstance(fval, _BoundMethod):
            return self.method(fval, args, kwargs, scope, out, node)
        if isinstance(fval, LocalFunction):
            return self.inline(fval.node, fval.parsed, fval.scope, args, kwargs, out, node)
        if isinstance(fval, _DictView):
            return self.dict_method(fval, args, kwargs, scope, out, node)
        if isinstance(fval, _Partial):
            return self.call_value(fval.fn, list(fval.args) + list(args), {**fval.kwargs, **kwargs}, scope, out, node)
        if isinstance(fval, Static) and fval.obj is functools.partial and args:  # partial(f, x) made here
            return _Partial(args[0], list(args[1:]), dict(kwargs))
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
        if isinstance(fn, functools.partial):  # partial(f, a, k=v)(b): f(a, b, k=v)
            fixed = [self.constant_value(v, scope, node) for v in fn.args]
            fixed_kw = {k: self.constant_value(v, scope, node) for k, v in fn.keywords.items()}
            return self.call_value(self.constant_value(fn.func, scope, node) if not isinstance(
                fn.func, (types.FunctionType, types.MethodType)) else Static(fn.func), fixed + list(args),
                {**fixed_kw, **kwargs}, scope, out, node)
        if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType) and \
                not isinstance(fn.__self__, types.ModuleType) and _is_user_code(fn.__func__):
            # a method of the user's own class: self is the instance, known now
            return self.inline_function(fn.__func__, [Static(fn.__self__)] + list(args), kwargs, out, node, scope)
        if not isinstance(fn, (type, types.FunctionType, types.BuiltinFunctionType, np.ufunc, types.MethodType)) \
                and isinstance(getattr(type(fn), "__call__", None), types.FunctionType) and \
                _is_user_code(type(fn).__call__) and not isinstance(fn, CustomVJPFunction):
            return self.inline_function(type(fn).__call__, [Static(fn)] + list(args), kwargs, out, node, scope)
        static = self.static_builtin(fn, args, kwargs, scope, out, node)
        if static is not None:
            return static
        fn = _BUILTIN_MAP.get(fn, fn) if isinstance(fn, types.BuiltinFunctionType) and len(args) != 1 or fn is abs else fn
        if isinstance(fn, CustomVJPFunction):
            return self.custom_vjp_call(fn, args, kwargs, scope, out, node)
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
        if fn is range:
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
            return _Range(rargs)
        if fn in (enumerate, zip):
            return _Iter(fn, args)
        if fn is len:
            (a,) = args
            if isinstance(a, Struct):
                return Static(len(a.values()))
            if isinstance(a, Static):
                return Static(len(a.obj))
            return Dyn(ast.Subscript(value=ast.Attribute(value=self.as_expr(a, scope, node), attr="shape",
                                                         ctx=ast.Load()), slice=ast.Constant(0), ctx=ast.Load()))
        if fn in (float, int, bool):
            (a,) = args
            if isinstance(a, Static):
                return Static(fn(a.obj))
            if fn is float:
                return a
            return Dyn(ast.Call(func=ast.Name(fn.__name__, ast.Load()), args=[self.as_expr(a, scope, node)],
                                keywords=[]))
        if fn in (tuple, list) and len(args) == 1 and isinstance(args[0], Struct):
            return Struct(fn.__name__, args[0].values())
        if fn is dict:
            return Struct("dict", dict(kwargs))
        if isinstance(fn, type) and issubclass(fn, tuple) and hasattr(fn, "_fields"):
            vals = list(args) + [kwargs[f] for f in fn._fields[len(args):] if f in kwargs]
            return Struct("namedtuple", vals, fn)
        if fn in (np.array, np.asarray, np.asanyarray, np.ascontiguousarray) and len(args) == 1:
            a = args[0]
            if isinstance(a, Struct) and all(isinstance(v, Static) for v in _leaves(a)):
                return Static(fn(_static_value(a)))  # a constant array (index lists, coefficients)
            if isinstance(a, Struct):
                return self.call_prim(lookup(np.stack), [a], {}, scope, out, node)
            if isinstance(a, Dyn):
                return a
        if isinstance(fn, types.FunctionType) and _is_user_code(fn):
            return self.inline_function(fn, args, kwargs, out, node, scope)
        # a call with no rule (np.zeros, math.floor, a library routine): kept as is; the reverse pass
        # refuses it at this line if a differentiated value flows into it
        if callable(fn) and not isinstance(fn, type) or fn in (math.floor, math.ceil, round, math.isnan,
                                                                math.isfinite) or _is_numpy_callable(fn):
            if not (_is_numpy_callable(fn) or fn in _NJIT_BUILTINS):
                self.opaque_calls = True  # Numba cannot call it: auto runs this function as Python
            fexpr = self.func_expr(fn)
            call = ast.Call(func=fexpr, args=[self.as_expr(a, scope, node) for a in args],
                            keywords=[ast.keyword(arg=k, value=self.as_expr(v, scope, node)) for k, v in kwargs.items()])
            ast.copy_location(call, node)
            A.put(call, A.NONDIFF, fn)
            A.put(call, A.SRC, (P.filename, getattr(node, "lineno", None)))
            return Dyn(call)
        raise error(P, node, f"'{getattr(fn, '__qualname__', fn)}' has no derivative rule and is not a Python "
                             f"function funcgrad can read",
                    "wrap it with funcgrad.custom_vjp to give it a rule, or register a primitive",
                    cls=NoDerivativeError)

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
            if isinstance(subject, Struct):
                rep = {"dict": dict, "list": list, "tuple": tuple}.get(subject.kind, subject.cls)
                if fn is type:
                    return Static(rep)
                cls = args[1]
                if isinstance(cls, Static):
                    return Static(isinstance(rep(), cls.obj) if rep in (dict, list, tuple) else issubclass(rep, cls.obj))
            if isinstance(subject, Dyn):
                raise error(P, node, f"{fn.__name__}() of a value computed when the function runs is not "
                                     "supported (arrays and numbers are only known then)",
                            "decide on types outside the differentiated function, or pass a flag")
        if fn in (sorted, reversed, len, list, tuple, any, all) and len(args) == 1 and isinstance(
                args[0], (_DictView, _Iter)):
            items = self.static_items(args[0], node, scope)
            if fn is len:
                return Static(len(items))
            if fn in (sorted, any, all):
                if not all(isinstance(v, Static) for v in items):
                    raise error(P, node, f"{fn.__name__}() of values computed when the function runs is not "
                                         "supported", None)
                if fn is sorted:
                    return Struct("list", [Static(v) for v in sorted(v.obj for v in items)])
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
        if fn in (max, min) and len(args) == 1 and isinstance(args[0], Struct):
            items = self.static_items(args[0], node, scope)
            acc = items[0]
            for v in items[1:]:
                acc = self.binop_value(np.maximum if fn is max else np.minimum, acc, v, scope, out, node)
            return acc
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
        if isinstance(fn, np.ufunc) or getattr(np, getattr(fn, "__name__", ""), None) is fn:
            return _np_attr(fn.__name__)
        return self.external(fn)

    def method(self, m: "_BoundMethod", args, kwargs, scope, out, node):
        P = scope.parsed
        name = m.name
        if name in ("reshape", "transpose") and len(args) > 1:
            args = [Struct("tuple", list(args))]
        if name == "transpose" and not args:
            args = []
        if name in ("ravel", "flatten"):
            return self.call_prim(lookup(np.reshape), [m.base, Static((-1,))], {}, scope, out, node)
        if name == "astype":
            (dt,) = args
            return Dyn(ast.Call(func=ast.Attribute(value=m.base.expr, attr="astype", ctx=ast.Load()),
                                args=[self.as_expr(dt, scope, node)], keywords=[]))
        fn = _METHODS.get(name)
        if fn is None:
            raise error(P, node, f"array method '.{name}()' is not supported",
                        "call the NumPy function instead (np.<name>(x, ...))")
        return self.call_object(fn, [m.base] + list(args), kwargs, scope, out, node)

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

    def call_prim(self, prim: Primitive, args, kwargs, scope, out, node):
        P = scope.parsed
        try:
            ba = prim.signature.bind(*args, **kwargs)
        except TypeError as e:
            raise error(P, node, f"bad arguments to {prim.name}: {e}", None, cls=UnsupportedSyntaxError) from None
        pos, kws = [], []
        params = list(prim.signature.parameters.values())
        for p in params:
            if p.name in ba.arguments:
                v = ba.arguments[p.name]
                e = self.as_expr(v, scope, node) if not isinstance(v, Struct) else ast.Tuple(
                    elts=[self.as_expr(self.array_like(x, scope, out, node), scope, node) for x in v.values()],
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

    def custom_vjp_call(self, cv, args, kwargs, scope, out, node):
        if kwargs:
            raise error(scope.parsed, node, "custom_vjp functions take positional arguments only", None)
        fname = self.external(cv)
        call = ast.Call(func=fname, args=[self.as_expr(a, scope, node) for a in args], keywords=[])
        A.put(call, A.CUSTOM, cv)
        ast.copy_location(call, node)
        return Dyn(call)

    def inline_function(self, fn, args, kwargs, out, node, scope):
        if fn.__code__ in self.inline_stack:
            raise error(scope.parsed, node, f"recursive call of '{fn.__qualname__}' is not supported",
                        "write the recursion as a loop")
        p = parse(fn)
        fence_check(p, allow_control_flow=self.allow_control_flow)
        return self.inline(p.node, p, None, args, kwargs, out, node, code=fn.__code__, defaults=fn)

    def inline(self, fdef, parsed, parent_scope, args, kwargs, out, node, code=None, defaults=None):
        if parent_scope is not None:
            fence_check(parsed, node=fdef, allow_control_flow=self.allow_control_flow)
        self.depth += 1
        if self.depth > 50:
            raise error(parsed, node, "helper calls nest too deeply (recursion?)", "write the recursion as a loop")
        self.inline_stack.append(code)
        scope = Scope(parsed, parent_scope, prefix=f"{fdef.name}_" if fdef.name != "<lambda>" else "")
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
                if defaults is not None:
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
                tmp = self.names.fresh(scope.prefix + k)
                out.append(ast.copy_location(ast.Assign(targets=[ast.Name(tmp, ast.Store())], value=v.expr), node))
                v = Dyn(ast.Name(tmp, ast.Load()))
            scope.vars[k] = v
        body = self.structured(parsed, fdef)
        start = len(out)
        ret = self.block(body, scope, out)
        tag_file(out[start:], parsed.filename)
        self.inline_stack.pop()
        self.depth -= 1
        if ret is None:
            raise error(parsed, fdef, f"helper '{fdef.name}' returns nothing", "return a value")
        return ret
