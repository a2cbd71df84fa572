"""NumPy shape, assembly and contraction functions: values and gradients in every mode.

Each case is a small function calling the NumPy function the way users write it; its
value must equal NumPy's and its gradient central differences (float64), with
``mode="python"``, ``mode="njit"`` (the whole function compiled by Numba, no fallback)
and ``jit=False``. The registry tests (tests/test_primitives.py, tests/test_jvp_rules.py)
cover each primitive's VJP and JVP line on random shapes; here the primitives also run
compiled whole, against their Python, on the same random draws. Autograd, where
installed, is a second oracle.
"""
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import funcgrad
from funcgrad.ops.registry import registry
from funcgrad.kernels import cpu as K
from funcgrad.kernels import cpu_shape
from funcgrad.testing import check_grads
from tests.support import tagged_line

rng = np.random.default_rng(0)
X = rng.normal(size=(3, 4))
Y = rng.normal(size=(4, 5))
Z = rng.normal(size=(3, 3))
V = rng.normal(size=5)
T3 = rng.normal(size=(2, 3, 4))
W = np.arange(12.0).reshape(3, 4)


# ----------------------------------------------------------------------------- the cases
def f_ravel(x):
    return np.sum(np.ravel(x) * np.arange(12.0)) + np.sum(x.ravel() ** 2)


def f_ravel_f(x):
    return np.sum(np.ravel(x, order="F") * np.arange(12.0)) + np.sum(x.flatten("F") * np.arange(12.0) ** 2)


def f_reshape_f(x):
    return np.sum(x.reshape((2, 6), order="F") * np.arange(12.0).reshape(2, 6)) + np.sum(
        np.reshape(x, (6, 2), order="F") ** 3)


def f_reshape_method(x):
    return np.sum(x.reshape(2, 6) * np.arange(12.0).reshape(2, 6)) + np.sum(x.reshape(-1)[::2] ** 2) + np.sum(x.T * 2.0)


def f_squeeze_expand(x):
    y = np.expand_dims(x, 1)
    return np.sum(np.squeeze(y, 1) * W) + np.sum(y.squeeze(axis=1) ** 2)


def f_transpose_axes(t):
    return np.sum(np.transpose(t, (2, 0, 1)) * np.arange(24.0).reshape(4, 2, 3)) + np.sum(t.transpose(1, 0, 2) ** 2)


def f_swapaxes(t):
    return np.sum(np.swapaxes(t, 0, 2) * np.arange(24.0).reshape(4, 3, 2)) + np.sum(t.swapaxes(-1, 1) ** 3)


def f_moveaxis(t):
    return np.sum(np.moveaxis(t, 0, -1) * np.arange(24.0).reshape(3, 4, 2)) + np.sum(
        np.moveaxis(t, (0, 1), (2, 0)) ** 2 * np.arange(24.0).reshape(3, 4, 2))


def f_rollaxis(t):
    return np.sum(np.rollaxis(t, 2) * np.arange(24.0).reshape(4, 2, 3)) + np.sum(np.rollaxis(t, 0, 2) ** 3)


def f_broadcast_to(v):
    return np.sum(np.broadcast_to(v, (3, 5)) * np.arange(15.0).reshape(3, 5))


def f_atleast(x, v):
    a = np.atleast_1d(x[0, 0])
    b, c = np.atleast_2d(v, x)
    d = np.atleast_3d(v)
    return np.sum(a * 3.0) + np.sum(b ** 2) + np.sum(c ** 3) + np.sum(d * np.arange(5.0).reshape(1, 5, 1))


def f_tile(x):
    return np.sum(np.tile(x, (2, 1, 3)) ** 2 * np.arange(72.0).reshape(2, 3, 12)) + np.sum(np.tile(x[0], 2) ** 3)


def f_repeat(x):
    return np.sum(np.repeat(x, 2, axis=1) ** 3) + np.sum(x.repeat(np.array([1, 0, 2]), axis=0) ** 2 * 0.5) + np.sum(
        np.repeat(x, 3) * np.arange(36.0))


def f_roll(x):
    return np.sum(np.roll(x, (1, -2), axis=(0, 1)) * W) + np.sum(np.roll(x, 5) * W ** 2) + np.sum(
        np.roll(x, -1, axis=1) ** 3)


def f_rot90(x):
    return np.sum(np.rot90(x, 3) * W.T) + np.sum(np.rot90(x) ** 3) + np.sum(np.rot90(x, 2, axes=(1, 0)) * W)


def f_flip(x):
    return np.sum(np.flip(x) * W) + np.sum(np.fliplr(x) * W ** 2) + np.sum(np.flipud(x) ** 3) + np.sum(
        np.flip(x, 1) * W)


