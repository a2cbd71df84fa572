"""Second derivatives through the helper kernels that derivative rules call.

A rule's VJP or JVP template may call a funcgrad-internal helper kernel (``banded_matmul`` in the JVP line of
``scipy.linalg.solve_banded``). First-order code calls the kernel as it is; second-order code (hessian, hvp,
grad of grad, an order-2 check_grads, a gradient taken inside a differentiated function) differentiates the
generated code again, so each helper needs a derivative of its own: a definition over primitives
(funcgrad/ops/second_order.py) or a rule. The registry test below walks every rule's templates so a helper
without one cannot come back unnoticed; the helpers still without one are listed, and their refusal is checked
to name the function the user called, at the user's line.
"""
import numpy as np
import pytest
import scipy.linalg as sla
import scipy.stats as st

import funcgrad
import funcgrad.kernels.cpu as K
from funcgrad.errors import CompileError, NoDerivativeError, UnsupportedSyntaxError
from funcgrad.ops import registry as R
from funcgrad.testing import check_grads

from support import SWEEP, tagged_line

RNG = np.random.default_rng(20240916)
MODES = [dict(mode="auto"), dict(mode="python"), dict(jit=False)]
MODE_IDS = ["auto", "python", "nojit"]

# Helpers that rule templates call and that still have no derivative of their own: second derivatives through
# them are refused, naming the user's function (test_refusal_names_the_users_function). Adding a helper to a
# template means giving it a definition in funcgrad/ops/second_order.py (or a rule), or listing it here.
REFUSED: set = set()   # none left (written_along_axis has a rule; the Dirichlet and multivariate-normal
# gradient helpers and index_add have definitions)


def _helpers_without_a_derivative():
    """``{helper name: [(rule name, "vjp" or "jvp"), ...]}`` for every registered primitive a rule template calls
    that has neither a template of its own nor a definition of its kernel over primitives."""
    import scipy.special, scipy.stats, scipy.signal, scipy.integrate  # noqa: F401,E401  (their deferred rules)
    R._run_deferred()
    out = {}
    for name, prim in sorted(R.registry().items()):
        if prim.template is None:
            continue
        for part, _, obj in R.template_calls(prim.template):
            helper = R.lookup(obj) if obj is not None and callable(obj) else None
            if helper is None or helper.template is not None:
                continue
            kernel = getattr(K, helper.name, None)
            if kernel is not None and R.definition(kernel) is not None:
                continue
            out.setdefault(helper.name, []).append((name, part))
    return out


def test_every_helper_a_rule_calls_has_a_derivative_or_is_refused_by_name():
    missing = _helpers_without_a_derivative()
    unlisted = {h: users for h, users in missing.items() if h not in REFUSED}
    assert not unlisted, ("rule templates call helper kernels with no derivative of their own (second derivatives "
                          f"through them fail with an internal name): {unlisted}; define each over primitives in "
                          "funcgrad/ops/second_order.py")
    stale = REFUSED - set(missing)
    assert not stale, f"these helpers have a derivative now: take them off REFUSED: {sorted(stale)}"


def test_the_walk_sees_the_banded_helpers():
    # the walk reads both lines of a template: solve_banded's VJP helpers and its JVP helper
    calls = {(part, R.lookup(obj).name) for part, _, obj in R.template_calls(R.by_name("solve_banded").template)
             if obj is not None and R.lookup(obj) is not None}
    assert {("vjp", "solve_banded_vjp_b"), ("vjp", "solve_banded_vjp_ab"), ("jvp", "banded_matmul")} <= calls


# ----------------------------------------------------------------------------- definitions compute the kernels' values
def _spd(n):
    a = RNG.normal(size=(n, n))
    return a @ a.T + 3 * np.eye(n)


def _definition_cases():
    n = 5
    for lu in [(1, 1), (0, 2), (2, 0), (1, 3), (6, 0), (0, 6), (2, 7), (5, 5)]:   # bands at or past n: SciPy ignores them
        l, u = lu
        ab = RNG.normal(size=(l + u + 1, n))
        ab[u] += 5.0
        for bs in [(n,), (n, 2)]:
            y = RNG.normal(size=bs)
            yield "banded_matmul", (RNG.normal(size=ab.shape), y, l, u)
            yield "solve_banded_vjp_b", (RNG.normal(size=bs), ab, y, l, u)
            yield "solve_banded_vjp_ab", (RNG.normal(size=bs), y, ab, y, l, u)
    a3, t3 = np.tril(_spd(3)), RNG.normal(size=(3, 3))
    for trans in (0, 1):
        for lower in (False, True):
            for unit in (False, True):
                for bs in [(3,), (3, 2)]:
                    b = RNG.normal(size=bs)
                    yield "solve_triangular_like", (a3 if lower else a3.T, RNG.normal(size=bs), b, trans, lower, unit)
                    yield "solve_triangular_vjp_a", (RNG.normal(size=bs), RNG.normal(size=bs), a3, b, trans, lower,
                                                     unit)
                    yield "triangular_matmul", (t3, RNG.normal(size=bs), b, trans, lower, unit)
    for lower in (False, True):
        c = np.linalg.cholesky(_spd(3))
        c = c if lower else c.T
        for bs in [(3,), (3, 2)]:
            b = RNG.normal(size=bs)
            yield "cho_solve_like", (c, RNG.normal(size=bs), b, lower)
            yield "cho_solve_vjp_c", (RNG.normal(size=bs), RNG.normal(size=bs), c, b, lower)
            yield "cho_solve_jvp_c", (t3, RNG.normal(size=bs), c, b, lower)
        fac = K.cho_factor(_spd(3), lower)
        yield "cho_factor_vjp", (t3, fac, lower)
        yield "cho_factor_jvp", (t3, fac, lower)
        yield "cholesky_vjp", (t3, np.linalg.cholesky(_spd(3), upper=not lower), not lower)
    a = RNG.normal(size=(3, 3))
    for p in (0, 1, 3, -2):
        yield "matrix_power_jvp", (t3, a, p)
        yield "matrix_power_vjp", (t3, a, p)
    yield "expm_jvp", (t3, a)
    yield "expm_vjp", (t3, a)
    yield "sqrtm_vjp", (t3, sla.sqrtm(_spd(3)))


@pytest.mark.parametrize("name, args", list(_definition_cases()))
def test_each_new_definition_computes_its_kernels_value(name, args):
    from funcgrad.ops import second_order as SO
    got, want = getattr(SO, name)(*args), getattr(K, name)(*args)
    assert np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-11)


