"""Gradient checking for users, and hypothesis strategies for arrays and pytrees.

``check_grads(f, args)`` compares funcgrad's VJP of ``f`` against central
finite differences: the full Jacobian for small inputs, random projections
(directional derivatives) for large ones. Strategies (``arrays``,
``broadcastable_shapes``, ``pytrees``) need hypothesis, imported lazily.
"""
from __future__ import annotations

import linecache

import numpy as np

from .api import vjp
from .tree import tree_flatten, tree_unflatten

__all__ = ["check_grads", "numerical_vjp", "arrays", "broadcastable_shapes", "pytrees", "primitive_function"]


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


def check_grads(f, args, argnums=0, eps=None, atol=None, rtol=None, seed=0, max_full=200, projections=8,
                **transform_kwargs):
    """Assert that funcgrad's VJP of ``f`` at ``args`` matches central finite differences.

    Inputs with at most ``max_full`` elements get a full numerical Jacobian;
    larger ones are checked along ``projections`` random directions. Raises
    ``AssertionError`` with the worst mismatch. Tolerances default by dtype.
    """
    args = tuple(args)
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    leaves_all = [x for i in nums for x in tree_flatten(args[i])[0]]
    dt = np.result_type(*[np.asarray(x).dtype for x in leaves_all]) if leaves_all else np.float64
    low = dt == np.float32
    eps = eps if eps is not None else (1e-3 if low else 1e-6)
    atol = atol if atol is not None else (1e-2 if low else 1e-6)
    rtol = rtol if rtol is not None else (1e-2 if low else 1e-5)
    rng = np.random.default_rng(seed)
    out, vjp_fn = vjp(f, *args, argnums=nums, **transform_kwargs)
    out_leaves, out_td = tree_flatten(out)
    ct = tree_unflatten(out_td, [(rng.standard_normal(np.shape(o)).astype(np.asarray(o).dtype)
                                  if np.shape(o) else float(rng.standard_normal())) for o in out_leaves])
    cts = vjp_fn(ct)
    for k, i in enumerate(nums):
        leaves, td = tree_flatten(args[i])
        n = sum(int(np.size(x)) for x in leaves)
        got = cts[k]
        if n <= max_full:
            want = numerical_vjp(f, args, i, ct, eps)
            for (a, b) in zip(tree_flatten(got)[0], tree_flatten(want)[0]):
                np.testing.assert_allclose(np.asarray(a, dtype=np.float64), b, atol=atol, rtol=rtol,
                                           err_msg=f"VJP of argument {i} does not match finite differences")
        else:
            for _ in range(projections):
                dirs = [rng.standard_normal(np.shape(x)) for x in leaves]
                plus = list(args)
                minus = list(args)
                plus[i] = tree_unflatten(td, [np.asarray(x) + eps * d for x, d in zip(leaves, dirs)])
                minus[i] = tree_unflatten(td, [np.asarray(x) - eps * d for x, d in zip(leaves, dirs)])
                num = (_dot(ct, f(*plus)) - _dot(ct, f(*minus))) / (2 * eps)
                ana = _dot(got, tree_unflatten(td, dirs))
                assert abs(num - ana) <= atol + rtol * abs(num), (
                    f"directional derivative of argument {i}: finite differences {num}, funcgrad {ana}")


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
_COUNTER = [0]


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
    _COUNTER[0] += 1
    fname = f"prim_{prim.name}_{_COUNTER[0]}"
    if prim.name == "getitem":
        idx = call_args[1]
        idx_src = ", ".join(_lit(i) for i in idx) if isinstance(idx, tuple) else _lit(idx)
        body = f"{call_args[0]}[{idx_src}]"
    else:
        parts = [c if isinstance(c, str) and (c.startswith("x") or c.startswith("(x")) else repr(c) for c in call_args]
        parts += [f"{k}={v!r}" for k, v in kwargs.items()]
        body = f"_prim({', '.join(parts)})"
    src = f"def {fname}({', '.join(params)}):\n    return {body}\n"
    filename = f"<funcgrad registry test {fname}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    ns = {"_prim": prim.key, "np": np}
    exec(compile(src, filename, "exec"), ns)
    return ns[fname], values, tuple(diff)
