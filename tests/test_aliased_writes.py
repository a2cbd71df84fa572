"""Writes into an array another name holds: ``x += v`` (``*=``, ``-=``, ``/=``) and ``x[i] = v``. NumPy writes into
the array, so every name holding it sees the new values. The generated code binds a new array for ``x += v``
(and the reverse pass keeps one cotangent per name), and :func:`funcgrad.transform.aliases.rebind_aliases`
rebinds every other name that must hold the same array right after the write. A write through a view
``v = B[idx]`` is written back (``B[idx] = v``, NumPy's no-op) and a view of an array written into is made
again; a write through ``v = B.T`` makes ``B`` ``v.T`` again. Names that hold the array on some paths only, other
views (``np.flip``), and reshapes (a view or a copy, by the memory layout at run time) are refused at the line."""
import numpy as np
import pytest

import funcgrad
from funcgrad.errors import UnsupportedSyntaxError
from tests.support import assert_value_and_gradient

MODES = [dict(mode="auto"), dict(mode="python"), dict(mode="njit"), dict(jit=False)]
MODE_IDS = ["auto", "python", "njit", "nojit"]
X = np.array([0.3, -0.5, 0.9])


def straight_line(x):
    c = np.sin(x)
    y = c
    y *= 2.0
    return np.sum(c * x)


def chain_of_names(x):
    c = np.sin(x)
    y = c
    z = y
    z *= x
    return np.sum(c) + np.sum(y * x)


def alias_before_a_loop(x):
    y = x * 1.0
    c = y
    for i in range(3):
        y *= 1.5
        y -= x * i
    return np.sum(c * x)


def alias_made_in_the_loop(x, n):
    c = np.cos(x)
    total = 0.0
    for i in range(n):
        y = c
        y /= 1.0 + x * x
        total = total + np.sum(c)
    return total + np.sum(c * x)


def add_into(out, v):
    out += v


def accumulate_in_a_helper(x):
    acc = np.zeros_like(x)
    for i in range(4):
        add_into(acc, x * i)
    return np.sum(acc * x)


def scale(out, s):
    out *= s
    return out


def helper_returns_its_argument(x):
    c = np.exp(x)
    d = scale(c, 3.0)
    return np.sum(c * x) + np.sum(d)


def item_of_a_list(x):
    L = [np.sin(x), x]
    y = L[0]
    y *= 3.0
    return np.sum(L[0] * L[1])


def returned_both(x):
    c = np.cos(x)
    y = c
    y -= x
    return c, y


def matrix_alias(x):
    M = np.ones((3, 3)) * x
    R = M
    R *= x[:, None]
    return np.sum(M @ x)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("f, args", [
    (straight_line, (X,)), (chain_of_names, (X,)), (alias_before_a_loop, (X,)), (alias_made_in_the_loop, (X, 3)),
    (accumulate_in_a_helper, (X,)), (helper_returns_its_argument, (X,)), (item_of_a_list, (X,)),
    (matrix_alias, (X,))], ids=lambda a: getattr(a, "__name__", ""))
def test_every_name_of_the_array_sees_the_write(f, args, kw):
    assert_value_and_gradient(f, args, 0, **kw)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_both_names_returned(kw):
    def loss(x):
        c, y = returned_both(x)
        return np.sum(np.sin(c) * y)
    assert_value_and_gradient(loss, (X,), 0, **kw)
    c, y = funcgrad.jit(returned_both)(X)
    np.testing.assert_allclose(c, np.cos(X) - X, rtol=1e-12)
    np.testing.assert_allclose(y, np.cos(X) - X, rtol=1e-12)


def test_forward_mode_and_second_order():
    v = np.array([1.0, -0.5, 2.0])
    eps = 1e-6
    for f in (straight_line, alias_before_a_loop, accumulate_in_a_helper):
        out, tan = funcgrad.jvp(f, (X,), (v,))
        assert out == pytest.approx(f(X), rel=1e-12)
        assert tan == pytest.approx((f(X + eps * v) - f(X - eps * v)) / (2 * eps), rel=1e-6)
        H = funcgrad.hessian(f)(X)
        g = funcgrad.grad(f)
        want = np.array([(g(X + 1e-5 * e) - g(X - 1e-5 * e)) / 2e-5 for e in np.eye(3)])
        np.testing.assert_allclose(H, want, rtol=1e-5, atol=1e-6)


def fill(out, x, k):
    out[k] = x[k] ** 2


def helper_writes_an_element_in_a_loop(x):
    buf = np.zeros_like(x)
    for k in range(3):
        fill(buf, x, k)
    return np.sum(buf * x)


def alias_made_in_the_loop_then_element_writes(x):
    a = np.sin(x)
    for k in range(2):
        b = a
        a[k] = b[k + 1] ** 2
        b[k + 1] = a[k] * 3.0
    return np.sum(a * b)


