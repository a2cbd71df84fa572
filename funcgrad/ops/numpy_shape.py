"""NumPy's shape, assembly and contraction functions as primitives, each declared once.

Axis permutations (``swapaxes``, ``moveaxis``, ``rollaxis``), ``atleast_*d``, ``tile``,
``repeat``, ``roll``, ``rot90``, ``flip``, ``pad``, ``hstack``/``vstack``/``dstack``/
``column_stack``, the pieces of ``split``, ``diag``/``diagonal``/``tril``/``triu``,
``kron``, ``inner``, ``einsum``, ``take_along_axis``, ``np.gradient`` along one axis
and ``cross``. Each template's adjoint is another primitive (often the transpose
``un<name>``, whose own adjoint is the forward again), so second derivatives work;
the list-valued adjoints (``unjoin``, ``einsum_vjp``) are ``@primitive`` helpers
exercised through the function whose VJP they are. Functions that are just
others in disguise (``ravel``, ``fliplr``, ``trace``, ``vdot``, ``split``, ``select``,
``full``...) are lowered to these by :mod:`funcgrad.transform.normalize.lowerings`.
The kernels are :mod:`funcgrad.kernels.cpu_shape`.
"""
from __future__ import annotations

import warnings

import numpy as np

import funcgrad.kernels.cpu as K
from . import samples as S
from .complex import match_complex
from .registry import alias, d, defvjp, primitive, t

# --------------------------------------------------------------------- samples


def _sample_axes2(draw, dt, st, array, shapes):
    sh = shapes(draw, 1, 3)
    nd = len(sh)
    return (array(draw, sh, dt), draw(st.integers(-nd, nd - 1)), draw(st.integers(-nd, nd - 1))), {}


def _sample_moveaxis(draw, dt, st, array, shapes):
    sh = shapes(draw, 1, 3)
    nd = len(sh)
    k = draw(st.integers(1, nd))
    src = tuple(draw(st.permutations(range(nd)))[:k])
    dst = tuple(draw(st.permutations(range(-nd, 0)))[:k])
    if k == 1 and draw(st.booleans()):
        return (array(draw, sh, dt), src[0], dst[0]), {}
    return (array(draw, sh, dt), src, dst), {}


def _sample_rollaxis(draw, dt, st, array, shapes):
    sh = shapes(draw, 1, 3)
    nd = len(sh)
    return (array(draw, sh, dt), draw(st.integers(-nd, nd - 1))), {"start": draw(st.integers(-nd, nd))}


def _sample_unrollaxis(draw, dt, st, array, shapes):
    (x, axis), kw = _sample_rollaxis(draw, dt, st, array, shapes)
    return (array(draw, np.rollaxis(np.zeros(np.shape(x)), axis, kw["start"]).shape, dt), axis), kw


def _sample_plain(min_dims=0, max_dims=3):
    def fn(draw, dt, st, array, shapes):
        return (array(draw, shapes(draw, min_dims, max_dims), dt),), {}
    return S.custom(fn)


def _reps(draw, st):
    return draw(st.one_of(st.integers(1, 3), st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple)))


def _sample_tile(draw, dt, st, array, shapes):
    return (array(draw, shapes(draw, 0, 3, max_side=3), dt), _reps(draw, st)), {}


def _sample_untile(draw, dt, st, array, shapes):
    (x, reps), _ = _sample_tile(draw, dt, st, array, shapes)
    return (array(draw, np.tile(np.zeros(np.shape(x)), reps).shape, dt), x, reps), {}


def _sample_repeat(draw, dt, st, array, shapes):
    sh = shapes(draw, 0, 3)
    nd = len(sh)
    axis = draw(st.sampled_from([None] + list(range(-nd, nd))))
    n = int(np.prod(sh)) if axis is None else sh[axis]
    kind = draw(st.sampled_from(["int", "array", "one"]))
    if kind == "int":
        rep = draw(st.integers(0, 3))
    elif kind == "one":
        rep = np.array([draw(st.integers(0, 3))])
    else:
        rep = np.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), dtype=np.int64)
    return (array(draw, sh, dt), rep), {"axis": axis}


def _sample_unrepeat(draw, dt, st, array, shapes):
    (x, rep), kw = _sample_repeat(draw, dt, st, array, shapes)
    return (array(draw, np.repeat(np.zeros(np.shape(x)), rep, **kw).shape, dt), x, rep), kw


def _sample_roll(draw, dt, st, array, shapes):
    sh = shapes(draw, 1, 3)
    nd = len(sh)
    kind = draw(st.sampled_from(["none", "int", "tuple", "shared"]))
    if kind == "none":
        return (array(draw, sh, dt), draw(st.integers(-7, 7))), {"axis": None}
    if kind == "int":
        return (array(draw, sh, dt), draw(st.integers(-7, 7))), {"axis": draw(st.integers(-nd, nd - 1))}
    axes = tuple(draw(st.lists(st.integers(-nd, nd - 1), min_size=1, max_size=3)))
    if kind == "shared":
        return (array(draw, sh, dt), draw(st.integers(-7, 7))), {"axis": axes}
    return (array(draw, sh, dt), tuple(draw(st.integers(-7, 7)) for _ in axes)), {"axis": axes}


