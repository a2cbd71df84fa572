"""reverse: the primal with tapes, then the adjoint filled from VJP templates, loops reversed."""
import numpy as np

import funcgrad
from funcgrad.testing import numerical_vjp
from tests.transform import _programs as P


def test_adjoint_lines_name_the_primal_statement_they_undo():
    g = funcgrad.grad(P.straight, argnums=(0, 1))
    g(np.ones((2, 3)), np.full((3, 4), 0.1))
    src = funcgrad.source(g)
    assert "# _t1 = x @ w" in src and "K.matmul_dx(" in src and "K.matmul_dy(" in src


def test_loop_adjoint_matches_finite_differences():
    v, ga = funcgrad.value_and_grad(P.looped)(1.5, 0.1, 200)
    assert v == P.looped(1.5, 0.1, 200)
    assert abs(ga - numerical_vjp(P.looped, (1.5, 0.1, 200), 0, 1.0, 1e-6)) < 1e-7