def element_write_then_rebind_in_the_loop(x):
    a = x * 1.0
    for k in range(3):
        b = a
        b[k] = a[(k + 1) % 3] * x[k]
        a = a * 1.1
    return np.sum(a * x) + np.sum(b)


def diagonal_through_an_alias(x):
    M = np.outer(x, x)
    R = M
    for i in range(3):
        R[i, i] = x[i] ** 3
    return np.sum(M @ x)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("f", [helper_writes_an_element_in_a_loop, alias_made_in_the_loop_then_element_writes,
                               element_write_then_rebind_in_the_loop, diagonal_through_an_alias],
                         ids=lambda f: f.__name__)
def test_element_writes_are_seen_through_every_name(f, kw):
    assert_value_and_gradient(f, (X,), 0, **kw)
    v = np.array([1.0, 2.0, -1.0])
    out, tan = funcgrad.jvp(f, (X,), (v,), **kw)
    assert out == pytest.approx(f(X.copy()), rel=1e-12)
    assert tan == pytest.approx((f(X + 1e-6 * v) - f(X - 1e-6 * v)) / 2e-6, rel=1e-6, abs=1e-8)


def row_views_in_a_loop(x):
    A = np.outer(x, x) + 1.0
    for i in range(3):
        row = A[i]
        row[(i + 1) % 3] = x[i] ** 2
    return np.sum(A @ x)


def augmented_through_row_views(x):
    A = np.outer(x, x) + 1.0
    for i in range(3):
        row = A[i]
        row *= x[i]
    return np.sum(A * A)


def view_of_a_view(x):
    A = np.outer(x, x)
    r = A[1]
    q = r[1:]
    q[0] = np.sin(x[0])
    return np.sum(A) + np.sum(r * q[0])


def new_axis_view(x):
    c = x.copy()
    v = c[None]
    v *= 3.0
    return np.sum(c * x) + np.sum(v)


def two_views_then_a_write_into_the_base(x):
    A = np.outer(x, x)
    a = A[0]
    b = A[:, 1]
    A[0, 1] = x[2] ** 3
    return np.sum(a * b) + np.sum(A)


def tail_views_at_run_time(x, n):
    a = x * 1.0
    for k in range(n):
        tail = a[k % 2:]
        tail += x[k % 3]
    return np.sum(a * a)


def view_made_before_the_loop(x):
    A = np.outer(x, x)
    r = A[2]
    for j in range(3):
        r[j] = r[j] * x[j]
    return np.sum(A * x)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("f, args", [
    (row_views_in_a_loop, (X,)), (augmented_through_row_views, (X,)), (view_of_a_view, (X,)),
    (new_axis_view, (X,)), (two_views_then_a_write_into_the_base, (X,)), (tail_views_at_run_time, (X, 5)),
    (view_made_before_the_loop, (X,))], ids=lambda a: getattr(a, "__name__", ""))
def test_writes_through_views_and_into_viewed_arrays(f, args, kw):
    assert_value_and_gradient(f, args, 0, **kw)
    v = np.array([1.0, 2.0, -1.0])
    out, tan = funcgrad.jvp(f, args, (v,) + (0,) * (len(args) - 1), **kw)
    assert out == pytest.approx(f(*args), rel=1e-12)
    want = (f(X + 1e-6 * v, *args[1:]) - f(X - 1e-6 * v, *args[1:])) / 2e-6
    assert tan == pytest.approx(want, rel=1e-6, abs=1e-8)


B2 = np.array([[0.3, -0.2, 0.7], [1.1, 0.4, -0.6]])


def element_write_through_a_transpose(x, B):
    c = B * x
    v = c.T
    v[0, 1] = x ** 2
    return np.sum(c * B) + np.sum(v)


def augmented_through_transposed_axes(x, B):
    c = B * 1.0
    v = np.transpose(c, (1, 0))
    v[0] += x
    return np.sum(c ** 2)


# NumPy's reshape and ravel are views only where the memory layout allows (a copy of a transposed array, of an
# F-ordered result): whether the write is seen is decided at run time, so these stay refused
def write_into_an_array_a_ravel_shows(x, B):
    c = B * x
    v = c.ravel()
    c[0, 0] += x
    return np.sum(c) + np.sum(v * v)


def element_write_through_a_flat_reshape(x, B):
    c = B.copy()
    v = c.reshape(-1)
    v[0] = x
    return np.sum(c * B) + np.sum(v)


def two_names_and_a_transpose(x, B):
    c = B * x
    d = c
    t = c.T
    t *= 2.0
    return np.sum(c * B) + np.sum(d)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("f, line", [(write_into_an_array_a_ravel_shows, "c[0, 0] += x"),
                                     (element_write_through_a_flat_reshape, "v[0] = x")],
                         ids=["ravel", "reshape"])
