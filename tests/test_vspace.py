"""Gradients with respect to objects of a user's vector space (``funcgrad.extend.VSpace``), autograd's way.

The space here is a sparse vector (a dict index -> coefficient) whose methods are primitives with VJPs; the
gradient with respect to one has other keys than the vector itself (every index the rule touches), as the
RKHS functions of autograd's ``rkhs.py`` example do. Checked: the directional derivative along a random
sparse direction (central differences, through the space's own add, scalar_mul and inner_prod), the same
gradient in every Python mode, autograd's gradient where autograd is installed, and the refusals.
"""
import types
import warnings

import numpy as np
import pytest

import funcgrad
from funcgrad import extend as fg_extend
from funcgrad.errors import ArgumentTypeError, NoDerivativeError
from funcgrad.util import func


def make_space(ext, np_):
    """The sparse-vector classes written against ``ext`` (funcgrad.extend or autograd.extend)."""
    ns = types.SimpleNamespace()

    class SparseVec:
        def __init__(self, items=None):
            self.items = dict(items or {})

        @ext.primitive
        def __call__(self, w):   # the dot product with a dense array
            return sum([c * w[i] for i, c in self.items.items()], 0.0)

        @ext.primitive
        def norm2(self):
            return sum([c * c for c in self.items.values()], 0.0)

    ext.defvjp(func(SparseVec.__call__),
               lambda ans, v, w: lambda g: SparseVec({i: g * w[i] for i in range(len(w))}),
               lambda ans, v, w: lambda g: g * np.array([v.items.get(i, 0.0) for i in range(len(w))]))
    ext.defvjp(func(SparseVec.norm2), lambda ans, v: lambda g: SparseVec({i: 2.0 * g * c for i, c in v.items.items()}))

    class SparseBox(ext.Box, SparseVec):
        pass

    SparseBox.register(SparseVec)

    class SparseSpace(ext.VSpace):
        def __init__(self, value):
            pass

        def zeros(self):
            return SparseVec()

        def _add(self, a, b):
            out = dict(a.items)
            for i, c in b.items.items():
                out[i] = out.get(i, 0.0) + c
            return SparseVec(out)

        _mut_add = _add   # (autograd accumulates with it)

        def _scalar_mul(self, a, s):
            return SparseVec({i: s * c for i, c in a.items.items()})

        def _inner_prod(self, a, b):
            return sum([c * b.items.get(i, 0.0) for i, c in a.items.items()], 0.0)

    SparseSpace.register(SparseVec)

    def loss(v, w, n):
        total = np_.sin(v(w)) + 0.5 * v.norm2() * v(w * w)
        u = v                       # a copy of the name: the same value, the same cotangent
        for k in range(n):          # a loop of run-time length: d_v accumulates over the trips
            total = total + np_.cos(u(w + k))
        if n > 2:                   # a branch: d_v from one side only
            total = total + helper(u, w)
        return total

    def helper(v, w):
        return v.norm2() * np_.sum(w)

    ns.SparseVec, ns.SparseSpace, ns.loss = SparseVec, SparseSpace, loss
    return ns


S = make_space(fg_extend, np)
V = S.SparseVec({0: 0.7, 2: -1.3})
W = np.array([0.3, -0.4, 1.1, 0.9])


def items(v):
    return dict(v.items)


def directional(fun, v, d, *args, eps=1e-6):
    """(fun(v + eps d) - fun(v - eps d)) / 2 eps, with the space's own operations."""
    vs = fg_extend.vspace(v)
    return (fun(vs.add(v, vs.scalar_mul(d, eps)), *args) - fun(vs.add(v, vs.scalar_mul(d, -eps)), *args)) / (2 * eps)


@pytest.mark.parametrize("n", [1, 3])
def test_gradient_is_an_element_of_the_space_matching_central_differences(n):
    g = funcgrad.grad(S.loss)(V, W, n)
    assert type(g) is S.SparseVec
    assert set(g.items) == {0, 1, 2, 3}   # the rule of v(w) touches every index of w, not only v's keys
    rs = np.random.RandomState(0)
    vs = fg_extend.vspace(V)
    for _ in range(3):
        d = S.SparseVec({int(i): float(rs.randn()) for i in rs.choice(4, 3, replace=False)})
        assert np.isclose(vs.inner_prod(g, d), directional(S.loss, V, d, W, n), rtol=1e-6, atol=1e-8)


