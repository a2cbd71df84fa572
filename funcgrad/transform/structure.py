"""Structure: early ``return``, ``break`` and ``continue`` rewritten as structured control flow.

Part of normalize (run on the user's AST before lowering). Guarantees on its
output:

* a function body has a single exit: every ``return v`` became an assignment
  to the result variable ``__ret`` and the statements after an ``if`` that may
  return moved into the branches that do not return;
* inside a loop body, ``continue`` and ``break`` are gone: they set the flags
  ``__cont<n>`` / ``__brk<n>``, the rest of the body is guarded by
  ``if not (flags)``, and the body ends with ``if __brk<n>: break`` (the only
  ``break`` left, which the reverse pass treats as a loop exit it counts);
* ``return`` inside a loop sets a flag naming which ``return`` fired, leaves
  every enclosing loop with ``break`` and returns after the outermost loop.
"""
from __future__ import annotations

import ast
import contextvars
import copy
import itertools
from .astutil import ast_walk

RET = "__ret"


class StructureError(Exception):
    def __init__(self, node, msg, hint):
        self.node, self.msg, self.hint = node, msg, hint


def _has(stmts, kinds, stop_at_loops=True):
    for s in stmts:
        for n in _walk_no_loops(s) if stop_at_loops else ast_walk(s):
            if isinstance(n, kinds):
                return True
    return False


def _walk_no_loops(node):
    """ast.walk that does not descend into nested loops or function definitions."""
    yield node
    if isinstance(node, (ast.FunctionDef, ast.Lambda)):
        return
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.For, ast.While, ast.FunctionDef)):
            yield child  # the loop itself, not its body
            continue
        yield from _walk_no_loops(child)


def _loc(new, old):
    ast.copy_location(new, old)
    ast.fix_missing_locations(new)
    return new


def single_exit(body):
    """Rewrite ``body`` so that it ends by falling through, with every return assigning ``__ret``."""
    out, _ = _se(lift_returns(body))
    return out


def _walk_no_defs(node):
    yield node
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, (ast.FunctionDef, ast.Lambda)):
            yield from _walk_no_defs(child)


def _returns_inside(stmt):
    return any(isinstance(n, ast.Return) for n in _walk_no_defs(stmt))


def lift_returns(body):
    """``return`` inside a loop: record which return fired in a flag, leave every enclosing loop with
    ``break``, and return after the outermost loop.

    A ``break`` leaves the loop before anything else runs, so the names the returned expression reads
    still hold the values they had at the ``return``: evaluating it after the loop gives the same value.
    """
    out = []
    for s in body:
        if isinstance(s, (ast.For, ast.While)) and _returns_inside(s):
            flag = f"__rf{_next_number()}"
            exprs = []
            out.append(_loc(ast.Assign(targets=[ast.Name(flag, ast.Store())], value=ast.Constant(0)), s))
            out.append(_lift_loop(s, flag, exprs))
            chain = None
            for k in range(len(exprs), 0, -1):
                value, where = exprs[k - 1]
                test = ast.Compare(left=ast.Name(flag, ast.Load()), ops=[ast.Eq()], comparators=[ast.Constant(k)])
                chain = _loc(ast.If(test=test, body=[_loc(ast.Return(value=value), where)],
                                    orelse=[chain] if chain is not None else []), where)
            out.append(chain)
        elif isinstance(s, ast.If) and _returns_inside(s):
            s = copy.copy(s)
            s.body = lift_returns(s.body)
            s.orelse = lift_returns(s.orelse)
            out.append(s)
        else:
            out.append(s)
    return out


def lower_loop_else(stmts):
    """``for``/``while`` with an ``else`` block: the block runs after the loop unless a ``break`` of that
    loop fired, so each such ``break`` first clears a flag ``__els<n>`` set before the loop, and the block
    goes after the loop under ``if __els<n>:`` (after it unguarded when the loop has no ``break``). A
    ``return`` inside the loop leaves the function, and the return pass guards what follows the loop."""
    out = []
    for s in stmts:
        if isinstance(s, (ast.For, ast.While)):
            s = copy.copy(s)
            s.body = lower_loop_else(s.body)
            orelse, s.orelse = lower_loop_else(s.orelse), []
            if orelse and _has(s.body, ast.Break):
                flag = f"__els{_next_number()}"
                s.body = _BreakClears(flag).stmts(s.body)
                out.append(_loc(ast.Assign(targets=[ast.Name(flag, ast.Store())], value=ast.Constant(True)), s))
                out.append(s)
                out.append(_loc(ast.If(test=ast.Name(flag, ast.Load()), body=orelse, orelse=[]), orelse[0]))
            else:
                out.append(s)
                out.extend(orelse)
        elif isinstance(s, ast.If):
            s = copy.copy(s)
            s.body = lower_loop_else(s.body)
            s.orelse = lower_loop_else(s.orelse)
            out.append(s)
        else:
            out.append(s)
    return out


class _BreakClears(ast.NodeTransformer):
    """Each ``break`` of one loop (not of loops nested in it) becomes ``flag = False; break``."""

    def __init__(self, flag):
        self.flag = flag

    def stmts(self, stmts):
        out = []
        for s in stmts:
            r = self.visit(copy.deepcopy(s))
            out.extend(r if isinstance(r, list) else [r])
        return out

    def visit_Break(self, node):
        return [_loc(ast.Assign(targets=[ast.Name(self.flag, ast.Store())], value=ast.Constant(False)), node), node]

    def _leave(self, node):
        return node

    visit_For = visit_While = visit_FunctionDef = visit_Lambda = visit_AsyncFunctionDef = _leave


