"""anf: one primitive call per assignment; straight-line names are assigned once."""
import ast

import numpy as np

from funcgrad.transform import annotations as A
from tests.transform import _programs as P
from tests.transform._helpers import anf_of


def test_one_primitive_per_statement_and_single_assignment():
    a, _, _ = anf_of(P.straight, np.ones((2, 3)), np.ones((3, 4)))
    targets = []
    for s in a.body:
        assert isinstance(s, ast.Assign)
        prims = [n for n in ast.walk(s.value) if isinstance(n, ast.Call) and A.get(n, A.PRIM) is not None]
        assert len(prims) <= 1
        targets.append(s.targets[0].id)
    assert len(targets) == len(set(targets))


def test_names_rebound_in_loops_keep_one_name():
    a, _, _ = anf_of(P.looped, 1.0, 0.1, 3)
    loop = next(s for s in a.body if isinstance(s, ast.For))
    assigned = [s.targets[0].id for s in loop.body if isinstance(s, ast.Assign)]
    assert "x" in assigned                    # not x_1, x_2: the reverse pass tapes it
