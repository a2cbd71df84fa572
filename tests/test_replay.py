"""The reversed loop computing an iteration's own cheap values again instead of taping them
(funcgrad/transform/replay.py), in loops that write arrays in place: integer arithmetic of ints, sizes and
shapes is recomputed there (no in-place write can change it), and so are values that read no array the
function writes in place (rows of a weight argument, the gates computed from them); values read from arrays
written in place stay taped."""
import re

import numpy as np
import pytest

import funcgrad
from tests.support import assert_value_and_gradient

MODES = [dict(mode="auto"), dict(mode="python"), dict(mode="njit"), dict(jit=False)]
MODE_IDS = ["auto", "python", "njit", "nojit"]


def _rows_in_place(w, state, n):
    # an LSTM's layer loop: rows 2i and 2i+1 of a state written in place, read by index arithmetic
    s = state.copy()
    total = 0.0
    for t in range(n):
        nxt = np.empty_like(s)
        for i in range(s.shape[0] // 2):
            b = s.shape[1]
            g = np.concatenate((s[2 * i], s[2 * i + 1])) * w[2 * i] + w[2 * i + 1]
            h = np.tanh(g[0:b]) * np.exp(-g[b:2 * b] ** 2)
            nxt[2 * i] = h
            nxt[2 * i + 1] = s[2 * i + 1] * 0.5 + h
        s = nxt
        total = total + np.sum(s * s)
    return total


def _scalar_read_from_a_written_array(x, n):
    # c is read from an array the loop writes in place: recomputed at the reversed iteration it would read the
    # array's final value, so it must stay taped; k is integer arithmetic and may be recomputed
    a = x.copy()
    s = 0.0
    for i in range(n):
        c = a[0] * 1.5
        k = (2 * i + 1) % 3
        a[1] = a[1] + c * x[k]
        a[0] = a[0] * 0.5 + x[2] * c
        s = s + c * c + a[k]
    return s + np.sum(a * a)


def _int_from_an_array_value(x, n):
    # an int computed from an array's value (not from ints, sizes or shapes) is not recomputed
    a = x.copy()
    s = 0.0
    for i in range(n):
        j = int(a[0] > 0.0) + i % 2
        a[j] = a[j] * 0.7 - 0.4
        s = s + a[j] * x[2]
    return s


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_index_arithmetic_in_a_loop_writing_rows_in_place(kw):
    rs = np.random.RandomState(0)
    w = rs.uniform(-1, 1, (4, 6)) * 0.5
    state = rs.uniform(-1, 1, (4, 3))
    assert_value_and_gradient(_rows_in_place, (w, state, 3), (0, 1), **kw)


def test_index_arithmetic_is_recomputed_not_taped():
    rs = np.random.RandomState(0)
    g = funcgrad.grad(_rows_in_place, argnums=(0, 1), mode="njit")
    g(rs.uniform(-1, 1, (4, 6)), rs.uniform(-1, 1, (4, 3)), 2)
    src = funcgrad.source(g)
    assert "# recomputed" in src
    index_temps = re.findall(r"^\s*(_t\d+) = 2 \* i\b", src, re.M)
    assert index_temps
    for name in index_temps:   # 2 * i is computed again in the reversed loop, never stored
        assert f"_tape_{name} " not in src and f"_tape_{name}.append" not in src


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("f", [_scalar_read_from_a_written_array, _int_from_an_array_value])
def test_values_read_from_arrays_written_in_place_stay_taped(f, kw):
    x = np.array([0.3, -0.2, 0.8])
    assert_value_and_gradient(f, (x, 5), 0, **kw)



def test_a_value_read_from_a_written_array_is_taped():
    g = funcgrad.grad(_scalar_read_from_a_written_array, mode="njit")
    g(np.array([0.3, -0.2, 0.8]), 3)
    src = funcgrad.source(g)
    assert re.search(r"_tape_c(\[\w+\] = c|\.append\(c\))", src)
    assert not re.search(r"_tape_k(\[\w+\] = k|\.append\(k\))", src)   # (k = (2 * i + 1) % 3 is recomputed)


def _written_after_the_loop(x, n):
    # a is read in the loop and written after it: what reads a is taped
    a = x * 1.0
    s = 0.0
    buf = np.zeros(3)
    for i in range(n):
        c = np.sin(a) * x[0]
        buf[i % 3] = c[0]
        s = s + np.sum(c * c)
    a[0] = 5.0
    return s + np.sum(a * a) + np.sum(buf * buf)


def _written_through_a_view(x, n):
    # a is written through a view of it inside the loop
    a = x * 1.0
    s = 0.0
    for i in range(n):
        c = np.tanh(a) * 1.5
        v = a[0:2]
        v[0] = c[1] * 0.5
        s = s + np.sum(c * c)
    return s + np.sum(a)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("f", [_written_after_the_loop, _written_through_a_view])
def test_arrays_written_elsewhere_keep_their_readers_taped(f, kw):
    assert_value_and_gradient(f, (np.array([0.3, -0.2, 0.8]), 5), 0, **kw)


def test_weight_rows_and_gates_are_recomputed_state_rows_taped():
    # the state's rows are written in place; the weight rows and the gates computed from them are read from no
    # written array, so the reversed loop computes them again
    rs = np.random.RandomState(1)
    g = funcgrad.grad(_rows_in_place, argnums=(0, 1), mode="njit")
    g(rs.uniform(-1, 1, (4, 6)) * 0.5, rs.uniform(-1, 1, (4, 3)), 2)
    src = funcgrad.source(g)
    tapes = set(re.findall(r"^\s*_tape_(\w+) = \[\]", src, re.M))
    weight_rows = re.findall(r"^\s*(\w+) = w\[\w+\]$", src, re.M)
    assert weight_rows
    for name in weight_rows + ["g", "h"]:   # read from the weights only: computed again, never stored
        assert name not in tapes, name
    state_rows = re.findall(r"^\s*(\w+) = s\[\w+\]$", src, re.M)
    assert state_rows and all(r in tapes for r in state_rows)   # rows of the state written in place: taped


def test_values_recomputed_in_the_reversed_loop_are_not_stored_by_the_forward_loop():
    # the forward's fused loop keeps in arrays only what is read after it before being bound again: the
    # gate's exp is read again only by the reversed loop, after that loop computed it anew
    rs = np.random.RandomState(1)
    g = funcgrad.grad(_rows_in_place, argnums=(0, 1), mode="njit")
    g(rs.uniform(-1, 1, (4, 6)) * 0.5, rs.uniform(-1, 1, (4, 3)), 2)
    forward = funcgrad.source(g).split("# reversed:")[0]
    exps = re.findall(r"^\s*(\w+)_j = K\.exp\(", forward, re.M)
    assert exps
    for name in exps:
        assert f"{name}[_fzj] = " not in forward, name