# ----------------------------------------------------------------------------- second derivatives against differences
def _fd_jacobian_of(g, x, eps=1e-5):
    """Central differences of the gradient function ``g`` at ``x``: shape x.shape + x.shape."""
    cols = []
    for k in range(x.size):
        e = np.zeros(x.size)
        e[k] = eps
        e = e.reshape(x.shape)
        cols.append((np.asarray(g(x + e)) - np.asarray(g(x - e))).reshape(-1) / (2 * eps))
    return np.stack(cols, axis=-1).reshape(x.shape + x.shape)


def _banded(l, u, n=5):  # noqa: E741
    ab = RNG.normal(size=(l + u + 1, n))
    ab[u] += 5.0           # diagonally dominant
    return ab


_AB = _banded(1, 2)
_B1 = RNG.normal(size=5)
_B2 = RNG.normal(size=(5, 2))
_C = RNG.normal(size=(5, 2))


def banded_in_ab(ab):
    return np.sum(np.sin(sla.solve_banded((1, 2), ab, _B1)))


def banded_in_b(b):
    return np.sum(np.cos(sla.solve_banded((1, 2), _AB, b)) * _C)


def banded_both(ab, b):
    y = sla.solve_banded((1, 2), ab, b)
    return np.sum(y * y * _C) + np.sum(np.sin(ab))


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("f, x", [(banded_in_ab, _AB), (banded_in_b, _B2)], ids=["ab", "b"])
def test_hessian_of_solve_banded_matches_differences_of_the_gradient(f, x, kw):
    H = funcgrad.hessian(f, **kw)(x)
    want = _fd_jacobian_of(funcgrad.grad(f, **kw), x)
    np.testing.assert_allclose(H, want, rtol=1e-5, atol=1e-6)
    assert np.abs(H).max() > 1e-2          # not trivially zero


# the slow grids (order-2 checks in every mode and band layout: minutes) run in `make test-sweep`; `make test`
# keeps one of each
_SWEEP = pytest.mark.sweep


@pytest.mark.parametrize("kw", [pytest.param(dict(mode="python"), id="python"),
                                pytest.param(dict(mode="auto"), id="auto", marks=_SWEEP),
                                pytest.param(dict(jit=False), id="nojit", marks=_SWEEP)])
@pytest.mark.parametrize("lu", [(1, 1), pytest.param((0, 2), marks=_SWEEP), pytest.param((2, 1), marks=_SWEEP)])
def test_order_2_check_grads_of_solve_banded_in_both_modes(lu, kw):
    ab = _banded(*lu, n=4)

    def f(ab, b):
        return np.sum(np.tanh(sla.solve_banded(lu, ab, b)))
    check_grads(f, (ab, RNG.normal(size=4)), order=2, modes=("fwd", "rev"), **kw)
    check_grads(f, (ab, RNG.normal(size=(4, 3))), order=2, modes=("fwd", "rev"), **kw)