def _sample_rot90(draw, dt, st, array, shapes):
    sh = shapes(draw, 2, 3)
    nd = len(sh)
    a, b = draw(st.permutations(range(nd)))[:2]
    if draw(st.booleans()):
        a -= nd
    return (array(draw, sh, dt), draw(st.integers(-5, 5))), {"axes": (a, b)}


def _sample_flip(draw, dt, st, array, shapes):
    sh = shapes(draw, 1, 3)
    nd = len(sh)
    kind = draw(st.sampled_from(["none", "int", "tuple"]))
    axis = None if kind == "none" else draw(st.integers(-nd, nd - 1)) if kind == "int" else tuple(
        sorted(draw(st.sets(st.integers(0, nd - 1), min_size=1))))
    return (array(draw, sh, dt),), {"axis": axis}


def _pad_width(draw, st, nd):
    w = st.integers(0, 4)
    kind = draw(st.sampled_from(["int", "pair", "one", "pairs", "single"]))
    if kind == "int":
        return draw(w)
    if kind == "pair":
        return (draw(w), draw(w))
    if kind == "one":
        return ((draw(w), draw(w)),)
    if kind == "single":
        return (draw(w),)
    return tuple((draw(w), draw(w)) for _ in range(nd))


def _sample_pad(draw, dt, st, array, shapes):
    sh = shapes(draw, 1, 3, max_side=3)
    mode = draw(st.sampled_from(["constant", "edge", "reflect", "symmetric", "wrap"]))
    kw = {"mode": mode}
    if mode == "constant":
        kw["constant_values"] = float(draw(st.floats(-1.0, 1.0)))
    return (array(draw, sh, dt), _pad_width(draw, st, len(sh))), kw


def _sample_unpad(draw, dt, st, array, shapes):
    (x, pw), kw = _sample_pad(draw, dt, st, array, shapes)
    kw.pop("constant_values", None)
    return (array(draw, K.pad(np.zeros(np.shape(x)), pw, kw["mode"]).shape, dt), x, pw), kw


def _sample_join(kind):
    def fn(draw, dt, st, array, shapes):
        nd = draw(st.integers(0, 3))
        n = draw(st.integers(1, 3))
        base = [draw(st.integers(1, 3)) for _ in range(nd)]
        ax = {"hstack": 0 if nd == 1 else 1, "vstack": 0, "dstack": 2, "column_stack": 1}[kind]
        out = []
        for _ in range(n):
            s = list(base)
            if nd >= {"hstack": 1, "vstack": 2, "dstack": 3, "column_stack": 2}[kind]:   # the joined axis is the array's own
                s[ax] = draw(st.integers(1, 3))
            if nd == 0:
                out.append(float(draw(st.floats(-1, 1))) if draw(st.booleans()) else array(draw, (), dt))
            else:
                out.append(array(draw, tuple(s), dt))
        return (tuple(out),), {}
    return S.custom(fn)


def _sample_split(draw, dt, st, array, shapes):
    kind = draw(st.sampled_from(["split", "array_split", "hsplit", "vsplit", "dsplit"]))
    nd = {"hsplit": draw(st.integers(1, 3)), "vsplit": draw(st.integers(2, 3)), "dsplit": 3}.get(
        kind, draw(st.integers(1, 3)))
    sh = [draw(st.integers(1, 4)) for _ in range(nd)]
    axis = draw(st.integers(-nd, nd - 1))
    ax = {"hsplit": 1 if nd > 1 else 0, "vsplit": 0, "dsplit": 2}.get(kind, axis % nd)
    if draw(st.booleans()):
        if kind == "array_split":
            sections = draw(st.integers(1, 5))
        else:
            sections = draw(st.sampled_from([k for k in range(1, sh[ax] + 1) if sh[ax] % k == 0]))
        count = sections
    else:
        sections = tuple(draw(st.lists(st.integers(-1, sh[ax] + 1), min_size=1, max_size=3)))
        count = len(sections) + 1
    index = draw(st.integers(0, count - 1))
    return (array(draw, tuple(sh), dt), sections, index), {"axis": axis, "kind": kind}


def _sample_unsplit(draw, dt, st, array, shapes):
    (x, sec, i), kw = _sample_split(draw, dt, st, array, shapes)
    return (array(draw, K.split_piece(np.zeros(np.shape(x)), sec, i, **kw).shape, dt), x, sec, i), kw


def _sample_diag(draw, dt, st, array, shapes):
    sh = shapes(draw, 1, 2)
    return (array(draw, sh, dt),), {"k": draw(st.integers(-3, 3))}


def _sample_undiag(draw, dt, st, array, shapes):
    (x,), kw = _sample_diag(draw, dt, st, array, shapes)
    return (array(draw, np.diag(np.zeros(np.shape(x)), kw["k"]).shape, dt), x), kw