def f_pad(x, c):
    return (np.sum(np.pad(x, ((1, 2), (0, 1)), mode="reflect") ** 2)
            + np.sum(np.pad(x, 2, mode="edge") ** 3) + np.sum(np.pad(x, (3, 1), "symmetric") ** 2)
            + np.sum(np.pad(x, ((0, 5),), mode="wrap") * 1.5) + np.sum(np.pad(x, 1, constant_values=c) ** 2))


def f_concat_stack(x, v):
    a = np.concatenate([x, x * 2.0], axis=1)
    b = np.stack([x[0], x[1] * v[:4]], axis=1)
    return np.sum(a ** 2) + np.sum(b ** 3)


def f_hvd_stack(x, v):
    return (np.sum(np.hstack([x, x * 2.0]) ** 2) + np.sum(np.vstack((x, x[0])) ** 3) + np.sum(np.hstack((v, v)) ** 2)
            + np.sum(np.dstack((x, x)) ** 2) + np.sum(np.column_stack((v, v * v)) ** 2)
            + np.sum(np.column_stack((x, x[:, 0])) ** 3))


def f_split(x):
    a, b = np.split(x, 2, axis=1)
    parts = np.array_split(x, 3, axis=1)
    return np.sum(a ** 2) + np.sum(b * 3.0) + sum(np.sum(p ** 2) * (i + 1) for i, p in enumerate(parts))


def f_split_indices(x, t):
    h = np.hsplit(x, [1, 3])
    v = np.vsplit(x, [2])
    d = np.dsplit(t, 2)
    return (sum(np.sum(p * p * (i + 1)) for i, p in enumerate(h)) + np.sum(v[0] ** 3) + np.sum(v[1])
            + np.sum(d[1] ** 2))


def f_diag(z, v):
    return np.sum(np.diag(np.diag(z), 1) ** 2) + np.sum(np.diag(v, -2) ** 2) + np.sum(np.diag(z, 1) ** 3)


def f_diagonal_trace(t, z):
    return (np.sum(np.diagonal(t, 1, 1, 2) ** 2) + np.trace(z) ** 2 + z.trace(1) + np.sum(z.diagonal() ** 3)
            + np.sum(np.trace(t, -1, 0, 2) ** 2))


def f_tri(z, t):
    return np.sum(np.tril(z, -1) * z) + np.sum(np.triu(z) ** 2) + np.sum(np.triu(t, 1) ** 2)


def f_kron(x, z):
    return np.sum(np.kron(x, z) ** 2) + np.sum(np.kron(x[0], z[1]) ** 3)


def f_outer_inner(x, y, v):
    return (np.sum(np.inner(x, y.T) ** 2) + np.inner(v, v) + np.sum(np.outer(v, x[0]) ** 2) + np.vdot(x, x * x)
            + np.sum(np.inner(x[0], 2.5) ** 2))


def f_dot_tensordot(x, y, t):
    return np.sum(np.dot(x, y) ** 2) + np.sum(np.tensordot(t, y, axes=1) ** 2) + np.sum(
        np.tensordot(t, x, axes=([1, 2], [0, 1])))


def f_einsum(x, y, z, t):
    return (np.sum(np.einsum("ij,jk->ik", x, y) ** 2) + np.einsum("ii", z) ** 2 + np.sum(np.einsum("ii->i", z) ** 3)
            + np.sum(np.einsum("ij", x) * W) + np.sum(np.einsum("ji", x) ** 2) + np.einsum("i,i", x[0], x[1])
            + np.sum(np.einsum("...ij,...jk->...ik", t, y) ** 2) + np.sum(np.einsum("ijk,ij->k", t, t[:, :, 0]))
            + np.sum(np.einsum("ij,jk,kl->il", z, x, y, optimize=True) ** 2)
            + np.sum(np.einsum(x, [0, 1], y, [1, 2], [0, 2]) ** 3) + np.einsum(z, [0, 0])
            + np.sum(np.einsum("ij,k", z, x[0]) ** 2) + np.sum(np.einsum("b...,b...->...", t, t)))


def f_array_of(a, b, v):
    m = np.array([[a, b], [b * a, 2.0]])
    n = np.array([v, v * a])
    return np.sum(m * m) + np.sum(n ** 3) + np.sum(np.array([a, 1.0, b]) * np.arange(3.0))


def f_full(x, c):
    return np.sum(np.full((3, 4), c) * x) + np.sum(np.full_like(x, c) ** 2) + np.sum(np.zeros_like(x) + x * c) + \
        np.sum(np.ones_like(x) * c)


def f_full_like_shapes(x, c):
    # a constant fill shaped like a differentiated array (no derivative through it); a differentiated fill
    # cast to an integer array's dtype (piecewise constant: no derivative either); a float array made here
    return np.sum(np.where(np.full_like(x, 0.5) * x > 0.1, np.full_like(x, 0.5) * x, x)) + \
        np.sum(np.full_like(np.arange(4), c) * c) + np.sum(np.full_like(np.zeros(4), c) * x[0])


