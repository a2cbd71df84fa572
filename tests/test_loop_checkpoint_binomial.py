"""Binomial checkpointing (Griewank's revolve) of for loops: ``checkpoint_range(n, snapshots=s[, segment=k])``
and ``checkpoint_loops=<budget>``. The schedule's kernels reverse every step once, last first, holding at most
``s`` snapshots and recomputing no step more than ``r`` times in the sweep when ``T <= C(s + r, s)``; gradients
equal the taped loop's and central differences in every mode (jit="auto", "whole", "kernels", False)."""
from math import comb

import numpy as np
import pytest

import funcgrad
from funcgrad.errors import UnsupportedSyntaxError
from funcgrad.kernels import cpu as K
from tests.fixtures import checkpoint_programs as P
from tests.test_loop_checkpoint import central, taped

PY = K.python_namespace()


def _run(n, s, k=K):
    """Play the schedule of ``n`` steps and ``s`` snapshots over states that are step numbers: the steps the
    forward run snapshots, then the sweep's actions (flags, run in the generated code's order) checked against
    what they claim. Returns the number of times the sweep advances over each step."""
    st = k.revolve_init(n, s)
    stack = []
    at = k.revolve_shot(st)
    for i in range(n):   # the forward run
        if i == at:
            stack.append(i)
            nxt = k.revolve_shot(st)
            assert nxt == -1 or nxt > at
            at = nxt
    most = len(stack)
    st = k.revolve_sweep(n, s)
    cur, turned, advanced = None, [], np.zeros(n, dtype=int)
    while True:
        act = k.revolve_next(st)
        if act == 0:
            break
        assert act < 32
        if act & 8:
            stack.pop()
        if act & 4:
            cur = stack[-1]
        if act & 1:
            assert cur == st[0] < st[1] <= n
            advanced[st[0]:st[1]] += 1
            cur = st[1]
        if act & 2:
            stack.append(cur)
            most = max(most, len(stack))
        if act & 16:
            assert cur == st[3]
            turned.append(cur)
            cur = None
    assert turned == list(range(n - 1, -1, -1)) and stack == []
    assert most <= s
    return advanced


def test_schedule_reverses_each_step_once_within_snapshots_and_repetitions():
    for n in range(0, 70):
        for s in range(1, 9):
            advanced = _run(n, s)
            r = next(r for r in range(1, 10 ** 6) if comb(s + r, s) >= n)
            assert n == 0 or advanced.max() <= r, (n, s, r, advanced.max())
            if s >= n:   # a snapshot a step: one more forward run at most
                assert advanced.max(initial=0) <= 1
    for n, s in ((comb(5 + 3, 5), 5), (comb(5 + 3, 5) + 1, 5), (200, 3)):   # T = C(s + r, s) exactly, and past it
        r = next(r for r in range(1, 100) if comb(s + r, s) >= n)
        assert _run(n, s).max() <= r
    for n, s in ((0, 1), (1, 1), (5, 1), (6, 2), (10, 3), (7, 20)):   # the Python kernels (jit=False) agree
        np.testing.assert_array_equal(_run(n, s, PY), _run(n, s))


def test_plan_within_budget():
    # two-level (sqrt(T) a segment, a snapshot each) when it fits: 3163 snapshots of 8 bytes + 3162 trips of 16
    assert list(K.revolve_plan(10 ** 7, 16, 8, 10 ** 8)) == [3162, 3163]
    for trips, tape, snap, budget in ((10 ** 7, 16, 8, 50_000), (10 ** 4, 2 * 10 ** 6, 10 ** 6, 10 ** 8),
                                      (1000, 8, 8, 100), (40, 16, 8, 100)):
        seg, s = K.revolve_plan(trips, tape, snap, budget)
        assert seg >= 1 and s >= 1 and seg * tape + s * snap <= budget, (seg, s)
        assert list(PY.revolve_plan(trips, tape, snap, budget)) == [seg, s]
    seg, s = K.revolve_plan(10 ** 7, 16, 8, 10)   # nothing fits: one trip a step, r <= 32
    assert seg == 1 and comb(s + 32, s) >= 10 ** 7 > comb(s - 1 + 32, s - 1)


TRIPS = (0, 1, 2, 3, 6, 10, 40)   # s = 2: s >= T, C(2 + r, 2) = 3, 6, 10 exactly (r = 1, 2, 3), and past them
MODES = {"auto": dict(jit="auto"), "whole": dict(jit="whole"), "kernels": dict(jit="kernels"),
         "nojit": dict(jit=False)}


