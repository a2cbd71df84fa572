"""The Python people really write, part 2 (issue 15): what the real programs in tests/programs/ needed.

* lists whose length is only known when the function runs: appended in a loop over a runtime range, a
  ``while`` loop or a branch on array values, then stacked, summed, indexed, iterated or zipped;
* comprehensions and generator expressions over runtime values (``[f(x[k]) for k in range(n)]``);
* ``*args`` and ``**kwargs`` in the differentiated function's own signature; starred assignment targets.

Every construct runs in every mode (``jit`` auto, "kernels" = Python over compiled kernels, "whole" =
whole-function Numba, False = plain Python); values are compared with the plain function and gradients
with central differences in float64. Refusals name the user's line and say what to do.
"""
import os

import numpy as np
import pytest

import funcgrad
from funcgrad.errors import FuncgradError
from funcgrad.testing import numerical_vjp
from tests.support import tagged_line

JITS = ["auto", "kernels", "whole", False]
JIT_IDS = ["auto", "python", "njit", "nojit"]
HERE = os.path.abspath(__file__)
rng = np.random.default_rng(15)
x3 = rng.normal(size=3)
M = rng.normal(size=(4, 3))


def _line(tag):
    return tagged_line(HERE, tag)


# ----------------------------------------------------------------------------------- runtime lists
def append_in_runtime_loop(x, n):
    ys = []
    for i in range(n):
        ys.append(np.sin(x * (i + 1.0)))
    return np.sum(np.stack(ys) ** 2) + len(ys)


def append_with_items_before(y0, ts):
    ys = [y0]
    y = y0
    for i in range(len(ts) - 1):
        y = y + (ts[i + 1] - ts[i]) * np.cos(y)
        ys.append(y)
    traj = np.array(ys)
    return np.sum(traj * traj) + np.sum(ys[-1]) + np.sum(ys[1])


def scalars_summed(x, n):
    errors = []
    for t in range(n):
        errors.append(np.sum((x - t) ** 2))
    return sum(errors) / len(errors)


def append_in_while_and_branch(x, n):
    kept = []
    i = 0
    while i < n:
        v = x * (i + 0.5)
        if np.sum(v) > 0.0:
            kept.append(np.tanh(v))
        else:
            kept.append(v * v)
        i += 1
    return np.sum(np.stack(kept, axis=1)) + np.sum(kept[0])


def nested_lists(M):
    rows = []
    for i in range(M.shape[0]):
        row = []
        for j in range(M.shape[1]):
            row.append(M[i, j] * M[i, (j + 1) % M.shape[1]])
        row.append(np.sum(M[i]))            # appended after the inner loop: still the same row
        rows.append(np.stack(row))
    return np.sum(np.stack(rows) ** 2)


def list_made_and_used_inside_the_loop(M):
    total = 0.0
    for i in range(M.shape[0]):
        parts = []
        parts.append(M[i] * 2.0)
        parts.append(np.sin(M[i]))
        total = total + np.sum(np.concatenate(parts))
    return total


def read_back_inside_the_loop(x, n):
    hs = [x]
    for t in range(n):
        hs.append(np.tanh(hs[-1] * 1.5 + 0.1 * t))
    out = 0.0
    for h in hs:
        out = out + np.sum(h)
    for a, b in zip(hs[:-1], hs[1:]):
        out = out + np.sum(a * b)
    return out + np.sum(np.concatenate(hs)) + np.sum(hs)


def extend_and_plus_equals(x, n):
    acc = []
    for i in range(n):
        acc += [x * i]
        acc.extend([x + i, x - i])
    return np.sum(np.stack(acc) ** 2)


def alias_sees_the_growth(x, n):
    a = []
    b = a
    for i in range(n):
        a.append(x * (i + 1.0))
    return np.sum(np.stack(b)) * len(b)


def _collect(v, n):
    out = []
    for k in range(n):
        out.append(v ** (k + 1))
    return out


def helper_returns_a_runtime_list(x, n):
    parts = _collect(x, n)
    return np.sum(np.stack(parts))


def starts_with_an_int(x, n):
    ys = [0]
    for i in range(n):
        ys.append(np.sum(x) * i)
    return sum(ys) * 1.0


