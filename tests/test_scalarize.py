"""Small 1-D arrays of compiled loops held as one scalar per element (funcgrad/transform/scalarize.py).

Compiled reverse-mode code specialized on the first call's argument shapes: a row of a 2-D argument, its
slices and the arithmetic on them become scalar code (no heap arrays, no views), guarded at run time; other
shapes run code built for any shape. Each test checks values and gradients against Python and central
differences, and reads the generated source to see which code ran."""
import numpy as np
import pytest

import funcgrad
from funcgrad.testing import numerical_vjp
from tests.support import assert_value_and_gradient

GUARD = "compiled for other argument shapes"


def _rotate_project(cams, X, w, obs):
    # bundle adjustment's shape: per observation, 3-vector work on a row of each argument
    total = 0.0
    for i in range(obs.shape[0]):
        cam = cams[obs[i, 0]]
        p = X[obs[i, 1]] - cam[3:6]
        rot = cam[0:3]
        theta = np.sqrt(np.sum(rot ** 2))
        if theta > 1e-3:
            k = rot / theta
            q = p * np.cos(theta) + np.cross(k, p) * np.sin(theta) + k * np.dot(k, p) * (1 - np.cos(theta))
        else:
            q = p + np.cross(rot, p)
        uv = q[:2] / q[2]
        err = w[i] * (uv * cam[6] - 0.1)
        total = total + np.sum(err ** 2)
    return total


def _ba_inputs(n=6, seed=0):
    rs = np.random.RandomState(seed)
    cams = np.concatenate([0.2 * rs.randn(3, 3), rs.randn(3, 3) * 0.1 + [0.0, 0.0, -4.0], 1 + rs.rand(3, 1)], 1)
    cams[1, 0:3] = 1e-5   # a camera barely rotated: the other branch
    X = rs.randn(4, 3)
    w = 1 + 0.1 * rs.randn(n)
    obs = np.stack([np.arange(n) % 3, rs.randint(4, size=n)], 1).astype(np.int64)
    return cams, X, w, obs


def test_loop_over_rows_is_scalar_code_with_right_gradients():
    args = _ba_inputs()
    assert_value_and_gradient(_rotate_project, args, (0, 1, 2), mode="njit")
    g = funcgrad.value_and_grad(_rotate_project, argnums=(0, 1, 2), mode="njit")
    src = funcgrad.source(g, *args)
    assert GUARD in src and "cams.shape[1] != 7" in src
    loop = src.split("def _rotate_project_vjp", 1)[1].split("def _rotate_project(", 1)[0]
    # the cross products, dots and sums of the loop body are scalar code: no kernel of an array remains
    for kernel in ("K.cross(", "K.dot(", "K.sum(", "K.unbroadcast(", "K.index_add("):
        assert kernel not in loop, kernel
    (v0, g0), (v1, g1) = g(*args), funcgrad.value_and_grad(_rotate_project, argnums=(0, 1, 2), mode="python")(*args)
    assert abs(v0 - v1) <= 1e-12 * abs(v1)
    for a, b in zip(g0, g1):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def _row_norms(A, b):
    t = 0.0
    for i in range(A.shape[0]):
        r = A[i]
        t = t + np.sum(r * r) * b[i, 0]
    return t


def test_other_trailing_shapes_run_code_built_for_any_shape():
    g = funcgrad.grad(_row_norms, argnums=(0, 1), mode="njit")
    rs = np.random.RandomState(1)
    for shape in [(5, 3), (5, 4), (6, 3)]:
        A, b = rs.randn(*shape), rs.randn(shape[0], 2)
        ga, gb = g(A, b)
        np.testing.assert_allclose(ga, 2 * A * b[:, :1], rtol=1e-13)
        np.testing.assert_allclose(gb[:, 0], (A * A).sum(1), rtol=1e-13)
        np.testing.assert_array_equal(gb[:, 1], 0.0)
        src = funcgrad.source(g, A, b)
        assert (GUARD in src) == (shape == (5, 3)), shape   # the first shape only; then code for any
    assert g.specializations == 1


LO = 1


def _captured_bound(A, x):
    t = 0.0
    for i in range(A.shape[0]):
        seg = A[i, LO:LO + 2]
        t = t + np.dot(seg, seg) * x[i]
    return t


