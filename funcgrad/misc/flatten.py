"""autograd's ``flatten``/``flatten_func`` (``autograd.misc.flatten``): a nested container of arrays as one
1-D vector and back.

``flatten(value)`` returns ``(flat, unflatten)``: ``flat`` is every leaf raveled and concatenated in
:func:`funcgrad.tree.tree_flatten` order (tuples and lists in order, dicts by sorted key, as autograd has
them), one float vector (``np.array([])`` for no leaves); ``unflatten(v)`` cuts a vector of that length
back into the structure. As autograd's, ``unflatten`` returns arrays: a scalar leaf comes back as a 0-d
array, and a leaf inside a container comes back in its own floating dtype (a float32 leaf stays float32;
autograd adds the slices into its zeros), while a lone leaf keeps the vector's dtype. Unlike autograd's,
the pieces are copies, never views of the vector. ``flatten_func(func, example)`` is autograd's
``(flat_func, unflatten, flat_example)`` with ``flat_func(v, *args) == flatten(func(unflatten(v), *args))[0]``.

Inside a function funcgrad differentiates, both are written out while transforming (their
``_funcgrad_inline`` hooks), so values and derivatives flow through them: ``flatten(params)`` becomes
``np.concatenate`` of ``np.ravel`` of the leaves; an ``unflatten`` made outside (known sizes, as
``flatten_func``'s) becomes slices and reshapes of its argument; the ``unflatten`` of a ``flatten`` called
inside the function cuts by its leaves' sizes, read when the code runs. A leaf no one can flatten (a
string, a custom pytree node) is refused at the user's line.
"""
from __future__ import annotations

import itertools
import linecache

import numpy as np

from ..differential import source_function
from ..forward_mode import _refuse
from ..transform.normalize.calls import _value_tree
from ..transform.values import Dyn, Static, Struct, map_struct
from ..tree import tree_flatten, tree_unflatten

__all__ = ["flatten", "flatten_func"]

_HINT = ("flatten arrays and numbers held in tuples, lists and dicts, or flatten outside the differentiated "
         "function")


def flatten(value):
    """``(flat, unflatten)``: the leaves of ``value`` (nested tuples, lists and dicts of arrays and numbers)
    raveled into one 1-D array, and the function that turns such a vector back into the structure."""
    leaves, treedef = tree_flatten(value)
    arrays = []
    for leaf in leaves:
        a = np.asarray(leaf)
        if a.dtype.kind not in "biufc":
            raise TypeError(f"flatten: a leaf of type {type(leaf).__name__} is not a number or an array of numbers; "
                            "flatten takes nested tuples, lists and dicts of arrays and numbers")
        arrays.append(a)
    flat = np.concatenate([np.ravel(a) for a in arrays]) if arrays else np.array([])
    return flat, Unflatten(treedef, [a.shape for a in arrays], [a.dtype for a in arrays], flat.dtype)


def flatten_func(func, example):
    """autograd's ``flatten_func``: ``(flat_func, unflatten, flat_example)`` where ``flat_func(v, *args)`` is
    ``flatten(func(unflatten(v), *args))[0]`` (for an objective, the flattened gradient's function too)."""
    _ex, unflatten = flatten(example)
    _func = lambda _x, *args: flatten(func(unflatten(_x), *args))[0]  # noqa: E731
    return _func, unflatten, _ex


class Unflatten:
    """The ``unflatten`` of :func:`flatten`: a 1-D vector of the flattened length back into the structure."""

    def __init__(self, treedef, shapes, dtypes, flat_dtype):
        self.treedef = treedef
        self.shapes = [tuple(s) for s in shapes]
        self.dtypes = list(dtypes)
        self.flat_dtype = np.dtype(flat_dtype)
        self.sizes = [int(np.prod(s, dtype=np.int64)) for s in self.shapes]
        self.size = sum(self.sizes)
        self._inline_fn = None
        self._funcgrad_inline = self._inline   # called inside a transformed function: written out there

    def __repr__(self):
        return f"<unflatten of {self.treedef!r}, {self.size} values>"

    def _cast(self, dtype):
        """The dtype a piece is given: a leaf in a container keeps its floating dtype (autograd's zeros of the
        structure are added into), unless that would drop an imaginary part."""
        return self.treedef.kind != "leaf" and dtype.kind in "fc"

    def __call__(self, flat):
        flat = np.asarray(flat)
        if flat.ndim != 1 or flat.shape[0] != self.size:
            raise ValueError(f"unflatten: expected a 1-D array of {self.size} values (the length of the flattened "
                             f"structure {self.treedef!r}); received an array of shape {flat.shape}")
        pieces, start = [], 0
        for shape, dtype, n in zip(self.shapes, self.dtypes, self.sizes):
            p = flat[start:start + n].reshape(shape)
            start += n
            if self._cast(dtype) and not (p.dtype.kind == "c" and dtype.kind == "f"):
                p = p.astype(dtype)
            else:
                p = p.copy()
            pieces.append(p)
        return tree_unflatten(self.treedef, pieces)

    # ------------------------------------------------------------------ inside a transformed function
    def _pieces_function(self):
        """``def unflatten(x): return (piece0, piece1, ...)`` as source funcgrad reads: constant slices and
        reshapes (a scalar leaf is the element ``x[k]``)."""
        if self._inline_fn is None:
            parts, start = [], 0
            for shape, dtype, n in zip(self.shapes, self.dtypes, self.sizes):
                e = f"x[{start}]" if shape == () else f"_np.reshape(x[{start}:{start + n}], {shape!r})"
                if self._cast(dtype) and dtype != self.flat_dtype and not (
                        self.flat_dtype.kind == "c" and dtype.kind == "f"):
                    e = f"_np.asarray({e}).astype(_np.{dtype.name})" if shape == () else f"({e}).astype(_np.{dtype.name})"
                parts.append(e)
                start += n
            expr = "(" + "".join(p + ", " for p in parts) + ")"
            self._inline_fn = source_function("unflatten", ["x"], expr, {"_np": np})
        return self._inline_fn

    def _inline(self, nz, args, kwargs, scope, out, node):
        if kwargs or len(args) != 1 or isinstance(args[0], Struct):
            raise _refuse(scope, node, "misc.flatten", "unflatten takes one 1-D array", None)
        _check_plain(self.treedef, scope, node)
        if isinstance(args[0], Static):
            return _as_value(self(args[0].obj))
        res = nz.inline_function(self._pieces_function(), [args[0]], {}, out, node, scope)
        return _as_value(tree_unflatten(self.treedef, res.values()))


