"""Checkpointed loops (funcgrad.checkpoint_range, while funcgrad.checkpointed(...), and the loops
checkpoint_loops= checkpoints above its budget): gradients equal the taped gradient and central differences, in
both compiled and Python modes; what cannot be checkpointed on request is refused at the user's line."""
import types

import numpy as np
import pytest

import funcgrad
from funcgrad.errors import UnsupportedSyntaxError
from tests.fixtures import checkpoint_programs as P


def taped(f):
    """The same function over plain range (another function object: its own transform)."""
    g = types.FunctionType(f.__code__, {**f.__globals__, "rng": range}, f.__name__ + "_taped")
    return g


def central(f, args, argnum, eps=1e-6):
    args = list(args)
    x = np.asarray(args[argnum], dtype=float)
    out = np.zeros_like(x)
    for idx in np.ndindex(x.shape if x.shape else ()):
        xp, xm = x.copy(), x.copy()
        xp[idx] += eps
        xm[idx] -= eps
        ap, am = list(args), list(args)
        ap[argnum] = xp if x.shape else float(xp)
        am[argnum] = xm if x.shape else float(xm)
        out[idx] = (f(*ap) - f(*am)) / (2 * eps)
    return out


R = np.random.default_rng(0)
W = R.normal(size=(3, 3)) * 0.5
CASES = [
    (P.logistic, (0.5, 0.2), (0, 1)),
    (P.rnn, (W, R.normal(size=3), R.normal(size=3)), (0, 1, 2)),
    (P.with_helper, (0.7, 0.3), (0, 1)),
    (P.branches, (0.9, 0.4), (0, 1)),
    (P.nested_outer, (0.7, 0.3), (0, 1)),
    (P.nested_inner, (0.7, 0.3), (0, 1)),
    (P.stepped, (0.7, 0.3), (0, 1)),
    (P.before_and_after, (0.7, 0.3), (0, 1)),
]


@pytest.mark.parametrize("f,args,argnums", CASES, ids=[c[0].__name__ for c in CASES])
@pytest.mark.parametrize("mode", ["njit", "python"])
def test_equals_taped_and_differences(f, args, argnums, mode):
    g = funcgrad.grad(f, argnums=argnums, mode=mode)
    gt = funcgrad.grad(taped(f), argnums=argnums, mode=mode)
    _equal_to_taped_and_differences(g, gt, f, args, argnums, (0, 1, 2, 7, 10))


