"""Small AST constructors the passes share."""
from __future__ import annotations

import ast
from collections import deque

from . import annotations as A
from ..ops.registry import by_name

__all__ = ["ast_walk", "clone", "statements_under", "definitely_bound", "drop_statements", "fold_int_constants", "kernel", "names_read"]


def clone(x):
    """A copy of the AST ``x`` (a node or a list of them): every node and list is new, annotation values (a
    primitive, a comment, a source position) are shared. ``copy.deepcopy`` also copied each annotation's
    objects, the primitives with their templates: most of a warm first call's transform time went there."""
    if isinstance(x, ast.AST):
        new = x.__class__.__new__(x.__class__)
        new.__dict__.update({k: clone(v) for k, v in x.__dict__.items()})
        return new
    if isinstance(x, list):
        return [clone(v) for v in x]
    return x


def ast_walk(node):
    """``ast.walk``: every node under ``node`` (itself first), in the same order, about twice as fast (the
    passes walk trees tens of thousands of times in a transform: a third of a warm first call's transform)."""
    todo = deque((node,))
    pop, push = todo.popleft, todo.append
    while todo:
        n = pop()
        for f in n._fields:
            v = getattr(n, f, None)
            if isinstance(v, list):
                for x in v:
                    if isinstance(x, ast.AST):
                        push(x)
            elif isinstance(v, ast.AST):
                push(v)
        yield n


def statements_under(node):
    """Every statement of ``node`` (itself when one) and of the bodies under it; expressions, which hold no
    statements, are not walked."""
    todo = [node]
    while todo:
        n = todo.pop()
        if isinstance(n, ast.stmt):
            yield n
        for f in n._fields:
            v = getattr(n, f, None)
            if isinstance(v, list):
                todo.extend(x for x in v if isinstance(x, ast.AST) and not isinstance(x, ast.expr))
            elif isinstance(v, ast.AST) and not isinstance(v, ast.expr):
                todo.append(v)


def kernel(name):
    """``K.<name>``: a kernel of the backend's namespace."""
    return ast.Attribute(value=ast.Name("K", ast.Load()), attr=name, ctx=ast.Load())


def prim_call(name, args, keywords=()):
    """``K.<name>(args)`` annotated with its primitive (rendered as an operator where it is one)."""
    return A.put(ast.Call(func=kernel(name), args=list(args), keywords=list(keywords)), A.PRIM, by_name(name))


def drop_statements(code, drop):
    """``code`` without the statements ``drop(stmt)`` selects, in nested loops and branches too (an emptied
    body becomes ``pass``)."""
    out = []
    for s in code:
        if drop(s):
            continue
        if isinstance(s, (ast.For, ast.While, ast.If)):
            s.body = drop_statements(s.body, drop) or [ast.Pass()]
            s.orelse = drop_statements(s.orelse, drop)
        out.append(s)
    return out


def names_read(node):
    """The names ``node`` (a statement or expression, with everything under it) reads."""
    return {n.id for n in ast_walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def definitely_bound(stmts, acc):
    """The names bound on every path through ``stmts`` (given ``acc`` bound before); loops may run no trip."""
    acc = set(acc)
    for s in stmts:
        if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name):
            acc.add(s.targets[0].id)
        elif isinstance(s, ast.If):
            acc |= definitely_bound(s.body, acc) & definitely_bound(s.orelse, acc)
    return acc


def _int(e):
    return isinstance(e, ast.Constant) and type(e.value) in (int, bool)


_FOLD = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b}


class _Folder(ast.NodeTransformer):
    def visit_BinOp(self, node):
        self.generic_visit(node)
        fold = _FOLD.get(type(node.op))
        if fold is not None and _int(node.left) and _int(node.right):
            return ast.copy_location(ast.Constant(int(fold(node.left.value, node.right.value))), node)
        for side in ("left", "right"):   # an operand ``e ** 1`` is ``e`` (the result is a new value either way)
            child = getattr(node, side)
            if isinstance(child, ast.BinOp) and isinstance(child.op, ast.Pow) and _int(child.right) and \
                    child.right.value == 1 and type(child.right.value) is int:
                setattr(node, side, child.left)
        return node

    def visit_Compare(self, node):
        self.generic_visit(node)
        if len(node.ops) == 1 and isinstance(node.ops[0], (ast.Eq, ast.NotEq)) and _int(node.left) and \
                _int(node.comparators[0]):
            same = node.left.value == node.comparators[0].value
            return ast.copy_location(ast.Constant(same if isinstance(node.ops[0], ast.Eq) else not same), node)
        return node


def fold_int_constants(e):
    """A filled template expression with integer arithmetic on literals computed (``2 - 1 + (2 == 0)``: ``1``)
    and an operand ``e ** 1`` written ``e``: power's VJP at ``x ** 2`` reads ``d * 2 * x``."""
    return _Folder().visit(e)