def test_autograd_style_order_2_check_of_solve_banded():
    # the form HIPS autograd's test_scipy.py::test_solve_banded uses, raised to both modes
    def fun(ab, b):
        return sla.solve_banded((1, 1), ab, b)
    check_grads(fun, 0, modes=("fwd", "rev"), order=2)(_banded(1, 1, 4), RNG.normal(size=4))
    check_grads(fun, 1, modes=("fwd", "rev"), order=2)(_banded(1, 1, 4), RNG.normal(size=4))


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_grad_of_grad_and_grad_inside_of_solve_banded(kw):
    def f(s):
        return np.sum(np.sin(sla.solve_banded((1, 2), _AB * s, _B1)))

    got = funcgrad.grad(funcgrad.grad(f, **kw), **kw)(1.3)
    h = 1e-4
    want = (funcgrad.grad(f, **kw)(1.3 + h) - funcgrad.grad(f, **kw)(1.3 - h)) / (2 * h)
    np.testing.assert_allclose(got, want, rtol=1e-6)

    def outer(b):   # reverse mode over reverse mode: the VJP helpers differentiated
        return np.sum(funcgrad.grad(banded_in_b)(b) ** 2)
    np.testing.assert_allclose(funcgrad.grad(outer, **kw)(_B2), _fd_of_scalar(outer, _B2), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("lu", [(6, 0), pytest.param((0, 6), marks=_SWEEP), (2, 7)])
def test_solve_banded_with_a_band_width_at_least_n_matches_scipy(lu, kw):
    # scipy.linalg.solve_banded accepts l or u >= n (the rows past the matrix are ignored); the kernels sliced
    # ab[r, lo:hi] with hi = n - s < 0 and failed with a broadcast error inside NumPy
    ab, b = _banded(*lu), RNG.normal(size=(5, 2))

    def f(ab, b):
        return np.sum(np.sin(sla.solve_banded(lu, ab, b)))
    v, (gab, gb) = funcgrad.value_and_grad(f, argnums=(0, 1), **kw)(ab, b)
    np.testing.assert_allclose(v, f(ab, b), rtol=1e-12)
    np.testing.assert_allclose(gab, _fd_of_scalar(lambda x: f(x, b), ab), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gb, _fd_of_scalar(lambda x: f(ab, x), b), rtol=1e-6, atol=1e-8)
    if kw.get("mode") != "python" or (lu != (6, 0) and not SWEEP):
        return   # the order-2 checks: one layout in `make test`, every one in `make test-sweep`
    check_grads(f, (ab, b), order=2, modes=("fwd", "rev"), **kw)
    H = funcgrad.hessian(lambda x: f(x, b), **kw)(ab)
    np.testing.assert_allclose(H, _fd_jacobian_of(funcgrad.grad(lambda x: f(x, b), **kw), ab), rtol=1e-5, atol=1e-6)


def _fd_of_scalar(f, x, eps=1e-5):
    g = np.zeros(x.size)
    for k in range(x.size):
        e = np.zeros(x.size)
        e[k] = eps
        e = e.reshape(x.shape)
        g[k] = (f(x + e) - f(x - e)) / (2 * eps)
    return g.reshape(x.shape)


_S = _spd(3)
_A3 = RNG.normal(size=(3, 3))
_V3 = RNG.normal(size=3)


def tri_loss(a):
    return np.sum(np.sin(sla.solve_triangular(a, _V3, lower=True))) + np.sum(
        sla.solve_triangular(a, _A3, trans="T", unit_diagonal=True) ** 2)


def cho_solve_loss(c):
    return np.sum(np.sin(sla.cho_solve((c, True), _V3))) + np.sum(sla.cho_solve((c, False), _A3) ** 2)


def cho_factor_loss(a):
    c, low = sla.cho_factor(a @ a.T + 3 * np.eye(3), lower=True)
    return np.sum(np.sin(c))


def expm_loss(a):
    return np.sum(np.sin(sla.expm(0.5 * a)))


def power_loss(a):
    return np.sum(np.sin(np.linalg.matrix_power(a, 3))) + np.sum(np.linalg.matrix_power(a + 3 * np.eye(3), -2))


_SECOND = [(tri_loss, np.tril(_S)), (cho_solve_loss, np.linalg.cholesky(_S)), (cho_factor_loss, _A3),
           (expm_loss, _A3), (power_loss, _A3)]


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("f, x", [pytest.param(f, x, id=f.__name__, marks=_SWEEP if f is power_loss else ())
                                  for f, x in _SECOND])
def test_hessian_through_the_other_helpers_matches_differences_of_the_gradient(f, x, kw):
    H = funcgrad.hessian(f, **kw)(x)
    np.testing.assert_allclose(H, _fd_jacobian_of(funcgrad.grad(f, **kw), x), rtol=1e-5, atol=1e-6)


def tri_vec(a):
    return np.sum(np.sin(sla.solve_triangular(a, _V3, lower=True)))


def tri_mat(a):
    return np.sum(sla.solve_triangular(a, _A3, trans="T", unit_diagonal=True) ** 2)


def cho_vec(c):
    return np.sum(np.sin(sla.cho_solve((c, True), _V3)))


def cho_mat(c):
    return np.sum(sla.cho_solve((c, False), _A3) ** 2)


# one right-hand-side shape per function: see test_reverse_over_reverse_with_two_rhs_shapes_in_one_function
_INSIDE = [(tri_vec, np.tril(_S)), (tri_mat, np.triu(_S)), (cho_vec, np.linalg.cholesky(_S)),
           (cho_mat, np.linalg.cholesky(_S).T), (cho_factor_loss, _A3),
           (expm_loss, _A3), (power_loss, _A3), (lambda a: np.sum(np.linalg.cholesky(_S + a @ a.T) * _A3), _A3),
           (lambda a: np.sum(np.sin(sla.sqrtm(_S + a @ a.T))), _A3)]


@pytest.mark.parametrize("f, x", _INSIDE, ids=["tri_vec", "tri_mat", "cho_vec", "cho_mat", "cho_factor", "expm", "power",
                                               "cholesky", "sqrtm"])
def test_reverse_over_reverse_through_the_vjp_helpers(f, x):
    def outer(a):
        return np.sum(funcgrad.grad(f)(a) ** 2)
    np.testing.assert_allclose(funcgrad.grad(outer, mode="python")(x), _fd_of_scalar(outer, x), rtol=1e-5, atol=1e-6)


def solve_loss(a):
    return np.sum(np.sin(np.linalg.solve(a, _V3))) + np.sum(np.linalg.solve(a, _A3) ** 2)


def banded_two_rhs(ab):
    return np.sum(np.sin(sla.solve_banded((1, 2), ab, _B1))) + np.sum(sla.solve_banded((1, 2), ab, _B2) ** 2)


_TWO_RHS = [(tri_loss, np.tril(_S)), (solve_loss, _S), (cho_solve_loss, np.linalg.cholesky(_S)), (banded_two_rhs, _AB)]


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("f, x", _TWO_RHS, ids=[f.__name__ for f, _ in _TWO_RHS])
def test_reverse_over_reverse_with_two_rhs_shapes_in_one_function(f, x, kw):
    # the rules' helpers branch on b.ndim; read back, ``b`` is the generated code's constant right-hand side, and
    # the two calls' ``b.ndim`` were one captured parameter (keyed by the definition and the name 'ndim' alone),
    # so the vector solve took the matrix branch: AxisError inside NumPy, or with equal ranks a wrong value
    def outer(a):
        return np.sum(funcgrad.grad(f)(a) ** 2)
    np.testing.assert_allclose(funcgrad.grad(outer, **kw)(x), _fd_of_scalar(outer, x), rtol=1e-5, atol=1e-6)


# the sections below draw from their own generator: the nn section's data (further down) stays as it was
RNG3 = np.random.default_rng(20250611)


# ----------------------------------------------------------------------------- einsum
def _einsum_cases():
    from funcgrad.ops.numpy_shape import EINSUM_CASES
    extra = [("...ij,jk->...ik", [(2, 3, 4), (4, 2)]), ("...ij,jk", [(2, 3, 4), (4, 2)]), ("ij,ij->", [(2, 3), (1, 3)]),
             ("iji->j", [(2, 3, 2)]), ("...ii,...i->...", [(2, 3, 3), (3,)])]
    for subs, shapes in EINSUM_CASES + extra:   # diagonals, broadcasts, ellipses, implicit output, scalars, three operands
        ops = tuple(RNG3.normal(size=sh) for sh in shapes)
        g = RNG3.normal(size=np.shape(np.einsum(subs, *ops)))
        tans, dots = (tuple(RNG3.normal(size=sh) for sh in shapes) for _ in range(2))
        yield "einsum_vjp", (g, subs, ops)
        yield "einsum_tangent_vjp", (g, subs, ops, tans)
        yield "einsum_tangent2", (subs, ops, tans, dots)


@pytest.mark.parametrize("name, args", [pytest.param(n, a, id=f"{n}-{a[1] if n != 'einsum_tangent2' else a[0]}")
                                        for n, a in _einsum_cases()])
def test_each_einsum_definition_computes_its_kernels_value(name, args):
    from funcgrad.ops import second_order as SO
    got, want = getattr(SO, name)(*args), getattr(K, name)(*args)
    got, want = (got, want) if isinstance(want, (list, tuple)) else ([got], [want])
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert np.shape(a) == np.shape(b)
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)


_E43 = RNG3.normal(size=(4, 3))
_E233 = RNG3.normal(size=(2, 3, 3))


def einsum_square(x):
    return np.sum(np.einsum("ij,jk->ik", x, x) ** 2)


def einsum_batched(x):   # an ellipsis broadcast against a constant, a diagonal, a three-operand sum
    y = np.einsum("...ij,jk->...ik", _E233, x)
    return np.sum(np.sin(y)) + np.einsum("ii->", x) ** 2 + np.einsum("ij,jk,ki", x, x, x)


def einsum_implicit(x):   # implicit output (the ellipsis first, then the sorted letters) and a size-1 broadcast
    return np.sum(np.cos(np.einsum("...j,kj", x[None, :1, :], _E43))) + np.sum(np.einsum("ij,ij->i", x, x) ** 3)