def _equal_to_taped_and_differences(g, gt, f, args, argnums, trips):
    """``g`` equals the taped ``gt`` for every trip count, and central differences of ``f`` at 7 trips."""
    for n in trips:
        got, want = g(*args, n), gt(*args, n)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
        if n == 7:
            for i, a in zip(argnums, got):
                np.testing.assert_allclose(a, central(lambda *z: f(*z, n), args, i), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("mode", ["njit", "python"])
def test_inplace_writes(mode):
    g = funcgrad.grad(P.inplace, argnums=(0, 1), mode=mode)
    gt = funcgrad.grad(taped(P.inplace), argnums=(0, 1), mode=mode)
    for n in (0, 1, 5, 11):
        xs = np.linspace(-0.3, 0.4, max(n, 1))
        got, want = g(0.8, xs, n), gt(0.8, xs, n)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
        if n == 5:
            np.testing.assert_allclose(got[1], central(lambda *z: P.inplace(*z, n), (0.8, xs), 1), rtol=1e-6)


def test_explicit_segment_and_python_equals_njit():
    gn = funcgrad.grad(P.explicit_segment, argnums=(0, 1), mode="njit")
    gp = funcgrad.grad(P.explicit_segment, argnums=(0, 1), mode="python")
    gt = funcgrad.grad(taped(P.logistic), argnums=(0, 1), mode="njit")
    for n in (0, 1, 3, 4, 9, 10):
        np.testing.assert_allclose(gn(0.5, 0.2, n), gt(0.5, 0.2, n), rtol=1e-12)
        np.testing.assert_allclose(gp(0.5, 0.2, n), gt(0.5, 0.2, n), rtol=1e-12)


def test_source_shows_segments():
    src = funcgrad.source(funcgrad.grad(P.logistic, argnums=(0, 1), mode="python"), 0.5, 0.2, 10)
    assert "checkpointed: for" in src and "_snap_x.append(x)" in src and "_snap_x.pop()" in src
    primal = src.split("_p_x = ")[0]
    assert "_tape_x[_pos_x] = x\n        _pos_x += 1" not in primal.split("_snap_x = []")[1]   # the primal loop is untaped


def test_tape_holds_one_segment():
    """The sweep's tape grows to one segment (plus the snapshot), not to the trip count."""
    import funcgrad.kernels.cpu as cpu  # noqa
    n = 10_000
    src = funcgrad.source(funcgrad.grad(P.logistic, argnums=(0, 1), mode="python"), 0.5, 0.2, n)
    assert "K.tape_reserve(_tape_x, _pos_x + _trip1)" in src


def _checkpointed_with_break(a, n):
    x = a
    for t in funcgrad.checkpoint_range(n):
        x = x * a
        if x > 3.0:
            break
    return x


def test_refuses_break():
    f = _checkpointed_with_break
    with pytest.raises(UnsupportedSyntaxError, match="checkpointed loop cannot contain 'break'") as e:
        funcgrad.grad(f)(1.1, 5)
    assert e.value.lineno == f.__code__.co_firstlineno + 2


def test_refuses_bad_segment():
    def f(a, n):
        x = a
        for t in funcgrad.checkpoint_range(n, segment=0):
            x = x * a
        return x
    with pytest.raises(UnsupportedSyntaxError, match="segment=k"):
        funcgrad.grad(f)(1.1, 5)


def test_refuses_name_unbound_before_loop():
    def f(a, n):
        x = a
        for t in funcgrad.checkpoint_range(n):
            if t > 0:
                x = x * z
            z = x + a
        return x
    with pytest.raises(UnsupportedSyntaxError, match="reads 'z' before assigning it") as e:
        funcgrad.grad(f)(1.1, 5)
    assert e.value.lineno == f.__code__.co_firstlineno + 2


def test_outside_differentiation_is_range():
    assert list(funcgrad.checkpoint_range(1, 7, 2)) == [1, 3, 5]
    assert P.logistic(0.5, 0.2, 4) == taped(P.logistic)(0.5, 0.2, 4)
    with pytest.raises(ValueError):
        funcgrad.checkpoint_range(3, segment=0)


@pytest.mark.parametrize("mode", ["njit", "python"])
def test_checkpointed_helper(mode):
    """funcgrad.checkpoint(helper) / funcgrad.remat: the helper's intermediates are recomputed, not taped."""
    args = (W, R.normal(size=3), R.normal(size=3))
    g = funcgrad.grad(P.remat_in_loop, argnums=(0, 1, 2), mode=mode)
    gt = funcgrad.grad(P.remat_in_loop_taped, argnums=(0, 1, 2), mode=mode)
    for n in (0, 1, 4):
        for a, b in zip(g(*args, n), gt(*args, n)):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(g(*args, 3)[0], central(lambda *z: P.remat_in_loop(*z, 3), args, 0), rtol=1e-6)
    src = funcgrad.source(g, *args, 3)
    primal = src.split("_p_x = ")[0]
    assert "_cell_h = K.tanh(_t2)\n" in primal and "_tape__cell_h.append" not in primal   # untaped forward
    assert "checkpointed: for _it2 in range(1)" in src and "_tape__cell_h.append(_cell_h)" in src


def test_checkpoint_module_is_callable():
    h = funcgrad.checkpoint(P._cell_taped)
    assert isinstance(h, funcgrad.custom.Rematerialized) and h.fun is P._cell_taped
    assert callable(funcgrad.checkpoint.save)   # still the model-checkpoint module
    x = np.ones(3)
    np.testing.assert_allclose(h(x, W, x)[0], P._cell_taped(x, W, x)[0])


def test_second_order_and_forward_mode():
    args = (0.5, 0.2, 7)
    assert funcgrad.grad(funcgrad.grad(P.logistic))(*args) == pytest.approx(
        funcgrad.grad(funcgrad.grad(taped(P.logistic)))(*args), rel=1e-12)
    assert funcgrad.hessian(P.logistic)(*args) == pytest.approx(funcgrad.hessian(taped(P.logistic))(*args), rel=1e-12)
    assert funcgrad.jvp(lambda a: P.logistic(a, 0.2, 7), (0.5,), (1.0,))[1] == pytest.approx(
        funcgrad.grad(P.logistic)(*args), rel=1e-12)


# ------------------------------------------------------------------ checkpoint_loops: automatic, above a budget
AUTO = [(P.logistic, (0.5, 0.2), (0, 1)),
        (P.rnn, (W, R.normal(size=3), R.normal(size=3)), (0, 1, 2)),
        (P.nested_outer, (0.7, 0.3), (0, 1)),
        (P.remat_in_loop, (W, R.normal(size=3), R.normal(size=3)), (0, 1, 2))]


@pytest.mark.parametrize("f,args,argnums,mode", [c + ("python",) for c in AUTO] + [c + ("njit",) for c in AUTO[:2]],
                         ids=[c[0].__name__ + "-python" for c in AUTO] + [c[0].__name__ + "-njit" for c in AUTO[:2]])
def test_automatic_equals_taped_and_differences(f, args, argnums, mode):
    """checkpoint_loops=True checkpoints every loop that can be: the plain range loop's gradient is unchanged
    (compiled: the two programs of scalars and of arrays; the others once, as Python)."""
    plain = f if f is P.remat_in_loop else taped(f)
    g = funcgrad.grad(plain, argnums=argnums, mode=mode, checkpoint_loops=True)
    gt = funcgrad.grad(plain, argnums=argnums, mode=mode)
    assert "if not _ckpt1:" in funcgrad.source(g, *args, 3)
    _equal_to_taped_and_differences(g, gt, plain, args, argnums, (0, 1, 7, 10))


@pytest.mark.parametrize("mode", ["njit", "python"])
def test_automatic_inplace_writes(mode):
    plain = taped(P.inplace)
    g = funcgrad.grad(plain, argnums=(0, 1), mode=mode, checkpoint_loops=True)
    gt = funcgrad.grad(plain, argnums=(0, 1), mode=mode)
    for n in (0, 1, 5, 11):
        xs = np.linspace(-0.3, 0.4, max(n, 1))
        for a, b in zip(g(0.8, xs, n), gt(0.8, xs, n)):
            np.testing.assert_allclose(a, b, rtol=1e-12)


def test_decision_from_trip_count_and_bytes_per_trip():
    """The source shows the rule: trip count x the bytes one trip tapes (x and b * x: 16) > the budget."""
    g = funcgrad.grad(P.recurrence, argnums=(0, 1), mode="python", checkpoint_loops="1kB")
    src = funcgrad.source(g, 0.7, 0.4, 0.1, 5)
    assert "_ckpt1 = len(range(n)) * 16 > 1000" in src
    assert "if not _ckpt1:  # checkpoint_loops: the loop taped (under else: checkpointed)" in src
    gt = funcgrad.grad(P.recurrence, argnums=(0, 1), mode="python")
    for n in (62, 63):   # 992 bytes: taped; 1008: checkpointed
        np.testing.assert_allclose(g(0.7, 0.4, 0.1, n), gt(0.7, 0.4, 0.1, n), rtol=1e-12)
    arrays = funcgrad.source(funcgrad.grad(taped(P.rnn), mode="python", checkpoint_loops=True), W, W[0], W[1], 2)
    assert "_ckpt1 = len(range(n)) * (2 * x.nbytes) > 0" in arrays   # an array tape: its size when the loop starts


def test_decision_made_at_run_time():
    """Below the budget the loop is taped, above it checkpointed: the tape (NumPy arrays under jit=False, which
    tracemalloc sees) grows with the trip count only in the first case."""
    import tracemalloc
    n = 5000   # 80,000 bytes of tape when taped

    def peak(budget):
        g = funcgrad.grad(P.recurrence, argnums=(0, 1), jit=False, checkpoint_loops=budget)
        g(0.7, 0.4, 0.1, 3)
        tracemalloc.start()
        try:
            out = g(0.7, 0.4, 0.1, n)
            return out, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    (v_taped, m_taped), (v_ckpt, m_ckpt) = peak("1MB"), peak("20kB")
    np.testing.assert_allclose(v_ckpt, v_taped, rtol=1e-12)
    assert m_taped >= 80_000 and m_ckpt < 30_000, (m_taped, m_ckpt)


def test_automatic_leaves_other_loops_taped():
    """A loop that cannot be checkpointed (break) stays taped silently; an explicit request is still refused."""
    g = funcgrad.grad(P.with_break, argnums=(0, 1), mode="python", checkpoint_loops=True)
    assert "_ckpt" not in funcgrad.source(g, 0.7, 0.3, 9)
    gt = funcgrad.grad(P.with_break, argnums=(0, 1), mode="python")
    for n in (0, 3, 20):
        np.testing.assert_allclose(g(0.7, 0.3, n), gt(0.7, 0.3, n), rtol=1e-12)
    with pytest.raises(UnsupportedSyntaxError, match="cannot contain 'break'"):
        funcgrad.grad(_checkpointed_with_break, checkpoint_loops=True)(1.1, 5)
    g0 = funcgrad.grad(taped(P.logistic), mode="python", checkpoint_loops=False)
    assert "_ckpt" not in funcgrad.source(g0, 0.5, 0.2, 3)


def test_checkpoint_loops_argument():
    f = taped(P.logistic)
    for bad in ("lots", "100 parsecs", -1, float("inf"), [1]):
        with pytest.raises(ValueError, match="checkpoint_loops must be"):
            funcgrad.grad(f, checkpoint_loops=bad)
    for spec, limit in (("100MB", "> 100000000"), ("1.5 GiB", "> 1610612736"), (2048, "> 2048")):
        assert limit in funcgrad.source(funcgrad.grad(f, mode="python", checkpoint_loops=spec), 0.5, 0.2, 3)
    v, pull = funcgrad.vjp(f, 0.5, 0.2, 40, argnums=(0, 1), checkpoint_loops="100B", mode="python")
    np.testing.assert_allclose(pull(1.0), funcgrad.grad(f, argnums=(0, 1), mode="python")(0.5, 0.2, 40), rtol=1e-12)
    (val, gr) = funcgrad.value_and_grad(f, checkpoint_loops=True, mode="python")(0.5, 0.2, 40)
    assert val == pytest.approx(f(0.5, 0.2, 40), rel=1e-14)
    assert gr == pytest.approx(funcgrad.grad(f, mode="python")(0.5, 0.2, 40), rel=1e-12)


@pytest.mark.parametrize("mode", ["njit", "python"])
def test_grad_of_grad_with_checkpoint_loops(mode):
    """grad of grad is reverse mode over the forward code of the inner function: the budget applies to that
    reverse pass's loop."""
    f = taped(P.logistic)
    args = (0.5, 0.2, 7)
    gg = funcgrad.grad(funcgrad.grad(f, checkpoint_loops=True, mode=mode), mode=mode)
    assert gg(*args) == pytest.approx(funcgrad.grad(funcgrad.grad(f, mode=mode), mode=mode)(*args), rel=1e-12)
    assert "if not _ckpt1:" in funcgrad.source(gg.transform_at(args), *args)


# ------------------------------------------------------------------ while funcgrad.checkpointed(cond)
@pytest.mark.parametrize("mode", ["njit", "python"])
def test_checkpointed_while(mode):
    g = funcgrad.grad(P.while_ckpt, argnums=(0, 1), mode=mode)
    gt = funcgrad.grad(P.while_taped, argnums=(0, 1), mode=mode)
    for tol in (0.0, 0.3, 0.62, 1.0, 2.5):   # 0, 1, ..., 3 (one segment), ... trips
        got, want = g(0.7, 0.2, tol), gt(0.7, 0.2, tol)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    for i, a in zip((0, 1), g(0.7, 0.2, 1.0)):
        np.testing.assert_allclose(a, central(lambda *z: P.while_taped(*z, 1.0), (0.7, 0.2), i), rtol=1e-6)
    if mode == "python":
        src = funcgrad.source(g, 0.7, 0.2, 1.0)
        assert "checkpointed: while" in src and "_snap_x.append(x)" in src and "for _w1 in range(" in src


def test_checkpointed_while_of_arrays():
    args = (W * 0.3, np.array([0.1, -0.2, 0.3]), 40.0)
    g = funcgrad.grad(P.while_arrays, argnums=(0, 1), mode="python")
    gt = funcgrad.grad(P.while_arrays_taped, argnums=(0, 1), mode="python")
    for a, b in zip(g(*args), gt(*args)):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    np.testing.assert_allclose(g(*args)[1], central(lambda x: P.while_arrays_taped(args[0], x, 40.0), (args[1],), 0),
                               rtol=1e-6)


def test_checkpointed_outside_and_refusals():
    assert funcgrad.checkpointed(2 > 1) is True and funcgrad.checkpointed(np.float64(0.0)) is False
    assert P.while_ckpt(0.7, 0.2, 1.0) == P.while_taped(0.7, 0.2, 1.0)
    with pytest.raises(ValueError):
        funcgrad.checkpointed(True, segment=0)

    def early(a, x0):
        x = x0
        while funcgrad.checkpointed(x < 3.0):
            x = x * a
            if x > 2.0:
                break
        return x

    def misplaced(a, x0):
        x = x0
        if funcgrad.checkpointed(x < 3.0):
            x = x * a
        return x

    def bad_segment(a, x0):
        x = x0
        while funcgrad.checkpointed(x < 3.0, segment=0):
            x = x * a
        return x

    with pytest.raises(UnsupportedSyntaxError, match="cannot contain 'break'") as e:
        funcgrad.grad(early)(1.5, 0.5)
    assert e.value.lineno == early.__code__.co_firstlineno + 2 and "plain while loop" in str(e.value)
    with pytest.raises(UnsupportedSyntaxError, match="marks the test of a while loop") as e:
        funcgrad.grad(misplaced)(1.5, 0.5)
    assert e.value.lineno == misplaced.__code__.co_firstlineno + 2
    with pytest.raises(UnsupportedSyntaxError, match="segment=k"):
        funcgrad.grad(bad_segment)(1.5, 0.5)


def test_untaped_run_pushes_no_inner_trip_counts():
    """The primal run of a checkpointed loop pushes nothing per trip (its re-runs push the inner loops' counts)."""
    src = funcgrad.source(funcgrad.grad(P.nested_outer, argnums=(0, 1), mode="python"), 0.7, 0.3, 10)
    primal = src.split("_p_x = ")[0]
    assert "_tape_n2.append(_n2)" not in primal and "_tape_n2.append(_n2)" in src