def f_take(x):
    return (np.sum(np.take(x, np.array([0, 2, 2]), axis=1) ** 2) + np.sum(
        np.take_along_axis(x, np.array([[0, 3], [1, 1], [2, 0]]), 1) ** 2)
            + np.sum(np.take_along_axis(x, np.array([[2, 0, 1, 1]]), axis=0) ** 3))


def f_select(x):
    return np.sum(np.select([x > 0.5, x < -0.5], [x ** 2, np.sin(x)], 1.0)) + np.sum(
        np.select([x > 0.0], [x * 3.0]) ** 2)


def f_gradient(x, v):
    gx, gy = np.gradient(x)
    return (np.sum(np.gradient(x, axis=1) ** 2) + np.sum(np.gradient(x, 0.5, axis=0) ** 3) + np.sum(gx * gy)
            + np.sum(np.gradient(v) ** 2) + np.sum(np.gradient(v, edge_order=2) ** 3) + np.sum(
                np.gradient(x, 2.0, 0.5) [1] ** 2))


def f_diff_append(x):
    return np.sum(np.diff(x, 2, axis=1) ** 2) + np.sum(np.diff(x, axis=0) ** 2) + np.sum(np.append(x, x[0]) ** 2) + \
        np.sum(np.append(x, x[:1], axis=0) ** 3)


def f_cross(x, t):
    return np.sum(np.cross(x[:, :3], x[:, 1:]) ** 2) + np.sum(np.cross(t[:, :, 1:], x[:, :3]) ** 2)


def f_put_along(x, v):
    a = x * 1.0
    np.put_along_axis(a, np.array([[0], [2], [2]]), v[0] * 2.0, axis=1)
    np.put_along_axis(a, np.array([[1, 1, 0, 2]]), v[:4] ** 2, 0)
    np.put_along_axis(a, np.array([3, 3, 0]), v[1:4], axis=None)   # a repeated index: the last write stays
    return np.sum(a ** 2) + np.sum(x * 3.0 * a)


def f_loop(x, v):      # a loop: jit="auto" compiles it whole
    acc = np.zeros(4)
    for i in range(3):
        acc = acc + np.roll(x[i], i) * np.flip(v[:4]) + np.einsum("i,i->i", x[i], x[i])
    return np.sum(np.pad(acc, 1, mode="edge") ** 2) + np.sum(np.tile(acc, 2))


def f_casts(x, v):
    y = x.astype("float64") * np.asarray(v, dtype=np.float64)[:4]
    k = x.astype(int)                       # integers: piecewise constant, no derivative
    c = np.array([v[0], v[1] * 2.0], dtype=np.complex128)
    return np.sum(y * k) + np.sum(np.abs(c) ** 2) + np.sum(np.array(x, dtype=float) ** 2)


CASES = {
    "ravel": (f_ravel, (X,)), "ravel_f": (f_ravel_f, (X,)), "reshape_f": (f_reshape_f, (X,)),
    "reshape_method": (f_reshape_method, (X,)), "squeeze_expand": (f_squeeze_expand, (X,)),
    "transpose_axes": (f_transpose_axes, (T3,)), "swapaxes": (f_swapaxes, (T3,)), "moveaxis": (f_moveaxis, (T3,)),
    "rollaxis": (f_rollaxis, (T3,)), "broadcast_to": (f_broadcast_to, (V,)), "atleast": (f_atleast, (X, V)),
    "tile": (f_tile, (X,)), "repeat": (f_repeat, (X,)), "roll": (f_roll, (X,)), "rot90": (f_rot90, (X,)),
    "flip": (f_flip, (X,)), "pad": (f_pad, (X, 0.3)), "concat_stack": (f_concat_stack, (X, V)),
    "hvd_stack": (f_hvd_stack, (X, V)), "split": (f_split, (X,)), "split_indices": (f_split_indices, (X, T3)),
    "diag": (f_diag, (Z, V)), "diagonal_trace": (f_diagonal_trace, (T3, Z)), "tri": (f_tri, (Z, T3)),
    "kron": (f_kron, (X, Z)), "outer_inner": (f_outer_inner, (X, Y, V)),
    "dot_tensordot": (f_dot_tensordot, (X, Y, T3)), "einsum": (f_einsum, (X, Y, Z, T3)),
    "array_of": (f_array_of, (1.5, 0.7, V)), "full": (f_full, (X, 0.3)),
    "full_like_shapes": (f_full_like_shapes, (X, 2.7)), "take": (f_take, (X,)),
    "select": (f_select, (X,)), "gradient": (f_gradient, (X, V)), "diff_append": (f_diff_append, (X,)),
    "cross": (f_cross, (X, T3)), "loop": (f_loop, (X, V)),
    "put_along": (f_put_along, (X, V)), "casts": (f_casts, (X, V)),
}
# jit="njit" compiles the whole function with Numba: every case does, except where noted
NOT_NJIT = {}
MODES = ["python", "njit", "nojit"]