def test_writes_through_reshaped_views_are_refused(f, line, kw):
    with pytest.raises(UnsupportedSyntaxError, match="shares its memory") as e:
        funcgrad.value_and_grad(f, argnums=(0, 1), **kw)(0.7, B2)
    assert "test_aliased_writes.py" in str(e.value) and line in str(e.value)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("f", [element_write_through_a_transpose, augmented_through_transposed_axes,
                               two_names_and_a_transpose], ids=lambda f: f.__name__)
def test_writes_through_transposed_views(f, kw):
    assert_value_and_gradient(f, (0.7, B2), (0, 1), **kw)
    out, tan = funcgrad.jvp(f, (0.7, B2), (1.0, np.ones_like(B2)), **kw)
    assert out == pytest.approx(f(0.7, B2), rel=1e-12)
    assert tan == pytest.approx((f(0.7 + 1e-6, B2 + 1e-6) - f(0.7 - 1e-6, B2 - 1e-6)) / 2e-6, rel=1e-6)


def view_written_on_one_branch(x):
    A = np.outer(x, x)
    r = A[1]
    if x[0] > 0:
        r[0] = x[2] ** 2
    else:
        A[1, 2] = 3.0 * x[0]
    return np.sum(A * A) + np.sum(r)


def _set_second(out, v):
    row = out[0]
    row[1] = v


def helper_writes_through_a_row_of_the_callers_array(x):
    A = np.outer(x, x)
    _set_second(A, np.sin(x[0]))
    return np.sum(A @ x)


def row_views_in_a_while_loop(x, n):
    A = np.outer(x, x) + 1.0
    k = 0
    while k < n:
        row = A[k % 3]
        row *= 1.0 + x[k % 3]
        k += 1
    return np.sum(A * A)


def column_view_read_while_the_array_is_written(x, n):
    A = np.outer(x, x)
    r = A[:, 1]
    acc = 0.0
    for i in range(n):
        acc = acc + np.sum(r * x)
        A[i % 3, 1] = acc
    return acc + np.sum(A)


def row_of_a_transposed_view(x):
    A = np.outer(x, x)
    T = A.T
    r = T[2]
    r[0] = x[1] ** 3
    return np.sum(A * A) + np.sum(T[:, 0])


def slice_of_an_alias(x):
    y = x * 2.0
    z = y
    w = z[1:]
    w += 1.0
    return np.sum(y * x) + np.sum(z) + np.sum(w)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("f, args", [
    (view_written_on_one_branch, (X,)), (view_written_on_one_branch, (-X,)),
    (helper_writes_through_a_row_of_the_callers_array, (X,)), (row_views_in_a_while_loop, (X, 5)),
    (column_view_read_while_the_array_is_written, (X, 4)), (row_of_a_transposed_view, (X,)),
    (slice_of_an_alias, (X,))],
    ids=["branch", "other_branch", "helper_row", "while_rows", "column_view", "transposed_row", "slice_of_alias"])
def test_views_across_branches_helpers_and_loops(f, args, kw):
    assert_value_and_gradient(f, args, 0, **kw)
    v = np.array([1.0, 2.0, -1.0])
    out, tan = funcgrad.jvp(f, args, (v,) + (0,) * (len(args) - 1), **kw)
    want = (f(args[0] + 1e-6 * v, *args[1:]) - f(args[0] - 1e-6 * v, *args[1:])) / 2e-6
    assert tan == pytest.approx(want, rel=1e-6, abs=1e-8)


def view_from_an_earlier_trip(x, n):
    A = np.outer(x, x)
    r = A[0]
    for i in range(n):
        r[i % 3] = r[(i + 1) % 3] * x[i % 3]   # from the second trip on, r is the row the last trip chose
        A = A * 1.01
        r = A[i % 3]
    return np.sum(A) + np.sum(r)


def test_a_view_a_loop_makes_differently_on_later_trips_is_refused_not_wrong():
    # the first trip alone would have written r back into A[0]; the analysis decides at its fixpoint, where r is
    # A[0] or a row chosen by an earlier trip's counter, and refuses (a write-back into A[0] every trip was wrong)
    with pytest.raises(UnsupportedSyntaxError, match="shares its memory") as e:
        funcgrad.value_and_grad(view_from_an_earlier_trip)(X, 4)
    assert "r[i % 3] = r[(i + 1) % 3] * x[i % 3]" in str(e.value)


def view_chosen_on_a_branch(x):
    A = np.outer(x, x)
    if x[0] > 0:
        r = A[0]
    else:
        r = A[1]
    r[0] = 5.0
    return np.sum(A)


def test_a_view_chosen_at_run_time_is_refused():
    with pytest.raises(UnsupportedSyntaxError, match="shares its memory") as e:
        funcgrad.grad(view_chosen_on_a_branch)(X)
    assert "test_aliased_writes.py" in str(e.value) and "r[0] = 5.0" in str(e.value)


