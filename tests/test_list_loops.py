"""A loop over a list (or tuple) argument of arrays of one dtype and rank that are not differentiated runs as a
loop (``for seq in sequences``: sequences of different lengths), so the generated code is written once,
whatever the list's length; any other loop over a container known while transforming is written out per item.
Both must give the right value and gradient in every mode."""
import numpy as np
import pytest

import funcgrad
from funcgrad.testing import numerical_vjp
from tests.support import tagged_line

MODES = [dict(jit="auto"), dict(jit="whole"), dict(jit="kernels"), dict(jit=False)]


def over_sequences(w, sequences):
    total = 0.0
    for seq in sequences:
        h = np.zeros(w.shape[0])
        for t in range(len(seq)):
            h = np.tanh(w @ h + seq[t])
        total = total + np.sum(h * h)
    return total


def with_break(w, sequences):
    total = 0.0
    for seq in sequences:
        s = np.sum(np.sin(w * seq[0]))
        if s > 10.0:
            break
        total = total + s * seq.shape[0]
    return total


def seq_rebound(w, sequences):
    total = 0.0
    for seq in sequences:
        seq = seq[1:] * 2.0
        total = total + np.sum(np.cos(seq @ w))
    return total


def appends_per_item(w, sequences):
    outs = []
    for seq in sequences:
        outs.append(np.tanh(seq @ w))          # shapes differ from item to item: written out per item
    return sum(np.sum(o) for o in outs)


def _seqs(rs, lengths, n=3):
    return [rs.randn(T, n) for T in lengths]


def _check(f, w, seqs, kw, rtol=1e-6):
    v, g = funcgrad.value_and_grad(f, **kw)(w, seqs)
    np.testing.assert_allclose(v, f(w, seqs), rtol=1e-12)
    np.testing.assert_allclose(g, numerical_vjp(lambda a: f(a, seqs), (w,), 0, 1.0, 1e-6), rtol=rtol, atol=1e-9)


@pytest.mark.parametrize("kw", MODES, ids=lambda k: str(k["jit"]))
@pytest.mark.parametrize("f", [over_sequences, with_break, seq_rebound, appends_per_item],
                         ids=lambda f: f.__name__)
def test_loops_over_a_list_argument(f, kw):
    rs = np.random.RandomState(0)
    w = 0.4 * rs.randn(3, 3) if f is over_sequences else 0.4 * rs.randn(3)
    for lengths in ([5, 3, 4], [2, 6]):
        seqs = _seqs(rs, lengths)
        _check(f, w, seqs, kw)
        _check(f, w, tuple(seqs), kw)


def test_the_loop_is_written_once_whatever_the_list_length():
    rs = np.random.RandomState(1)
    w = 0.4 * rs.randn(3, 3)
    g = funcgrad.grad(over_sequences)
    short = funcgrad.source(g, w, _seqs(rs, [3, 4]))
    long = funcgrad.source(g, w, _seqs(rs, [3, 4, 2, 5, 6, 2]))
    assert "K.pick(" in short and len(long.splitlines()) - len(short.splitlines()) <= 20
    assert long.count("np.tanh") + long.count("K.tanh") == short.count("np.tanh") + short.count("K.tanh")


@pytest.mark.parametrize("kw", MODES, ids=lambda k: str(k["jit"]))
def test_a_differentiated_list_or_mixed_items_are_written_out(kw):
    rs = np.random.RandomState(2)
    seqs = _seqs(rs, [4, 2, 3])
    # differentiated with respect to the list: each item's gradient
    g = funcgrad.grad(over_sequences, argnums=1, **kw)(0.4 * rs.randn(3, 3), seqs)
    w = 0.4 * rs.randn(3, 3)
    g = funcgrad.grad(over_sequences, argnums=1, **kw)(w, seqs)
    for k in range(3):
        want = numerical_vjp(lambda s: over_sequences(w, seqs[:k] + [s] + seqs[k + 1:]), (seqs[k],), 0, 1.0, 1e-6)
        np.testing.assert_allclose(g[k], want, rtol=1e-6, atol=1e-9)
    # items of different ranks: written out per item
    mixed = [rs.randn(4, 3), rs.randn(3)]

    def f(w, items):
        s = 0.0
        for it in items:
            s = s + np.sum(np.sin(it * w[0]))
        return s

    w1 = rs.randn(3)
    gm = funcgrad.grad(f, **kw)(w1, mixed)
    np.testing.assert_allclose(gm, numerical_vjp(lambda a: f(a, mixed), (w1,), 0, 1.0, 1e-6), rtol=1e-6, atol=1e-9)


def _ragged(a, n):
    xs = []
    x = np.array([a])
    for i in range(n):
        x = np.concatenate([x, np.sin(x[-1:]) * a])
        xs.append(x)   # LINE: ragged-append
    return np.sum(xs[-1])


def _scalar_into_rows(a, n):
    xs = [np.zeros(3) + a]
    for i in range(n):
        xs.append(a * i)
    return np.sum(np.stack(xs[:1]))


