"""Sample specs: how the registry-driven property test draws a primitive's arguments.

Each factory returns ``sample(draw, dtype) -> (args, kwargs)``; hypothesis is
imported only when a sample is drawn, so it stays a test-time dependency.
Values are kept away from kinks and singularities by ``domain``.
"""
from __future__ import annotations

import numpy as np

DOMAINS = {
    "real": (-2.0, 2.0),
    "positive": (0.3, 3.0),
    "unit": (-0.9, 0.9),
    "small": (-1.0, 1.0),
}


def _st():
    import hypothesis.strategies as st
    return st


def shapes(draw, min_dims=0, max_dims=3, min_side=1, max_side=4):
    st = _st()
    nd = draw(st.integers(min_dims, max_dims))
    return tuple(draw(st.integers(min_side, max_side)) for _ in range(nd))


def array(draw, shape, dtype=np.float64, domain="real", distinct=False):
    """A float array (or a Python float for shape ``()`` half of the time) in ``domain``."""
    st = _st()
    lo, hi = DOMAINS[domain] if isinstance(domain, str) else domain
    n = int(np.prod(shape, dtype=np.int64))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    if distinct:  # well separated values: no ties for max/min/sort, no kinks for abs/relu
        vals = rng.permutation(n) / max(n, 1) * (hi - lo) * 0.9 + lo + 0.05 * (hi - lo)
        vals = vals + rng.uniform(-0.01, 0.01, n) * (hi - lo) / max(n, 1)
        # and none near 0 (abs, relu, sign's kink): a grid point there (-1.8 + 4 * 0.45 for 8 values in (-2, 2))
        # put x within central differences' step of the kink
        gap = 0.3 * 0.9 * (hi - lo) / max(n, 1)
        vals = np.where(np.abs(vals) < gap, np.where(vals < 0, -gap, gap), vals)
    else:
        vals = rng.uniform(lo, hi, n)
    a = vals.reshape(shape).astype(dtype)
    if shape == () and draw(st.booleans()):
        return float(a)
    return a


def broadcastable_shapes(draw, n=2, max_dims=3):
    """``n`` shapes that broadcast together (size-1 axes and missing leading axes)."""
    st = _st()
    base = shapes(draw, 0, max_dims)
    out = []
    for _ in range(n):
        s = list(base)
        for i in range(len(s)):
            if draw(st.booleans()) and draw(st.booleans()):
                s[i] = 1
        drop = draw(st.integers(0, len(s)))
        out.append(tuple(s[drop:]))
    return out


def unary(domain="real", distinct=False, min_dims=0):
    def sample(draw, dtype=np.float64):
        return (array(draw, shapes(draw, min_dims), dtype, domain, distinct),), {}
    return sample


def binary(domain_x="real", domain_y="real", distinct=False):
    def sample(draw, dtype=np.float64):
        sx, sy = broadcastable_shapes(draw)
        x = array(draw, sx, dtype, domain_x, distinct)
        y = array(draw, sy, dtype, domain_y, distinct)
        if distinct:  # never equal to x, even when hypothesis shrinks both draws to the same seed
            y = y + 0.1234 if isinstance(y, float) else (y + 0.1234).astype(dtype)
        return (x, y), {}
    return sample


def reduction(domain="real", distinct=False):
    def sample(draw, dtype=np.float64):
        st = _st()
        shape = shapes(draw, 1, 3)
        nd = len(shape)
        kind = draw(st.sampled_from(["none", "int", "tuple"]))
        if kind == "none":
            axis = None
        elif kind == "int":
            axis = draw(st.integers(-nd, nd - 1))
        else:
            axis = tuple(sorted(draw(st.sets(st.integers(0, nd - 1), min_size=1))))
        keepdims = draw(st.booleans())
        return (array(draw, shape, dtype, domain, distinct),), {"axis": axis, "keepdims": keepdims}
    return sample


def custom(fn):
    """Wrap ``fn(draw, dtype, st, array, shapes)`` so it gets the helpers it needs."""
    def sample(draw, dtype=np.float64):
        return fn(draw, dtype, _st(), array, shapes)
    return sample
