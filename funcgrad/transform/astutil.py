"""Small AST constructors the passes share."""
from __future__ import annotations

import ast

__all__ = ["drop_statements", "kernel"]


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