def _kw(mode):
    return {"jit": False} if mode == "nojit" else {"mode": mode}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_value_and_gradient(name, mode):
    fn, args = CASES[name]
    if mode == "njit" and name in NOT_NJIT:
        with pytest.raises(funcgrad.CompileError):
            funcgrad.value_and_grad(fn, argnums=tuple(range(len(args))), **_kw(mode))(*args)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("error", funcgrad.FuncgradWarning)   # no silent fallback
        warnings.simplefilter("ignore", DeprecationWarning)
        v, _ = funcgrad.value_and_grad(fn, argnums=tuple(range(len(args))), **_kw(mode))(*args)
        np.testing.assert_allclose(v, fn(*args), rtol=1e-12, atol=1e-12)
        check_grads(fn, args, argnums=tuple(range(len(args))), **_kw(mode))


def test_auto_compiles_loops_with_these_functions_whole():
    fn, args = CASES["loop"]
    g = funcgrad.grad(fn, argnums=(0, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", funcgrad.FuncgradWarning)
        got = g(*args)
    assert {b.mode for b in g.cache.values()} == {"njit"}     # compiled whole: no Python fallback
    want = funcgrad.grad(fn, argnums=(0, 1), jit=False)(*args)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- every kernel, compiled
REG = registry()
MINE = sorted(n for n, p in REG.items() if p.impl.__module__ in ("funcgrad.ops.registry", "funcgrad.ops.numpy_shape")
              and (p.template is None or p.template.filename.endswith("numpy_shape.py"))
              and (p.sample is not None or p.tested_via is not None))


def _literal(v):
    """Source text for the argument ``v``: a NumPy scalar type (``np.float64``, which hypothesis may draw as the
    dtype argument) or dtype by its name, anything else by its repr."""
    if isinstance(v, type) and issubclass(v, np.generic):
        return f"np.{v.__name__}"
    if isinstance(v, np.dtype):
        return f"np.dtype({v.name!r})"
    return repr(v)


def _kernel_call(name, args, kwargs):
    """A njit-able function ``run(*arrays)`` calling ``K.<name>`` with the non-array arguments as literals."""
    params, parts, values = [], [], []
    for a in args:
        if isinstance(a, (np.ndarray, float)) or isinstance(a, tuple) and a and all(
                isinstance(v, (np.ndarray, float)) for v in a):
            params.append(f"a{len(params)}")
            parts.append(params[-1])
            values.append(a)
        else:
            parts.append(_literal(a))
    parts += [f"{k}={_literal(v)}" for k, v in kwargs.items()]
    ns = {"K": K, "np": np}
    exec(f"def run({', '.join(params)}):\n    return K.{name}({', '.join(parts)})\n", ns)
    return ns["run"], values


@pytest.mark.parametrize("name", MINE)
@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_kernel_compiled_equals_python(name, data):
    """Each kernel's nopython implementation (numba overload) returns what its Python returns."""
    from numba import njit
    prim = REG[name]
    base = prim if prim.sample is not None else REG[funcgrad.ops.registry.lookup(prim.tested_via).name]
    args, kwargs = data.draw(st.composite(lambda draw: base.sample(draw, np.float64))())
    args = tuple(float(a) if isinstance(a, np.ndarray) and a.ndim == 0 and a.dtype.kind == "f" else a for a in args)
    if prim is not base:   # a helper of base's VJP: call it as the adjoint does, on a cotangent of base's result
        y = base.impl(*args, **kwargs)
        g = np.random.default_rng(0).standard_normal(np.shape(y))
        if name == "einsum_tangent":
            args, kwargs = (args[0], args[1], tuple(np.ones_like(np.asarray(o)) * 0.5 for o in args[1])), kwargs
        elif name == "einsum_tangent_vjp":   # base is einsum_tangent: g is the cotangent of its result
            args, kwargs = (g, args[0], args[1], args[2]), kwargs
        elif name == "einsum_tangent2":      # a second tangent of the operands
            args, kwargs = (args[0], args[1], args[2], tuple(np.ones_like(np.asarray(o)) * 0.25 for o in args[1])), kwargs
        elif name == "unjoin":
            args, kwargs = (g, args[0], base.name), {}
        elif name == "einsum_vjp":
            args = (g,) + tuple(args)
        elif name == "written_along_axis":
            args = (g,) + tuple(args[1:])
    if name.startswith("cross") and sum(np.shape(a)[-1:] == (2,) for a in args[-2:]) == 2:
        return   # two arrays of 2-vectors: refused in compiled code (test_cross_of_two_2_vector_arrays)
    run, values = _kernel_call(name, args, kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        want = run(*values)
        got = njit(run)(*values)
    for a, b in zip(got if isinstance(want, (list, tuple)) else [got],
                    want if isinstance(want, (list, tuple)) else [want]):
        assert np.shape(a) == np.shape(b), f"{name}: shape {np.shape(a)} != {np.shape(b)}"
        np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=1e-12, atol=1e-12,
                                   err_msg=f"{name}: compiled vs Python")


# ----------------------------------------------------------------------------- kernels against NumPy
@pytest.mark.parametrize("mode", MODES)
def test_cast_to_float64_keeps_the_inputs_dtype_in_the_gradient(mode):
    # autograd's test_astype: the gradient has the argument's dtype; np.asarray(x, dtype=np.float64) of a
    # float32 x was taken for x itself, so the value was computed in float32
    x = np.array([1.0 + 1e-7, 2.0, 3.0], dtype=np.float32)

    def f(x):
        return np.sum(np.sin(x.astype("float64"))) + np.sum(np.asarray(x, dtype=np.float64) * 1e8)

    v, g = funcgrad.value_and_grad(f, **_kw(mode))(x)
    assert g.dtype == np.float32 and v == f(x)
    np.testing.assert_allclose(g, np.cos(x.astype(np.float64)) + 1e8, rtol=1e-6)


def test_pad_index_maps_match_numpy():
    for mode in ("edge", "reflect", "symmetric", "wrap"):
        for n in (1, 2, 3, 5):
            for b, a in ((0, 0), (1, 2), (5, 7), (11, 1)):
                if mode == "reflect" and n == 1 and (a or b):
                    continue
                x = np.arange(float(n))
                np.testing.assert_array_equal(K.pad(x, (b, a), mode), np.pad(x, (b, a), mode))


@pytest.mark.parametrize("subs,shapes", [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("ii->i", [(3, 3)]), ("ii", [(3, 3)]), ("ba,ac", [(2, 3), (3, 4)]),
    ("Ba,aC", [(2, 3), (3, 4)]), ("...ij,...jk->...ik", [(1, 2, 3), (4, 3, 2)]), ("iij->j", [(2, 2, 3)]),
    ("ij,ij->ij", [(1, 3), (2, 3)]), ("k,nk->", [(5,), (6, 5)]), (",ij->ij", [(), (2, 3)]),
    ("ijk,lji,lli->lki", [(3, 4, 4), (4, 4, 3), (4, 4, 3)]), ("j...k,lj...->lk...", [(2, 2, 2), (2, 2, 2)]),
])
def test_einsum_kernels_match_numpy(subs, shapes):
    from numba import njit
    ops = tuple(rng.normal(size=s) if s else float(rng.normal()) for s in shapes)
    want = np.einsum(subs, *ops)
    np.testing.assert_allclose(K.einsum(subs, ops), want, rtol=1e-12, atol=1e-12)
    src = f"def run(ops):\n    return K.einsum({subs!r}, ops)\n"
    ns = {"K": K}
    exec(src, ns)
    np.testing.assert_allclose(njit(ns["run"])(ops), want, rtol=1e-12, atol=1e-12)
    g = rng.normal(size=np.shape(want))
    src = f"def run(g, ops):\n    return K.einsum_vjp(g, {subs!r}, ops)\n"
    exec(src, ns)
    got_nb = njit(ns["run"])(g, ops)
    got_py = K.einsum_vjp(g, subs, ops)
    for a, b, o in zip(got_nb, got_py, ops):
        assert np.shape(a) == np.shape(o) == np.shape(b)
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


# Two-operand einsums large enough for BLAS run as one batched matmul (kernels/cpu_shape.py's _einsum_bmm), the
# rest through np.einsum: (subscripts, shapes, whether the BLAS path serves them in float64)
BMM_CASES = [
    ("kij,nkj->nki", [(10, 10, 10), (300, 10, 10)], True),          # GMM's, and its two adjoints
    ("nki,nkj->kij", [(300, 10, 10), (300, 10, 10)], True),
    ("nki,kij->nkj", [(300, 10, 10), (10, 10, 10)], True),
    ("ij,jk->ik", [(40, 30), (30, 50)], True), ("ij,jk", [(40, 30), (30, 50)], True),
    ("ji,kj->ik", [(30, 40), (50, 30)], True),                        # transposed operands and output
    ("ijk,kl->li", [(10, 20, 30), (30, 40)], True),                   # a label summed away in one operand only
    ("abc,bd->dc", [(7, 40, 30), (40, 20)], True),
    ("...ij,...jk->...ik", [(3, 8, 20, 30), (8, 30, 10)], True),      # ellipsis, ranks broadcast
    ("bij,bj->bi", [(100, 30, 30), (100, 30)], True),
    ("i,i->", [(20000,), (20000,)], True),                            # a scalar result
    ("bi,bi->b", [(1000, 10), (1000, 10)], False),                    # a batch of dots: c_einsum's loop
    ("ii,ij->j", [(100, 100), (100, 100)], False),                    # a diagonal
    ("ij,jk->ik", [(1, 100), (100, 100)], True),
    ("ij,jk->ik", [(100, 1), (50, 100)], False),                      # j broadcast from size 1
    ("ij,jk->ik", [(16, 16), (16, 16)], False),                       # too small to pay
    ("ij,jk,kl->il", [(30, 30), (30, 30), (30, 30)], False),          # three operands
]


def _ops(shapes, dt):
    ops = [rng.normal(size=s) * 3 for s in shapes]
    if np.dtype(dt).kind == "c":
        ops = [o + 1j * rng.normal(size=o.shape) for o in ops]
    return tuple(o.astype(dt) for o in ops)


@pytest.mark.parametrize("dt", [np.float64, np.float32, np.complex128, np.int64])
@pytest.mark.parametrize("subs,shapes,blas", BMM_CASES)
def test_einsum_blas_path_matches_numpy(subs, shapes, blas, dt):
    ops = _ops(shapes, dt)
    want = np.einsum(subs, *ops)
    assert (cpu_shape._einsum_bmm(subs, ops) is not None) == (blas and np.dtype(dt).kind in "fc")
    got = K.einsum(subs, ops)
    assert type(got) is type(want) and got.dtype == want.dtype and np.shape(got) == np.shape(want)
    tol = 1e-4 if dt == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, float(np.max(np.abs(want)))))
    # the cotangents against the same rule with every contraction through np.einsum
    g = _ops([np.shape(want)], dt)[0]
    got_d = K.einsum_vjp(g, subs, ops)
    old = cpu_shape._BMM_MIN
    try:
        cpu_shape._BMM_MIN = 1 << 62
        cpu_shape._bmm_plan.cache_clear()
        want_d = K.einsum_vjp(g, subs, ops)
    finally:
        cpu_shape._BMM_MIN = old
        cpu_shape._bmm_plan.cache_clear()
    for a, b, o in zip(got_d, want_d, ops):
        assert np.shape(a) == np.shape(b) == np.shape(o) and a.dtype == b.dtype
        assert a.flags.writeable
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1.0, float(np.max(np.abs(b)))))
        assert not np.shares_memory(a, g) and not any(np.shares_memory(a, p) for p in ops)


