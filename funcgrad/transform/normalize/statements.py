"""Statements: assignment (tuple targets, in-place writes, containers), return, and the control flow
kept as statements (if, for, while) with one runtime name per variable they rebind."""
from __future__ import annotations

import ast
import builtins
import copy
import os

import numpy as np

from ...custom import checkpointed
from ...errors import REFUSAL_MARK, UnsupportedSyntaxError
from .. import annotations as A
from ...kernels.base import INTERPRETED
from ..fence import error
from ..structure import RET, StructureError, structure
from ..values import Dyn, Obj, Static, Struct, VSElement
from .lowerings import inplace_call, is_inplace
from .lists import RList
from .expressions import _position_is
from ...ops.numpy_shape import pick
from ...ops.registry import lookup
from ..astutil import ast_walk, clone
from .common import (_DictView, declared_outer, _is_metadata, _item_assigned, LocalFunction, _Iter, _Range, _assigned, _contains, _describe, _is_array_producing,
                     _load, _safe, _target_names, _user_name, generated_file, lookup_getitem,
                     shown_as)


def _known_now(it):
    """A zip/enumerate whose sequences are all containers known now (nested zip/enumerate too)."""
    if isinstance(it, _Iter):
        return all(_known_now(a) for a in it.args)
    return isinstance(it, (Struct, Static, _DictView)) and not isinstance(it, _Range)


# the expressions known_condition may evaluate now: literals, names, operators (no calls, subscripts, attributes)
_FOLDABLE = (ast.Constant, ast.Name, ast.UnaryOp, ast.BinOp, ast.BoolOp, ast.Compare, ast.expr_context,
             ast.unaryop, ast.operator, ast.boolop, ast.cmpop)


def _simple(obj):
    """A value whose comparisons and truth value run no user code: numbers, strings, None, tuples of them."""
    if isinstance(obj, tuple):
        return all(_simple(o) for o in obj)
    return isinstance(obj, (bool, int, float, complex, str, bytes, type(None), np.bool_, np.number))