def _sample_diagonal(draw, dt, st, array, shapes):
    sh = shapes(draw, 2, 4, max_side=3)
    nd = len(sh)
    a, b = draw(st.permutations(range(nd)))[:2]
    return (array(draw, sh, dt),), {"offset": draw(st.integers(-2, 2)), "axis1": a - (nd if draw(st.booleans()) else 0),
                                    "axis2": b}


def _sample_undiagonal(draw, dt, st, array, shapes):
    (x,), kw = _sample_diagonal(draw, dt, st, array, shapes)
    return (array(draw, np.diagonal(np.zeros(np.shape(x)), **kw).shape, dt), x), kw


def _sample_tri(draw, dt, st, array, shapes):
    return (array(draw, shapes(draw, 2, 3), dt),), {"k": draw(st.integers(-2, 2))}


def _kron_shapes(draw, st):
    na, nb = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    return tuple(draw(st.integers(1, 3)) for _ in range(na)), tuple(draw(st.integers(1, 3)) for _ in range(nb))


def _inner_shapes(draw, st):
    k = draw(st.integers(1, 3))
    kind = draw(st.sampled_from(["sa", "as", "vv", "nd"]))
    if kind == "sa":
        return (), tuple(draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 2))))
    if kind == "as":
        return tuple(draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 2)))), ()
    if kind == "vv":
        return (k,), (k,)
    return (tuple(draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 2)))) + (k,),
            tuple(draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 2)))) + (k,))


def _sample_product(shapes_of, product=None):
    """Samples ``(x, y)``, or ``(g, x, y)`` for the cotangent primitives of ``product``."""
    def fn(draw, dt, st, array, shapes):
        xs, ys = shapes_of(draw, st)
        if product is None:
            return (array(draw, xs, dt), array(draw, ys, dt)), {}
        gs = np.shape(product(np.zeros(xs), np.zeros(ys)))
        return (array(draw, gs, dt), array(draw, xs, dt), array(draw, ys, dt)), {}
    return S.custom(fn)


EINSUM_CASES = [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("ij->ji", [(3, 4)]), ("ii->i", [(3, 3)]), ("ii", [(3, 3)]),
    ("ij", [(2, 3)]), ("ji", [(2, 3)]), ("i,i", [(3,), (3,)]), ("i,j->ij", [(2,), (3,)]),
    ("...ij,...jk->...ik", [(2, 2, 3), (3, 4)]), ("...ij,...jk->...ik", [(1, 2, 3), (4, 3, 2)]),
    ("ijk,lji->lki", [(3, 4, 4), (4, 4, 3)]), ("ijk,lji,lli->lki", [(3, 4, 4), (4, 4, 3), (4, 4, 3)]),
    ("k,nk->", [(5,), (6, 5)]), ("abcd->bd", [(3, 2, 3, 2)]), ("...k,...nk->...", [(3, 5), (3, 6, 5)]),
    ("ij,k", [(3, 4), (3,)]), ("jk...,lj...->lk...", [(3, 2, 4), (2, 3, 4)]),
    ("j...k,lj...->lk...", [(2, 2, 2), (2, 2, 2)]), ("iij->j", [(2, 2, 3)]), ("i,i,i->", [(3,), (3,), (3,)]),
    ("ij,ij->ij", [(1, 3), (2, 3)]), (",ij->ij", [(), (2, 3)]), ("ba,ac", [(2, 3), (3, 4)]),
]


def _sample_einsum(draw, dt, st, array, shapes):
    subs, shs = draw(st.sampled_from(EINSUM_CASES))
    ops = tuple(array(draw, sh, dt) for sh in shs)
    return (subs, ops), ({"optimize": True} if len(ops) > 2 and draw(st.booleans()) else {})


def _sample_take_along(draw, dt, st, array, shapes):
    sh = shapes(draw, 1, 3)
    nd = len(sh)
    if draw(st.booleans()) and nd == 1:
        n = sh[0]
        idx = np.array(draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=5)))
        return (array(draw, sh, dt), idx), {"axis": None}
    axis = draw(st.integers(-nd, nd - 1))
    ish = [1 if draw(st.booleans()) else n for n in sh]
    ish[axis] = draw(st.integers(1, 4))
    n = sh[axis]
    idx = np.array(draw(st.lists(st.integers(-n, n - 1), min_size=int(np.prod(ish)), max_size=int(np.prod(ish)))))
    return (array(draw, sh, dt), idx.reshape(ish)), {"axis": axis}


def _sample_untake_along(draw, dt, st, array, shapes):
    (x, idx), kw = _sample_take_along(draw, dt, st, array, shapes)
    return (array(draw, np.take_along_axis(np.zeros(np.shape(x)), idx, kw["axis"]).shape, dt), x, idx), kw


def _sample_gradient(draw, dt, st, array, shapes):
    eo = draw(st.integers(1, 2))
    nd = draw(st.integers(1, 3))
    sh = [draw(st.integers(eo + 1, 5)) for _ in range(nd)]
    return (array(draw, tuple(sh), dt), draw(st.integers(-nd, nd - 1))), {"edge_order": eo}