def _as_value(tree):
    """A Python container tree of values (or of constants) as a value for the transform."""
    return map_struct(tree, lambda path, leaf: leaf if isinstance(leaf, (Dyn, Static, Struct)) else Static(leaf))


def _check_plain(treedef, scope, node):
    """Refuse a structure with registered custom nodes (written out here as tuples, lists, dicts, NamedTuples)."""
    if treedef.kind == "custom":
        raise _refuse(scope, node, "misc.flatten", f"a {treedef.aux[0].__name__} (a registered pytree node) cannot "
                                                   "be flattened there", _HINT)
    for c in treedef.children:
        _check_plain(c, scope, node)


_COUNT = itertools.count()
_FLATTEN_FNS: dict = {}


def _concat_function(n):
    """``def flatten_leaves(v0, ..., v{n-1}): return np.concatenate((np.ravel(np.atleast_1d(v0)), ...))``
    (``atleast_1d`` first: compiled whole, ``np.ravel`` of a float fails)."""
    fn = _FLATTEN_FNS.get(n)
    if fn is None:
        params = [f"v{i}" for i in range(n)]
        expr = "_np.concatenate((" + "".join(f"_np.ravel(_np.atleast_1d({p})), " for p in params) + "))"
        fn = _FLATTEN_FNS[n] = source_function("flatten", params, expr, {"_np": np})
    return fn


def _inline_flatten(nz, args, kwargs, scope, out, node):
    """``flatten(value)`` inside a transformed function: ``(np.concatenate of the raveled leaves, unflatten)``."""
    if kwargs or len(args) != 1:
        raise _refuse(scope, node, "misc.flatten", "call it as flatten(value)", None)
    leaves, treedef = tree_flatten(_value_tree(args[0]))
    _check_plain(treedef, scope, node)
    for leaf in leaves:
        if isinstance(leaf, Static) and np.asarray(leaf.obj).dtype.kind not in "biufc":
            raise _refuse(scope, node, "misc.flatten", f"a leaf of type {type(leaf.obj).__name__} is not a number "
                                                       "or an array of numbers", _HINT)
    if not leaves:
        flat = Static(np.array([]))
    else:
        flat = nz.inline_function(_concat_function(len(leaves)), list(leaves), {}, out, node, scope)
    return Struct("tuple", [flat, Static(_InsideUnflatten(treedef, leaves))])


flatten._funcgrad_inline = _inline_flatten


class _InsideUnflatten:
    """The ``unflatten`` of a ``flatten`` called inside a transformed function: sizes and shapes are those of
    the leaves flattened, read when the generated code runs."""

    def __init__(self, treedef, leaves):
        self.treedef, self.leaves = treedef, leaves
        self._funcgrad_inline = self._inline

    def __call__(self, flat):   # pragma: no cover - only ever called while transforming
        raise TypeError("this unflatten function exists only inside a transformed function")

    def _inline(self, nz, args, kwargs, scope, out, node):
        if kwargs or len(args) != 1 or isinstance(args[0], Struct):
            raise _refuse(scope, node, "misc.flatten", "unflatten takes one 1-D array", None)
        n = len(self.leaves)
        if n == 0:
            return _as_value(tree_unflatten(self.treedef, []))
        key = ("inside", n)
        fn = _FLATTEN_FNS.get(key)
        if fn is None:
            lines = ["_o = 0"]
            for i in range(n):
                lines.append(f"_p{i} = _np.reshape(x[_o:_o + _np.size(v{i})], _np.shape(v{i}))")
                lines.append(f"_o = _o + _np.size(v{i})")
            lines.append("return (" + "".join(f"_p{i}, " for i in range(n)) + ")")
            fn = _FLATTEN_FNS[key] = _source_block("unflatten", ["x"] + [f"v{i}" for i in range(n)], lines)
        res = nz.inline_function(fn, [args[0]] + list(self.leaves), {}, out, node, scope)
        return _as_value(tree_unflatten(self.treedef, res.values()))


def _source_block(name, params, lines):
    """A real function ``def name(*params):`` with the body ``lines``, its source in linecache so that funcgrad
    reads it (as :func:`funcgrad.differential.source_function`, for several statements)."""
    src = f"def {name}({', '.join(params)}):\n" + "".join(f"    {ln}\n" for ln in lines)
    filename = f"<funcgrad {name} #{next(_COUNT)}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    ns = {"_np": np}
    exec(compile(src, filename, "exec"), ns)
    return ns[name]
