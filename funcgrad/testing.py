"""Gradient checking for users, and hypothesis strategies for arrays and pytrees.

``check_grads`` compares funcgrad's derivatives of ``f`` with central finite
differences, in two call forms: ``check_grads(f, args, ...)`` (JAX's: the VJP
against the full numerical Jacobian for small inputs, random projections for
large ones; forward mode and second order on request) and autograd's curried
``check_grads(f, argnum, modes, order)(*args)`` with autograd's semantics and
tolerances, plus autograd's ``combo_check`` (``funcgrad.test_util`` re-exports
both under autograd's names). Strategies (``arrays``,
``broadcastable_shapes``, ``pytrees``) need hypothesis, imported lazily.
"""
from __future__ import annotations

import itertools
import linecache

import numpy as np

from . import api as _api
from .api import vjp
from . import forward_mode as _fm
from .differential import bind_argnum, check_argnum, normalize_argnum, source_function, value_expr
from .forward_mode import jvp
from .tree import tree_flatten, tree_flatten_with_path, tree_map, tree_unflatten

__all__ = ["check_grads", "combo_check", "numerical_vjp", "scalar_close", "TOL", "RTOL", "EPS", "arrays",
           "broadcastable_shapes", "pytrees", "primitive_function"]


def _perturb(args, argnum, leaf_i, flat_index, delta):
    leaves, td = tree_flatten(args[argnum])
    leaves = list(leaves)
    x = leaves[leaf_i]
    if isinstance(x, np.ndarray):
        x = x.copy()
        x.reshape(-1)[flat_index] += delta
    else:
        x = x + delta
    leaves[leaf_i] = x
    new = list(args)
    new[argnum] = tree_unflatten(td, leaves)
    return new


def _leaf(x):
    x = np.asarray(x)
    return x.astype(np.complex128 if np.iscomplexobj(x) else np.float64)


def _dot(a, b):
    """``Re(sum(a * b))`` over the leaves (a cotangent is a covector: autograd's convention, no conjugate)."""
    la, _ = tree_flatten(a)
    lb, _ = tree_flatten(b)
    return float(sum(np.real(np.sum(_leaf(x) * _leaf(y))) for x, y in zip(la, lb)))


def numerical_vjp(f, args, argnum, cotangent, eps):
    """Central differences of ``<cotangent, f(args)>`` with respect to every element of ``args[argnum]``.

    For a complex element the result is ``d/dRe - 1j * d/dIm`` (autograd's convention: what ``vjp``
    returns), with ``<c, y> = Re(sum(c * y))``.
    """
    leaves, td = tree_flatten(args[argnum])
    out = []
    for li, x in enumerate(leaves):
        cplx = np.iscomplexobj(x)
        g = np.zeros(np.shape(x), dtype=np.complex128 if cplx else np.float64)
        for k in range(g.size):
            for step, unit in ((eps, 1.0), (1j * eps, -1j))[:2 if cplx else 1]:
                fp = f(*_perturb(args, argnum, li, k, step))
                fm = f(*_perturb(args, argnum, li, k, -step))
                g.reshape(-1)[k] += unit * (_dot(cotangent, fp) - _dot(cotangent, fm)) / (2 * eps)
        out.append(g if isinstance(x, np.ndarray) else (complex(g) if cplx else float(g)))
    return tree_unflatten(td, out)


# ----------------------------------------------------------------------------- vector spaces of pytrees
# autograd's vspace operations on pytrees of float/complex leaves; every result keeps each leaf's kind
# (Python float, NumPy scalar, array) and dtype, so that f sees inputs like the ones it was given.
TOL = 1e-6   # autograd's test_util tolerances and step
RTOL = 1e-6
EPS = 1e-6


def scalar_close(a, b, tol=TOL, rtol=RTOL):
    """autograd's closeness of two scalars: absolute difference below ``tol`` or relative below ``rtol``."""
    a, b = float(a), float(b)
    d = abs(a - b)
    return bool(d < tol or (abs(a + b) > 0 and d / abs(a + b) < rtol))


def _inexact(x):
    if isinstance(x, (bool, np.bool_)):
        return False
    if isinstance(x, (float, complex)):
        return True
    if isinstance(x, (np.ndarray, np.generic)):
        return np.issubdtype(x.dtype, np.inexact)
    return False


def _describe(x):
    if isinstance(x, np.ndarray):
        return f"an array of dtype {x.dtype}"
    return f"a value of type {type(x).__name__}"


def _vs_leaves(tree, what):
    leaves, td = tree_flatten(tree)
    for x in leaves:
        if not _inexact(x):
            raise TypeError(f"check_grads: {what} contains {_describe(x)}; only floating-point and complex "
                            "values (arrays, floats and containers of them) can be checked")
    return leaves, td


