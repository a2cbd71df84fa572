"""A nested def's or lambda's defaults are evaluated where the def runs (Python's rule), not at the call."""
import numpy as np
import pytest

import funcgrad

X = np.array([0.3, 0.7, 1.1, 0.4])


def lambdas_keep_each_trips_k(x):
    fs = []
    for k in range(3):
        fs.append(lambda v, k=k: v * k)
    return sum(f(x[0]) for f in fs)


def late_binding_without_default(x):
    fs = []
    for k in range(3):
        fs.append(lambda v: v * k)   # Python reads k when called: 2 for every lambda
    return sum(f(x[0]) for f in fs)


def default_from_a_rebound_name(x):
    c = x[1]

    def h(v, s=c * 2.0):
        return v * s
    c = x[2]
    return h(x[0]) + c


def def_in_loop_default_changes(x):
    t = 1.0
    acc = 0.0
    for i in range(3):
        def h(v, m=t):
            return v * m
        acc = acc + h(x[i])
        t = t * x[3]
    return acc


def keyword_only_default(x):
    def h(v, *, s=3.0):
        return v * s
    return h(x[0]) + h(x[1], s=x[2])


def lambdas_in_a_comprehension(x):
    fs = [lambda v: v * k for k in range(3)]     # one scope: every lambda reads k's last value, 2
    gs = [lambda v, k=k: v * k for k in range(3)]
    return sum(fn(x[0]) for fn in fs) + sum(g(x[1]) for g in gs)


def def_in_a_loop_rebinding_its_parameter(x):
    def h(s):
        for i in range(3):
            def g(x):      # g's own x: rebinding it is not h's (h reads f's x below)
                x = x * 2.0
                return x
        return s * x[0]
    return h(x[1])


def _central(f, x, h=1e-6):
    return np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(x.size)])


@pytest.mark.parametrize("fn", [lambdas_keep_each_trips_k, late_binding_without_default, default_from_a_rebound_name,
                                def_in_loop_default_changes, keyword_only_default, lambdas_in_a_comprehension,
                                def_in_a_loop_rebinding_its_parameter], ids=lambda f: f.__name__)
def test_defaults_bound_where_the_def_runs(fn):
    for jit in ("python", "njit", False):
        v, g = funcgrad.value_and_grad(fn, jit=jit)(X.copy())
        assert v == pytest.approx(fn(X.copy()), rel=1e-12), jit
        np.testing.assert_allclose(g, _central(fn, X), rtol=1e-6, atol=1e-7, err_msg=str(jit))