def _cross_case(draw, st):
    kind = draw(st.sampled_from(["33", "23", "32", "22", "axes", "bcast"]))
    n = draw(st.integers(1, 3))
    if kind == "axes":
        return (3, n), (n, 3), {"axisa": 0, "axisb": -1, "axisc": draw(st.sampled_from([0, -1]))}
    if kind == "bcast":
        return (n, 3), (3,), {}
    la, lb = {"33": (3, 3), "23": (2, 3), "32": (3, 2), "22": (2, 2)}[kind]
    return (n, la), (n, lb), {}


def _sample_cross(draw, dt, st, array, shapes):
    xs, ys, kw = _cross_case(draw, st)
    return (array(draw, xs, dt), array(draw, ys, dt)), kw


def _sample_cross_d(draw, dt, st, array, shapes):
    xs, ys, kw = _cross_case(draw, st)
    with warnings.catch_warnings():   # NumPy 2 deprecates 2-vectors; they are still computed
        warnings.simplefilter("ignore", DeprecationWarning)
        gs = np.cross(np.zeros(xs), np.zeros(ys), **kw).shape
    return (array(draw, gs, dt), array(draw, xs, dt), array(draw, ys, dt)), kw


# --------------------------------------------------------------------- axis permutations
@defvjp(np.swapaxes, sample=S.custom(_sample_axes2))
def swapaxes(y, x, axis1, axis2):
    d[x] = np.swapaxes(d[y], axis1, axis2)
    t[y] = np.swapaxes(t[x], axis1, axis2)


@defvjp(np.moveaxis, sample=S.custom(_sample_moveaxis))
def moveaxis(y, x, source, destination):
    d[x] = np.moveaxis(d[y], destination, source)
    t[y] = np.moveaxis(t[x], source, destination)


@defvjp(np.rollaxis, sample=S.custom(_sample_rollaxis))
def rollaxis(y, x, axis, start=0):
    d[x] = unrollaxis(d[y], axis, start)
    t[y] = np.rollaxis(t[x], axis, start)


@defvjp(None, sample=S.custom(_sample_unrollaxis))
def unrollaxis(y, g, axis, start=0):
    """The inverse permutation of ``np.rollaxis(x, axis, start)``."""
    d[g] = np.rollaxis(d[y], axis, start)
    t[y] = unrollaxis(t[g], axis, start)


# --------------------------------------------------------------------- new axes, copies of the input
def _sample_reshape_like(draw, dt, st, array, shapes):
    x = array(draw, shapes(draw, 0, 3), dt)
    return (array(draw, np.atleast_3d(x).shape, dt), x), {}


@defvjp(None, sample=S.custom(_sample_reshape_like))
def reshape_like(y, g, x):
    """``g`` reshaped to the shape of ``x`` (a scalar where ``x`` is one)."""
    d[x] = None   # read for its shape (or ranks, or kind) only
    d[g] = reshape_like(d[y], g)
    t[y] = reshape_like(t[g], x)


@defvjp(np.atleast_1d, sample=_sample_plain())
def atleast_1d(y, x):
    d[x] = reshape_like(d[y], x)
    t[y] = np.atleast_1d(t[x])


@defvjp(np.atleast_2d, sample=_sample_plain())
def atleast_2d(y, x):
    d[x] = reshape_like(d[y], x)
    t[y] = np.atleast_2d(t[x])


@defvjp(np.atleast_3d, sample=_sample_plain(0, 4))
def atleast_3d(y, x):
    d[x] = reshape_like(d[y], x)
    t[y] = np.atleast_3d(t[x])


@defvjp(np.tile, sample=S.custom(_sample_tile))
def tile(y, x, reps):
    d[x] = untile(d[y], x, reps)
    t[y] = np.tile(t[x], reps)


@defvjp(None, sample=S.custom(_sample_untile))
def untile(y, g, x, reps):
    """Sum of the tiles of ``g``, shaped like ``x`` (the VJP of ``np.tile(x, reps)``)."""
    d[x] = None   # read for its shape (or ranks, or kind) only
    d[g] = np.tile(d[y], reps)
    t[y] = untile(t[g], x, reps)


@defvjp(np.repeat, sample=S.custom(_sample_repeat))
def repeat(y, x, repeats, axis=None):
    d[x] = unrepeat(d[y], x, repeats, axis)
    t[y] = np.repeat(t[x], repeats, axis)


@defvjp(None, sample=S.custom(_sample_unrepeat))
def unrepeat(y, g, x, repeats, axis=None):
    """Sum of the copies ``np.repeat(x, repeats, axis)`` made of each element of ``x``."""
    d[x] = None   # read for its shape (or ranks, or kind) only
    d[g] = np.repeat(d[y], repeats, axis)
    t[y] = unrepeat(t[g], x, repeats, axis)


# --------------------------------------------------------------------- rearrangements
@defvjp(np.roll, sample=S.custom(_sample_roll))
def roll(y, x, shift, axis=None):
    d[x] = roll_back(d[y], shift, axis)
    t[y] = np.roll(t[x], shift, axis)


