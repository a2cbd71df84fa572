"""Emit: write generated source to a real file, import it, compile it.

Guarantees: the generated module is readable Python (primitives that are
operators print as operators, indexing as indexing, each adjoint statement
followed by a comment naming the primal statement it undoes); it is written
once to a content-hashed file in the cache directory (``FUNCGRAD_CACHE_DIR``,
default ``~/.cache/funcgrad``) so ``inspect``, ``pdb`` and Numba's disk cache
(``cache=True``) work across processes; and it names its kernels only
through ``K``, which the backend compiling it injects
(:mod:`funcgrad.kernels.base`), so the same source runs on any backend under
any strategy.
"""
from __future__ import annotations

import ast
import copy
import hashlib
import importlib.util
import math
import os
import sys
import tempfile

import numpy as np
from . import annotations as A
from ..kernels.base import INTERPRETED
from .astutil import clone
from .parse import GENERATED_PREFIX
from .astutil import ast_walk

_BIN = {"+": ast.Add, "-": ast.Sub, "*": ast.Mult, "/": ast.Div, "**": ast.Pow, "@": ast.MatMult}


class _Pretty(ast.NodeTransformer):
    """Primitive calls that are operators become operator syntax."""

    def visit_Constant(self, node):
        # a negative number folded into one constant prints as -2, which binds looser than ** (and .attr):
        # ast.unparse wrote (-2) ** n as -2 ** n, -(2 ** n). As the operator -(2) it is parenthesized right
        v = node.value
        if type(v) in (int, float) and (v < 0 or v == 0 and type(v) is float and math.copysign(1.0, v) < 0):
            return ast.UnaryOp(op=ast.USub(), operand=ast.Constant(-v))
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        prim = A.get(node, A.PRIM, None)
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


_KERNEL_OPS = {ast.Add: "add", ast.Sub: "subtract", ast.Mult: "multiply", ast.Div: "divide", ast.Pow: "power",
               ast.MatMult: "matmul", ast.Mod: "op_mod", ast.FloorDiv: "op_floordiv", ast.BitAnd: "op_and",
               ast.BitOr: "op_or"}
# comparisons keep Python's meaning on host values (tuples, strings); on arrays they are elementwise
_KERNEL_CMP = {ast.Eq: "op_eq", ast.NotEq: "op_ne", ast.Lt: "op_lt", ast.LtE: "op_le", ast.Gt: "op_gt",
               ast.GtE: "op_ge"}


def _index_value(idx):
    """An index written as a value (``::-1`` -> ``slice(None, None, -1)``), to pass it to a kernel."""
    if isinstance(idx, ast.Slice):
        none = ast.Constant(None)
        return ast.Call(func=ast.Name("slice", ast.Load()), args=[idx.lower or none, idx.upper or none,
                                                                   idx.step or none], keywords=[])
    if isinstance(idx, ast.Tuple):
        return ast.Tuple(elts=[_index_value(e) for e in idx.elts], ctx=ast.Load())
    return idx


def _basic_slicing(idx, need_slice=True):
    """Whether index ``idx`` is slices, constants and ``None`` (with at least one slice where ``need_slice``):
    basic indexing any array type does itself (a view)."""
    items = idx.elts if isinstance(idx, ast.Tuple) else [idx]
    return (not need_slice or any(isinstance(e, ast.Slice) for e in items)) and all(
        isinstance(e, ast.Constant) or isinstance(e, ast.Slice) and all(
            b is None or isinstance(b, (ast.Constant, ast.Name)) or isinstance(b, ast.UnaryOp) and isinstance(
                b.operand, ast.Constant) for b in (e.lower, e.upper, e.step)) for e in items)


def _k(name, *args):
    return ast.Call(func=ast.Attribute(value=ast.Name("K", ast.Load()), attr=name, ctx=ast.Load()),
                    args=list(args), keywords=[])


