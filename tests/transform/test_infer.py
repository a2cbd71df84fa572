"""infer: ranks (ndim) and scalar kinds of generated names, loops to a fixpoint."""
import numpy as np

from funcgrad.transform.infer import infer_kinds, infer_ranks
from tests.transform import _programs as P
from tests.transform._helpers import anf_of


def test_ranks_from_argument_specs_and_primitive_rules():
    a, low, _ = anf_of(P.straight, np.ones((2, 3)), np.ones((3, 4)))
    ranks = infer_ranks(a.body, dict(low.ranks))
    out = a.body[-1].targets[0].id
    assert ranks["x"] == 2 and ranks["w"] == 2 and ranks[out] == 0


def test_scalar_loop_values_are_float64():
    a, low, _ = anf_of(P.looped, 1.0, 0.1, 3)
    kinds = infer_kinds(a.body, dict(low.kinds))
    assert kinds["x"] == "f8" and kinds["a"] == "f8"


def _rows(state):
    s = np.empty_like(state)
    o = np.ones_like(state)
    z = np.empty_like(state, shape=(4,))
    return s, o, z


def test_empty_like_has_its_arguments_rank_unless_given_a_shape():
    a, low, _ = anf_of(_rows, np.ones((2, 3)))
    ranks = infer_ranks(a.body, dict(low.ranks))
    assert ranks["s"] == 2 and ranks["o"] == 2 and ranks["z"] is None