def _like(x, v):
    """The number or array ``v`` as the same kind of value as the leaf ``x``; a NumPy scalar for a Python
    number (as autograd's vector spaces make it: ``x + eps * v`` with ``v`` a 0-d array), so a function that
    reads ``x.shape`` or ``x.dtype`` of a scalar argument can be evaluated at the perturbed points."""
    if isinstance(x, np.ndarray):
        return np.asarray(v, dtype=x.dtype).reshape(x.shape)
    if isinstance(x, np.generic):
        return x.dtype.type(v)
    return np.complex128(v) if isinstance(x, complex) else np.float64(v)


def _vs_randn(tree, rng):
    """A standard normal vector of ``tree``'s space (complex leaves get a complex one)."""
    def leaf(x):
        shape = np.shape(x)
        r = np.asarray(rng.standard_normal(size=shape))
        if np.iscomplexobj(x):
            r = r + 1j * np.asarray(rng.standard_normal(size=shape))
        return _like(x, r)
    return tree_map(leaf, tree)


def _vs_add(a, b):
    return tree_map(lambda x, y: _like(x, np.add(x, y)), a, b)


def _vs_scale(a, s):
    return tree_map(lambda x: _like(x, np.multiply(x, s)), a)


def _vs_conj(a):
    return tree_map(lambda x: _like(x, np.conj(x)), a)


def _vs_inner(a, b):
    """The real inner product: ``sum(real(conj(a) * b))`` over every leaf."""
    la, _ = tree_flatten(a)
    lb, _ = tree_flatten(b)
    return float(sum(np.real(np.dot(np.conj(np.ravel(x)), np.ravel(y))) for x, y in zip(la, lb)))


def _vs_mismatch(a, b):
    """None when ``a`` is in the same space as ``b`` (structure, shapes, dtypes), else what differs."""
    la, ta = tree_flatten(a)
    lb, tb = tree_flatten(b)
    if ta != tb:
        return f"structure {ta!r}, expected {tb!r}"
    for i, (x, y) in enumerate(zip(la, lb)):
        where = f" (leaf {i})" if len(la) > 1 else ""
        if np.shape(x) != np.shape(y):
            return f"shape {np.shape(x)}{where}, expected {np.shape(y)}"
        if np.result_type(x) != np.result_type(y):
            return f"dtype {np.result_type(x)}{where}, expected {np.result_type(y)}"
    return None


def _numerical_jvp(f, x, eps):
    """``v -> (f(x + v eps/2) - f(x - v eps/2)) / eps`` (autograd's ``make_numerical_jvp``)."""
    def jvp(v):
        f_plus = f(_vs_add(x, _vs_scale(v, eps / 2)))
        f_minus = f(_vs_add(x, _vs_scale(v, -eps / 2)))
        return _vs_scale(_vs_add(f_plus, _vs_scale(f_minus, -1.0)), 1.0 / eps)
    return jvp


def _check_value(got, f, x, name, how, atol=1e-6, rtol=1e-6):
    """The primal value a transform returned is ``f(x)``'s."""
    want = f(x)
    mm = _vs_mismatch(got, want)
    assert mm is None, f"{how} of {name} returned a value with {mm}"
    for a, b in zip(tree_flatten(got)[0], tree_flatten(want)[0]):
        assert np.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True), (
            f"{how} of {name} returned the value {a}, but calling it gives {b}")


def _jvp_transform(name):
    """The forward-mode transform the "fwd" checks use (``funcgrad.forward_mode.jvp``; a module attribute so a
    test can put a reference implementation in its place)."""
    return jvp


def _extra(tk, env):
    return "".join(f", {k}={value_expr(v, f'_t_{k}', env)}" for k, v in tk.items())


def _lines_function(label, params, lines, env):
    """A real Python function ``def label(*params): <lines>`` over the globals ``env``, its source in linecache
    (so that funcgrad's transforms read it as they read the user's code)."""
    fname = "".join(c if c.isalnum() or c == "_" else "_" for c in label)
    fname = fname if fname and not fname[0].isdigit() else "f_" + fname
    _COUNTER[0] += 1
    src = f"def {fname}({', '.join(params)}):\n" + "".join(f"    {ln}\n" for ln in lines)
    filename = f"<funcgrad check_grads {fname} #{_COUNTER[0]}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    ns = dict(env)
    ns["np"] = np
    exec(compile(src, filename, "exec"), ns)
    return ns[fname]