@pytest.mark.parametrize("kw", MODES, ids=["auto", "whole", "kernels", "nojit"])
def test_items_of_changing_shape_in_a_list_grown_at_run_time_are_refused_in_words(kw):
    """funcgrad keeps a list grown at run time as the rows of one array: an item of another shape is refused with
    that reason (never NumPy's broadcast message, never broadcast silently into a row), at the append's line."""
    for f in (_ragged, _scalar_into_rows):
        if f is _scalar_into_rows and kw.get("jit") == "whole":   # Numba refuses the row turning a number first
            with pytest.raises(funcgrad.errors.CompileError, match="test_list_loops.py"):
                funcgrad.grad(f, **kw)(0.7, 3)
            continue
        with pytest.raises(ValueError, match="holds items of one shape") as e:
            funcgrad.grad(f, **kw)(0.7, 3)
        if f is _ragged:   # funcgrad's own error, at the user's line, in every mode
            assert isinstance(e.value, funcgrad.errors.FuncgradError), type(e.value)
            assert f"test_list_loops.py:{tagged_line(__file__, 'ragged-append')}" in str(e.value), str(e.value)


def _nested_comprehension(x, a):
    rows = [[v * w for w in a[:2]] for v in a[:3]]       # rows of one length: a table
    return np.sum(np.array(rows)) * x


def _ragged_comprehension(x, a, n):
    rows = [[w * x for w in a[:i]] for i in range(1, n)]   # LINE: ragged-comprehension
    return sum(sum(r) for r in rows)


@pytest.mark.parametrize("kw", MODES, ids=["auto", "whole", "kernels", "nojit"])
def test_a_comprehension_of_comprehensions_over_arrays(kw):
    a = np.array([0.3, -0.7, 0.45, 0.2])
    v, g = funcgrad.value_and_grad(_nested_comprehension, argnums=(0, 1), **kw)(0.37, a)
    assert v == pytest.approx(_nested_comprehension(0.37, a), rel=1e-12)
    np.testing.assert_allclose(g[1], numerical_vjp(lambda b: _nested_comprehension(0.37, b), (a,), 0, 1.0, 1e-6),
                               rtol=1e-6, atol=1e-9)
    with pytest.raises(funcgrad.errors.FuncgradError, match="the list this comprehension builds|holds items of one") as e:
        funcgrad.grad(_ragged_comprehension, **kw)(0.37, a, 3)
    assert f"test_list_loops.py:{tagged_line(__file__, 'ragged-comprehension')}" in str(e.value)
    assert "_comprehension" not in str(e.value)


def filtered_comprehension(x, a):
    L = [v * x for v in a if v > 0]
    return sum(L) + x * 2.0 + len(L)


def appended_under_if(x, a):
    L = []
    for v in a:
        if v > 0:
            L.append(v * x)
    s = np.sum(x)
    for r in L:
        s = s + np.sum(r * r)
    return s + np.sum(np.array(L)) + len(L)


@pytest.mark.parametrize("kw", MODES, ids=["auto", "whole", "kernels", "nojit"])
@pytest.mark.parametrize("f", [filtered_comprehension, appended_under_if], ids=lambda f: f.__name__)
def test_a_list_grown_at_run_time_that_gets_no_item_on_a_call(f, kw):
    # The buffer is made at the first append: a call that appends nothing read it unbound when run as Python
    # (UnboundLocalError: 'L_rows'). Read with no items, it is NumPy's np.array([]).
    x = np.array([0.5, 1.5]) if f is appended_under_if else 1.5
    vg = funcgrad.value_and_grad(f, **kw)
    for a in (np.array([1.0, -2.0, 3.0]), np.array([-1.0, -2.0]), np.array([-1.0, 2.0])):
        v, g = vg(x, a)
        assert np.allclose(v, f(x, a))
        num = numerical_vjp(f, (x, a), 0, 1.0, 1e-6)
        assert np.allclose(g, num, atol=1e-6)


@pytest.mark.parametrize("jit", ["auto", "python", "njit", False])
def test_hessian_through_a_list_grown_at_run_time_with_and_without_items(jit):
    # forward over reverse reads the generated code back: its Python-only branch (the empty list's buffer)
    # must stay a branch Numba drops, not become code that gives the buffer two types
    def f(x, a):
        L = []
        for v in a:
            if v > 0:
                L.append(v * x)
        s = np.sum(x * x * x)
        for r in L:
            s = s + np.sum(np.sin(r))
        return s
    x = np.array([0.5, 1.5])
    for a in (np.array([1.0, -2.0, 3.0]), np.array([-1.0, -2.0])):
        want = np.diag(6 * x) - np.diag(sum(v * v * np.sin(v * x) for v in a if v > 0) + 0 * x)
        np.testing.assert_allclose(funcgrad.hessian(f, jit=jit)(x, a), want, rtol=1e-12, atol=1e-12)


def _pop_from_a_runtime_list(x, a, n):
    L = []
    for i in range(n):
        L.append(a * (x + i))
    last = L.pop()
    prev = L.pop(-1)
    s = np.sum(last * prev) + len(L)
    for i in range(n - 2):
        s = s + np.sum(L.pop()) * x
    return s


