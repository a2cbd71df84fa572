"""Values known while transforming (flags, None, numbers) that are bound inside a loop or branch running at
run time stay known there, as they are outside loops.

A helper returning ``(None, False)`` called inside a loop, with a branch on the flag whose other side unpacks
the None, runs in plain Python; funcgrad refused it ("cannot unpack this value"), because every number bound
inside a runtime loop became a run-time value, so both sides of the branch were built. The same refusal hit
``funcgrad.hessian`` of any loop calling ``np.linalg.norm`` (its derivative's definition branches so). Two
rules now: a helper's (or comprehension's) names inside one iteration are bound in order as outside loops;
a name of the looping function bound in one place of its source keeps its number inside the loop or branch
(its runtime variable holds it too, for reads before the assignment and after the loop).

The same seam for containers: a list or dict made inside the loop or branch being lowered (by the body, or by a
helper it calls: a generator helper's list, a dict of results) is changed in order there, as outside loops (such
programs were refused: "this item ... was not set before the loop", "'the returned value' is bound to a value
that cannot change"); one made before it changes through the runtime names its items own, for ``d.update(...)``
too, which was lowered as if the loop ran once (``s = s + d["k"]; d.update(k=2 * d["k"])`` gave x + x + x).

Every program runs plainly (the value oracle) and through funcgrad in every mode; gradients against central
differences.
"""
import numpy as np
import pytest

import funcgrad
from funcgrad.errors import UnsupportedSyntaxError
from tests.support import assert_value_and_gradient

MODES = [dict(mode="auto"), dict(mode="python"), dict(mode="njit"), dict(jit=False)]
MODE_IDS = ["auto", "python", "njit", "nojit"]


def _axes_of(x, axis):
    if axis is None:
        return None, False
    return (0, 1), True


def helper_flag_in_loop(x, A):
    s = 0.0
    for i in range(x.shape[0]):
        axes, matrix = _axes_of(x, None)
        if not matrix:
            s = s + np.sum(x[i] * A[i])
        else:
            r, c = axes
            s = s + x[i, r] * A[c]
    return s


def _scaled(v):
    axes = None           # the caller has its own `axes`, bound before the loop
    k = 2.0
    for _ in range(2):    # a loop written out while transforming: k is known after it
        k = k + 0.5
    if axes is None and k > 2.5:
        return v * k
    return v


def helper_names_shadow_callers(x, A):
    axes = (0,)
    s = 0.0
    for i in range(x.shape[0]):
        s = s + np.sum(_scaled(x[i]) * A[i])
    return s + len(axes)


def flag_bound_once_in_body(x, A):
    s = 0.0
    for i in range(x.shape[0]):
        use_tanh = True
        scale = 2
        if use_tanh:
            s = s + scale * np.tanh(x[i] * A[i])
        else:
            s = s + np.sinh(x[i][0])   # never runs (a number has no items): must not be built
    return s * scale


def flag_bound_once_in_branch(x, A):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > 0.1:
            big = True
            s = s + (x[i] * A[i] if big else x[i][0])
        else:
            s = s - A[i] * x[i]
    return s


def read_before_bound(x, A):
    # the previous iteration's value is read before this one binds it
    s = 0.0
    for i in range(x.shape[0]):
        if i > 0:
            s = s + c * x[i] * A[i]
        c = 3.0
    return s


def written_out_loop_in_body(x, A):
    # the one binding of c runs twice per iteration (a loop over a tuple, written out): in order
    s = 0.0
    for i in range(x.shape[0]):
        for k in (1.0, 2.0):
            c = k
            s = s + c * x[i] * A[i]
        s = s + c * x[i]
    return s + c


def rebound_stays_runtime(x, A):
    # bound in two places: a runtime value (its value after the loop depends on the branch taken last)
    s = 0.0
    for i in range(x.shape[0]):
        sign = 1.0
        if x[i] < 0.2:
            sign = -1.0
        s = s + sign * x[i] * A[i]
    return s * sign


def _scaled_items(v, w):
    out = []
    for u in v:
        out.append(u * w)
    return out


def list_helper_in_branch(x, A):
    s = 0.0
    if x[0] > 0.0:
        s = s + sum(_scaled_items(A, x[1]))
    else:
        s = s - x[1]
    return s


def _gen(v, w):
    for u in v:
        yield u * w


def generator_helper_in_branch(x, A):
    s = 0.0
    if x[0] > 0.0:
        s = s + sum(_gen(A, x[2]))
    return s + x[3]


def _make(v):
    d = {}
    d["a"] = v * 2.0
    d["b"] = v + 1.0
    return d


def dict_helper_in_loop(x, A):
    s = 0.0
    for i in range(x.shape[0]):
        d = _make(x[i] * A[i])
        s = s + d["a"] * d["b"]
    return s


def dict_made_in_body(x, A):
    s = 0.0
    for i in range(x.shape[0]):
        d = {"a": x[i]}
        if A[i] > 0.0:
            d["a"] = x[i] * A[i]
        s = s + d["a"]
    return s