def _leaf_exprs(root, tree, what):
    """Source expressions reading each leaf of ``tree`` (in tree_flatten's order) from the variable ``root``."""
    pairs, _ = tree_flatten_with_path(tree)
    for path, _ in pairs:
        if ".<" in path:
            raise TypeError(f"check_grads with order > 1: {what} holds a registered pytree node; only tuples, "
                            "lists, dicts and NamedTuples of arrays and floats can be checked at higher order")
    return [root + path for path, _ in pairs]


def _tree_expr(td, exprs, env):
    """A source expression building a tree of structure ``td`` from the leaf expressions ``exprs``."""
    it = iter(exprs)

    def build(t):
        if t.kind == "leaf":
            return next(it)
        ch = [build(c) for c in t.children]
        if t.kind == "none":
            return "None"
        if t.kind == "tuple":
            return "(" + ", ".join(ch) + ("," if len(ch) == 1 else "") + ")"
        if t.kind == "list":
            return "[" + ", ".join(ch) + "]"
        if t.kind == "dict":
            return "{" + ", ".join(f"{k!r}: {c}" for k, c in zip(t.aux, ch)) + "}"
        if t.kind == "namedtuple":
            name = f"_nt{len(env)}"
            env[name] = t.aux
            return f"{name}({', '.join(ch)})"
        raise TypeError("check_grads with order > 1: the function returns a registered pytree node; only tuples, "
                        "lists, dicts and NamedTuples of arrays and floats can be checked at higher order")

    return build(td)


class _Generated:
    """The forward-mode code funcgrad generated for ``f`` at the signature of ``x`` (a pytree of floats), as a
    call written in source: ``call(xs, ts)`` is the text of a call of the generated jvp with primal leaf
    expressions ``xs`` and tangent leaf expressions ``ts``; it returns ``(outputs, output tangents)``, one
    entry per output leaf. The maps below are real Python functions around that call, which funcgrad reads and
    differentiates again (forward over forward, reverse over forward), to any order."""

    def __init__(self, f, x, name, tk):
        self.so = _fm._so(f, (x,), tk.get("mode"), tk.get("jit", True), tk.get("backend"), complex_ok=True)
        n = len(tree_flatten(x)[0])
        if self.so.n != n or self.so.n_tan != n:
            raise TypeError(f"check_grads with order > 1: every leaf of the argument of {name} must be a float "
                            "array or a float")
        self.env = dict(self.so.scope)
        y = f(x)
        y_leaves, self.y_td = tree_flatten(y)
        if len(y_leaves) != self.so.n_out:  # an output funcgrad keeps as a constant: a flat tuple of the leaves
            self.y_td = tree_flatten(tuple(range(self.so.n_out)))[1]
        self.y_leaves = y_leaves

    def call(self, xs, ts):
        return f"_jvpfn({', '.join(list(xs) + self.so.caps + list(ts))})"


def _jvp_map(f, x, name, tk=None):
    """``(x, v) -> jvp(f, (x,), (v,))[1]`` (the map autograd checks for second order in forward mode), as a
    Python function around the forward-mode code funcgrad generated for ``f``."""
    gen = _Generated(f, x, name, tk or {})
    xs, vs = _leaf_exprs("x", x, f"the argument of {name}"), _leaf_exprs("v", x, f"the argument of {name}")
    outs = _tree_expr(gen.y_td, [f"_r[1][{k}]" for k in range(gen.so.n_out)], gen.env)
    return _lines_function(f"jvp_{name}", ["x", "v"], [f"_r = {gen.call(xs, vs)}", f"return {outs}"], gen.env)


