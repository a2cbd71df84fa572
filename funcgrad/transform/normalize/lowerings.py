"""Lowerings: NumPy functions that are other primitives in disguise, rewritten while normalizing.

``LOWERINGS`` maps a NumPy callable to ``fn(L, *args, **kwargs)``, where ``L`` is a
:class:`Lowering` (the normalizer at the user's call) and the arguments are values
(:class:`~funcgrad.transform.values.Static`, ``Dyn``, ``Struct``). A lowering returns
the value of the call built from primitive calls (``np.ravel`` -> ``reshape``,
``np.trace`` -> ``sum`` of ``diagonal``, ``np.split`` -> a list of pieces), or
``NotImplemented`` to leave the call as it is (``np.full`` of a constant), or raises
at the user's line with what is not supported and a hint. Every primitive call it
makes carries the user's line, so errors and the generated code's comments point
there. Guarantee: a lowered call computes what NumPy computes, or is refused.
"""
from __future__ import annotations

import ast
import inspect

import numpy as np

from ...kernels.cpu_shape import PAD_MODES, parse_einsum
from ...ops import numpy_shape as _shape
from ...ops.registry import lookup
from ..fence import error
from ..values import Dyn, Static, Struct
from .common import lookup_getitem

_SHAPE_KINDS = ("split", "array_split", "hsplit", "vsplit", "dsplit")


class Lowering:
    """What a lowering needs at one call site: primitive calls, other NumPy calls, constants, refusals."""

    def __init__(self, norm, scope, out, node, name):
        self.norm, self.scope, self.out, self.node, self.name = norm, scope, out, node, name

    def prim(self, key, *args, **kwargs):
        """A call of the primitive keyed by ``key`` (arguments are values or Python constants)."""
        return self.norm.call_prim(lookup(key), [_val(a) for a in args], {k: _val(v) for k, v in kwargs.items()},
                                   self.scope, self.out, self.node)

    def call(self, fn, *args, **kwargs):
        """A call as the user could have written it (goes through lowerings and primitives again)."""
        return self.norm.call_object(fn, [_val(a) for a in args], {k: _val(v) for k, v in kwargs.items()},
                                     self.scope, self.out, self.node)

    def getitem(self, x, index_ast):
        return self.norm.call_prim(lookup_getitem(), [x, Dyn(index_ast)], {}, self.scope, self.out, self.node)

    def refuse(self, msg, hint=None):
        raise error(self.scope.parsed, self.node, f"{self.name}: {msg}", hint)

    def dtype_kind(self, v):
        """The NumPy dtype kind ("f", "i", "b", "c", ...) of value ``v`` where it is known now, else None."""
        if isinstance(v, Static):
            return np.asarray(v.obj).dtype.kind if isinstance(v.obj, (np.ndarray, np.generic, int, float, bool,
                                                                       complex)) else None
        sp = self.norm._spec_of(v.expr) if isinstance(v, Dyn) and not isinstance(v, Struct) else None
        if not sp:
            return _made_kind(v.expr, getattr(self.norm, "externals", {})) if isinstance(v, Dyn) else None
        if sp[0] in ("a", "s"):
            return np.dtype(sp[1]).kind
        return {"f": "f", "i": "i", "b": "b", "c": "c"}.get(sp[0])

    def const(self, v, what, hint=None):
        """The Python object of a value known now (a constant or a container of constants, a captured int), else
        refuse."""
        v = self.norm.as_static_capture(v)
        if isinstance(v, Static):
            return v.obj
        if isinstance(v, Struct) and v.kind in ("tuple", "list") and all(isinstance(x, (Static, Struct))
                                                                         for x in v.values()):
            return tuple(self.const(x, what, hint) for x in v.values())
        self.refuse(f"{what} must be known when the function is transformed (a constant, or a value computed "
                    "from constants and shapes outside the differentiated code)",
                    hint or "pass it as a literal or a non-array argument")

    def items(self, v, what):
        """The elements of a tuple or list whose length is known now."""
        if isinstance(v, Struct) and v.kind in ("tuple", "list"):
            return v.values()
        if isinstance(v, Static) and isinstance(v.obj, (tuple, list)):
            return [Static(x) for x in v.obj]
        self.refuse(f"{what} must be a tuple or list written in the code (its length is needed now)",
                    "pass the arrays as a tuple or list, e.g. (a, b)")

    def rank(self, v):
        """The ndim of ``v`` where it is known now (constants and the function's own arguments), else None."""
        if isinstance(v, Static):
            return np.ndim(v.obj)
        if isinstance(v, Dyn) and isinstance(v.expr, ast.Name):
            return self.norm.param_ranks.get(v.expr.id)
        return None