def dict_update_across_iterations(x, A):
    d = {"k": x[0], "m": A[0]}
    s = 0.0
    for i in range(x.shape[0]):
        s = s + d["k"] * A[i]
        d.update({"k": d["k"] * 2.0 + x[i]})
        d.update(m=d["m"] - x[i])
    return s + d["m"]


def list_items_swapped(x, A):
    L = [x[0], x[1]]
    s = 0.0
    for i in range(x.shape[0]):
        s = s + L[0] * L[1] * A[i]
        L[0], L[1] = L[1], L[0] + x[i]
    return s


def nested_item_set(x, A):
    d = {"a": {"b": x[0]}, "c": [x[1], x[2]]}
    s = 0.0
    for i in range(x.shape[0]):
        s = s + d["a"]["b"] * d["c"][1]
        d["a"]["b"] = d["a"]["b"] * A[i]
        d["c"][1] = d["c"][1] + x[i]
    return s + d["a"]["b"]


def alias_made_before_loop(x, A):
    L = [[x[0], x[1]], [x[2], x[3]]]
    row = L[1]
    s = 0.0
    for i in range(x.shape[0]):
        s = s + L[1][1] * L[0][0]
        row[1] = row[1] + A[i]
        L[0][0] = L[0][0] * 0.5
    return s + row[1] + L[1][0]


def nested_container_replaced(x, A):
    d = {"a": {"b": x[0], "tag": "w"}}
    s = 0.0
    for i in range(x.shape[0]):
        d["a"] = {"b": d["a"]["b"] * A[i] + x[i], "tag": "w"}
        s = s + d["a"]["b"]
    return s


def comprehension_over_array_in_loop(x, A):
    # a list whose length is known when the function runs, made anew in each iteration
    s = 0.0
    for k in range(3):
        L = [v * 2.0 * x[k] for v in A]
        L.append(x[k] * k)
        s = s + sum(L) + L[-1] * L[0]
    return s


def _args():
    return (np.array([0.3, -0.25, 0.5, 0.15]), np.array([0.5, 0.25, -0.4, 1.5]))


CASES = [
    helper_flag_in_loop,
    helper_names_shadow_callers,
    flag_bound_once_in_body,
    flag_bound_once_in_branch,
    written_out_loop_in_body,
    rebound_stays_runtime,
    list_helper_in_branch,
    generator_helper_in_branch,
    dict_helper_in_loop,
    dict_made_in_body,
    dict_update_across_iterations,
    list_items_swapped,
    nested_item_set,
    alias_made_before_loop,
    nested_container_replaced,
    comprehension_over_array_in_loop,
]


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("f", CASES, ids=[f.__name__ for f in CASES])
def test_value_and_gradient_in_every_mode(f, kw):
    assert_value_and_gradient(f, _args(), (0, 1), **kw)


@pytest.mark.parametrize("kw", [dict(mode="auto"), dict(mode="python"), dict(jit=False)],
                         ids=["auto", "python", "nojit"])
def test_read_before_bound(kw):
    # (nopython mode cannot type a variable unbound on the first iteration: refused there, as before)
    assert_value_and_gradient(read_before_bound, _args(), (0, 1), **kw)


def test_hessian_of_norm_in_a_loop():
    def g(x):
        s = 0.0
        for i in range(3):
            s = s + np.linalg.norm(x * (i + 1.0))
        return s

    x = np.array([1.0, -2.0, 0.5, 3.0])
    n = np.linalg.norm(x)
    want = 6.0 * (np.eye(4) - np.outer(x, x) / n ** 2) / n     # sum_i (i+1) = 6 times norm's Hessian
    for kw in MODES:
        np.testing.assert_allclose(funcgrad.hessian(g, **kw)(x), want, rtol=1e-10, atol=1e-12, err_msg=str(kw))


def test_known_flag_leaves_one_branch():
    src = funcgrad.source(funcgrad.grad(flag_bound_once_in_body), *_args())
    assert "tanh" in src and "sinh" not in src, src


def test_new_key_of_an_outer_dict_in_a_loop_is_refused():
    def f(x, A):
        d = {"k": x[0]}
        for i in range(x.shape[0]):
            d.update(j=x[i] * A[i])   # a key the dict did not have before the loop
        return d["k"] + d["j"]

    with pytest.raises(UnsupportedSyntaxError, match="not set before the loop") as e:
        funcgrad.grad(f)(*_args())
    assert "test_static_in_loops.py" in str(e.value)


def test_item_set_through_an_alias_made_in_the_loop_is_refused():
    # `inner` names d["a"] only from inside the loop: writing through it was lowered into a copy, and
    # d["a"]["b"] kept its first value (x + x + x in place of x + 2x + 4x); now refused at the write
    def f(x, A):
        d = {"a": {"b": x[0]}}
        s = 0.0
        for i in range(x.shape[0]):
            s = s + d["a"]["b"]
            inner = d["a"]
            inner["b"] = inner["b"] * 2.0
        return s

    with pytest.raises(UnsupportedSyntaxError, match="not the container's own") as e:
        funcgrad.grad(f)(*_args())
    assert 'inner["b"] = inner["b"] * 2.0' in str(e.value)
