"""The GPU backend (funcgrad.kernels.cuda): every kernel against NumPy, gradients against the CPU backend.

Runs on Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1, set by conftest) in CI, on tiny sizes; with
FUNCGRAD_TEST_GPU=1 on a machine with an NVIDIA GPU the same tests run on the hardware.
"""
import os
import sys

import numpy as np
import pytest

import funcgrad
from funcgrad import forward_mode, nn

cuda = pytest.importorskip("numba.cuda", reason="numba.cuda (numba-cuda) is not installed")
from funcgrad.kernels import cuda as K  # noqa: E402

ON_GPU = os.environ.get("FUNCGRAD_TEST_GPU") == "1"
RNG = np.random.default_rng(0)


def put(x):
    return funcgrad.device_put(x)


def get(x):
    return funcgrad.device_get(x)


def close(dev, ref, rtol=1e-12, atol=1e-12):
    got = get(dev) if funcgrad.kernels.base.is_device_array(dev) else dev
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=rtol, atol=atol)
    assert np.asarray(got).shape == np.shape(ref)


def pos(*shape):
    return RNG.uniform(0.5, 2.0, size=shape)


def sym(*shape):
    return RNG.uniform(-0.9, 0.9, size=shape)


# ------------------------------------------------------------------------------------------------- kernels
UNARY = ["exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tan", "tanh", "sinh", "cosh", "arctan",
         "arcsin", "arccos", "arcsinh", "arctanh", "absolute", "negative", "square", "reciprocal", "sign",
         "exp2", "log2", "log10", "deg2rad", "rad2deg"]


@pytest.mark.parametrize("name", UNARY)
def test_unary_matches_numpy(name):
    x = sym(3, 4) if name in ("arcsin", "arccos", "arctanh", "sign", "negative", "absolute") else pos(3, 4)
    close(getattr(K, name)(put(x)), getattr(np, name)(x), rtol=1e-12)


@pytest.mark.parametrize("xs, ys", [((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 1), (1, 4)), ((2, 3, 4), (3, 1)),
                                    ((4,), ())])
@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "divide", "power", "maximum", "minimum",
                                  "arctan2", "hypot", "logaddexp", "greater", "equal"])
def test_binary_broadcasts_as_numpy(name, xs, ys):
    x, y = pos(*xs), pos(*ys)
    if name in ("maximum", "minimum", "greater", "equal") and xs == ys:
        y.flat[::2] = x.flat[::2]    # ties
    yd = put(y) if ys else float(y)
    close(getattr(K, name)(put(x), yd), getattr(np, name)(x, y))
    close(getattr(K, name)(yd, put(x)), getattr(np, name)(y, x))


def test_host_scalars_take_the_arrays_dtype():
    x = pos(5).astype(np.float32)
    r = K.multiply(put(x), 0.1)
    assert r.dtype == np.float32
    close(r, x * np.float32(0.1), rtol=1e-6)
    assert K.add(put(np.arange(3)), 1).dtype == np.int64
    assert K.exp(put(np.arange(3))).dtype == np.float64


def test_where_clip_and_masks():
    x, y = sym(3, 4), sym(4)
    c = x > 0
    close(K.where(put(c), put(x), put(y)), np.where(c, x, y))
    close(K.where(put(c), put(x), 0.0), np.where(c, x, 0.0))
    close(K.clip(put(x), -0.5, 0.5), np.clip(x, -0.5, 0.5))
    close(K.in_range(put(x), -0.5, 0.5), ((x >= -0.5) & (x <= 0.5)).astype(float))
    close(K.mask(K.greater(put(x), 0.0), put(x)), c.astype(float))
    close(K.logical_not(put(c)), ~c)


@pytest.mark.parametrize("op", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("axis, keepdims", [(None, False), (0, False), (1, True), (-1, False), ((0, 2), False),
                                            ((0, 2), True), (None, True)])
def test_reductions_match_numpy(op, axis, keepdims):
    x = pos(3, 4, 5)
    close(getattr(K, op)(put(x), axis=axis, keepdims=keepdims), getattr(np, op)(x, axis=axis, keepdims=keepdims),
          rtol=1e-12)


@pytest.mark.parametrize("op", ["sum", "mean", "max", "min", "prod"])
def test_long_reductions_over_axes_take_a_block_per_result(op):
    # 80 and 40 terms per result, above the simulator's 8 threads a block (a convolution's bias gradient is 6
    # results of 36,864 on a GPU): the block-per-result kernel
    x = 1.0 + 0.01 * sym(2, 5, 40)
    for axis, keepdims in [((0, 2), False), ((0, 2), True), (-1, False)]:
        close(getattr(K, op)(put(x), axis=axis, keepdims=keepdims), getattr(np, op)(x, axis=axis, keepdims=keepdims),
              rtol=1e-12)
    r32 = getattr(K, op)(put(x.astype(np.float32)), axis=(0, 2))
    assert get(r32).dtype == np.float32
    close(r32, getattr(np, op)(x, axis=(0, 2)), rtol=1e-5)
    if op in ("max", "min", "sum"):
        y = x.copy()
        y[1, 3, 23] = np.nan
        got = get(getattr(K, op)(put(y), axis=(0, 2)))
        assert np.isnan(got[3]) and not np.isnan(np.delete(got, 3)).any()


def test_full_reduction_is_a_host_scalar_over_many_blocks():
    x = sym(1003)
    r = K.sum(put(x))
    assert isinstance(r, np.float64)
    assert abs(r - x.sum()) < 1e-12
    y = x.copy()
    y[517] = np.nan
    assert np.isnan(K.max(put(y)))
    assert K.max(put(x)) == x.max() and K.min(put(x)) == x.min()
    assert K.sum(put(x.astype(np.float32))).dtype == np.float32


def test_unbroadcast_and_unreduce():
    g = sym(2, 3, 4)
    for xs in [(2, 3, 4), (3, 4), (4,), (3, 1), (1, 1, 4), (1,)]:
        x = np.zeros(xs)
        close(K.unbroadcast(put(g), put(x)), g.sum(axis=tuple(range(g.ndim - x.ndim))).sum(
            axis=tuple(i for i, n in enumerate(xs) if n == 1), keepdims=True).reshape(xs))
    assert abs(K.unbroadcast(put(g), 1.0) - g.sum()) < 1e-12
    r = sym(2, 4)
    close(K.unreduce(put(r), put(g), 1, False), np.broadcast_to(r[:, None, :], g.shape))
    close(K.unreduce(put(r[:, None, :]), put(g), 1, True), np.broadcast_to(r[:, None, :], g.shape))
    close(K.unreduce(2.5, put(g), None, False), np.full(g.shape, 2.5))
    assert K.reduced_count(put(g), (0, 2)) == 8


@pytest.mark.parametrize("xs, ys", [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)),
                                    ((1, 7), (7, 1)), ((17, 9), (9, 6)),
                                    ((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 3)), ((5, 1, 3, 4), (2, 4, 6)),
                                    ((4,), (2, 4, 3)), ((2, 3, 4), (4,)), ((3, 4), (2, 4, 5)),
                                    ((2, 1, 3, 4), (1, 3, 4, 2))])
