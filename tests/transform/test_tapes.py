"""tapes: only values the adjoint reads go on tapes; in-place writes save what they overwrite."""
import ast

import numpy as np

import funcgrad
from funcgrad.transform.tapes import save_inplace
from tests.transform import _programs as P
from tests.transform._helpers import anf_of


def test_in_place_writes_save_the_overwritten_elements():
    a, _, _ = anf_of(P.writes, np.arange(3.0))
    names = iter(range(9))
    out = save_inplace(list(a.body), lambda base: f"{base}{next(names)}")
    saves = [s for s in out if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name)
             and s.targets[0].id.startswith("_saved")]
    assert len(saves) == 1 and "y[0]" in ast.unparse(saves[0].value)


def test_the_logistic_loop_tapes_two_floats_per_step():
    g = funcgrad.grad(P.looped)
    g(1.5, 0.1, 10)
    src = funcgrad.source(g)
    taped = {ln.split("=")[0].strip() for ln in src.splitlines() if "_tape_" in ln and "= K.tape_reserve" in ln}
    assert taped and len(taped) <= 2
