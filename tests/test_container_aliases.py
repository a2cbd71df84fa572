"""Two names for one list or dict inside a loop or branch: a change through either shows in both (Python's),
or, where the code cannot follow it (a name that held another value before), refused at the user's line."""
import numpy as np
import pytest

import funcgrad
from funcgrad.errors import UnsupportedSyntaxError

A = np.array([0.3, -0.7, 0.45, 0.2])


def alias_in_a_branch(x, a):
    s = 0.0
    if x > -5.0:
        L = []
        M = L
        M.append(a[1])
        s = sum(L) * x
    return s


def chained_in_a_branch(x, a):
    s = 0.0
    if x > -5.0:
        L = M = []
        L.append(x * a[0])
        M.append(a[1])
        s = sum(M) * x + len(L)
    return s


def chained_in_a_loop(x, a):
    s = 0.0
    for i in range(3):
        L = M = []
        L.append(x * a[i])
        M.append(a[i + 1])
        s = s + sum(M) * x + len(L)
    return s


def alias_then_loop(x, a):
    L = []
    M = L
    for i in range(3):
        M.append(a[i] * x)
    return sum(L)


def rebinding_a_name_that_held_another_list(x, a):
    L = [x]
    M = [a[0]]
    if x > 0:
        M = L
        M.append(a[1])
    return sum(L) + sum(M)


@pytest.mark.parametrize("fn", [alias_in_a_branch, chained_in_a_branch, chained_in_a_loop, alias_then_loop],
                         ids=lambda f: f.__name__)
def test_one_container_under_two_names(fn):
    h = 1e-6
    dx = (fn(0.37 + h, A) - fn(0.37 - h, A)) / (2 * h)
    da = np.array([(fn(0.37, A + h * e) - fn(0.37, A - h * e)) / (2 * h) for e in np.eye(4)])
    for jit in ("python", "njit", False):
        v, (gx, ga) = funcgrad.value_and_grad(fn, argnums=(0, 1), jit=jit)(0.37, A)
        assert v == pytest.approx(fn(0.37, A), rel=1e-12), jit
        assert gx == pytest.approx(dx, rel=1e-6), jit
        np.testing.assert_allclose(ga, da, rtol=1e-6, atol=1e-9, err_msg=str(jit))


def test_a_name_that_held_another_container_is_refused():
    with pytest.raises(UnsupportedSyntaxError, match="'M' takes a list or dict another name holds") as e:
        funcgrad.grad(rebinding_a_name_that_held_another_list)(0.37, A)
    assert e.value.filename == __file__ and "M = L" in (e.value.text or "")


def dict_keys_inside_a_runtime_loop(x, n):
    p = {"w": x[0], "b": x[1]}
    s = 0.0
    for i in range(n):
        for k in p:            # k holds a key (a string) inside a loop that runs at run time
            s = s + p[k] * (i + 1)
    return s


def lambda_made_in_a_runtime_loop(x, n):
    out = 0.0
    for i in range(n):
        g = lambda v, w=x[i % 4]: v * w
        out = out + g(x[3])
    return out


def a_string_that_changes_in_a_loop(x, n):
    mode = "a"
    for i in range(n):
        if x[i % 4] > 0.5:
            mode = "b"
    return x[0] * (2.0 if mode == "a" else 3.0)


@pytest.mark.parametrize("fn", [dict_keys_inside_a_runtime_loop, lambda_made_in_a_runtime_loop],
                         ids=lambda f: f.__name__)
def test_names_first_bound_inside_a_runtime_loop_to_values_known_now(fn):
    x = np.array([0.3, 0.7, 1.1, 0.4])
    dx = np.array([(fn(x + 1e-6 * e, 3) - fn(x - 1e-6 * e, 3)) / 2e-6 for e in np.eye(4)])
    for jit in ("python", "njit", False):
        v, g = funcgrad.value_and_grad(fn, jit=jit)(x, 3)
        assert v == pytest.approx(fn(x, 3), rel=1e-12), jit
        np.testing.assert_allclose(g, dx, rtol=1e-6, atol=1e-8, err_msg=str(jit))


def test_a_value_known_now_that_changes_in_a_runtime_loop_is_refused():
    with pytest.raises(UnsupportedSyntaxError, match="'mode'") as e:
        funcgrad.grad(a_string_that_changes_in_a_loop)(np.array([0.3, 0.7, 1.1, 0.4]), 3)
    assert e.value.filename == __file__ and "for i in range(n)" in (e.value.text or "")   # the loop that changes it


# An array held in a list, tuple or dict is one array, whichever read of the item writes into it. The items
# were held as the expressions that computed them, so every read computed the array again: a write through
# ``b = L[0]`` (or ``L[0][1] = x``) was not seen by a later ``L[0]`` (silent wrong values: 28.0 for 22.8).
def write_through_a_read_of_a_list_item(x, a):
    L1 = [a.copy(), a * 2.0]
    b = L1[0]
    b[1] = x
    return np.sum(L1[0] * L1[1])


def write_into_a_list_item(x, a):
    L1 = [a.copy(), a * 2.0]
    L1[0][1] = x
    return np.sum(L1[0] * L1[1])


def write_through_a_read_of_a_dict_item(x, a):
    d = {"u": a * 1.0}
    d["v"] = a * 3.0
    b, c = d["u"], d["v"]
    b[0] = x
    c[2] = x * x
    return np.sum(d["u"]) + np.sum(d["v"] * a)


def one_array_under_two_items(x, a):
    c = a * 1.0
    L = [c, c]
    L[0][0] = x
    return np.sum(L[1] * a)


def item_written_in_a_runtime_loop(x, a, n):
    L = [a * 1.0]
    for i in range(n):
        L[0][0] = L[0][0] * x
    return np.sum(L[0] * a)