def test_matmul_and_its_cotangents(xs, ys):
    x, y = sym(*xs), sym(*ys)
    z = x @ y
    g = sym(*np.shape(z))
    close(K.matmul(put(x), put(y)), z, rtol=1e-12, atol=1e-12)
    if np.ndim(z):
        gd = put(g)
        from funcgrad.kernels import cpu
        close(K.matmul_dx(gd, put(x), put(y)), cpu.matmul_dx(g, x, y), atol=1e-12)
        close(K.matmul_dy(gd, put(x), put(y)), cpu.matmul_dy(g, x, y), atol=1e-12)


@pytest.mark.parametrize("ta, tb", [(False, False), (True, False), (False, True), (True, True)])
def test_the_tiled_gemm_the_simulator_runs(ta, tb):
    a, b = sym(*((9, 7) if ta else (7, 9))), sym(*((5, 9) if tb else (9, 5)))
    for dt, tol in ((np.float64, 1e-12), (np.float32, 1e-5)):
        r = K._gemm(put(a.astype(dt)), put(b.astype(dt)), ta, tb, tiled=True)
        assert r.dtype == dt
        close(r, (a.T if ta else a) @ (b.T if tb else b), rtol=tol, atol=tol)


def test_the_batched_tiled_gemm_the_simulator_runs():
    a, b = sym(2, 3, 5, 7), sym(3, 7, 6)          # broadcast batch axes, K not a multiple of the tile
    for dt, tol in ((np.float64, 1e-12), (np.float32, 1e-5)):
        r = K._mm_nd(put(a.astype(dt)), put(b.astype(dt)), tiled=True)
        assert r.dtype == dt
        close(r, a @ b, rtol=tol, atol=tol)
    with pytest.raises(ValueError, match="not aligned"):
        K.matmul(put(sym(2, 3, 4)), put(sym(2, 5, 3)))


def test_grad_through_a_batched_matmul_on_the_device_equals_the_cpu():
    def f(x, W, v):
        return np.sum(np.tanh(x @ W) @ v)
    x, W, v = sym(2, 3, 4), sym(2, 4, 5), sym(5)
    ref = funcgrad.grad(f, argnums=(0, 1, 2))(x, W, v)
    got = funcgrad.grad(f, argnums=(0, 1, 2))(*put((x, W, v)))
    for a, b in zip(got, ref):
        close(a, b, atol=1e-12)


@pytest.mark.parametrize("xs, ys", [((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 3)), ((3, 4), (2, 4, 5)),
                                    ((4,), (2, 4, 3)), ((2, 3, 4), (4,)), ((2, 1, 3), (5, 3, 2)), ((3, 4), (4,))])
def test_np_dot_of_any_rank_and_its_cotangents(xs, ys):
    from funcgrad.kernels import cpu
    x, y = sym(*xs), sym(*ys)
    z = np.dot(x, y)
    g = sym(*np.shape(z))
    close(K.dot(put(x), put(y)), z, atol=1e-12)
    close(K.dot_dx(put(g), put(x), put(y)), cpu.dot_dx(g, x, y), atol=1e-12)
    close(K.dot_dy(put(g), put(x), put(y)), cpu.dot_dy(g, x, y), atol=1e-12)
    with pytest.raises(ValueError, match="not aligned"):
        K.dot(put(sym(2, 3, 4)), put(sym(2, 5, 3)))


def test_shapes_and_indexing():
    x = sym(2, 3, 4)
    close(K.transpose(put(x)), x.T)
    close(K.transpose(put(x), (1, 0, 2)), x.transpose(1, 0, 2))
    close(K.untranspose(K.transpose(put(x), (2, 0, 1)), (2, 0, 1)), x)
    close(K.reshape(put(x), (6, -1)), x.reshape(6, -1))
    close(K.expand_dims(put(x), 1), x[:, None])
    close(K.squeeze(put(x[:, :1]), 1), x[:, 0])
    close(K.broadcast_to(put(x[:1]), (5, 3, 4)), np.broadcast_to(x[:1], (5, 3, 4)))
    for idx in [1, (slice(None), 2), (0, slice(1, 3)), (Ellipsis, 1), (slice(None, None, 2),),
                (None, 1), (slice(None), None, slice(0, 2))]:
        close(K.getitem(put(x), idx), x[idx])
    assert K.getitem(put(x), (1, 2, 3)) == x[1, 2, 3]