def test_a_captured_integer_the_code_assumes_is_checked():
    global LO
    rs = np.random.RandomState(2)
    A, x = rs.randn(4, 5), rs.randn(4)
    g = funcgrad.value_and_grad(_captured_bound, argnums=(0, 1), mode="njit")
    try:
        for lo in (1, 2, 0):
            LO = lo
            v, (gA, gx) = g(A, x)
            want = np.zeros_like(A)
            want[:, lo:lo + 2] = 2 * A[:, lo:lo + 2] * x[:, None]
            np.testing.assert_allclose(v, _captured_bound(A, x), rtol=1e-13)
            np.testing.assert_allclose(gA, want, rtol=1e-13)
            np.testing.assert_allclose(gx, (A[:, lo:lo + 2] ** 2).sum(1), rtol=1e-13)
    finally:
        LO = 1


def _writes_through_a_row(x, A):
    t = 0.0
    for i in range(A.shape[0]):
        r = A[i]
        A[i, 0] = x[i]          # r is a view: it sees the write
        t = t + np.sum(r * x[i])
    return t


def _writes_then_reads_a_row(x, A):
    t = 0.0
    for i in range(A.shape[0]):
        A[i, 0] = x[i] * t
        r = A[i]
        t = t + np.sum(r * x[i])
    return t


def test_rows_of_an_array_written_in_place():
    rs = np.random.RandomState(3)
    x, A = rs.randn(4), rs.randn(4, 3)
    # r = A[i] is a view: it sees the write (the view is made again after it), as does a row read after it
    for f in (_writes_through_a_row, _writes_then_reads_a_row):
        want = f(x, A.copy())
        v, g = funcgrad.value_and_grad(f, mode="njit")(x, A.copy())
        np.testing.assert_allclose(v, want, rtol=1e-13)
        num = numerical_vjp(lambda x_: f(x_, A.copy()), (x,), 0, 1.0, 1e-6)
        np.testing.assert_allclose(g, num, rtol=1e-6)


def _vector_forms(P, s):
    acc = P[0, 1:4] * 0.0
    total = 0.0
    for i in range(P.shape[0]):
        a, b, c = P[i, 0], P[i, 1], P[i, 2]
        u = np.array([a, b * c, np.sin(c)])          # built from scalars
        v = P[i, 1:4]
        if a > 0:
            d = np.cross(u, v) / (1.5 + np.dot(u, u))
        else:
            d = -v[::-1] * s
        e = np.concatenate((d[:2], v[-1:]))
        acc = acc * 0.5 + np.exp(-e ** 2)             # carried from one iteration to the next
        total = total + np.mean(e) * u[-1] + np.max(d) + np.sum(np.outer(u, v)) / (2.0 + np.sqrt(v * v + 1.0))[1]
    return total + np.sum(acc * acc)


@pytest.mark.parametrize("mode", ["njit", "python"])
def test_vector_forms_held_as_elements_or_as_arrays(mode):
    rs = np.random.RandomState(4)
    P = rs.randn(7, 4)
    assert_value_and_gradient(_vector_forms, (P, 0.7), (0, 1), mode=mode)
    if mode == "njit":
        src = funcgrad.source(funcgrad.value_and_grad(_vector_forms, argnums=(0, 1), mode=mode), P, 0.7)
        assert GUARD in src
        assert "K.stack(" in src   # d and u, read whole by max and outer: made arrays where they are defined


def test_float32_arguments_are_not_held_as_float64_elements():
    rs = np.random.RandomState(5)
    A, b = rs.randn(5, 3).astype(np.float32), rs.randn(5, 2).astype(np.float32)
    g = funcgrad.grad(_row_norms, argnums=(0, 1), mode="njit")
    ga, _ = g(A, b)
    assert ga.dtype == np.float32
    np.testing.assert_allclose(ga, 2 * A * b[:, :1], rtol=1e-6)
    assert GUARD not in funcgrad.source(g, A, b)


def _energy(P):
    # a chain of points: small-vector work in a loop, differentiated twice
    e = 0.0
    for i in range(P.shape[0] - 1):
        d = P[i + 1] - P[i]
        e = e + np.sqrt(np.dot(d, d) + 1.0)
    return e


def test_second_order_reads_back_code_for_any_shape():
    rs = np.random.RandomState(6)
    P = rs.randn(4, 3)
    g = funcgrad.grad(_energy, mode="njit")
    np.testing.assert_allclose(g(P), numerical_vjp(_energy, (P,), 0, 1.0, 1e-6), rtol=1e-6, atol=1e-8)
    assert GUARD in funcgrad.source(g, P)
    h = funcgrad.hessian(_energy)(P).reshape(P.size, P.size)
    want = np.stack([numerical_vjp(g, (P,), 0, row.reshape(P.shape), 1e-5).ravel() for row in np.eye(P.size)])
    np.testing.assert_allclose(h, want, rtol=1e-5, atol=1e-6)