def test_einsum_blas_path_leaves_numpys_errors_to_numpy():
    a, b = np.zeros((64, 64)), np.zeros((65, 64))
    for subs, ops in [("ij,jk->ik", (a, b)), ("ij,jk->il", (a, a)), ("ij,jk", (a,))]:
        with pytest.raises(ValueError) as want:
            np.einsum(subs, *ops)
        with pytest.raises(ValueError) as got:
            K.einsum(subs, ops)
        assert str(got.value) == str(want.value)


def test_einsum_blas_path_results_are_c_contiguous_where_the_matmul_can_write_them():
    L, c, g = rng.normal(size=(10, 10, 10)), rng.normal(size=(300, 10, 10)), rng.normal(size=(300, 10, 10))
    y = K.einsum("kij,nkj->nki", (L, c))      # the matmul makes (k, n, i): written into (n, k, i) in place
    assert y.flags.c_contiguous
    np.testing.assert_allclose(y, np.einsum("kij,nkj->nki", L, c), rtol=1e-12, atol=1e-12)
    dL, dc = K.einsum_vjp(g, "kij,nkj->nki", (L, c))
    assert dL.flags.c_contiguous and dc.flags.c_contiguous
    np.testing.assert_allclose(dc, np.einsum("nki,kij->nkj", g, L), rtol=1e-12, atol=1e-12)