def _val(a):
    return a if isinstance(a, (Static, Dyn, Struct)) else Static(a)


def _no_extra(L, **kw):
    for k, v in kw.items():
        if not (isinstance(v, Static) and v.obj is None):
            L.refuse(f"the argument {k}= is not supported in a differentiated function",
                     f"leave {k} out and convert the result afterwards")


def _order(L, order):
    o = L.const(order, "order")
    if o not in ("C", "F", None):
        L.refuse(f"order={o!r} is not supported (only 'C' and 'F': the memory layout of arrays here is not "
                 "known when the function is transformed)", "use order='C' or order='F'")
    return o or "C"


def _reversed_shape(L, shape):
    if isinstance(shape, Struct):
        return Struct("tuple", list(reversed(shape.values())))
    s = L.const(shape, "the shape of an order='F' reshape")
    return Static(tuple(reversed(s)) if isinstance(s, tuple) else s)


# --------------------------------------------------------------------- reshapes
def _reshape(L, a, shape=Static(None), order=Static("C"), newshape=Static(None), copy=Static(None)):
    if isinstance(shape, Static) and shape.obj is None:
        shape = newshape
    if isinstance(shape, Static) and shape.obj is None:
        L.refuse("a shape is required")
    if _order(L, order) == "C":
        return L.prim(np.reshape, a, shape)
    # column-major: reverse the axes, reshape to the reversed shape, reverse back
    return L.prim(np.transpose, L.prim(np.reshape, L.prim(np.transpose, a), _reversed_shape(L, shape)))


def _ravel(L, a, order=Static("C")):
    if _order(L, order) == "C":
        return L.prim(np.reshape, a, Static((-1,)))
    return L.prim(np.reshape, L.prim(np.transpose, a), Static((-1,)))


def _atleast(key):
    def low(L, *arys):
        if not arys:
            L.refuse("at least one array is needed")
        res = [L.prim(key, a) for a in arys]
        return res[0] if len(res) == 1 else Struct("tuple", res)
    return low


def _flip_axis(axis):
    return lambda L, m: L.prim(np.flip, m, axis=axis)


# --------------------------------------------------------------------- contractions
def _trace(L, a, offset=Static(0), axis1=Static(0), axis2=Static(1), dtype=Static(None), out=Static(None)):
    _no_extra(L, dtype=dtype, out=out)
    return L.prim(np.sum, L.prim(np.diagonal, a, offset, axis1, axis2), axis=Static(-1))


def _vdot(L, a, b):
    return L.prim(np.dot, L.prim(np.reshape, a, Static((-1,))), L.prim(np.reshape, b, Static((-1,))))


