"""An index out of range raises IndexError in every mode, as NumPy and Python do, named at the user's line.

Compiled whole by Numba, ``x[i]`` with ``i`` past the end read memory beyond the array (the gradient of
``x[i] * x[k]`` at i = 7 of a 3-vector came back as 4.4e-323) and ``np.take`` / ``np.take_along_axis`` did the
same; a write ``y[i] = v`` wrote past it. Generated functions are now compiled with Numba's bounds checks, and
the kernels that index with the user's own index arrays check theirs.
"""
import numpy as np
import pytest

import funcgrad

MODES = [dict(mode="auto"), dict(mode="python"), dict(mode="njit"), dict(jit=False)]
MODE_IDS = ["auto", "python", "njit", "nojit"]


def scalar_index_in_loop(x, i):
    s = 0.0
    for k in range(2):
        s = s + x[i[0]] * x[k]
    return s


def write_in_loop(x, i):
    y = np.zeros(3)
    for k in range(2):
        y[i[k]] = x[k]
    return np.sum(y * x)


def fancy_index(x, i):
    return np.sum(x[i] ** 2)


def take(x, i):
    return np.sum(np.take(x, i) ** 2)


def take_along_axis(x, i):
    return np.sum(np.take_along_axis(x[:, None], i[:, None], axis=0) ** 2)


CASES = [scalar_index_in_loop, write_in_loop, fancy_index, take, take_along_axis]


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("bad", [7, -4])
def test_out_of_range_raises_at_the_users_line(fn, kw, bad):
    x = np.arange(1.0, 4.0)
    with pytest.raises(IndexError) as info:
        funcgrad.grad(fn, **kw)(x, np.array([bad, 0]) if fn is not write_in_loop else np.array([0, bad]))
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert __file__.rstrip("c") in notes or "test_index_bounds.py" in notes, notes


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_in_range_and_negative_indices_still_work(fn, kw):
    x = np.arange(1.0, 4.0)
    i = np.array([-1, 0])   # a negative index counts from the end, as in NumPy
    ref = funcgrad.grad(fn, jit=False)(x, i)
    h = 1e-6
    num = np.array([(fn(x + h * e, i) - fn(x - h * e, i)) / (2 * h) for e in np.eye(3)])
    np.testing.assert_allclose(ref, num, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(funcgrad.grad(fn, **kw)(x, i), ref, rtol=1e-12, atol=1e-15)