@pytest.mark.parametrize("kw", [dict(mode="auto"), dict(mode="njit"), dict(jit=False)], ids=["auto", "njit", "nojit"])
def test_pop_of_a_list_grown_at_run_time(kw):
    """lst.pop() / lst.pop(-1) of a list grown in a runtime loop (gen_lang refused it): the last row and the
    count one less; popping an empty list raises Python's IndexError, compiled too."""
    from tests.support import assert_value_and_gradient
    assert_value_and_gradient(_pop_from_a_runtime_list, (0.7, np.array([1.0, 2.0]), 4), (0, 1), **kw)
    with pytest.raises(IndexError, match="pop from empty list"):
        funcgrad.grad(_pop_from_a_runtime_list, **kw)(0.7, np.array([1.0, 2.0]), 1)


# [c] * n with n known at run time, and lst[i] = v on a list whose length is known at run time: the list's
# buffer row i (negative i from the end; out of range is Python's IndexError, compiled too)
def repeated_then_set(x, a, n):
    t3 = [0.0] * n
    for i4 in range(n):
        t3[i4] = a[i4 % 3] * x
    return sum(t3)


def repeated_argument_updated_and_grown(x, a, n):
    acc = [x] * n
    for i in range(n):
        acc[i] = acc[i] * a[i % 3] + i
    acc.append(x * 2.0)
    return np.sum(np.array(acc) ** 2) + len(acc)


def repeated_by_a_length(x, a):
    t = [0.0] * a.shape[0]
    for i in range(a.shape[0]):
        t[i] = a[i] * x
    return sum(t)


def grown_then_set_from_both_ends(x, a, n):
    L = []
    for i in range(n):
        L.append(x * i + a[i % 3])
    L[0] = 5.0 * x
    L[-1] = L[-1] * 2.0
    return sum(L)


def rows_grown_then_one_replaced(x, a, n):
    rows = []
    for i in range(n):
        rows.append(a * x * i)
    rows[1] = np.sin(a) * x
    return np.sum(np.stack(rows) ** 2)


def set_past_the_end(x, a, n):
    t = [0.0] * n
    t[n] = x
    return sum(t)


_RA = np.array([0.3, -0.5, 0.9])


@pytest.mark.parametrize("kw", [{}, {"jit": "whole"}, {"jit": False}], ids=["auto", "whole", "nojit"])
@pytest.mark.parametrize("f, args", [
    (repeated_then_set, (0.7, _RA, 5)), (repeated_then_set, (0.7, _RA, 0)), (repeated_then_set, (0.7, _RA, -2)),
    (repeated_argument_updated_and_grown, (0.7, _RA, 4)), (repeated_by_a_length, (0.7, _RA)),
    (grown_then_set_from_both_ends, (0.7, _RA, 4)), (rows_grown_then_one_replaced, (0.7, _RA, 3))],
    ids=["repeated", "repeated_none", "repeated_negative", "argument_repeated", "by_length", "grown_set",
         "rows_set"])
def test_repeated_lists_and_items_set_at_run_time(f, args, kw):
    from tests.support import assert_value_and_gradient
    assert_value_and_gradient(f, args, (0, 1), **kw)


@pytest.mark.parametrize("kw", [{}, {"jit": "whole"}, {"jit": False}], ids=["auto", "whole", "nojit"])
def test_setting_an_item_out_of_range_is_pythons_index_error(kw):
    with pytest.raises(IndexError, match="list assignment index out of range"):
        funcgrad.grad(set_past_the_end, **kw)(0.7, _RA, 3)
    with pytest.raises(IndexError, match="list assignment index out of range"):
        funcgrad.grad(grown_then_set_from_both_ends, **kw)(0.7, _RA, 0)


def grown_then_reversed(x, a, n):
    t = []
    for i in range(n):
        t.append(a[i % 3] * x + i)
    t.reverse()
    return t[0] * 2.0 + sum(t) + t[-1] ** 2


def rows_reversed_then_cleared(x, a, n):
    rows = []
    for i in range(n):
        rows.append(a * (x + i))
    rows.reverse()
    s = rows[0] @ a
    rows.clear()
    rows.append(a * x)
    return s + np.sum(np.stack(rows)) + len(rows)


@pytest.mark.parametrize("kw", [{}, {"jit": "whole"}, {"jit": False}], ids=["auto", "whole", "nojit"])
@pytest.mark.parametrize("f, args", [(grown_then_reversed, (0.7, _RA, 4)), (grown_then_reversed, (0.7, _RA, 1)),
                                     (rows_reversed_then_cleared, (0.7, _RA, 3))],
                         ids=["reversed", "reversed_one", "rows_reversed_cleared"])
def test_reverse_and_clear_of_a_list_grown_at_run_time(f, args, kw):
    from tests.support import assert_value_and_gradient
    assert_value_and_gradient(f, args, (0, 1), **kw)
