"""A tuple or list built in the function, indexed by a number known only when it runs (an int argument, a loop
counter, ``k % 3``): read (``(a, b, c)[i]``, Tangent's ``passthru_pack``) and written (``acc[k % 3] += v``).

Each item is picked by comparing its position with the index, so the value and gradient are Python's in every
mode; a negative index counts from the end and one out of range raises IndexError. Before, both were refused
("a tuple/list/dict argument can only be indexed by a constant"). Also starred unpacking of an array
(``first, *rest = B``: ``rest`` a list of rows whose length is known when the function runs).
"""
import numpy as np
import pytest

import funcgrad
from funcgrad.errors import UnsupportedSyntaxError
from tests.support import assert_value_and_gradient

MODES = [dict(mode="auto"), dict(mode="python"), dict(mode="njit"), dict(jit=False)]
MODE_IDS = ["auto", "python", "njit", "nojit"]


def passthru_pack(a, b, c, i):   # google/tangent tests/functions.py
    x = a, b, c
    return x[i]


def items_of_one_structure(x, i):
    ps = [(x[0], x * 2.0), (x[1] * 3.0, x ** 2)]
    p = ps[i]
    return p[0] * np.sum(p[1])


def read_in_loop(x, n):
    ws = (x, x * x, np.sin(x))
    s = 0.0
    for k in range(n):
        s = s + np.sum(ws[k % 3]) * k
    return s


def write(a, b, i):
    x = [a, b, a * b]
    x[i] = x[i] * 2.0
    return x[0] + x[1] * 3.0 + x[2] * 5.0


def write_in_loop(x, n):
    acc = [0.0, 0.0, 0.0]
    for k in range(n):
        acc[k % 3] = acc[k % 3] + x[k] * acc[(k + 1) % 3] + x[k]
    return acc[0] * 1.0 + acc[1] * 2.0 + acc[2] * 3.0


def items_of_other_structures(x, i):
    ps = [(x, x), x]
    return np.sum(ps[i])


X = np.array([0.3, -0.7, 1.1, 0.4, -0.2])
CASES = [
    (passthru_pack, (1.5, -0.5, 2.0, 1), (0, 1, 2)),
    (passthru_pack, (1.5, -0.5, 2.0, -1), (0, 1, 2)),
    (items_of_one_structure, (X[:2], 1), 0),
    (read_in_loop, (X[:2], 7), 0),
    (write, (2.0, 3.0, 1), (0, 1)),
    (write, (2.0, 3.0, -3), (0, 1)),
    (write_in_loop, (X, 5), 0),
]


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].__name__}{c[1][-1]}")
def test_value_and_gradient(case, kw):
    f, args, argnums = case
    assert_value_and_gradient(f, args, argnums, **kw)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("f,args", [(passthru_pack, (1.5, -0.5, 2.0, 3)), (write, (2.0, 3.0, -4))],
                         ids=["read", "write"])
def test_out_of_range_raises(f, args, kw):
    with pytest.raises(IndexError):
        f(*args)   # as Python does
    with pytest.raises(IndexError):
        funcgrad.grad(f, **kw)(*args)


def test_items_of_other_structures_refused_in_the_users_terms():
    with pytest.raises(UnsupportedSyntaxError, match="items of one structure") as info:
        funcgrad.grad(items_of_other_structures)(X, 0)
    assert "test_runtime_index.py" in str(info.value)


def unpack_rows(x, B):   # first, *rest = an array: the rest a list of rows, its length known when it runs
    first, *mid, last = B
    s = np.sum(first * last) * x
    for row in mid:
        s = s + np.sum(row ** 2) * x
    u, *r = B[0]
    return s + u * sum(r) + len(mid)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_starred_unpacking_of_an_array(kw):
    B = np.arange(12.0).reshape(4, 3) / 7.0
    assert_value_and_gradient(unpack_rows, (0.5, B), (0, 1), **kw)
    with pytest.raises(ValueError, match="not enough values to unpack"):
        funcgrad.grad(unpack_rows, **kw)(0.5, B[:1])
