"""Elementwise fusion (funcgrad/transform/fuse.py): runs of vector statements of compiled code as one loop.

Code compiled whole is specialized on the first call's shapes: consecutive statements over float64 vectors
of one known length become one loop over the elements (the generated source says ``# fused: ...``), with
tape reads moved before the loop and tape appends after it. Each test checks the value and the gradient
against Python and central differences, and reads the generated source to see whether a loop was made."""
import re

import numpy as np
import pytest

import funcgrad
from funcgrad.testing import numerical_vjp
from tests.support import assert_value_and_gradient

FUSED = "# fused:"


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _cell(w, b, h, c, x):
    gates = np.concatenate((x, h, x, h)) * w + b
    n = h.shape[0]
    f = _sigmoid(gates[0:n])
    i = _sigmoid(gates[n:2 * n])
    o = _sigmoid(gates[2 * n:3 * n])
    g = np.tanh(gates[3 * n:4 * n])
    c = c * f + i * g
    h = o * np.tanh(c)
    return h, c


def lstm(params, state, seq):
    # ADBench's diagonal LSTM: per time step, elementwise gates of vectors longer than scalarize takes
    h, c = state[0], state[1]
    total = 0.0
    for t in range(seq.shape[0]):
        h, c = _cell(params[0], params[1], h, c, seq[t])
        total = total + np.sum(h * seq[t]) - np.log(np.sum(np.exp(h)))
    return total / seq.shape[0]


def _lstm_inputs(n=24, steps=4, seed=0):
    rs = np.random.RandomState(seed)
    return rs.rand(2, 4 * n) * 2 - 1, rs.rand(2, n) * 2 - 1, rs.rand(steps, n) * 2 - 1


@pytest.mark.parametrize("jit", ["njit", "auto", "python", False])
def test_a_recurrent_cell_is_right_in_every_mode(jit):
    assert_value_and_gradient(lstm, _lstm_inputs(), (0, 1, 2), jit=jit)


def test_compiled_code_fuses_the_cell_and_its_adjoint_into_loops():
    g = funcgrad.value_and_grad(lstm, argnums=(0, 1), jit="njit")
    src = funcgrad.source(g, *_lstm_inputs())
    assert src.count(FUSED) >= 4, src
    # the forward cell: its gate arithmetic as one loop over the 24 elements of a gate
    assert "one loop (24 elements at the first call)" in src
    # the tape of a fused value is still filled (the adjoint reads it) and read back
    assert "_tape_" in src


def test_code_fused_for_one_length_runs_other_lengths_right():
    g = funcgrad.value_and_grad(lstm, argnums=(0, 1, 2), jit="njit")
    a = _lstm_inputs(n=24)
    v, _ = g(*a)
    np.testing.assert_allclose(v, lstm(*a), rtol=1e-12)
    for n, steps in ((7, 3), (24, 6), (40, 2)):
        args = _lstm_inputs(n=n, steps=steps, seed=n)
        v, grads = g(*args)
        np.testing.assert_allclose(v, lstm(*args), rtol=1e-12)
        for k in range(3):
            np.testing.assert_allclose(grads[k], numerical_vjp(lstm, args, k, 1.0, 1e-6), rtol=1e-5, atol=1e-7)
    # the loops run over the lengths the arrays have: other lengths keep the fused code
    assert FUSED in funcgrad.source(g)


def test_arrays_of_equal_length_at_the_first_call_and_broadcast_later_run_the_code_for_any_shape():
    rs = np.random.RandomState(8)
    g = funcgrad.value_and_grad(broadcasts, argnums=(0, 1, 2), jit="njit")
    x, a = rs.rand(20), rs.rand(20)
    v, _ = g(x, 0.7, a)
    np.testing.assert_allclose(v, broadcasts(x, 0.7, a), rtol=1e-12)
    assert FUSED in funcgrad.source(g)
    args = (rs.rand(20), 0.3, rs.rand(1))   # a now broadcasts: the loop cannot, the code for any shape runs
    v, grads = g(*args)
    np.testing.assert_allclose(v, broadcasts(*args), rtol=1e-12)
    for k in range(3):
        np.testing.assert_allclose(grads[k], numerical_vjp(broadcasts, args, k, 1.0, 1e-6), rtol=1e-5, atol=1e-7)


