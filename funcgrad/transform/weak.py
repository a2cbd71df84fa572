"""Python numbers stay weak when generated code is compiled whole (NumPy 2's promotion, NEP 50, under Numba).

In NumPy 2 a Python ``float`` or ``int`` takes the dtype of the array it meets:
``0.5 * h`` and ``np.maximum(h, 0.0)`` of a float32 ``h`` are float32, as is
``g / n`` with ``n = x.shape[0]``. Numba types a Python number as float64/int64
and promotes by type, so the same source compiled whole turns float32 arrays into
float64 ones: results of another dtype than the Python modes give, and loops
whose carried values change type between iterations (Numba refuses those, and
``jit="auto"`` then ran the loop as Python). This pass rewrites a function that
is about to be compiled whole so that Numba sees NumPy's rule: where a *weak*
value (a number written in the source, a Python number passed or captured, a
length, a shape entry, an index of ``range``, arithmetic of those) meets a value
that is not weak, in an operator or an elementwise kernel, it is wrapped as
``K.weak(other, value)``, which is the value itself in Python and, under Numba,
the value cast to ``other``'s float32 (complex64) dtype when ``other`` has one.

Guarantees: only expressions change, never statements or lines (errors still map
to the user's lines); a weak value meeting a float64 or integer operand is left
as Numba has it (the result is NumPy's); the source users read
(``funcgrad.source``) is the unchanged one, this is applied to the code given to
Numba only.
"""
from __future__ import annotations

import ast
import types
from .astutil import ast_walk, clone

__all__ = ["weaken_functions"]

_WEAK_BUILTINS = frozenset(["len", "int", "float", "round"])     # always a Python number
_WEAK_IF_ARGS = frozenset(["abs", "min", "max"])                  # weak when every argument is
_WEAK_KERNELS = frozenset(["reduced_count"])
_ELEMENTWISE = frozenset(["maximum", "minimum", "fmax", "fmin", "add", "subtract", "multiply", "divide", "power",
                          "true_divide", "arctan2", "hypot", "logaddexp", "logaddexp2", "remainder", "fmod",
                          "copysign"])


def _is_weak(e, weak):
    if isinstance(e, ast.Constant):
        return type(e.value) in (int, float)
    if isinstance(e, ast.Name):
        return e.id in weak
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, (ast.USub, ast.UAdd)):
        return _is_weak(e.operand, weak)
    if isinstance(e, ast.BinOp) and not isinstance(e.op, ast.MatMult):
        return _is_weak(e.left, weak) and _is_weak(e.right, weak)
    if isinstance(e, ast.Attribute) and e.attr in ("size", "ndim"):
        return True
    if isinstance(e, ast.Subscript) and isinstance(e.value, ast.Attribute) and e.value.attr == "shape" \
            and not isinstance(e.slice, ast.Slice):
        return True
    if isinstance(e, ast.IfExp):
        return _is_weak(e.body, weak) and _is_weak(e.orelse, weak)
    if isinstance(e, ast.Call) and not e.keywords:
        f = e.func
        if isinstance(f, ast.Name) and f.id in _WEAK_BUILTINS:
            return True
        if isinstance(f, ast.Name) and f.id in _WEAK_IF_ARGS:
            return all(_is_weak(a, weak) for a in e.args)
        if isinstance(f, ast.Attribute) and f.attr in _WEAK_KERNELS and isinstance(f.value, ast.Name) and \
                f.value.id == "K":
            return True
    return False


def _assignments(stmts):
    """(name, value or None) of every binding of a plain name (None: bound by something not judged here)."""
    out = []
    for s in stmts:
        for n in ast_walk(s):
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    if isinstance(t, ast.Name):
                        out.append((t.id, n.value))
                    else:
                        out.extend((x.id, None) for x in ast_walk(t) if isinstance(x, ast.Name)
                                   and isinstance(x.ctx, ast.Store))
            elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
                out.append((n.target.id, ast.BinOp(n.target, n.op, n.value)))
            elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                out.append((n.target.id, n.value))
            elif isinstance(n, ast.For):
                ranged = isinstance(n.iter, ast.Call) and isinstance(n.iter.func, ast.Name) and \
                    n.iter.func.id == "range" and isinstance(n.target, ast.Name)
                out.extend((x.id, ast.Constant(0) if ranged else None) for x in ast_walk(n.target)
                           if isinstance(x, ast.Name))
            elif isinstance(n, (ast.NamedExpr,)) and isinstance(n.target, ast.Name):
                out.append((n.target.id, n.value))
            elif isinstance(n, (ast.comprehension,)):
                out.extend((x.id, None) for x in ast_walk(n.target) if isinstance(x, ast.Name))
    return out


def weak_names(fdef: ast.FunctionDef, weak_params=()):
    """Names of ``fdef`` that hold a Python number at every binding (greatest fixpoint: loops included)."""
    binds = _assignments(fdef.body)
    weak = {n for n, _ in binds} | set(weak_params)
    weak -= {a.arg for a in fdef.args.args if a.arg not in weak_params}
    changed = True
    while changed:
        changed = False
        for n, v in binds:
            if n in weak and (v is None or not _is_weak(v, weak)):
                weak.discard(n)
                changed = True
    return weak