class _AsKernels(ast.NodeTransformer):
    """For backends whose arrays have no Python operators: arithmetic becomes ``K.<primitive>`` calls
    (indexing stays indexing)."""

    visit_Constant = _Pretty.visit_Constant

    def visit_Call(self, node):
        self.generic_visit(node)
        prim = A.get(node, A.PRIM, None)
        if prim is not None and prim.operator == "[]":   # the backend's arrays index themselves only in part
            idx = node.args[1]
            if _basic_slicing(idx):
                return ast.Subscript(value=node.args[0], slice=idx, ctx=ast.Load())   # (slices are syntax)
            return _k("getitem", node.args[0], _index_value(idx))
        return node

    def visit_Subscript(self, node):
        """``y[idx]`` written as syntax by a pass (a tape's copy of what a write overwrites): the kernel unless
        the index is slices and constants (``x[:, cols]``, ``y[idx]`` with arrays are gathers the backend's
        arrays cannot do themselves; ``K.getitem`` indexes a Python container as Python)."""
        self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load) or _basic_slicing(node.slice, need_slice=False):
            return node
        return ast.copy_location(_k("getitem", node.value, _index_value(node.slice)), node)

    def visit_BinOp(self, node):
        self.generic_visit(node)
        name = _KERNEL_OPS.get(type(node.op))
        if name is None:
            return node
        return ast.Call(func=ast.Attribute(value=ast.Name("K", ast.Load()), attr=name, ctx=ast.Load()),
                        args=[node.left, node.right], keywords=[])

    def visit_Assign(self, node):
        """``y[idx] = v`` (an in-place write) as ``y = K.index_put(y, idx, v)``."""
        self.generic_visit(node)
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript) and \
                isinstance(node.targets[0].value, ast.Name):
            t = node.targets[0]
            return ast.copy_location(ast.Assign(targets=[ast.Name(t.value.id, ast.Store())],
                                                value=_k("index_put", ast.Name(t.value.id, ast.Load()),
                                                         _index_value(t.slice), node.value)), node)
        return node

    def visit_AugAssign(self, node):
        """``g[idx] += v`` (an adjoint accumulating into part of a cotangent) as
        ``g = K.index_add(g, idx, v)``: in place, as NumPy's ``+=`` (np.add.at where indices repeat)."""
        self.generic_visit(node)
        t = node.target
        if isinstance(node.op, ast.Add) and isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
            return ast.copy_location(ast.Assign(targets=[ast.Name(t.value.id, ast.Store())],
                                                value=_k("index_add", ast.Name(t.value.id, ast.Load()),
                                                         _index_value(t.slice), node.value)), node)
        return node

    def visit_Compare(self, node):
        """``a < b`` (``a < b < c``) as ``K.less`` (joined by ``K.logical_and``): elementwise on device arrays."""
        self.generic_visit(node)
        if not all(type(op) in _KERNEL_CMP for op in node.ops):
            return node
        left, out = node.left, None
        for op, right in zip(node.ops, node.comparators):
            c = _k(_KERNEL_CMP[type(op)], left, right)
            out = c if out is None else _k("op_and", out, c)
            left = right
        return out

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Invert):
            return _k("op_invert", node.operand)
        if isinstance(node.op, ast.USub) and not isinstance(node.operand, ast.Constant):
            return ast.Call(func=ast.Attribute(value=ast.Name("K", ast.Load()), attr="negative", ctx=ast.Load()),
                            args=[node.operand], keywords=[])
        return node


def _int_index(idx, ranks):
    """An index that is one integer: a name of rank 0 or an int literal."""
    if isinstance(idx, ast.Name):
        return ranks.get(idx.id) == 0
    return isinstance(idx, ast.Constant) and isinstance(idx.value, int) and not isinstance(idx.value, bool)