def _lift_loop(loop, flag, exprs):
    loop = copy.copy(loop)
    loop.body = _lift_stmts(loop.body, flag, exprs)
    return loop


def _lift_stmts(stmts, flag, exprs):
    out = []
    for s in stmts:
        if isinstance(s, ast.Return):
            exprs.append((s.value if s.value is not None else ast.Constant(None), s))
            out.append(_loc(ast.Assign(targets=[ast.Name(flag, ast.Store())], value=ast.Constant(len(exprs))), s))
            out.append(_loc(ast.Break(), s))
        elif isinstance(s, (ast.For, ast.While)) and _returns_inside(s):
            out.append(_lift_loop(s, flag, exprs))
            out.append(_loc(ast.If(test=ast.Name(flag, ast.Load()), body=[_loc(ast.Break(), s)], orelse=[]), s))
        elif isinstance(s, ast.If) and _returns_inside(s):
            s = copy.copy(s)
            s.body = _lift_stmts(s.body, flag, exprs)
            s.orelse = _lift_stmts(s.orelse, flag, exprs)
            out.append(s)
        else:
            out.append(s)
    return out


def _se(stmts):
    """(statements, always_returns): the continuation after an if that may return moves into its branches."""
    out = []
    for i, s in enumerate(stmts):
        if isinstance(s, ast.Return):
            out.append(_loc(ast.Assign(targets=[ast.Name(RET, ast.Store())],
                                       value=s.value if s.value is not None else ast.Constant(None)), s))
            return out, True
        if isinstance(s, ast.If) and _returns_inside(s):   # (a def's own return is not the function's)
            rest = stmts[i + 1:]
            b, rb = _se(list(s.body) + copy.deepcopy(rest))
            o, ro = _se(list(s.orelse) + copy.deepcopy(rest))
            out.append(_loc(ast.If(test=s.test, body=b or [ast.Pass()], orelse=o), s))
            return out, rb and ro
        out.append(s)
    return out, False


# Flag numbers count from 1 in each function structured (``structure``), so the generated source, and
# the disk cache keyed by it, does not depend on what the process built before.
_NUMBERS: contextvars.ContextVar = contextvars.ContextVar("funcgrad_structure_numbers", default=None)


def _next_number():
    numbers = _NUMBERS.get()
    if numbers is None:
        numbers = itertools.count(1)
        _NUMBERS.set(numbers)
    return next(numbers)


def structure(body):
    """A function body with a single exit and loops without break/continue (every rewrite above)."""
    token = _NUMBERS.set(itertools.count(1))
    try:
        return single_exit(structure_loops(lift_returns(lower_loop_else(body))))
    finally:
        _NUMBERS.reset(token)


def structure_loops(stmts):
    """Rewrite break/continue in every loop of ``stmts`` (recursively)."""
    out = []
    for s in stmts:
        if isinstance(s, (ast.For, ast.While)):
            s = copy.copy(s)
            s.body = structure_loops(s.body)
            s.body = _loop_body(s.body, s)
        elif isinstance(s, ast.If):
            s = copy.copy(s)
            s.body = structure_loops(s.body)
            s.orelse = structure_loops(s.orelse)
        out.append(s)
    return out


def _loop_body(body, loop):
    if not _has(body, (ast.Break, ast.Continue)):
        return body
    k = _next_number()
    brk, cont = f"__brk{k}", f"__cont{k}"
    uses_brk = _has(body, ast.Break)
    uses_cont = _has(body, ast.Continue)
    flags = ([brk] if uses_brk else []) + ([cont] if uses_cont else [])
    init = [_loc(ast.Assign(targets=[ast.Name(f, ast.Store())], value=ast.Constant(False)), loop) for f in flags]
    new = init + _guard(body, brk, cont, flags, loop)
    if uses_brk:
        new.append(_loc(ast.If(test=ast.Name(brk, ast.Load()), body=[ast.Break()], orelse=[]), loop))
    return new


def _guard(stmts, brk, cont, flags, loop):
    out = []
    for i, s in enumerate(stmts):
        if isinstance(s, ast.Break):
            out.append(_loc(ast.Assign(targets=[ast.Name(brk, ast.Store())], value=ast.Constant(True)), s))
            return out
        if isinstance(s, ast.Continue):
            out.append(_loc(ast.Assign(targets=[ast.Name(cont, ast.Store())], value=ast.Constant(True)), s))
            return out
        if isinstance(s, ast.If) and _has([s], (ast.Break, ast.Continue)):
            s = copy.copy(s)
            s.body = _guard(s.body, brk, cont, flags, loop) or [ast.Pass()]
            s.orelse = _guard(s.orelse, brk, cont, flags, loop)
            out.append(s)
            rest = stmts[i + 1:]
            if rest:
                test = ast.UnaryOp(op=ast.Not(), operand=(ast.Name(flags[0], ast.Load()) if len(flags) == 1 else
                                                          ast.BoolOp(op=ast.Or(), values=[ast.Name(f, ast.Load())
                                                                                          for f in flags])))
                out.append(_loc(ast.If(test=test, body=_guard(rest, brk, cont, flags, loop) or [ast.Pass()],
                                       orelse=[]), rest[0]))
            return out
        out.append(s)
    return out
