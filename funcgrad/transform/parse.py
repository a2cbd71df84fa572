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
    key = (code, code.co_filename)   # code objects compare equal across files (co_filename is not compared)
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
    """The lambda ``code`` was compiled from, as a ``def`` with one ``return``.

    Several lambdas can share a line (``f, g = (lambda x: x * x), (lambda x: np.sin(x))``): the one meant
    is the lambda on the code object's first line whose source span holds every instruction of the code
    object (``co_positions``), the innermost if lambdas nest. Without positions (Python < 3.11), a lambda
    is found only when it is the one on its line with these parameters; otherwise the call is refused.
    """
    lineno = code.co_firstlineno
    tree = _parse_file(lines)
    shift = 0
    if tree is None:   # not a parseable file (a cell, a snippet): the smallest statement span that parses
        tree, shift = _parse_span(lines, lineno, filename)
    argnames = _lambda_params(code)
    cands = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda) and n.lineno + shift == lineno
             and _node_params(n.args) == argnames]
    positions = _positions(code)
    if positions and shift == 0:
        inside = [n for n in cands if all(_within(p, n) for p in positions)]
        inside.sort(key=lambda n: (n.end_lineno - n.lineno, (n.end_col_offset or 0) - n.col_offset))
        cands = inside[:1]
    if len(cands) != 1:
        what = "cannot locate the lambda's source" if not cands else \
            f"{len(cands)} lambdas with the parameters ({', '.join(argnames)}) are on this line"
        raise UnsupportedSyntaxError(what, filename, lineno, text=linecache.getline(filename, lineno) or None,
                                     hint="define the function with def, or put each lambda on its own line")
    lam = cands[0]
    ret = ast.Return(value=lam.body)
    fdef = ast.FunctionDef(name="<lambda>", args=lam.args, body=[ret], decorator_list=[], returns=None,
                           type_comment=None, type_params=[])
    ast.copy_location(ret, lam.body)
    ast.copy_location(fdef, lam)
    ast.fix_missing_locations(fdef)
    if shift:
        ast.increment_lineno(fdef, shift)
    return fdef


_FILE_TREES: dict = {}


def _parse_file(lines):
    """The whole source file as an AST (its line and column numbers are the code objects'), or None."""
    src = "".join(lines)
    key = hash(src)
    if key not in _FILE_TREES:
        try:
            _FILE_TREES[key] = ast.parse(src)
        except (SyntaxError, ValueError):
            _FILE_TREES[key] = None
        if len(_FILE_TREES) > 64:
            _FILE_TREES.pop(next(iter(_FILE_TREES)))
    return _FILE_TREES[key]


def _parse_span(lines, lineno, filename):
    """(tree, line shift) of the smallest span of lines starting at ``lineno`` that parses."""
    for end in range(lineno, min(len(lines), lineno + 50) + 1):
        chunk = "".join(lines[lineno - 1:end])
        for candidate in (textwrap.dedent(chunk), "(" + chunk.strip() + "\n)"):
            try:
                return ast.parse(candidate), lineno - 1
            except SyntaxError:
                continue
    raise UnsupportedSyntaxError("cannot locate the lambda's source", filename, lineno)


def _lambda_params(code):
    n = code.co_argcount + code.co_kwonlyargcount
    names = list(code.co_varnames[:n])
    if code.co_flags & inspect.CO_VARARGS:
        names.append("*" + code.co_varnames[n])
        n += 1
    if code.co_flags & inspect.CO_VARKEYWORDS:
        names.append("**" + code.co_varnames[n])
    return names


def _node_params(a):
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    if a.vararg is not None:
        names.append("*" + a.vararg.arg)
    if a.kwarg is not None:
        names.append("**" + a.kwarg.arg)
    return names


def _positions(code):
    """(line, end line, column, end column) of every instruction that has a real source span (RESUME and the
    implicit return have an empty one at column 0)."""
    try:
        return [p for p in code.co_positions() if None not in p and (p[0], p[2]) != (p[1], p[3])]
    except AttributeError:  # pragma: no cover - Python < 3.11
        return []


def _within(pos, node):
    line, end_line, col, end_col = pos
    start, stop = (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset)
    return start <= (line, col) and (end_line, end_col) <= stop


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