def ints_then_floats(x, n):
    # an int array first, floats after: NumPy stacks them as floats; the buffer took the first item's dtype
    # and cast every float into ints (a wrong value, or NumPy's casting error from the adjoint)
    out = [np.arange(3)]
    for i in range(n):
        out.append(x * i)
    return np.sum(np.stack(out) * x) + np.sum(x)


def index_list_stays_int(x, n):
    idx = []
    for i in range(n):
        if x[i] > 0.0:
            idx.append(i)
    idx.append(0)
    return np.sum(x[np.array(idx)] ** 2)


# ---------------------------------------------------------------------- runtime comprehensions
def comprehension_over_runtime_range(M):
    K = M.shape[0]
    blocks = np.stack([np.outer(M[k], M[k]) for k in range(K)])
    gen = sum(np.sum(M[k] ** 2) for k in range(K) if k != 1)
    rows = [np.sum(r * r) for r in M]
    return np.sum(blocks) + gen + np.sum(np.array(rows))


def row_stacks_of_runtime_lists(x, M):
    """np.vstack / hstack / column_stack of lists grown in a runtime loop, items of ndim 0, 1 and 2."""
    s, r, m = [], [], []
    for i in range(M.shape[0]):
        s.append(np.sum(M[i] * x))
        r.append(np.sin(M[i] * x))
        m.append(np.outer(M[i], x[:2]) * (i + 1.0))
    w = [np.vstack(s), np.hstack(s), np.column_stack(s), np.vstack(r), np.hstack(r), np.column_stack(r),
         np.vstack(m), np.hstack(m), np.column_stack(m)]
    total = 0.0
    for k, a in enumerate(w):
        total = total + np.sum(a * np.cos(np.arange(a.size).reshape(a.shape) + k)) + a.shape[0] * a.shape[-1]
    return total


def _batch(it, nb, size):
    idx = it % nb
    return slice(idx * size, (idx + 1) * size)


def runtime_slice_objects(w, M, it):
    """slice(...) objects of runtime integers, made by a helper, bound to names, inside a loop and a tuple index."""
    idx = _batch(it, 2, 2)
    s = 0.0
    for k in range(2):
        j = slice(k, k + 2)
        s = s + np.sum(np.tanh(np.outer(M[idx] @ w, w))[j, k]) + np.sum(M[idx, 1:3] * w[j])
    return s + np.sum(M[slice(it % 3)] ** 2)


def _layers(weights, sizes):
    """A generator helper, as autograd's bayesian_neural_net writes its unpacking."""
    k = len(weights)
    for m, n in zip(sizes[:-1], sizes[1:]):
        yield weights[:, :m * n].reshape((k, m, n)), weights[:, m * n:m * n + n].reshape((k, 1, n))
        weights = weights[:, (m + 1) * n:]


def _even_squares(x, n):
    for i in range(n):
        if i % 2:
            continue
        yield x[i] ** 2
    yield from (np.sin(v) for v in x[:2])


def generator_helpers(w, x):
    inputs = np.expand_dims(x[:, None], 0)
    for W, b in _layers(w, (1, 3, 1)):
        inputs = np.tanh(np.einsum("mnd,mdo->mno", inputs, W) + b)
    return np.sum(inputs) + sum(_even_squares(x, 3)) + np.sum(np.stack(list(_even_squares(x, len(x)))))


def nested_runtime_comprehension(M):
    pairs = [M[i, j] * M[j, i] for i in range(M.shape[1]) for j in range(i + 1)]
    return np.sum(np.stack(pairs))


# ---------------------------------------------------------------- signatures and assignment
def var_args(x, *rest, scale=1.0, **options):
    s = np.sum(np.sin(x)) * scale
    for r in rest:
        s = s + np.sum(r * x)
    return s * options.get("weight", 1.0)


def starred_targets(params):
    *hidden, (W, b) = params
    first, *others = hidden
    h = first
    for o in others:
        h = h * o
    return np.sum(h @ W + b)


def last_of_a_loop_that_may_not_run(x, n):
    for i in range(n):
        y = x * (i + 1.0)
    if n > 0:
        return np.sum(np.sin(y))
    return np.sum(x)