def test_python_kernels_fast_paths_match_numpy():
    """copy, zeros_like, moveaxis and list_promote take ndarray methods / cached permutations in Python:
    the same results and the same refusals as NumPy's functions."""
    x = rng.normal(size=(3, 4, 5))
    for src, dst in [(0, 1), (0, -1), (-1, 0), ((0, 1), (2, 0)), ((2, 0), (0, 1))]:
        got, want = K.moveaxis(x, src, dst), np.moveaxis(x, src, dst)
        assert got.shape == want.shape and np.array_equal(got, want) and np.shares_memory(got, x)
    for src, dst in [(3, 0), ((0, 0), (1, 2)), ((0, 1), (1,)), (0, 5)]:
        with pytest.raises(Exception) as want:
            np.moveaxis(x, src, dst)
        with pytest.raises(type(want.value)) as got:
            K.moveaxis(x, src, dst)
        assert str(got.value) == str(want.value)
    f = np.asfortranarray(rng.normal(size=(3, 4)))
    for a in (x, x[:, ::2], f, np.arange(6, dtype=np.int32), np.array(2.5)):
        c, z = K.copy(a), K.zeros_like(a)
        assert np.array_equal(c, a) and c.dtype == a.dtype and not np.shares_memory(c, a)
        assert z.shape == a.shape and z.dtype == a.dtype and not np.any(z)
    assert K.copy(f).flags.f_contiguous and K.zeros_like(f).flags.f_contiguous
    assert K.copy(1.5) == 1.5 and K.zeros_like(np.float32(2)).dtype == np.float32
    buf = np.zeros((4, 3))
    assert K.list_promote(buf, np.ones(3)) is buf
    assert K.list_promote(buf, np.ones(3, dtype=complex)).dtype == complex
    assert K.list_promote(np.zeros((4, 3), dtype=np.int64), np.ones(3)).dtype == np.float64
    with pytest.raises(AssertionError, match="holds items of one shape"):   # the transform reports it at the user's line
        K.list_promote(buf, np.ones(4))
    pieces = K.unconcatenate(np.arange(10.0), (np.zeros(3), np.zeros(7)))
    assert [list(p) for p in pieces] == [[0, 1, 2], [3, 4, 5, 6, 7, 8, 9]]


