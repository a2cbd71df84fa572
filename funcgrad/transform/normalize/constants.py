"""Constant folding: operators applied to values known while transforming."""
from __future__ import annotations

import ast
import operator

import numpy as np

from ..fence import error


_CONST_BIN = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
              ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
              ast.Pow: lambda a, b: a ** b}


def _const_binop(op, a, b, P, node):
    f = _CONST_BIN.get(type(op))
    if f is None:
        raise error(P, node, f"unsupported operator on constants: {type(op).__name__}", None)
    return f(a, b)


def _const_unary(op, a):
    return {ast.USub: lambda: -a, ast.UAdd: lambda: +a, ast.Not: lambda: not a, ast.Invert: lambda: ~a}[type(op)]()


def _const_compare(op, a, b):
    o = operator
    m = {ast.Eq: o.eq, ast.NotEq: o.ne, ast.Lt: o.lt, ast.LtE: o.le, ast.Gt: o.gt, ast.GtE: o.ge,
         ast.Is: o.is_, ast.IsNot: o.is_not, ast.In: lambda x, y: x in y, ast.NotIn: lambda x, y: x not in y}
    return m[type(op)](a, b)


def _const_compare_chain(ops, objs):
    """``a < b < c`` of values known now: ``a < b and b < c`` (b once), the first false comparison decides, as in
    Python; the value of a single comparison as it is (an array comparison gives an array). None for a chain
    holding anything but numbers, strings and None: the truth value of an array comparison raises, and that is
    left for when the code runs."""
    if len(objs) == 2:
        return _const_compare(ops[0], objs[0], objs[1])
    if not all(isinstance(o, (bool, int, float, complex, str, bytes, type(None), np.bool_, np.number)) for o in objs):
        return None
    for op, a, b in zip(ops, objs, objs[1:]):
        res = _const_compare(op, a, b)
        if not res:
            break
    return res