@pytest.mark.parametrize("idx", [np.array([0, 2, 2, 1, 0]), [1, -1, 1], (np.array([0, 1, 1]), np.array([2, 0, 2])),
                                 np.array([[0, 1], [1, 1]]), np.array([True, False, True]),
                                 # mixed with slices, None, Ellipsis, ints (NumPy's placement of the new axes)
                                 (slice(None), np.array([3, 0, 3])), (slice(1, None), np.array([1, 1]), 0),
                                 (np.array([0, 2, 0]), slice(None), np.array([1, 0, 1])),
                                 (Ellipsis, np.array([1, 1, 0])), (None, slice(None), np.array([[2, 2], [0, 1]])),
                                 (np.array([True, False, True]), slice(None), np.array([0, 1]))])
def test_integer_array_indexing_and_its_repeated_index_cotangent(idx):
    from funcgrad.kernels import cpu
    x = sym(3, 4, 2)
    y = x[idx]
    close(K.getitem(put(x), idx), y)
    g = sym(*y.shape)
    close(K.untake(put(g), put(x), idx), cpu.untake(g, x, idx), atol=1e-12)   # repeats accumulate
    if isinstance(idx, np.ndarray):
        close(K.getitem(put(x), put(idx)), y)                                   # a device index array


def test_an_index_out_of_range_is_refused():
    with pytest.raises(IndexError, match="out of bounds"):
        K.getitem(put(sym(3, 2)), np.array([0, 3]))


def gathers(x, table):
    idx = np.array([0, 2, 2, 4, 0, 0])       # repeated indices: the cotangent accumulates (np.add.at)
    rows = table[np.array([1, 1, 0])]
    return np.sum(x[idx] ** 2) + np.sum(rows * rows[::-1])


def test_grad_through_integer_indexing_on_the_device():
    x, table = sym(5), sym(3, 4)
    g0 = funcgrad.grad(gathers, argnums=(0, 1))(x, table)
    g = funcgrad.grad(gathers, argnums=(0, 1))(put(x), put(table))
    for a, b in zip(g, g0):
        close(a, b, atol=1e-12)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_family(axis):
    from funcgrad.kernels import cpu
    x, g = sym(3, 4, 2), sym(3, 4, 2)
    y = cpu.softmax(x, axis)
    ly = cpu.log_softmax(x, axis)
    close(K.softmax(put(x), axis), y)
    close(K.log_softmax(put(x), axis), ly)
    close(K.softmax_grad(put(g), put(y), axis), cpu.softmax_grad(g, y, axis))
    close(K.log_softmax_grad(put(g), put(ly), axis), cpu.log_softmax_grad(g, ly, axis))
    lse = cpu.logsumexp(x, axis)
    close(K.logsumexp(put(x), axis), lse)
    close(K.logsumexp_grad(put(g.sum(axis=axis)), put(x), put(lse), axis),
          cpu.logsumexp_grad(g.sum(axis=axis), x, lse, axis))


def test_elementwise_chains_are_fused_into_one_kernel():
    x, W, b = sym(5, 4), sym(4, 3), sym(3)
    n0 = K.LAUNCHES[0]
    r = K.tanh(K.add(K.matmul(put(x), put(W)), put(b)))      # a Dense layer: one GEMM + one kernel
    assert isinstance(r, K.Lazy) and r.shape == (5, 3)
    close(K.materialize(r), np.tanh(x @ W + b))
    assert K.LAUNCHES[0] - n0 == 2
    h = put(sym(6))
    acc = h
    for i in range(3 * K._MAX_NODES):   # a Python loop: the expression is computed every _MAX_NODES steps
        acc = K.add(K.multiply(acc, 0.5), h)
    ref = get(h)
    want = ref.copy()
    for i in range(3 * K._MAX_NODES):
        want = want * 0.5 + ref
    close(K.materialize(acc), want)
    y = K.multiply(put(sym(4).astype(np.float32)), 3.0)
    assert y.dtype == np.float32 and K.materialize(y).dtype == np.float32


def test_host_array_meeting_a_device_array_is_refused():
    with pytest.raises(funcgrad.DeviceError, match="device_put"):
        K.add(put(sym(3)), sym(3))


# ------------------------------------------------------------------------------------------------- transforms
def mlp_loss(params, x, y):
    h = x
    for W, b in params[:-1]:
        h = np.tanh(h @ W + b)
    W, b = params[-1]
    logits = h @ W + b
    m = np.max(logits, axis=1, keepdims=True)
    lse = np.log(np.sum(np.exp(logits - m), axis=1, keepdims=True)) + m
    return -np.mean(np.sum((logits - lse) * y, axis=1))


def nn_loss(params, x, y):
    (W1, b1), (W2, b2) = params
    h = nn.relu(x @ W1 + b1)
    h = nn.sigmoid(h) * h
    return -np.mean(np.sum(nn.log_softmax(h @ W2 + b2, axis=-1) * y, axis=1)) + 1e-3 * np.sum(W1 ** 2)


def rnn_loss(W, xs, h0):
    h = h0
    for t in range(xs.shape[0]):
        h = np.tanh(h @ W + xs[t])
    return np.sum(h * h)


def _mlp_data(dtype=np.float64):
    params = [(sym(4, 5), sym(5)), (sym(5, 3), sym(3))]
    x = sym(6, 4)
    y = np.eye(3)[[0, 1, 2, 0, 1, 2]]
    return [(W.astype(dtype), b.astype(dtype)) for W, b in params], x.astype(dtype), y.astype(dtype)


MODES = [{"mode": "auto"}, {"mode": "python"}, {"mode": "njit"}, {"jit": False}]


@pytest.mark.parametrize("how", MODES, ids=["auto", "python", "njit", "nojit"])
@pytest.mark.parametrize("fn", [mlp_loss, nn_loss])
def test_gradients_on_the_device_equal_the_cpu(fn, how):
    params, x, y = _mlp_data()
    v0, g0 = funcgrad.value_and_grad(fn, **how)(params, x, y)
    v, g = funcgrad.value_and_grad(fn, **how)(put(params), put(x), put(y))
    assert abs(v - v0) < 1e-12
    leaves = funcgrad.tree_leaves(g)
    assert all(funcgrad.kernels.base.is_device_array(a) for a in leaves)   # no silent trip to the host
    for a, b in zip(leaves, funcgrad.tree_leaves(g0)):
        close(a, b, atol=1e-12)