@defvjp(None, sample=S.custom(_sample_roll))
def roll_back(y, g, shift, axis=None):
    """``np.roll(g, -shift, axis)``: the inverse of ``np.roll``."""
    d[g] = np.roll(d[y], shift, axis)
    t[y] = roll_back(t[g], shift, axis)


@defvjp(np.rot90, sample=S.custom(_sample_rot90))
def rot90(y, x, k=1, axes=(0, 1)):
    d[x] = np.rot90(d[y], -k, axes)
    t[y] = np.rot90(t[x], k, axes)


@defvjp(np.flip, sample=S.custom(_sample_flip))
def flip(y, x, axis=None):
    d[x] = np.flip(d[y], axis)
    t[y] = np.flip(t[x], axis)


@defvjp(np.pad, sample=S.custom(_sample_pad))
def pad(y, x, pad_width, mode="constant", constant_values=0.0):
    """``np.pad`` in the modes constant, edge, reflect, symmetric and wrap (a constant may be differentiated)."""
    d[x] = unpad(d[y], x, pad_width, mode)
    d[constant_values] = np.sum(d[y]) - np.sum(unpad(d[y], x, pad_width, mode))
    t[y] = np.pad(t[x], pad_width, mode) + t[constant_values] * pad_mask(x, pad_width, mode)


@defvjp(None, sample=S.custom(lambda draw, dt, st, array, shapes: (lambda a: (a[0][:2], {"mode": a[1]["mode"]}))(
    _sample_pad(draw, dt, st, array, shapes))))
def pad_mask(y, x, pad_width, mode="constant"):
    """1 where ``np.pad(x, pad_width, mode)`` writes the constant, else 0 (piecewise constant)."""
    pass


@defvjp(None, sample=S.custom(_sample_unpad))
def unpad(y, g, x, pad_width, mode="constant"):
    """Every element of ``g`` added back where ``np.pad(x, pad_width, mode)`` read it from."""
    d[x] = None   # read for its shape (or ranks, or kind) only
    d[g] = np.pad(d[y], pad_width, mode)
    t[y] = unpad(t[g], x, pad_width, mode)


# --------------------------------------------------------------------- assembly
@defvjp(np.hstack, sample=_sample_join("hstack"))
def hstack(y, tup):
    d[tup] = unjoin(d[y], tup, "hstack")
    t[y] = np.hstack(t[tup])


@defvjp(np.vstack, sample=_sample_join("vstack"))
def vstack(y, tup):
    d[tup] = unjoin(d[y], tup, "vstack")
    t[y] = np.vstack(t[tup])


@defvjp(np.dstack, sample=_sample_join("dstack"))
def dstack(y, tup):
    d[tup] = unjoin(d[y], tup, "dstack")
    t[y] = np.dstack(t[tup])


@defvjp(np.column_stack, sample=_sample_join("column_stack"))
def column_stack(y, tup):
    d[tup] = unjoin(d[y], tup, "column_stack")
    t[y] = np.column_stack(t[tup])


@primitive(tested_via=np.hstack)
def unjoin(g, arrays, kind):
    """Split ``g`` into pieces shaped like ``arrays`` (the VJP of ``np.<kind>(arrays)``; linear)."""
    return K.unjoin(g, arrays, kind)


@defvjp(None, sample=S.custom(_sample_split))
def split_piece(y, x, sections, index, axis=0, kind="array_split"):
    """Piece ``index`` of ``np.<kind>(x, sections, axis)`` (split, array_split, hsplit, vsplit, dsplit)."""
    d[x] = unsplit_piece(d[y], x, sections, index, axis, kind)
    t[y] = split_piece(t[x], sections, index, axis, kind)


@defvjp(None, sample=S.custom(_sample_unsplit))
def unsplit_piece(y, g, x, sections, index, axis=0, kind="array_split"):
    """Zeros shaped like ``x`` with ``g`` where piece ``index`` of the split was read."""
    d[x] = None   # read for its shape (or ranks, or kind) only
    d[g] = split_piece(d[y], sections, index, axis, kind)
    t[y] = unsplit_piece(t[g], x, sections, index, axis, kind)


# --------------------------------------------------------------------- lists grown at run time
def _sample_list_promote(draw, dt, st, array, shapes):
    row = shapes(draw, 0, 2)
    return (array(draw, (draw(st.integers(1, 3)),) + tuple(row), dt), array(draw, row, dt)), {}


@defvjp(None, sample=S.custom(_sample_list_promote))
def list_promote(y, buf, v):
    """The rows of a list grown at run time, in a dtype that also holds the next item ``v``."""
    d[buf] = match_complex(d[y], buf)
    d[v] = None   # read for its dtype only: its value is written by the append that follows
    t[y] = list_promote(t[buf], v)


@defvjp(None, sample=S.custom(_sample_list_promote))
def tape_promote(y, buf, v):
    """``list_promote`` of a gradient's record of a loop, read back to be differentiated again."""
    d[buf] = match_complex(d[y], buf)
    d[v] = None
    t[y] = tape_promote(t[buf], v)


