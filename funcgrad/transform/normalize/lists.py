"""Lists whose length is only known when the function runs.

A list the user appends to inside a loop over a runtime range (``for t in range(len(ts) - 1)``), a
``while`` loop or a branch on array values cannot be a container known now (:class:`Struct`): its
length depends on the data. Such a list becomes a :class:`RList`: the first ``count`` rows of a buffer
array, both runtime names. Before the loop or branch the list's items so far are stacked into the
buffer; each ``append`` writes a row (the buffer doubles when full, so appends cost O(1) amortized);
reading the list reads those rows. All of it is in-place writes, ``np.concatenate`` and indexing, which
the later passes differentiate as any user code, compiled whole by Numba or not.

So every element must have the same shape (a list built in a loop nearly always does: NumPy's
``np.stack``/``np.array`` of it needs it too). Elements may differ in dtype: an item of a wider dtype (a
float after ints) widens the buffer first (``list_promote``), as NumPy's stacking of the list would; compiled
whole, the buffer's type must stay one, so Numba refuses it and ``auto`` runs it as Python. What NumPy does with such a list it does with the
stacked array (``np.stack(lst)``, ``np.array(lst)``, ``np.sum(lst)``, ``sum(lst)``, ``len(lst)``,
``lst[i]``, ``for v in lst``, ``zip(lst, ...)``); Python's list arithmetic (``lst + other``) and
returning the list itself are refused at the user's line.

Comprehensions over runtime values (``[f(x[k]) for k in range(n)]``, ``sum(g(r) for r in rows)``) are
lowered the same way: a runtime loop appending to such a list.
"""
from __future__ import annotations

import ast
import copy
import os
from dataclasses import dataclass

import numpy as np

from ...ops.numpy_shape import join_rows, list_promote, tape_promote
from ...ops.registry import lookup
from ..fence import error
from ..values import Dyn, Static, Struct
from ...kernels.base import INTERPRETED
from .common import _SCOPE_SERIAL, _Iter, _Range, generated_file, lookup_getitem
from ..astutil import ast_walk, clone


@dataclass
class RList:
    """A list whose length is known when the function runs: rows ``[:count]`` of the array ``buf``."""
    buf: str            # runtime name of the buffer array (one row per element)
    count: str          # runtime name of the number of elements
    name: str           # the user's name for it, for messages
    allocated: bool     # the buffer exists before the first append (the list had items when it became one)


_GROWERS = ("append", "extend")


@dataclass
class RListPop:
    """``lst.pop`` of a :class:`RList` or of a list known now (a ``Struct``), called next."""
    rl: object


# NumPy functions that take the list as a sequence of arrays
_SEQUENCE_FUNCTIONS = {np.stack, np.array, np.asarray, np.asanyarray, np.concatenate}
# np.vstack(lst) and friends of a list grown at run time: its buffer reshaped or transposed (``join_rows``)
_ROW_STACKS = {np.vstack: "vstack", np.hstack: "hstack", np.column_stack: "column_stack"}
if hasattr(np, "row_stack"):
    _ROW_STACKS[np.row_stack] = "vstack"


def grown_lists(stmts):
    """Names of lists grown in ``stmts`` (``name.append(...)``, ``name.extend(...)``, ``name += [...]``), in order;
    nested function definitions are not looked into."""
    names = []

    def visit(n):
        if isinstance(n, (ast.FunctionDef, ast.Lambda, ast.AsyncFunctionDef, ast.ClassDef)):
            return
        name = None
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Attribute) \
                and isinstance(n.value.func.value, ast.Name) and n.value.func.attr in _GROWERS:
            name = n.value.func.value.id
        elif isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add) and isinstance(n.target, ast.Name):
            name = n.target.id
        if name is not None and name not in names:
            names.append(name)
        for c in ast.iter_child_nodes(n):
            visit(c)

    for s in stmts:
        visit(s)
    return names


