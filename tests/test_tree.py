"""Pytrees: flatten/unflatten/map over tuple, list, dict, None, NamedTuple and registered types."""
from typing import NamedTuple

import numpy as np
import pytest
from hypothesis import given, settings

from funcgrad import tree_flatten, tree_map, tree_structure, tree_unflatten, register_pytree_node
from funcgrad.errors import TreeStructureError
from funcgrad.testing import pytrees
from funcgrad.tree import assert_same_structure, tree_flatten_with_path


class P(NamedTuple):
    w: np.ndarray
    b: object


class Box:
    def __init__(self, a, b, tag):
        self.a, self.b, self.tag = a, b, tag


register_pytree_node(Box, lambda x: ((x.a, x.b), x.tag), lambda tag, ch: Box(ch[0], ch[1], tag))


def test_roundtrip_all_container_kinds():
    t = {"z": [1.0, (2.0, None)], "a": P(np.ones(2), {"k": 3.0}), "box": Box(4.0, [5.0], "t")}
    leaves, td = tree_flatten(t)
    assert isinstance(leaves[0], np.ndarray) and len(leaves) == 6
    back = tree_unflatten(td, leaves)
    assert tree_structure(back) == td
    assert isinstance(back["a"], P) and back["box"].tag == "t" and back["z"][1][1] is None
    # dicts flatten in sorted-key order: the canonical order everything else relies on
    assert [p for p, _ in tree_flatten_with_path(t)[0]][0].startswith("['a']")


@settings(max_examples=40, deadline=None)
@given(pytrees())
def test_flatten_unflatten_is_identity(t):
    leaves, td = tree_flatten(t)
    again, td2 = tree_flatten(tree_unflatten(td, leaves))
    assert td == td2 and len(again) == len(leaves)
    assert all(a is b for a, b in zip(again, leaves))
    doubled = tree_map(lambda x: x * 2, t)
    assert all(np.array_equal(a, 2 * b) for a, b in zip(tree_flatten(doubled)[0], leaves))


def test_mismatch_errors_name_the_key_path():
    a = {"layer": {"W": np.ones(2), "b": np.ones(2)}}
    b = {"layer": {"W": np.ones(2)}}
    with pytest.raises(TreeStructureError, match=r"tree\['layer'\].*'b'"):
        assert_same_structure(a, b)
    with pytest.raises(TreeStructureError, match=r"tree\['x'\]\[1\]"):
        tree_map(lambda u, v: u + v, {"x": [1.0, (2.0, 3.0)]}, {"x": [1.0, (2.0,)]})
    leaves, td = tree_flatten(a)
    with pytest.raises(TreeStructureError, match="has 2 leaves, received 3"):
        tree_unflatten(td, [1, 2, 3])


def test_registering_a_leaf_type_makes_it_a_node():
    """The flatten fast path treats float as a leaf by type; a registration must still win."""
    import funcgrad.tree as T

    assert T.tree_flatten(1 + 2j)[0] == [1 + 2j]
    T.register_pytree_node(complex, lambda z: ((z.real, z.imag), None), lambda aux, ch: complex(*ch))
    try:
        leaves, td = T.tree_flatten([1 + 2j])
        assert leaves == [1.0, 2.0] and T.tree_unflatten(td, [3.0, 4.0]) == [3 + 4j]
    finally:
        del T._REGISTRY[complex]
        T._PLAIN_LEAVES.add(complex)
    assert T.tree_flatten(1 + 2j)[0] == [1 + 2j]

    class Box:
        def __init__(self, a, b):
            self.a, self.b = a, b
    T.register_pytree_node(Box, lambda b: ((b.a, b.b), None), lambda aux, ch: Box(*ch))
    leaves, td = T.tree_flatten({"k": Box(np.ones(2), 3.0), "j": [1, (2.0,)]})
    assert len(leaves) == 4 and leaves[0] == 1 and leaves[1] == 2.0 and leaves[3] == 3.0  # keys sorted
    back = T.tree_unflatten(td, leaves)
    assert isinstance(back["k"], Box) and back["j"] == [1, (2.0,)]
