"""Build a function's passes by hand, for the per-pass tests."""
import numpy as np

from funcgrad.transform.anf import anf
from funcgrad.transform.normalize import normalize
from funcgrad.transform.parse import parse
from funcgrad.transform.pipeline import Signature, _argument_values
from funcgrad.transform.specs import leaf_spec
from funcgrad.tree import tree_flatten


def lowered(fn, *args, diff=(0,)):
    import inspect
    names = list(inspect.signature(fn).parameters)[:len(args)]
    flats = [tree_flatten(a) for a in args]
    sig = Signature(names=names, trees=[td for _, td in flats],
                    specs=[tuple(leaf_spec(x) for x in leaves) for leaves, _ in flats], statics={}, diff=tuple(diff))
    leaf_names, diff_names = [], []
    low = normalize(parse(fn), _argument_values(sig, leaf_names, diff_names), allow_control_flow=True)
    return low, leaf_names, diff_names


def anf_of(fn, *args, diff=(0,)):
    low, leaves, diffs = lowered(fn, *args, diff=diff)
    params = low.params + [c[0] for c in low.captured]
    return anf(low.node, params), low, diffs