# --------------------------------------------------------------------- items of a list argument
def _sample_pick(draw, dt, st, array, shapes):
    sh = shapes(draw, 1, 3)
    other = tuple(n + draw(st.integers(0, 2)) for n in sh)   # the items may differ in shape
    return (draw(st.booleans()), array(draw, sh, dt), array(draw, other, dt)), {}


@defvjp(None, sample=S.custom(_sample_pick))
def pick(y, c, a, b):
    """``a if c else b`` for a runtime flag ``c``: a loop over a list of arrays reads its items this way."""
    d[a] = pick(c, d[y], np.zeros_like(a))
    d[b] = pick(c, np.zeros_like(b), d[y])
    d[c] = None
    t[y] = pick(c, t[a], t[b])


def _sample_join_rows(draw, dt, st, array, shapes):
    return (array(draw, (draw(st.integers(1, 3)),) + tuple(shapes(draw, 0, 3)), dt),
            draw(st.sampled_from(["vstack", "hstack", "column_stack"]))), {}


def _sample_unjoin_rows(draw, dt, st, array, shapes):
    (a, kind), _ = _sample_join_rows(draw, dt, st, array, shapes)
    return (array(draw, K.join_rows(np.zeros(np.shape(a)), kind).shape, dt), a, kind), {}


@defvjp(None, sample=S.custom(_sample_join_rows))
def join_rows(y, a, kind):
    """``np.vstack(lst)`` (hstack, column_stack) of a list grown at run time, its items the rows of ``a``."""
    d[a] = unjoin_rows(d[y], a, kind)
    t[y] = join_rows(t[a], kind)


@defvjp(None, sample=S.custom(_sample_unjoin_rows))
def unjoin_rows(y, g, a, kind):
    """``g`` rearranged back into the rows of ``a`` (the VJP of ``join_rows``)."""
    d[a] = None   # read for its shape only
    d[g] = join_rows(d[y], kind)
    t[y] = unjoin_rows(t[g], a, kind)


# --------------------------------------------------------------------- dtype casts
def _sample_astype(draw, dt, st, array, shapes):
    return (array(draw, shapes(draw, 0), dt), np.dtype(dt).type), {}


def _sample_cast_like(draw, dt, st, array, shapes):
    sh = shapes(draw, 0)
    return (array(draw, sh, dt), array(draw, sh, dt)), {}


@defvjp(None, sample=S.custom(_sample_astype))
def astype(y, x, dtype):
    """``x.astype(dtype)`` (and ``np.array(x, dtype=...)``) for a floating or complex ``dtype``; a cast to
    integers or booleans is piecewise constant and has no derivative."""
    d[x] = cast_like(d[y], x)
    t[y] = astype(t[x], dtype)


@defvjp(None, sample=S.custom(_sample_astype))
def asarray_dtype(y, x, dtype):
    """``np.asarray(x, dtype=...)`` for a floating or complex dtype: ``x`` itself when it has that dtype."""
    d[x] = cast_like(d[y], x)
    t[y] = asarray_dtype(t[x], dtype)


@defvjp(None, sample=S.custom(_sample_cast_like))
def cast_like(y, g, x):
    """``g`` in the dtype of ``x`` (its real part where ``x`` is real)."""
    d[x] = None   # read for its dtype only
    d[g] = cast_like(d[y], g)
    t[y] = cast_like(t[g], x)


# --------------------------------------------------------------------- diagonals and triangles
@defvjp(np.diag, sample=S.custom(_sample_diag))
def diag(y, x, k=0):
    d[x] = undiag(d[y], x, k)
    t[y] = np.diag(t[x], k)


@defvjp(None, sample=S.custom(_sample_undiag))
def undiag(y, g, x, k=0):
    """The diagonal ``k`` of ``g`` (``x`` a vector), or ``g`` placed on it in zeros like ``x`` (a matrix)."""
    d[x] = None   # read for its shape (or ranks, or kind) only
    d[g] = np.diag(d[y], k)
    t[y] = undiag(t[g], x, k)


@defvjp(np.diagonal, sample=S.custom(_sample_diagonal))
def diagonal(y, x, offset=0, axis1=0, axis2=1):
    d[x] = undiagonal(d[y], x, offset, axis1, axis2)
    t[y] = np.diagonal(t[x], offset, axis1, axis2)


@defvjp(None, sample=S.custom(_sample_undiagonal))
def undiagonal(y, g, x, offset=0, axis1=0, axis2=1):
    """Zeros shaped like ``x`` with ``g`` on the diagonal ``np.diagonal(x, offset, axis1, axis2)`` reads."""
    d[x] = None   # read for its shape (or ranks, or kind) only
    d[g] = np.diagonal(d[y], offset, axis1, axis2)
    t[y] = undiagonal(t[g], x, offset, axis1, axis2)


@defvjp(np.tril, sample=S.custom(_sample_tri))
def tril(y, x, k=0):
    d[x] = np.tril(d[y], k)
    t[y] = np.tril(t[x], k)


@defvjp(np.triu, sample=S.custom(_sample_tri))
def triu(y, x, k=0):
    d[x] = np.triu(d[y], k)
    t[y] = np.triu(t[x], k)


