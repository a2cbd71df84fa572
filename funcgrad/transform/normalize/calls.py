"""Calls: primitives bound to their signatures, methods, custom_vjp functions, non-differentiable
library calls kept as they are, and the user's own helpers inlined with fresh names."""
from __future__ import annotations

import ast
import math
import types

import numpy as np

from .. import annotations as A
from ...custom import CustomVJPFunction
from ...errors import NoDerivativeError, UnsupportedSyntaxError
from ...ops.registry import Primitive, lookup
from ..fence import check as fence_check, error
from ..parse import MISSING, parse
from ..values import Dyn, Static, Struct, leaves as _leaves
from .common import (LocalFunction, Scope, _BUILTIN_MAP, _BoundMethod, _Iter, _METHODS, _Range,
                     _default_value, _is_numpy_callable, _np_attr, _static_value, tag_file)


class Calls:
    # ------------------------------------------------------------ calls
    def call(self, node, scope, out):
        P = scope.parsed
        fval = self.expr(node.func, scope, out)
        args = [self.expr(a, scope, out) for a in node.args]
        kwargs = {k.arg: self.expr(k.value, scope, out) for k in node.keywords}
        if isinstance(fval, _BoundMethod):
            return self.method(fval, args, kwargs, scope, out, node)
        if isinstance(fval, LocalFunction):
            return self.inline(fval.node, fval.parsed, fval.scope, args, kwargs, out, node)
        if not isinstance(fval, Static):
            raise error(P, node, "only functions known when the function is transformed can be called",
                        "call a module-level function, a nested def, or a NumPy function")
        fn = fval.obj
        return self.call_object(fn, args, kwargs, scope, out, node)

    def call_object(self, fn, args, kwargs, scope, out, node):
        P = scope.parsed
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
            return self.call_prim(prim, args, kwargs, scope, out, node)
        if fn is slice and all(isinstance(a, Static) for a in args):
            return Static(slice(*[a.obj for a in args]))
        if fn is range:
            return _Range([self.as_expr(a, scope, node) for a in args])
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
        if isinstance(fn, types.FunctionType) and getattr(fn, "__module__", "").split(".")[0] != "numpy":
            return self.inline_function(fn, args, kwargs, out, node, scope)
        # a non-differentiable call (np.zeros, np.arange, math.floor, ...): kept as is
        if _is_numpy_callable(fn) or fn in (math.floor, math.ceil, round, math.isnan, math.isfinite):
            fexpr = self.func_expr(fn)
            call = ast.Call(func=fexpr, args=[self.as_expr(a, scope, node) for a in args],
                            keywords=[ast.keyword(arg=k, value=self.as_expr(v, scope, node)) for k, v in kwargs.items()])
            ast.copy_location(call, node)
            A.put(call, A.NONDIFF, getattr(fn, "__name__", repr(fn)))
            A.put(call, A.SRC, (P.filename, getattr(node, "lineno", None)))
            return Dyn(call)
        raise error(P, node, f"'{getattr(fn, '__qualname__', fn)}' has no derivative rule and is not a Python "
                             f"function funcgrad can read",
                    "wrap it with funcgrad.custom_vjp to give it a rule, or register a primitive",
                    cls=NoDerivativeError)

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
                    elts=[self.as_expr(x, scope, node) for x in v.values()], ctx=ast.Load())
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
        if len(args) > len(names):
            raise error(scope.parsed, node, f"{fdef.name}() takes {len(names)} positional arguments but "
                                            f"{len(args)} were given", None)
        bound = dict(zip(names, args))
        for k, v in kwargs.items():
            if k in bound:
                raise error(scope.parsed, node, f"{fdef.name}() got multiple values for argument '{k}'", None)
            bound[k] = v
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