def _vjp_map(f, x, name, tk=None):
    """``(x, v) -> vjp(f, x)[1](v)`` (the map autograd checks for second order in reverse mode), as a Python
    function around the forward-mode code funcgrad generated for ``f``: ``J(x)^T v`` is assembled from one
    JVP per element of ``x`` (two for a complex element: along ``e_k`` and ``1j e_k``), each paired with ``v``
    as ``Re(sum(v * J e))``; with autograd's convention for complex inputs, the cotangent of element ``k`` is
    ``<v, J e_k> - 1j <v, J (1j e_k)>``. Reverse mode over this code is the second-order VJP."""
    gen = _Generated(f, x, name, tk or {})
    env = gen.env
    x_leaves = tree_flatten(x)[0]
    xs = _leaf_exprs("x", x, f"the argument of {name}")
    vs = [f"v{p}" for p in _leaf_exprs("", tree_unflatten(gen.y_td, [0] * gen.so.n_out), "the output")]
    y_cplx = [np.iscomplexobj(o) for o in gen.y_leaves] if len(gen.y_leaves) == gen.so.n_out else \
        [True] * gen.so.n_out
    lines, results = [], []
    zeros = []
    for j, leaf in enumerate(x_leaves):
        if isinstance(leaf, np.ndarray):
            env[f"_Z{j}"] = np.zeros(leaf.shape, dtype=leaf.dtype)
            zeros.append(f"_Z{j}")
        else:
            zeros.append("0.0" if not np.iscomplexobj(leaf) else "0j")
    k_call = 0
    for j, leaf in enumerate(x_leaves):
        size = int(np.size(leaf))
        cplx = np.iscomplexobj(leaf)
        if isinstance(leaf, np.ndarray):
            basis = np.eye(size, dtype=leaf.dtype).reshape((size,) + leaf.shape)
            env[f"_E{j}"] = basis
            if cplx:
                env[f"_iE{j}"] = 1j * basis
        parts = []
        for k in range(size):
            units = [("1.0" if not cplx else "(1+0j)", f"_E{j}[{k}]")]
            if cplx:
                units.append(("1j", f"_iE{j}[{k}]"))
            terms = []
            for scalar_unit, array_unit in units:
                ts = list(zeros)
                ts[j] = array_unit if isinstance(leaf, np.ndarray) else scalar_unit
                lines.append(f"_r{k_call} = {gen.call(xs, ts)}")
                pair = " + ".join((f"np.real(np.sum(_r{k_call}[1][{o}] * {ve}))" if yc else
                                   f"np.sum(_r{k_call}[1][{o}] * {ve})")
                                  for o, (ve, yc) in enumerate(zip(vs, y_cplx))) or "0.0"
                terms.append(pair)
                k_call += 1
            parts.append(terms[0] if len(terms) == 1 else f"({terms[0]}) - 1j * ({terms[1]})")
        if isinstance(leaf, np.ndarray):
            lines.append(f"_g{j} = np.reshape(np.array([{', '.join(parts)}]), {leaf.shape!r})")
        else:
            lines.append(f"_g{j} = {parts[0]}")
        results.append(f"_g{j}")
    out = _tree_expr(tree_flatten(x)[1], results, env)
    return _lines_function(f"vjp_{name}", ["x", "v"], lines + [f"return {out}"], env)


def _modes(modes):
    modes = (modes,) if isinstance(modes, str) else tuple(modes)
    bad = [m for m in modes if m not in ("fwd", "rev")]
    if bad:
        raise ValueError(f"check_grads: modes must be a subset of ('fwd', 'rev'); received {modes!r}")
    return modes


# ----------------------------------------------------------------------------- autograd's form
def _ag_check_vjp(f, x, name, vjp_at=None):
    """autograd's ``check_vjp``: ``<x_v, VJP(y_v)>`` against ``<y_v, JVP_numeric(x_v)>``. ``vjp_at(x)`` gives
    ``(f(x), pull)`` (funcgrad.vjp's by default)."""
    if vjp_at is None:
        y, pull_all = vjp(f, x)
        pull = lambda c: pull_all(c)[0]  # noqa: E731
    else:
        y, pull = vjp_at(x)
    _vs_leaves(y, f"the output of {name}")
    _check_value(y, f, x, name, "funcgrad.vjp")
    jvp_num = _numerical_jvp(f, x, EPS)
    x_v, y_v = _vs_randn(x, np.random), _vs_randn(y, np.random)
    g = _vs_conj(pull(_vs_conj(y_v)))
    mm = _vs_mismatch(g, x)
    assert mm is None, f"VJP of {name} returned a cotangent with {mm}: it must match the input"
    exact = _vs_inner(x_v, g)
    numeric = _vs_inner(y_v, jvp_num(x_v))
    assert scalar_close(numeric, exact), (
        f"Derivative (VJP) check of {name} failed with arg {x}:\nanalytic: {exact}\nnumeric:  {numeric}")


def _ag_check_jvp(f, x, name, jvp_at=None):
    """autograd's ``check_jvp``: the JVP against central differences. ``jvp_at(x, t)`` gives
    ``(f(x), J t)`` (funcgrad.jvp's by default)."""
    if jvp_at is None:
        jvp_t = _jvp_transform(name)
        jvp_at = lambda x, t: jvp_t(f, (x,), (t,))  # noqa: E731
    x_v = _vs_randn(x, np.random)
    y, y_dot = jvp_at(x, x_v)
    _check_value(y, f, x, name, "funcgrad.jvp")
    numeric = _numerical_jvp(f, x, EPS)(x_v)
    mm = _vs_mismatch(y_dot, numeric)
    assert mm is None, f"JVP of {name}: VSpace mismatch: the tangent has {mm}"
    v = _vs_randn(y_dot, np.random)
    a, b = _vs_inner(y_dot, v), _vs_inner(numeric, v)
    assert scalar_close(a, b), (
        f"Derivative (JVP) check of {name} failed with arg {x}:\nanalytic: {a}\nnumeric:  {b}")


