"""Small AST constructors the passes share."""
from __future__ import annotations

import ast

__all__ = ["kernel"]


def kernel(name):
    """``K.<name>``: a kernel of the backend's namespace."""
    return ast.Attribute(value=ast.Name("K", ast.Load()), attr=name, ctx=ast.Load())
