"""The JVP lines of the nn primitives (funcgrad/nn/rules.py, funcgrad/nn/losses.py), beyond the registry test.

* Dual pairing: for every nn primitive, ``<J v, u> == <v, J^T u>`` with ``J v`` from its JVP line
  (:func:`evaluate_jvp`) and ``J^T u`` from its VJP (``funcgrad.vjp``, Python mode), at the same
  point and along random directions. No finite differences: the identity holds to rounding, so it
  also pins the rules at points central differences cannot see (ties in a pooling window, where
  both rules must pick the same element).
* The losses in every reduction, integer and probability labels, against central differences
  (the registry test draws these at random; here each case is run).
* Forward over reverse by hand: the JVP line of a VJP's building block (``softmax_grad``,
  ``sigmoid_grad``, ``elu_grad``, ``gelu_grad``, ``conv2d_input_grad``...) run along the tangent of
  its inputs gives the Hessian-vector product, checked against central differences of the gradient.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import funcgrad
from funcgrad.nn import losses as L, rules as R
from funcgrad.ops.registry import evaluate_jvp, lookup, registry
from funcgrad.testing import primitive_function
from tests.support import drawn_cases

REG = registry()
NN = sorted(n for n, p in REG.items() if p.impl.__module__ in ("funcgrad.nn.rules", "funcgrad.nn.losses")
            and p.sample is not None and p.template is not None and p.template.jvp_body is not None)


def _float(a):
    return isinstance(a, float) or (isinstance(a, np.ndarray) and a.dtype.kind == "f")


def _rand_like(a, rng):
    return rng.standard_normal(np.shape(a)) if isinstance(a, np.ndarray) else float(rng.standard_normal())


def _inner(a, b):
    return float(np.sum(np.asarray(a, dtype=np.float64) * np.asarray(b, dtype=np.float64)))


def test_nn_primitives_are_covered():
    assert {"conv2d", "conv2d_input_grad", "max_pool2d_select", "softmax_grad", "batch_norm", "layer_norm",
            "cross_entropy", "embedding_grad"} <= set(NN)


@pytest.mark.parametrize("name", NN)
@settings(max_examples=drawn_cases(10, 5), deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_jvp_is_the_transpose_of_the_vjp(name, data):
    prim = REG[name]
    args, kwargs = data.draw(st.composite(lambda draw: prim.sample(draw, np.float64))())
    f, values, diff = primitive_function(prim, args, kwargs)
    if not diff:
        return
    # the parameter name of each function argument (nn primitives take no tuples of arrays)
    names = [p for p, a in zip(prim.params, args) if isinstance(a, (np.ndarray, float))]
    assert len(names) == len(values)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31 - 1)))
    tans = {names[i]: _rand_like(values[i], rng) for i in diff}
    jv = evaluate_jvp(prim, args, kwargs, tans)
    out, vjp_fn = funcgrad.vjp(f, *values, argnums=diff, mode="python")
    u = _rand_like(np.asarray(out), rng) if np.ndim(out) else float(rng.standard_normal())
    jtu = vjp_fn(u)
    lhs = _inner(jv, u)
    rhs = sum(_inner(tans[names[i]], jtu[k]) for k, i in enumerate(diff))
    assert lhs == pytest.approx(rhs, rel=1e-9, abs=1e-9), f"{name}: <Jv, u> = {lhs} but <v, J^T u> = {rhs}"


def test_max_pool_ties_pair_with_the_vjp():
    """All-equal windows: the JVP reads, and the VJP routes to, the same (first) maximum."""
    rng = np.random.default_rng(0)
    x = np.zeros((1, 2, 4, 4))
    v, u = rng.standard_normal(x.shape), rng.standard_normal((1, 2, 2, 2))
    jv = evaluate_jvp(lookup(R.max_pool2d), (x, 2), {}, {"x": v})
    np.testing.assert_array_equal(jv, v[:, :, ::2, ::2])       # the first element of each window
    jtu = R.max_pool2d_grad(u, x, 2)
    assert _inner(jv, u) == pytest.approx(_inner(v, jtu), rel=1e-12)


def _central(fn, args, tans, eps=1e-6):
    def at(s):
        return np.asarray(fn(*[a + s * eps * t if t is not None else a for a, t in zip(args, tans)]), dtype=float)
    return (at(1) - at(-1)) / (2 * eps)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("labels", ["int", "prob"])
def test_cross_entropy_jvp_every_case(reduction, labels):
    rng = np.random.default_rng(1)
    z = rng.standard_normal((4, 3))
    lab = rng.integers(0, 3, 4) if labels == "int" else rng.dirichlet(np.ones(3), 4)
    prim = lookup(L.cross_entropy)
    tz = rng.standard_normal(z.shape)
    fn = lambda zz, ll: L.cross_entropy(zz, ll, reduction)     # noqa: E731
    got = evaluate_jvp(prim, (z, lab), {"reduction": reduction}, {"logits": tz})
    assert np.shape(got) == np.shape(fn(z, lab))
    np.testing.assert_allclose(got, _central(fn, [z, lab], [tz, None]), rtol=1e-6, atol=1e-8)
    if labels == "prob":
        tl = rng.standard_normal(lab.shape)
        got = evaluate_jvp(prim, (z, lab), {"reduction": reduction}, {"logits": tz, "labels": tl})
        np.testing.assert_allclose(got, _central(fn, [z, lab], [tz, tl]), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("loss,lo,hi", [(L.mse, -2, 2), (L.binary_cross_entropy, 0.05, 0.95),
                                        (L.binary_cross_entropy_with_logits, -3, 3)])
def test_pair_loss_jvp_every_reduction(loss, lo, hi, reduction):
    rng = np.random.default_rng(2)
    p, q = rng.uniform(lo, hi, (3, 2)), rng.uniform(0.0, 1.0, (3, 2))
    tp, tq = rng.standard_normal(p.shape), rng.standard_normal(q.shape)
    prim = lookup(loss)
    a, b = prim.params[:2]
    fn = lambda pp, qq: loss(pp, qq, reduction=reduction)      # noqa: E731
    got = evaluate_jvp(prim, (p, q), {"reduction": reduction}, {a: tp, b: tq})
    assert np.shape(got) == np.shape(fn(p, q))
    np.testing.assert_allclose(got, _central(fn, [p, q], [tp, tq]), rtol=1e-6, atol=1e-8)


def _jvp(fn, args, kwargs, tans):
    return evaluate_jvp(lookup(fn), args, kwargs, tans)


def test_forward_over_reverse_elementwise():
    """HVP of sum(u * act(x)): the JVP of the VJP's building block along v, against central differences."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-2, 2, (3, 4))
    x = np.where(np.abs(x) < 0.1, 0.5, x)
    u, v = rng.standard_normal(x.shape), rng.standard_normal(x.shape)
    cases = {
        # activation: (gradient of sum(u * act(x)) as the VJP builds it, its JVP along v)
        "gelu": (lambda xx: R.gelu_grad(u, xx), lambda: _jvp(R.gelu_grad, (u, x), {}, {"x": v})),
        "elu": (lambda xx: R.elu_grad(u, xx, 0.7), lambda: _jvp(R.elu_grad, (u, x, 0.7), {}, {"x": v})),
        "sigmoid": (lambda xx: R.sigmoid_grad(u, R.sigmoid(xx)),
                    lambda: _jvp(R.sigmoid_grad, (u, R.sigmoid(x)), {},
                                 {"y": _jvp(R.sigmoid, (x,), {}, {"x": v})})),
        "softmax": (lambda xx: R.softmax_grad(u, R.softmax(xx, 0), 0),
                    lambda: _jvp(R.softmax_grad, (u, R.softmax(x, 0), 0), {},
                                 {"y": _jvp(R.softmax, (x, 0), {}, {"x": v})})),
    }
    for name, (grad, hvp) in cases.items():
        np.testing.assert_allclose(hvp(), _central(grad, [x], [v]), rtol=1e-6, atol=1e-7, err_msg=name)


def test_forward_over_reverse_conv2d():
    """Mixed second derivatives of <u, conv2d(x, w)>: the JVP lines of conv2d_input_grad / _weight_grad in w / x."""
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((2, 3, 5, 6)), rng.standard_normal((4, 3, 3, 2))
    kw = dict(stride=(2, 1), padding=1, dilation=(1, 2))
    u = rng.standard_normal(R.conv2d(x, w, None, **kw).shape)
    vx, vw = rng.standard_normal(x.shape), rng.standard_normal(w.shape)
    geo = (kw["stride"], kw["padding"], kw["dilation"])
    gx = lambda xx, ww: R.conv2d_input_grad(u, ww, xx.shape, *geo)      # noqa: E731
    gw = lambda xx, ww: R.conv2d_weight_grad(u, xx, ww.shape, *geo)     # noqa: E731
    got_x = _jvp(R.conv2d_input_grad, (u, w, x.shape) + geo, {}, {"w": vw})
    got_w = _jvp(R.conv2d_weight_grad, (u, x, w.shape) + geo, {}, {"x": vx})
    np.testing.assert_allclose(got_x, _central(gx, [x, w], [None, vw]), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got_w, _central(gw, [x, w], [vx, None]), rtol=1e-6, atol=1e-7)