def _linear_rows(w, X, y):
    # a small parameter vector against each row: both held as elements
    t = 0.0
    for i in range(X.shape[0]):
        r = np.dot(w, X[i]) - y[i]
        t = t + r * r
    return t + 0.1 * np.sum(w * w)


def test_a_small_vector_argument_is_read_once_as_elements():
    rs = np.random.RandomState(7)
    w, X, y = rs.randn(3), rs.randn(20, 3), rs.randn(20)
    assert_value_and_gradient(_linear_rows, (w, X, y), (0, 1), mode="njit")
    g = funcgrad.value_and_grad(_linear_rows, argnums=(0, 1), mode="njit")
    src = funcgrad.source(g, w, X, y)
    assert "w.shape[0] != 3" in src and "w_0 = w[0]" in src
    loop = src.split("def _linear_rows_vjp", 1)[1].split("def _linear_rows(", 1)[0]
    assert "K.dot(" not in loop
    w4, X4 = rs.randn(4), rs.randn(20, 4)   # another length: the code for any shape, right
    v, (gw, gX) = g(w4, X4, y)
    r = X4 @ w4 - y
    np.testing.assert_allclose(v, r @ r + 0.1 * w4 @ w4, rtol=1e-12)
    np.testing.assert_allclose(gw, 2 * X4.T @ r + 0.2 * w4, rtol=1e-11)
    np.testing.assert_allclose(gX, 2 * r[:, None] * w4, rtol=1e-11)


def _spring_chain(P, k):
    # distances and an accumulator started from np.zeros: both held as scalars
    force = np.zeros(3)
    e = 0.0
    for i in range(P.shape[0] - 1):
        d = P[i + 1] - P[i]
        r = np.linalg.norm(d)
        e = e + k * (r - 1.0) ** 2
        force = force + d / r
    return e + np.dot(force, force)


def test_norms_and_accumulators_from_zeros_are_scalar_code():
    rs = np.random.RandomState(8)
    P = rs.randn(6, 3)
    assert_value_and_gradient(_spring_chain, (P, 0.8), (0, 1), mode="njit")
    src = funcgrad.source(funcgrad.value_and_grad(_spring_chain, argnums=(0, 1), mode="njit"), P, 0.8)
    loop = src.split("def _spring_chain_vjp", 1)[1].split("def _spring_chain(", 1)[0]
    assert GUARD in src and "K.norm" not in loop and "np.zeros(3)" not in loop


def _weighted_tail(x, a):
    # a's length is the loop's trip count: folded to a constant when a is held as elements, so it is checked too
    t = 0.0
    for i in range(a.shape[0]):
        t = t + a[i] * x * (i + 1)
    return t


def test_a_length_folded_into_the_code_is_checked_at_each_call():
    g = funcgrad.value_and_grad(_weighted_tail, argnums=(0, 1), mode="njit")
    for a in (np.array([1.0, -2.0, 3.0]), np.array([-1.0, -2.0]), np.array([0.5, 2.0, 1.0, 4.0])):
        v, (gx, ga) = g(1.5, a)
        k = np.arange(1, a.size + 1)
        np.testing.assert_allclose(v, 1.5 * np.sum(a * k), rtol=1e-13)
        np.testing.assert_allclose(gx, np.sum(a * k), rtol=1e-13)
        np.testing.assert_allclose(ga, 1.5 * k, rtol=1e-13)


def _length_branch(x, params, n):
    # (found by gen_lang) a branch on a small argument's length: held as a constant, Numba pruned the other
    # branch and the tapes only it appends to had no type; the length stays a value the code reads
    a = params["a"]
    B = params["B"]
    s = 0.0
    for i1 in range(n - 1, -1, -1):
        if len(a) > 3:
            t2 = B[1].sum()
            t2 += x
            s += t2
        else:
            c3 = B.copy()
            c3[1:, :] += np.tanh(s)
            s = s + np.sum(c3 * B)
    return s + 0.0 * x


def test_a_branch_on_a_small_arguments_length_compiles():
    rs = np.random.RandomState(9)
    for a in (rs.randn(5), rs.randn(2)):
        args = (0.3, {"a": a, "B": rs.randn(2, 3)}, 2)
        g = funcgrad.grad(_length_branch, argnums=(0, 1), mode="njit")(*args)
        gp = funcgrad.grad(_length_branch, argnums=(0, 1), mode="python")(*args)
        np.testing.assert_allclose(g[0], gp[0], rtol=1e-12)
        np.testing.assert_allclose(g[1]["B"], gp[1]["B"], rtol=1e-12)
