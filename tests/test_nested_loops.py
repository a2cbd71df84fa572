"""grad and jvp of a function that calls grad (or vjp) inside, through loops over a run-time trip count.

The inner gradient is funcgrad's reverse-mode code, read back and differentiated again: its tapes are
sized by ``len(range(n))``, nested loops pop their inner trip counts, loops written out (n known while
transforming) fill list tapes that the reversed loop indexes, and in-place writes ``y[i] = ...`` leave
``written``/``index_add`` in it. Each program is checked against central differences of the first-order
gradient funcgrad gets right, in float64, in every mode; a list grown at run time is refused at the user's
call (its tape holds arrays of changing length), and so is an inner loop over a run-time trip count that
rebuilds an array of another shape at every trip (the inner gradient's record of it is ragged). Slice writes
inside (``y[i:i + 2] = ...``) are differentiated again: the slices the inner gradient keeps are read back as
the values they had when read.
"""
import numpy as np
import pytest

import funcgrad
from funcgrad.errors import UnsupportedSyntaxError

N = 3
X = np.array([0.3, 0.7, 1.1])
MODES = {"python": "kernels", "njit": "whole", "nojit": False}


def scalar_loop(a, n):
    s = a
    for i in range(n):
        s = np.sin(s) * a
    return s


def branch_loop(a, n):
    s = a
    for i in range(n):
        if s > 0.5:
            s = s * a
        else:
            s = s + np.cos(a)
    return s


def nested_loops(a, n):
    s = a
    for i in range(n):
        for j in range(n):
            s = np.sin(s) * a
    return s


def rows_inplace(x, n):
    y = np.zeros_like(x)
    for i in range(n):
        y[i] = np.sin(x[i]) * x[i]
    return np.sum(y * y)


def nested_rows(x, n):
    y = x * 1.0
    for i in range(n):
        for j in range(n):
            y[j] = np.sin(y[j]) * x[i]
    return np.sum(y)


def while_loop(a, n):
    s = a
    k = 0
    while k < n:
        s = np.sin(s) * a
        k += 1
    return s


SCALAR = {"scalar": scalar_loop, "branch": branch_loop, "nested": nested_loops, "while": while_loop}
ARRAY = {"rows": rows_inplace, "nested_rows": nested_rows}


def _outer(f, inside):
    """A function of (a, n) that takes the gradient of ``f`` inside (grad or vjp), summed through cos for
    arrays so the outer function is a scalar."""
    if inside == "grad":
        def g(a, n):
            return funcgrad.grad(f)(a, n)
    else:
        def g(a, n):
            _, pull = funcgrad.vjp(lambda b: f(b, n), a)
            return pull(1.0)[0]
    if f in ARRAY.values():
        return lambda a, n: np.sum(np.cos(g(a, n)))
    return g


def _fd(h, x, eps=1e-6):
    if np.ndim(x):
        return np.array([(h(x + eps * e, N) - h(x - eps * e, N)) / (2 * eps) for e in np.eye(x.size)])
    return (h(x + eps, N) - h(x - eps, N)) / (2 * eps)


def _check(f, x, inside, mode):
    h = _outer(f, inside)
    want = _fd(h, x)
    got = funcgrad.grad(h, jit=MODES[mode])(x, N)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
    v = np.linspace(0.5, 1.5, np.size(x)).reshape(np.shape(x)) if np.ndim(x) else 1.0
    _, t = funcgrad.jvp(lambda b: h(b, N), (x,), (v,), jit=MODES[mode])
    np.testing.assert_allclose(t, np.sum(want * v), rtol=1e-6, atol=1e-8)


# one mode per program by default (each compiles fresh code); the full grid is the sweep
_DEFAULT = {("scalar", "njit"), ("branch", "python"), ("nested", "nojit"), ("while", "njit"),
            ("rows", "python"), ("nested_rows", "njit")}


def _grid(progs):
    return [pytest.param(name, mode, marks=() if (name, mode) in _DEFAULT else pytest.mark.sweep)
            for name in progs for mode in MODES]


@pytest.mark.parametrize("name, mode", _grid(SCALAR))
def test_grad_and_jvp_of_a_function_calling_grad_of_a_scalar_loop(name, mode):
    _check(SCALAR[name], 0.8, "grad", mode)


@pytest.mark.parametrize("name, mode", _grid(ARRAY))
def test_grad_and_jvp_of_a_function_calling_grad_of_a_loop_with_inplace_writes(name, mode):
    _check(ARRAY[name], X, "grad", mode)