def rows_as_kernel(stmts, ranks):
    """``x[i] = v`` with ``x`` a matrix (``ranks``: the primal names' ndims) and ``v`` a name, written
    ``x = K.index_put(x, i, v)``: the CPU kernel replaces the row element by element, where Numba's item
    assignment compiles its shape-mismatch message (its string machinery, a second or more cold) into every
    function that writes a row. Returns new statement lists; the nodes given are left as they are. Code read
    back (second order) sees the write again (:func:`funcgrad.transform.parse.parse`)."""
    out = []
    for s in stmts:
        if isinstance(s, (ast.For, ast.While, ast.If)):
            s = copy.copy(s)
            s.body = rows_as_kernel(s.body, ranks)
            s.orelse = rows_as_kernel(s.orelse, ranks)
        elif isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Subscript) and \
                isinstance(s.targets[0].value, ast.Name) and (ranks.get(s.targets[0].value.id) or 0) >= 2 and \
                _int_index(s.targets[0].slice, ranks) and isinstance(s.value, ast.Name):
            x = s.targets[0].value.id
            new = ast.Assign(targets=[ast.Name(x, ast.Store())],
                             value=_k("index_put", ast.Name(x, ast.Load()), s.targets[0].slice, s.value))
            new = ast.copy_location(new, s)
            for ann in (A.FILE, A.COMMENT, A.SRC):
                if A.has(s, ann):
                    A.put(new, ann, A.get(s, ann))
            s = new
        out.append(s)
    return out


def pretty(node, operators=True):
    """``node`` as it is printed: operator primitives as operators (``operators=False``: every
    arithmetic operation as a kernel call, for backends whose arrays have no Python operators)."""
    n = (_Pretty() if operators else _AsKernels()).visit(clone(node))
    for sub in ast_walk(n):
        if isinstance(sub, (ast.stmt, ast.expr)) and not hasattr(sub, "lineno"):
            sub.lineno, sub.col_offset, sub.end_lineno, sub.end_col_offset = 1, 0, 1, 0
    return n


_Unparser = getattr(ast, "_Unparser", None)


if _Unparser is not None:
    class _PrettyUnparser(_Unparser):
        """``ast.unparse(pretty(node))`` without copying ``node``: operator primitives and negative numbers are
        written as ``pretty`` rewrites them, as they are reached (copying every statement to rewrite it was a
        sixth of a warm first call's transform)."""

        def get_type_comment(self, node):   # (statements made by the passes may have no line number)
            comment = getattr(node, "type_comment", None)
            return None if comment is None else f" # type: {comment}"

        def _as(self, node, new):
            self._precedences[new] = self.get_precedence(node)   # where node sits, the rewrite sits
            self.traverse(new)

        def visit_Constant(self, node):
            new = _Pretty.visit_Constant(None, node)
            if new is node:
                return super().visit_Constant(node)
            return self._as(node, new)

        def visit_Call(self, node):
            prim = A.get(node, A.PRIM, None)
            op = None if prim is None else prim.operator
            if op == "[]":
                return self._as(node, ast.Subscript(value=node.args[0], slice=node.args[1], ctx=ast.Load()))
            if op == "neg":
                return self._as(node, ast.UnaryOp(op=ast.USub(), operand=node.args[0]))
            if op is not None and len(node.args) == 2 and not node.keywords:
                return self._as(node, ast.BinOp(left=node.args[0], op=_BIN[op](), right=node.args[1]))
            return super().visit_Call(node)


def unparse(node, operators=True) -> str:
    """The source text of ``node`` as the generated module prints it (``ast.unparse(pretty(node, operators))``)."""
    if operators and _Unparser is not None:
        return _PrettyUnparser().visit(node)
    return ast.unparse(pretty(node, operators))


def render_stmt(s, operators=True) -> str:
    return unparse(s, operators)


def _origin(s):
    f = A.get(s, A.FILE, None)
    line = getattr(s, "lineno", None)
    return (f, line) if f and line else None