def the_caller_s_array(a):
    y = a
    y *= 2.0
    return np.sum(a * a)


def test_an_argument_is_never_written():
    # funcgrad's functions are pure: the caller's array keeps its values (NumPy would double them), the value
    # and gradient are those of the function as Python computes it on a fresh copy
    a = X.copy()
    v, g = funcgrad.value_and_grad(the_caller_s_array)(a)
    np.testing.assert_array_equal(a, X)
    assert v == pytest.approx(4 * np.sum(X * X), rel=1e-12)
    np.testing.assert_allclose(g, 8 * X, rtol=1e-12)


def on_one_path_only(x):
    y = x * 1.0
    w = x * 2.0
    z = y if x[0] > 0 else w
    z += 1.0
    return np.sum(y * x)


def through_a_reversed_view(x):
    y = x * 1.0
    z = np.flip(y)
    z *= 2.0
    return np.sum(y * x)


def alias_from_an_earlier_iteration(x):
    prev = x * 0.0
    for i in range(3):
        y = x * (i + 1.0)
        if i == 0:
            prev = y   # the first iteration's array; the write below reaches it only then
        y *= 2.0
    return np.sum(prev * x)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("f, line", [(on_one_path_only, "z += 1.0"), (through_a_reversed_view, "z *= 2.0"),
                                     (alias_from_an_earlier_iteration, "y *= 2.0")],
                         ids=["one_path", "reversed_view", "earlier_iteration"])
def test_writes_not_known_to_reach_one_whole_array_are_refused(f, line, kw):
    with pytest.raises(UnsupportedSyntaxError, match="writes into the array it holds") as e:
        funcgrad.value_and_grad(f, **kw)(X)
    assert "test_aliased_writes.py" in str(e.value) and line in str(e.value)


def argument_or_alias_by_branch(x, b):
    a = x * 2.0
    if x[0] > 0:
        b = a
    b[0] = 7.0 * x[1]      # a sees the write on the branch's path only
    return np.sum(a * x) + np.sum(b * x)


def alias_from_one_trip_of_a_loop(x):
    a = x * 2.0
    b = x * 3.0
    for i in range(3):
        if i == 1:
            b = a
        b[i] = x[i] ** 2
    return np.sum(a * x) + np.sum(b)


def alias_of_the_old_array(x):
    a = x * 2.0
    b = a
    a = a + 1.0
    b[0] = 5.0             # b is the old array: the new a does not see it
    return np.sum(a * x) + np.sum(b * x)


def chain_of_copies_written_in_a_loop_body(x):
    a = x * 1.0
    for k in range(3):
        b = a
        b[k] = a[(k + 1) % 3] * x[k]
        a = a * 1.1        # a new array each trip; b = a made it one with a again first
    return np.sum(a * x) + np.sum(b)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_copies_decide_one_array_on_every_path_or_refuse(kw):
    # one array on every path, whichever array it is (b = a just before, in the same trip): right; one array on
    # some paths only (a parameter or another array elsewhere): refused, never the branch's answer for both
    assert_value_and_gradient(alias_of_the_old_array, (X,), 0, **kw)
    assert_value_and_gradient(chain_of_copies_written_in_a_loop_body, (X,), 0, **kw)
    for f, args in [(argument_or_alias_by_branch, (X, X * 5.0)), (alias_from_one_trip_of_a_loop, (X,))]:
        with pytest.raises(UnsupportedSyntaxError, match="shares its memory"):
            funcgrad.value_and_grad(f, **kw)(*[a.copy() for a in args])


def row_of_an_array_rebound_by_a_shift(x, n):
    A = np.outer(x, x)
    for i in range(n):
        r = A[i % 3]
        A = A + 1.0        # a new array; its tangent was A's own tangent object, which r's tangent views
        r[0] = x[i % 3]
    return np.sum(A) + np.sum(r)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_forward_mode_tangent_of_an_array_written_through_a_view_is_its_own(kw):
    # the tangent of A + 1.0 was A's tangent itself: the write through r's tangent (a view of it) changed the new
    # A's tangent too (jvp 7.2 where differences give 19.1); a tangent of an array written through a view is copied
    v = np.array([1.0, 2.0, -1.0])
    out, tan = funcgrad.jvp(row_of_an_array_rebound_by_a_shift, (X, 3), (v, 0), **kw)
    f = row_of_an_array_rebound_by_a_shift
    assert out == pytest.approx(f(X, 3), rel=1e-12)
    assert tan == pytest.approx((f(X + 1e-6 * v, 3) - f(X - 1e-6 * v, 3)) / 2e-6, rel=1e-6)
    assert_value_and_gradient(f, (X, 3), 0, **kw)
