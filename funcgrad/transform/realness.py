"""Which names of an A-normal-form body may hold complex values.

The reverse pass keeps one invariant for complex numbers: a name's cotangent has the name's own kind
(the cotangent of a real value is real, that of a complex value complex), as autograd's
``match_complex`` does. Where a primitive's operands and result are all known to be real there is
nothing to do and nothing is emitted, so real code is unchanged; elsewhere each contribution passes
through ``K.match_complex`` (a no-op, decided at typing time when compiled, where the kinds agree).

:func:`maybe_complex` is a least fixpoint over the body: a name may be complex when a parameter's
spec is not known real, when it is assigned a complex constant, the result of a primitive declaring
``result_kind = "complex"`` (``np.fft.fft``), or of one whose operands may be complex (unless the
primitive declares ``result_kind = "real"``: ``np.abs``, ``np.real``), or a value of a call funcgrad
does not know (a library function; NumPy's array constructors without a ``dtype`` are known real, and
so are the non-primitive ``K.*`` helpers templates call: counts, shapes, weights).
"""
from __future__ import annotations

import ast

import numpy as np

from . import annotations as A

__all__ = ["maybe_complex", "expr_maybe_complex"]

_REAL_KINDS = ("f8", "f4", "i", "b")
# NumPy calls (no derivative rule) whose result is real when no ``dtype`` is given and no operand is complex
_REAL_CONSTRUCTORS = {id(f) for f in (np.zeros, np.ones, np.empty, np.full, np.arange, np.linspace, np.eye,
                                      np.identity, np.zeros_like, np.ones_like, np.empty_like, np.full_like,
                                      np.shape, np.ndim, np.size, np.argmax, np.argmin, np.argsort, np.floor,
                                      np.ceil, np.round, np.isnan, np.isfinite, np.isinf, np.any, np.all,
                                      np.nonzero, np.count_nonzero, np.searchsorted)}
_REAL_BUILTINS = {"int", "float", "len", "range", "bool", "round", "slice"}


def expr_maybe_complex(e, names) -> bool:
    """Whether expression ``e`` may be complex, given the set ``names`` of names that may be."""
    if e is None:
        return False
    if isinstance(e, ast.Constant):
        return isinstance(e.value, complex)
    if isinstance(e, ast.Name):
        return e.id in names
    if isinstance(e, (ast.Compare, ast.BoolOp, ast.Slice)):   # a slice's bounds are integers
        return False
    if isinstance(e, ast.UnaryOp):
        return not isinstance(e.op, ast.Not) and expr_maybe_complex(e.operand, names)
    if isinstance(e, ast.BinOp):
        return expr_maybe_complex(e.left, names) or expr_maybe_complex(e.right, names)
    if isinstance(e, ast.IfExp):
        return expr_maybe_complex(e.body, names) or expr_maybe_complex(e.orelse, names)
    if isinstance(e, (ast.Tuple, ast.List)):
        return any(expr_maybe_complex(x, names) for x in e.elts)
    if isinstance(e, ast.Attribute):
        if e.attr in ("shape", "ndim", "size", "dtype", "real", "imag"):
            return False
        return expr_maybe_complex(e.value, names)
    if isinstance(e, ast.Subscript):
        node = e
        while isinstance(node, ast.Subscript):
            node = node.value
        if isinstance(node, ast.Attribute) and node.attr in ("shape", "ndim", "size"):
            return False
        return expr_maybe_complex(node, names)
    if isinstance(e, ast.Call):
        operands = list(e.args) + [k.value for k in e.keywords]
        prim = A.get(e, A.PRIM, None)
        if prim is not None:
            kind = getattr(prim, "result_kind", None)
            if kind == "real":
                return False
            if kind == "complex":
                return True
            return any(expr_maybe_complex(a, names) for a in operands)
        fn = A.get(e, A.NONDIFF, None)
        if fn is not None and id(fn) in _REAL_CONSTRUCTORS:
            return any(k.arg == "dtype" for k in e.keywords) or any(expr_maybe_complex(a, names) for a in operands)
        if isinstance(e.func, ast.Name) and e.func.id in _REAL_BUILTINS:
            return False
        f = e.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and (
                f.value.id == "K" or f.value.id == "np" and f.attr in ("shape", "ndim", "size")):
            return False  # a template's helper (counts, shapes, weights) or metadata
        return True      # a call funcgrad does not know: it may return anything
    return True


def maybe_complex(body, param_kinds, params) -> set:
    """The names of ``body`` (an ANF function body) that may hold complex values."""
    names = {p for p in params if param_kinds.get(p) not in _REAL_KINDS}

    def walk(stmts):
        changed = False
        for s in stmts:
            if isinstance(s, ast.For):
                t = s.target.id if isinstance(s.target, ast.Name) else None
                if t is not None and t not in names and expr_maybe_complex(s.iter, names) and not (
                        isinstance(s.iter, ast.Call) and isinstance(s.iter.func, ast.Name) and s.iter.func.id == "range"):
                    names.add(t)
                    changed = True
                changed |= walk(s.body)
                changed |= walk(s.orelse)
            elif isinstance(s, (ast.While, ast.If)):
                changed |= walk(s.body)
                changed |= walk(s.orelse)
            elif isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name):
                n = s.targets[0].id
                if n not in names and expr_maybe_complex(s.value, names):
                    names.add(n)
                    changed = True
        return changed

    for _ in range(100):
        if not walk(body):
            break
    return names
