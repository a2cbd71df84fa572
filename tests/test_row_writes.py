"""A row of a matrix replaced by a vector (``s[i] = h``, the LSTM's state update) is written in generated CPU
code as ``s = K.index_put(s, i, h)`` (transform/emit.py: rows_as_kernel), whose compiled kernel copies the
row element by element: Numba's own item assignment compiles its shape-mismatch message (Numba's string
machinery) into the function, about a second of every cold compile. The kernel does what NumPy's ``s[i] = h``
does; code read back for second order sees the write again (transform/parse.py), aliases included."""
import numpy as np
import pytest
from numba import njit

import funcgrad
from funcgrad.kernels import cpu as K
from tests.support import assert_value_and_gradient


@njit
def _put(out, i, v):
    return K.index_put(out, i, v)


def test_index_put_replaces_a_row_as_numpy_does():
    rs = np.random.RandomState(0)
    m = rs.rand(4, 3)
    for i in (0, 3, -1, -4):
        for v in (rs.rand(3), rs.rand(1), rs.rand(6)[::2]):
            want = m.copy()
            want[i] = v
            got = m.copy()
            assert _put(got, i, v) is not None
            np.testing.assert_array_equal(got, want)
    with pytest.raises(IndexError):
        _put(m.copy(), 4, rs.rand(3))
    with pytest.raises(ValueError):
        _put(m.copy(), 0, rs.rand(2))


def test_index_put_reads_a_value_sharing_memory_before_writing():
    m = np.arange(9.0).reshape(3, 3)
    want = m.copy()
    want[1] = want[1][::-1]
    got = m.copy()
    _put(got, 1, got[1][::-1])
    np.testing.assert_array_equal(got, want)
    want = m.copy()
    want[0] = want[:, 0]
    got = m.copy()
    _put(got, 0, got[:, 0])
    np.testing.assert_array_equal(got, want)


def _recurrence(p, x):
    s = np.empty_like(p)
    for i in range(p.shape[0]):
        s[i] = np.tanh(x * p[i])
        x = s[i] * 0.5 + x
    t = s              # t sees the write below
    s[1] = x * x
    return np.sum(t * t) + np.sum(s[2] * p[0])


ARGS = (np.random.RandomState(1).randn(3, 4), np.random.RandomState(2).randn(4))


@pytest.mark.parametrize("jit", ["whole", "kernels", False])
def test_gradient_of_row_writes(jit):
    assert_value_and_gradient(_recurrence, ARGS, (0, 1), jit=jit)


def test_rows_are_written_by_the_kernel_and_read_back_as_writes():
    g = funcgrad.value_and_grad(_recurrence, argnums=(0, 1), jit="whole")
    g(*ARGS)
    src = funcgrad.source(g)
    assert "s = K.index_put(s, i, " in src   # (the comments still name the user's write)
    assert not any(ln.strip().startswith("s[i] = ") for ln in src.splitlines())
    p, x = ARGS
    h = funcgrad.hessian(lambda x: _recurrence(p, x), jit="whole")(x)
    h_py = funcgrad.hessian(lambda x: _recurrence(p, x), jit=False)(x)
    grad_x = funcgrad.grad(lambda x: _recurrence(p, x), jit=False)
    num = np.stack([(grad_x(x + e * 1e-5) - grad_x(x - e * 1e-5)) / 2e-5 for e in np.eye(4)], axis=1)
    np.testing.assert_allclose(h, h_py, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(h, num, rtol=1e-5, atol=1e-6)