class Statements:
    def local_function(self, fdef, scope, out):
        """A nested def or lambda, its defaults evaluated now, as Python does when the def runs
        (``lambda v, k=k: v * k`` in a loop keeps each trip's k)."""
        a = fdef.args
        pos = [x.arg for x in a.posonlyargs + a.args]
        pairs = list(zip(pos[len(pos) - len(a.defaults):], a.defaults)) + [
            (k.arg, d) for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
        values = {}
        for name, dnode in pairs:
            values[name] = self.snapshot(self.expr(dnode, scope, out), scope, out, dnode)
        return LocalFunction(fdef, scope, scope.parsed, values if pairs else None)

    def name_leaves(self, val, scope, out, node, seen=None):
        """Bind every computed leaf of the container ``val`` to a fresh name, in place (the container keeps its
        identity). An item held as an expression was computed again at every read: an array written in place
        through one read (``b = lst[0]; b[1] = x``) was not the array a later read saw."""
        seen = set() if seen is None else seen
        if not isinstance(val, Struct) or id(val) in seen:
            return val
        seen.add(id(val))
        keys = list(val.items) if val.kind == "dict" else range(len(val.items))
        for k in keys:
            v = val.items[k]
            if isinstance(v, Struct):
                self.name_leaves(v, scope, out, node, seen)
            elif isinstance(v, Dyn) and not isinstance(v.expr, (ast.Name, ast.Constant)) and not _is_metadata(v.expr):
                n = self.names.fresh("_item")
                out.append(ast.copy_location(ast.Assign(targets=[ast.Name(n, ast.Store())], value=v.expr), node))
                self.remember_spec(n, v.expr)
                val.items[k] = Dyn(ast.Name(n, ast.Load()))
        return val

    def held(self, val, scope, out, node):
        """``val`` as a container's item or an object's attribute: a computed value bound to a name (one array,
        whichever read of the item writes into it), a container's leaves likewise (:meth:`name_leaves`)."""
        if isinstance(val, Dyn) and not isinstance(val.expr, (ast.Name, ast.Constant)) and not _is_metadata(val.expr):
            return self.snapshot(val, scope, out, node)
        if isinstance(val, Struct):
            self.name_leaves(val, scope, out, node)
        return val

    def snapshot(self, val, scope, out, node):
        """``val`` with every runtime leaf bound to a fresh name, so later rebinding cannot change it."""
        if isinstance(val, Struct):
            if val.kind == "dict":
                return Struct("dict", {k: self.snapshot(v, scope, out, node) for k, v in val.items.items()})
            return Struct(val.kind, [self.snapshot(v, scope, out, node) for v in val.items], val.cls)
        if isinstance(val, Dyn) and not isinstance(val.expr, ast.Constant):
            n = self.names.fresh("_tup")
            out.append(ast.copy_location(ast.Assign(targets=[ast.Name(n, ast.Store())], value=val.expr), node))
            return Dyn(ast.Name(n, ast.Load()))
        return val

    def materialize(self, val, body, node):
        """Bind every computed output leaf to a name (``out``), so outputs are names or constants."""
        if isinstance(val, RList):
            ret = getattr(self, "top_return", None)
            raise error(self.root, ret if ret is not None and self.root.filename else node, f"returning '{val.name}', a list whose length is only known when the "
                                         "function runs, is not supported", f"return np.stack({val.name})",
                        cls=UnsupportedSyntaxError)
        if isinstance(val, Obj):
            ret = getattr(self, "top_return", None)
            raise error(self.root, ret if ret is not None and self.root.filename else node,
                        f"returning a '{val.cls.__name__}' object made inside the function is not supported",
                        "return its values (a tuple, dict or NamedTuple of arrays)", cls=UnsupportedSyntaxError)
        if isinstance(val, Struct):
            if val.kind == "dict":
                return Struct("dict", {k: self.materialize(v, body, node) for k, v in val.items.items()})
            return Struct(val.kind, [self.materialize(v, body, node) for v in val.items], val.cls)
        if isinstance(val, Dyn) and not isinstance(val.expr, (ast.Name, ast.Constant)):
            n = self.names.fresh("out")
            body.append(ast.copy_location(ast.Assign(targets=[ast.Name(n, ast.Store())], value=val.expr), node))
            return Dyn(ast.Name(n, ast.Load()))
        return val

    def structured(self, parsed, fdef, scope):
        """The function body with single exit and loops without break/continue (see structure), without the
        code that conditions decided for the whole call rule out (live: literals, and names the function never
        rebinds that are bound now to fixed values). That code goes before the structure pass sees it: a
        `return`, `break` or `continue` in it would otherwise become a flag the generated code keeps testing
        (whole-function Numba prunes what such a flag guards, and the gradient's lists kept there have no
        type), and code after an `if True: break` is dropped as code after any `break` is."""
        body = fdef.body
        has_cf = any(isinstance(n, (ast.If, ast.For, ast.While)) for s in body for n in ast_walk(s))
        if not has_cf:
            return body
        live = self.live(body, scope, self.local_names(fdef))
        try:
            new = structure(live)
        except StructureError as e:
            raise error(parsed, e.node, e.msg, e.hint) from None
        ret = ast.Return(value=ast.Name(RET, ast.Load()))
        ast.copy_location(ret, body[-1])
        if not any(isinstance(n, ast.Name) and n.id == RET for s in new for n in ast_walk(s)):
            return new
        return new + [ret]

    # ------------------------------------------------------------ statements
    def block(self, stmts, scope, out, top=False):
        """Lower statements into ``out``; return the value of a final ``return`` (or None)."""
        for i, s in enumerate(stmts):
            ret = self.stmt(s, scope, out)
            if ret is not None:
                if i != len(stmts) - 1:
                    raise error(scope.parsed, stmts[i + 1], "code after 'return' is unreachable",
                                "remove it")
                return ret
        return None

    def stmt(self, s, scope, out):
        P = scope.parsed
        if isinstance(s, ast.Return):
            if s.value is None:
                raise error(P, s, "'return' without a value", "return the value to differentiate")
            if not self.depth:
                self.top_return = s   # where a result that cannot be returned is refused
            return self.expr(s.value, scope, out)
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant):
            return None  # a docstring
        if isinstance(s, ast.Expr):
            return self.expr_stmt(s, scope, out)
        if isinstance(s, ast.Assert):
            test = self.expr(s.test, scope, out)
            msg = self.expr(s.msg, scope, out) if s.msg is not None else None
            msg = ast.Constant(msg.obj) if isinstance(msg, Static) and isinstance(msg.obj, str) else None
            if msg is not None and _funcgrad_definition(P.filename):   # a refusal (errors.REFUSAL_MARK)
                msg = ast.Constant(REFUSAL_MARK + msg.value)
            if isinstance(test, Static):
                if not test.obj:
                    out.append(ast.copy_location(ast.Assert(test=ast.Constant(False), msg=msg or (
                        s.msg and ast.Constant(ast.unparse(s.msg)))), s))
                return None
            out.append(ast.copy_location(ast.Assert(test=self.as_expr(test, scope, s), msg=msg), s))
            return None
        if isinstance(s, ast.Raise):
            return self.raise_stmt(s, scope, out)
        if isinstance(s, ast.Delete):
            return self.delete_stmt(s, scope, out)
        if isinstance(s, ast.Pass):
            return None
        if isinstance(s, ast.Nonlocal):   # (the fence allows it in a def nested in the transformed code only)
            for name in s.names:
                if scope.parent is None or not self.is_bound(name, scope.parent):
                    raise error(P, s, f"no binding for nonlocal '{name}' found", None)
                scope.__dict__.setdefault("nonlocals", set()).add(name)
            return None
        if isinstance(s, ast.Assign):
            val = self.expr(s.value, scope, out)
            if len(s.targets) > 1 or not isinstance(s.targets[0], ast.Name):
                # Python evaluates the whole right side before binding any target (`a, b = b, a + b`,
                # `x = y = f(x)`): bind every computed leaf to a fresh name first
                val = self.snapshot(val, scope, out, s)
            for k, t in enumerate(s.targets):
                self.assign(t, val, scope, out, s)
                if k == 0 and isinstance(t, ast.Name) and isinstance(val, Struct) and val.kind in ("list", "dict"):
                    val = scope.vars.get(t.id, val)   # L = M = []: one list under two names
            return None
        if isinstance(s, ast.AnnAssign):
            if s.value is not None:
                self.assign(s.target, self.expr(s.value, scope, out), scope, out, s)
            return None
        if isinstance(s, ast.AugAssign) and isinstance(s.op, ast.Add) and isinstance(s.target, ast.Name) and \
                self.is_bound(s.target.id, scope):
            cur = self.lookup_name(s.target.id, scope, s.target)
            if isinstance(cur, RList) or isinstance(cur, Struct) and cur.kind == "list":
                call = ast.Call(func=ast.Attribute(value=ast.Name(s.target.id, ast.Load()), attr="extend",
                                                   ctx=ast.Load()), args=[s.value], keywords=[])
                ast.copy_location(call, s)
                return self.mutate_container(s.target.id, cur, call, scope, out, s)   # lst += [...]: in place
        if isinstance(s, ast.AugAssign):
            op = ast.BinOp(left=_load(s.target), op=s.op, right=s.value)
            ast.copy_location(op, s)
            for n in ast_walk(op):
                ast.copy_location(n, s)
            val = self.expr(op, scope, out)
            start = len(out)
            self.assign(s.target, val, scope, out, s)
            if isinstance(s.target, ast.Name) and len(out) > start and isinstance(out[-1], ast.Assign) and \
                    all(isinstance(st, ast.Assign) for st in out[start:]):   # (after any pin_holders copies)
                A.put(out[-1], A.AUGMENTED, True)   # NumPy's x += v writes into x's array (aliases see it)
            return None
        if isinstance(s, ast.FunctionDef):
            scope.vars[s.name] = self.local_function(s, scope, out)
            return None
        if isinstance(s, (ast.For, ast.While, ast.If, ast.Break, ast.Continue)):
            return self.control(s, scope, out)
        raise error(P, s, f"unsupported statement '{type(s).__name__}'", None)

    def expr_stmt(self, s, scope, out):
        """An expression statement: a list/dict mutation, or a call run for its effect (print, logging)."""
        e = s.value
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and isinstance(e.func.value, ast.Name):
            holder = e.func.value.id
            cur = self.lookup_name(holder, scope, e.func.value) if self.is_bound(holder, scope) else None
            if isinstance(cur, Struct) and cur.kind in ("list", "dict") or isinstance(cur, RList):
                return self.mutate_container(holder, cur, e, scope, out, s)
        if isinstance(e, ast.Call) and _is_reference(e.func):   # np.put_along_axis(a, ...): writes into a
            fval = self.expr(e.func, scope, out)
            if isinstance(fval, Static) and is_inplace(fval.obj) and not any(
                    isinstance(a, ast.Starred) for a in e.args) and all(k.arg for k in e.keywords):
                inplace_call(self, fval.obj, [self.expr(a, scope, out) for a in e.args],
                             {k.arg: self.expr(k.value, scope, out) for k in e.keywords}, scope, out, e)
                return None
        val = self.expr(e, scope, out)
        if isinstance(val, Dyn) and isinstance(val.expr, ast.Call):
            out.append(ast.copy_location(ast.Expr(value=val.expr), s))  # runs; its value is unused
        return None

    def builds_containers(self, stmts, scope):
        """True when ``stmts`` append to, pop from, or set items of, a list or dict bound now."""
        for st in stmts:
            for n in ast_walk(st):
                name = None
                if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Attribute) \
                        and isinstance(n.value.func.value, ast.Name) and n.value.func.attr in ("append", "extend",
                                                                                               "insert", "update"):
                    name = n.value.func.value.id
                elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "pop" and \
                        isinstance(n.func.value, ast.Name):   # (a tape popped in generated code read back)
                    name = n.func.value.id
                elif isinstance(n, (ast.Assign, ast.AugAssign)):
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                        if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                            name = t.value.id
                if name is not None and self.is_bound(name, scope):
                    cur = self.lookup_name(name, scope, n)
                    if isinstance(cur, Struct) and cur.kind in ("list", "dict"):
                        return True
        return False

    def is_bound(self, name, scope):
        sc = scope
        while sc is not None:
            if name in sc.vars:
                return True
            sc = sc.parent
        return False

    def mutate_container(self, name, cur, call, scope, out, stmt):
        """``lst.append(v)``, ``lst.extend(seq)``, ``d.update(...)`` on a container known now."""
        P = scope.parsed
        meth = call.func.attr
        args = [self.expr(a, scope, out) for a in call.args]
        kwargs = {k.arg: self.expr(k.value, scope, out) for k in call.keywords if k.arg}
        if isinstance(cur, RList):
            if meth == "append" and len(args) == 1 and not kwargs:
                return self.runtime_append(cur, args[0], scope, out, stmt)
            if meth == "extend" and len(args) == 1 and not kwargs:
                return self.runtime_extend(cur, args[0], scope, out, stmt)
            if meth in ("reverse", "clear") and not args and not kwargs:
                return self.runtime_reverse_or_clear(cur, meth, scope, out, stmt)
            raise error(P, stmt, f"'{name}.{meth}(...)' on a list whose length is only known when the function runs "
                                 "is not supported", "use append, extend, reverse or clear")
        if getattr(self, "cf_depth", 0) and self.is_outer_list(cur):
            raise error(P, stmt, f"'{name}.{meth}(...)' inside a loop over a runtime range or inside a branch on "
                                 "array values changes the container's length at run time, and funcgrad could not "
                                 "see that before the loop or branch (the list is reached through another name, "
                                 "or grown by a helper)",
                        f"append to '{name}' directly in the loop body" if cur.kind == "list" else
                        "give every key a value before the loop or branch")
        args = [self.snapshot(a, scope, out, stmt) for a in args]
        if cur.kind == "list" and meth == "append" and len(args) == 1:
            cur.items.append(args[0])
        elif cur.kind == "list" and meth == "extend" and len(args) == 1 and isinstance(args[0], Struct):
            cur.items.extend(args[0].values())
        elif cur.kind == "list" and meth == "insert" and len(args) == 2 and isinstance(args[0], Static):
            cur.items.insert(args[0].obj, args[1])
        elif cur.kind == "dict" and meth == "update" and (
                (len(args) == 1 and isinstance(args[0], Struct) and args[0].kind == "dict") or not args):
            # key by key, as d[k] = v: inside a loop or branch, a dict made before it changes through the runtime
            # names its items own (it was read at its old values on every iteration)
            for k, v in list((args[0].items if args else {}).items()) + list(kwargs.items()):
                self.set_leaf(cur, k, cur.items.get(k), v, scope, out, stmt)
        else:
            raise error(P, stmt, f"'{name}.{meth}(...)' is not supported on a {cur.kind} here",
                        "use append/extend on lists and update or item assignment on dicts")
        return None

    # ------------------------------------------------------------ control flow
    def known_condition(self, test, scope, rebound=()):
        """The truth value of the condition ``test`` when it is known now (``bool`` of the value Python
        computes), else None. Known are literals and names bound now to values fixed in the generated code
        (strings, None, flags: static arguments, module flags, ``b is None``), combined by comparisons,
        arithmetic, ``and``/``or``/``not``: nothing that calls the user's code or has an effect. A name in
        ``rebound`` (assigned in the loop or branch the condition sits in) may hold another value when the
        condition runs, so it is not known."""
        is_none_operand = {id(n.left) for n in ast_walk(test) if isinstance(n, ast.Compare) and len(n.ops) == 1
                           and isinstance(n.ops[0], (ast.Is, ast.IsNot))
                           and isinstance(n.comparators[0], ast.Constant) and n.comparators[0].value is None}
        for n in ast_walk(test):
            if not isinstance(n, _FOLDABLE):
                return None
            if isinstance(n, ast.Name):
                if n.id in rebound or n.id == INTERPRETED:   # (generated code's "run as Python": see control)
                    return None
                kind, val, _ = self.find_name(n.id, scope)
                if kind == "bound" and (isinstance(val, Static) and _simple(val.obj) or id(n) in is_none_operand):
                    continue   # `b is None` is decided now whatever b holds (expr does the same)
                if kind == "free" and isinstance(val, (bool, np.bool_, str, type(None))):
                    continue   # a module's or closure's flag: fixed in the generated code (capture)
                return None
        try:
            val = self.expr(test, scope, [])
            if isinstance(val, Static) and _simple(val.obj):
                return bool(val.obj)
        except Exception:   # it raises (1 / 0, '<' between a str and a number): that stays for when it runs
            pass
        return None

    def live(self, stmts, scope, rebound):
        """``stmts`` without the code that cannot run: an ``if`` whose condition is known now keeps only the
        branch taken, a ``while`` whose condition is known false disappears (control() drops the same
        code when it lowers it). The nodes are copies; the user's tree is never changed."""
        kept = []
        for st in stmts:
            if isinstance(st, ast.If):
                known = self.known_condition(st.test, scope, rebound)
                if known is not None:
                    kept.extend(self.live(st.body if known else st.orelse, scope, rebound))
                    continue
            if isinstance(st, ast.While) and self.known_condition(st.test, scope, rebound) is False:
                kept.extend(self.live(st.orelse, scope, rebound))   # while ... else: the else runs
                continue
            if isinstance(st, (ast.If, ast.For, ast.While)):
                st = copy.copy(st)
                st.body = self.live(st.body, scope, rebound)
                st.orelse = self.live(st.orelse, scope, rebound)
            kept.append(st)
        return kept

    def prepare_cf(self, stmts, scope, out, node):
        """Give every variable assigned in ``stmts`` one runtime name before a branch or loop. Code that cannot
        run is left out: a name it alone assigns stays unbound (reading it later is Python's
        UnboundLocalError), and a flag the structure pass sets there for a ``return``, ``break`` or
        ``continue`` keeps its constant value, so the code that tests the flag folds away too."""
        # names the branch or loop (its loop variable too) rebinds: conditions on them are not known before it
        rebound = set(_assigned(list(stmts) + ([node] if isinstance(node, ast.stmt) else []))) | \
            self.nonlocals_called(stmts, scope)
        stmts = self.live(stmts, scope, rebound)
        self.make_runtime_lists(stmts, scope, out, node)
        for name in _item_assigned(stmts):  # d["k"] = v inside: the container's leaves get runtime names
            cur = scope.vars.get(name)
            if isinstance(cur, Struct) and self._owned_structs.get((id(scope), name)) is not cur:
                new = self.own_struct(name, cur, scope, out, node)
                cur.items = new.items  # in place: other names bound to the container see the same leaves
                self._owned_structs[(id(scope), name)] = cur
        for name in list(_assigned(stmts)) + sorted(self.nonlocals_called(stmts, scope) - set(_assigned(stmts))):
            cur = scope.vars.get(name)
            if isinstance(cur, Dyn) and isinstance(cur.expr, ast.Name) and self.owns(cur.expr.id, name, scope):
                # rebound inside under the same name: containers made before keep the value it has now (only
                # x += v of an array known to be one writes into it instead, as NumPy does)
                if not (_is_array_spec(self._spec_of(cur.expr)) and _only_augmented(stmts, name)):
                    self.pin_holders(cur.expr.id, scope, out, node)
                continue
            if isinstance(cur, RList):   # its state is runtime names already
                continue
            if isinstance(cur, Struct):  # a tuple/dict of arrays: each leaf gets a runtime name of its own
                if self._owned_structs.get((id(scope), name)) is not cur:
                    scope.vars[name] = self.own_struct(name, cur, scope, out, node)
                continue
            if isinstance(cur, LocalFunction) or (isinstance(cur, Static) and not isinstance(
                    cur.obj, (int, float, complex, bool, np.number))):
                raise error(scope.parsed, node, f"'{name}' holds a {type(cur).__name__.lower()} value and is "
                                                f"reassigned inside a loop or branch",
                            "only arrays and numbers can change inside loops and branches; give the container "
                            "another name")
            outname = self.var_name(name, scope)
            if cur is not None:
                out.append(ast.copy_location(ast.Assign(targets=[ast.Name(outname, ast.Store())],
                                                        value=self.as_expr(cur, scope, node)), node))
            else:   # a name the loop or branch binds first: no value yet
                self.placeholders = getattr(self, "placeholders", set())
                self.placeholders.add(outname)
            scope.vars[name] = Dyn(ast.Name(outname, ast.Load()))

    def nonlocals_called(self, stmts, scope):
        """The variables of ``scope`` that functions defined here and called in ``stmts`` rebind with
        ``nonlocal`` (``def h(v): nonlocal t; t = t + v`` called in a loop rebinds ``t`` there)."""
        out = set()
        for s in stmts:
            for n in ast_walk(s):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):   # called, or handed to a helper
                    f = scope.vars.get(n.id)
                    if isinstance(f, LocalFunction):
                        out |= {v for v in declared_outer(f.node) if v in scope.vars}
        return out

    def own_struct(self, name, val, scope, out, node):
        """A copy of container ``val`` whose runtime leaves are names owned by variable ``name``
        (assigned from ``val``'s leaves now), so loops and branches can rebind them leaf by leaf."""
        def own(v, path):
            if isinstance(v, Struct):
                if v.kind == "dict":
                    items = {k: own(x, path + (k,)) for k, x in v.items.items()}
                else:
                    items = [own(x, path + (i,)) for i, x in enumerate(v.items)]
                if path:   # a container inside: the same object gets the runtime leaves, so every other name
                    v.items = items   # holding it (row = L[1] before the loop) sees them and what is written there
                    return v
                return Struct(v.kind, items, v.cls)
            if isinstance(v, Static) and not isinstance(v.obj, (int, float, complex, bool, np.number)) or \
                    isinstance(v, Static) and isinstance(v.obj, bool):
                return v  # None, strings, flags: fixed, and must stay the same
            if not isinstance(v, (Dyn, Static)):
                raise error(scope.parsed, node, f"'{name}' holds a function inside a container that changes in a "
                                                "loop or branch", "keep functions out of containers that change")
            outname = self.names.fresh(scope.prefix + name + "".join(f"_{_safe(str(k))}" for k in path),
                                       shown=shown_as(name, scope, path))
            self.owned_leaves.add(outname)
            expr = self.as_expr(v, scope, node)
            out.append(ast.copy_location(ast.Assign(targets=[ast.Name(outname, ast.Store())], value=expr), node))
            return Dyn(ast.Name(outname, ast.Load()))
        new = own(val, ())
        self._owned_structs[(id(scope), name)] = new
        return new

    def assign_struct(self, name, val, scope, out, stmt):
        """``name = <container>`` inside a loop or branch: rebind the owned leaves one by one."""
        cur = scope.vars.get(name)
        if cur is None or self._owned_structs.get((id(scope), name)) is not cur:
            scope.vars[name] = self.own_struct(name, val, scope, out, stmt)
            return
        val = self.snapshot(val, scope, out, stmt)  # the right side may read the leaves it replaces

        def bind(c, v, path):
            if isinstance(c, Struct):
                if not isinstance(v, Struct) or c.kind != v.kind or (
                        c.kind == "dict" and list(c.items) != list(v.items)) or len(c.values()) != len(v.values()):
                    raise error(scope.parsed, stmt, f"'{name}' is given containers of different structure in "
                                                    "a loop or on different branches ({} and {})".format(
                                                        _describe(c), _describe(v)),
                                "give it the same structure (the same keys, the same length) everywhere")
                for k, (cc, vv) in enumerate(zip(c.values(), v.values())):
                    bind(cc, vv, path + (k,))
                return
            if isinstance(c, Static):
                if not (isinstance(v, Static) and _same_static(v.obj, c.obj)):
                    raise error(scope.parsed, stmt, f"'{name}' holds {c.obj!r} in one place and another value in a "
                                                    "loop or branch", "use the same value, or an array")
                return
            out.append(ast.copy_location(ast.Assign(targets=[ast.Name(c.expr.id, ast.Store())],
                                                    value=self.as_expr(v, scope, stmt)), stmt))
        bind(cur, val, ())

    def owns(self, outname, name, scope):
        return getattr(self, "_owned", {}).get(outname) == ("var", id(scope), name)

    def delete_stmt(self, s, scope, out):
        """``del name``: the name is unbound from here on (reading it again is refused as Python raises
        UnboundLocalError); nothing runs. In a loop over a runtime range or a branch on array values, only a name
        first bound inside it (a temporary of the body)."""
        P = scope.parsed
        for t in s.targets:
            if isinstance(t, ast.Subscript):
                self.delete_item(t, scope, out)
                continue
            if not isinstance(t, ast.Name):
                raise error(P, t, "'del' of an attribute is not supported", "build a new value without it")
            if getattr(self, "cf_depth", 0) and self.bound_before_cf(t.id, scope):
                raise error(P, t, f"'del {t.id}' inside a loop over a runtime range or a branch on array values "
                                  f"of a variable bound before it is not supported", "let the variable go out of "
                                  "use instead")
            if t.id not in scope.vars:
                kind = "a variable of an enclosing function" if self.is_bound(t.id, scope) else "a name with no value"
                raise error(P, t, f"'del {t.id}': '{t.id}' is {kind} here (Python raises an error)", None)
            del scope.vars[t.id]
        return None

    def delete_item(self, t, scope, out):
        """``del lst[k]`` / ``del lst[a:b]`` / ``del d[key]`` of a container known now, the index or key known now;
        inside a loop or branch that runs at run time, only of a container made inside it (the items a container
        of the function has would otherwise depend on the trips)."""
        P = scope.parsed
        base = self.expr(t.value, scope, out)
        if not isinstance(base, Struct) or base.kind not in ("list", "dict"):
            what = "an array item" if isinstance(base, Dyn) else "an item of this value"
            raise error(P, t, f"'del' of {what} is not supported", "build a new value without it (np.delete, a "
                              "slice, a comprehension)")
        key = self.as_static_capture(self.expr(t.slice, scope, out))
        if not isinstance(key, Static):
            raise error(P, t, "'del' of a list or dict item needs an index or key known before the function runs",
                        None)
        if getattr(self, "cf_depth", 0) and not self.made_inside_cf(base):
            raise error(P, t, "'del' of an item of a list or dict inside a loop or branch that runs at run time is "
                              "supported only for a container made inside it",
                        "build the container inside the loop, or a new one without the item")
        try:
            del base.items[key.obj]
        except KeyError:
            raise error(P, t, f"KeyError: {key.obj!r} (Python raises it here)", None) from None
        except (IndexError, TypeError) as e:
            raise error(P, t, f"{type(e).__name__}: {e} (Python raises it here)", None) from None

    def raise_stmt(self, s, scope, out):
        """``raise E(...)``: where it is reached whatever the arrays hold (a check of shapes, sizes, flags or
        static arguments), it is raised now, as Python raises it when the function runs; under a branch on
        array values or in a loop over a runtime range, the generated code raises it when it gets there (a
        built-in exception whose arguments are known now: ``raise ValueError("x must be positive")``)."""
        P = scope.parsed
        if s.exc is None:
            raise error(P, s, "a bare 'raise' (re-raising) is not supported", "raise an exception object")
        obj = None
        e = s.exc
        if isinstance(e, ast.Call) and not any(isinstance(a, ast.Starred) for a in e.args):
            cls = self.expr(e.func, scope, out)   # an exception class called: made here from what is known now
            if isinstance(cls, Static) and isinstance(cls.obj, type) and issubclass(cls.obj, BaseException):
                args = [self.expr(a, scope, out) for a in e.args]
                kws = {k.arg: self.expr(k.value, scope, out) for k in e.keywords if k.arg}
                if all(isinstance(a, Static) for a in args + list(kws.values())) and len(kws) == len(e.keywords):
                    try:
                        obj = cls.obj(*[a.obj for a in args], **{k: v.obj for k, v in kws.items()})
                    except Exception:   # noqa: BLE001
                        obj = None
        else:
            exc = self.expr(e, scope, out)
            obj = exc.obj if isinstance(exc, Static) else None
        if isinstance(obj, type) and issubclass(obj, BaseException):
            try:
                obj = obj()
            except Exception:   # noqa: BLE001  (an exception class that needs arguments)
                obj = None
        if not isinstance(obj, BaseException):
            raise error(P, s, "the exception raised here depends on array values; funcgrad raises exceptions "
                              "whose type and message are known before the arrays' values are",
                        "put the value in a message built from shapes or constants, or check it outside")
        if not getattr(self, "cf_depth", 0):
            raise obj   # reached whatever the values: the user's own exception, as Python would raise it
        cls = type(obj)
        args = obj.args
        if getattr(builtins, cls.__name__, None) is not cls or not all(
                isinstance(a, (str, int, float, bool)) for a in args):
            raise error(P, s, f"raising {cls.__name__} under a branch on array values is supported for Python's "
                              "built-in exceptions with constant arguments only", f"raise a built-in exception "
                              "(ValueError, FloatingPointError...) with a message string")
        new = ast.Raise(exc=ast.Call(func=ast.Name(cls.__name__, ast.Load()),
                                     args=[ast.Constant(a) for a in args], keywords=[]), cause=None)
        for n in ast_walk(new):
            ast.copy_location(n, s)
        out.append(new)
        return None

    def control(self, s, scope, out):
        P = scope.parsed
        if isinstance(s, ast.If) and isinstance(s.test, ast.Name) and s.test.id == INTERPRETED and \
                not s.orelse and generated_file(P.filename):
            # generated code read back (forward over reverse, second order): a branch only Python runs (an
            # empty runtime list's buffer, lists.py) stays one, its test the global that Numba folds
            body = []
            self.block_cf(s.body, scope, body, dynamic=False)
            out.append(ast.copy_location(ast.If(test=ast.Name(INTERPRETED, ast.Load()), body=body or [ast.Pass()],
                                                orelse=[]), s))
            return None
        if isinstance(s, ast.If):
            test = self.expr(s.test, scope, out)
            if isinstance(test, Static):  # decided now (e.g. `if b is None`): only one branch exists
                self.block_cf(s.body if test.obj else s.orelse, scope, out, dynamic=False)
                return None
            self.prepare_cf(s.body + s.orelse, scope, out, s)
            body, orelse = [], []
            # an if whose branches both end the function (the structure pass moved the code after an if that
            # may return into both branches: two copies of it): what one copy binds is not the other's, so the
            # second starts from the names as they were (the result, __ret, still shared by both)
            terminal = _ends_function(s.body) and _ends_function(s.orelse)
            saved = dict(scope.vars) if terminal else None
            self.block_cf(s.body, scope, body)
            if terminal:
                result = scope.vars.get(RET)
                scope.vars.clear()
                scope.vars.update(saved)
                if result is not None:
                    scope.vars[RET] = result
            self.block_cf(s.orelse, scope, orelse)
            out.append(ast.copy_location(ast.If(test=self.as_expr(test, scope, s), body=body or [ast.Pass()],
                                                orelse=orelse), s))
            return None
        if isinstance(s, ast.While):
            seg = self.checkpointed_test(s.test, scope)   # while funcgrad.checkpointed(cond, segment=k):
            if seg is not None:
                s = ast.copy_location(ast.While(test=s.test.args[0], body=s.body, orelse=s.orelse), s)

            def mark(loop):
                if seg is not None:
                    A.put(loop, A.CHECKPOINT, seg)
                return loop
            if self.known_condition(s.test, scope) is False:   # `while 0 > 1:` never runs its body
                return None
            self.has_loops = True
            self.prepare_cf(s.body, scope, out, s)
            start = len(out)
            test = self.expr(s.test, scope, out)
            body = []
            if len(out) == start:   # the test is one expression: Python re-evaluates it before every iteration
                self.block_cf(s.body, scope, body)
                out.append(mark(ast.copy_location(ast.While(test=self.as_expr(test, scope, s),
                                                            body=body or [ast.Pass()], orelse=[]), s)))
                return None
            # the test needed statements (a conditional expression, an inlined helper): they run before the
            # loop and again at the end of every iteration (continue is a flag by now, and the one break left
            # ends the body, so nothing skips them), and the loop tests the value they leave
            flag = self.names.fresh("_while_test")
            out.append(ast.copy_location(ast.Assign(targets=[ast.Name(flag, ast.Store())],
                                                    value=self.as_expr(test, scope, s)), s))
            self.block_cf(s.body, scope, body)
            last = body[-1] if body else None
            if isinstance(last, ast.If) and not last.orelse and len(last.body) == 1 and \
                    isinstance(last.body[0], ast.Break):
                # the body ends with `if brk: break` (structure): the test runs again only when the loop goes on,
                # as in Python; after the break it would run once more, and the reverse pass (which takes the
                # break to end the body) replayed it in the broken iteration: its names were read unbound
                again_out = []
                again = self.expr(s.test, scope, again_out)
                again_out.append(ast.copy_location(ast.Assign(targets=[ast.Name(flag, ast.Store())],
                                                              value=self.as_expr(again, scope, s)), s))
                goes_on = ast.copy_location(ast.If(test=ast.UnaryOp(op=ast.Not(), operand=copy.deepcopy(last.test)),
                                                   body=again_out, orelse=[]), s)
                for n in ast_walk(goes_on):
                    if isinstance(n, (ast.stmt, ast.expr)) and not hasattr(n, "lineno"):
                        ast.copy_location(n, s)
                body.insert(len(body) - 1, goes_on)
            else:
                again = self.expr(s.test, scope, body)
                body.append(ast.copy_location(ast.Assign(targets=[ast.Name(flag, ast.Store())],
                                                         value=self.as_expr(again, scope, s)), s))
            out.append(mark(ast.copy_location(ast.While(test=ast.Name(flag, ast.Load()), body=body, orelse=[]), s)))
            return None
        if isinstance(s, ast.For):
            return self.for_loop(s, scope, out)
        if isinstance(s, ast.Break):
            out.append(ast.copy_location(ast.Break(), s))
            return None
        raise error(P, s, f"unsupported statement '{type(s).__name__}'", None)

    def runtime_item_loop(self, s, it, scope, out):
        """``for v in items:`` over a list or tuple of two or more arguments' arrays of one dtype and rank that
        are not differentiated, as ``for i in range(n): v = items[i]`` (``pick``): the body is transformed and
        compiled once, whatever the list's length. True when it did so."""
        if not (isinstance(it, Struct) and it.kind in ("list", "tuple") and isinstance(s.target, ast.Name)):
            return False
        items = it.values()
        if len(items) < 2 or not all(isinstance(v, Dyn) and isinstance(v.expr, ast.Name) for v in items):
            return False
        if self.builds_containers(s.body, scope):   # items appended per step may differ in shape: written out
            return False
        specs = [self.param_specs.get(v.expr.id) for v in items]
        if specs[0] is None or specs[0][0] != "a" or any(sp != specs[0] for sp in specs) or \
                any(v.expr.id in self.param_diff for v in items):
            return False
        self.has_loops = True
        self.prepare_cf([ast.Assign(targets=[s.target], value=ast.Constant(0))] + s.body, scope, out, s)
        idx = self.names.fresh("_item")
        body = []
        self.enter_cf(scope)
        try:
            val = items[-1]
            for k in range(len(items) - 2, -1, -1):
                cond = Dyn(ast.Compare(left=ast.Name(idx, ast.Load()), ops=[ast.Eq()], comparators=[ast.Constant(k)]))
                val = self.call_prim(lookup(pick), [cond, items[k], val], {}, scope, body, s)
            self.assign(s.target, val, scope, body, s)
            ret = self.block(s.body, scope, body)
        finally:
            self.leave_cf()
        if ret is not None:  # pragma: no cover - structure() removed returns from loops
            raise error(scope.parsed, s, "'return' inside a loop", None)
        rng = ast.Call(func=ast.Name("range", ast.Load()), args=[ast.Constant(len(items))], keywords=[])
        out.append(ast.copy_location(ast.For(target=ast.Name(idx, ast.Store()), iter=rng, body=body or [ast.Pass()],
                                             orelse=[]), s))
        return True

    def block_cf(self, stmts, scope, out, dynamic=True):
        if not dynamic:
            ret = self.block(stmts, scope, out)
        else:
            self.enter_cf(scope)
            try:
                ret = self.block(stmts, scope, out)
            finally:
                self.leave_cf()
        if ret is not None:  # pragma: no cover - structure() removed returns from branches
            raise error(scope.parsed, stmts[-1], "'return' inside a branch or loop", None)

    def checkpointed_test(self, test, scope):
        """The segment length (0: the default) when ``test`` is ``funcgrad.checkpointed(cond, segment=k)``, the
        test of a checkpointed while loop; else None."""
        if not (isinstance(test, ast.Call) and isinstance(test.func, (ast.Name, ast.Attribute))):
            return None
        try:
            fval = self.expr(test.func, scope, [])
        except Exception:   # not a name funcgrad knows: the call itself reports it
            return None
        if not (isinstance(fval, Static) and fval.obj is checkpointed):
            return None
        seg = [k.value for k in test.keywords if k.arg == "segment"]
        seg = self.expr(seg[0], scope, []) if seg else Static(None)
        if len(test.args) != 1 or any(k.arg != "segment" for k in test.keywords) or not isinstance(seg, Static) \
                or not (seg.obj is None or (isinstance(seg.obj, (int, np.integer)) and not isinstance(seg.obj, bool)
                                            and seg.obj >= 1)):
            raise error(scope.parsed, test, "funcgrad.checkpointed(cond, segment=k) takes one condition and k a "
                                            "positive int known when the function is transformed", None)
        return int(seg.obj or 0)

    def for_loop(self, s, scope, out):
        P = scope.parsed
        it = self.expr(s.iter, scope, out)
        if isinstance(it, RList):   # the rows of its array
            it = self.runtime_list_array(it, scope, out, s.iter)
        # a list/tuple argument of same-kind arrays not differentiated (sequences of different lengths): a loop
        # that runs, reading item i, instead of the body written out once per item (compile time grows with it)
        if self.runtime_item_loop(s, it, scope, out):
            return None
        # a loop over a container known now (a list of layers, a tuple of params): unrolled
        if isinstance(it, (Struct, Static, _DictView)) and not isinstance(it, _Range):
            items = self.static_items(it, s, scope)   # of a dict: its keys; of d.items(): (key, value) pairs
            if _contains(s.body, (ast.Break,)) or any(isinstance(n, ast.Name) and n.id.startswith("__brk")
                                                        for n in ast_walk(ast.Module(body=s.body, type_ignores=[]))):
                raise error(P, s, "'break' in a loop over a Python list/tuple is not supported",
                            "loop over range(len(...)) instead")
            for v in items:
                self.assign(s.target, v, scope, out, s)
                self.block(s.body, scope, out)
            return None
        if isinstance(it, _Iter) and _known_now(it):
            # zip/enumerate of containers known now (enumerate(zip(list, list)) too): unrolled
            pairs = self.static_items(it, s, scope)
            for v in pairs:
                self.assign(s.target, v, scope, out, s)
                self.block(s.body, scope, out)
            return None
        if isinstance(it, _Range) and all(isinstance(a, ast.Constant) for a in it.args) and \
                self.builds_containers(s.body, scope):
            if it.checkpoint is not None:
                raise error(P, s, "a checkpointed loop cannot build a list or dict (such a loop is unrolled)",
                            "preallocate an array (np.zeros) and write into it, or loop over plain range(...)")
            # a constant range whose body grows or sets items of a list/dict: run it now, unrolled
            rng = range(*[a.value for a in it.args])
            if len(rng) > 1000:
                raise error(P, s, f"this loop builds a list or dict over {len(rng)} iterations; loops that change "
                                  "a container are unrolled, up to 1,000 iterations",
                            "preallocate an array (np.zeros) and write into it instead")
            if _contains(s.body, (ast.Break,)) or any(isinstance(n, ast.Name) and n.id.startswith("__brk")
                                                        for n in ast_walk(ast.Module(body=s.body, type_ignores=[]))):
                raise error(P, s, "'break' (or 'return') in a loop that builds a list or dict is not supported",
                            "build the list first, then search it")
            for i in rng:
                self.assign(s.target, Static(i), scope, out, s)
                self.block(s.body, scope, out)
            return None
        self.has_loops = True
        if isinstance(it, _Range):
            rng = ast.Call(func=ast.Name("range", ast.Load()), args=it.args, keywords=[])
            target = s.target
            if not isinstance(target, ast.Name):
                raise error(P, s, "a range loop needs a single loop variable", None)
            self.prepare_cf([ast.Assign(targets=[target], value=ast.Constant(0))] + s.body, scope, out, s)
            tname = scope.vars[target.id].expr.id
            body = []
            self.block_cf(s.body, scope, body)
            loop = ast.copy_location(ast.For(target=ast.Name(tname, ast.Store()), iter=rng, body=body or [ast.Pass()],
                                             orelse=[]), s)
            if it.checkpoint is not None:   # funcgrad.checkpoint_range
                A.put(loop, A.CHECKPOINT, it.checkpoint)
            out.append(loop)
            return None
        # enumerate / zip / rows of an array: a range loop over the shortest length
        inner_zip = isinstance(it, _Iter) and it.fn is enumerate and isinstance(it.args[0], _Iter) \
            and it.args[0].fn is zip
        if inner_zip:  # enumerate(zip(a, b, ...))
            seqs = it.args[0].args
        elif isinstance(it, _Iter):
            seqs = it.args if it.fn is zip else [it.args[0]]
        elif isinstance(it, Dyn):
            seqs = [it]
        else:
            raise error(P, s, "cannot loop over this value", "loop over range(...), an array, enumerate or zip")
        # Python evaluates the iterable once: a name the body rebinds (`for r in a: a = ...`) still iterates
        # the array it held when the loop started
        rebound = {nm for st in s.body for n in ast_walk(st) if isinstance(n, (ast.Assign, ast.For))
                   for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) for nm in _target_names(t)}
        snap = []
        for q in seqs:
            parts = self._range_parts(q) if isinstance(q, _Range) else None
            if parts is not None and not isinstance(parts[0], ast.Constant):
                # range(start, ...) is evaluated once: the body may rebind what start was computed from
                held = self.names.fresh(scope.prefix + "_start")
                out.append(ast.copy_location(ast.Assign(targets=[ast.Name(held, ast.Store())], value=parts[0]), s))
                q = _Range([ast.Name(held, ast.Load()), parts[1], ast.Constant(parts[2])])
            if isinstance(q, Dyn) and not isinstance(q.expr, ast.Constant) and (
                    not isinstance(q.expr, ast.Name) or any(
                        isinstance(v, Dyn) and isinstance(v.expr, ast.Name) and v.expr.id == q.expr.id
                        for k, v in self._visible_vars(scope).items() if k in rebound)):
                held = self.names.fresh(scope.prefix + "_iterated")
                out.append(ast.copy_location(ast.Assign(targets=[ast.Name(held, ast.Store())], value=q.expr), s))
                q = Dyn(ast.Name(held, ast.Load()))
            snap.append(q)
        seqs = snap
        lens = []
        for q in seqs:
            if isinstance(q, Struct):
                lens.append(ast.Constant(len(q.values())))
            elif isinstance(q, _Range):   # Python's len(range(...)), computed before the loop
                if self._range_parts(q) is None:
                    raise error(P, s, "range() with a step computed at run time inside zip/enumerate is not "
                                      "supported", "index with the loop counter")
                lens.append(self.as_expr(self.range_length(q, scope, out, s), scope, s))
            else:
                lens.append(ast.Subscript(value=ast.Attribute(value=self.as_expr(q, scope, s), attr="shape",
                                                              ctx=ast.Load()), slice=ast.Constant(0), ctx=ast.Load()))
        n = lens[0] if len(lens) == 1 else ast.Call(func=ast.Name("min", ast.Load()), args=lens, keywords=[])
        idx = self.names.fresh("_i")
        self.prepare_cf(s.body, scope, out, s)
        for t in _target_names(s.target):
            if t not in scope.vars or not isinstance(scope.vars[t], Dyn):
                self.prepare_cf([ast.Assign(targets=[ast.Name(t, ast.Store())], value=ast.Constant(0))], scope, out, s)
        body = []
        self.enter_cf(scope)
        try:
            ival = Dyn(ast.Name(idx, ast.Load()))
            elems = [self.subscript_dyn(q, ival, scope, body, s) for q in seqs]
            count = ival if not (isinstance(it, _Iter) and it.start is not None) else \
                self.binop(ast.Add(), ival, it.start, scope, body, s)   # enumerate(a, start)
            if inner_zip:
                val = Struct("tuple", [count, Struct("tuple", elems)])
            elif isinstance(it, _Iter) and it.fn is enumerate:
                val = Struct("tuple", [count, elems[0]])
            elif isinstance(it, _Iter):
                val = Struct("tuple", elems)
            else:
                val = elems[0]
            self.assign(s.target, val, scope, body, s)
            self.block(s.body, scope, body)
        finally:
            self.leave_cf()
        rng = ast.Call(func=ast.Name("range", ast.Load()), args=[n], keywords=[])
        out.append(ast.copy_location(ast.For(target=ast.Name(idx, ast.Store()), iter=rng, body=body, orelse=[]), s))
        return None

    @staticmethod
    def _visible_vars(scope):
        seen = {}
        while scope is not None:
            for k, v in scope.vars.items():
                seen.setdefault(k, v)
            scope = scope.parent
        return seen

    @staticmethod
    def _range_parts(q):
        """``(start, stop, step)`` of a range's argument expressions (the step a nonzero int constant), else None."""
        args = list(q.args)
        start, stop, step = ((ast.Constant(0), args[0], ast.Constant(1)) if len(args) == 1 else
                             (args[0], args[1], ast.Constant(1)) if len(args) == 2 else tuple(args))
        if not (isinstance(step, ast.Constant) and type(step.value) is int and step.value != 0):
            return None
        return start, stop, step.value

    def subscript_dyn(self, q, ival, scope, out, node):
        if isinstance(q, _Range):   # the i-th item of a range: start + i * step
            start, _, step = self._range_parts(q)
            at = ival if step == 1 else self.binop(ast.Mult(), ival, Static(step), scope, out, node)
            if isinstance(start, ast.Constant) and start.value == 0:
                return at
            first = Static(start.value) if isinstance(start, ast.Constant) else Dyn(clone(start))
            return self.binop(ast.Add(), first, at, scope, out, node)
        if isinstance(q, Struct):
            raise error(scope.parsed, node, "zip/enumerate over a Python list mixed with arrays is not supported",
                        "stack the list into an array first")
        return self.call_prim(lookup_getitem(), [q, ival], {}, scope, out, node)

    def assign(self, target, val, scope, out, stmt):
        P = scope.parsed
        if isinstance(target, ast.Name) and target.id in getattr(scope, "nonlocals", ()):
            # nonlocal x; x = ...: the enclosing function's variable. Inside a loop or branch that runs at run
            # time, only of a function whose call is straight-line there (it was bound inside it)
            owner = scope.parent
            while owner is not None and target.id not in owner.vars:
                owner = owner.parent
            if owner is None:
                raise error(P, stmt, f"no binding for nonlocal '{target.id}' found", None)
            cur = owner.vars.get(target.id)
            prepared = isinstance(cur, Dyn) and isinstance(cur.expr, ast.Name) and self.owns(cur.expr.id, target.id,
                                                                                            owner)
            if getattr(self, "cf_depth", 0) and not self.scope_inside_cf(owner) and not prepared:
                raise error(P, stmt, f"'nonlocal {target.id}' rebinds a variable from inside a loop or branch "
                                     "that runs at run time (the function is called there)",
                            "return the new value from the function and assign it in the loop")
            return self.assign(target, val, owner, out, stmt)
        if isinstance(target, ast.Name):
            fixed = None
            if getattr(self, "cf_depth", 0) and not isinstance(val, (Dyn, VSElement)) and self.scope_inside_cf(scope):
                # a helper's (or comprehension's) name, inside one iteration: bound in order, as outside loops
                scope.vars[target.id] = val
                return
            if getattr(self, "cf_depth", 0) and isinstance(val, Static) and isinstance(
                    val.obj, (int, float, complex, bool, np.number)):
                if scope.fdef is not None and not self.bound_before_cf(target.id, scope) and \
                        self.binding_count(scope.fdef, target.id) == 1:
                    fixed = val   # bound here only: the same number in every iteration
                val = Dyn(ast.Constant(val.obj.item() if isinstance(val.obj, np.generic) else val.obj))
            elif getattr(self, "cf_depth", 0) and isinstance(val, Struct):
                if val.kind in ("list", "dict") and any(_holds(v, val) for k, v in self._visible_vars(scope).items()
                                                        if k != target.id):
                    # M = L of a list or dict: one object under two names, so a change through either shows in
                    # both (Python's). Followed when M is new in this loop or branch; a name that held another
                    # value before it could hold either afterwards, which the code cannot follow
                    if self.bound_before_cf(target.id, scope):
                        raise error(P, stmt, f"'{_user_name(target.id)}' takes a list or dict another name holds, "
                                             "inside a loop or branch, after holding another value: two names for "
                                             "one container are followed only where the name is new",
                                    f"give the container one name, or copy it ({_user_name(target.id)} = "
                                    "list(...) / dict(...))")
                    scope.vars[target.id] = val
                    return
                self.assign_struct(target.id, val, scope, out, stmt)
                return
            elif getattr(self, "cf_depth", 0) and not isinstance(val, Dyn) and isinstance(
                    val, (Static, LocalFunction, RList, Obj)) and not self.bound_before_cf(target.id, scope):
                # a name this loop or branch binds first to a value known now (a dict's key in `for k in d:`
                # written out inside a runtime loop, a lambda made there) or to a list grown at run time (a
                # comprehension over an array, made in this iteration): bound as it is; one that held a value
                # before could hold either afterwards, refused below
                scope.vars[target.id] = val
                return
            elif getattr(self, "cf_depth", 0) and not isinstance(val, Dyn):
                raise error(P, stmt, f"'{_user_name(target.id)}' is bound to a "
                                     f"{'function' if callable(getattr(val, 'obj', None)) or isinstance(val, LocalFunction) else 'value'}"
                                     " that cannot change inside a loop or branch",
                            "only arrays, numbers and containers of them can be assigned inside loops and branches")
            if isinstance(val, VSElement) and getattr(self, "cf_depth", 0):
                raise self.refuse_vspace(val, scope, stmt, "assigns, inside a loop or branch,")
            if isinstance(val, Dyn):
                self.unfix(scope, target.id)   # its runtime variable again, for var_name
                outname = self.var_name(target.id, scope)
                cur = scope.vars.get(target.id)
                if isinstance(cur, Dyn) and isinstance(cur.expr, ast.Name) and cur.expr.id == outname and not (
                        isinstance(stmt, ast.AugAssign) and _is_array_spec(self._spec_of(cur.expr))):
                    # a new value under the same name (x += v of an array known to be one writes into it,
                    # as NumPy does: containers holding it see that)
                    self.pin_holders(outname, scope, out, stmt)
                self.remember_spec(outname, val.expr)
                a = ast.Assign(targets=[ast.Name(outname, ast.Store())], value=val.expr)
                ast.copy_location(a, stmt)
                out.append(a)
                scope.vars[target.id] = (VSElement(ast.Name(outname, ast.Load()), val.cls) if isinstance(val, VSElement)
                                         else Dyn(ast.Name(outname, ast.Load())))
                if fixed is not None:
                    self.keep_fixed(scope, target.id, fixed, scope.vars[target.id])
            else:
                if isinstance(val, Struct):
                    self.name_leaves(val, scope, out, stmt)
                scope.vars[target.id] = val
            return
        if isinstance(target, (ast.Tuple, ast.List)):
            stars = [i for i, t in enumerate(target.elts) if isinstance(t, ast.Starred)]
            if stars:   # first, *rest = seq: the starred name gets a list of what the others leave
                if len(stars) > 1:
                    raise error(P, target, "multiple starred expressions in assignment", None)
                k = stars[0]
                n_after = len(target.elts) - k - 1
                items = self.static_items(val, stmt, scope) if not isinstance(val, Dyn) else None
                if items is None and isinstance(val, Dyn) and not _is_metadata(val.expr):
                    return self.unpack_array_starred(target, k, n_after, val, scope, out, stmt)
                if items is None:
                    raise error(P, target, "starred assignment from this value is not supported",
                                "index it instead (x[0], x[1:])")
                if len(items) < len(target.elts) - 1:
                    raise error(P, stmt, f"not enough values to unpack (expected at least {len(target.elts) - 1}, "
                                         f"got {len(items)})", None)
                rest = Struct("list", list(items[k:len(items) - n_after]))
                vals = list(items[:k]) + [rest] + list(items[len(items) - n_after:])
                for t, v in zip(target.elts, vals):
                    self.assign(t.value if isinstance(t, ast.Starred) else t, v, scope, out, stmt)
                return
            items = self.unpack(val, len(target.elts), scope, out, stmt)
            for t, v in zip(target.elts, items):
                self.assign(t, v, scope, out, stmt)
            return
        if isinstance(target, ast.Subscript):
            base = self.expr(target.value, scope, out)
            if isinstance(base, Struct) and base.kind in ("list", "dict"):
                return self.set_item(base, target, val, scope, out, stmt)
            if isinstance(base, RList):
                key = self.as_static_capture(self.expr(target.slice, scope, out))
                return self.runtime_set_item(base, key, val, scope, out, stmt)
            if not isinstance(base, Dyn) or not isinstance(base.expr, ast.Name):
                raise error(P, target, "in-place assignment is only supported on array variables",
                            "build a new array (np.where, np.concatenate) instead")
            idx = self.index(target.slice, scope, out)
            v = self.as_expr(val, scope, target)
            a = ast.Assign(targets=[ast.Subscript(value=ast.Name(base.expr.id, ast.Load()), slice=idx, ctx=ast.Store())],
                           value=v)
            ast.copy_location(a, stmt)
            out.append(a)
            return
        if isinstance(target, ast.Attribute):
            base = self.expr(target.value, scope, out)
            if isinstance(base, Obj):   # self.w = w in __init__, obj.n = 3: an object made inside the function
                return self.set_attribute(base, target.attr, val, scope, out, stmt)
            raise error(P, target, "assigning to an attribute is not supported in a pure function",
                        "return a new value (NamedTuple._replace is not supported either: build a new one)")
        raise error(P, target, "unsupported assignment target", None)

    def unpack_array_starred(self, target, k, n_after, val, scope, out, stmt):
        """``first, *rest, last = a`` of an array: its rows, ``rest`` a list of those between (its length known
        when the function runs); too few rows raise ValueError as Python does."""
        arr = self.snapshot(val, scope, out, stmt)
        need = len(target.elts) - 1
        if need:
            n = ast.Subscript(value=ast.Attribute(value=self.as_expr(arr, scope, stmt), attr="shape", ctx=ast.Load()),
                              slice=ast.Constant(0), ctx=ast.Load())
            exc = ast.Call(func=ast.Name("ValueError", ast.Load()), args=[ast.Constant(
                f"not enough values to unpack (expected at least {need})")], keywords=[])
            check = ast.If(test=ast.Compare(left=n, ops=[ast.Lt()], comparators=[ast.Constant(need)]),
                           body=[ast.Raise(exc=exc, cause=None)], orelse=[])
            for node in ast_walk(check):
                ast.copy_location(node, stmt)
            out.append(check)
        rows = self.call_prim(lookup_getitem(), [arr, Static(slice(k, -n_after if n_after else None))], {}, scope,
                              out, stmt)
        vals = [self.call_prim(lookup_getitem(), [arr, Static(i)], {}, scope, out, stmt) for i in range(k)]
        vals.append(self.runtime_list_of_rows(rows, scope, out, stmt))
        vals += [self.call_prim(lookup_getitem(), [arr, Static(i - n_after)], {}, scope, out, stmt)
                 for i in range(n_after)]
        for t, v in zip(target.elts, vals):
            self.assign(t.value if isinstance(t, ast.Starred) else t, v, scope, out, stmt)

    def set_item(self, base, target, val, scope, out, stmt):
        """``d[key] = v`` / ``lst[i] = v`` on a container known now (the container is updated in place, so
        every name bound to it sees the change, as in Python)."""
        P = scope.parsed
        key = self.as_static_capture(self.expr(target.slice, scope, out))
        if not isinstance(key, Static) and base.kind == "list" and base.items:
            # an index known when the code runs: every item picks the new value where its position is the index
            idx = self.runtime_position(base, key, scope, out, target)
            val = self.snapshot(val, scope, out, stmt)
            for k, old in enumerate(list(base.items)):
                new = self.pick_tree(_position_is(idx, k), val, old, base, scope, out, stmt)
                self.set_leaf(base, k, old, new, scope, out, stmt)
            return
        if not isinstance(key, Static):
            raise error(P, target, "a list or dict can only be indexed by a value known before the function runs "
                                   "(a constant, a Python loop variable over a list or range)",
                        "use an array and index it with the runtime value instead")
        k = key.obj
        val = self.held(val, scope, out, stmt)
        if base.kind == "list":
            try:
                old = base.items[k]
            except (IndexError, TypeError):
                raise error(P, target, f"list index {k!r} out of range", None) from None
        else:
            old = base.items.get(k)
        self.set_leaf(base, k, old, val, scope, out, stmt)

    def set_leaf(self, base, k, old, val, scope, out, stmt):
        """Item ``k`` of container ``base`` (holding ``old``, or None) becomes ``val``."""
        if getattr(self, "cf_depth", 0) and not self.made_inside_cf(base):
            # inside a loop or branch: the leaf already has a runtime name owned by the container's variable
            if isinstance(old, Dyn) and isinstance(old.expr, ast.Name) and old.expr.id in self.owned_leaves:
                out.append(ast.copy_location(ast.Assign(targets=[ast.Name(old.expr.id, ast.Store())],
                                                        value=self.as_expr(val, scope, stmt)), stmt))
                return
            if isinstance(old, Struct) and isinstance(val, Struct) and old.kind == val.kind and (
                    list(old.items) == list(val.items) if old.kind == "dict" else len(old.items) == len(val.items)):
                # d["a"] = {"b": ...}: a container of the same shape, leaf by leaf (the right side read first)
                val = self.snapshot(val, scope, out, stmt)
                keys = list(old.items) if old.kind == "dict" else range(len(old.items))
                for k2 in keys:
                    self.set_leaf(old, k2, old.items[k2], val.items[k2], scope, out, stmt)
                return
            if isinstance(old, Static) and isinstance(val, Static) and _same_static(old.obj, val.obj):
                return   # (a flag or None kept in the container, given again)
            if isinstance(old, Struct):
                raise error(scope.parsed, stmt, "this item of a list or dict is given a container of another "
                                                "structure inside a loop or branch that runs at run time",
                            "give it the same structure (the same keys, the same length) everywhere")
            if old is not None:   # set through a name the loop's set-up did not see (an alias, a nested container)
                raise error(scope.parsed, stmt, "this item of a list or dict is set inside a loop or branch that runs "
                                                "at run time through a name that is not the container's own (another "
                                                "name for it, or a container inside another)",
                            "set it through the name the container was made under (d['a']['b'] = ...)")
            raise error(scope.parsed, stmt, "this item of a list or dict is set inside a loop or branch that runs "
                                            "at run time, but it was not set before the loop or branch",
                        "give the item a value before the loop or branch")
        base.items[k] = val

    def unpack(self, val, n, scope, out, node):
        if isinstance(val, RList):
            self.refuse_runtime_list(val, "unpacking", scope, node, "index it instead")
        if isinstance(val, Struct):
            items = val.values()
            if len(items) != n:
                raise error(scope.parsed, node, f"cannot unpack {len(items)} values into {n} names", None,
                            cls=UnsupportedSyntaxError)
            return items
        if isinstance(val, Static) and isinstance(val.obj, (tuple, list)):   # (a list: a global's, read now)
            if len(val.obj) != n:
                raise error(scope.parsed, node, f"cannot unpack {len(val.obj)} values into {n} names", None)
            return [Static(v) for v in val.obj]
        if isinstance(val, Dyn):
            # unpack a runtime tuple (e.g. x.shape) or the rows of an array
            return [Dyn(ast.Subscript(value=copy.deepcopy(val.expr), slice=ast.Constant(i), ctx=ast.Load()))
                    for i in range(n)] if not _is_array_producing(val.expr) else [
                self.call_prim(lookup_getitem(), [val, Static(i)], {}, scope, out, node) for i in range(n)]
        raise error(scope.parsed, node, "cannot unpack this value", "unpack a tuple")

    def var_name(self, name, scope):
        key = ("var", id(scope), name)
        cur = scope.vars.get(name)
        if isinstance(cur, Dyn) and isinstance(cur.expr, ast.Name) and getattr(self, "_owned", {}).get(
                cur.expr.id) == key:
            return cur.expr.id
        outname = self.names.fresh(scope.prefix + name, shown=shown_as(name, scope))
        self._owned = getattr(self, "_owned", {})
        self._owned[outname] = key
        return outname