def f_gmm_einsum(L, c):
    y = np.einsum("kij,nkj->nki", L, c)
    return np.sum(np.sin(y) * y) + np.sum(np.einsum("nki,nkj->kij", c, c) * L)


@pytest.mark.parametrize("mode", ["python", "nojit"])
def test_einsum_blas_path_gradient(mode):
    L, c = rng.normal(size=(4, 8, 8)), rng.normal(size=(64, 4, 8))   # 16,384 multiply-adds: the BLAS path
    assert cpu_shape._einsum_bmm("kij,nkj->nki", (L, c)) is not None
    v, g = funcgrad.value_and_grad(f_gmm_einsum, argnums=(0, 1), **_kw(mode))(L, c)
    np.testing.assert_allclose(v, f_gmm_einsum(L, c), rtol=1e-12)
    check_grads(f_gmm_einsum, (L, c), **_kw(mode))


def test_einsum_blas_path_compiled_whole_equals_python():
    L, c = rng.normal(size=(4, 8, 8)), rng.normal(size=(64, 4, 8))
    v, g = funcgrad.value_and_grad(f_gmm_einsum, argnums=(0, 1), mode="python")(L, c)
    vn, gn = funcgrad.value_and_grad(f_gmm_einsum, argnums=(0, 1), mode="njit")(L, c)
    np.testing.assert_allclose(vn, v, rtol=1e-12)
    for a, b in zip(gn, g):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)


# ----------------------------------------------------------------------------- refusals at the user's line
def r_order(x):
    return np.sum(np.ravel(x, order="K"))


def r_split_runtime(x, n):
    return np.sum(np.split(x, n)[0])


def r_pad_mode(x):
    return np.sum(np.pad(x, 1, mode="linear_ramp"))


def r_einsum_bad(x):
    return np.sum(np.einsum("ij,jk->ik", x))


def r_einsum_letters(x):
    return np.sum(np.einsum("i1->i", x))


def r_gradient_rank(x):
    return np.sum(np.gradient(x * 2.0)[0])


def r_hstack_rows(x):
    return np.sum(np.hstack(x * 2.0))   # the rows of a computed array (of an argument: tests/test_autograd_compat.py)


def r_put_along_value(x):
    return np.sum(np.put_along_axis(x, np.array([[0]]), 1.0, 1))


def r_array_dtype(a):
    return np.sum(np.array([a, a], dtype="U8"))


@pytest.mark.parametrize("fn,args,text", [
    (r_order, (X,), "order='K' is not supported"),
    (r_split_runtime, (X, 3), "must be known when the function is transformed"),
    (r_pad_mode, (X,), "linear_ramp"),
    (r_einsum_bad, (X,), "name 2 operands, 1 were given"),
    (r_einsum_letters, (X,), "invalid subscript '1'"),
    (r_gradient_rank, (X,), "pass axis="),
    (r_hstack_rows, (X,), "tuple or list written in the code"),
    (r_array_dtype, (1.5,), "casting to <U8 inside a differentiated function is not supported"),
    (r_put_along_value, (X,), "call it as a statement"),
])
def test_refused_at_the_users_line(fn, args, text):
    with pytest.raises(funcgrad.FuncgradError) as ei:
        funcgrad.grad(fn)(*args)
    msg = str(ei.value)
    assert text in msg, msg
    assert __file__.rsplit("/", 1)[-1] in msg and str(fn.__code__.co_firstlineno + 1) in msg, msg