class _VjpMap:
    """``h(x, v) = vjp(f, x)(v)`` (autograd's second-order reverse-mode map) with its first derivatives in
    closed form, from reverse mode over funcgrad's generated forward-mode code of ``f``. With the pairing
    ``P(a, b) = Re(sum(a * b))`` (funcgrad's and autograd's: ``P(J^T v, t) = P(v, J t)``) and
    ``A(x, t, c) = grad_x P(c, J(x) t)``, the symmetry of the second derivative gives

    * ``jvp(h)((x, v), (dx, dv)) = A(x, dx, v) + J(x)^T dv``;
    * ``vjp(h)((x, v))(w) = (A(x, w, v), J(x) w)``.

    One reverse pass over one forward pass, whatever the size of ``x`` (``_vjp_map``, which higher orders
    differentiate again, takes one JVP per element of ``x``)."""

    def __init__(self, f, x, name):
        self.f, self.name = f, name
        gen = _Generated(f, x, name, {})
        n, m = gen.so.n, gen.so.n_out
        if len(gen.y_leaves) != m:
            raise _NoClosedForm
        self.x_td = tree_flatten(x)[1]
        self.n = n
        xs, ts, cs = [f"x{i}" for i in range(n)], [f"tan{i}" for i in range(n)], [f"c{k}" for k in range(m)]
        terms = " + ".join(f"np.real(np.sum(_r[1][{k}] * c{k}))" for k in range(m)) or "0.0"
        w = _lines_function(f"pairing_{name}", xs + ts + cs, [f"_r = {gen.call(xs, ts)}", f"return {terms}"],
                            gen.env)
        self.grad_a = _api.grad(w, argnums=tuple(range(n)))

    def a(self, x, t, c):
        g = self.grad_a(*tree_flatten(x)[0], *tree_flatten(t)[0], *tree_flatten(c)[0])
        return tree_unflatten(self.x_td, list(g) if isinstance(g, tuple) else [g])

    def value(self, xv):
        x, v = xv
        return vjp(self.f, x)[1](v)[0]

    def jvp_at(self, xv, dxv):
        (x, v), (dx, dv) = xv, dxv
        return self.value(xv), _vs_add(self.a(x, dx, v), vjp(self.f, x)[1](dv)[0])

    def vjp_at(self, xv):
        x, v = xv
        jvp_t = _jvp_transform(self.name)
        return self.value(xv), lambda w: (self.a(x, w, v), jvp_t(self.f, (x,), (w,))[1])


class _NoClosedForm(Exception):
    pass


def _ag_check_vjp_map(f, x, v, modes, name):
    """autograd's order-1 check of ``(x, v) -> vjp(f, x)(v)`` (the last level of an order-2 check)."""
    try:
        h = _VjpMap(f, x, name)
    except _NoClosedForm:
        _ag_check_grads(_vjp_map(f, x, name), (0, 1), modes, order=1)(x, v)
        return
    hname = f"vjp_{name}"
    if "fwd" in modes:
        _ag_check_jvp(h.value, (x, v), hname, h.jvp_at)
    if "rev" in modes:
        _ag_check_vjp(h.value, (x, v), hname, h.vjp_at)


def _ag_check_grads(fun, argnum=0, modes=("fwd", "rev"), order=2):
    check_argnum(argnum)
    modes = _modes(modes)
    name = getattr(fun, "__name__", "[unknown name]")

    def check(*args, **kwargs):
        f, x = bind_argnum(fun, args, kwargs, argnum, name=name)
        _vs_leaves(x, f"the argument of {name} that is checked (argnum={argnum!r})")
        if "fwd" in modes:
            _ag_check_jvp(f, x, name)
            if order > 1:
                g = _jvp_map(f, x, name)
                v = _vs_randn(x, np.random)
                _ag_check_grads(g, (0, 1), modes, order=order - 1)(x, v)
        if "rev" in modes:
            _ag_check_vjp(f, x, name)
            if order > 1:
                v = _vs_randn(f(x), np.random)
                if order == 2:
                    _ag_check_vjp_map(f, x, v, modes, name)
                else:
                    _ag_check_grads(_vjp_map(f, x, name), (0, 1), modes, order=order - 1)(x, v)

    check.__name__ = f"check_grads_of_{name}_wrt_argnum_{argnum}"
    return check