def _only_augmented(stmts, name):
    """Whether every binding of ``name`` in ``stmts`` is an augmented assignment (``name += v``)."""
    for s in stmts:
        for n in ast_walk(s):
            if isinstance(n, (ast.Assign, ast.AnnAssign, ast.For, ast.comprehension, ast.NamedExpr, ast.With)):
                targets = n.targets if isinstance(n, ast.Assign) else [getattr(n, "target", None)]
                for t in targets:
                    if t is not None and any(isinstance(m, ast.Name) and m.id == name for m in ast_walk(t)):
                        return False
            elif isinstance(n, (ast.FunctionDef, ast.Lambda)) and getattr(n, "name", None) == name:
                return False
    return True


def _is_array_spec(sp):
    """Whether a leaf spec is an array of at least one dimension (``x += v`` writes into it)."""
    return isinstance(sp, tuple) and len(sp) >= 3 and sp[0] == "a" and isinstance(sp[2], int) and sp[2] >= 1


def _same_static(a, b):
    """Whether two values known now are the same (``None``, a flag, a string; arrays: only the same object)."""
    try:
        return a is b or bool(a == b)
    except Exception:   # noqa: BLE001  (arrays compared elementwise have no single truth value)
        return False


def _holds(v, container):
    """Whether ``v`` is ``container`` or holds it (inside lists, tuples and dicts)."""
    if v is container:
        return True
    return isinstance(v, Struct) and any(_holds(x, container) for x in v.values())


def _is_reference(e):
    """A name or a dotted name (``np.put_along_axis``): reading it twice has no effect."""
    while isinstance(e, ast.Attribute):
        e = e.value
    return isinstance(e, ast.Name)


_FUNCGRAD_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


def _funcgrad_definition(filename):
    """True for a file of funcgrad's own (a definition over primitives inlined where generated code read back
    calls its kernel): its asserts are refusals."""
    return isinstance(filename, str) and os.path.abspath(filename).startswith(_FUNCGRAD_DIR)


def _ends_function(stmts):
    """Whether ``stmts`` (a branch after the structure pass) end by setting the function's result."""
    last = stmts[-1] if stmts else None
    if isinstance(last, ast.Assign) and len(last.targets) == 1 and isinstance(last.targets[0], ast.Name):
        return last.targets[0].id == RET
    if isinstance(last, ast.If):
        return _ends_function(last.body) and _ends_function(last.orelse)
    return False