def bound_in_a_branch_read_in_a_later_loop(x, n):
    if n > 2:
        t = np.cos(x)
    s = np.sum(x)
    for i in range(n):
        if n > 2:
            s = s + np.sum(t * i)
    return s


CASES = [
    (last_of_a_loop_that_may_not_run, (x3, 0), {}, (0,)),     # y never bound: its cotangent is never read
    (last_of_a_loop_that_may_not_run, (x3, 3), {}, (0,)),
    (bound_in_a_branch_read_in_a_later_loop, (x3, 2), {}, (0,)),
    (bound_in_a_branch_read_in_a_later_loop, (x3, 4), {}, (0,)),
    (append_in_runtime_loop, (x3, 4), {}, (0,)),
    (append_with_items_before, (x3, np.linspace(0.0, 1.0, 6)), {}, (0,)),
    (scalars_summed, (x3, 5), {}, (0,)),
    (append_in_while_and_branch, (x3, 4), {}, (0,)),
    (append_in_while_and_branch, (-np.abs(x3), 3), {}, (0,)),
    (nested_lists, (M,), {}, (0,)),
    (list_made_and_used_inside_the_loop, (M,), {}, (0,)),
    (read_back_inside_the_loop, (x3, 3), {}, (0,)),
    (extend_and_plus_equals, (x3, 3), {}, (0,)),
    (alias_sees_the_growth, (x3, 3), {}, (0,)),
    (helper_returns_a_runtime_list, (x3, 3), {}, (0,)),
    (starts_with_an_int, (x3, 4), {}, (0,)),
    (ints_then_floats, (x3, 3), {}, (0,)),
    (index_list_stays_int, (np.array([0.5, -1.0, 2.0]), 3), {}, (0,)),
    (comprehension_over_runtime_range, (M,), {}, (0,)),
    (nested_runtime_comprehension, (M[:3],), {}, (0,)),
    (row_stacks_of_runtime_lists, (x3, M), {}, (0, 1)),
    (runtime_slice_objects, (x3, M, 3), {}, (0, 1)),
    (generator_helpers, (rng.normal(size=(2, 10)), x3), {}, (0, 1)),
    (var_args, (x3, x3 * 2.0, x3 + 1.0), {"scale": 2.0, "weight": 3.0}, (0, 1, 2)),
    (var_args, (x3,), {}, (0,)),
    (starred_targets, ([x3, x3 * 0.5, x3 + 1.0, (rng.normal(size=(3, 2)), rng.normal(size=2))],), {}, (0,)),
]
IDS = [f"{i:02d}-{f.__name__}" for i, (f, _, _, _) in enumerate(CASES)]
MIXED_DTYPES = {starts_with_an_int, ints_then_floats}   # lists whose items widen from ints to floats
# whole-function Numba compiles cost seconds each: make test runs these cases' njit runs, make test-sweep all
NJIT_IN_MAKE_TEST = {"append_in_runtime_loop", "append_with_items_before", "append_in_while_and_branch",
                     "read_back_inside_the_loop", "comprehension_over_runtime_range", "var_args", "ints_then_floats",
                     "index_list_stays_int"}


# auto compiles these whole too (a loop over scalars), 25-65 s cold each: their auto runs are in make test-sweep
AUTO_IN_SWEEP = {"row_stacks_of_runtime_lists", "generator_helpers", "runtime_slice_objects"}


def _construct_params():
    for i, case in enumerate(CASES):
        for jit, jid in zip(JITS, JIT_IDS):
            sweep = (jit == "whole" and case[0].__name__ not in NJIT_IN_MAKE_TEST
                     or jit == "auto" and case[0].__name__ in AUTO_IN_SWEEP)
            yield pytest.param(case, jit, id=f"{IDS[i]}-{jid}", marks=[pytest.mark.sweep] if sweep else [])