# ----------------------------------------------------------------------------- the (f, args) form
def _close(a, b, atol, rtol):
    return abs(a - b) <= atol + rtol * abs(b)


def _check_grads_args(f, args, order=1, modes=("rev",), atol=None, rtol=None, eps=None, *, argnums=None, seed=0,
                      max_full=200, projections=8, **transform_kwargs):
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"check_grads(f, args): args must be a tuple of f's arguments; received "
                        f"{type(args).__name__}")
    args = tuple(args)
    _api.refuse_device_args(args, "check_grads (central differences on the host)")
    modes = _modes(modes)
    name = getattr(f, "__name__", "[unknown name]")
    if argnums is None:  # every argument made only of floating-point values, as JAX differentiates them all
        nums = tuple(i for i, a in enumerate(args) if tree_flatten(a)[0] and all(_inexact(x) for x in tree_flatten(a)[0]))
        if not nums:
            raise TypeError(f"check_grads: no argument of {name} is floating-point; nothing to check")
    else:
        _, nums = normalize_argnum(argnums, len(args), "argnums")
    for i in nums:
        _vs_leaves(args[i], f"argument {i} of {name}")
    leaves_all = [x for i in nums for x in tree_flatten(args[i])[0]]
    dt = np.result_type(*[np.asarray(x).dtype for x in leaves_all])
    low = dt in (np.float32, np.complex64)
    eps = eps if eps is not None else (1e-3 if low else 1e-6)
    atol = atol if atol is not None else (1e-2 if low else 1e-6)
    rtol = rtol if rtol is not None else (1e-2 if low else 1e-5)
    rng = np.random.default_rng(seed)
    f1, x = bind_argnum(f, args, {}, nums[0] if len(nums) == 1 else nums, name=name)
    if "rev" in modes:
        _check_vjp_args(f, args, nums, rng, eps, atol, rtol, max_full, projections, transform_kwargs)
    if "fwd" in modes:
        jvp_t = _jvp_transform(name)
        x_v = _vs_randn(x, rng)
        y, y_dot = jvp_t(f1, (x,), (x_v,), **transform_kwargs)
        _check_value(y, f1, x, name, "funcgrad.jvp", atol, rtol)
        numeric = _numerical_jvp(f1, x, 2 * eps)(x_v)
        mm = _vs_mismatch(y_dot, numeric)
        assert mm is None, f"JVP of {name} returned a tangent with {mm}"
        for a, b in zip(tree_flatten(y_dot)[0], tree_flatten(numeric)[0]):
            np.testing.assert_allclose(a, b, atol=atol, rtol=rtol,
                                       err_msg=f"JVP of {name} does not match finite differences")
    if order > 1:
        common = dict(atol=atol, rtol=rtol, eps=eps, argnums=(0, 1), seed=seed + 1, max_full=max_full,
                      projections=projections, **transform_kwargs)
        if "fwd" in modes:
            _check_grads_args(_jvp_map(f1, x, name, transform_kwargs), (x, _vs_randn(x, rng)), order - 1, modes,
                              **common)
        if "rev" in modes:
            _check_grads_args(_vjp_map(f1, x, name, transform_kwargs), (x, _vs_randn(f1(x), rng)), order - 1,
                              modes, **common)


def _check_vjp_args(f, args, nums, rng, eps, atol, rtol, max_full, projections, transform_kwargs):
    """funcgrad's VJP of ``f`` against central differences: the full Jacobian for small real inputs,
    ``projections`` random directions otherwise."""
    name = getattr(f, "__name__", "[unknown name]")
    out, vjp_fn = vjp(f, *args, argnums=nums, **transform_kwargs)
    _vs_leaves(out, f"the output of {name}")
    _check_value(out, lambda a: f(*a), args, name, "funcgrad.vjp", atol, rtol)
    y_v = _vs_randn(out, rng)
    cts = vjp_fn(_vs_conj(y_v))
    for k, i in enumerate(nums):
        leaves, td = tree_flatten(args[i])
        n = sum(int(np.size(x)) for x in leaves)
        got = _vs_conj(cts[k])
        mm = _vs_mismatch(got, args[i])
        assert mm is None, f"VJP of {name}: the cotangent of argument {i} has {mm}"
        if n <= max_full and not _is_complex(args[i]) and not _is_complex(out):
            want = numerical_vjp(f, args, i, y_v, eps)
            for (a, b) in zip(tree_flatten(got)[0], tree_flatten(want)[0]):
                np.testing.assert_allclose(np.asarray(a, dtype=np.float64), b, atol=atol, rtol=rtol,
                                           err_msg=f"VJP of argument {i} does not match finite differences")
        else:
            for _ in range(projections):
                d = _vs_randn(args[i], rng)
                plus, minus = list(args), list(args)
                plus[i] = _vs_add(args[i], _vs_scale(d, eps))
                minus[i] = _vs_add(args[i], _vs_scale(d, -eps))
                num = (_vs_inner(y_v, f(*plus)) - _vs_inner(y_v, f(*minus))) / (2 * eps)
                ana = _vs_inner(d, got)
                assert _close(ana, num, atol, rtol), (
                    f"directional derivative of argument {i}: finite differences {num}, funcgrad {ana}")


