"""The compiled ``K.index_add`` on the basic indices adjoints write most (a slice of a vector, a row of a
matrix) adds exactly what NumPy's ``out[idx] += g`` adds, and the reverse pass writes those scatters as
``K.index_add`` (kernels/cpu.py: an element loop instead of Numba's general slice assignment). Code read back
for a second derivative differentiates those calls through index_add's definition over primitives
(funcgrad/ops/second_order.py)."""
import numpy as np
import pytest
from numba import njit

import funcgrad
from funcgrad.kernels import cpu as K


@njit
def _index_add(out, idx, g):
    return K.index_add(out, idx, g)


SLICES = [slice(1, 4), slice(None, None, -1), slice(5, 1, -2), slice(0, 10), slice(3, 3), slice(-3, None),
          slice(None, 2)]


@pytest.mark.parametrize("sl", SLICES, ids=str)
def test_slice_of_a_vector(sl):
    rs = np.random.RandomState(0)
    base = rs.rand(8)
    n = len(range(*sl.indices(8)))
    for g in (rs.rand(n), rs.rand(1), rs.rand(2 * n)[::2], 2.5):
        want = base.copy()
        want[sl] += g
        got = _index_add(base.copy(), sl, g)
        np.testing.assert_array_equal(got, want)


def test_row_of_a_matrix():
    rs = np.random.RandomState(1)
    m = rs.rand(4, 3)
    for i in (0, 3, -1, -4):
        for g in (rs.rand(3), rs.rand(1)):
            want = m.copy()
            want[i] += g
            np.testing.assert_array_equal(_index_add(m.copy(), i, g), want)
    with pytest.raises(IndexError):
        _index_add(m.copy(), 4, rs.rand(3))
    with pytest.raises(ValueError):
        _index_add(rs.rand(8), slice(1, 4), rs.rand(2))


def test_g_sharing_memory_with_out_is_read_before_the_writes():
    rs = np.random.RandomState(2)
    base = rs.rand(8)
    want = base.copy()
    want[1:5] += want[0:4]
    out = base.copy()
    np.testing.assert_array_equal(_index_add(out, slice(1, 5), out[0:4]), want)
    want = base.copy()
    want[::-1] += want
    out = base.copy()
    np.testing.assert_array_equal(_index_add(out, slice(None, None, -1), out), want)
    m = rs.rand(4, 3)
    want = m.copy()
    want[1] += want[2]
    out = m.copy()
    np.testing.assert_array_equal(_index_add(out, 1, out[2]), want)


def _pieces(cams, X, idx):
    total = 0.0
    for i in range(idx.shape[0]):
        c = cams[idx[i]]
        v = c[0:3] * X[i] + c[3:6]
        total = total + np.sum(v * v) + c[6]
    return total


def test_reverse_scatters_slices_and_rows_through_index_add(arrays_kept):
    rs = np.random.RandomState(3)
    cams, X, idx = rs.rand(3, 7), rs.rand(5, 3), np.array([0, 2, 1, 2, 0])
    g = funcgrad.grad(_pieces, argnums=(0, 1))
    dc, dX = g(cams, X, idx)
    src = funcgrad.source(g, cams, X, idx)
    want_c, want_X = np.zeros_like(cams), np.zeros_like(X)
    for i in range(idx.shape[0]):
        c = cams[idx[i]]
        v = c[0:3] * X[i] + c[3:6]
        want_c[idx[i], 0:3] += 2 * v * X[i]
        want_c[idx[i], 3:6] += 2 * v
        want_c[idx[i], 6] += 1.0
        want_X[i] += 2 * v * c[0:3]
    np.testing.assert_allclose(dc, want_c, rtol=1e-12)
    np.testing.assert_allclose(dX, want_X, rtol=1e-12)
    assert "d_cams = K.index_add(d_cams, " in src       # the row of cams
    assert "slice(0, 3, None)" in src and "slice(3, 6, None)" in src   # the slices of that row


_ROWS = np.array([0, 2, 2, 1])


def _parts(x):
    a = x[0]                 # a row of a matrix
    b = x[1:3, 1:]           # a slice
    c = x[_ROWS]             # an integer-array index with a repeat: np.add.at semantics
    return np.sum(np.sin(a) * np.cos(a)) + np.sum(b ** 3) + np.sum(np.tanh(c) ** 2 * x[1:, 2][0])


def _fd_jacobian(g, x, eps=1e-5):
    cols = []
    for k in range(x.size):
        e = np.zeros(x.size)
        e[k] = eps
        e = e.reshape(x.shape)
        cols.append((g(x + e) - g(x - e)).reshape(-1) / (2 * eps))
    return np.stack(cols, axis=-1).reshape(x.shape + x.shape)


@pytest.mark.parametrize("kw", [dict(mode="python"), dict(mode="njit"), dict(jit=False)], ids=["python", "njit", "nojit"])
def test_second_derivatives_read_index_add_back(kw, arrays_kept):
    x = np.random.RandomState(5).rand(3, 4)
    src = funcgrad.source(funcgrad.grad(_parts, **kw), x)
    assert "d_x = K.index_add(d_x, 0, d_a)" in src and "(slice(1, 3, None), slice(1, None, None))" in src
    want = _fd_jacobian(funcgrad.grad(_parts, **kw), x)
    np.testing.assert_allclose(funcgrad.hessian(_parts, **kw)(x), want, rtol=1e-6, atol=1e-8)

    def outer(y):   # a gradient taken inside a differentiated function: reverse over reverse
        return np.sum(funcgrad.grad(_parts)(y) ** 2)
    gg = funcgrad.grad(outer, **kw)(x)
    np.testing.assert_allclose(gg, 2 * np.einsum("ij,ijkl->kl", funcgrad.grad(_parts)(x), want), rtol=1e-6,
                               atol=1e-8)