def _cheap(e):
    """An operand that can be read twice at no cost (a name, a number, an attribute or constant index of one)."""
    if isinstance(e, (ast.Name, ast.Constant)):
        return True
    if isinstance(e, ast.Attribute):
        return _cheap(e.value)
    return False


class _Weaken(ast.NodeTransformer):
    def __init__(self, weak, cotangents=frozenset()):
        self.weak = weak
        self.cotangents = cotangents
        self.count = 0

    def visit_Assign(self, node):
        self.generic_visit(node)
        t, v = node.targets[0], node.value
        if len(node.targets) == 1 and isinstance(t, ast.Name) and t.id in self.cotangents and \
                isinstance(v, ast.BinOp) and isinstance(v.op, ast.Add) and isinstance(v.left, ast.Name) and \
                v.left.id == t.id:   # d_x = d_x + c: the cotangent keeps x's dtype, as JAX's do
            self.count += 1
            call = ast.Call(func=ast.Attribute(value=ast.Name("K", ast.Load()), attr="accumulated", ctx=ast.Load()),
                            args=[ast.Name(t.id, ast.Load()), v.right], keywords=[])
            v.right = ast.fix_missing_locations(ast.copy_location(call, v.right))
        return node

    def _wrap(self, other, value):
        self.count += 1
        call = ast.Call(func=ast.Attribute(value=ast.Name("K", ast.Load()), attr="weak", ctx=ast.Load()),
                        args=[clone(other), value], keywords=[])
        return ast.fix_missing_locations(ast.copy_location(call, value))   # (the nodes made here only)

    def visit_BinOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.MatMult):
            return node
        lw, rw = _is_weak(node.left, self.weak), _is_weak(node.right, self.weak)
        if lw and not rw and _cheap(node.right):
            node.left = self._wrap(node.right, node.left)
        elif rw and not lw and _cheap(node.left):
            node.right = self._wrap(node.left, node.right)
        return node

    def visit_Compare(self, node):
        self.generic_visit(node)   # np.float32(0.1) > 0.1 is False in NumPy (compared in float32), True in Numba
        if len(node.ops) == 1:
            a, b = node.left, node.comparators[0]
            aw, bw = _is_weak(a, self.weak), _is_weak(b, self.weak)
            if aw and not bw and _cheap(b):
                node.left = self._wrap(b, a)
            elif bw and not aw and _cheap(a):
                node.comparators[0] = self._wrap(a, b)
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in _ELEMENTWISE and isinstance(f.value, ast.Name) and \
                f.value.id == "K" and len(node.args) == 2 and not node.keywords:
            a, b = node.args
            aw, bw = _is_weak(a, self.weak), _is_weak(b, self.weak)
            if aw and not bw and _cheap(b):
                node.args[0] = self._wrap(b, a)
            elif bw and not aw and _cheap(a):
                node.args[1] = self._wrap(a, b)
        elif isinstance(f, ast.Attribute) and f.attr == "where" and isinstance(f.value, ast.Name) and \
                f.value.id == "K" and len(node.args) == 3 and not node.keywords:   # np.where(c, x, 0.0)
            a, b = node.args[1:]
            aw, bw = _is_weak(a, self.weak), _is_weak(b, self.weak)
            if aw and not bw and _cheap(b):
                node.args[1] = self._wrap(b, a)
            elif bw and not aw and _cheap(a):
                node.args[2] = self._wrap(a, b)
        return node


def weaken_functions(fns, source, filename, weak_params=(), cotangents=()):
    """Each function of ``fns`` (all defined by ``source`` in ``filename``, parsed once) with weak numbers wrapped
    for Numba, or the function itself when nothing needs it. A new function has the old one's globals, name and
    lines. A contribution added to one of
    ``cotangents`` (``d_x = d_x + c``) is wrapped as ``K.accumulated(d_x, c)``: a float64 ``c`` added to the
    float32 cotangent of a float32 ``x`` is taken in float32, so the cotangent keeps its type through a loop
    (the Python modes add in float64 and return the gradient in ``x``'s dtype: the same to float32's
    precision)."""
    tree = ast.parse(source, filename)
    return [_weaken_one(fn, tree, filename, weak_params, cotangents) for fn in fns]


def _weaken_one(fn, module, filename, weak_params, cotangents):
    fdefs = [n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == fn.__name__]
    if len(fdefs) != 1:
        return fn
    w = _Weaken(weak_names(fdefs[0], frozenset(weak_params)), frozenset(cotangents))
    tree = ast.Module(body=[w.visit(fdefs[0])], type_ignores=[])   # (the visit changes that def only)
    if not w.count:
        return fn
    code = compile(tree, filename, "exec")
    fcode = next(c for c in code.co_consts if isinstance(c, types.CodeType) and c.co_name == fn.__name__)
    new = types.FunctionType(fcode, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__qualname__, new.__module__ = fn.__qualname__, fn.__module__
    return new