def lstm_rows(params, state, seq):
    # two layers writing their rows of the next state in place, as ADBench's LSTM does
    s = state.copy()
    total = 0.0
    for t in range(seq.shape[0]):
        x = seq[t]
        nxt = np.empty_like(s)
        for i in range(s.shape[0] // 2):
            h, c = _cell(params[2 * i], params[2 * i + 1], s[2 * i], s[2 * i + 1], x)
            nxt[2 * i] = h
            nxt[2 * i + 1] = c
            x = h
        s = nxt
        total = total + np.sum(x * seq[t])
    return total


def _lstm_rows_inputs(n=24, steps=3, seed=1):
    rs = np.random.RandomState(seed)
    return rs.rand(4, 4 * n) * 2 - 1, rs.rand(4, n) * 2 - 1, rs.rand(steps, n) * 2 - 1


@pytest.mark.parametrize("jit", ["njit", "auto"])
def test_a_cell_writing_rows_of_its_state_is_right_and_its_adjoint_fused(jit):
    args = _lstm_rows_inputs()
    assert_value_and_gradient(lstm_rows, args, (0, 1), jit=jit)
    src = funcgrad.source(funcgrad.value_and_grad(lstm_rows, argnums=(0, 1), jit=jit), *args)
    adjoint = src.split("# reversed:", 1)[1]
    # the cell's adjoint reads the cotangents of the rows written (their lengths known): one long loop
    assert max(int(n) for n in re.findall(r"# fused: (\d+) elementwise", adjoint)) >= 20, adjoint


def rebinds(x, y, k):
    # x read, then rebound, then read again: the loop must read the old x where the code did
    for _ in range(k):
        z = x * y + 1.0
        x = np.sin(z) * x
        y = y - 0.5 * x
    return np.sum(x * y)


@pytest.mark.parametrize("jit", ["njit", "auto"])
def test_names_rebound_inside_a_run_are_read_as_the_code_reads_them(jit):
    rs = np.random.RandomState(1)
    args = (rs.rand(20), rs.rand(20), 3)
    assert_value_and_gradient(rebinds, args, (0, 1), jit=jit)
    assert FUSED in funcgrad.source(funcgrad.value_and_grad(rebinds, argnums=(0, 1), jit=jit), *args)


def carried_to_the_next_iteration(x, n):
    # a is read only by the next iteration's first line (not after the loop): its array must outlive the loop
    a = x * 1.0
    s = 0.0
    for i in range(n):
        b = a * 2.0 + x
        a = np.sin(b) * 0.5
        s = s + np.sum(b * b)
    return s


@pytest.mark.parametrize("jit", ["njit", "auto"])
def test_a_value_read_only_by_the_next_iteration_is_kept(jit):
    rs = np.random.RandomState(3)
    args = (rs.rand(20), 4)
    assert_value_and_gradient(carried_to_the_next_iteration, args, 0, jit=jit)
    f = funcgrad.jit(carried_to_the_next_iteration)
    np.testing.assert_allclose(f(*args), carried_to_the_next_iteration(*args), rtol=1e-13)
    assert FUSED in funcgrad.source(f, *args)


def written_in_place(x, w):
    total = 0.0
    for i in range(3):
        y = x * w + 1.0
        y[0] = 2.0 * y[1]          # y is written in place: never fused
        z = np.exp(y) * w
        total = total + np.sum(z * y)
    return total


def test_an_array_written_in_place_is_right():
    rs = np.random.RandomState(2)
    assert_value_and_gradient(written_in_place, (rs.rand(20), rs.rand(20)), (0, 1), jit="njit")


def broadcasts(x, s, a):
    # a length-1 vector and a scalar beside length-20 ones: NumPy broadcasts, the loop never assumes
    total = 0.0
    for i in range(2):
        y = x * s + a
        total = total + np.sum(np.tanh(y) * y)
    return total


def test_broadcasting_of_a_length_one_vector_is_right():
    rs = np.random.RandomState(3)
    assert_value_and_gradient(broadcasts, (rs.rand(20), 0.7, rs.rand(1)), (0, 1, 2), jit="njit")


def float32_cell(x, w):
    total = np.float32(0.0)
    for i in range(2):
        y = np.tanh(x * w) * x + w
        total = total + np.sum(y * y)
    return total


def test_float32_vectors_are_not_fused_and_keep_their_dtype():
    rs = np.random.RandomState(4)
    x, w = rs.rand(20).astype(np.float32), rs.rand(20).astype(np.float32)
    g = funcgrad.value_and_grad(float32_cell, argnums=(0, 1), jit="njit")
    v, (gx, gw) = g(x, w)
    assert gx.dtype == np.float32 and gw.dtype == np.float32
    np.testing.assert_allclose(v, float32_cell(x, w), rtol=1e-5)
    assert FUSED not in funcgrad.source(g, x, w)
    gp = funcgrad.value_and_grad(float32_cell, argnums=(0, 1), jit="python")(x, w)[1]
    np.testing.assert_allclose(gx, gp[0], rtol=1e-5)


def primal_only(x, w):
    for i in range(3):
        x = np.tanh(x * w + 0.1) * 0.5 + x
    return x


def test_funcgrad_jit_fuses_the_primal_and_returns_a_fused_array():
    rs = np.random.RandomState(5)
    x, w = rs.rand(30), rs.rand(30)
    f = funcgrad.jit(primal_only)
    np.testing.assert_allclose(f(x, w), primal_only(x, w), rtol=1e-13)
    assert FUSED in funcgrad.source(f, x, w)


def test_a_returned_value_computed_in_a_fused_loop_is_returned():
    rs = np.random.RandomState(6)
    x, w = rs.rand(30), rs.rand(30)
    ct = rs.rand(30)
    out, vjp = funcgrad.vjp(primal_only, x, w)
    np.testing.assert_allclose(out, primal_only(x, w), rtol=1e-13)
    gx, gw = vjp(ct)
    f = lambda x, w: float(np.dot(primal_only(x, w), ct))  # noqa: E731
    np.testing.assert_allclose(gx, numerical_vjp(f, (x, w), 0, 1.0, 1e-6), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(gw, numerical_vjp(f, (x, w), 1, 1.0, 1e-6), rtol=1e-5, atol=1e-7)


def smooth(x, w):
    total = 0.0
    for i in range(2):
        y = np.tanh(x * w) * x + 0.5 * w
        total = total + np.sum(y * y)
    return total


def test_second_order_reads_the_code_for_any_shape():
    rs = np.random.RandomState(7)
    x, w = rs.rand(20), rs.rand(20)
    g = funcgrad.value_and_grad(smooth, argnums=0, jit="njit")
    assert FUSED in funcgrad.source(g, x, w)
    h = funcgrad.hessian(smooth, argnums=0)(x, w)
    eps = 1e-5
    for k in (0, 7):
        e = np.zeros(20)
        e[k] = eps
        col = (g(x + e, w)[1] - g(x - e, w)[1]) / (2 * eps)
        np.testing.assert_allclose(h[:, k], col, rtol=1e-5, atol=1e-7)
