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
from .astutil import ast_walk

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


def _source_lines(fn, code):
    """The lines of the file ``code`` was compiled from, as ``inspect.findsource`` reads them (the file is
    read again when it changed on disk; a module's loader serves a file that is not on disk), without
    ``inspect.getmodule``'s walk over ``sys.modules`` (tens of milliseconds at a process's first call)."""
    filename = code.co_filename
    if not (filename.startswith("<") and filename.endswith(">")):
        linecache.checkcache(filename)
    lines = linecache.getlines(filename, getattr(fn, "__globals__", None))
    if lines:
        return lines
    return inspect.findsource(code)[0]   # no lines: inspect says why (OSError)


def _parse_code(fn, code):
    filename = code.co_filename
    try:
        lines = _source_lines(fn, code)
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
    a = fdef.args
    if fdef.name != code.co_name or [x.arg for x in a.posonlyargs + a.args] != list(
            code.co_varnames[:code.co_argcount]):
        # the source is read when the function is first transformed: a file edited since it was imported holds
        # other code at that line, and differentiating it would not be differentiating the function that runs
        raise UnsupportedSyntaxError(
            f"the source of {getattr(fn, '__qualname__', code.co_name)!r} changed after it was imported: line "
            f"{code.co_firstlineno} of its file now holds {'def ' + fdef.name!r}", filename, code.co_firstlineno,
            hint="reload the module (importlib.reload) or restart Python, so the function that runs is the one "
                 "in the file")
    ast.increment_lineno(fdef, start)
    for n in ast_walk(fdef):
        if hasattr(n, "col_offset"):
            n.col_offset += indent
    fdef.decorator_list = []
    _generators_as_lists(fdef)
    if (getattr(fn, "__module__", None) or "").startswith(GENERATED_PREFIX):
        _kernel_writes_as_syntax(fdef)
    return fdef, filename


GENERATED_PREFIX = "funcgrad_generated_"   # the module names of generated code (transform/emit.py)


def _kernel_writes_as_syntax(fdef):
    """Generated code read back: ``x = K.index_put(x, i, v)`` (a write the CPU spells as a kernel call, see
    transform/emit.py: rows_as_kernel) is the in-place write ``x[i] = v`` it performs, so the passes see the
    write itself (other names holding ``x`` see it too)."""
    for node in ast_walk(fdef):
        for field in ("body", "orelse"):
            stmts = getattr(node, field, None)
            if not isinstance(stmts, list):
                continue
            for k, st in enumerate(stmts):
                if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) and \
                        isinstance(st.value, ast.Call) and isinstance(st.value.func, ast.Attribute) and \
                        st.value.func.attr == "index_put" and isinstance(st.value.func.value, ast.Name) and \
                        st.value.func.value.id == "K" and len(st.value.args) == 3 and not st.value.keywords and \
                        isinstance(st.value.args[0], ast.Name) and st.value.args[0].id == st.targets[0].id:
                    x, idx, v = st.value.args
                    stmts[k] = ast.copy_location(ast.Assign(
                        targets=[ast.Subscript(value=ast.Name(x.id, ast.Load()), slice=idx, ctx=ast.Store())],
                        value=v), st)


_YIELDED = "_yielded_items"


def _own_nodes(fdef):
    """The nodes of ``fdef``'s body, not looking into nested functions, lambdas or classes."""
    stack = list(fdef.body)
    while stack:
        n = stack.pop()
        yield n
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(n))


class _YieldToAppend(ast.NodeTransformer):
    def visit_FunctionDef(self, node):   # nested functions keep their own yields
        return node

    visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = visit_FunctionDef

    def visit_Expr(self, node):
        v = node.value
        if isinstance(v, ast.Yield):
            item = v.value if v.value is not None else ast.Constant(None)
            new = ast.Expr(value=ast.Call(func=ast.Attribute(value=ast.Name(_YIELDED, ast.Load()), attr="append",
                                                             ctx=ast.Load()), args=[item], keywords=[]))
        elif isinstance(v, ast.YieldFrom):
            new = ast.For(target=ast.Name(_YIELDED + "_v", ast.Store()), iter=v.value, body=[ast.Expr(value=ast.Call(
                func=ast.Attribute(value=ast.Name(_YIELDED, ast.Load()), attr="append", ctx=ast.Load()),
                args=[ast.Name(_YIELDED + "_v", ast.Load())], keywords=[]))], orelse=[])
        else:
            return node
        for n in ast_walk(new):
            if isinstance(n, (ast.stmt, ast.expr)) and not hasattr(n, "lineno"):
                ast.copy_location(n, node)
        return new

    def visit_Return(self, node):
        return ast.copy_location(ast.Return(value=ast.Name(_YIELDED, ast.Load())), node)


def _generators_as_lists(fdef):
    """A generator helper (``yield`` as a statement, ``yield from``) becomes a function that returns the list
    of what it yields: its callers iterate it (``for W, b in layers(params)``), ``sum``, ``zip`` or ``list``
    it, all of which read a list the same way, and a pure function has no effects to interleave. A
    ``yield`` used as a value (``x = yield``) stays, and the fence refuses it at its line."""
    for f in [fdef] + [n for n in ast_walk(fdef) if isinstance(n, ast.FunctionDef) and n is not fdef]:
        own = list(_own_nodes(f))
        yields = [n for n in own if isinstance(n, (ast.Yield, ast.YieldFrom))]
        if not yields:
            continue
        stmt_yields = {id(n.value) for n in own if isinstance(n, ast.Expr) and isinstance(n.value, (ast.Yield,
                                                                                                    ast.YieldFrom))}
        if any(id(y) not in stmt_yields for y in yields):
            continue
        body = [_YieldToAppend().visit(s) for s in f.body]
        first = f.body[0]
        init = ast.copy_location(ast.Assign(targets=[ast.Name(_YIELDED, ast.Store())],
                                            value=ast.List(elts=[], ctx=ast.Load())), first)
        ast.copy_location(init.targets[0], first)
        ast.copy_location(init.value, first)
        last = f.body[-1]
        ret = ast.Return(value=ast.Name(_YIELDED, ast.Load()))
        ast.copy_location(ret, last)
        ast.copy_location(ret.value, last)
        f.body = [init] + body + [ret]
        f.generator_yield = yields[0]   # the function itself, differentiated, is refused at its first yield


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
    cands = [n for n in ast_walk(tree) if isinstance(n, ast.Lambda) and n.lineno + shift == lineno
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
    key = src   # the text itself: a hash of it could collide, and another file's tree would be read
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
