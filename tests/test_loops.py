"""Loops, branches and helper calls in reverse mode: a catalogue of real programs.

Every program is checked against central finite differences (float64) and the
compiled path (whole-function numba.njit) against the pure-Python path of the
same generated source.
"""
import inspect

import re

import numpy as np
import pytest

import funcgrad
from funcgrad.errors import UnsupportedSyntaxError
from funcgrad.transform.pipeline import STATS
from funcgrad.testing import check_grads
from tests.fixtures import loop_programs as L
from tests.fixtures import unsupported as U

IDS = [f"{i:02d}-{f.__name__}" for i, (f, _, _) in enumerate(L.CATALOGUE)]


def test_catalogue_is_large_enough():
    assert len({f for f, _, _ in L.CATALOGUE}) >= 25


@pytest.mark.parametrize("case", L.CATALOGUE, ids=IDS)
def test_matches_finite_differences(case):
    f, args, argnums = case
    check_grads(f, args, argnums=argnums, mode="python")


@pytest.mark.parametrize("case", L.CATALOGUE, ids=IDS)
def test_compiled_equals_pure_python(case):
    f, args, argnums = case
    nums = (argnums,) if isinstance(argnums, int) else argnums
    out_c, vjp_c = funcgrad.vjp(f, *args, argnums=nums, mode="njit")
    out_p, vjp_p = funcgrad.vjp(f, *args, argnums=nums, jit=False)
    np.testing.assert_allclose(out_c, out_p, rtol=1e-12, atol=1e-12)
    for a, b in zip(vjp_c(1.0), vjp_p(1.0)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-12)


def test_auto_mode_compiles_loops_and_new_trip_count_does_not_recompile():
    gf = funcgrad.grad(L.logistic, argnums=(0, 1))
    g1 = gf(1.5, 0.7, 0.1, 100)
    built = list(gf.cache.values())[0]
    assert built.mode == "njit"
    before = STATS["builds"]
    g2 = gf(1.5, 0.7, 0.1, 1000)
    g3 = gf(1.5, 0.7, 0.1, 7)
    assert STATS["builds"] == before and gf.specializations == 1
    assert g1 != g2 != g3


def test_logistic_source_shows_forward_loop_and_reversed_adjoint_loop():
    gf = funcgrad.grad(L.logistic, argnums=(0, 1))
    gf(1.5, 0.7, 0.1, 10)
    src = funcgrad.source(gf)
    compile(src, "<generated>", "exec")
    assert "for _it1 in range(n):" in src                     # the user's loop, kept a loop
    assert "_tape_x[_pos_x] = x" in src                        # what the adjoint needs, on a tape
    assert "_trip1 = len(range(n))" in src                     # sized by the trip count known at loop entry
    assert "for _k1 in range(_n1):  # reversed: for _it1 in range(n):" in src
    # compiled: the body's local derivatives first, then one update of each cotangent per iteration
    assert "(local derivatives preaccumulated)" in src and "# _t2 = b * x" in src
    assert re.search(r"_f\w* = d_b \+ d_x \* _c\w*\n", src), src
    # only what the adjoint reads is taped: not every temporary
    assert "_tape__t1" not in src and "_tape__t5" not in src
    # run as Python, the adjoint stays statement by statement, each naming the primal line it undoes
    gp = funcgrad.grad(L.logistic, argnums=(0, 1), mode="python")
    gp(1.5, 0.7, 0.1, 10)
    src = funcgrad.source(gp)
    assert "d_b = d_b + d_t2 * x" in src and "# _t2 = b * x" in src and "preaccumulated" not in src


def _line(tag):
    src, _ = inspect.getsourcelines(U)
    return next(i + 1 for i, ln in enumerate(src) if ln.rstrip().endswith(f"# LINE: {tag}"))


def test_refused_control_flow_points_at_line():
    with pytest.raises(UnsupportedSyntaxError, match="'break' in a loop over a Python list"):
        funcgrad.grad(U.break_over_list)(np.ones(3))
