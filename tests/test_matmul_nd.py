"""matmul, dot and tensordot with N-D and 1-D operands (issue 12, item 3), in every mode.

Values must equal NumPy's and gradients central differences (float64) under ``mode="python"``,
``mode="njit"`` (the whole function compiled: kernels called from nopython code, ``@`` on
N-D operands included), ``mode="auto"`` and ``jit=False``. One function body per product
(for the compiled modes) keeps the number of compiled functions down.
"""
import warnings

import numpy as np
import pytest

import funcgrad
from funcgrad.testing import numerical_vjp



def mm_op(a, b):
    return np.sum(np.sin(a @ b))


def mm_fn(a, b):
    return np.sum(np.sin(np.matmul(a, b)))


def dot_fn(a, b):
    return np.sum(np.sin(np.dot(a, b)))


def td_1(a, b):
    return np.sum(np.sin(np.tensordot(a, b, axes=1)))


def td_2(a, b):
    return np.sum(np.sin(np.tensordot(a, b, axes=2)))


def td_default(a, b):
    return np.sum(np.sin(np.tensordot(a, b)))


def td_pairs(a, b):
    return np.sum(np.sin(np.tensordot(a, b, axes=([1, 0], [0, 1]))))


MATMUL_SHAPES = [((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 3)), ((5, 1, 3, 4), (2, 4, 6)), ((4,), (2, 4, 6)),
                 ((2, 3, 4), (4,)), ((3,), (3,)), ((3, 4), (4,)), ((4,), (4, 5)), ((2, 3), (3, 4))]
CASES = ([(mm_op, xs, ys) for xs, ys in MATMUL_SHAPES]
         + [(mm_fn, (2, 1, 2, 3), (4, 3, 2))]
         + [(dot_fn, xs, ys) for xs, ys in [((2, 3, 4), (4, 5)), ((2, 3, 4), (5, 4, 2)), ((), (3, 4)),
                                            ((2, 3), ()), ((3,), (2, 3, 4)), ((3,), (3,)), ((3, 4), (4, 2))]]
         + [(td_1, (2, 3, 4), (4, 5)), (td_2, (2, 3, 4), (3, 4, 5)), (td_default, (3, 4), (3, 4)),
            (td_pairs, (3, 2, 4), (2, 3, 5))])
IDS = [f"{f.__name__}-{xs}-{ys}".replace(" ", "") for f, xs, ys in CASES]


def _arg(shape, rng, dtype=np.float64):
    return float(rng.standard_normal()) if shape == () else rng.standard_normal(shape).astype(dtype)


def _check(f, args, kw):
    nums = tuple(range(len(args)))
    v, g = funcgrad.value_and_grad(f, argnums=nums, **kw)(*args)
    np.testing.assert_allclose(v, f(*args), rtol=1e-12, atol=1e-12)
    for i in nums:
        want = numerical_vjp(f, args, i, 1.0, 1e-6)
        assert np.shape(g[i]) == np.shape(args[i]), f"argument {i}"
        np.testing.assert_allclose(g[i], want, rtol=1e-5, atol=1e-6, err_msg=f"argument {i}")


@pytest.mark.parametrize("kw", [dict(mode="python"), dict(jit=False)], ids=["python", "nojit"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_value_and_gradient(case, kw):
    f, xs, ys = case
    rng = np.random.default_rng(len(xs) * 10 + len(ys))
    _check(f, (_arg(xs, rng), _arg(ys, rng)), kw)


# Compiled whole, each distinct pair of ranks is a new specialization of every kernel on the way
# (the N-D elementwise ones dominate): one function per product covers all its cases in one compile.
def all_matmuls(a0, b0, a1, b1, a2, b2, a3, b3, a4, b4, a5, b5, a6, b6, a7, b7, a8, b8):
    return (mm_op(a0, b0) + mm_op(a1, b1) + mm_op(a2, b2) + mm_op(a3, b3) + mm_op(a4, b4) + mm_op(a5, b5)
            + mm_op(a6, b6) + mm_op(a7, b7) + mm_op(a8, b8))


def all_dots(a0, b0, a1, b1, a2, b2, a3, b3, a4, b4, a5, b5, a6, b6):
    return (dot_fn(a0, b0) + dot_fn(a1, b1) + dot_fn(a2, b2) + dot_fn(a3, b3) + dot_fn(a4, b4)
            + dot_fn(a5, b5) + dot_fn(a6, b6))


def all_tensordots(a0, b0, a1, b1, a2, b2, a3, b3):
    return td_1(a0, b0) + td_2(a1, b1) + td_default(a2, b2) + td_pairs(a3, b3)


GROUPS = {all_matmuls: [c for c in CASES if c[0] is mm_op], all_dots: [c for c in CASES if c[0] is dot_fn],
          all_tensordots: [c for c in CASES if c[0] in (td_1, td_2, td_default, td_pairs)]}


@pytest.mark.parametrize("kw", [dict(mode="njit"), dict(mode="auto")], ids=["njit", "auto"])
@pytest.mark.parametrize("group", list(GROUPS), ids=lambda f: f.__name__)
def test_value_and_gradient_compiled(group, kw):
    rng = np.random.default_rng(7)
    args = tuple(_arg(s, rng) for _, xs, ys in GROUPS[group] for s in (xs, ys))
    assert len(args) == group.__code__.co_argcount
    with warnings.catch_warnings():
        warnings.simplefilter("error", funcgrad.errors.FuncgradWarning)  # mode="auto" must not have fallen back to Python
        _check(group, args, kw)


def test_vjp_of_the_products_themselves():
    # the cotangent flows in with the product's own N-D shape (not through a sum)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((5, 1, 3, 4)), rng.standard_normal((2, 4, 6))
    out, vjp_fn = funcgrad.vjp(lambda a, b: a @ b, a, b, argnums=(0, 1), mode="python")
    np.testing.assert_allclose(out, a @ b)
    ct = rng.standard_normal(out.shape)
    da, db = vjp_fn(ct)
    np.testing.assert_allclose(da, np.sum(ct @ np.swapaxes(b, -1, -2), axis=1, keepdims=True))
    np.testing.assert_allclose(db, np.sum(np.swapaxes(a, -1, -2) @ ct, axis=0))


@pytest.mark.parametrize("kw,fns", [(dict(mode="python"), (mm_op, dot_fn, td_1)), (dict(mode="njit"), (mm_op,))],
                         ids=["python", "njit"])
def test_float32_stays_float32(kw, fns):
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
    for f in fns:
        v, (ga, gb) = funcgrad.value_and_grad(f, argnums=(0, 1), **kw)(a, b)
        assert ga.dtype == np.float32 and gb.dtype == np.float32, f.__name__
        np.testing.assert_allclose(v, f(a, b), rtol=1e-5)


@pytest.mark.parametrize("fn,xs,ys,mode", [(np.matmul, (2, 3, 4), (3, 4, 5), "njit"),
                                           (np.matmul, (2, 3, 4), (3, 4, 5), "python"),
                                           (np.dot, (2, 3, 4), (3, 5), "python")])
def test_shape_mismatch_raises_like_numpy(fn, xs, ys, mode):
    def f(a, b):
        return np.sum(fn(a, b))
    with pytest.raises(ValueError):
        funcgrad.grad(f, argnums=(0, 1), mode=mode)(np.ones(xs), np.ones(ys))
