"""Small AST constructors the passes share."""
from __future__ import annotations

import ast

__all__ = ["definitely_bound", "drop_statements", "kernel"]


def kernel(name):
    """``K.<name>``: a kernel of the backend's namespace."""
    return ast.Attribute(value=ast.Name("K", ast.Load()), attr=name, ctx=ast.Load())


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


def definitely_bound(stmts, acc):
    """The names bound on every path through ``stmts`` (given ``acc`` bound before); loops may run no trip."""
    acc = set(acc)
    for s in stmts:
        if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name):
            acc.add(s.targets[0].id)
        elif isinstance(s, ast.If):
            acc |= definitely_bound(s.body, acc) & definitely_bound(s.orelse, acc)
    return acc
