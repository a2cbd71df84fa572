"""Emit: write generated source to a real file, import it, compile it.

Guarantees: the generated module is readable Python (primitives that are
operators print as operators, indexing as indexing, each adjoint statement
followed by a comment naming the primal statement it undoes); it is written
once to a content-hashed file in the cache directory (``FUNCGRAD_CACHE_DIR``,
default ``~/.cache/funcgrad``) so ``inspect``, ``pdb`` and Numba's disk cache
(``cache=True``) work across processes; and it can be run three ways from the
same source: compiled whole with ``numba.njit``, as Python over the kernel
namespace ``K``, or as Python with every Numba kernel replaced by its Python
(``jit=False``).
"""
from __future__ import annotations

import ast
import copy
import hashlib
import importlib.util
import os
import sys
import tempfile
import types

_BIN = {"+": ast.Add, "-": ast.Sub, "*": ast.Mult, "/": ast.Div, "**": ast.Pow, "@": ast.MatMult}


class _Pretty(ast.NodeTransformer):
    """Primitive calls that are operators become operator syntax."""

    def visit_Call(self, node):
        self.generic_visit(node)
        prim = getattr(node, "_funcgrad_prim", None)
        if prim is None or prim.operator is None:
            return node
        op = prim.operator
        if op == "[]":
            return ast.Subscript(value=node.args[0], slice=node.args[1], ctx=ast.Load())
        if op == "neg":
            return ast.UnaryOp(op=ast.USub(), operand=node.args[0])
        if len(node.args) == 2 and not node.keywords:
            return ast.BinOp(left=node.args[0], op=_BIN[op](), right=node.args[1])
        return node


def pretty(node):
    n = _Pretty().visit(copy.deepcopy(node))
    for sub in ast.walk(n):
        if isinstance(sub, (ast.stmt, ast.expr)) and not hasattr(sub, "lineno"):
            sub.lineno, sub.col_offset, sub.end_lineno, sub.end_col_offset = 1, 0, 1, 0
    return n


def render_stmt(s) -> str:
    return ast.unparse(pretty(s))


def render_block(stmts, indent=1) -> list[str]:
    pad = "    " * indent
    lines = []
    for s in stmts:
        c = getattr(s, "_funcgrad_comment", None)
        if isinstance(s, (ast.For, ast.While, ast.If)):
            head = copy.copy(s)
            if isinstance(s, ast.For):
                text = f"for {ast.unparse(pretty(s.target))} in {ast.unparse(pretty(s.iter))}:"
            elif isinstance(s, ast.While):
                text = f"while {ast.unparse(pretty(s.test))}:"
            else:
                text = f"if {ast.unparse(pretty(s.test))}:"
            lines.append(pad + text + (f"  # {c}" if c else ""))
            lines.extend(render_block(s.body, indent + 1) or [pad + "    pass"])
            if isinstance(s, ast.If) and s.orelse:
                lines.append(pad + "else:")
                lines.extend(render_block(s.orelse, indent + 1))
            del head
            continue
        text = render_stmt(s)
        for i, ln in enumerate(text.splitlines()):
            if i == 0 and c:
                ln = f"{ln:<40}  # {c}" if len(ln) < 40 else f"{ln}  # {c}"
            lines.append(pad + ln)
    return lines


def module_source(header: str, functions: list[tuple[str, list[str], list]], returns) -> str:
    """Source text of a generated module: ``functions`` is [(name, params, body stmts + return)]."""
    out = [f'"""{header}"""', "import numpy as np", "import funcgrad.kernels.cpu as K", ""]
    for name, params, body in functions:
        out.append("")
        out.append(f"def {name}({', '.join(params)}):")
        out.extend(render_block(body) or ["    pass"])
    return "\n".join(out) + "\n"


def cache_dir() -> str:
    d = os.environ.get("FUNCGRAD_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "funcgrad")
    d = os.path.join(d, "generated")
    os.makedirs(d, exist_ok=True)
    return d


def write_module(stem: str, source: str):
    """Write ``source`` to ``<cache>/<stem>_<hash>.py`` (atomically, once) and import it."""
    h = hashlib.sha256(source.encode()).hexdigest()[:16]
    safe = "".join(c if c.isalnum() or c == "_" else "_" for c in stem)[:60]
    modname = f"funcgrad_generated_{safe}_{h}"
    if modname in sys.modules:
        return sys.modules[modname]
    path = os.path.join(cache_dir(), f"{modname}.py")
    if not os.path.exists(path):
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    spec.loader.exec_module(mod)
    return mod


_PY_K = None


def python_kernels():
    global _PY_K
    if _PY_K is None:
        from ..kernels import cpu
        _PY_K = cpu.python_namespace()
    return _PY_K


def compile_function(mod, name: str, mode: str, externals: dict):
    """The function ``name`` of ``mod`` for ``mode`` in {"njit", "python", "nojit"}."""
    for k, v in externals.items():
        setattr(mod, k, v)
    fn = getattr(mod, name)
    if mode == "python":
        return fn
    if mode == "nojit":
        g = dict(fn.__globals__)
        g["K"] = python_kernels()
        return types.FunctionType(fn.__code__, g, fn.__name__)
    if mode == "njit":
        import numba
        return numba.njit(cache=True)(fn)
    raise ValueError(f"unknown mode {mode!r}")