def _is_complex(tree):
    return any(np.iscomplexobj(x) for x in tree_flatten(tree)[0])


# ----------------------------------------------------------------------------- the public checkers
def _is_argnum(a):
    ok = lambda i: isinstance(i, (int, np.integer)) and not isinstance(i, bool)  # noqa: E731
    return ok(a) or (isinstance(a, (tuple, list)) and len(a) > 0 and all(ok(i) for i in a))


def check_grads(f, *args, **kwargs):
    """Check funcgrad's derivatives of ``f`` against central finite differences; raise ``AssertionError``.

    Two call forms, told apart by the second argument:

    * autograd's, curried: ``check_grads(f, argnum=0, modes=("fwd", "rev"), order=2)(*args, **kwargs)``
      checks the derivative with respect to ``args[argnum]`` (a tuple of
      arguments for a tuple ``argnum``) as ``autograd.test_util`` does: "rev"
      compares ``<u, VJP(v)>`` with ``<JVP_numeric(u), v>`` for random ``u, v``,
      "fwd" compares ``funcgrad.jvp`` with the numerical JVP, with tolerances
      ``TOL = RTOL = 1e-6`` and the step ``EPS = 1e-6``; ``order=2`` checks the
      derivative maps ``(x, v) -> vjp(f, x)[1](v)`` and
      ``(x, v) -> jvp(f, (x,), (v,))[1]`` the same way, with respect to both.
    * JAX's, with the arguments: ``check_grads(f, args, order=1, modes=("rev",), atol=None, rtol=None,
      eps=None, *, argnums=None, seed=0, max_full=200, projections=8, **transform_kwargs)``
      checks every argument made of floating-point values (or those in
      ``argnums``); "rev" compares the VJP with the full numerical Jacobian for
      inputs of at most ``max_full`` elements and along ``projections`` random
      directions otherwise, "fwd" compares ``funcgrad.jvp`` with the numerical
      JVP. Tolerances default by dtype. The defaults (reverse mode, first
      order) differ from JAX's; pass ``order=2, modes=("fwd", "rev")`` for
      its full check. ``transform_kwargs`` (``jit=``, ``mode=``) go to the
      transforms.

    Complex values are checked as vectors of real and imaginary parts, with
    autograd's conventions (the VJP of a conjugated cotangent, conjugated). A
    mode whose transform funcgrad lacks fails with an ``AssertionError`` that
    says so; nothing is skipped.
    """
    if "args" in kwargs or (args and not _is_argnum(args[0])):
        return _check_grads_args(f, *args, **kwargs)
    return _ag_check_grads(f, *args, **kwargs)


def combo_check(fun, *args, **kwargs):
    """autograd's ``combo_check``: ``combo_check(fun, argnum, modes=..., order=...)(*arg_lists, **kwarg_lists)``
    runs ``check_grads(fun, argnum, ...)`` on every combination of the listed argument and keyword values."""
    def _check_grads(f):
        return check_grads(f, *args, **kwargs)

    def _combo_check(*arg_lists, **kwarg_lists):
        kwarg_key_vals = [[(k, x) for x in xs] for k, xs in kwarg_lists.items()]
        for _args in itertools.product(*arg_lists):
            for _kwargs in itertools.product(*kwarg_key_vals):
                try:
                    _check_grads(fun)(*_args, **dict(_kwargs))
                except Exception as e:
                    shapes = ", ".join(f"shape {np.shape(a)} {np.result_type(a)}" if _inexact(a) else repr(a)
                                       for a in _args)
                    if hasattr(e, "add_note"):  # Python 3.11+
                        e.add_note(f"combo_check of {getattr(fun, '__name__', fun)}: arguments ({shapes}), "
                                   f"keywords {dict(_kwargs)!r}")
                    raise

    return _combo_check