def test_every_mode_gives_the_same_gradient_and_whole_is_refused():
    ref = items(funcgrad.grad(S.loss, jit=False)(V, W, 3))
    for jit in (True, "auto", "kernels"):
        got = items(funcgrad.grad(S.loss, jit=jit)(V, W, 3))
        assert got.keys() == ref.keys() and np.allclose([got[k] for k in ref], list(ref.values()), rtol=1e-12)
    with pytest.raises(ArgumentTypeError, match=r"argument 0 \(v\) is a SparseVec.*jit=\"auto\""):
        funcgrad.grad(S.loss, jit="whole")(V, W, 3)


def test_value_and_grad_vjp_tuples_and_pytrees():
    value, (gv, gw) = funcgrad.value_and_grad(S.loss, argnums=(0, 1))(V, W, 2)
    assert np.isclose(value, S.loss(V, W, 2))
    eps, e = 1e-6, np.eye(4)
    fd = [(S.loss(V, W + eps * e[i], 2) - S.loss(V, W - eps * e[i], 2)) / (2 * eps) for i in range(4)]
    assert np.allclose(gw, fd, rtol=1e-6, atol=1e-8)
    assert items(gv) == items(funcgrad.grad(S.loss)(V, W, 2))
    # a leaf of a pytree
    gp = funcgrad.grad(lambda p: S.loss(p["v"], p["w"], 2))({"v": V, "w": W})
    assert items(gp["v"]) == items(gv) and np.allclose(gp["w"], gw)
    # vjp: the cotangent scales the space's element
    out, pull = funcgrad.vjp(lambda v: S.loss(v, W, 2), V)
    (g2,) = pull(2.0)
    assert np.allclose([g2.items[k] for k in gv.items], [2.0 * c for c in gv.items.values()])
    # the object as has_aux's aux (its seed is zero), and as a vjp output (refused: no cotangent for it)
    g3, aux = funcgrad.grad(lambda v: (S.loss(v, W, 2), v), has_aux=True)(V)
    assert aux is V and items(g3) == items(gv)
    with pytest.raises(ArgumentTypeError, match="the function returns a SparseVec"):
        funcgrad.vjp(lambda v: (v(W), v), V)


def test_a_fixed_object_and_a_rule_without_its_argument():
    # grad with respect to w only: the object is a constant of the code; its primitive methods still bind
    gw = funcgrad.grad(lambda w, v: v(w) * v.norm2())(W, V)
    assert np.allclose(gw, V.norm2() * np.array([0.7, 0.0, -1.3, 0.0]))
    # a rule giving None for the object: its gradient is the space's zeros
    @fg_extend.primitive
    def weigh(v, w):
        return np.sum(w) * 2.0
    fg_extend.defvjp(weigh, None, lambda ans, v, w: lambda g: 2.0 * g * np.ones_like(w))
    g = funcgrad.grad(lambda v, w: weigh(v, w) + v.norm2())(V, W)
    assert items(g) == {0: 1.4, 2: -2.6}
    g0 = funcgrad.grad(lambda v, w: weigh(v, w))(V, W)
    assert type(g0) is S.SparseVec and g0.items == {}

    @funcgrad.custom_vjp   # JAX's spelling: bwd returns the object's cotangent, an element of its space
    def second(v):
        return v.items.get(1, 0.0) ** 2

    second.defvjp(lambda v: (second(v), v), lambda v, g: (S.SparseVec({1: 2.0 * g * v.items.get(1, 0.0)}),))
    g2 = funcgrad.grad(lambda v: second(v) + 0.5 * v.norm2())(S.SparseVec({1: 3.0, 4: 1.0}))
    assert items(g2) == {1: 9.0, 4: 1.0}

    def unused(v, w, n):   # a loop (auto would compile it whole) and the object not used at all
        t = 0.0
        for k in range(n):
            t = t + np.sum(w) * k
        return t

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g1, gw = funcgrad.grad(unused, argnums=(0, 1))(V, W, 3)
    assert type(g1) is S.SparseVec and g1.items == {} and np.allclose(gw, 3.0)


