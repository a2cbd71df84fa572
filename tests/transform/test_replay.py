"""replay: reversed loop iterations recompute their own cheap values instead of reading them from tapes.

Every case checks the compiled gradient against the Python path (which tapes) and central differences, and
what the generated source recomputes or keeps taped."""
import numpy as np
import pytest

import funcgrad
from funcgrad.testing import numerical_vjp


def rows_through_helpers(P, Q, w, idx):
    # a loop over small arrays, nothing carried but the sum: every value of an iteration is recomputable
    total = 0.0
    for i in range(idx.shape[0]):
        p = P[idx[i, 0]]
        q = Q[idx[i, 1]]
        r = np.cross(p, q) * w[i] + p[0:3] * np.dot(p, q)
        if np.sum(r) > 0.0:
            s = np.tanh(r) * p[1]
        else:
            s = r * r - q
        total = total + np.sum(s * s)
    return total


def carried_state(P, Q, w, idx):
    # the state is carried: what depends on it stays taped (nothing of the body is recomputed)
    x = np.ones(3)
    for i in range(idx.shape[0]):
        y = np.tanh(P[idx[i, 0]] * x) + Q[idx[i, 1]] * w[i]
        x = y / (1.0 + np.sum(y * y))
    return np.sum(x)


def live_out_and_nested(P, Q, w, idx):
    # a value of the inner body read after the inner loop (taped), the outer body's own values (recomputed),
    # a name bound before the loop and again in it (taped)
    total = 0.0
    last = P[0] * 0.0
    for i in range(idx.shape[0]):
        p = P[idx[i, 0]]
        acc = p * w[i]
        for j in range(2):
            last = np.sin(acc + Q[j]) * p
            acc = acc + last * 0.5
        total = total + np.sum(acc * last) + np.sum(p * p)
    return total + np.sum(last)


def mixed_branches(P, Q, w, idx):
    # s is cheap to recompute on one path and not on the other (a matrix product): it is taped on both
    total = 0.0
    for i in range(idx.shape[0]):
        p = P[idx[i, 0]]
        q = Q[idx[i, 1]]
        if w[i] > 1.0:
            s = np.tanh(p * q)
        else:
            s = np.outer(p, q) @ q
        total = total + np.sum(s * p)
    return total


def rebound_after(P, Q, w, idx):
    # c, read by recomputed lines, is bound again after the loop: the reversed loop must see the loop's c
    c = P[0] * 2.0
    for _ in range(2):
        c = c * 1.5 + P[1]
    total = 0.0
    for i in range(idx.shape[0]):
        y = Q[idx[i, 1]] * c + w[i]
        total = total + np.sum(y * y)
    for _ in range(2):
        c = c * total
    return total + np.sum(c)


def while_rows(P, Q, w, idx):
    total = 0.0
    i = 0
    while i < idx.shape[0]:
        p = P[idx[i, 0]]
        d = p - Q[idx[i, 1]]
        total = total + w[i] * np.sqrt(np.sum(d * d))
        i = i + 1
    return total


def _inputs(n=7, seed=3):
    rs = np.random.RandomState(seed)
    P = rs.randn(4, 3)
    Q = rs.randn(5, 3)
    w = 1.0 + 0.1 * rs.randn(n)
    idx = np.stack([np.arange(n) % 4, rs.randint(5, size=n)], axis=1)
    return P, Q, w, idx


CASES = {"rows_through_helpers": rows_through_helpers, "carried_state": carried_state,
         "live_out_and_nested": live_out_and_nested, "mixed_branches": mixed_branches, "rebound_after": rebound_after,
         "while_rows": while_rows}
#: names each case must keep on a tape (what they carry, read after the loop or do not always recompute)
TAPED = {"rows_through_helpers": ["i", "total"], "carried_state": ["i", "x"],
         "live_out_and_nested": ["i", "last", "acc"], "mixed_branches": ["i", "s"], "rebound_after": ["i", "c"],
         "while_rows": ["i"]}


@pytest.mark.parametrize("scalars", [False, True], ids=["arrays", "scalars"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_compiled_gradient_equals_the_taped_python_path_and_central_differences(name, scalars, request):
    # scalars: the small arrays held as scalars (funcgrad/transform/scalarize.py), values checked the same way
    if not scalars:
        request.getfixturevalue("arrays_kept")
    f = CASES[name]
    args = _inputs()
    g = funcgrad.value_and_grad(f, argnums=(0, 1, 2), jit="auto")
    v, grads = g(*args)
    assert list(g.cache.values())[0].mode == "njit"
    vp, gp = funcgrad.value_and_grad(f, argnums=(0, 1, 2), mode="python")(*args)
    np.testing.assert_allclose(v, f(*args), rtol=1e-12)
    for k in range(3):
        np.testing.assert_allclose(grads[k], gp[k], rtol=1e-11, atol=1e-13)
        np.testing.assert_allclose(grads[k], numerical_vjp(f, args, k, 1.0, 1e-6), rtol=1e-5, atol=1e-7)
    src = funcgrad.source(g)
    if scalars:
        return
    assert "# recomputed" in src, src
    for n in TAPED[name]:
        assert f"_tape_{n} = " in src, (n, src)
    assert "# recomputed" not in funcgrad.source(funcgrad.value_and_grad(f, argnums=(0, 1, 2), mode="python"),
                                                  *args)


def _tapes(src):
    return sorted({ln.split("=")[0].strip() for ln in src.splitlines() if ln.strip().startswith("_tape_")
                   and " = " in ln and "[" not in ln.split("=")[0]})


def test_a_loop_over_small_arrays_tapes_only_its_index_and_its_sum(arrays_kept):
    g = funcgrad.value_and_grad(rows_through_helpers, argnums=(0, 1, 2), jit="auto")
    assert _tapes(funcgrad.source(g, *_inputs())) == ["_tape_i", "_tape_total"]


def test_the_same_loop_held_as_scalars_tapes_only_its_index():
    # the sum needs no tape there: the adjoint of a sum of scalars reads no value (the array code's unbroadcast
    # of the cotangent read the sum to know its shape)
    g = funcgrad.value_and_grad(rows_through_helpers, argnums=(0, 1, 2), jit="auto")
    src = funcgrad.source(g, *_inputs())
    assert "compiled for other argument shapes" in src
    assert _tapes(src) == ["_tape_i"]


def test_zero_and_one_trips_and_the_other_branch():
    P, Q, w, idx = _inputs(n=1)
    for args in [(P, Q, w[:0], idx[:0]), (P, Q, w, idx), (-P, Q, w, idx)]:   # (each a new signature or not)
        g = funcgrad.value_and_grad(rows_through_helpers, argnums=(0, 1, 2), jit="auto")
        _, grads = g(*args)
        _, gp = funcgrad.value_and_grad(rows_through_helpers, argnums=(0, 1, 2), mode="python")(*args)
        for k in range(3):
            np.testing.assert_allclose(grads[k], gp[k], rtol=1e-11, atol=1e-13)


def test_second_order_through_a_recomputing_loop():
    # grad of grad reads the generated reverse code again: the recomputed lines differentiate too
    P, Q, w, idx = _inputs(n=4)

    def f(a):
        return rows_through_helpers(P * a, Q, w * a, idx)

    d2 = funcgrad.grad(funcgrad.grad(f, jit="auto"))
    g = funcgrad.grad(f, mode="python")
    h = 1e-5
    assert d2(0.7) == pytest.approx((g(0.7 + h) - g(0.7 - h)) / (2 * h), rel=1e-6)
