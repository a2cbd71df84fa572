"""Parse: a Python function object -> its ``ast.FunctionDef`` at the user's lines.

Guarantees: the returned tree's line numbers are the lines of the user's file
(so every later error can name ``file:line``), lambdas are located by their
code object's position and returned as an equivalent ``def`` with a single
``return``, and free variables can be resolved to the Python objects they name
at call time (closure cells first, then the function's globals, then builtins).
"""
from __future__ import annotations

import ast
import builtins
import inspect
import linecache
import textwrap
from dataclasses import dataclass, field

from ..errors import UnsupportedSyntaxError

_MISSING = object()


@dataclass
class Parsed:
    fn: object
    node: ast.FunctionDef
    filename: str
    globals: dict
    closure: dict = field(default_factory=dict)

    def line_text(self, lineno):
        return linecache.getline(self.filename, lineno) if lineno else ""

    def lookup(self, name):
        """The object a free name refers to, or ``_MISSING``."""
        if name in self.closure:
            return self.closure[name]
        if name in self.globals:
            return self.globals[name]
        return getattr(builtins, name, _MISSING)


_CACHE: dict = {}


def parse(fn) -> Parsed:
    """Parse ``fn``'s source; cached per code object (the tree is never mutated)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        raise TypeError(f"funcgrad can only transform Python functions; received {fn!r} "
                        f"of type {type(fn).__name__}")
    closure = {}
    if fn.__closure__:
        for name, cell in zip(code.co_freevars, fn.__closure__):
            try:
                closure[name] = cell.cell_contents
            except ValueError:  # empty cell: the name is not bound yet
                pass
    key = code
    node, filename = _CACHE.get(key, (None, None))
    if node is None:
        node, filename = _parse_code(fn, code)
        _CACHE[key] = (node, filename)
    return Parsed(fn=fn, node=node, filename=filename, globals=fn.__globals__, closure=closure)


def _parse_code(fn, code):
    filename = code.co_filename
    try:
        lines, first = inspect.findsource(code)
    except (OSError, TypeError) as e:
        raise UnsupportedSyntaxError(
            f"cannot read the source of {getattr(fn, '__qualname__', fn)!r}: {e}", filename, code.co_firstlineno,
            hint="funcgrad transforms source code: define the function in a file (or register interactive "
                 "source with linecache)") from None
    start = code.co_firstlineno - 1
    if code.co_name == "<lambda>":
        return _parse_lambda(code, lines, filename), filename
    block = inspect.getblock(lines[start:])
    src = "".join(block)
    dedented = textwrap.dedent(src)
    indent = len(src) - len(src.lstrip()) if src.strip() else 0
    indent = len(block[0]) - len(block[0].lstrip())
    tree = ast.parse(dedented)
    fdef = tree.body[0]
    while isinstance(fdef, (ast.ClassDef,)):  # pragma: no cover
        fdef = fdef.body[0]
    if not isinstance(fdef, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise UnsupportedSyntaxError("expected a function definition", filename, code.co_firstlineno)
    ast.increment_lineno(fdef, start)
    for n in ast.walk(fdef):
        if hasattr(n, "col_offset"):
            n.col_offset += indent
    fdef.decorator_list = []
    return fdef, filename


def _parse_lambda(code, lines, filename):
    lineno = code.co_firstlineno
    col = None
    try:
        for pos in code.co_positions():
            if pos[0] == lineno and pos[2] is not None:
                col = pos[2] if col is None else min(col, pos[2])
    except AttributeError:  # pragma: no cover - Python < 3.11
        pass
    # parse the smallest enclosing statement span that parses
    src = None
    for end in range(lineno, min(len(lines), lineno + 50) + 1):
        chunk = "".join(lines[lineno - 1:end])
        for candidate in (textwrap.dedent(chunk), "(" + chunk.strip() + "\n)"):
            try:
                tree = ast.parse(candidate)
                src = candidate
                break
            except SyntaxError:
                continue
        if src is not None:
            break
    if src is None:
        raise UnsupportedSyntaxError("cannot locate the lambda's source", filename, lineno)
    shift = 0 if not src.startswith("(") else 1
    lambdas = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda)]
    argnames = list(code.co_varnames[:code.co_argcount])
    cands = [n for n in lambdas if [a.arg for a in n.args.args] == argnames and n.lineno == 1]
    if col is not None and len(cands) > 1:
        indent = len(lines[lineno - 1]) - len(lines[lineno - 1].lstrip()) if not shift else len(lines[lineno - 1]) - len(lines[lineno - 1].lstrip()) - 1
        best = [n for n in cands if n.body.col_offset + indent <= col]
        cands = sorted(best or cands, key=lambda n: -(n.body.col_offset))
    if not cands:
        raise UnsupportedSyntaxError("cannot locate the lambda's source", filename, lineno)
    lam = cands[0]
    ret = ast.Return(value=lam.body)
    fdef = ast.FunctionDef(name="<lambda>", args=lam.args, body=[ret], decorator_list=[], returns=None,
                           type_comment=None, type_params=[])
    ast.copy_location(ret, lam.body)
    ast.copy_location(fdef, lam)
    ast.fix_missing_locations(fdef)
    ast.increment_lineno(fdef, lineno - 1)
    return fdef


def resolve_attr_chain(node, lookup):
    """Resolve ``a.b.c`` to an object via ``lookup`` for the root name, or ``_MISSING``."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return _MISSING
    obj = lookup(node.id)
    if obj is _MISSING:
        return _MISSING
    for p in reversed(parts):
        obj = getattr(obj, p, _MISSING)
        if obj is _MISSING:
            return _MISSING
    return obj


MISSING = _MISSING