_EINSUM = [(einsum_square, RNG3.normal(size=(3, 3))), (einsum_batched, RNG3.normal(size=(3, 3))),
           (einsum_implicit, RNG3.normal(size=(2, 3)))]


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("f, x", _EINSUM, ids=[f.__name__ for f, _ in _EINSUM])
def test_second_derivatives_of_einsum_match_differences(f, x, kw):
    H = funcgrad.hessian(f, **kw)(x)
    np.testing.assert_allclose(H, _fd_jacobian_of(funcgrad.grad(f, **kw), x), rtol=1e-5, atol=1e-6)
    assert np.abs(H).max() > 1e-2

    def outer(a):   # reverse mode over reverse mode: einsum_vjp differentiated
        return np.sum(funcgrad.grad(f)(a) ** 2)
    np.testing.assert_allclose(funcgrad.grad(outer, **kw)(x), _fd_of_scalar(outer, x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("f, x", _EINSUM[:2], ids=[f.__name__ for f, _ in _EINSUM[:2]])
def test_third_derivatives_through_einsum(f, x):
    # generated second-order code calls einsum_tangent2 (forward over forward) and einsum_tangent_vjp (reverse over
    # forward); a third derivative reads that code back and differentiates their definitions
    v = RNG3.normal(size=x.shape)
    h = 1e-4

    def d2(a):   # the second directional derivative along v, checked against differences of the first
        return funcgrad.jvp(lambda b: funcgrad.jvp(f, (b,), (v,))[1], (a,), (v,))[1]
    d1 = [funcgrad.jvp(f, (x + s * h * v,), (v,))[1] for s in (1, -1)]
    np.testing.assert_allclose(d2(x), (d1[0] - d1[1]) / (2 * h), rtol=1e-6)
    np.testing.assert_allclose(funcgrad.jvp(d2, (x,), (v,))[1], (d2(x + h * v) - d2(x - h * v)) / (2 * h), rtol=1e-6)

    def outer(a):   # reverse over forward, taken inside: its einsum_tangent_vjp differentiated
        return np.sum(funcgrad.grad(lambda b: funcgrad.jvp(f, (b,), (v,))[1])(a) ** 2)
    np.testing.assert_allclose(funcgrad.grad(outer, mode="python")(x), _fd_of_scalar(outer, x), rtol=1e-5, atol=1e-6)
    check_grads(f, (x,), order=2, modes=("fwd", "rev"), mode="python")


# ----------------------------------------------------------------------------- qr
def _qr_cases():
    for shape in [(4, 3), (3, 3), (3, 5), (2, 4, 3), (2, 3, 5)]:
        for mode in ["reduced", "complete", "r"]:
            a = RNG3.normal(size=shape)
            p = K.qr_packed(a, mode)
            g = RNG3.normal(size=p.shape)
            if mode == "complete" and shape[-2] > shape[-1]:
                g[..., :shape[-2], shape[-1]:] = 0   # no cotangent on Q's extra columns (refused otherwise)
            else:
                yield "qr_jvp", (RNG3.normal(size=shape), p, a, mode)
            yield "qr_vjp", (g, p, a, mode)


@pytest.mark.parametrize("name, args", list(_qr_cases()))
def test_each_qr_definition_computes_its_kernels_value(name, args):
    test_each_new_definition_computes_its_kernels_value(name, args)


_C43 = RNG3.normal(size=(4, 3))


def qr_all(a):   # tall, wide, square complete and mode="r"
    q, r = np.linalg.qr(a)
    q2, r2 = np.linalg.qr(a.T)
    q3, r3 = np.linalg.qr(a[:3], mode="complete")
    return (np.sum(np.sin(q) * _C43) + np.sum(r * r * _C43[:3]) + np.sum(np.sin(q2)) + np.sum(np.cos(r2) * _C43.T)
            + np.sum(q3 * r3) + np.sum(np.linalg.qr(a[1:], mode="r") ** 3))


_QR_X = RNG3.normal(size=(4, 3))


# qr's second-order code is long (a second derivative takes seconds to build): python in `make test`, the other
# modes in `make test-sweep`
_SLOW_MODES = [pytest.param(dict(mode="python"), id="python"), pytest.param(dict(mode="auto"), id="auto", marks=_SWEEP),
               pytest.param(dict(jit=False), id="nojit", marks=_SWEEP)]


@pytest.mark.parametrize("kw", _SLOW_MODES)
def test_hessian_of_qr_matches_differences_of_the_gradient(kw):
    H = funcgrad.hessian(qr_all, **kw)(_QR_X)
    np.testing.assert_allclose(H, _fd_jacobian_of(funcgrad.grad(qr_all, **kw), _QR_X), rtol=1e-5, atol=1e-6)


def qr_tall_wide(a):   # both branches of qr_vjp (m >= n, m < n)
    q, r = np.linalg.qr(a)
    return np.sum(np.sin(q) * _C43) + np.sum(r * r * _C43[:3]) + np.sum(np.cos(np.linalg.qr(a.T)[1]) * _C43.T)


@pytest.mark.parametrize("f", [qr_tall_wide, pytest.param(qr_all, marks=_SWEEP)], ids=["tall_wide", "all"])
@pytest.mark.parametrize("kw", _SLOW_MODES)
def test_gradient_of_a_gradient_of_qr(kw, f):
    def outer(a):   # reverse mode over reverse mode: qr_vjp differentiated
        return np.sum(funcgrad.grad(f)(a) ** 2)
    np.testing.assert_allclose(funcgrad.grad(outer, **kw)(_QR_X), _fd_of_scalar(outer, _QR_X), rtol=1e-5, atol=1e-6)


def qr_complete_tall(a):
    return np.sum(np.sin(np.linalg.qr(a, mode="complete")[0]))  # LINE: qr_complete


def svd_full_wide(a):
    u, s, vh = np.linalg.svd(a, full_matrices=True)  # LINE: svd_full
    return np.sum(np.sin(vh)) + np.sum(s)


_COMPLETE = [(qr_complete_tall, _QR_X, "qr_complete", "extra columns of Q for a tall matrix are not unique"),
             (svd_full_wide, _QR_X.T, "svd_full", "extra singular vectors of a non-square matrix are not unique")]
_COMPLETE_MODES = [("python", dict(mode="python")), ("njit", dict(mode="njit")), ("nojit", dict(jit=False))]


# svd's compiled second order (half a minute of compiling) is left to make test-sweep; its refusal is the same
# definitions' assert the Python mode reaches, and qr's compiled refusal stays in make test
@pytest.mark.parametrize("f, x, tag, what, kw", [
    pytest.param(*case, kw, id=f"{name}-{case[0].__name__}", marks=_SWEEP if (case[2], name) == ("svd_full", "njit")
                 else ()) for name, kw in _COMPLETE_MODES for case in _COMPLETE])
def test_extra_vectors_of_complete_factorizations_are_refused_at_every_order(f, x, tag, what, kw):
    # the extra columns of Q (singular vectors) have no derivative: refused when a cotangent reaches them. First
    # order: by the kernels (a ValueError noted with the user's line); code read back (hessian where it reads
    # qr_jvp's definition, a gradient taken inside a differentiated function): by the definitions' asserts, a
    # NoDerivativeError at the user's line (it was an AssertionError)
    if f is qr_complete_tall and kw.get("mode") == "njit":
        # the compiled kernel has no complete factorization: refused at the user's line (it compiled the reduced
        # one in its place, a Q of 3 columns, and returned a wrong value and gradient)
        for run in (funcgrad.grad(f, **kw), funcgrad.hessian(f, **kw), funcgrad.jit(f, **kw)):
            with pytest.raises(CompileError, match="Numba cannot compile") as ei:
                run(x)
            assert ei.value.lineno == tagged_line(__file__, tag)
        return
    for run in (funcgrad.grad(f, **kw), funcgrad.hessian(f, **kw)):
        with pytest.raises((ValueError, NoDerivativeError), match=what):
            run(x)
    with pytest.raises(NoDerivativeError, match=what) as ei:
        funcgrad.grad(lambda a: np.sum(funcgrad.grad(f)(a) ** 2), **kw)(x)
    assert ei.value.filename == __file__ and ei.value.lineno == tagged_line(__file__, tag)
    assert "funcgrad refuses" not in str(ei.value)


# ----------------------------------------------------------------------------- VJPs of eigh, eig, svd, pinv, norm
# A gradient taken inside a differentiated function (or grad of grad) reads reverse-mode code back, and the VJP
# helpers of these rules are differentiated through their definitions. Inputs are generic: distinct eigenvalues
# and singular values (where two coincide the derivative does not exist).
def _sym(n, batch=()):
    a = RNG3.normal(size=batch + (n, n))
    return a + np.swapaxes(a, -1, -2)


def _complex(shape):
    return RNG3.normal(size=shape) + 1j * RNG3.normal(size=shape)


def _vjp_cases():
    for batch in [(), (2,)]:
        for uplo in "LU":
            p = K.eigh_packed(_sym(4, batch), uplo)
            yield "eigh_vjp", (RNG3.normal(size=p.shape), p, uplo)
        h = _complex(batch + (3, 3))
        p = K.eigh_packed(h + np.conj(np.swapaxes(h, -1, -2)))
        yield "eigh_vjp", (_complex(p.shape), p)
        p = K.eig_packed(_sym(4, batch) + 0.3 * RNG3.normal(size=batch + (4, 4)))   # a real spectrum
        yield "eig_vjp", (RNG3.normal(size=p.shape), p)
        for m, n in [(4, 3), (3, 3), (3, 5)]:
            k = min(m, n)
            for a in (RNG3.normal(size=batch + (m, n)), _complex(batch + (m, n))):
                for full in (False, True):
                    p = K.svd_packed(a, full, False)
                    g = RNG3.normal(size=p.shape) + (1j * RNG3.normal(size=p.shape) if np.iscomplexobj(p) else 0)
                    g[..., :m, k:] = 0        # no cotangent on the extra singular vectors (refused otherwise)
                    g[..., m + 1:, k:] = 0
                    yield "svd_vjp", (g, p, a, full, False)
                    if not np.iscomplexobj(p):   # the singular values alone (the kernel skips the vectors' terms)
                        gs = 0 * g
                        gs[..., m, :k] = 1.0
                        yield "svd_vjp", (gs, p, a, full, False)
            a = RNG3.normal(size=batch + (m, n))
            y = np.linalg.pinv(a)
            yield "pinv_vjp", (RNG3.normal(size=y.shape), y, a, False)
        s = _sym(4, batch)
        yield "svd_vjp", (RNG3.normal(size=(batch + (9, 4))), K.svd_packed(s, True, True), s, True, True)
        y = np.linalg.pinv(s, hermitian=True)
        yield "pinv_vjp", (RNG3.normal(size=y.shape), y, s + np.triu(RNG3.normal(size=s.shape), 1), True)
    for x, ords, axes in [(RNG3.normal(size=5), [None, 2, 1, np.inf, -np.inf, 0, 3, -1.5], [None, 0]),
                          (RNG3.normal(size=(3, 4)), [None, "fro", "nuc", 2, -2, 1, -1, np.inf, -np.inf],
                           [None, (0, 1), (1, 0)]),
                          (RNG3.normal(size=(2, 3, 4)), [None, 2, 1, np.inf, 3], [1, -1]),
                          (RNG3.normal(size=(2, 3, 4)), ["fro", "nuc", 2, 1, -np.inf], [(1, 2), (2, 0)])]:
        for o in ords:
            for ax in axes:
                for kd in (False, True):
                    y = np.linalg.norm(x, o, ax, kd)
                    yield "norm_vjp", (RNG3.normal(size=np.shape(y)), y, x, o, ax, kd)


@pytest.mark.parametrize("name, args", list(_vjp_cases()))
def test_each_vjp_definition_computes_its_kernels_value(name, args):
    test_each_new_definition_computes_its_kernels_value(name, args)


_C33 = RNG3.normal(size=(3, 3))
_C42 = RNG3.normal(size=(4, 2))
_S33 = _sym(3)


def eigh_loss(a):
    w, v = np.linalg.eigh(a + a.T)
    return np.sum(w ** 3) + np.sum(v * v * _C33) + np.sum(np.linalg.eigvalsh(a @ a.T, UPLO="U") ** 2)


def eig_loss(a):   # a real spectrum near the symmetric _S33
    w, v = np.linalg.eig(_S33 + 0.3 * a)
    return np.sum(w ** 3) + np.sum(v * v * _C33)


def svd_loss(a):   # U S Vt of a tall matrix (signs cancel in u * u), the singular values of a wide one
    u, s, vt = np.linalg.svd(a[:, :2], full_matrices=False)
    return np.sum(s ** 3) + np.sum(u * u * _C42) + np.sum(vt * vt) + np.sum(np.sin(np.linalg.svd(a.T, compute_uv=False)))


def svd_full(a):   # a square matrix, full_matrices=True
    u, s, vt = np.linalg.svd(a[:3])
    return np.sum(np.sin(s)) + np.sum((u * u) @ _C33) + np.sum(vt * vt * _C33.T)


def pinv_loss(a):
    return np.sum(np.sin(np.linalg.pinv(a))) + np.sum(np.linalg.pinv(a[:3] + a[:3].T, hermitian=True) ** 2)


def norm_vectors(a):   # vector norms of computed vectors (ord without axis: the ndim read back)
    return (np.linalg.norm(a) ** 3 + np.sum(np.linalg.norm(a, 3, axis=0) ** 2) + np.linalg.norm(a[0], -1.5) ** 2
            + np.sum(np.sin(np.linalg.norm(a, axis=-1, keepdims=True))) + np.linalg.norm(a[1] * a[2], 2) ** 2)


def norm_matrices(a):   # nuclear, spectral, smallest singular value, Frobenius; inf and 1 norms (piecewise linear)
    return (np.linalg.norm(a, "nuc") ** 2 + np.linalg.norm(a, 2) * np.linalg.norm(a, -2) + np.linalg.norm(a @ a.T, "fro")
            + np.linalg.norm(a, np.inf) * np.linalg.norm(a, 1))


_A43 = RNG3.normal(size=(4, 3))
_LINALG_VJP = [(eigh_loss, _A3), (eig_loss, _A3), (svd_loss, _A43), (svd_full, _A43), (pinv_loss, _A43),
               (norm_vectors, _A43), (norm_matrices, _A43)]


def _vjp_params(default):
    """Every function in every mode; ``default`` in python mode in `make test`, the rest in `make test-sweep`."""
    return [pytest.param(f, x, kw, id=f"{f.__name__}-{mid}", marks=() if f in default and mid == "python" else _SWEEP)
            for f, x in _LINALG_VJP for kw, mid in zip(MODES, MODE_IDS)]


@pytest.mark.parametrize("f, x, kw", _vjp_params({f for f, _ in _LINALG_VJP}))
def test_gradient_of_a_gradient_through_the_linalg_vjps(f, x, kw):
    def outer(a):   # reverse mode over reverse mode: the VJP helpers differentiated
        return np.sum(funcgrad.grad(f)(a) ** 2)
    g = funcgrad.grad(outer, **kw)(x)
    np.testing.assert_allclose(g, _fd_of_scalar(outer, x), rtol=1e-5, atol=1e-5)
    assert np.abs(g).max() > 1e-2


@pytest.mark.parametrize("f, x, kw", _vjp_params({norm_vectors, norm_matrices, svd_loss}))
def test_hessian_through_the_linalg_rules(f, x, kw):
    H = funcgrad.hessian(f, **kw)(x)
    np.testing.assert_allclose(H, _fd_jacobian_of(funcgrad.grad(f, **kw), x), rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- hstack, vstack, dstack, column_stack
_JOINS = [("hstack", [(3,), (2,), ()]), ("hstack", [(2, 3), (2, 1)]), ("hstack", [(2, 3, 2), (2, 1, 2)]),
          ("vstack", [(3,), (2, 3), (3,)]), ("vstack", [(2, 2, 3), (1, 2, 3)]), ("vstack", [(), ()]),
          ("dstack", [(3,), (3,)]), ("dstack", [(2, 3), (2, 3, 2)]), ("column_stack", [(3,), (3, 2)]),
          ("column_stack", [(), ()])]


@pytest.mark.parametrize("kind, shapes", _JOINS)
def test_unjoin_definition_computes_its_kernels_value(kind, shapes):
    from funcgrad.ops import second_order as SO
    arrays = tuple(RNG3.normal(size=sh) for sh in shapes)
    g = RNG3.normal(size=getattr(np, kind)(arrays).shape)
    got, want = SO.unjoin(g, arrays, kind), K.unjoin(g, arrays, kind)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert np.shape(a) == np.shape(b)
        np.testing.assert_allclose(a, b, rtol=1e-12)


_C32 = RNG3.normal(size=(3, 2))
_C3 = _C32[:, 1].copy()


def stack_loss(a):   # a (3, 2): computed pieces, constants and a number, of every rank each join reads
    h = np.hstack([a, np.sin(a[:, :1]), _C32])
    v = np.vstack([a[0], np.cos(a), a[1] * a[2]])
    d = np.dstack([a, a * a])
    c = np.column_stack([a[:, 0], a ** 3, _C3])
    return (np.sum(np.sin(h)) + np.sum(v ** 3) + np.sum(np.cos(d)) + np.sum(c * c * c)
            + np.sum(np.hstack([a[0], a[1], 2.0]) ** 4))


@pytest.mark.parametrize("kw", _SLOW_MODES)
def test_gradient_of_a_gradient_through_the_joins(kw):
    def outer(a):   # reverse mode over reverse mode: unjoin differentiated
        return np.sum(funcgrad.grad(stack_loss)(a) ** 2)
    # its own generator: drawn from RNG3, x depended on which tests ran before it in the process (pytest -n 2),
    # and one such draw gave gradient entries of 2e10 next to O(10) ones, which central differences missed by 1e-2
    x = np.random.default_rng(11).normal(size=(3, 2))
    np.testing.assert_allclose(funcgrad.grad(outer, **kw)(x), _fd_of_scalar(outer, x), rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- refusals in the user's terms
_IDX = np.array([[0], [2], [1]])


def put_along_loss(a):
    b = np.zeros((3, 3))
    np.put_along_axis(b, _IDX, a, axis=1)  # LINE: put_along
    return np.sum(np.sin(b) * _A3)


def test_refusal_names_the_users_function(monkeypatch):
    # no helper is refused today: take written_along_axis's rule away to see how one would be. A gradient taken
    # inside a differentiated function is refused naming np.put_along_axis at the user's line, not the helper
    prim = R.by_name("written_along_axis")
    monkeypatch.setattr(prim, "_vjp_fn", None)
    monkeypatch.setattr(prim, "_template", None)
    with pytest.raises(NoDerivativeError) as ei:
        funcgrad.grad(lambda a: np.sum(funcgrad.grad(put_along_loss)(a) ** 2))(_V3[:, None])
    msg = str(ei.value)
    assert "np.put_along_axis: second derivatives are not supported" in msg
    assert f"{__file__}:{tagged_line(__file__, 'put_along')}:" in msg
    assert "written_along_axis" not in msg and "registered" not in msg


_C33 = RNG.normal(size=(3, 3))


def einsum_loss(a):
    return np.sum(np.sin(np.einsum("ij,jk->ik", a, _C33)))


def test_a_refusal_inside_a_helpers_definition_names_the_users_function(monkeypatch):
    # a definition normalize cannot read (here one made so on purpose) is refused under the name of the function
    # the user called, np.einsum, not the helper's (it read "einsum_vjp: arithmetic on a tuple...")
    def unreadable(g, subscripts, operands, optimize=False):
        return g + (1, 2)
    unreadable.kernel_name = "einsum_vjp"
    monkeypatch.setattr(R.definition(K.einsum_vjp), "fn", unreadable)
    with pytest.raises(UnsupportedSyntaxError) as ei:
        funcgrad.grad(lambda a: np.sum(funcgrad.grad(einsum_loss)(a) ** 2))(_A3)  # LINE: einsum_inside
    msg = str(ei.value)
    assert "np.einsum: arithmetic on a tuple" in msg and "einsum_vjp" not in msg
    assert ei.value.lineno == tagged_line(__file__, "einsum_inside")


# ----------------------------------------------------------------------------- put_along_axis, Dirichlet, MVN
def _fd_grad(f, x):
    return _fd_of_scalar(f, x, eps=1e-6)


_IDX2 = np.array([[0, 2, 0], [1, 1, 3]])   # position (0, 0) and (1, 1) written twice: the last write stays


def put_along_twice(a, v):
    b = a.copy()
    np.put_along_axis(b, _IDX2, v, axis=1)
    return np.sum(np.sin(b) * b)


def _grads_inside(f, n):
    inner = funcgrad.grad(f, argnums=tuple(range(n)))

    def outer(*args):   # a gradient taken inside a differentiated function: reverse over reverse
        return sum(np.sum(np.sin(g)) for g in inner(*args))
    return outer


@pytest.mark.parametrize("kw", [dict(mode="python"), dict(mode="njit"), dict(jit=False)], ids=["python", "njit", "nojit"])
@pytest.mark.parametrize("vshape", [(2, 3), (2, 1)])
def test_gradient_inside_through_put_along_axis(kw, vshape):
    a, v = RNG.normal(size=(2, 4)), RNG.normal(size=vshape)
    outer = _grads_inside(put_along_twice, 2)
    np.testing.assert_allclose(funcgrad.grad(outer, argnums=1, **kw)(a, v), _fd_grad(lambda y: outer(a, y), v),
                               rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(funcgrad.grad(outer, argnums=0, **kw)(a, v), _fd_grad(lambda y: outer(y, v), a),
                               rtol=1e-6, atol=1e-8)
    check_grads(put_along_twice, order=2, modes=("fwd", "rev"))(a, v)


def dirichlet_both(x, alpha):
    return np.sum(st.dirichlet.logpdf(x, alpha)) + np.sum(st.dirichlet.pdf(x, alpha))


def mvn_all(x, m, c):
    return (np.sum(st.multivariate_normal.logpdf(x, m, c)) + np.sum(st.multivariate_normal.pdf(x, m, c))
            + st.multivariate_normal.entropy(m, c))


def _stats_cases():
    alpha = np.array([1.7, 2.4, 3.1])
    yield "dirichlet_point", dirichlet_both, (np.array([0.2, 0.3]), alpha)           # K - 1 components
    yield "dirichlet_batch", dirichlet_both, (np.array([[0.2, 0.1, 0.3], [0.3, 0.5, 0.2]]), alpha)
    yield "mvn_matrix", mvn_all, (RNG.normal(size=(4, 3)), RNG.normal(size=3), _spd(3))
    yield "mvn_one_point", mvn_all, (RNG.normal(size=3), RNG.normal(size=3), _spd(3))
    yield "mvn_diagonal", mvn_all, (RNG.normal(size=(2, 3)), RNG.normal(size=3), RNG.uniform(0.5, 2.0, size=3))
    yield "mvn_scalar", mvn_all, (RNG.normal(size=(2, 3)), RNG.normal(size=3), np.array(1.3))


_STATS = list(_stats_cases())


@pytest.mark.parametrize("kw", [dict(mode="python"), dict(jit=False)], ids=["python", "nojit"])  # rules: Python only
@pytest.mark.parametrize("name, f, args", _STATS, ids=[c[0] for c in _STATS])
def test_gradient_inside_through_dirichlet_and_multivariate_normal(name, f, args, kw):
    outer = _grads_inside(f, len(args))
    for i in range(len(args)):
        def along(y, i=i):
            return outer(*(args[:i] + (y,) + args[i + 1:]))
        np.testing.assert_allclose(funcgrad.grad(outer, argnums=i, **kw)(*args), _fd_grad(along, args[i]),
                                   rtol=1e-5, atol=1e-7, err_msg=f"argument {i}")


@pytest.mark.parametrize("name, f, args", _STATS, ids=[c[0] for c in _STATS])
def test_order_2_check_grads_of_dirichlet_and_multivariate_normal(name, f, args):
    check_grads(f, order=2, modes=("fwd", "rev"))(*args)


def _stats_definition_cases():
    alpha = np.array([1.7, 2.4, 3.1])
    for x, g in [(np.array([0.2, 0.3]), 0.7), (np.array([0.2, 0.3, 0.5]), 0.7),
                 (np.array([[0.2, 0.1, 0.3], [0.3, 0.5, 0.2]]), RNG.normal(size=3))]:
        for wrt in ("x", "alpha"):
            yield "dirichlet_logpdf_grad", (g, x, alpha, wrt)
    for x, g in [(RNG.normal(size=(4, 3)), RNG.normal(size=4)), (RNG.normal(size=3), 0.6)]:
        for cov in (_spd(3), RNG.uniform(0.5, 2.0, size=3), np.array(1.3)):
            for wrt in ("x", "mean", "cov"):
                yield "mvn_logpdf_grad", (g, x, RNG.normal(size=3), cov, False, wrt)
            yield "mvn_entropy_grad", (0.8, RNG.normal(size=3), cov)
    yield "mvn_logpdf_grad", (RNG.normal(size=5), RNG.normal(size=5), None, np.array(2.0), False, "x")  # k == 1
    m, idx = RNG.normal(size=(4, 3)), np.array([0, 2, 2, 1])
    for where, g in [(slice(1, 3), RNG.normal(size=(2, 3))), (1, RNG.normal(size=3)), (idx, RNG.normal(size=(4, 3))),
                     ((slice(None), idx[:3]), RNG.normal(size=(4, 3))), ((0, slice(0, 2)), 0.5)]:
        yield "index_add", (m, where, g)


@pytest.mark.parametrize("name, args", list(_stats_definition_cases()))
def test_each_stats_and_scatter_definition_computes_its_kernels_value(name, args):
    from funcgrad.ops import second_order as SO
    copy = [a.copy() if isinstance(a, np.ndarray) else a for a in args]   # index_add's kernel adds in place
    got, want = getattr(SO, name)(*args), getattr(K, name)(*copy)
    assert np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-11)


# ----------------------------------------------------------------------------- nn losses, activations and norms
def _nn_definition_cases():
    import funcgrad.kernels.cpu as KC
    p, t = RNG.uniform(0.1, 0.9, size=(4, 3)), RNG.uniform(0, 1, size=(4, 3))
    z, lab = RNG.normal(size=(4, 3)), np.array([0, 2, 1, 2])
    for red in ["mean", "sum", "none"]:
        for g in ((np.float64(0.7) if red != "none" else RNG.normal(size=(4, 3))), RNG.normal(size=(4, 3))):  # a tangent too
            yield "mse_grad", (g, z, t, red)
            yield "huber_grad", (g, z, t, 0.5, red)
            yield "binary_cross_entropy_grad", (g, p, t, red)
            yield "binary_cross_entropy_grad_target", (g, p, t, red)
            yield "binary_cross_entropy_with_logits_grad", (g, z, t, red)
            yield "binary_cross_entropy_with_logits_grad_target", (g, z, t, red)
        for g in ((0.7 if red != "none" else RNG.normal(size=4)), 1.0):
            for labels in (lab, t):
                yield "cross_entropy_grad", (g, z, labels, red)
                yield "cross_entropy_grad_target", (g, z, labels, red)
            yield "nll_grad", (g, z, lab, red)
    x3 = RNG.normal(size=(2, 3, 4))
    for ax in (-1, 0, 1):
        yield "softmax_grad_y", (RNG.normal(size=x3.shape), RNG.normal(size=x3.shape), KC.softmax(x3, ax), ax)
        yield "log_softmax_grad", (RNG.normal(size=x3.shape), KC.log_softmax(x3, ax), ax)
        lse = KC.logsumexp(x3, ax)
        yield "logsumexp_grad", (RNG.normal(size=lse.shape), x3, lse, ax)
    yield "gelu_grad2", (RNG.normal(size=5), RNG.normal(size=5))
    for xs in [(4, 5), (2, 3, 5)]:
        x = RNG.normal(size=xs)
        yield "layer_norm_grad_input", (RNG.normal(size=xs), x, RNG.normal(size=5), 1e-5)
        yield "layer_norm_grad_gamma", (RNG.normal(size=xs), x, 1e-5)
        yield "layer_norm_grad_beta", (RNG.normal(size=xs),)
    for xs in [(4, 3), (2, 3, 2, 2)]:
        x, gam, rm, rv = RNG.normal(size=xs), RNG.normal(size=3), RNG.normal(size=3), RNG.uniform(0.5, 2, size=3)
        for train in (True, False):
            yield "batch_norm_grad_input", (RNG.normal(size=xs), x, gam, rm, rv, train, 1e-5)
            yield "batch_norm_grad_gamma", (RNG.normal(size=xs), x, rm, rv, train, 1e-5)


@pytest.mark.parametrize("name, args", list(_nn_definition_cases()))
def test_each_nn_definition_computes_its_kernels_value(name, args):
    from funcgrad.nn import second_order as SO
    got, want = getattr(SO, name)(*args), getattr(K, name)(*args)
    assert np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-11)


from funcgrad import nn  # noqa: E402

_X = RNG.normal(size=(4, 3))
_T = RNG.uniform(0, 1, size=(4, 2))
_LAB = np.array([0, 1, 1, 0])
_P = RNG.normal(size=(4, 2))
_W = RNG.normal(size=(3, 2))
_GAMMA, _BETA = np.array([1.5, 0.5]), np.array([0.1, 0.2])


def _mse(w):
    return nn.mse(_X @ w, _T)


def _huber(w):
    return nn.huber(_X @ w, _T, 0.5)


def _ce_labels(w):
    return nn.cross_entropy(_X @ w, _LAB)


def _ce_probs(w):
    return nn.cross_entropy(_X @ w, _T / np.sum(_T, axis=1, keepdims=True), "sum")


def _nll(w):
    return nn.nll(nn.log_softmax(_X @ w), _LAB, "sum")


def _bce(w):
    return nn.binary_cross_entropy(nn.sigmoid(_X @ w), _T)


def _bce_logits(w):
    return nn.binary_cross_entropy_with_logits(_X @ w, _T, "sum")


def _gelu(w):
    return np.sum(nn.gelu(_X @ w) ** 2)


def _softmax(w):
    return np.sum(nn.softmax(_X @ w) * _P)


def _logsumexp(w):
    return np.sum(np.sin(nn.logsumexp(_X @ w, axis=0)))


def _layer_norm(w):   # over 4 features (over 2, x - mean is +-sigma whatever w is)
    return np.sum(np.sin(nn.layer_norm((_X @ w).T, np.array([1.5, 0.5, -1.0, 2.0]), np.array([0.1, 0.2, 0.0, -0.3]))))


def _batch_norm(w):
    return np.sum(np.sin(nn.batch_norm(_X @ w, _GAMMA, _BETA, np.zeros(2), np.ones(2))))


def _mlp_newton(w):   # a small model: hidden gelu layer, layer norm, softmax cross-entropy
    h = nn.gelu(_X @ w)
    return nn.cross_entropy(nn.layer_norm(h, _GAMMA, _BETA) + 0.3 * h, _LAB) + 0.1 * nn.mse(h, _T)


_NN = [_mse, _huber, _ce_labels, _ce_probs, _nll, _bce, _bce_logits, _gelu, _softmax, _logsumexp, _layer_norm,
       _batch_norm, _mlp_newton]
@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("f", _NN, ids=[f.__name__ for f in _NN])
def test_hessian_of_nn_losses_matches_differences_of_the_gradient(f, kw):
    H = funcgrad.hessian(f, **kw)(_W)
    np.testing.assert_allclose(H, _fd_jacobian_of(funcgrad.grad(f, **kw), _W), rtol=1e-5, atol=1e-6)
    assert np.abs(H).max() > 1e-2
    v = RNG.normal(size=_W.shape)
    hv = funcgrad.hvp(f, (_W,), (v,), **kw)
    np.testing.assert_allclose(hv[0] if isinstance(hv, tuple) else hv, np.tensordot(H, v, axes=2), rtol=1e-8,
                               atol=1e-10)


@pytest.mark.parametrize("f", _NN, ids=[f.__name__ for f in _NN])
def test_order_2_check_grads_and_grad_inside_of_nn_losses(f):
    check_grads(f, (_W,), order=2, modes=("fwd", "rev"), mode="python")

    def outer(w):   # reverse mode over reverse mode: the VJP helpers differentiated
        return np.sum(funcgrad.grad(f)(w) ** 2)
    np.testing.assert_allclose(funcgrad.grad(outer, mode="python")(_W), _fd_of_scalar(outer, _W), rtol=1e-5,
                               atol=1e-6)


def test_newton_step_of_a_small_model():
    # the use the nn definitions are for: one Newton step on a regularized softmax regression
    def loss(w):
        return nn.cross_entropy(_X @ w, _LAB) + 0.5 * np.sum(w * w)
    H = funcgrad.hessian(loss)(_W).reshape(_W.size, _W.size)
    step = np.linalg.solve(H, funcgrad.grad(loss)(_W).ravel()).reshape(_W.shape)
    w1 = _W - step
    assert loss(w1) < loss(_W)
    assert np.linalg.norm(funcgrad.grad(loss)(w1)) < 0.1 * np.linalg.norm(funcgrad.grad(loss)(_W))


@pytest.mark.parametrize("f", [_bce, _ce_labels], ids=["bce", "ce_labels"])
def test_hessian_of_nn_losses_compiles_whole(f):
    # the definitions read the loss cotangent with no branch on np.ndim (Numba has none): under mode="njit"
    # hessian of binary_cross_entropy was refused naming numpy.ndim, a function the user never wrote
    np.testing.assert_allclose(funcgrad.hessian(f, mode="njit")(_W), funcgrad.hessian(f, mode="python")(_W),
                               rtol=1e-10, atol=1e-12)