# ----------------------------------------------------------------------------- strategies
def arrays(shape=None, dtype=np.float64, min_value=-2.0, max_value=2.0, min_dims=0, max_dims=3, max_side=4):
    """A hypothesis strategy of finite float arrays."""
    import hypothesis.strategies as st
    from hypothesis.extra import numpy as hnp
    shapes = st.just(shape) if shape is not None else hnp.array_shapes(min_dims=min_dims, max_dims=max_dims,
                                                                       min_side=1, max_side=max_side)
    return hnp.arrays(dtype, shapes, elements=st.floats(min_value, max_value, allow_nan=False,
                                                        allow_infinity=False, width=np.dtype(dtype).itemsize * 8))


def broadcastable_shapes(num_shapes=2, max_dims=3):
    """A strategy of ``num_shapes`` shapes that broadcast together."""
    from hypothesis.extra import numpy as hnp
    return hnp.mutually_broadcastable_shapes(num_shapes=num_shapes, max_dims=max_dims, max_side=4).map(
        lambda r: r.input_shapes)


def pytrees(leaves=None, max_leaves=6):
    """A strategy of pytrees (dicts, lists, tuples, None) of arrays."""
    import hypothesis.strategies as st
    leaves = leaves if leaves is not None else arrays(max_dims=2)
    return st.recursive(leaves, lambda ch: st.one_of(
        st.lists(ch, min_size=1, max_size=3), st.tuples(ch, ch),
        st.dictionaries(st.text("abcdefgh", min_size=1, max_size=3), ch, min_size=1, max_size=3)),
        max_leaves=max_leaves)


# ----------------------------------------------------------------------------- registry test support
def _value_src(v):
    """Source text for a constant argument: ``np.float64`` for a NumPy scalar type, else its repr."""
    if isinstance(v, type) and issubclass(v, np.generic):
        return f"np.{v.__name__}"
    return repr(v)


_COUNTER = [0]
_FUNCTIONS = {}   # (primitive, parameters, body) -> (function, the primitive's callable)


def _lit(v):
    if isinstance(v, slice):
        return f"{'' if v.start is None else v.start}:{'' if v.stop is None else v.stop}" + (
            f":{v.step}" if v.step is not None else "")
    return repr(v)


def primitive_function(prim, args, kwargs):
    """A real Python function (with readable source) calling ``prim`` on array arguments.

    Returns ``(fn, array_args, diff_argnums)``: array and float arguments become
    the function's parameters; other arguments are written into the source as
    literals. A tuple of arrays (concatenate, stack) becomes one parameter each.
    """
    params, call_args, values, diff = [], [], [], []
    diffable = set(prim.template.diff_params) if prim.template is not None else set()
    for name, a in zip(prim.params, args):
        if isinstance(a, (tuple, list)) and a and all(isinstance(x, (np.ndarray, float)) for x in a):
            names = []
            for x in a:
                p = f"x{len(params)}"
                params.append(p)
                values.append(x)
                if name in diffable:
                    diff.append(len(params) - 1)
                names.append(p)
            call_args.append("(" + ", ".join(names) + ",)")
        elif isinstance(a, np.ndarray) and a.dtype == bool:
            p = f"x{len(params)}"
            params.append(p)
            values.append(a)
            call_args.append(p)
        elif isinstance(a, (np.ndarray, float)):
            p = f"x{len(params)}"
            params.append(p)
            values.append(a)
            if np.issubdtype(np.asarray(a).dtype, np.floating) and name in diffable:
                diff.append(len(params) - 1)
            call_args.append(p)
        else:
            call_args.append(a)
    if prim.name == "getitem":
        idx = call_args[1]
        idx_src = ", ".join(_lit(i) for i in idx) if isinstance(idx, tuple) else _lit(idx)
        body = f"{call_args[0]}[{idx_src}]"
    else:
        parts = [c if isinstance(c, str) and (c.startswith("x") or c.startswith("(x")) else _value_src(c)
                 for c in call_args]
        parts += [f"{k}={_value_src(v)}" for k, v in kwargs.items()]
        body = f"_prim({', '.join(parts)})"
    key = (prim.name, id(prim.key), tuple(params), body)
    fn = _FUNCTIONS.get(key)
    if fn is not None and fn[1] is prim.key:   # the same source again: the same function, so funcgrad's
        return fn[0], values, tuple(diff)       # cache serves arguments of a kind it has seen
    _COUNTER[0] += 1
    fname = f"prim_{prim.name}_{_COUNTER[0]}"
    src = f"def {fname}({', '.join(params)}):\n    return {body}\n"
    filename = f"<funcgrad registry test {fname}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    ns = {"_prim": prim.key, "np": np}
    exec(compile(src, filename, "exec"), ns)
    _FUNCTIONS[key] = (ns[fname], prim.key)
    return ns[fname], values, tuple(diff)