def test_njit_refuses_what_numba_cannot_compile_clearly():
    def f(x):
        return np.sum(np.pad(x, 1, constant_values=(1.0, 2.0)) ** 2)
    with pytest.raises(funcgrad.CompileError) as ei:
        funcgrad.grad(f, mode="njit")(X)
    assert "test_numpy_shape.py" in str(ei.value)
    check_grads(f, (X,), mode="python")       # runs as Python over the kernels
    check_grads(f, (X,))                      # auto: no loop, so Python


def test_cross_of_two_2_vector_arrays():
    def f(x, y):
        return np.sum(np.cross(x, y) ** 2)
    x, y = rng.normal(size=(4, 2)), rng.normal(size=(4, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        check_grads(f, (x, y), argnums=(0, 1), mode="python")
        with pytest.raises(ValueError, match="2-vectors"):   # compiled: the result has no vector axis
            funcgrad.grad(f, mode="njit")(x, y)


# ----------------------------------------------------------------------------- autograd as a second oracle
def ag_roll_rot(x):
    return np.sum(np.roll(x, 2, axis=1) * W) + np.sum(np.roll(x, -3) ** 2) + np.sum(np.rot90(x, 3) * W.T)


def ag_repeat(x):
    return np.sum(np.repeat(x, 2, axis=1) ** 3) + np.sum(np.repeat(x, 3) * np.arange(36.0))


def ag_einsum(x, y, z, t):
    return (np.sum(np.einsum("ij,jk->ik", x, y) ** 2)
            + np.sum(np.einsum("...ij,...jk->...ik", t, y) ** 2) + np.sum(np.einsum("ijk,ij->k", t, t[:, :, 0]))
            + np.sum(np.einsum("ij,jk,kl->il", z, x, y) ** 2) + np.sum(np.einsum("ij,k", z, x[0]) ** 2)
            + np.sum(np.einsum("k,nk->", x[0], y.T)))


def ag_trace(z, t):
    return np.trace(z) ** 2 + np.sum(np.diagonal(t[:, :, :3], 0, -1, -2) ** 2)   # (autograd: square, last axes only)


def ag_products(x, y, v):
    return np.sum(np.inner(x, y.T) ** 2) + np.inner(v, v) + np.sum(np.outer(v, x[0]) ** 2) + np.sum(
        np.atleast_2d(v) ** 2) + np.sum(np.atleast_3d(x) ** 3)


AG_CASES = {
    "tile": CASES["tile"], "split": CASES["split"], "diag": CASES["diag"], "tri": CASES["tri"],
    "kron": CASES["kron"], "swapaxes": CASES["swapaxes"], "moveaxis": CASES["moveaxis"],
    "hvd_stack": CASES["hvd_stack"], "roll_rot": (ag_roll_rot, (X,)), "repeat": (ag_repeat, (X,)),
    "einsum": (ag_einsum, (X, Y, Z, T3)), "trace": (ag_trace, (Z, T3)), "products": (ag_products, (X, Y, V)),
    "split_indices": CASES["split_indices"], "rollaxis": CASES["rollaxis"],
}
@pytest.mark.parametrize("name", sorted(AG_CASES))
def test_matches_autograd(name):
    ag = pytest.importorskip("autograd", reason="autograd not installed")
    import autograd.numpy as anp
    fn, args = AG_CASES[name]
    g = fn.__globals__
    saved = g["np"]
    try:
        g["np"] = anp
        want = ag.grad(fn, tuple(range(len(args))) if len(args) > 1 else 0)(*args)
    finally:
        g["np"] = saved
    got = funcgrad.grad(fn, argnums=tuple(range(len(args))) if len(args) > 1 else 0)(*args)
    for a, b in zip(got if len(args) > 1 else (got,), want if len(args) > 1 else (want,)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def _full_like_of_unknown_dtype(x, c, n):
    return np.sum(np.full_like(np.arange(n), c) * x[0])   # LINE: full_like


def test_full_like_of_a_differentiated_fill_and_an_array_of_unknown_dtype_is_refused_at_the_line():
    # np.arange(n)'s dtype is not known before it runs (an integer array: NumPy casts the fill to it)
    with pytest.raises(funcgrad.UnsupportedSyntaxError, match="dtype of the array is not known") as e:
        funcgrad.grad(_full_like_of_unknown_dtype, argnums=1)(X, 0.3, 4)
    assert f"test_numpy_shape.py:{tagged_line(__file__, 'full_like')}" in str(e.value)