@pytest.mark.parametrize("name", ["scalar", "nested", "nested_rows"])
def test_grad_and_jvp_of_a_function_calling_vjp_of_a_loop(name):
    f = {**SCALAR, **ARRAY}[name]
    _check(f, X if name in ARRAY else 0.8, "vjp", "python")


def _inner_grad(a, n):
    return funcgrad.grad(scalar_loop)(a, n)


def test_the_issue_reproducer_every_way():
    """grad, jvp (the trip count's tangent zero) and hessian of a function calling grad(f)(a, n), and the
    grad of grad and hessian of f that already worked, all agree with central differences."""
    want = _fd(_inner_grad, 1.1)
    assert funcgrad.grad(_inner_grad)(1.1, N) == pytest.approx(want, rel=1e-7)
    assert funcgrad.jvp(_inner_grad, (1.1, N), (1.0, 0))[1] == pytest.approx(want, rel=1e-7)
    assert funcgrad.grad(funcgrad.grad(scalar_loop))(1.1, N) == pytest.approx(want, rel=1e-7)
    assert funcgrad.hessian(scalar_loop)(1.1, N) == pytest.approx(want, rel=1e-7)
    # the compiled outer gradient equals the Python one
    assert funcgrad.grad(_inner_grad, jit="whole")(1.1, N) == pytest.approx(
        funcgrad.grad(_inner_grad, jit=False)(1.1, N), rel=1e-12)


def _grown_list(a, n):
    xs = []
    s = a
    for i in range(n):
        s = np.sin(s) * a
        xs.append(s)
    return sum(xs)


def test_jvp_inside_of_a_list_grown_at_run_time_is_differentiated():
    """Forward-mode code has no tapes: jvp of such a function, inside, is differentiated again."""
    def h(a, n):
        return funcgrad.jvp(lambda b: _grown_list(b, n), (a,), (1.0,))[1]
    assert funcgrad.grad(h, jit="kernels")(0.8, N) == pytest.approx(_fd(h, 0.8), rel=1e-6)


@pytest.mark.parametrize("inside", ["grad", "vjp"])
def test_grad_inside_of_a_list_grown_at_run_time_is_refused_at_the_users_line(inside):
    h = _outer(_grown_list, inside)
    with pytest.raises(UnsupportedSyntaxError) as e:
        funcgrad.grad(h)(0.8, N)
    msg = str(e.value)
    assert "test_nested_loops.py" in msg.splitlines()[0]
    assert "the list 'xs' appended to at" in msg and "cannot be differentiated again" in msg
    assert "np.zeros(n)" in msg
    assert "Traceback" not in msg and "_rows" not in msg


def test_pop_of_a_users_list_grown_at_run_time():
    """pop() of the user's own list that grows while the function runs: its last item (the generated code
    raises IndexError when the list is empty, tests/test_list_loops.py); pop(0) stays refused."""
    def f(a, n):
        xs = [a]
        for i in range(n):
            xs.append(xs[-1] * a)
        return xs.pop()

    def first(a, n):
        xs = [a]
        for i in range(n):
            xs.append(xs[-1] * a)
        return xs.pop(0)
    np.testing.assert_allclose(funcgrad.grad(f)(0.8, N), (N + 1) * 0.8 ** N, rtol=1e-12)
    with pytest.raises(UnsupportedSyntaxError, match="pop"):
        funcgrad.grad(first)(0.8, N)


def test_pop_of_a_list_known_while_transforming():
    def f(a):
        xs = [a, a * a, np.sin(a)]
        last = xs.pop()
        return last * np.sum(np.stack(xs))
    eps = 1e-6
    want = (f(0.8 + eps) - f(0.8 - eps)) / (2 * eps)
    assert funcgrad.grad(f, jit=False)(0.8) == pytest.approx(want, rel=1e-7)


def stepped(a, n):
    s = a
    for i in range(1, n, 2):          # the tape is sized by len(range(1, n, 2))
        s = np.sin(s) * a + i
    return s


def over_rows(x, n):
    s = 0.0
    for r in x:
        s = s + np.sin(r) * s + r
    return s * n


def test_grad_of_a_function_calling_grad_of_a_stepped_range_and_a_loop_over_rows():
    h = _outer(stepped, "grad")
    assert funcgrad.grad(h, jit=False)(0.8, 6) == pytest.approx(
        (h(0.8 + 1e-6, 6) - h(0.8 - 1e-6, 6)) / 2e-6, rel=1e-6)
    h = lambda a, n: np.sum(np.cos(funcgrad.grad(over_rows)(a, n)))
    np.testing.assert_allclose(funcgrad.grad(h, jit="kernels")(X, N), _fd(h, X), rtol=1e-6, atol=1e-8)