# --------------------------------------------------------------------- products
# Each cotangent of a bilinear product P is linear in g and in the other operand; its own cotangents
# are P and P's other cotangent (as for matmul_dx and matmul_dy in core).
@defvjp(np.kron, sample=_sample_product(_kron_shapes))
def kron(z, a, b):
    d[a] = kron_dx(d[z], a, b)
    d[b] = kron_dy(d[z], a, b)
    t[z] = np.kron(t[a], b) + np.kron(a, t[b])


@defvjp(None, sample=_sample_product(_kron_shapes, np.kron))
def kron_dx(r, g, x, y):
    """Cotangent of ``x`` in ``np.kron(x, y)``."""
    d[x] = None   # read for its shape (or ranks, or kind) only
    d[g] = np.kron(d[r], y)
    d[y] = kron_dy(g, d[r], y)
    t[r] = kron_dx(t[g], x, y) + kron_dx(g, x, t[y])


@defvjp(None, sample=_sample_product(_kron_shapes, np.kron))
def kron_dy(r, g, x, y):
    """Cotangent of ``y`` in ``np.kron(x, y)``."""
    d[y] = None   # read for its shape (or ranks, or kind) only
    d[g] = np.kron(x, d[r])
    d[x] = kron_dx(g, x, d[r])
    t[r] = kron_dy(t[g], x, y) + kron_dy(g, t[x], y)


@defvjp(np.inner, sample=_sample_product(_inner_shapes))
def inner(z, a, b):
    d[a] = inner_dx(d[z], a, b)
    d[b] = inner_dy(d[z], a, b)
    t[z] = np.inner(t[a], b) + np.inner(a, t[b])


@defvjp(None, sample=_sample_product(_inner_shapes, np.inner))
def inner_dx(r, g, x, y):
    """Cotangent of ``x`` in ``np.inner(x, y)``."""
    d[x] = None   # read for its shape (or ranks, or kind) only
    d[g] = np.inner(d[r], y)
    d[y] = inner_dy(g, d[r], y)
    t[r] = inner_dx(t[g], x, y) + inner_dx(g, x, t[y])


@defvjp(None, sample=_sample_product(_inner_shapes, np.inner))
def inner_dy(r, g, x, y):
    """Cotangent of ``y`` in ``np.inner(x, y)``."""
    d[y] = None   # read for its shape (or ranks, or kind) only
    d[g] = np.inner(x, d[r])
    d[x] = inner_dx(g, x, d[r])
    t[r] = inner_dy(t[g], x, y) + inner_dy(g, t[x], y)


