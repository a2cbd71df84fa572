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


def _powers(x, y):
    return np.sum(x ** 2) + np.sum(y ** 3) + np.sum(x ** 1) + np.sum(x ** y) + np.sum(y ** 0)


def test_a_literal_exponent_is_folded_into_the_adjoint():
    """Power's VJP ``d * y * x ** (y - 1 + (y == 0))`` at a literal ``y`` reads ``d * 2 * x`` (the integer
    arithmetic done, ``x ** 1`` written ``x``); other exponents keep the template's guard."""
    x, y = np.array([0.5, 1.5, 2.0]), np.array([1.0, 2.0, 0.7])
    g = funcgrad.grad(_powers, argnums=(0, 1))
    got = g(x, y)
    src = funcgrad.source(g)
    assert "* 2 * x, x)" in src and "* 3 * y ** 2, y)" in src and "== 0" in src   # (x ** y keeps its guard)
    assert "2 - 1" not in src and "3 - 1" not in src
    for i in (0, 1):
        np.testing.assert_allclose(got[i], numerical_vjp(_powers, (x, y), i, 1.0, 1e-6), rtol=1e-6)