def key_tests_of_a_dict(x, a, n):
    s = 0.0
    k = 0
    while k < n:
        k += 1
        t = {"w": x, "b": a[0]}
        if "w" in t:
            s = s + t["w"] * 2.0
        if "z" not in t.keys():
            s = s + t["b"]
    return s


MODES = [dict(mode="auto"), dict(mode="python"), dict(mode="njit"), dict(jit=False)]


@pytest.mark.parametrize("kw", MODES, ids=["auto", "python", "njit", "nojit"])
@pytest.mark.parametrize("fn", [write_through_a_read_of_a_list_item, write_into_a_list_item,
                                write_through_a_read_of_a_dict_item, one_array_under_two_items,
                                item_written_in_a_runtime_loop, key_tests_of_a_dict], ids=lambda f: f.__name__)
def test_an_array_in_a_container_is_one_array(fn, kw):
    from tests.support import assert_value_and_gradient
    args = (0.7, A.copy()) + ((3,) if fn in (item_written_in_a_runtime_loop, key_tests_of_a_dict) else ())
    assert_value_and_gradient(fn, args, (0, 1), **kw)


def write_through_an_alias_then_read_the_item(x, a):
    t = (a + 0.0, x)
    b = t[0]
    b += x
    return np.sum(t[0])


@pytest.mark.parametrize("kw", MODES, ids=["auto", "python", "njit", "nojit"])
def test_an_in_place_operator_through_a_read_of_an_item_is_seen_by_the_item(kw):
    # b += x writes into the array t[0] holds (it was refused): the item is rebound to the result
    from tests.support import assert_value_and_gradient
    assert_value_and_gradient(write_through_an_alias_then_read_the_item, (0.7, A.copy()), (0, 1), **kw)


# A container holds a variable's value at the time it is made. A variable given a new value keeps its name in
# the generated code, so a container that held the variable's name saw the new value: ``w = x * 2;
# d = {"k": w}; w = w * 3; d["k"] + w`` gave 8.4 where Python gives 5.6 (every mode; displays, comprehensions,
# dict(k=w), d[k] = w alike).
def display_then_rebind(x, a):
    w = a * 2.0
    L = [w, x]
    w = w + 1.0
    return np.sum(L[0]) * L[1] + np.sum(w)


def dict_then_rebind(x, a):
    w = x * 2.0
    d = {"k": w}
    e = dict(k=w, j=x)
    w = w * 3.0
    return d["k"] + e["k"] + w


def comprehension_then_rebind(x, a):
    w = x * 2.0
    L = [w for _ in range(2)]
    w = w * 3.0
    return L[0] + L[1] + w


def item_set_then_rebind(x, a):
    w = a * x
    d = {"k": a}
    d["k"] = w
    w = w * 3.0
    return np.sum(d["k"]) + np.sum(w)


def rebind_in_a_runtime_loop(x, a, n):
    w = x * 2.0
    d = {"k": w}
    acc = 0.0
    for i in range(n):
        L = [w * 1.0 for _ in range(2)]
        M = {"k": w}
        w = w * 3.0
        acc = acc + L[0] + M["k"]
    return acc + w + d["k"]


@pytest.mark.parametrize("kw", MODES, ids=["auto", "python", "njit", "nojit"])
@pytest.mark.parametrize("fn", [display_then_rebind, dict_then_rebind, comprehension_then_rebind,
                                item_set_then_rebind, rebind_in_a_runtime_loop], ids=lambda f: f.__name__)
def test_a_container_holds_the_value_a_variable_had(fn, kw):
    from tests.support import assert_value_and_gradient
    args = (0.7, A.copy()) + ((3,) if fn is rebind_in_a_runtime_loop else ())
    assert_value_and_gradient(fn, args, (0, 1), **kw)


# x += v of an array writes into it (NumPy's in-place operator): a container holding the array sees that, also
# across a loop; a number is rebound by +=, so a container keeps the number it was given.
def augmented_array_seen_through_a_dict(x, a):
    L1 = a.copy()
    M2 = {"c": L1}
    L1 *= x
    return np.sum(M2["c"] * a)


def augmented_array_in_a_loop_seen_through_a_list(x, a, n):
    L1 = a.copy()
    M2 = [L1]
    for i in range(n):
        L1 *= x
    return np.sum(M2[0] * a)


def augmented_number_not_seen(x, a):
    s = x * 2.0
    hist = [s]
    s += np.sum(a)
    return hist[0] * 3.0 + s


@pytest.mark.parametrize("kw", MODES, ids=["auto", "python", "njit", "nojit"])
@pytest.mark.parametrize("fn", [augmented_array_seen_through_a_dict, augmented_array_in_a_loop_seen_through_a_list,
                                augmented_number_not_seen], ids=lambda f: f.__name__)
def test_augmented_assignment_and_containers(fn, kw):
    # (fn writes into its copies only, but Python's value is taken on fresh arrays all the same)
    args = (0.7, A.copy()) + ((3,) if fn is augmented_array_in_a_loop_seen_through_a_list else ())
    v, g = funcgrad.value_and_grad(fn, argnums=(0, 1), **kw)(*args)
    want = fn(*[v_.copy() if isinstance(v_, np.ndarray) else v_ for v_ in args])
    np.testing.assert_allclose(v, want, rtol=1e-12)
    from funcgrad.testing import numerical_vjp
    for k, i in enumerate((0, 1)):
        num = numerical_vjp(lambda *xs: fn(*[u.copy() if isinstance(u, np.ndarray) else u for u in xs]),
                            args, i, 1.0, 1e-6)
        np.testing.assert_allclose(g[k], num, rtol=1e-5, atol=1e-6)
