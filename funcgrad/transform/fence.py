"""Fence: refuse what the transformation does not support, at the user's line.

Guarantee: after ``check`` returns, the function body uses only constructs the
later passes handle. Everything else raises
:class:`funcgrad.errors.UnsupportedSyntaxError` carrying the user's file, line,
column and source text, with a hint of what to write instead. Nothing
unsupported is ever silently transformed into wrong code.
"""
from __future__ import annotations

import ast
import re

from ..errors import NoDerivativeError, UnsupportedSyntaxError

_HINTS = {
    ast.Try: ("try/except is not supported in a differentiated function",
              "move error handling outside the function you differentiate"),
    ast.With: ("'with' blocks are not supported in a differentiated function",
               "open files or contexts outside the function you differentiate"),
    ast.AsyncWith: ("'async with' is not supported", "use a plain function"),
    # generators whose yields are statements are lists by now (parse): what is left uses a yield's value
    ast.Yield: ("a 'yield' whose value is used (x = yield ...) is not supported",
                "yield as a statement ('yield v'), or return a list"),
    ast.YieldFrom: ("a 'yield from' whose value is used is not supported",
                    "yield as a statement ('yield from it'), or return a list"),
    ast.Await: ("await is not supported", "use a plain function"),
    ast.Global: ("'global' is not supported: the function must be pure",
                 "return the new value instead of assigning a global"),
    ast.Nonlocal: ("'nonlocal' is supported only in a function defined inside the function you differentiate",
                   "return the new value instead of rebinding an outer variable"),
    ast.ClassDef: ("class definitions inside a differentiated function are not supported",
                   "define the class at module level"),
    ast.Import: ("imports inside a differentiated function are not supported", "import at module level"),
    ast.ImportFrom: ("imports inside a differentiated function are not supported", "import at module level"),
    ast.AsyncFunctionDef: ("async functions are not supported", "use a plain def"),
    ast.AsyncFor: ("async for is not supported", "use a plain for loop"),
    ast.SetComp: ("set comprehensions are not supported", "use arrays"),
    ast.NamedExpr: ("the walrus operator ':=' is not supported", "assign on a separate line"),
    ast.Set: ("set literals are not supported", "use a tuple"),
    ast.Match: ("'match' statements are not supported", "use if/elif"),
}


def error(parsed, node, msg, hint=None, cls=UnsupportedSyntaxError):
    # a generator helper returns the list of what it yields (parse): that list in the user's words
    msg = msg.replace("'_yielded_items'", "the values a generator yields")
    lineno = getattr(node, "lineno", None)
    col = getattr(node, "col_offset", None)
    if issubclass(cls, NoDerivativeError):
        return cls(msg + (f"\n  hint: {hint}" if hint else ""), parsed.filename, lineno, parsed.line_text(lineno))
    return cls(msg, parsed.filename, lineno, (col + 1) if col is not None else None,
               parsed.line_text(lineno), hint=hint)


class _Fence(ast.NodeVisitor):
    def __init__(self, parsed, allow_control_flow: bool, entry: bool = True, nested: bool = False):
        self.parsed = parsed
        self.allow_control_flow = allow_control_flow
        self.depth = 0 if entry else 1   # a helper's keyword-only parameters are given by its caller
        # 'nonlocal' names a variable of an enclosing function funcgrad transforms too: allowed in a def nested
        # in the code being checked, or in the nested def itself (``nested``); not in a function whose
        # enclosing scope is outside (a closure handed in)
        self.nonlocal_depth = self.depth + (1 if nested else 2)

    def visit_Nonlocal(self, node):
        if self.depth < self.nonlocal_depth:
            msg, hint = _HINTS[ast.Nonlocal]
            raise error(self.parsed, node, msg, hint)

    def generic_visit(self, node):
        for cls, (msg, hint) in _HINTS.items():
            if isinstance(node, cls):
                raise error(self.parsed, node, msg, hint)
        super().generic_visit(node)

    def visit_FunctionDef(self, node):
        a = node.args
        if a.kwonlyargs and any(d is None for d in a.kw_defaults) and self.depth == 0:
            raise error(self.parsed, node, "keyword-only parameters without defaults are not supported",
                        "give them defaults or make them positional")
        self.depth += 1
        for s in node.body:
            self.visit(s)
        self.depth -= 1

    def _control(self, node, what):
        if not self.allow_control_flow:
            raise error(self.parsed, node, f"{what} is not supported yet",
                        "write straight-line NumPy (np.where for element-wise choices)")

    def visit_For(self, node):
        self._control(node, "a 'for' loop")
        self.generic_visit(node)

    def visit_While(self, node):
        self._control(node, "a 'while' loop")
        self.generic_visit(node)

    def visit_If(self, node):
        self._control(node, "an 'if' statement")
        self.generic_visit(node)

    def visit_IfExp(self, node):
        self._control(node, "a conditional expression (a if c else b)")
        self.generic_visit(node)

    def visit_Break(self, node):
        self._control(node, "'break'")

    def visit_Continue(self, node):
        self._control(node, "'continue'")

    def visit_Name(self, node):
        _reserved(self.parsed, node, node.id)

    def visit_arg(self, node):
        _reserved(self.parsed, node, node.arg)

    def visit_Expr(self, node):
        # docstrings, print/logging calls (run, no derivative), list.append & co.: normalize decides
        self.generic_visit(node)


# the flags the structure pass introduces for return/break/continue (see structure): a user's variable
# of the same name would be the same variable
_STRUCTURE_NAMES = re.compile(r"__(ret|rf\d+|brk\d+|cont\d+|els\d+)")


def _reserved(parsed, node, name):
    if _STRUCTURE_NAMES.fullmatch(name):
        raise error(parsed, node, f"the name '{name}' is reserved by funcgrad (it names a flag of the rewritten "
                                  "return/break/continue)", "rename the variable")


def check(parsed, node=None, allow_control_flow: bool = False, entry: bool = True, nested: bool = False) -> None:
    """Raise ``UnsupportedSyntaxError`` at the first unsupported construct in the function (``entry``: the
    function differentiated, whose keyword-only parameters need defaults; a helper's are given by its call;
    ``nested``: a def inside the code being transformed, whose ``nonlocal`` names are the transform's)."""
    _Fence(parsed, allow_control_flow, entry, nested).visit(node if node is not None else parsed.node)