def render_block(stmts, indent=1, where=None, operators=True) -> list[str]:
    """Source lines of ``stmts``; with a list ``where``, append each line's user (file, line) or None."""
    pad = "    " * indent
    lines = []
    w = where if where is not None else []
    for s in stmts:
        c = A.get(s, A.COMMENT, None)
        if isinstance(s, (ast.For, ast.While, ast.If)):
            if isinstance(s, ast.For):
                text = f"for {unparse(s.target)} in {unparse(s.iter, operators)}:"
            elif isinstance(s, ast.While):
                text = f"while {unparse(s.test, operators)}:"
            else:
                text = f"if {unparse(s.test, operators)}:"
            lines.append(pad + text + (f"  # {c}" if c else ""))
            w.append(_origin(s))
            body = render_block(s.body, indent + 1, w, operators)
            if not body:
                body = [pad + "    pass"]
                w.append(None)
            lines.extend(body)
            if isinstance(s, ast.If) and s.orelse:
                lines.append(pad + "else:")
                w.append(None)
                lines.extend(render_block(s.orelse, indent + 1, w, operators))
            continue
        text = render_stmt(s, operators)
        for i, ln in enumerate(text.splitlines()):
            if i == 0 and c:
                ln = f"{ln:<40}  # {c}" if len(ln) < 40 else f"{ln}  # {c}"
            lines.append(pad + ln)
            w.append(_origin(s))
    return lines


def module_source(header: str, functions: list[tuple[str, list[str], list]], returns, line_map=None,
                  operators=True) -> str:
    """Source text of a generated module: ``functions`` is [(name, params, body stmts + return)].

    With a dict ``line_map``, fill it with generated line number -> the user's (file, line)."""
    out = [f'"""{header}"""', "import numpy as np", "# K, the kernel namespace, is given by the backend that compiles this module",
           f"{INTERPRETED} = True   # run as Python (False where Numba compiles it whole)", ""]
    out = "\n".join(out).split("\n")
    where = [None] * len(out)
    for name, params, body in functions:
        out.append("")
        out.append(f"def {name}({', '.join(params)}):")
        where += [None, None]
        lines = render_block(body, 1, where, operators)
        if not lines:
            lines = ["    pass"]
            where.append(None)
        out.extend(lines)
        assert len(where) == len(out)  # one origin per generated line
    if line_map is not None:
        line_map.update({i + 1: w for i, w in enumerate(where) if w is not None})
    return "\n".join(out) + "\n"


GENERATED_LINES: dict = {}   # generated file -> its line map (second order reads generated code: errors there
                             # are reported at the user's line the generated line came from)
REVERSE_MODE_FILES: set = set()   # generated files of reverse-mode code (read back: their slices are values)


def cache_dir() -> str:
    d = os.environ.get("FUNCGRAD_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "funcgrad")
    d = os.path.join(d, "generated")
    os.makedirs(d, exist_ok=True)
    return d


def write_module(stem: str, source: str):
    """Write ``source`` to ``<cache>/<stem>_<hash>.py`` (atomically, once) and import it."""
    h = hashlib.sha256(source.encode()).hexdigest()[:16]
    safe = "".join(c if c.isalnum() or c == "_" else "_" for c in stem)[:60]
    modname = f"{GENERATED_PREFIX}{safe}_{h}"
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


def externals_fingerprint(externals: dict) -> str:
    """A digest of the objects a generated module refers to besides its source (constant arrays, helpers).

    It goes into the module's header, so two builds whose source is the same text but whose externals
    differ are written to different files (Numba's disk cache keys compiled code by file)."""
    h = hashlib.sha256()
    for k in sorted(externals):
        v = externals[k]
        h.update(k.encode())
        if isinstance(v, np.ndarray):
            h.update(f"{v.dtype.str}{v.shape}".encode())
            h.update(np.ascontiguousarray(v).tobytes())
        else:
            code = getattr(v, "__code__", None)
            h.update(f"{type(v).__module__}.{type(v).__qualname__}:{getattr(v, '__module__', '')}."
                     f"{getattr(v, '__qualname__', '')}".encode())
            if code is not None:
                h.update(code.co_code)
                h.update(repr(code.co_consts).encode())
            elif isinstance(v, (bool, int, float, str, tuple, type(None))):
                h.update(repr(v).encode())
    return h.hexdigest()[:16]