def test_generated_gpu_code_has_no_operators_on_arrays():
    params, x, y = _mlp_data()
    src = funcgrad.source(funcgrad.grad(mlp_loss), put(params), put(x), put(y))
    assert "K.op_eq(" in src
    body = "\n".join(line.split("#")[0] for line in src.splitlines() if line.startswith("    "))
    for op in (" == ", " < ", " > ", " + ", " * ", " @ "):
        assert op not in body, op


def test_comparisons_and_bit_operators_on_the_device():
    x = sym(7)
    x[3] = 0.1
    f = lambda a: np.sum(np.where(a > 0.1, a, 0.5 * a) + (a <= -0.2) * a ** 2) + np.sum(~(a > 0) * a)  # noqa: E731
    close(funcgrad.grad(f)(put(x)), funcgrad.grad(f)(x))
    assert K.op_eq((3, 4), (3, 4)) is True and K.op_lt(1, 2) is True and K.op_mod(7, 3) == 1
    close(K.op_and(put(x > 0), put(x < 0.5)), (x > 0) & (x < 0.5))
    close(K.op_invert(put(np.arange(4))), ~np.arange(4))
    close(K.op_mod(put(x), 0.3), x % 0.3)
    close(K.op_floordiv(put(x), 0.3), x // 0.3)


def test_float32_gradients_stay_float32():
    params, x, y = _mlp_data(np.float32)
    v0, g0 = funcgrad.value_and_grad(mlp_loss)(params, x, y)
    v, g = funcgrad.value_and_grad(mlp_loss)(put(params), put(x), put(y))
    assert np.asarray(v).dtype == np.float32 and abs(v - v0) < 1e-5
    for a, b in zip(funcgrad.tree_leaves(g), funcgrad.tree_leaves(g0)):
        assert a.dtype == np.float32
        close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("how", MODES, ids=["auto", "python", "njit", "nojit"])
def test_a_python_loop_runs_on_the_host_launching_device_kernels(how):
    W, xs, h0 = sym(3, 3), sym(4, 3), sym(3)
    g0 = funcgrad.grad(rnn_loss, argnums=(0, 2), **how)(W, xs, h0)
    g = funcgrad.grad(rnn_loss, argnums=(0, 2), **how)(put(W), put(xs), put(h0))
    for a, b in zip(g, g0):
        close(a, b, atol=1e-12)


def test_vjp_on_the_device():
    x = sym(3, 4)
    out, f_vjp = funcgrad.vjp(lambda a: np.tanh(a) * 2.0, put(x))
    close(out, np.tanh(x) * 2.0)
    ct = sym(3, 4)
    (gx,) = f_vjp(put(ct))
    close(gx, ct * 2.0 * (1 - np.tanh(x) ** 2))


def test_mixing_host_and_device_arguments_names_the_argument():
    params, x, y = _mlp_data()
    with pytest.raises(funcgrad.DeviceError, match=r"argument 2 \(y\) is a NumPy array"):
        funcgrad.grad(mlp_loss)(put(params), put(x), y)


def uses_inverse(A):
    B = np.linalg.inv(A)      # the line the refusal names
    return np.sum(B)


def test_an_operation_without_a_gpu_kernel_is_refused_at_the_users_line():
    A = np.eye(3) + 0.1 * sym(3, 3)
    with pytest.raises(funcgrad.DeviceError) as e:
        funcgrad.grad(uses_inverse)(put(A))
    msg = str(e.value)
    assert f"{__file__}:" in msg and "np.linalg.inv(A)" in msg and "not available on the cuda backend" in msg


CONST = np.arange(4.0)


def uses_host_constant(x):
    return np.sum(x * CONST)


def test_a_host_constant_in_gpu_code_is_refused_naming_the_line():
    with pytest.raises(funcgrad.DeviceError, match="device_put") as e:
        funcgrad.grad(uses_host_constant)(put(sym(4)))
    assert any("return np.sum(x * CONST)" in n for n in getattr(e.value, "__notes__", []))


def test_device_put_get_round_trip_and_devices():
    tree = {"a": sym(2, 3), "b": (1.5, np.float32(2.0), sym(4).astype(np.float32)), "c": None}
    d = put(tree)
    assert funcgrad.kernels.base.is_device_array(d["a"]) and d["b"][0] == 1.5 and d["c"] is None
    back = get(d)
    np.testing.assert_array_equal(back["a"], tree["a"])
    assert back["b"][2].dtype == np.float32
    assert "cuda:0" in funcgrad.devices()
    with pytest.raises(ValueError, match="unknown device"):
        funcgrad.device_put(tree, "tpu")


@pytest.mark.skipif(not ON_GPU, reason="needs a GPU: the simulator's arrays have no __cuda_array_interface__")
def test_arrays_of_other_libraries_are_taken_without_a_copy():
    cp = pytest.importorskip("cupy", reason="CuPy is not installed")
    x = sym(3, 4)
    g = funcgrad.grad(lambda a: np.sum(np.tanh(a)))(cp.asarray(x))
    close(g, 1 - np.tanh(x) ** 2)


# ------------------------------------------------------------------------------------------------- optimizers
from funcgrad import optim  # noqa: E402

OPTIMIZERS = {
    "sgd": lambda: optim.sgd(0.1),
    "sgd-momentum-wd": lambda: optim.sgd(0.1, momentum=0.9, weight_decay=0.01),
    "nesterov": lambda: optim.sgd(0.1, momentum=0.9, nesterov=True),
    "adam": lambda: optim.adam(0.01),
    "adamw-amsgrad": lambda: optim.adamw(0.01, weight_decay=0.1, amsgrad=True),
    "rmsprop-centered": lambda: optim.rmsprop(0.01, centered=True),
    "adagrad": lambda: optim.adagrad(0.1),
    "clipped-adam": lambda: optim.chain(optim.clip_by_global_norm(0.5), optim.adam(0.01)),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_optimizer_steps_on_the_device_equal_the_cpu(name, dtype):
    params = {"W": sym(3, 2).astype(dtype), "b": sym(2).astype(dtype)}
    opt = OPTIMIZERS[name]()
    p_h, s_h = params, opt.init(params)
    p_d, s_d = put(params), opt.init(put(params))
    for _ in range(3):   # (the gradients of the MLP on the device equal the CPU's: tested above)
        g = {"W": sym(3, 2).astype(dtype), "b": sym(2).astype(dtype)}
        u, s_h = opt.update(g, s_h, p_h)
        p_h = optim.apply_updates(p_h, u)
        ud, s_d = opt.update(put(g), s_d, p_d)
        p_d = optim.apply_updates(p_d, ud)
    tol = 1e-10 if dtype == np.float64 else 1e-5
    for a, b in zip(funcgrad.tree_leaves(p_d), funcgrad.tree_leaves(p_h)):
        assert funcgrad.kernels.base.is_device_array(a) and not isinstance(a, K.Lazy)
        assert a.dtype == dtype
        close(a, b, rtol=tol, atol=tol)
    for a in funcgrad.tree_leaves(s_d):
        assert not isinstance(a, np.ndarray) or a.ndim == 0     # the state stays on the device


def test_an_optimizer_refuses_host_gradients_for_device_parameters():
    params, x, y = _mlp_data()
    opt = optim.adam(0.01)
    state = opt.init(put(params))
    g = funcgrad.grad(mlp_loss)(params, x, y)
    with pytest.raises(TypeError, match="host memory"):
        opt.update(g, state, put(params))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("labels", ["int", "prob"])
def test_cross_entropy_and_its_cotangents(reduction, labels):
    from funcgrad.kernels import cpu
    z = sym(5, 4)
    y = np.array([0, 3, 1, 1, 2]) if labels == "int" else RNG.dirichlet(np.ones(4), size=5)
    g = 0.7 if reduction != "none" else sym(5)
    close(K.cross_entropy(put(z), put(y), reduction), cpu.cross_entropy(z, y, reduction))
    gd = put(g) if reduction == "none" else g
    close(K.cross_entropy_grad(gd, put(z), put(y), reduction), cpu.cross_entropy_grad(g, z, y, reduction))
    close(K.cross_entropy_grad_target(gd, put(z), put(y), reduction),
          cpu.cross_entropy_grad_target(g, z, y, reduction))


def test_cross_entropy_refuses_a_label_out_of_range():
    with pytest.raises(IndexError, match="out of range"):
        K.cross_entropy(put(sym(3, 4)), put(np.array([0, 4, 1])))


def ce_loss(params, x, labels):
    W, b = params
    return nn.cross_entropy(x @ W + b, labels)


def test_grad_of_an_nn_loss_with_integer_labels_on_the_device():
    params, x = (sym(4, 3), sym(3)), sym(6, 4)
    labels = np.array([0, 1, 2, 2, 1, 0])
    g0 = funcgrad.grad(ce_loss)(params, x, labels)
    g = funcgrad.grad(ce_loss)(put(params), put(x), put(labels))
    for a, b in zip(g, g0):
        close(a, b, atol=1e-12)


@pytest.mark.parametrize("stride, padding, dilation", [(1, 0, 1), (2, 1, 1), ((1, 2), (0, 1), (2, 1))])
def test_conv2d_and_its_cotangents(stride, padding, dilation):
    from funcgrad.kernels import cpu
    # small: the weight gradient runs a simulated block per weight (2 * 2 * 3 * 2 of them, a few seconds)
    x, w, b = sym(2, 2, 6, 5), sym(2, 2, 3, 2), sym(2)
    y = cpu.conv2d(x, w, b, stride, padding, dilation)
    close(K.conv2d(put(x), put(w), put(b), stride, padding, dilation), y, atol=1e-12)
    close(K.conv2d(put(x), put(w), None, stride, padding, dilation), cpu.conv2d(x, w, None, stride, padding, dilation),
          atol=1e-12)
    dy = sym(*y.shape)
    close(K.conv2d_input_grad(put(dy), put(w), x.shape, stride, padding, dilation),
          cpu.conv2d_input_grad(dy, w, x.shape, stride, padding, dilation), atol=1e-12)
    close(K.conv2d_weight_grad(put(dy), put(x), w.shape, stride, padding, dilation),
          cpu.conv2d_weight_grad(dy, x, w.shape, stride, padding, dilation), atol=1e-12)
    close(K.channel_sum(put(dy)), cpu.channel_sum(dy), atol=1e-12)
    close(K.channel_broadcast(put(b), y.shape), cpu.channel_broadcast(b, y.shape))
    if stride != 1:
        return
    # float32 (once): the weight gradient's block sums accumulate in float64 and are stored as float32
    g32 = K.conv2d_weight_grad(put(dy.astype(np.float32)), put(x.astype(np.float32)), w.shape, stride, padding,
                               dilation)
    assert get(g32).dtype == np.float32
    close(g32, cpu.conv2d_weight_grad(dy, x, w.shape, stride, padding, dilation), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel_size, stride, padding", [(2, None, 0), (3, 2, 1), ((2, 3), (1, 2), (1, 0))])
def test_pools_and_their_cotangents(kernel_size, stride, padding):
    from funcgrad.kernels import cpu
    x = sym(2, 2, 6, 7)
    x[0, 0, :2, :2] = 0.5   # a tie: the first maximum takes the cotangent
    y = cpu.max_pool2d(x, kernel_size, stride, padding)
    close(K.max_pool2d(put(x), kernel_size, stride, padding), y)
    dy = sym(*y.shape)
    close(K.max_pool2d_grad(put(dy), put(x), kernel_size, stride, padding),
          cpu.max_pool2d_grad(dy, x, kernel_size, stride, padding), atol=1e-12)
    g = sym(*x.shape)
    close(K.max_pool2d_select(put(g), put(x), kernel_size, stride, padding),
          cpu.max_pool2d_select(g, x, kernel_size, stride, padding))
    ya = cpu.avg_pool2d(x, kernel_size, stride, padding)
    close(K.avg_pool2d(put(x), kernel_size, stride, padding), ya, atol=1e-12)
    dya = sym(*ya.shape)
    close(K.avg_pool2d_grad(put(dya), x.shape, kernel_size, stride, padding),
          cpu.avg_pool2d_grad(dya, x.shape, kernel_size, stride, padding), atol=1e-12)


def lenet_like(params, x, labels):
    h = nn.relu(nn.conv2d(x, params["w1"], params["b1"], padding=1))
    h = nn.max_pool2d(h, 2)
    h = nn.avg_pool2d(nn.conv2d(h, params["w2"], params["b2"]), 2)
    h = h.reshape(h.shape[0], -1)
    return nn.cross_entropy(h @ params["w3"] + params["b3"], labels)


def test_grad_of_a_small_convnet_on_the_device():
    params = {"w1": sym(3, 1, 3, 3), "b1": sym(3), "w2": sym(2, 3, 3, 3), "b2": sym(2), "w3": sym(2, 3),
              "b3": sym(3)}
    x, labels = sym(2, 1, 8, 8), np.array([0, 2])
    g0 = funcgrad.grad(lenet_like)(params, x, labels)
    g = funcgrad.grad(lenet_like)(put(params), put(x), put(labels))
    for k in params:
        close(g[k], g0[k], atol=1e-12)


def writes_in_place(x):
    y = x * 1.0
    y[0] = 2.0
    y[1:3] = y[1:3] * x[0]
    y[np.array([3, 4])] += 1.5 * x[1]
    return np.sum(y * x)


def _code_of(src):
    """Generated source without its comments (which quote the user's line)."""
    return "\n".join(line.split("#")[0] for line in src.splitlines())


def test_in_place_writes_on_the_device():
    x = sym(6)
    g = funcgrad.grad(writes_in_place)
    close(g(put(x)), funcgrad.grad(writes_in_place)(x), atol=1e-12)
    code = _code_of(funcgrad.source(g, put(x)))   # what a write overwrites is saved by the kernel's gather
    assert "K.copy(y[_" not in code and "K.copy(K.getitem(y, _" in code
    with pytest.raises(funcgrad.DeviceError, match="repeats an element"):
        K.index_put(put(sym(4)), np.array([1, 1]), 0.0)


# ------------------------------------------------------------------------------------------------- toolkit I/O
def test_checkpoints_of_device_parameters_copy_to_the_host_and_back(tmp_path):
    from funcgrad import checkpoint
    params = {"W": sym(3, 2), "b": np.float32(0.5), "layers": [sym(2), 7]}
    dev = put(params)
    path = tmp_path / "p.npz"
    checkpoint.save(path, dev, metadata={"step": 3})
    host = checkpoint.load(path)                        # no template: host arrays
    assert isinstance(host["W"], np.ndarray) and isinstance(host["layers"][0], np.ndarray)
    np.testing.assert_array_equal(host["W"], params["W"])
    back = checkpoint.load(path, like=dev)              # the template's GPU leaves go back to the GPU
    assert funcgrad.kernels.base.is_device_array(back["W"])
    assert funcgrad.kernels.base.is_device_array(back["layers"][0])
    close(back["W"], params["W"], 0, 0)
    assert back["layers"][1] == 7 and back["b"] == np.float32(0.5)
    everywhere = checkpoint.load(path, device="cuda")
    assert funcgrad.kernels.base.is_device_array(everywhere["layers"][0])
    assert not funcgrad.kernels.base.is_device_array(checkpoint.load(path, like=dev, device="cpu")["W"])
    with pytest.raises(ValueError, match="unknown device"):
        checkpoint.load(path, device="gpu0")


@pytest.mark.parametrize("prefetch", [0, 2])
def test_the_data_loader_puts_batches_on_the_device(prefetch):
    from funcgrad.data import ArrayDataset, DataLoader
    X, y = sym(10, 3), np.arange(10)
    ref = list(DataLoader(ArrayDataset(X, y), batch_size=4, shuffle=True, seed=1, prefetch=prefetch))
    got = list(DataLoader(ArrayDataset(X, y), batch_size=4, shuffle=True, seed=1, prefetch=prefetch,
                          device="cuda"))
    assert len(got) == len(ref) == 3
    for (gx, gy), (rx, ry) in zip(got, ref):
        assert funcgrad.kernels.base.is_device_array(gx) and funcgrad.kernels.base.is_device_array(gy)
        close(gx, rx, 0, 0)
        close(gy, ry, 0, 0)
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        DataLoader(ArrayDataset(X, y), device="tpu")


def test_grad_through_integer_arrays_mixed_with_slices_on_the_device_equals_the_cpu():
    cols, rows = np.array([2, 0, 2]), np.array([1, 1])

    def f(x):
        return np.sum(np.sin(x[:, cols]) ** 2) + np.sum(x[rows, 1:] * x[0, 1:])
    x = sym(3, 4)
    g = funcgrad.grad(f)
    close(g(put(x)), funcgrad.grad(f)(x), atol=1e-12)
    # numba's device arrays index with ints and slices only (the simulator's, NumPy underneath, with anything):
    # a gather must be the kernel's, never indexing syntax in the generated code
    code = _code_of(funcgrad.source(g, put(x)))
    assert "x[:, cols]" not in code and "x[rows" not in code
    assert "K.getitem(x, (slice(None, None, None), cols))" in code


def test_full_jacobians_and_host_only_transforms_refuse_gpu_arrays_in_words():
    def f(x):
        return np.sum(np.tanh(x) ** 2)

    def g(x):
        return np.tanh(x) * 2.0
    x = put(sym(3))
    for call in (lambda: funcgrad.jacfwd(g)(x), lambda: funcgrad.jacrev(g)(x), lambda: funcgrad.hessian(f)(x),
                 lambda: funcgrad.testing.check_grads(f, (x,))):
        with pytest.raises(funcgrad.DeviceError, match="not available on the GPU backend yet"):
            call()


def _fwd_f(x, W):
    return np.sum(np.exp(np.tanh(x @ W)), axis=1)


def _fwd_loss(params, x):
    (W1, b1), (W2, b2) = params
    h = nn.relu(x @ W1 + b1)
    return np.mean(nn.logsumexp(h @ W2 + b2, axis=-1) ** 2)


def test_jvp_and_linearize_on_the_device_equal_the_cpu():
    x, W, v, vW = sym(3, 4), sym(4, 5), sym(3, 4), sym(4, 5)
    y, t = funcgrad.jvp(_fwd_f, (x, W), (v, vW))
    yd, td = funcgrad.jvp(_fwd_f, (put(x), put(W)), (put(v), put(vW)))
    assert K.is_device_array(yd) and K.is_device_array(td)   # no round trip to the host
    close(yd, y, atol=1e-12)
    close(td, t, atol=1e-12)
    # against central differences too
    eps = 1e-6
    fd = (_fwd_f(x + eps * v, W + eps * vW) - _fwd_f(x - eps * v, W - eps * vW)) / (2 * eps)
    close(td, fd, rtol=1e-6, atol=1e-7)
    y0, lin = funcgrad.linearize(_fwd_f, put(x), put(W))
    close(y0, y, atol=1e-12)
    close(lin(put(v), put(vW)), t, atol=1e-12)
    # float32 arguments: float32 results, a float64 tangent is cast to the primal's dtype on the device
    _, t32 = funcgrad.jvp(_fwd_f, (put(x.astype(np.float32)), put(W.astype(np.float32))), (put(v), put(vW)))
    assert t32.dtype == np.float32
    close(t32, t, rtol=1e-4, atol=1e-5)


def test_jvp_refuses_a_tangent_on_the_other_side_in_words():
    x = sym(3, 4)
    with pytest.raises(funcgrad.DeviceError, match="argument 0 is a GPU array but its tangent is a host value"):
        funcgrad.jvp(np.tanh, (put(x),), (x,))
    with pytest.raises(funcgrad.DeviceError, match="argument 0 is a host array but its tangent is a GPU value"):
        funcgrad.jvp(np.tanh, (x,), (put(x),))


def test_hvp_and_second_order_on_the_device_equal_the_cpu():
    rng = np.random.default_rng(5)
    p = [(rng.standard_normal((4, 6)), rng.standard_normal(6)), (rng.standard_normal((6, 2)), rng.standard_normal(2))]
    v = [(rng.standard_normal((4, 6)), rng.standard_normal(6)), (rng.standard_normal((6, 2)), rng.standard_normal(2))]
    x = rng.standard_normal((5, 4))
    ref = funcgrad.hvp(_fwd_loss, (p, x), (v, np.zeros_like(x)))
    got = funcgrad.hvp(_fwd_loss, (put(p), put(x)), (put(v), put(np.zeros_like(x))))
    for (a, b), (c, d) in zip(get(got[0]), ref[0]):
        close(a, c, rtol=1e-10, atol=1e-12)
        close(b, d, rtol=1e-10, atol=1e-12)
    assert K.is_device_array(got[0][0][0])
    # vjp of jvp, and jvp of jvp, of an array-valued function
    xs, ws, vs, vws, cs = sym(3, 4), sym(4, 5), sym(3, 4), sym(4, 5), sym(3)
    r = forward_mode.vjp_of_jvp(_fwd_f, (xs, ws), (vs, vws), [cs])
    d = forward_mode.vjp_of_jvp(_fwd_f, (put(xs), put(ws)), (put(vs), put(vws)), [put(cs)])
    for a, b in zip(d, r):
        for u, w in zip(a, b):
            close(u, w, rtol=1e-10, atol=1e-12)


def test_grad_of_grad_on_the_device_equals_the_cpu():
    def f(x):
        return np.sum(np.tanh(x) ** 3)

    def first(y):
        return funcgrad.grad(f)(y)[0] * 2.0
    x = sym(3)
    close(funcgrad.grad(first)(put(x)), funcgrad.grad(first)(x), atol=1e-12)


# ------------------------------------------------------------------------------------------------- nn on the device
_X, _T = sym(4, 3), RNG.uniform(0.1, 0.9, (4, 3))
_LAB = np.array([0, 2, 1, 2])


def _losses(reduction):
    r = reduction
    return {
        "mse": (lambda x, t: nn.mse(x, t, r), (_X, _T)),
        "huber": (lambda x, t: nn.huber(x * 3.0, t, 0.4, r), (_X, _T)),
        "nll": (lambda x, l: nn.nll(nn.log_softmax(x), l, r), (_X, _LAB)),
        "bce": (lambda x, t: nn.binary_cross_entropy(nn.sigmoid(x), t, r), (_X, _T)),
        "bce_target": (lambda t, x: nn.binary_cross_entropy(nn.sigmoid(x), t, r), (_T, _X)),
        "bce_logits": (lambda x, t: nn.binary_cross_entropy_with_logits(x * 4.0, t, r), (_X, _T)),
        "bce_logits_target": (lambda t, x: nn.binary_cross_entropy_with_logits(x, t * t, r), (_T, _X)),
    }


@pytest.mark.parametrize("name, reduction", [(n, r) for n in ["mse", "huber", "nll", "bce", "bce_target", "bce_logits",
                                                                "bce_logits_target"] for r in ["mean", "none"]]
                         + [("mse", "sum"), ("nll", "sum")])
def test_nn_losses_and_their_gradients_on_the_device(name, reduction):
    f, args = _losses(reduction)[name]

    def loss(a, b):
        return np.sum(np.sin(f(a, b)))    # "none": a different cotangent per element
    v, g = funcgrad.value_and_grad(loss)(*put(args))
    v_ref, g_ref = funcgrad.value_and_grad(loss)(*args)
    assert abs(v - v_ref) < 1e-12
    close(g, g_ref, atol=1e-12)


@pytest.mark.parametrize("name", ["elu", "gelu", "leaky_relu", "layer_norm", "dropout", "batch_norm",
                                  "batch_norm_eval"])
def test_nn_activations_and_norms_on_the_device(name):
    x, g, b = sym(3, 2, 2, 3), RNG.uniform(0.5, 1.5, 3), sym(3)
    rm, rv = sym(2), RNG.uniform(0.5, 1.5, 2)
    fs = {
        "elu": lambda x, g, b: np.sum(nn.elu(x * 2.0, 0.7) * b),
        "gelu": lambda x, g, b: np.sum(nn.gelu(x * 2.0) ** 2 * b),
        "leaky_relu": lambda x, g, b: np.sum(nn.leaky_relu(x, 0.2) ** 2 * b),
        "layer_norm": lambda x, g, b: np.sum(np.sin(nn.layer_norm(x, g, b))),
        "dropout": lambda x, g, b: np.sum(nn.dropout(x * b, 0.5, 7) ** 2),
        "batch_norm": lambda x, g, b: np.sum(np.sin(nn.batch_norm(x[:, :2], g[:2], b[:2], rm, rv))),
        "batch_norm_eval": lambda x, g, b: np.sum(np.sin(nn.batch_norm(x[:, :2], g[:2], b[:2], rm, rv, False))),
    }
    f = fs[name]
    args = (x, g, b)
    dev = put(args)
    if name.startswith("batch_norm"):
        rm, rv = put((rm, rv))
        got = funcgrad.grad(f, argnums=(0, 1, 2))(*dev)
        rm, rv = get((rm, rv))
    else:
        got = funcgrad.grad(f, argnums=(0, 1, 2))(*dev)
    for a, r in zip(got, funcgrad.grad(f, argnums=(0, 1, 2))(*args)):
        close(a, r, atol=1e-11)


def test_batch_norm_stats_and_embedding_on_the_device():
    from funcgrad.kernels import cpu_nn
    x, rm, rv = sym(3, 2, 4), sym(2), RNG.uniform(0.5, 1.5, 2)
    close(K.batch_norm_stats(put(x), put(rm), put(rv), 0.3), cpu_nn.batch_norm_stats(x, rm, rv, 0.3), atol=1e-12)
    table, ids = sym(5, 3), np.array([[1, 0], [3, 1]])

    def f(t):
        return np.sum(np.sin(nn.embedding(t, ids)))
    close(funcgrad.grad(f)(put(table)), funcgrad.grad(f)(table), atol=1e-12)   # id 1 twice: accumulated
    with pytest.raises(IndexError, match="out of range"):
        K.embedding(put(table), np.array([0, 5]))
    with pytest.raises(IndexError, match="label out of range"):
        K.nll(put(_X), np.array([0, 3, 1, 1]))


def test_every_layer_of_a_serial_model_trains_on_the_device_as_on_the_cpu():
    init, apply = nn.serial(nn.Conv2D(2, 3, padding=1), nn.BatchNorm(), nn.Relu, nn.MaxPool2D(2), nn.Flatten,
                            nn.Dense(4), nn.Tanh, nn.Dropout(0.3), nn.Dense(3))
    _, params = init(0, (2, 1, 4, 4))            # the initializers make host arrays; device_put moves them
    x, y = sym(2, 1, 4, 4), np.array([0, 2])

    def loss(p, x, y):
        return nn.cross_entropy(apply(p, x, train=True, seed=3), y)
    v, g = funcgrad.value_and_grad(loss)(*put((params, x, y)))
    v_ref, g_ref = funcgrad.value_and_grad(loss)(params, x, y)
    assert abs(v - v_ref) < 1e-12
    leaves, ref = funcgrad.tree.tree_leaves(g), funcgrad.tree.tree_leaves(g_ref)
    assert len(leaves) == len(ref) == 10
    for a, b in zip(leaves, ref):
        assert funcgrad.kernels.base.is_device_array(a)
        close(a, b, atol=1e-12)


@pytest.mark.skipif(K.SIM, reason="the simulator launches through numba only (there is no cuda.core launch to call)")
def test_kernels_launched_by_the_fast_path_agree_with_numbas_launches():
    # funcgrad packs a kernel's arguments itself after the first launch (kernels/cuda_launch.py); the same
    # work launched through numba's dispatcher must give the same numbers, and the fast path must be taken
    from funcgrad.kernels import cuda_launch
    x, y = sym(3000), sym(40, 30)

    def work():
        a, b = put(x), put(y)
        return [get(K.materialize(K.add(K.multiply(a, 2.0), K.exp(a)))), get(K.sum(b, axis=0)),
                get(K.sum(b)), get(K.getitem(b, (np.array([3, 1, 3]),)))]
    work()
    before = cuda_launch.STATS["fast"]
    fast = work()
    assert cuda_launch.STATS["fast"] > before
    cuda_launch._ON[0] = False
    try:
        slow = work()
    finally:
        cuda_launch._ON[0] = True
    for f, s in zip(fast, slow):
        close(f, s, 0, 0)
    close(fast[0], 2 * x + np.exp(x))
    close(fast[1], y.sum(axis=0))
