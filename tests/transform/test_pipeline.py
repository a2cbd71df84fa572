"""pipeline: the passes in order for one signature; the strategy follows the lowered function."""
import numpy as np

from funcgrad.kernels.base import get_backend
from funcgrad.transform.pipeline import Signature, build, choose_strategy
from funcgrad.transform.specs import leaf_spec
from funcgrad.tree import tree_flatten
from tests.transform import _programs as P


def test_build_returns_a_compiled_vjp_and_its_source():
    args = (np.ones((2, 3)), np.ones((3, 4)))
    flats = [tree_flatten(a) for a in args]
    sig = Signature(names=["x", "w"], trees=[td for _, td in flats],
                    specs=[tuple(leaf_spec(v) for v in lv) for lv, _ in flats], statics={}, diff=(0,))
    built = build(P.straight, sig, get_backend("cpu"), "auto")
    assert built.mode == "python" and "def straight_vjp" in built.source
    (out,), (gx,) = built.fn(*args, 1.0)
    assert out == P.straight(*args) and gx.shape == (2, 3)


def test_auto_strategy():
    assert choose_strategy("auto", True) == "njit" and choose_strategy("auto", False) == "python"
    assert choose_strategy("auto", True, opaque_calls=True) == "python"
    assert choose_strategy("nojit", True) == "nojit"