def _check(f, ft, args, argnums, trips, jit, at=None):
    g = funcgrad.grad(f, argnums=argnums, **MODES[jit])
    gt = funcgrad.grad(ft, argnums=argnums, **MODES[jit])
    for n in trips:
        for a, b in zip(g(*args, n), gt(*args, n)):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    n = at if at is not None else trips[-1]
    for i, a in zip(argnums, g(*args, n)):
        np.testing.assert_allclose(a, central(lambda *z: f(*z, n), args, i), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("jit", ["auto", "whole", "kernels", "nojit"])
def test_two_snapshots_every_mode(jit):
    _check(P.binomial2, taped(P.logistic), (0.5, 0.2), (0, 1), TRIPS, jit)


@pytest.mark.parametrize("jit", ["whole", "kernels"])
def test_one_snapshot(jit):
    """s = 1: the initial state only; each step is reached from it (T(T - 1) / 2 advances)."""
    _check(P.binomial1, taped(P.logistic), (0.5, 0.2), (0, 1), (0, 1, 2, 5, 9), jit)


@pytest.mark.parametrize("jit", ["whole", "kernels"])
def test_steps_of_a_segment_and_a_stepped_range(jit):
    """snapshots=3, segment=2 over range(1, 2n + 1, 2): steps of two iterations, the last one short (n odd);
    C(3 + 1, 3) = 4 steps exactly at n = 7 and 8."""
    _check(P.binomial3_segment2, P.binomial3_segment2_taped, (0.7, 0.3), (0, 1), (0, 1, 7, 8, 21), jit)


@pytest.mark.parametrize("jit", ["kernels", "nojit"])
def test_arrays(jit):
    R = np.random.default_rng(1)
    args = (R.normal(size=(3, 3)) * 0.5, R.normal(size=3), R.normal(size=3))
    _check(P.binomial_rnn, taped(P.rnn), args, (0, 1, 2), (0, 1, 3, 6, 11), jit, at=6)


@pytest.mark.parametrize("jit", ["whole", "kernels"])
def test_inplace_writes_restored_from_copies(jit):
    """The loop writes y in place: a restore copies the snapshot (it is restored again later)."""
    g = funcgrad.grad(P.binomial_inplace, argnums=(0, 1), **MODES[jit])
    gt = funcgrad.grad(taped(P.inplace), argnums=(0, 1), **MODES[jit])
    for n in (0, 1, 2, 6, 11):
        xs = np.linspace(-0.3, 0.4, max(n, 1))
        for a, b in zip(g(0.8, xs, n), gt(0.8, xs, n)):
            np.testing.assert_allclose(a, b, rtol=1e-12)
    xs = np.linspace(-0.3, 0.4, 6)
    np.testing.assert_allclose(g(0.8, xs, 6)[1], central(lambda *z: P.binomial_inplace(*z, 6), (0.8, xs), 1),
                               rtol=1e-6)


@pytest.mark.parametrize("f", [P.binomial_nested, P.nested_two_level], ids=["binomial", "two_level"])
def test_checkpointed_loop_inside_a_checkpointed_loop(f):
    """The outer loop's taped re-run of a step runs the inner loop with its snapshots, which the inner sweep
    (inside the outer step's adjoint) restores (it used to find them stripped: IndexError, pop from empty list)."""
    _check(f, P.binomial_nested_taped, (0.7, 0.3), (0, 1), (0, 1, 4, 9), "kernels", at=4)


def test_source_shows_the_schedule():
    src = funcgrad.source(funcgrad.grad(P.binomial2, argnums=(0, 1), jit="kernels"), 0.5, 0.2, 10)
    assert "_rv1 = K.revolve_init(len(range(n)), 2)" in src and "_snapat1 = K.revolve_shot(_rv1)" in src
    assert "_rvs1 = K.revolve_sweep(_steps1, 2)" in src and "for _turn1 in range(_steps1):  # checkpointed: for" in src
    assert "2 snapshots" in src and "while _act1 < 16:" in src


def test_budget_sizes_the_schedule():
    """checkpoint_loops=<bytes>: steps and snapshots from the trip count, the bytes a trip tapes (16) and a
    snapshot (8), within the budget; the gradient equals the taped one where the two-level scheme does not fit."""
    g = funcgrad.grad(P.recurrence, argnums=(0, 1), jit="kernels", checkpoint_loops=100)
    gt = funcgrad.grad(P.recurrence, argnums=(0, 1), jit="kernels")
    src = funcgrad.source(g, 0.7, 0.4, 0.1, 40)
    assert "K.revolve_plan(len(range(n)), 16, 8, 100)[0]" in src
    for n in (0, 5, 6, 40, 333):
        np.testing.assert_allclose(g(0.7, 0.4, 0.1, n), gt(0.7, 0.4, 0.1, n), rtol=1e-12)
    arrays = funcgrad.source(funcgrad.grad(taped(P.rnn), jit="kernels", checkpoint_loops="1kB"),
                             np.eye(3), np.ones(3), np.ones(3), 2)
    assert "K.revolve_plan(len(range(n)), 2 * x.nbytes, x.nbytes, 1000)" in arrays


def test_budget_bounds_memory():
    """Under jit=False (NumPy and lists, which tracemalloc sees) a 1 kB budget keeps the gradient's peak memory
    far below the 80 kB the taped loop's tape takes (the two-level scheme would need 1.7 kB)."""
    import tracemalloc
    n = 5000
    g = funcgrad.grad(P.recurrence, argnums=(0, 1), jit=False, checkpoint_loops=1000)
    gt = funcgrad.grad(P.recurrence, argnums=(0, 1), jit=False)
    g(0.7, 0.4, 0.1, 3)
    tracemalloc.start()
    try:
        out = g(0.7, 0.4, 0.1, n)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_allclose(out, gt(0.7, 0.4, 0.1, n), rtol=1e-12)
    assert peak < 20_000, peak


def _binomial_with_break(a, n):
    x = a
    for t in funcgrad.checkpoint_range(n, snapshots=3):
        x = x * a
        if x > 3.0:
            break
    return x


def test_refusals():
    with pytest.raises(UnsupportedSyntaxError, match="checkpointed loop cannot contain 'break'") as e:
        funcgrad.grad(_binomial_with_break)(1.1, 5)
    assert e.value.lineno == _binomial_with_break.__code__.co_firstlineno + 2

    def zero(a, n):
        x = a
        for t in funcgrad.checkpoint_range(n, snapshots=0):
            x = x * a
        return x

    with pytest.raises(UnsupportedSyntaxError, match="snapshots=k") as e:
        funcgrad.grad(zero)(1.1, 5)
    assert e.value.lineno == zero.__code__.co_firstlineno + 2
    with pytest.raises(ValueError, match="snapshots must be a positive int"):
        funcgrad.checkpoint_range(3, snapshots=True)
    assert list(funcgrad.checkpoint_range(2, 5, snapshots=2)) == [2, 3, 4]