def _sublist(L, sub):
    s = L.const(sub, "an einsum sublist")
    if not isinstance(s, (tuple, list)):
        L.refuse("a sublist is a list of integers (and Ellipsis)")
    letters = []
    for v in s:
        if v is Ellipsis:
            letters.append("...")
        elif isinstance(v, (int, np.integer)) and 0 <= v < 52:
            letters.append("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[v])
        else:
            L.refuse(f"einsum sublist entries are integers from 0 to 51 or Ellipsis, got {v!r}")
    return "".join(letters)


def _einsum(L, *operands, out=Static(None), optimize=Static(False), dtype=Static(None), order=Static("K"),
            casting=Static("safe")):
    _no_extra(L, out=out, dtype=dtype)
    if L.const(order, "order") != "K" or L.const(casting, "casting") != "safe":
        L.refuse("order= and casting= are not supported", "leave them out")
    opt = L.const(optimize, "optimize")
    if not operands:
        L.refuse("no subscripts given")
    first = operands[0]
    if isinstance(first, Static) and isinstance(first.obj, str):
        subs, ops = first.obj, list(operands[1:])
    else:   # the sublist form: op0, sub0, op1, sub1, ..., [sublist_out]
        items = list(operands)
        out_sub = None
        if len(items) % 2 == 1:
            out_sub = _sublist(L, items.pop())
        ops = items[0::2]
        subs = ",".join(_sublist(L, s) for s in items[1::2]) + ("->" + out_sub if out_sub is not None else "")
    try:
        n = parse_einsum(subs)
    except ValueError as e:
        L.refuse(str(e))
    if n != len(ops):
        L.refuse(f"the subscripts {subs!r} name {n} operands, {len(ops)} were given")
    if isinstance(opt, str) and opt not in ("greedy", "optimal"):
        L.refuse(f"optimize={opt!r} is not supported (True, False, 'greedy' or 'optimal')")
    return L.prim(_shape.einsum, Static(subs), Struct("tuple", ops), optimize=Static(opt))


# --------------------------------------------------------------------- assembly
def _join(key):
    def low(L, tup, dtype=Static(None), casting=Static("same_kind")):
        _no_extra(L, dtype=dtype)
        if isinstance(tup, Dyn):
            joined = _join_rows(L, key, tup)
            if joined is None:
                L.refuse("the arrays to join must be a tuple or list written in the code (rows of one array "
                         "are supported for a function argument of known ndim only)",
                         "pass (a, b, ...) or list(...) of the arrays")
            return joined
        return L.prim(key, Struct("tuple", L.items(tup, "the arrays to join")))
    return low


def _dim(a, k):
    """``a.shape[k]`` as a value of the generated code."""
    return Dyn(ast.Subscript(value=ast.Attribute(value=a.expr, attr="shape", ctx=ast.Load()), slice=ast.Constant(k),
                             ctx=ast.Load()))


def _join_rows(L, key, a):
    """``np.vstack(a)`` (hstack, column_stack) of one array ``a``: NumPy joins its rows ``a[0], a[1], ...``,
    which is ``a`` reshaped or transposed; None where ``a``'s ndim is not known now."""
    r = L.rank(a)
    if r is None or r == 0 or key is np.dstack:
        return None
    copy = lambda v: L.prim(np.copy, v)  # noqa: E731  (the result never aliases a, as NumPy's does not)
    rest = [_dim(a, k) for k in range(2, r)]
    if key is np.vstack:   # rows made at least 2-d, joined along axis 0
        if r == 1:
            return copy(L.prim(np.reshape, a, Struct("tuple", [Static(-1), Static(1)])))
        if r == 2:
            return copy(a)
        return copy(L.prim(np.reshape, a, Struct("tuple", [Static(-1)] + rest)))
    if key is np.column_stack and r <= 2:   # rows as columns: (1, n) for scalars, a.T for 1-d rows
        if r == 1:
            return copy(L.prim(np.reshape, a, Struct("tuple", [Static(1), Static(-1)])))
        return copy(L.prim(np.transpose, a))
    # hstack (and column_stack of rows with ndim >= 2): rows made at least 1-d, joined along axis 1 (axis 0 for 1-d)
    if r == 1:
        return copy(a)
    if r == 2:
        return copy(L.prim(np.reshape, a, Struct("tuple", [Static(-1)])))
    moved = L.prim(np.transpose, a, Static((1, 0) + tuple(range(2, r))))
    return copy(L.prim(np.reshape, moved, Struct("tuple", [_dim(a, 1), Static(-1)] + rest[1:])))


def index_concat(norm, obj, node, scope, out):
    """``np.r_[a, b, 0:3]`` and ``np.c_[a, b]``: NumPy's index-expression concatenation, as the primitives it
    is (``r_``: items made at least 1-d, joined along axis 0; ``c_``: items made at least 2-d with a 1-d item
    as a column, joined along the last axis). A slice item is the constant range NumPy makes of it."""
    name = "np.r_" if obj is np.r_ else "np.c_"
    L = Lowering(norm, scope, out, node, name)
    elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    vals = []
    for e in elts:
        if isinstance(e, ast.Slice):
            parts = [None if p is None else norm.expr(p, scope, out) for p in (e.lower, e.upper, e.step)]
            if not all(p is None or isinstance(p, Static) for p in parts):
                L.refuse("a slice item's bounds must be constants")
            vals.append(Static(np.r_[slice(*[None if p is None else p.obj for p in parts])]))
            continue
        v = norm.expr(e, scope, out)
        if isinstance(v, Static) and isinstance(v.obj, str):
            L.refuse("string directives ('r', '0,2', ...) are not supported", "call np.concatenate instead")
        if isinstance(v, Struct):
            v = norm.call_object(np.array, [v], {}, scope, out, node)
        vals.append(v)
    if all(isinstance(v, Static) for v in vals):
        return Static(obj[tuple(v.obj for v in vals)] if len(vals) != 1 else obj[vals[0].obj])
    pieces = []
    for v in vals:
        r = L.rank(v)
        if obj is np.r_:
            pieces.append(L.prim(np.atleast_1d, v) if r != 1 else v)
            continue
        if r is None:
            L.refuse("the ndim of each item must be known now (an argument of the function or a constant)",
                     "use np.concatenate with explicit reshapes")
        if r == 0:
            v = L.prim(np.reshape, v, Static((1, 1)))
        elif r == 1:
            v = L.prim(np.reshape, v, Struct("tuple", [Static(-1), Static(1)]))
        pieces.append(v)
    return L.prim(np.concatenate, Struct("tuple", pieces), axis=Static(0 if obj is np.r_ else -1))


def _split(kind):
    def low(L, ary, indices_or_sections, axis=Static(0)):
        sec = L.const(indices_or_sections, "the number of sections or the split indices",
                      "the number of pieces must be known when the function is transformed")
        if isinstance(sec, np.ndarray):
            sec = tuple(int(v) for v in sec.ravel())
        if isinstance(sec, (int, np.integer)) and not isinstance(sec, bool):
            if sec <= 0:
                L.refuse("number sections must be larger than 0.")
            count, sec = int(sec), int(sec)
        elif isinstance(sec, (tuple, list)) and all(isinstance(v, (int, np.integer)) for v in sec):
            sec = tuple(int(v) for v in sec)
            count = len(sec) + 1
        else:
            L.refuse("indices_or_sections must be an integer or a sequence of integers")
        ax = L.const(axis, "axis")
        return Struct("list", [L.prim(_shape.split_piece, ary, Static(sec), Static(i), axis=Static(ax),
                                      kind=Static(kind)) for i in range(count)])
    return low


def _split_fixed(kind):
    inner = _split(kind)
    return lambda L, ary, indices_or_sections: inner(L, ary, indices_or_sections)


def _append(L, arr, values, axis=Static(None)):
    if isinstance(axis, Static) and axis.obj is None:
        return L.prim(np.concatenate, Struct("tuple", [L.prim(np.reshape, arr, Static((-1,))),
                                                       L.prim(np.reshape, values, Static((-1,)))]), axis=Static(0))
    return L.prim(np.concatenate, Struct("tuple", [arr, values]), axis=axis)


def _full(L, shape, fill_value, dtype=Static(None), order=Static("C"), like=Static(None)):
    if isinstance(fill_value, Static):
        return NotImplemented   # a constant array: NumPy makes it, no derivative involved
    dt = L.const(dtype, "dtype")
    if dt is not None and np.dtype(dt).kind != "f":
        L.refuse(f"dtype={np.dtype(dt).name} of a differentiated fill value is not supported",
                 "leave dtype out (the fill value's own type is used)")
    return L.prim(np.copy, L.prim(np.broadcast_to, fill_value, shape))


#: NumPy's array constructors whose default dtype is float64.
_FLOAT_MADE = frozenset(["zeros", "ones", "empty", "eye", "identity", "linspace", "logspace"])


def _made_kind(e, externals):
    """The dtype kind of ``np.zeros(...)``-like expression ``e`` (a call left to NumPy), from its ``dtype=`` or
    NumPy's default, or None. ``externals``: the objects the generated code names (``dtype=int``)."""
    if not (isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and isinstance(e.func.value, ast.Name)
            and e.func.value.id == "np"):
        return None
    dt = next((k.value for k in e.keywords if k.arg == "dtype"), None)
    if dt is not None:
        if isinstance(dt, ast.Constant) and isinstance(dt.value, str):
            return np.dtype(dt.value).kind
        if isinstance(dt, ast.Name) and dt.id in ("int", "float", "bool", "complex"):
            return np.dtype(dt.id).kind
        if isinstance(dt, ast.Name) and dt.id in externals:
            try:
                return np.dtype(externals[dt.id]).kind
            except TypeError:
                return None
        if isinstance(dt, ast.Attribute) and isinstance(dt.value, ast.Name) and dt.value.id == "np" and \
                isinstance(getattr(np, dt.attr, None), type):
            return np.dtype(getattr(np, dt.attr)).kind
        return None
    if e.func.attr in _FLOAT_MADE:
        return "f"
    if e.func.attr == "arange" and e.args and all(isinstance(x, ast.Constant) for x in e.args):
        return np.arange(*[x.value for x in e.args][:3]).dtype.kind
    return None


def _full_like(L, a, fill_value, dtype=Static(None), order=Static("K"), subok=Static(True), shape=Static(None)):
    if isinstance(fill_value, Static):
        return NotImplemented   # a constant array shaped like ``a``: no derivative involved
    kind = L.dtype_kind(a)
    if kind in ("i", "u", "b"):
        if isinstance(dtype, Static) and dtype.obj is None:
            return NotImplemented   # the fill value cast to a's integers: piecewise constant, no derivative
    elif kind not in ("f", "c"):
        L.refuse("the dtype of the array is not known here, and full_like gives the fill value that dtype",
                 "give a float array, or write np.zeros_like(a, dtype=float) + fill_value")
    _no_extra(L, dtype=dtype, shape=shape)
    return L.prim(np.add, L.prim(np.zeros_like, a), fill_value)


def _linspace(L, start, stop, num=Static(50), endpoint=Static(True), retstep=Static(False), dtype=Static(None),
              axis=Static(0), **kw):
    if isinstance(start, Static) and isinstance(stop, Static):
        return NotImplemented   # constants: NumPy makes them
    n = L.const(num, "num")
    ep = L.const(endpoint, "endpoint")
    if L.const(retstep, "retstep") or L.const(axis, "axis") != 0 or kw:
        L.refuse("retstep=, axis= and device= are not supported with a differentiated start or stop",
                 "leave them out")
    _no_extra(L, dtype=dtype)
    if not isinstance(n, (int, np.integer)) or n < 0:
        L.refuse(f"Number of samples, {n}, must be non-negative.")
    div = n - 1 if ep else n
    # as NumPy computes it: arange(num) * step + start, the last sample stop itself with endpoint
    step = L.prim(np.divide, L.prim(np.subtract, stop, start), Static(float(div))) if div > 0 else \
        L.prim(np.multiply, L.prim(np.subtract, stop, start), Static(0.0))
    ramp = L.prim(_shape.einsum, Static("i,...->i..."), Struct("tuple", [Static(np.arange(n, dtype=np.float64)), step]))
    y = L.prim(np.add, ramp, start)
    if ep and n > 1:
        head = L.getitem(y, ast.Slice(lower=None, upper=ast.Constant(-1), step=None))
        last = L.prim(np.expand_dims, L.prim(np.add, stop, L.prim(np.multiply, start, Static(0.0))), Static(0))
        y = L.prim(np.concatenate, Struct("tuple", [head, last]), axis=Static(0))
    return y


def _select(L, condlist, choicelist, default=Static(0)):
    conds = L.items(condlist, "condlist")
    choices = L.items(choicelist, "choicelist")
    if len(conds) != len(choices):
        L.refuse("list of cases must be same length as list of conditions")
    acc = default
    for c, v in reversed(list(zip(conds, choices))):
        acc = L.prim(np.where, c, v, acc)
    return acc


def _gradient(L, f, *varargs, axis=Static(None), edge_order=Static(1)):
    eo = L.const(edge_order, "edge_order")
    if eo not in (1, 2):
        L.refuse("'edge_order' greater than 2 not supported")
    ax = L.const(axis, "axis")
    if ax is None:
        nd = L.rank(f)
        if nd is None:
            L.refuse("the number of results of np.gradient without axis= depends on the array's ndim, which "
                     "is not known here", "pass axis= (an int or a tuple of ints)")
        axes, single = list(range(nd)), nd == 1
    elif isinstance(ax, tuple):
        axes, single = list(ax), False
    else:
        axes, single = [ax], True
    if len(varargs) not in (0, 1, len(axes)):
        L.refuse("invalid number of spacing arguments")
    spacing = list(varargs) if len(varargs) == len(axes) else list(varargs) * len(axes)
    res = []
    for k, a in enumerate(axes):
        r = L.prim(_shape.gradient_along, f, Static(a), edge_order=Static(eo))
        if spacing:
            h = spacing[k]
            if not (isinstance(h, Static) and np.ndim(h.obj) == 0 or L.rank(h) == 0):
                L.refuse("only scalar spacings are supported (coordinate arrays are not)",
                         "pass the uniform spacing as a number")
            r = L.prim(np.divide, r, h)
        res.append(r)
    return res[0] if single else Struct("tuple", res)


def _diff(L, a, n=Static(1), axis=Static(-1), prepend=Static(None), append=Static(None)):
    _no_extra(L, prepend=prepend, append=append)
    k = L.const(n, "n")
    ax = L.const(axis, "axis")
    if not isinstance(k, int) or k < 0:
        L.refuse(f"order must be non-negative but got {k!r}")
    if not isinstance(ax, int):
        L.refuse("axis must be an integer")

    def index(sl):   # slice ``sl`` on axis ``ax`` whatever the rank (counted from the end if negative)
        if ax >= 0:
            parts = [ast.Slice(None, None, None)] * ax + [sl]
        else:
            parts = [ast.Constant(Ellipsis), sl] + [ast.Slice(None, None, None)] * (-ax - 1)
        return ast.Tuple(elts=parts, ctx=ast.Load())

    for _ in range(k):
        hi = L.getitem(a, index(ast.Slice(ast.Constant(1), None, None)))
        lo = L.getitem(a, index(ast.Slice(None, ast.Constant(-1), None)))
        a = L.prim(np.subtract, hi, lo)
    return a


def _pad(L, array, pad_width, mode=Static("constant"), **kwargs):
    md = L.const(mode, "mode")
    if md not in PAD_MODES:
        L.refuse(f"mode={md!r} is not supported (constant, edge, reflect, symmetric and wrap are)"
                 if isinstance(md, str) else "a function as the mode is not supported",
                 "pad with one of those modes, or build the padding with np.concatenate")
    allowed = {"constant": {"constant_values"}, "reflect": {"reflect_type"}, "symmetric": {"reflect_type"}}
    extra = set(kwargs) - allowed.get(md, set())
    if extra:
        L.refuse(f"unsupported keyword arguments for mode {md!r}: {', '.join(sorted(extra))}")
    if L.const(kwargs.get("reflect_type", Static("even")), "reflect_type") != "even":
        L.refuse("reflect_type='odd' is not supported", "use the default reflect_type='even'")
    cv = kwargs.get("constant_values", Static(0.0))
    if isinstance(cv, Struct):
        cv = Static(L.const(cv, "constant_values", "computed constant values must be one number "
                                                   "(the same on every side)"))
    if md == "constant":
        return L.prim(np.pad, array, pad_width, Static(md), cv)
    return L.prim(np.pad, array, pad_width, Static(md))


def _put_along_axis(L, arr, indices, values, axis):
    if not (isinstance(arr, Dyn) and isinstance(arr.expr, ast.Name)):
        L.refuse("the array written into must be an array variable",
                 "bind the array to a name first (a = ...; np.put_along_axis(a, ...))")
    if isinstance(values, Struct):
        values = L.call(np.array, values)
    new = L.prim(_shape.put_along_axis, arr, indices, values, axis)
    L.write_back(arr, new)


class _InPlace(Lowering):
    def write_back(self, target, value):
        """``target[:] = value``: the in-place write NumPy's function did (every alias sees it)."""
        a = ast.Assign(targets=[ast.Subscript(value=ast.Name(target.expr.id, ast.Load()),
                                              slice=ast.Slice(None, None, None), ctx=ast.Store())],
                       value=self.norm.as_expr(value, self.scope, self.node))
        self.out.append(ast.copy_location(a, self.node))


INPLACE = {np.put_along_axis: _put_along_axis}


def is_inplace(fn):
    """True for a NumPy function that writes into its first argument and has a lowering here."""
    return any(fn is k for k in INPLACE)


def inplace_call(norm, fn, args, kwargs, scope, out, node):
    """Lower a call statement of a NumPy function that writes into its first argument."""
    low = INPLACE[fn]
    name = f"np.{fn.__name__}"
    try:
        inspect.signature(low).bind(None, *args, **kwargs)
    except TypeError as e:
        raise error(scope.parsed, node, f"bad arguments to {name}: {e}", None) from None
    low(_InPlace(norm, scope, out, node, name), *args, **kwargs)


LOWERINGS = {
    np.reshape: _reshape, np.ravel: _ravel,
    np.atleast_1d: _atleast(np.atleast_1d), np.atleast_2d: _atleast(np.atleast_2d),
    np.atleast_3d: _atleast(np.atleast_3d),
    np.fliplr: _flip_axis(1), np.flipud: _flip_axis(0),
    np.trace: _trace, np.vdot: _vdot, np.einsum: _einsum,
    np.hstack: _join(np.hstack), np.vstack: _join(np.vstack), np.dstack: _join(np.dstack),
    np.column_stack: _join(np.column_stack),
    np.split: _split("split"), np.array_split: _split("array_split"), np.hsplit: _split_fixed("hsplit"),
    np.vsplit: _split_fixed("vsplit"), np.dsplit: _split_fixed("dsplit"),
    np.append: _append, np.full: _full, np.full_like: _full_like, np.select: _select, np.gradient: _gradient,
    np.diff: _diff, np.pad: _pad, np.linspace: _linspace,
    np.put_along_axis: lambda L, *a, **k: L.refuse(
        "returns None and writes into its first argument: call it as a statement", None),
}
if getattr(np, "row_stack", None) is not None:
    LOWERINGS[np.row_stack] = _join(np.vstack)
_BY_ID = {id(k): (k, v) for k, v in LOWERINGS.items()}


def lowering_for(fn):
    """The lowering of NumPy callable ``fn``, or None."""
    hit = _BY_ID.get(id(fn))
    return hit[1] if hit is not None and hit[0] is fn else None


def lower_call(norm, fn, low, args, kwargs, scope, out, node):
    """Run lowering ``low`` of ``fn`` at ``node``; NotImplemented leaves the call to the usual rules."""
    name = f"np.{getattr(fn, '__name__', fn)}"
    try:
        inspect.signature(low).bind(None, *args, **kwargs)
    except TypeError as e:
        raise error(scope.parsed, node, f"bad arguments to {name}: {e}", None) from None
    return low(Lowering(norm, scope, out, node, name), *args, **kwargs)
