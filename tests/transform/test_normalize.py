"""normalize: every differentiable operation is a K.<primitive> call; containers and helpers vanish."""
import ast

import numpy as np

from funcgrad.transform import annotations as A
from tests.transform import _programs as P
from tests.transform._helpers import lowered


def _calls(node):
    return [n for n in ast.walk(node) if isinstance(n, ast.Call) and A.get(n, A.PRIM) is not None]


def test_operators_and_numpy_calls_become_primitives_bound_to_their_signature():
    low, leaves, diffs = lowered(P.straight, np.ones((2, 3)), np.ones((3, 4)))
    names = sorted(A.get(c, A.PRIM).name for c in _calls(low.node))
    assert names == ["matmul", "multiply", "sum", "tanh"]
    assert leaves == ["x", "w"] and diffs == ["x"] and low.params == ["x", "w"]


def test_tuple_assignment_binds_the_right_side_first():
    low, _, _ = lowered(P.swap, 1.0, 2.0)
    src = ast.unparse(low.node)
    assert "_tup" in src                      # the right side is bound to fresh names before any target


def test_free_variables_are_parameters_and_user_files_are_recorded():
    low, _, _ = lowered(P.looped, 1.0, 0.1, 3)
    assert [c[0] for c in low.captured] == ["DT"] and low.has_loops
    assert all(A.get(s, A.FILE) == P.__file__ for s in low.node.body)


def test_a_call_with_inactive_arguments_needs_no_rule():
    low, _, _ = lowered(P.inactive_call, np.ones(3), np.arange(3.0))
    nondiff = [n for n in ast.walk(low.node) if isinstance(n, ast.Call) and A.get(n, A.NONDIFF) is not None]
    assert [A.get(n, A.NONDIFF) for n in nondiff] == [np.argmax]