def test_matches_autograd():
    ag = pytest.importorskip("autograd")
    import autograd.extend as ag_extend
    import autograd.numpy as anp
    A = make_space(ag_extend, anp)
    for n in (1, 3):
        want = ag.grad(A.loss)(A.SparseVec(V.items), W, n)
        got = funcgrad.grad(S.loss)(V, W, n)
        assert got.items.keys() == want.items.keys()
        assert np.allclose([got.items[k] for k in want.items], list(want.items.values()), rtol=1e-10)


def _refused(fun, *args, match):
    with pytest.raises(NoDerivativeError, match=match) as e:
        funcgrad.grad(fun)(*args)
    assert e.value.filename == __file__ and "SparseVec" in str(e.value)
    assert "VSpace.register" in str(e.value)
    return e.value


def test_uses_without_a_rule_are_refused_at_the_users_line():
    def reads(v, w):
        return v.items[0] * np.sum(w)
    err = _refused(reads, V, W, match=r"'v.items' reads .items of a differentiated SparseVec")
    assert err.lineno == reads.__code__.co_firstlineno + 1

    def arithmetic(v, w):
        return (v * 2.0)(w)
    _refused(arithmetic, V, W, match=r"applies .*multiply to a differentiated SparseVec")

    def numpy_of_it(v, w):
        return np.sum(np.sin(v)) + np.sum(w)
    _refused(numpy_of_it, V, W, match=r"np\.sin to a differentiated SparseVec")

    def rebinds_in_loop(v, w, n):
        t = 0.0
        for k in range(n):
            u = v
            t = t + u(w)
        return t
    _refused(rebinds_in_loop, V, W, 2, match=r"assigns, inside a loop or branch, a differentiated SparseVec")


def test_a_class_whose_call_has_no_rule_is_refused():
    class Plain:
        def __init__(self, c):
            self.c = c

        def __call__(self, x):
            return self.c * x

    class PlainSpace(fg_extend.VSpace):
        def zeros(self):
            return Plain(0.0)

    PlainSpace.register(Plain)
    try:
        with pytest.raises(NoDerivativeError, match=r"'p\(x\)' calls a differentiated Plain"):
            funcgrad.grad(lambda p, x: p(x))(Plain(2.0), 3.0)
    finally:
        del fg_extend.VSpace.mappings[Plain]


def test_a_jvp_only_rule_and_forward_mode_are_refused():
    @funcgrad.custom_jvp
    def first(v):
        return v.items.get(0, 0.0)

    @first.defjvp
    def _first_jvp(primals, tangents):
        return first(primals[0]), tangents[0].items.get(0, 0.0)

    with pytest.raises(NoDerivativeError, match=r"'first' has a JVP rule only.*vector space"):
        funcgrad.grad(lambda v: first(v))(V)
    with pytest.raises(ArgumentTypeError, match=r"jvp: primal 0 holds a SparseVec.*forward mode .* does not "):
        funcgrad.jvp(lambda v, w: v(w), (V, W), (V, W))
    with pytest.raises(ArgumentTypeError, match=r"hvp: primal 0 holds a SparseVec"):
        funcgrad.hvp(lambda v: v.norm2(), (V,), (V,))
    with pytest.raises(TypeError, match=r"argument 0 is a SparseVec; jacobian differentiates"):
        funcgrad.jacobian(lambda v: v(W))(V)


def test_extend_and_util_names():
    assert func(np.sin) is np.sin
    assert fg_extend.vspace(V).__class__ is S.SparseSpace
    vs = fg_extend.vspace(np.ones((2, 3)))
    assert vs.shape == (2, 3) and np.array_equal(vs.zeros(), np.zeros((2, 3)))
    assert np.isclose(vs.inner_prod(np.ones((2, 3)), 2 * np.ones((2, 3))), 12.0)
    with pytest.raises(TypeError, match="no vector space is registered for a value of type object"):
        fg_extend.vspace(object())
    # a primitive method reads, from the class, as the primitive itself; from an object, bound to it
    assert isinstance(S.SparseVec.__dict__["norm2"], funcgrad.custom.CustomFunction)
    assert np.isclose(V.norm2(), 0.49 + 1.69) and np.isclose(V(W), 0.7 * 0.3 - 1.3 * 1.1)