@defvjp(np.cross, sample=S.custom(_sample_cross))
def cross(z, a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    d[a] = cross_dx(d[z], a, b, axisa, axisb, axisc, axis)
    d[b] = cross_dy(d[z], a, b, axisa, axisb, axisc, axis)
    t[z] = np.cross(t[a], b, axisa, axisb, axisc, axis) + np.cross(a, t[b], axisa, axisb, axisc, axis)


@defvjp(None, sample=S.custom(_sample_cross_d))
def cross_dx(r, g, x, y, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """Cotangent of ``x`` in ``np.cross(x, y, ...)`` (2- and 3-vectors)."""
    d[x] = None   # read for its shape (or ranks, or kind) only
    d[g] = np.cross(d[r], y, axisa, axisb, axisc, axis)
    d[y] = cross_dy(g, d[r], y, axisa, axisb, axisc, axis)
    t[r] = cross_dx(t[g], x, y, axisa, axisb, axisc, axis) + cross_dx(g, x, t[y], axisa, axisb, axisc, axis)


@defvjp(None, sample=S.custom(_sample_cross_d))
def cross_dy(r, g, x, y, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """Cotangent of ``y`` in ``np.cross(x, y, ...)`` (2- and 3-vectors)."""
    d[y] = None   # read for its shape (or ranks, or kind) only
    d[g] = np.cross(x, d[r], axisa, axisb, axisc, axis)
    d[x] = cross_dx(g, x, d[r], axisa, axisb, axisc, axis)
    t[r] = cross_dy(t[g], x, y, axisa, axisb, axisc, axis) + cross_dy(g, t[x], y, axisa, axisb, axisc, axis)


@defvjp(None, sample=S.custom(_sample_einsum))
def einsum(y, subscripts, operands, optimize=False):
    """``np.einsum(subscripts, *operands)``: the normalize pass turns every call form (sublists, implicit
    output) into this one, with the operands as one tuple."""
    d[operands] = einsum_vjp(d[y], subscripts, operands, optimize)
    t[y] = einsum_tangent(subscripts, operands, t[operands], optimize)


@primitive(tested_via=einsum)
def einsum_vjp(g, subscripts, operands, optimize=False):
    """The cotangent of every operand of ``np.einsum(subscripts, *operands)`` (a list; linear in ``g``)."""
    return K.einsum_vjp(g, subscripts, operands, optimize)


def _sample_einsum_tangent(draw, dt, st, array, shapes):
    (subs, ops), kw = _sample_einsum(draw, dt, st, array, shapes)
    return (subs, ops, tuple(array(draw, np.shape(o), dt) for o in ops)), kw


@defvjp(None, sample=S.custom(_sample_einsum_tangent))
def einsum_tangent(y, subscripts, operands, tangents, optimize=False):
    """The tangent of ``np.einsum(subscripts, *operands)``: one einsum per operand with its tangent in its place.
    Its own rules make einsum twice differentiable (forward over forward, reverse over forward)."""
    d[operands] = einsum_tangent_vjp(d[y], subscripts, operands, tangents, optimize)
    d[tangents] = einsum_vjp(d[y], subscripts, operands, optimize)
    t[y] = einsum_tangent(subscripts, operands, t[tangents], optimize) + \
        einsum_tangent2(subscripts, operands, tangents, t[operands], optimize)


@primitive(tested_via=einsum_tangent)
def einsum_tangent_vjp(g, subscripts, operands, tangents, optimize=False):
    """The cotangent of every operand of ``einsum_tangent`` (a list; linear in ``g``): for operand ``j``, the
    sum over ``k != j`` of its cotangent in the einsum with tangent ``k`` in place of operand ``k``."""
    return K.einsum_tangent_vjp(g, subscripts, operands, tangents, optimize)


@primitive(tested_via=einsum_tangent)
def einsum_tangent2(subscripts, operands, tangents, dots, optimize=False):
    """The tangent of ``einsum_tangent`` along ``dots`` (the operands' tangents): the sum over ordered pairs
    ``k != j`` of the einsum with ``tangents[k]`` in place of operand ``k`` and ``dots[j]`` of operand ``j``."""
    return K.einsum_tangent2(subscripts, operands, tangents, dots, optimize)


# --------------------------------------------------------------------- gathers and finite differences
@defvjp(np.take_along_axis, sample=S.custom(_sample_take_along))
def take_along_axis(y, arr, indices, axis=-1):
    d[arr] = untake_along_axis(d[y], arr, indices, axis)
    t[y] = np.take_along_axis(t[arr], indices, axis)


@defvjp(None, sample=S.custom(_sample_untake_along))
def untake_along_axis(y, g, arr, indices, axis=-1):
    """Zeros like ``arr`` with ``g`` added where ``np.take_along_axis(arr, indices, axis)`` read."""
    d[arr] = None   # read for its shape (or ranks, or kind) only
    d[g] = np.take_along_axis(d[y], indices, axis)
    t[y] = untake_along_axis(t[g], arr, indices, axis)


def _sample_put_along(draw, dt, st, array, shapes):
    (x, idx), kw = _sample_take_along(draw, dt, st, array, shapes)
    ish = np.take_along_axis(np.zeros(np.shape(x)), idx, kw["axis"]).shape
    vs = tuple(n if draw(st.booleans()) else 1 for n in ish)[draw(st.integers(0, len(ish))):]
    return (array(draw, x.shape, dt), idx, array(draw, vs, dt), kw["axis"]), {}


@defvjp(None, sample=S.custom(_sample_put_along))
def put_along_axis(y, arr, indices, values, axis):
    """A copy of ``arr`` with ``np.put_along_axis(copy, indices, values, axis)`` done; the normalize pass
    turns the in-place call into this and a write of the result back into ``arr``."""
    d[arr] = put_along_axis(d[y], indices, 0.0, axis)
    d[values] = written_along_axis(d[y], indices, values, axis)
    t[y] = put_along_axis(t[arr], indices, 0.0, axis) + put_along_axis(np.zeros_like(arr), indices, t[values], axis)


@defvjp(None, tested_via=put_along_axis)
def written_along_axis(y, g, indices, values, axis):
    """The cotangent of ``values`` in ``put_along_axis``: ``g`` where each value was written (a repeated
    position: its last write only), summed down to ``values``' shape. It is linear in ``g``, the transpose of
    ``values -> put_along_axis(zeros, indices, values, axis)``: its VJP is that write (second derivatives of a
    gradient through np.put_along_axis)."""
    d[g] = put_along_axis(np.zeros_like(g), indices, d[y], axis)
    d[values] = None   # read for its shape only
    t[y] = written_along_axis(t[g], indices, values, axis)


@defvjp(None, sample=S.custom(_sample_gradient))
def gradient_along(y, f, axis, edge_order=1):
    """``np.gradient(f, axis=axis, edge_order=edge_order)`` with unit spacing (linear in ``f``)."""
    d[f] = ungradient_along(d[y], axis, edge_order)
    t[y] = gradient_along(t[f], axis, edge_order)


@defvjp(None, sample=S.custom(_sample_gradient))
def ungradient_along(y, g, axis, edge_order=1):
    """The transpose of ``gradient_along``."""
    d[g] = gradient_along(d[y], axis, edge_order)
    t[y] = ungradient_along(t[g], axis, edge_order)


# --------------------------------------------------------------------- NumPy 2 names of the same functions
for _new, _old in (("concat", np.concatenate), ("permute_dims", np.transpose)):
    if getattr(np, _new, None) is not None and getattr(np, _new) is not _old:
        alias(getattr(np, _new), _old)