def _checkpointed_matrix_loop(x, n):
    W = np.outer(x, x)
    h = x
    for i in range(n):
        h = np.tanh(W @ h)
    return np.sum(h)


def test_grad_inside_with_checkpoint_loops_is_refused_at_the_users_line():
    def h(x, n):
        return np.sum(funcgrad.grad(_checkpointed_matrix_loop, checkpoint_loops=True)(x, n))
    with pytest.raises(UnsupportedSyntaxError) as e:
        funcgrad.grad(h)(X, N)
    first = str(e.value).splitlines()[0]
    assert "test_nested_loops.py" in first and "checkpoint_loops" in first and "differentiated again" in first
    # without it, the same program is differentiated again
    def h2(x, n):
        return np.sum(funcgrad.grad(_checkpointed_matrix_loop)(x, n))
    np.testing.assert_allclose(funcgrad.grad(h2, jit=False)(X, N), _fd(h2, X), rtol=1e-6, atol=1e-8)


def _slice_writes(x, n):
    y = x * 1.0
    for i in range(n):
        y[i:i + 2] = y[i:i + 2] + np.sin(y[i + 1:i + 3])
    return np.sum(y * y)


@pytest.mark.parametrize("mode", [m if m != "nojit" else pytest.param(m, marks=pytest.mark.sweep) for m in MODES])
def test_slice_writes_inside_a_gradient_taken_inside(mode):
    """The inner gradient keeps the slices it reads (views of y) and restores y before reading them in its
    reverse loop; read back, each slice is the value it had when read: grad and jvp of the outer function agree
    with central differences."""
    def h(x, n):
        return np.sum(funcgrad.grad(_slice_writes)(x, n) ** 2)
    x = np.linspace(0.1, 1.0, 8)
    want = np.array([(h(x + 1e-6 * e, 4) - h(x - 1e-6 * e, 4)) / 2e-6 for e in np.eye(8)])
    np.testing.assert_allclose(funcgrad.grad(h, jit=MODES[mode])(x, 4), want, rtol=1e-6, atol=1e-6)
    _, t = funcgrad.jvp(lambda b: h(b, 4), (x,), (np.ones(8),), jit=MODES[mode])
    assert t == pytest.approx(np.sum(want), rel=1e-7)


def _rebuilt(a, n):
    x = np.array([a])
    for i in range(n):                 # x changes shape at every trip: the gradient records arrays of 1, 2, 3 numbers
        x = np.concatenate([x, np.sin(x[-1:]) * a])
    return np.sum(x * x)


def _grad_of_rebuilt(a, n):
    return funcgrad.grad(_rebuilt)(a, n) * a          # the call the refusal names


@pytest.mark.parametrize("mode", list(MODES))
def test_grad_inside_recording_an_array_that_changes_shape_is_refused_at_the_users_call(mode):
    """The inner gradient records ``x`` at every trip of a loop that runs (n is not known while transforming),
    and ``x`` grows; its record read back is the rows of one array, so differentiating it again is refused at the
    user's call of grad, as funcgrad's refusal, never NumPy's shape error or a line of funcgrad's file."""
    with pytest.raises(funcgrad.errors.NoDerivativeError) as e:
        funcgrad.grad(_grad_of_rebuilt, jit=MODES[mode])(0.7, N)
    assert e.value.filename == __file__
    assert e.value.lineno == _grad_of_rebuilt.__code__.co_firstlineno + 1
    msg = str(e.value)
    assert "changes shape from one trip to the next" in msg and "differentiating this gradient again" in msg
    assert "funcgrad_generated" not in msg and "_tape" not in msg and "refuses:" not in msg


@pytest.mark.parametrize("mode", list(MODES))
def test_jvp_of_grad_of_a_loop_rebuilding_an_array_with_a_known_trip_count(mode):
    """With the trip count known while transforming, the loop is written out and the reversed loop picks the
    recorded arrays of 1, 2, 3 numbers by index: differentiated again, right against central differences."""
    def h(a):
        return funcgrad.grad(_rebuilt)(a, 3)
    want = (h(0.7 + 1e-6) - h(0.7 - 1e-6)) / 2e-6
    assert funcgrad.jvp(h, (0.7,), (1.0,), jit=MODES[mode])[1] == pytest.approx(want, rel=1e-6)
    assert funcgrad.grad(h, jit=MODES[mode])(0.7) == pytest.approx(want, rel=1e-6)