@pytest.mark.parametrize("case,jit", list(_construct_params()))
def test_construct_value_and_gradient(case, jit):
    f, args, kwargs, nums = case
    if jit == "whole" and f in MIXED_DTYPES:   # the buffer changes type: Numba cannot, and says so at the user's line
        with pytest.raises(FuncgradError, match="nopython mode") as ei:
            funcgrad.value_and_grad(f, argnums=nums, jit=jit)(*args, **kwargs)
        assert HERE in str(ei.value), str(ei.value)
        return
    v, g = funcgrad.value_and_grad(f, argnums=nums, jit=jit)(*args, **kwargs)
    np.testing.assert_allclose(v, f(*args, **kwargs), rtol=1e-12, atol=1e-12)
    for k, i in enumerate(nums):
        num = numerical_vjp(lambda *a: f(*a, **kwargs), args, i, 1.0, 1e-6)
        for a, b in zip(funcgrad.tree_leaves(g[k]), funcgrad.tree_leaves(num)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_runtime_list_appends_cost_linear_time():
    """Appends double the buffer: a long list is built without a copy per append."""
    n = 20000
    f = funcgrad.value_and_grad(scalars_summed, jit="whole")
    v, g = f(x3, n)
    np.testing.assert_allclose(v, scalars_summed(x3, n), rtol=1e-10)
    np.testing.assert_allclose(g, 2 * (x3 - (n - 1) / 2.0), rtol=1e-8)


# ------------------------------------------------------------------------------------- refusals
def returns_the_list(x, n):
    ys = []
    for i in range(n):
        ys.append(x * i)
    return ys  # LINE: return-list


def returns_the_list_as_aux(x, n):
    return np.sum(x), returns_the_list(x, n)  # LINE: return-aux


def list_arithmetic(x, n):
    ys = []
    for i in range(n):
        ys.append(x * i)
    return np.sum(ys + ys)  # LINE: list-plus


def appends_tuples(x, n):
    ys = []
    for i in range(n):
        ys.append((x, x * i))  # LINE: append-tuple
    return np.sum(np.stack([a for a, _ in ys]))


def starts_with_a_string(x, n):
    ys = ["start"]
    for i in range(n):  # LINE: str-start
        ys.append(np.sum(x) * i)
    return sum(ys)


def grown_by_a_helper(x, n):
    ys = []
    for i in range(n):
        _add_to(ys, x * i)  # LINE: helper-grows
    return np.sum(np.stack(ys))


def _add_to(lst, v):
    lst.append(v)


def _echo(x, n):
    for i in range(n):
        got = yield x * i  # LINE: yield-value
        x = x + got


def yield_as_a_value(x, n):
    return np.sum(np.stack(list(_echo(x, n))))


REFUSALS = [
    (returns_the_list_as_aux, "return-aux", "returning 'ys', a list whose length is only known when the function "
                                            "runs", "np.stack(ys)"),
    (list_arithmetic, "list-plus", "'Add' (Python's list arithmetic) on 'ys'", "np.stack(ys) first"),
    (appends_tuples, "append-tuple", "appending a tuple, list or dict to 'ys'", "one list per array"),
    (starts_with_a_string, "str-start", "the list 'ys' grows in a loop or branch that runs at run time, and it "
                                        "holds this value", "one list per array"),
    (grown_by_a_helper, "helper-grows", "'lst.append(...)' inside a loop", "append to 'lst' directly"),
    (yield_as_a_value, "yield-value", "a 'yield' whose value is used", "yield as a statement"),
]


@pytest.mark.parametrize("jit", JITS, ids=JIT_IDS)
@pytest.mark.parametrize("case", REFUSALS, ids=[c[1] for c in REFUSALS])
def test_runtime_list_refusals_name_the_line(case, jit):
    f, tag, what, hint = case
    with pytest.raises(FuncgradError) as ei:
        funcgrad.grad(f, jit=jit, has_aux=f is returns_the_list_as_aux)(x3, 3)
    msg = str(ei.value)
    line = _line(tag) if f is not grown_by_a_helper else None
    if line is not None:
        assert f"{HERE}:{line}" in msg, msg
    assert what in msg, msg
    assert hint in msg, msg
    assert "_rows" not in msg and "_len" not in msg and "__ret" not in msg, msg


# --------------------------------------------------------------- calling, errors and mode choice
def aux_from_a_branch(x):
    if np.sum(x) > 0:
        return np.sum(x ** 2), {"n": np.sum(x)}
    return np.sum(np.sin(x)), {"n": -np.sum(x)}


@pytest.mark.parametrize("jit", JITS, ids=JIT_IDS)
def test_has_aux_pair_returned_from_inside_a_branch(jit):
    for x in (x3 + 2.0, -np.abs(x3)):
        (v, aux), g = funcgrad.value_and_grad(aux_from_a_branch, has_aux=True, jit=jit)(x)
        want_v, want_aux = aux_from_a_branch(x)
        np.testing.assert_allclose(v, want_v)
        np.testing.assert_allclose(aux["n"], want_aux["n"])
        np.testing.assert_allclose(g, 2 * x if np.sum(x) > 0 else np.cos(x))


def _countdown(x, n):
    return x if n == 0 else x * _countdown(x, n - 1)  # LINE: recursion


def uses_recursion(x):
    return np.sum(_countdown(x, 3))


@pytest.mark.parametrize("jit", JITS, ids=JIT_IDS)
def test_recursion_of_a_constant_depth_is_written_out(jit):
    # _countdown(x, 3) is x * x * x * x: the depth is known while transforming, so each call is inlined
    np.testing.assert_allclose(funcgrad.grad(uses_recursion, jit=jit)(x3), 4 * x3 ** 3, rtol=1e-12)


def uses_recursion_of_runtime_depth(x, n):
    return np.sum(_countdown(x, n))


@pytest.mark.parametrize("jit", JITS, ids=JIT_IDS)
def test_recursion_whose_depth_is_an_int_argument_specializes_on_it(jit):
    # the depth comes from the int argument n: n becomes a specialization key, as an int used as an axis does
    for n in (3, 5):
        np.testing.assert_allclose(funcgrad.grad(uses_recursion_of_runtime_depth, jit=jit)(x3, n),
                                   (n + 1) * x3 ** n, rtol=1e-12)


def _halve(x, v):
    return x if v < 0.1 else _halve(x, v * 0.5) * 2.0  # LINE: recursion-float


def uses_recursion_of_a_value_depth(x):
    return np.sum(_halve(x, np.sum(x)))


@pytest.mark.parametrize("jit", JITS, ids=JIT_IDS)
def test_recursion_of_a_runtime_depth_is_refused_at_the_users_line(jit):
    import traceback
    with pytest.raises(FuncgradError) as ei:
        funcgrad.grad(uses_recursion_of_a_value_depth, jit=jit)(x3)
    msg = str(ei.value)
    assert f"{HERE}:{_line('recursion-float')}" in msg, msg
    assert "recursion" in msg and "write the recursion as a loop" in msg
    pkg = os.path.dirname(funcgrad.__file__)
    inside = [f for f in traceback.extract_tb(ei.value.__traceback__) if f.filename.startswith(pkg)]
    assert len(inside) <= 1, inside   # the API's own re-raise only: the transformer's frames are trimmed


def shape_mismatch(x, W):
    h = np.tanh(x)
    return np.sum(h @ W)  # LINE: shape-mismatch


@pytest.mark.parametrize("jit", JITS, ids=JIT_IDS)
def test_error_while_generated_code_runs_names_the_users_line(jit):
    with pytest.raises(ValueError) as ei:
        funcgrad.grad(shape_mismatch, jit=jit)(x3, np.ones((4, 2)))
    notes = "\n".join(getattr(ei.value, "__notes__", []))
    assert f"funcgrad: raised at {HERE}:{_line('shape-mismatch')}: return np.sum(h @ W)" in notes, notes


def _loop_in_helper(x, n):
    s = 0.0
    for i in range(n):
        s = s + np.sin(x[i % 3]) * i
    return s


def loop_only_in_a_helper(x, n):
    return _loop_in_helper(x, n) * 2.0


def test_auto_compiles_whole_when_only_a_helper_has_the_loop():
    g = funcgrad.value_and_grad(loop_only_in_a_helper)
    v, gx = g(x3, 7)
    assert [b.mode for b in g.cache.values()] == ["njit"]
    np.testing.assert_allclose(v, loop_only_in_a_helper(x3, 7))
    np.testing.assert_allclose(gx, numerical_vjp(loop_only_in_a_helper, (x3, 7), 0, 1.0, 1e-6), rtol=1e-6)


def changes_type_in_a_loop(x, n):
    acc = np.sum(x) * 0.0          # a number ...
    for i in range(n):
        acc = acc + x * i          # ... then an array: Python is fine, Numba is not  # LINE: type-change
    return np.sum(acc)


def test_auto_fallback_is_remembered_on_disk():
    """A function Numba cannot compile falls back to Python once, with a warning at the user's line; the next
    transform of the same code (another process reads the same disk cache) goes straight to Python, repeating
    the warning, instead of failing to compile again."""
    from funcgrad.errors import FuncgradWarning
    with pytest.warns(FuncgradWarning, match="Numba cannot compile this function"):
        g1 = funcgrad.value_and_grad(changes_type_in_a_loop)
        v1, _ = g1(x3, 3)
    with pytest.warns(FuncgradWarning, match="Numba cannot compile this function") as rec:
        g2 = funcgrad.value_and_grad(changes_type_in_a_loop)
        v2, gx = g2(x3, 3)
    assert [b.mode for b in g2.cache.values()] == ["python"]
    assert any(w.filename == HERE for w in rec), [(w.filename, w.lineno) for w in rec]
    np.testing.assert_allclose(v2, changes_type_in_a_loop(x3, 3))
    np.testing.assert_allclose(gx, np.full(3, 3.0))


# range() inside zip/enumerate over arrays: the loop runs over the shortest length (a range's is
# max(0, ceil((stop - start) / step)), its start evaluated once), the i-th item of the range is start + i * step
def zip_with_a_constant_range(x, a, B):
    s = 0
    for v2, w3, i1 in zip(a, B[0], range(3)):
        s = s + v2 * w3 * i1 + x
    return s


def enumerate_zip_with_a_runtime_range(x, a, n):
    s = 0.0
    for i, (v, k) in enumerate(zip(a, range(1, n, 2))):
        s = s + v * k * x + i
    return s


def zip_with_a_descending_range_whose_start_is_rebound(x, a, n):
    s = 0.0
    m = n
    for v, k in zip(a, range(m, 0, -1)):
        m = m - 1
        s = s + v * k * x
    return s


def zip_with_a_range_first(x, a, n):
    s = 0.0
    for k, v in zip(range(n, n + 10), a):
        s = s + np.sin(v * x) * k
    return s


_ZA = np.array([0.3, -0.5, 0.9, 1.2])


@pytest.mark.parametrize("kw", [{}, {"jit": "whole"}, {"jit": False}], ids=["auto", "whole", "nojit"])
@pytest.mark.parametrize("f, args", [
    (zip_with_a_constant_range, (0.7, _ZA, np.array([[1.0, 2.0, 3.0, 4.0]]))),
    (enumerate_zip_with_a_runtime_range, (0.7, _ZA, 6)), (enumerate_zip_with_a_runtime_range, (0.7, _ZA, 0)),
    (zip_with_a_descending_range_whose_start_is_rebound, (0.7, _ZA, 3)),
    (zip_with_a_descending_range_whose_start_is_rebound, (0.7, _ZA, 7)), (zip_with_a_range_first, (0.7, _ZA, 2))],
    ids=["constant", "runtime", "runtime_empty", "descending_short", "descending_long", "range_first"])
def test_range_inside_zip_and_enumerate(f, args, kw):
    from tests.support import assert_value_and_gradient
    assert_value_and_gradient(f, args, (0, 1), **kw)


def zip_with_a_runtime_step(x, a, k):
    s = 0.0
    for v, i in zip(a, range(0, 6, k)):
        s = s + v * i * x
    return s


def test_range_with_a_runtime_step_inside_zip_is_refused_at_the_users_line():
    with pytest.raises(FuncgradError, match="step computed at run time inside zip/enumerate") as e:
        funcgrad.grad(zip_with_a_runtime_step)(0.5, _ZA, 2)
    assert "test_language2.py" in str(e.value) and "zip(a, range(0, 6, k))" in str(e.value)