def _struct_lists(val, acc, containers):
    """Ids of the lists (``acc``) and of the lists and dicts (``containers``) in ``val``."""
    if isinstance(val, Struct):
        if val.kind == "list":
            acc.add(id(val))
        if val.kind in ("list", "dict"):
            containers.add(id(val))
        for v in val.values():
            _struct_lists(v, acc, containers)


class RuntimeLists:
    # ------------------------------------------------------------ entering loops and branches
    def enter_cf(self, scope):
        """Entering a loop body or branch that runs at run time: remember the lists that exist now, which must
        not grow inside (prepare_cf turned the ones it saw grow into runtime lists)."""
        self.cf_depth = getattr(self, "cf_depth", 0) + 1
        acc, names, containers = set(), set(), set()
        s = scope
        while s is not None:
            for k, v in s.vars.items():
                _struct_lists(v, acc, containers)
                if not (isinstance(v, Dyn) and isinstance(v.expr, ast.Name) and
                        v.expr.id in getattr(self, "placeholders", ())):   # (bound first inside: not a value)
                    names.add(k)
            s = s.parent
        stack = getattr(self, "_outer_lists", None)
        if stack is None:
            stack = self._outer_lists = []
            self._outer_names = []
        stack.append(acc)
        self._outer_names.append(names)   # the names bound when the loop or branch is entered
        self.__dict__.setdefault("_fixed_in_cf", []).append([])
        self.__dict__.setdefault("_cf_scope_mark", []).append(next(_SCOPE_SERIAL))
        self.__dict__.setdefault("_outer_containers", []).append(containers)

    def leave_cf(self):
        self.cf_depth -= 1
        self._outer_lists.pop()
        self._outer_names.pop()
        self._cf_scope_mark.pop()
        self._outer_containers.pop()
        # numbers bound once inside the loop or branch and known there (keep_fixed): from here on, the runtime
        # name that holds them (a loop may not run, a branch may not be taken)
        for scope, name, runtime in reversed(self._fixed_in_cf.pop()):
            if scope.vars.get(name) is not None:
                scope.vars[name] = runtime

    def scope_inside_cf(self, scope):
        """Whether ``scope`` (a helper inlined, a comprehension) was made inside the loop or branch being lowered:
        its names live for one iteration's lowering, bound in order, so a value known now stays known (the
        same in every iteration: it is made from values known now)."""
        marks = getattr(self, "_cf_scope_mark", None)
        return bool(marks) and scope.serial > marks[-1]

    def keep_fixed(self, scope, name, val, runtime):
        """Inside the loop or branch being lowered, ``name`` (bound only here, in one place of its function's
        source) holds the number ``val`` whatever the iteration: it stays known there (a flag a helper returns
        decides its ``if`` now, as it does outside loops); ``runtime``, the name's runtime variable, holds it too
        for what reads it before the assignment (the previous iteration's) and after the loop or branch."""
        scope.vars[name] = val
        self._fixed_in_cf[-1].append((scope, name, runtime))
        self.__dict__.setdefault("_fixed_runtime", {})[(id(scope), name)] = (val, runtime)

    def unfix(self, scope, name):
        """Before ``name`` is bound again: its runtime variable in place of the number keep_fixed left."""
        hit = getattr(self, "_fixed_runtime", {}).get((id(scope), name))
        if hit is not None and scope.vars.get(name) is hit[0]:
            scope.vars[name] = hit[1]

    def bound_before_cf(self, name, scope):
        """Whether ``name`` of ``scope`` was bound when the innermost loop or branch being lowered was entered
        (never for a scope made inside it: a helper's own names are new there whatever the caller's are)."""
        stack = getattr(self, "_outer_names", None)
        return bool(stack) and name in stack[-1] and not self.scope_inside_cf(scope)

    def made_inside_cf(self, container):
        """Whether list or dict ``container`` was made inside the loop or branch being lowered (it did not exist
        when it was entered): changing it there is changing it in order, as outside loops."""
        stack = getattr(self, "_outer_containers", None)
        return bool(stack) and id(container) not in stack[-1]

    def is_outer_list(self, val):
        return any(id(val) in s for s in getattr(self, "_outer_lists", ()))

    def make_runtime_lists(self, stmts, scope, out, node):
        """Before a loop or branch that runs at run time: every list bound now that ``stmts`` grow becomes a
        :class:`RList` (its items so far stacked into the buffer)."""
        for name in grown_lists(stmts):
            if not self.is_bound(name, scope):
                continue
            cur = self.lookup_name(name, scope, node)
            if isinstance(cur, Struct) and cur.kind == "list":
                self.to_runtime_list(name, cur, scope, out, node)

    def to_runtime_list(self, name, cur, scope, out, node):
        P = scope.parsed
        items = cur.values()
        for v in items:
            if not isinstance(v, (Dyn, Static)) or isinstance(v, Static) and not isinstance(
                    v.obj, (bool, int, float, complex, np.bool_, np.number, np.ndarray)):
                what = "a tuple, list or dict" if isinstance(v, Struct) else "this value"
                raise error(P, node, f"{_list_words(name, 'the list ')} grows in a loop or branch that runs at run time, and it "
                                     f"holds {what}; such a list holds numbers or arrays of one shape",
                            "keep one list per array")
        buf = self.names.fresh(scope.prefix + name + "_rows")
        cnt = self.names.fresh(scope.prefix + name + "_len")
        out.append(ast.copy_location(ast.Assign(targets=[ast.Name(cnt, ast.Store())], value=ast.Constant(len(items))),
                                     node))
        if items:
            stacked = self.call_object(np.stack, [Struct("tuple", list(items))], {}, scope, out, node)
            val = self.call_prim(lookup(np.copy), [stacked], {}, scope, out, node)   # never a constant's memory
            out.append(ast.copy_location(ast.Assign(targets=[ast.Name(buf, ast.Store())], value=val.expr), node))
        else:   # made at the first append; run as Python, read with none appended, it is np.array([]) (Numba
            # drops this branch: its buffer's type is the items', and the rows it reads then are none)
            init = []
            none = self.call_prim(lookup(np.copy), [Static(np.zeros(0))], {}, scope, init, node)
            init.append(ast.Assign(targets=[ast.Name(buf, ast.Store())], value=none.expr))
            st = ast.If(test=ast.Name(INTERPRETED, ast.Load()), body=init, orelse=[])
            for n in ast_walk(st):
                if isinstance(n, (ast.stmt, ast.expr)):
                    ast.copy_location(n, node)
            out.append(st)
        rl = RList(buf, cnt, name, bool(items))
        s = scope
        while s is not None:   # every name bound to this list (aliases) sees it grow, as in Python
            for k, v in list(s.vars.items()):
                if v is cur:
                    s.vars[k] = rl
            s = s.parent
        return rl

    # ------------------------------------------------------------ growing
    def runtime_append(self, rl, v, scope, out, node):
        P = scope.parsed
        if isinstance(v, RList):   # a list grown at run time appended whole ([[...] for v in a]): as its array
            v = self.runtime_list_array(v, scope, out, node)
        if isinstance(v, Struct) or not isinstance(v, (Dyn, Static)):
            raise error(P, node, f"appending {'a tuple, list or dict' if isinstance(v, Struct) else 'this value'} to "
                                 f"{_list_words(rl.name)}, a list that grows at run time, is not supported: such a list holds "
                                 "arrays or floats of one shape", "keep one list per array")
        if isinstance(v, Static) and not isinstance(v.obj, (bool, int, float, complex, np.bool_, np.number,
                                                             np.ndarray)):
            raise error(P, node, f"appending {v.obj!r} to {_list_words(rl.name)}, a list that grows at run time, is not "
                                 "supported: such a list holds numbers or arrays of one shape",
                        "append a number or an array")
        v = self.snapshot(v, scope, out, node)
        if isinstance(v, Static):
            v = self.call_prim(lookup(np.copy), [v], {}, scope, out, node)
            tmp = self.names.fresh("_elt")
            out.append(ast.copy_location(ast.Assign(targets=[ast.Name(tmp, ast.Store())], value=v.expr), node))
            v = Dyn(ast.Name(tmp, ast.Load()))
        buf, cnt = ast.Name(rl.buf, ast.Load()), ast.Name(rl.count, ast.Load())
        grow = []   # full: double the buffer
        zeros = self.call_prim(lookup(np.zeros_like), [Dyn(buf)], {}, scope, grow, node)
        bigger = self.call_prim(lookup(np.concatenate), [Struct("tuple", [Dyn(buf), zeros])], {}, scope, grow, node)
        grow.append(ast.Assign(targets=[ast.Name(rl.buf, ast.Store())], value=bigger.expr))
        # an item of a wider dtype (a float after ints) widens the rows first, as np.stack of the list would
        promote = []
        # a gradient's record of a loop, read back to differentiate that gradient again, gets its own words
        record = rl.name.startswith("_tape") and generated_file(scope.parsed.filename)
        wider = self.call_prim(lookup(tape_promote if record else list_promote), [Dyn(buf), v], {}, scope, promote,
                               node)
        promote.append(ast.Assign(targets=[ast.Name(rl.buf, ast.Store())], value=wider.expr))
        write = [ast.If(test=ast.Compare(left=cnt, ops=[ast.Eq()], comparators=[
                     ast.Subscript(value=ast.Attribute(value=buf, attr="shape", ctx=ast.Load()),
                                   slice=ast.Constant(0), ctx=ast.Load())]), body=grow, orelse=[]),
                 *promote,
                 ast.Assign(targets=[ast.Subscript(value=ast.Name(rl.buf, ast.Load()), slice=ast.Name(rl.count, ast.Load()),
                                                   ctx=ast.Store())], value=v.expr)]
        if rl.allocated:
            new = write
        else:   # the first element makes the buffer: one row of v's shape and dtype, written as the others are
            first = []
            row = self.call_prim(lookup(np.expand_dims), [v, Static(0)], {}, scope, first, node)
            row = self.call_prim(lookup(np.zeros_like), [row], {}, scope, first, node)
            first.append(ast.Assign(targets=[ast.Name(rl.buf, ast.Store())], value=row.expr))
            new = [ast.If(test=ast.Compare(left=cnt, ops=[ast.Eq()], comparators=[ast.Constant(0)]), body=first,
                          orelse=write[:1]), *write[1:]]
        new.append(ast.Assign(targets=[ast.Name(rl.count, ast.Store())],
                              value=ast.BinOp(left=ast.Name(rl.count, ast.Load()), op=ast.Add(), right=ast.Constant(1))))
        _emit_at(out, new, node)
        if not getattr(self, "cf_depth", 0):
            rl.allocated = True

    def runtime_set_item(self, rl, key, v, scope, out, node):
        """``lst[i] = v`` of a list grown at run time: row ``i`` of the buffer (a negative ``i`` counts from the
        end; out of range raises Python's IndexError, compiled too). An item of a wider dtype widens the rows
        first, as ``append`` does."""
        P = scope.parsed
        if isinstance(key, Static) and not (isinstance(key.obj, (int, np.integer)) and not isinstance(key.obj, bool)) \
                or isinstance(v, Struct) or not isinstance(v, (Dyn, Static)):
            raise error(P, node, f"this assignment into {_list_words(rl.name)}, a list whose length is only known "
                                 "when the function runs, is not supported: set one item, by an int, to a number "
                                 "or an array", None)
        v = self.snapshot(v, scope, out, node)
        k = self.names.fresh(scope.prefix + rl.name + "_at")
        i = self.as_expr(key, scope, node)
        cnt = ast.Name(rl.count, ast.Load())
        # i + count where i < 0 (branch-free: bool * int), then Python's range check
        at = ast.BinOp(left=i, op=ast.Add(), right=ast.BinOp(
            left=ast.Compare(left=clone(i), ops=[ast.Lt()], comparators=[ast.Constant(0)]), op=ast.Mult(),
            right=cnt))
        exc = ast.Call(func=ast.Name("IndexError", ast.Load()), args=[ast.Constant(
            "list assignment index out of range")], keywords=[])
        check = ast.If(test=ast.BoolOp(op=ast.Or(), values=[
            ast.Compare(left=ast.Name(k, ast.Load()), ops=[ast.Lt()], comparators=[ast.Constant(0)]),
            ast.Compare(left=ast.Name(k, ast.Load()), ops=[ast.GtE()], comparators=[clone(cnt)])]),
            body=[ast.Raise(exc=exc, cause=None)], orelse=[])
        new = [ast.Assign(targets=[ast.Name(k, ast.Store())], value=at), check]
        wider = self.call_prim(lookup(list_promote), [Dyn(ast.Name(rl.buf, ast.Load())), v], {}, scope, new, node)
        new.append(ast.Assign(targets=[ast.Name(rl.buf, ast.Store())], value=wider.expr))
        new.append(ast.Assign(targets=[ast.Subscript(value=ast.Name(rl.buf, ast.Load()), slice=ast.Name(k, ast.Load()),
                                                     ctx=ast.Store())], value=self.as_expr(v, scope, node)))
        _emit_at(out, new, node)

    def runtime_reverse_or_clear(self, rl, meth, scope, out, node):
        """``lst.clear()`` (no items: the count is 0) and ``lst.reverse()`` (rows ``[:count]`` reversed in place,
        where there are two or more) of a list grown at run time."""
        cnt = ast.Name(rl.count, ast.Load())
        if meth == "clear":
            new = [ast.Assign(targets=[ast.Name(rl.count, ast.Store())], value=ast.Constant(0))]
        else:
            body = []
            rows = self.call_prim(lookup_getitem(), [Dyn(ast.Name(rl.buf, ast.Load())),
                                                     Dyn(ast.Slice(lower=None, upper=clone(cnt), step=None))], {},
                                  scope, body, node)
            back = self.call_prim(lookup_getitem(), [rows, Static(slice(None, None, -1))], {}, scope, body, node)
            back = self.call_prim(lookup(np.copy), [back], {}, scope, body, node)
            held = self.names.fresh(scope.prefix + rl.name + "_reversed")
            body.append(ast.Assign(targets=[ast.Name(held, ast.Store())], value=back.expr))
            body.append(ast.Assign(targets=[ast.Subscript(value=ast.Name(rl.buf, ast.Load()), slice=ast.Slice(
                lower=None, upper=clone(cnt), step=None), ctx=ast.Store())], value=ast.Name(held, ast.Load())))
            new = [ast.If(test=ast.Compare(left=clone(cnt), ops=[ast.Gt()], comparators=[ast.Constant(1)]),
                          body=body, orelse=[])]
        _emit_at(out, new, node)

    def runtime_extend(self, rl, seq, scope, out, node):
        if isinstance(seq, Struct) and seq.kind in ("list", "tuple"):
            for v in seq.values():
                self.runtime_append(rl, v, scope, out, node)
            return
        raise error(scope.parsed, node, f"extending {_list_words(rl.name)} by this value is not supported: it is a "
                                        "list that grows at run time", "extend it with a list or tuple display, or append in a loop")

    def runtime_pop(self, rl, args, kwargs, scope, out, node):
        """``lst.pop()`` in generated code read back (the reverse sweep of a tape pushed in a loop: nested loops
        keep their inner trip counts so): the last row, and the count one less. Only there: a tape is popped
        as often as it was pushed, while the user's own list could be empty, which the buffer cannot tell."""
        P = scope.parsed
        if isinstance(rl, Struct):   # a list known now: its last item, outside loops and branches that run later
            if args or kwargs or not rl.items or getattr(self, "cf_depth", 0):
                raise error(P, node, "list.pop() is supported only without arguments, on a non-empty list, outside "
                                     "loops over a runtime range and branches on array values", None)
            return rl.items.pop()
        if kwargs or args and not (isinstance(args[0], Static) and args[0].obj == -1 and len(args) == 1):
            raise error(P, node, f"pop(i) of {_list_words(rl.name)}, a list whose length is only known when the "
                                 "function runs, is supported for the last item only (pop() or pop(-1))",
                        "read it by index (lst[i]) and keep a count of your own")
        if not generated_file(P.filename):   # the user's list may be empty: Python's IndexError, as it raises it
            exc = ast.Call(func=ast.Name("IndexError", ast.Load()), args=[ast.Constant("pop from empty list")],
                           keywords=[])
            check = ast.If(test=ast.Compare(left=ast.Name(rl.count, ast.Load()), ops=[ast.Lt()],
                                            comparators=[ast.Constant(1)]),
                           body=[ast.Raise(exc=exc, cause=None)], orelse=[])
            _emit_at(out, [check], node)
        last = Dyn(ast.BinOp(left=ast.Name(rl.count, ast.Load()), op=ast.Sub(), right=ast.Constant(1)))
        val = self.call_prim(lookup_getitem(), [Dyn(ast.Name(rl.buf, ast.Load())), last], {}, scope, out, node)
        val = self.call_prim(lookup(np.copy), [val], {}, scope, out, node)
        tmp = self.names.fresh(scope.prefix + rl.name + "_popped")
        dec = ast.Assign(targets=[ast.Name(rl.count, ast.Store())],
                         value=ast.BinOp(left=ast.Name(rl.count, ast.Load()), op=ast.Sub(), right=ast.Constant(1)))
        out.append(ast.copy_location(ast.Assign(targets=[ast.Name(tmp, ast.Store())], value=val.expr), node))
        _emit_at(out, [dec], node)
        return Dyn(ast.Name(tmp, ast.Load()))

    # ------------------------------------------------------------ reading
    def runtime_list_array(self, rl, scope, out, node):
        """The list as NumPy sees it: the array of its elements (a copy, bound to a fresh name)."""
        rows = self.call_prim(lookup_getitem(), [Dyn(ast.Name(rl.buf, ast.Load())),
                                                 Dyn(ast.Slice(lower=None, upper=ast.Name(rl.count, ast.Load()),
                                                               step=None))], {}, scope, out, node)
        val = self.call_prim(lookup(np.copy), [rows], {}, scope, out, node)
        if out is None:
            return val
        tmp = self.names.fresh(scope.prefix + rl.name)
        out.append(ast.copy_location(ast.Assign(targets=[ast.Name(tmp, ast.Store())], value=val.expr), node))
        return Dyn(ast.Name(tmp, ast.Load()))

    def runtime_list_of_rows(self, arr, scope, out, node):
        """``list(array)``: the array's rows as a list whose length is known when the function runs (a copy: the
        list's items do not share the array's memory, as the rows of Python's list of an array do not change)."""
        val = self.call_prim(lookup(np.copy), [arr], {}, scope, out, node)
        buf = self.names.fresh(scope.prefix + "list_rows")
        cnt = self.names.fresh(scope.prefix + "list_len")
        out.append(ast.copy_location(ast.Assign(targets=[ast.Name(buf, ast.Store())], value=val.expr), node))
        out.append(ast.copy_location(ast.Assign(targets=[ast.Name(cnt, ast.Store())], value=ast.Subscript(
            value=ast.Attribute(value=ast.Name(buf, ast.Load()), attr="shape", ctx=ast.Load()),
            slice=ast.Constant(0), ctx=ast.Load())), node))
        return RList(buf, cnt, "list", True)

    def runtime_list_item(self, rl, key, scope, out, node):
        """``lst[i]`` (a row of the buffer; negative i counts from the end) and ``lst[a:b]`` (an array)."""
        rows = self.call_prim(lookup_getitem(), [Dyn(ast.Name(rl.buf, ast.Load())),
                                                 Dyn(ast.Slice(lower=None, upper=ast.Name(rl.count, ast.Load()),
                                                               step=None))], {}, scope, out, node)
        if isinstance(key, Static) and isinstance(key.obj, (int, np.integer)) and not isinstance(key.obj, bool) \
                and key.obj >= 0:
            rows = Dyn(ast.Name(rl.buf, ast.Load()))   # a row before count: no slice needed
        val = self.call_prim(lookup_getitem(), [rows, key if isinstance(key, Static) else Dyn(
            self.as_expr(key, scope, node))], {}, scope, out, node)
        return self.call_prim(lookup(np.copy), [val], {}, scope, out, node)

    def runtime_list_call(self, fn, args, kwargs, scope, out, node):
        """A call of something other than the user's own code with a runtime list among its arguments: the
        list as an array (NumPy reads a sequence of equal-shape arrays as that array); ``len`` is the count.
        Returns ``(handled value or None, args, kwargs)``."""
        P = scope.parsed
        if fn is len and len(args) == 1 and isinstance(args[0], RList):
            return Dyn(ast.Name(args[0].count, ast.Load())), args, kwargs
        if fn in (list, tuple) and len(args) == 1 and isinstance(args[0], RList) and not kwargs:
            # a new list with the same items: a copy of the buffer's rows, with its own count
            arr = self.runtime_list_array(args[0], scope, out, node)
            cnt = self.names.fresh(scope.prefix + args[0].name + "_len")
            out.append(ast.copy_location(ast.Assign(targets=[ast.Name(cnt, ast.Store())],
                                                    value=ast.Name(args[0].count, ast.Load())), node))
            return RList(arr.expr.id, cnt, args[0].name, True), args, kwargs
        if fn in (isinstance, type) and args and isinstance(args[0], RList):
            if fn is type:
                return Static(list), args, kwargs
            cls = args[1] if len(args) > 1 else None
            if isinstance(cls, Static):
                return Static(isinstance([], cls.obj)), args, kwargs
        if fn is np.stack and args and isinstance(args[0], RList):
            axis = kwargs.get("axis", args[1] if len(args) > 1 else Static(0))
            arr = self.runtime_list_array(args[0], scope, out, node)
            if not isinstance(axis, Static) or not isinstance(axis.obj, (int, np.integer)):
                raise error(P, node, "np.stack(..., axis=...) needs an axis known before the function runs", None)
            if axis.obj == 0:
                return arr, args, kwargs
            return self.call_object(np.moveaxis, [arr, Static(0), axis], {}, scope, out, node), args, kwargs
        if fn is np.concatenate and args and isinstance(args[0], RList):
            axis = kwargs.get("axis", args[1] if len(args) > 1 else Static(0))
            if not (isinstance(axis, Static) and axis.obj == 0) or set(kwargs) - {"axis"}:
                raise error(P, node, f"np.concatenate of '{args[0].name}', a list whose length is only known when "
                                     "the function runs, is supported along axis 0 only",
                            "np.stack it, then reshape or move axes")
            arr = self.runtime_list_array(args[0], scope, out, node)
            shape = ast.BinOp(left=ast.Tuple(elts=[ast.Constant(-1)], ctx=ast.Load()), op=ast.Add(),
                              right=ast.Subscript(value=ast.Attribute(value=arr.expr, attr="shape", ctx=ast.Load()),
                                                  slice=ast.Slice(lower=ast.Constant(2), upper=None, step=None),
                                                  ctx=ast.Load()))
            return self.call_object(np.reshape, [arr, Dyn(shape)], {}, scope, out, node), args, kwargs
        kind = _ROW_STACKS.get(fn)
        if kind is not None and len(args) == 1 and isinstance(args[0], RList) and not kwargs:
            arr = self.runtime_list_array(args[0], scope, out, node)
            return self.call_prim(lookup(join_rows), [arr, Static(kind)], {}, scope, out, node), args, kwargs
        if fn is np.dstack and args and isinstance(args[0], RList):
            raise error(P, node, f"np.dstack of '{args[0].name}', a list whose length is only known when the "
                                 "function runs, is not supported", "np.stack it along axis=-1 (items 2-D) instead")
        args = [self.runtime_list_array(a, scope, out, node) if isinstance(a, RList) else a for a in args]
        kwargs = {k: self.runtime_list_array(v, scope, out, node) if isinstance(v, RList) else v
                  for k, v in kwargs.items()}
        return None, args, kwargs

    def refuse_runtime_list(self, rl, what, scope, node, hint=None):
        raise error(scope.parsed, node, f"{what} {_list_words(rl.name)}, a list whose length is only known when the function "
                                        "runs, is not supported", hint or "np.stack(...) it into an array first")

    # ------------------------------------------------------------ comprehensions over runtime values
    def runtime_comprehension(self, node, scope, out):
        """``[elt for t in it if c]`` (or a generator) where an iterable is only known at run time: the loops
        written out, appending to a runtime list, lowered like the user's own loops."""
        P = scope.parsed
        if isinstance(node, ast.DictComp):
            raise error(P, node, "a dict comprehension over values only known when the function runs is not "
                                 "supported", "build the dict over a Python list or a constant range")
        acc = f"_comprehension{self.names.fresh('')}"
        inner = type(scope)(scope.parsed, scope, prefix=scope.prefix)
        inner.vars[acc] = Struct("list", [])
        body = [ast.Expr(value=ast.Call(func=ast.Attribute(value=ast.Name(acc, ast.Load()), attr="append",
                                                           ctx=ast.Load()), args=[copy.deepcopy(node.elt)],
                                        keywords=[]))]
        for g in reversed(node.generators):
            for cond in reversed(g.ifs):
                body = [ast.If(test=copy.deepcopy(cond), body=body, orelse=[])]
            body = [ast.For(target=copy.deepcopy(g.target), iter=copy.deepcopy(g.iter), body=body, orelse=[])]
        for st in body:
            for n in ast_walk(st):
                if isinstance(n, (ast.stmt, ast.expr)) and not hasattr(n, "lineno"):
                    ast.copy_location(n, node)
        self.block(body, inner, out)
        return inner.vars[acc]   # a Struct when every loop was unrolled after all, else an RList

    def is_runtime_iterable(self, it):
        if isinstance(it, RList) or isinstance(it, Dyn):
            return True
        if isinstance(it, _Range):
            return not all(isinstance(a, ast.Constant) for a in it.args)
        if isinstance(it, _Iter):
            return any(self.is_runtime_iterable(a) for a in it.args)
        return False


def _emit_at(out, stmts, node):
    """Append generated ``stmts`` to ``out``, every node of them at the user's ``node`` (errors name that line)."""
    for st in stmts:
        for n in ast_walk(st):
            if hasattr(n, "lineno") or isinstance(n, (ast.stmt, ast.expr)):
                ast.copy_location(n, node)
    out.extend(stmts)


def has_runtime_list(vals):
    return any(isinstance(v, RList) for v in vals)


def _list_words(name, prefix=""):
    """How a message names list ``name``: the user's name, or the list a comprehension builds."""
    if name.startswith("_comprehension"):
        return "the list this comprehension builds"
    return f"{prefix}'{name}'"
