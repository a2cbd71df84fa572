"""NumPy's elementwise functions, reductions, scans and sorting (issue 14), in every mode.

Each function is checked in float64 against central differences (and its value against NumPy's)
under ``mode="python"``, ``mode="njit"`` (the whole function compiled) and ``jit=False``, in the
forms autograd's tests exercise (scalar, vector, matrix and (1, n) operands; ``axis`` None, int
and tuple; ``keepdims``; ``ddof``). One function body per NumPy function computes every form at
once (a tuple of results), so the compiled modes compile once per function. autograd, where it
is installed and has the rule, is an oracle too. The second derivatives are checked on the VJP
templates themselves: each template, written out as a Python function of the primal inputs and
the cotangent, is differentiated by funcgrad and compared with central differences.
"""
import ast
import copy
import linecache
import math
import warnings

import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import funcgrad
import funcgrad.kernels.cpu as K
import funcgrad.kernels.cpu_math as cm
from funcgrad.errors import FuncgradError
from funcgrad.ops.registry import registry
from funcgrad.testing import check_grads, numerical_vjp, primitive_function

try:
    import autograd
    import autograd.numpy as anp
except ImportError:  # pragma: no cover - autograd is an optional oracle
    autograd = anp = None

MODES = {"python": {"mode": "python"}, "njit": {"mode": "njit"}, "nojit": {"jit": False}}
RNG = np.random.default_rng(20240614)
_N = [0]


def make(src, name="f", extra=None):
    """A module-level-like function from source (readable by funcgrad: the source is in linecache)."""
    _N[0] += 1
    filename = f"<test_numpy_math {_N[0]}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    ns = {"np": np, "math": math, **(extra or {})}
    exec(compile(src, filename, "exec"), ns)
    return ns[name]


def _u(lims, shape):
    lo, hi = lims
    return lo + (hi - lo) * (float(RNG.random()) if shape == () else RNG.random(shape))


def check(f, args, argnums=None, **kw):
    """The value equals f's own and the VJP central differences, in the mode ``kw`` chooses."""
    argnums = tuple(range(len(args))) if argnums is None else argnums
    out, _ = funcgrad.vjp(f, *args, argnums=argnums, **kw)
    want = f(*args)
    for a, b in zip(out if isinstance(out, tuple) else (out,), want if isinstance(want, tuple) else (want,)):
        assert np.shape(a) == np.shape(b)
        np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=1e-12, atol=1e-12)
    check_grads(f, args, argnums=argnums, **kw)


def agrees_with_autograd(f, args, argnums=None, globals_=None):
    """funcgrad's VJP of f equals autograd's (f rebuilt over autograd.numpy)."""
    if autograd is None:
        pytest.skip("autograd not installed")
    argnums = tuple(range(len(args))) if argnums is None else argnums
    g = type(f)(f.__code__, {**f.__globals__, "np": anp, **(globals_ or {})})
    out, vjp_fn = funcgrad.vjp(f, *args, argnums=argnums, mode="python")
    leaves = out if isinstance(out, tuple) else (out,)
    cts = tuple(RNG.standard_normal(np.shape(o)) if np.shape(o) else float(RNG.standard_normal()) for o in leaves)
    ours = vjp_fn(cts if isinstance(out, tuple) else cts[0])

    def scalar(*a):
        r = g(*a)
        r = r if isinstance(r, tuple) else (r,)
        return sum(anp.sum(ri * ci) for ri, ci in zip(r, cts))
    theirs = [autograd.grad(scalar, i)(*args) for i in argnums]
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=1e-10, atol=1e-12)


# ----------------------------------------------------------------------------- elementwise, unary
# (the function, its domain) as autograd's unary_ufunc_check draws them
UNARY = [("np.arcsinh", (-0.9, 0.9)), ("np.arccosh", (1.1, 4.0)), ("np.arctanh", (-0.9, 0.9)),
         ("np.exp2", (-2, 2)), ("np.log2", (0.2, 2.0)), ("np.log10", (0.2, 2.0)), ("np.deg2rad", (-2, 2)),
         ("np.radians", (-2, 2)), ("np.rad2deg", (-2, 2)), ("np.degrees", (-2, 2)), ("np.fabs", (0.1, 2.0)),
         ("np.fabs", (-2.0, -0.1)), ("np.sinc", (-2, 2)), ("np.sinc", (0.0, 10.0)), ("np.cbrt", (0.2, 3.0)),
         ("np.nan_to_num", (-2, 2)), ("np.exp", (-2, 2)), ("np.true_divide", None)]
UNARY_SHAPES = [(), (2,), (3, 2), (1, 2)]
NO_AUTOGRAD = {"np.cbrt"}


def _unary(fn, lims):
    if fn == "np.true_divide":
        return make("def f(a, b, c, d):\n    return np.true_divide(a, 1.7), np.true_divide(2.0, b + 3), "
                    "c / 2.5, np.divide(d, c)\n"), [_u((0.5, 2), s) for s in UNARY_SHAPES]
    f = make(f"def f(a, b, c, d):\n    return {fn}(a), {fn}(b), {fn}(c), {fn}(d)\n")
    return f, [_u(lims, s) for s in UNARY_SHAPES]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fn,lims", UNARY, ids=[f"{f}{lims}" for f, lims in UNARY])
def test_unary(fn, lims, mode):
    f, args = _unary(fn, lims)
    check(f, args, **MODES[mode])


@pytest.mark.parametrize("fn,lims", [u for u in UNARY if u[0] not in NO_AUTOGRAD])
def test_unary_matches_autograd(fn, lims):
    f, args = _unary(fn, lims)
    agrees_with_autograd(f, args)


MATH = [("math.asinh", (-2, 2)), ("math.acosh", (1.1, 4.0)), ("math.atanh", (-0.9, 0.9)), ("math.log2", (0.2, 3.0)),
        ("math.log10", (0.2, 3.0)), ("math.degrees", (-2, 2)), ("math.radians", (-2, 2)), ("math.fabs", (-2, -0.1)),
        ("math.exp2", (-2, 2)), ("math.cbrt", (0.2, 3))]


@pytest.mark.parametrize("mode", MODES)
def test_math_module_aliases(mode):
    fns = [fn for fn, _ in MATH if hasattr(math, fn.split(".")[1])]
    body = " + ".join(f"{fn}(x{i}) * {i + 1}.0" for i, fn in enumerate(fns))
    f = make(f"def f({', '.join(f'x{i}' for i in range(len(fns)))}):\n    return {body}\n")
    check(f, [_u(lims, ()) for fn, lims in MATH if fn in fns], **MODES[mode])


def math_binary(x, y):
    return math.atan2(x, y) + math.hypot(x, y) * 2.0 + math.fmod(x, y) * 3.0 + math.pow(x, 3) + math.pow(y, 2.0)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("x,y", [(-1.3, 0.7), (1.3, -0.7), (-2.2, -0.9)])
def test_math_binary_aliases_and_negative_bases(x, y, mode):
    check(math_binary, (x, y), **MODES[mode])


def test_nan_to_num_zeroes_the_replaced_elements():   # autograd's test_nan_to_num
    y = np.array([0.0, np.nan, np.inf, -np.inf])
    f = make("def f(x):\n    return np.sum(np.sin(np.nan_to_num(x + y)))\n", extra={"y": y})
    x = RNG.standard_normal(4)
    for kw in MODES.values():
        check(f, (x,), **kw)
        g = funcgrad.grad(f, **kw)(x)
        assert g[0] == np.cos(x[0]) and np.all(g[1:] == 0)
    agrees_with_autograd(f, (x,), globals_={"y": y})
    f2 = make("def f(x):\n    return np.nan_to_num(x + y, nan=0.5, posinf=2.0, neginf=-2.0) * x\n", extra={"y": y})
    for kw in MODES.values():
        check(f2, (x,), **kw)


# ----------------------------------------------------------------------------- elementwise, binary
BINARY = [("np.logaddexp", (-2, 2), (-2, 2)), ("np.logaddexp2", (-2, 2), (-2, 2)), ("np.hypot", (-2, 2), (0.3, 2)),
          ("np.arctan2", (-2, 2), (-2, 2)), ("np.true_divide", (-2, 2), (0.8, 1.2)),
          ("np.true_divide", (-2, 2), (-2.0, -0.3)), ("np.power", (1.1, 3.0), (-2, 2)),
          ("np.remainder", (-0.9, 0.9), (0.7, 1.9)), ("np.mod", (-2, 2), (0.8, 2.1)), ("np.mod", (-2, 2), (-2.0, -0.3)),
          ("np.fmod", (-2, 2), (0.8, 2.1)), ("np.fmod", (-2, 2), (-2.0, -0.3)), ("operator %", (-2, 2), (0.3, 2.0)),
          ("operator %", (-2, 2), (-2.0, -0.3)), ("np.fmax", (-2, 2), (-2, 2)), ("np.fmin", (-2, 2), (-2, 2)),
          ("np.maximum", (-2, 2), (-2, 2)), ("np.minimum", (-2, 2), (-2, 2))]
# every pair of a scalar, a vector, a matrix and a (1, n) matrix, as autograd's binary_ufunc_check;
# distinct draws for the two operands (mod and the max family have kinks where they are equal)
BIN_SHAPES = [(), (2,), (3, 2), (1, 2)]


# compiling is slow (seconds per form): nopython runs a broadcasting subset of the pairs
FEW_PAIRS = [(0, 2), (1, 0), (2, 3), (3, 1), (2, 2)]


def _binary(fn, la, lb, pairs=None):
    call = "{a} % {b}" if fn == "operator %" else fn + "({a}, {b})"
    pairs = pairs or [(i, j) for i in range(4) for j in range(4)]
    outs = ", ".join(call.format(a=f"a{i}", b=f"b{j}") for i, j in pairs)
    f = make(f"def f(a0, a1, a2, a3, b0, b1, b2, b3):\n    return {outs}\n")
    while True:
        args = [_u(la, s) for s in BIN_SHAPES] + [_u(lb, s) for s in BIN_SHAPES]
        if fn not in ("np.remainder", "np.mod", "np.fmod", "operator %") or all(   # x / y away from the jumps
                np.all(np.abs(q - np.round(q)) > 0.02) for q in
                (np.asarray(args[i] / args[4 + j]) for i in range(4) for j in range(4))):
            break
    return f, args


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fn,la,lb", BINARY, ids=[f"{f}{a}{b}".replace(" ", "") for f, a, b in BINARY])
def test_binary(fn, la, lb, mode):
    f, args = _binary(fn, la, lb, FEW_PAIRS if mode == "njit" else None)
    check(f, args, **MODES[mode])


@pytest.mark.parametrize("fn,la,lb", [b for b in BINARY if b[0] not in ("np.fmod",)])
def test_binary_matches_autograd(fn, la, lb):
    f, args = _binary(fn, la, lb)
    agrees_with_autograd(f, args)


def pow_forms(x):
    return x ** 2 + x ** 3.0 + np.power(x, 4) + x ** -2 + np.square(x) * 0.5 + x ** 1


@pytest.mark.parametrize("mode", MODES)
def test_power_negative_bases_integer_exponents(mode):
    check(pow_forms, (np.array([-1.5, -0.7, 0.6, 1.3]),), **MODES[mode])
    check(pow_forms, (-1.1,), **MODES[mode])


def pow_zero_exponent(x):
    return np.power(x, 0.0)


def pow_zero_base(y):
    return np.power(0.0, y)


def pow_half(x):
    return x ** 0.5


@pytest.mark.parametrize("mode", MODES)
def test_power_at_zero(mode):   # autograd's test_power_arg0 (y == 0, c.f. its issue #116) and test_power_arg1_zero
    kw = MODES[mode]
    assert funcgrad.grad(pow_zero_exponent, **kw)(0.0) == 0.0
    assert funcgrad.grad(pow_zero_exponent, **kw)(-1.3) == 0.0
    check(pow_zero_base, (0.7,), **kw)
    assert funcgrad.grad(pow_zero_base, **kw)(0.7) == 0.0
    g = funcgrad.grad(lambda x: np.sum(x ** 0.5), **kw)(np.array([0.0, 4.0]))
    assert g[0] == np.inf and g[1] == 0.25                             # the true derivative
    if mode == "njit":
        assert funcgrad.grad(pow_half, **kw)(0.0) == np.inf
    else:   # Python floats: 0.0 ** -0.5 raises, as in the user's own Python arithmetic
        with pytest.raises(ZeroDivisionError) as e:
            funcgrad.grad(pow_half, **kw)(0.0)
        assert "test_numpy_math.py" in "".join(getattr(e.value, "__notes__", []))


def ties(x, y):
    return np.maximum(x, y) + 2.0 * np.minimum(x, y) + 3.0 * np.fmax(x, y) + 4.0 * np.fmin(x, y)


def max_same(x):
    return np.maximum(x, x)


@pytest.mark.parametrize("mode", MODES)
def test_binary_ties_split_evenly(mode):
    kw = MODES[mode]
    gx, gy = funcgrad.grad(ties, argnums=(0, 1), **kw)(0.5, 0.5)
    assert gx == gy == 5.0     # half of 1 + 2 + 3 + 4 each: what central differences give
    assert funcgrad.grad(max_same, **kw)(1.0) == 1.0
    _, vjp_fn = funcgrad.vjp(ties, np.array([0.5, np.nan]), np.array([np.nan, 0.25]), **kw)
    gx, gy = vjp_fn(np.ones(2))
    np.testing.assert_array_equal(gx, [3.0 + 4.0, 0.0])   # fmax/fmin skip a NaN operand: the other gets it all
    np.testing.assert_array_equal(gy, [0.0, 7.0])


# ----------------------------------------------------------------------------- where
def where_one_sided(x):
    return np.sum(np.where(x > 0, x, 0.0) ** 2) + np.sum(np.where(x < 0.5, 0.0, np.sin(x)))


def where_broadcast(c, x, y, s):
    return np.where(c, x, y) * 2.0 + np.where(c, s, x)


@pytest.mark.parametrize("mode", MODES)
def test_where_one_sided_and_broadcast(mode):
    kw = MODES[mode]
    x = RNG.standard_normal((3, 4))
    check(where_one_sided, (x,), **kw)
    c = RNG.standard_normal((3, 1)) > 0
    check(where_broadcast, (c, x, RNG.standard_normal(4), 0.3), argnums=(1, 2, 3), **kw)


# ----------------------------------------------------------------------------- reductions
X35 = 3.5
B3, C23, D13 = RNG.standard_normal(3), RNG.standard_normal((2, 3)), RNG.standard_normal((1, 3))
C234 = RNG.standard_normal((2, 3, 4))


FEW_FORMS = ["{fn}(x{extra})", "{fn}(b, axis=None, keepdims=True{extra})", "{fn}(c, axis=0, keepdims=False{extra})",
             "{fn}(d, axis=-1, keepdims=True{extra})", "{fn}(e, axis=(0, 2), keepdims=False{extra})",
             "{fn}(e, axis=(-1, 0), keepdims=True{extra})"]


def _stat_src(fn, extra="", tuples=True, few=False):
    """Every form of autograd's stat_check (plus tuple axes) in one function: a tuple of results
    (``few``: a subset, for nopython mode, where each form takes seconds to compile)."""
    if few:
        return make("def f(x, b, c, d, e):\n    return " + ", ".join(
            c.format(fn=fn, extra=extra) for c in FEW_FORMS) + "\n")
    calls = [f"{fn}(x{extra})"]
    for a in ("b", "c", "d"):
        for ax in ("None", "0"):
            for kd in ("True", "False"):
                calls.append(f"{fn}({a}, axis={ax}, keepdims={kd}{extra})")
    for a in ("c", "d"):
        for kd in ("True", "False"):
            calls.append(f"{fn}({a}, axis=1, keepdims={kd}{extra})")
            calls.append(f"{fn}({a}, axis=-1, keepdims={kd}{extra})")
    for ax in ("(0, 2)", "(1,)", "(0, 1, 2)", "(-1, 0)") if tuples else ("1", "-1"):
        for kd in ("True", "False"):
            calls.append(f"{fn}(e, axis={ax}, keepdims={kd}{extra})")
    return make("def f(x, b, c, d, e):\n    return " + ", ".join(calls) + "\n")


STATS = ["np.sum", "np.mean", "np.prod", "np.max", "np.min", "np.amax", "np.amin", "np.var", "np.std", "np.ptp",
         "np.median", "np.nansum", "np.nanmean", "np.average"]
STAT_EXTRAS = {"np.var": ["", ", ddof=1"], "np.std": ["", ", ddof=1"]}
STAT_CASES = [(fn, e) for fn in STATS for e in STAT_EXTRAS.get(fn, [""])]
NO_AUTOGRAD_STATS = {"np.ptp", "np.median", "np.nansum", "np.nanmean", "np.average"}


def _stat_args(fn):
    args = [X35, B3, C23, D13, C234]
    if fn == "np.prod":   # away from zero: central differences of a product of many small numbers
        args = [a + np.sign(a) * 0.5 if isinstance(a, np.ndarray) else a for a in args]
    return args


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fn,extra", STAT_CASES, ids=[f + e.replace(" ", "") for f, e in STAT_CASES])
def test_reductions(fn, extra, mode):
    f = _stat_src(fn, extra, few=mode == "njit")
    if "ddof=1" in extra:   # a group of one element has no sample variance
        f = make(_stat_ddof_src(fn, extra, few=mode == "njit"))
    check(f, _stat_args(fn), **MODES[mode])


def _stat_ddof_src(fn, extra, few=False):   # autograd's test_var_ddof / test_std_ddof forms
    if few:
        return (f"def f(x, b, c, d, e):\n    return {fn}(b, axis=None, keepdims=True{extra}), "
                f"{fn}(d, axis=1, ddof=2), {fn}(e, axis=(0, 2), ddof=3)\n")
    calls = [f"{fn}({a}, axis=None, keepdims={kd}{extra})" for a in "bcd" for kd in ("True", "False")]
    calls += [f"{fn}({a}, axis={ax}, keepdims={kd}, ddof=2)" for a in "cd" for ax in ("None", "1") for kd in
              ("True", "False")]
    calls += [f"{fn}(e, axis=(0, 2), ddof=3)", f"{fn}(e, axis=-1, keepdims=True{extra})"]
    return "def f(x, b, c, d, e):\n    return " + ", ".join(calls) + "\n"


@pytest.mark.parametrize("fn,extra", [c for c in STAT_CASES if c[0] not in NO_AUTOGRAD_STATS])
def test_reductions_match_autograd(fn, extra):
    if "ddof=1" in extra:
        f = make(_stat_ddof_src(fn, extra))
    else:   # autograd's prod takes one axis, not a tuple
        f = _stat_src(fn, extra, tuples=fn != "np.prod")
    agrees_with_autograd(f, _stat_args(fn))


def stat_nan(x):
    return np.nansum(x, axis=0), np.nanmean(x, axis=1, keepdims=True), np.nanmean(x), np.nansum(x, axis=(0, 1))


@pytest.mark.parametrize("mode", MODES)
def test_nan_reductions_skip_nans(mode):
    x = RNG.standard_normal((3, 4))
    x[1, 2] = np.nan
    kw = MODES[mode]
    check(stat_nan, (x,), **kw)
    g = funcgrad.grad(lambda x: np.nanmean(x, axis=1)[1], **kw)(x)
    np.testing.assert_allclose(g[1], [1 / 3, 1 / 3, 0.0, 1 / 3])


def avg_weights(a, w, w1, w2):
    return (np.average(a, axis=(0, 2), weights=w2), np.average(a, axis=1, weights=w1, keepdims=True),
            np.average(a, weights=w), np.average(a, axis=-1, weights=w), np.average(a, axis=(2, 0), weights=w2.T),
            np.average(a))


@pytest.mark.parametrize("mode", MODES)
def test_average_differentiates_values_and_weights(mode):
    a = RNG.standard_normal((2, 3, 4))
    check(avg_weights, (a, RNG.uniform(0.5, 2, (2, 3, 4)), RNG.uniform(0.5, 2, 3), RNG.uniform(0.5, 2, (2, 4))),
          **MODES[mode])


def ties_max(x):
    return np.max(np.array([x, x]))


def ties_max_2d(x):   # (autograd writes np.array([[x, x], [x, 0.5]]); rows stacked here)
    return np.max(np.stack((np.array([x, x]), np.array([x, 0.5]))), axis=1)


def ties_min_3way(x):
    return np.min(np.stack((np.array([x, x, x]), np.array([x, 0.5, 0.5]), np.array([0.5, 0.5, 0.5]),
                            np.array([x, x, 0.5]))), axis=0)


def ties_array(x):
    return np.max(x, axis=1), np.amin(x, axis=(0, 1), keepdims=True), np.ptp(x, axis=0), np.median(x, axis=1)


@pytest.mark.parametrize("mode", MODES)
def test_reduction_ties(mode):   # autograd's test_max_equal_values, ..._2d, test_min_3_way_equality
    kw = MODES[mode]
    for f in (ties_max, ties_max_2d, ties_min_3way):
        for v in (1.0, -1.0):
            check(f, (v,), **kw)
    x = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]])
    _, vjp_fn = funcgrad.vjp(ties_array, x, **kw)
    g = vjp_fn((np.ones(2), np.ones((1, 1)), np.zeros(4), np.zeros(2)))[0]
    np.testing.assert_allclose(g, [[0, 0.5, 0.5, 1.0], [0.25, 0.25, 0.25, 0.25]])   # max's ties split; min's one


def list_stats(x):
    return np.var([x, x + 2]) + np.std((x, x + 2)) + np.mean([x, x + 2])


@pytest.mark.parametrize("mode", MODES)
def test_statistics_of_a_list(mode):   # autograd's test_var/std/mean_list_of_boxes
    if mode == "njit":   # nopython code has no statistics of a tuple of numbers: refused at the line
        with pytest.raises(FuncgradError, match="nopython"):
            funcgrad.grad(list_stats, **MODES[mode])(0.0)
        return
    assert funcgrad.grad(list_stats, **MODES[mode])(0.0) == 1.0


def std_constant(x):
    return np.std(x) + np.std(x[:1]) + np.var(x[:1]) + np.sum(np.std(x[None, :], axis=0))


@pytest.mark.parametrize("mode", MODES)
def test_std_of_a_constant_group_has_zero_derivative(mode):
    g = funcgrad.grad(std_constant, **MODES[mode])(np.array([1.5, 1.5, 1.5]))
    np.testing.assert_array_equal(g, 0.0)


def prod_zeros(x):
    return np.prod(x), np.prod(x, axis=0), np.prod(x, axis=1, keepdims=True), np.cumprod(x, axis=1), np.cumprod(x)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("zeros", [[(0, 1)], [(0, 1), (1, 2)], [(0, 1), (0, 2)]])
def test_prod_and_cumprod_where_an_input_is_zero(zeros, mode):
    x = RNG.uniform(0.5, 1.5, (2, 3)) * np.sign(RNG.standard_normal((2, 3)))
    for z in zeros:
        x[z] = 0.0
    check(prod_zeros, (x,), **MODES[mode])


def logsumexp(x):
    m = np.max(x, axis=1, keepdims=True)
    return np.log(np.sum(np.exp(x))), m[:, 0] + np.log(np.sum(np.exp(x - m), axis=1)), \
        np.log(np.sum(np.exp(x), axis=0, keepdims=True))


@pytest.mark.parametrize("mode", MODES)
def test_logsumexp_pattern(mode):
    x = RNG.standard_normal((3, 4))
    check(logsumexp, (x,), **MODES[mode])
    g = funcgrad.grad(lambda x: np.log(np.sum(np.exp(x))), **MODES[mode])(x)
    np.testing.assert_allclose(g, np.exp(x) / np.sum(np.exp(x)), rtol=1e-12)


# Sums over the leading or trailing axes of large float arrays run as one BLAS matrix-vector product
# (kernels/cpu.py's _sum_blas): the same dtype and shape as np.sum, the same values to rounding; the rest is
# NumPy's own reduce.
SUM_CASES = [((1000, 10, 10), 2, True), ((1000, 10, 10), -1, True), ((1000, 10, 10), 0, True),
             ((1000, 10, 10), (1, 2), True), ((1000, 10, 10), (0, 1), True), ((1000, 10, 10), (2, 1), True),
             ((1000, 10, 10), 1, False), ((1000, 10, 10), (0, 2), False), ((1000, 10, 10), (0, 1, 2), False),
             ((1000, 10, 10), None, False), ((5000, 3), 0, True), ((5000, 3), 1, True), ((20, 20), 1, False)]


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("dt", [np.float64, np.float32, np.int64, np.complex128])
@pytest.mark.parametrize("shape,axis,blas", SUM_CASES)
def test_sum_blas_path_matches_numpy(shape, axis, blas, dt, keepdims):
    x = (RNG.standard_normal(shape) * 5).astype(dt)
    want = np.sum(x, axis=axis, keepdims=keepdims)
    assert (K._sum_blas(x, axis, keepdims) is not None) == (blas and np.dtype(dt).kind == "f")
    got = K.sum(x, axis=axis, keepdims=keepdims)
    assert got.dtype == want.dtype and np.shape(got) == np.shape(want)
    tol = 1e-5 if dt == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * float(np.max(np.abs(want))))
    # a transposed (not C-contiguous) array: NumPy's reduce
    assert K._sum_blas(x.T, axis, keepdims) is None
    np.testing.assert_allclose(K.sum(x.T, axis=axis, keepdims=keepdims), np.sum(x.T, axis=axis, keepdims=keepdims),
                               rtol=tol, atol=tol * float(np.max(np.abs(want))))


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("dt", [np.float64, np.float32, np.int64, np.bool_])
@pytest.mark.parametrize("shape,axis,fast", [
    ((1000, 10), 1, True), ((1000, 10), -1, True), ((200, 4, 5), (1, 2), True), ((100, 10, 10), 2, True),
    ((1000, 10), 0, False), ((100, 10, 10), 1, False), ((20, 200), 1, False), ((100, 10, 10), None, False),
    ((10, 10), 1, False)])
def test_max_min_over_short_rows_match_numpy(shape, axis, fast, dt, keepdims):
    """max/min over the trailing axes of many short rows reduce the transposed copy (kernels/cpu.py's
    _minmax_rows): exactly NumPy's result, NaN included."""
    x = (RNG.standard_normal(shape) * 5).astype(dt)
    if dt == np.float64:
        x.flat[37] = np.nan
    for f, nf, ufunc in ((K.max, np.max, np.maximum), (K.min, np.min, np.minimum)):
        want = nf(x, axis=axis, keepdims=keepdims)
        assert (K._minmax_rows(ufunc.reduce, x, axis, keepdims) is not None) == (fast and dt != np.bool_)
        got = f(x, axis=axis, keepdims=keepdims)
        assert got.dtype == want.dtype and np.shape(got) == np.shape(want)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("gshape,xshape", [((1000, 10, 10), (1, 10, 10)), ((1000, 10, 10), (10, 10)),
                                           ((1000, 10, 10), (1000, 10, 1)), ((1000, 10, 10), (1, 10, 1)),
                                           ((4000, 3), (3,)), ((1000, 10, 10), ())])
def test_unbroadcast_blas_path_matches_numpy(gshape, xshape):
    g = RNG.standard_normal(gshape)
    lead = len(gshape) - len(xshape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(xshape) if n == 1)
    want = np.sum(g, axis=axes).reshape(xshape)
    got = K.unbroadcast(g, np.zeros(xshape))
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * float(np.max(np.abs(want))))


def big_sums(x, m):
    c = x[:, None, :] - m[None, :, :]
    return (np.sum(np.sin(np.sum(c ** 2, axis=2))) + np.sum(np.cos(np.sum(c, axis=0))) + np.sum(np.max(c, axis=2) ** 2),
            np.sum(np.sin(x), axis=1))


@pytest.mark.parametrize("mode", ["python", "nojit"])
def test_big_sums_gradient(mode):
    x, m = RNG.standard_normal((200, 8)), RNG.standard_normal((6, 8))   # (200, 6, 8): the BLAS sums
    assert K._sum_blas(np.zeros((200, 6, 8)), 2, False) is not None
    assert K._minmax_rows(np.maximum.reduce, np.zeros((200, 6, 8)), 2, False) is not None
    check(big_sums, (x, m), **MODES[mode])


# ----------------------------------------------------------------------------- scans, diff, sorting
def scans(a, b):
    return (np.cumsum(a, axis=0), np.cumsum(a, axis=1), np.cumsum(a), np.cumsum(b), np.cumsum(a, axis=-1),
            np.cumprod(a, axis=0), np.cumprod(a, axis=1), np.cumprod(a), np.cumprod(b), np.cumsum(2.0 * b[0]))


@pytest.mark.parametrize("mode", MODES)
def test_scans(mode):
    check(scans, (RNG.standard_normal((3, 4)), RNG.standard_normal(5)), **MODES[mode])


def test_scans_match_autograd():
    f = make("def f(a, b):\n    return np.cumsum(a, axis=0), np.cumsum(a, axis=1), np.cumsum(a), np.cumsum(b)\n")
    agrees_with_autograd(f, (RNG.standard_normal((3, 4)), RNG.standard_normal(5)))


def diffs(a, b, c, d, e, p, q):
    return (np.diff(a, 1, 0), np.diff(a, 2, 1), np.diff(b, n=1, axis=0), np.diff(b, n=2, axis=1), np.diff(b),
            np.diff(b, 3, -1), np.diff(c, axis=0), np.diff(d, axis=0), np.diff(e, axis=1), np.diff(p, axis=1),
            np.diff(q))


@pytest.mark.parametrize("mode", MODES)
def test_diff(mode):   # autograd's test_diff forms, empty results included
    args = (RNG.standard_normal((5, 5)), RNG.standard_normal((5, 5, 5)), RNG.standard_normal(1),
            RNG.standard_normal((1, 1)), RNG.standard_normal((1, 1)), RNG.standard_normal((3, 1)),
            RNG.standard_normal(6))
    check(diffs, args, **MODES[mode])


def test_diff_matches_autograd():
    f = make("def f(a, b):\n    return np.diff(a, 1, 0), np.diff(a, 2, 1), np.diff(b, n=2, axis=1), np.diff(b)\n")
    agrees_with_autograd(f, (RNG.standard_normal((5, 5)), RNG.standard_normal((5, 5, 5))))


def sorts(a, b, c):
    return (np.sort(a), np.sort(b), np.sort(c, axis=0), np.sort(c, axis=1), np.sort(c, axis=None), np.sort(c),
            np.partition(b, 0), np.partition(b, 3), np.partition(b, 6), np.partition(c, 1, axis=0),
            np.partition(c, (0, 2), axis=-1), np.partition(c, 4, axis=None), np.median(c, axis=0))


@pytest.mark.parametrize("mode", MODES)
def test_sort_and_partition(mode):   # autograd's test_sort (R(1), R(7)), test_partition (R(7), R(14), kth 0, 3, 6)
    args = (RNG.standard_normal(1), RNG.standard_normal(7), RNG.standard_normal((4, 5)))
    check(sorts, args, **MODES[mode])
    out, _ = funcgrad.vjp(sorts, *args, **MODES[mode])
    assert np.array_equal(out[9], np.partition(args[2], 1, axis=0))   # NumPy's own arrangement, compiled too


def test_sort_matches_autograd():
    f = make("def f(a, b, c):\n    return np.sort(a), np.sort(b), np.partition(b, 3), np.partition(c, 6)\n")
    agrees_with_autograd(f, (RNG.standard_normal(1), RNG.standard_normal(7), RNG.standard_normal(14)))


# ----------------------------------------------------------------------------- methods, operators, loops
def methods(x):
    return (x.sum(axis=0), x.var(), x.cumsum(), x.max(1), x.std(ddof=1), x.cumprod(axis=1), x.mean(keepdims=True),
            x.prod(), x.min(axis=0), x.var(axis=(0, 1)), x.sum(1), x.cumsum(axis=0), x.std(0))


@pytest.mark.parametrize("mode", MODES)
def test_ndarray_methods(mode):
    check(methods, (RNG.standard_normal((3, 4)) + 2.0,), **MODES[mode])


def loop_stats(x, n):
    acc = 0.0
    for i in range(n):
        if i % 2 == 0:
            acc = acc + np.var(x[i], ddof=1) + np.sum(np.sort(x[i]) * np.cumsum(x[i])) + np.median(x[i])
        else:
            acc = acc + np.std(x[i]) * np.ptp(x[i]) + np.sum(x[i] % 0.7)
    return acc


@pytest.mark.parametrize("mode", ["auto", "python", "njit", "nojit"])
def test_in_loops(mode):
    kw = {"mode": mode} if mode != "nojit" else {"jit": False}
    x = RNG.standard_normal((4, 5))
    with warnings.catch_warnings():
        warnings.simplefilter("error", funcgrad.errors.FuncgradWarning)    # auto compiles the loop whole: no fallback warning
        check(loop_stats, (x, 4), argnums=(0,), **kw)


# ----------------------------------------------------------------------------- refusals
def avg_returned(x):
    return np.average(x, returned=True)[0]


def diff_prepend(x):
    return np.sum(np.diff(x, prepend=0.0))


@pytest.mark.parametrize("mode", MODES)
def test_unsupported_forms_are_refused_at_the_users_line(mode):
    x = RNG.standard_normal(4)
    with pytest.raises(Exception) as e:
        funcgrad.grad(avg_returned, **MODES[mode])(x)
    assert "returned=True" in str(e.value) and "test_numpy_math.py" in "".join(
        [str(e.value)] + list(getattr(e.value, "__notes__", [])))
    with pytest.raises(FuncgradError) as e:
        funcgrad.grad(diff_prepend, **MODES[mode])(x)
    assert "prepend" in str(e.value) and "test_numpy_math.py" in str(e.value)


# ----------------------------------------------------------------------------- every new primitive
REG = registry()
MINE = sorted(n for n, p in REG.items() if p.template is not None and (
    p.template.filename.endswith("numpy_math.py")
    or n in ("power", "maximum", "minimum", "tie_weight", "prod", "prod_others", "sum", "mean", "max", "min")))


def _draw(data, prim):
    return data.draw(st.composite(lambda draw: prim.sample(draw, np.float64))())


@pytest.mark.parametrize("name", MINE)
@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data())
def test_primitive_compiled_whole_equals_python(name, data):
    """Each primitive (cotangent helpers included) in nopython code equals its pure-Python run, VJP included."""
    prim = REG[name]
    args, kwargs = _draw(data, prim)
    args = tuple(float(a) if isinstance(a, np.ndarray) and a.ndim == 0 else a for a in args)
    f, values, diff = primitive_function(prim, args, kwargs)
    if not diff:
        return
    out_py, vjp_py = funcgrad.vjp(f, *values, argnums=diff, jit=False)
    out_nb, vjp_nb = funcgrad.vjp(f, *values, argnums=diff, mode="njit")
    assert np.shape(out_nb) == np.shape(out_py)
    np.testing.assert_allclose(np.asarray(out_nb, dtype=float), np.asarray(out_py, dtype=float), rtol=1e-12,
                               atol=1e-12)
    ct = RNG.standard_normal(np.shape(out_py)) if np.shape(out_py) else 0.7
    for a, b in zip(vjp_nb(ct), vjp_py(ct)):
        assert np.shape(a) == np.shape(b)
        np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=1e-11, atol=1e-12)


def _template_function(prim, p, args, kwargs):
    """The VJP template's ``d[p] = ...`` as a Python function ``(array arguments..., g) -> cotangent of p``."""
    tpl = prim.template
    ba = prim.signature.bind(*args, **kwargs)
    ba.apply_defaults()
    params, values, lits = [], [], {}
    for name, v in ba.arguments.items():
        if isinstance(v, np.ndarray) and v.dtype.kind == "f" or isinstance(v, float):
            params.append(name)
            values.append(v)
        else:
            lits[name] = v

    class Sub(ast.NodeTransformer):
        def visit_Subscript(self, node):
            if isinstance(node.value, ast.Name) and node.value.id == "d":
                return ast.copy_location(ast.Name("g_", ast.Load()), node)
            return self.generic_visit(node)

    class Helpers(ast.NodeTransformer):   # K.reduced_count(x, axis) & co. read shapes only: their values
        def visit_Call(self, node):
            self.generic_visit(node)
            f = node.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "K":
                env = {**tpl.globals, **ba.arguments}
                return ast.copy_location(ast.Constant(eval(compile(ast.Expression(node), "<helper>", "eval"),
                                                           env)), node)
            return node

    def fill(e):
        return ast.unparse(Helpers().visit(Sub().visit(copy.deepcopy(e))))

    lines = [f"def vjp_{prim.name}({', '.join(params + ['g_'])}):"]
    lines += [f"    {k} = {v!r}" for k, v in lits.items()]
    pos = [n for n, q in prim.signature.parameters.items() if q.default is q.empty]
    call = ", ".join(n if n in pos else f"{n}={n}" for n in ba.arguments)
    lines.append(f"    {tpl.result} = prim_({call})")
    target = None
    for s in tpl.body:
        if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name):
            lines.append(f"    {s.targets[0].id} = {fill(s.value)}")
        elif isinstance(s, ast.Assign) and s.targets[0].slice.id == p:
            target = fill(s.value)
    lines.append(f"    return {target}")
    src = "\n".join(lines).replace("array(", "np.array(") + "\n"
    fn = make(src, f"vjp_{prim.name}", extra={**tpl.globals, "prim_": prim.key if prim.key is not None else
                                              prim.impl, "inf": np.inf, "nan": np.nan})
    return fn, params, values


SECOND = [n for n in MINE if REG[n].template.diff_params]


@pytest.mark.parametrize("name", SECOND)
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data())
def test_vjp_template_is_differentiable(name, data):
    """Second order: the VJP of each primitive, as a function of its inputs and the cotangent, has a VJP that
    central differences agree with (so a gradient of a gradient is right)."""
    prim = REG[name]
    args, kwargs = _draw(data, prim)
    for p in prim.template.diff_params:
        ba = prim.signature.bind(*args, **kwargs)
        v = ba.arguments.get(p)
        if not (isinstance(v, np.ndarray) and v.dtype.kind == "f" or isinstance(v, float)):
            continue
        fn, params, values = _template_function(prim, p, args, kwargs)
        y = prim.impl(*args, **kwargs)
        g = RNG.standard_normal(np.shape(y)) if np.shape(y) else 0.6
        diff = tuple(i for i, q in enumerate(params + ["g_"]) if q != "kth")
        check_grads(fn, values + [g], argnums=diff, mode="python", atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------- kernels
def test_sinc_derivatives():
    for x in (0.0, 1e-9, 0.3, -1.2, 1.4999, 1.5001, 2.7, -7.3):
        for n in (1, 2, 3):
            h = 1e-5
            num = (K.sinc_deriv(x + h, n - 1) - K.sinc_deriv(x - h, n - 1)) / (2 * h) if n > 1 else \
                (np.sinc(x + h) - np.sinc(x - h)) / (2 * h)
            assert abs(K.sinc_deriv(x, n) - num) < 1e-6, (x, n)
    assert K.sinc_deriv(0.0, 1) == 0.0
    assert abs(K.sinc_deriv(0.0, 2) + np.pi ** 2 / 3) < 1e-14
    for mode in MODES.values():
        assert funcgrad.grad(lambda x: np.sinc(x), **mode)(0.0) == 0.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kernels_keep_the_dtype(dtype):
    x = RNG.standard_normal((3, 4)).astype(dtype)
    for name in ("var", "std", "ptp", "nansum", "nanmean", "median", "average", "cumsum", "cumprod", "sort"):
        assert getattr(K, name)(x, axis=0).dtype == getattr(np, name)(x, axis=0).dtype, name
    assert K.diff(x, 1, 0).dtype == dtype and K.cumsum_t(x, x, 1).dtype == dtype


# ----------------------------------------------------------------------------- forward mode and Hessians
def h_elementwise(x):
    return np.sum(np.arcsinh(x) * np.exp2(x) + np.log2(x * x + 1) + np.sinc(x) + np.cbrt(x * x + 1)
                  + np.hypot(x, 1.3) + np.arctan2(x, 0.7) + np.logaddexp(x, 0.2) + np.logaddexp2(x, -x)
                  + np.deg2rad(x) * np.rad2deg(x) + np.fabs(x) ** 3 + np.arctanh(x / 3) + np.arccosh(x * x + 1.5)
                  + np.log10(x * x + 1) + np.fmax(x, 0.05) ** 2 + np.fmin(x * x, 0.3 * x) + x ** 3.0)


def h_mod(x):
    return np.sum((x % 0.7) ** 2 + np.fmod(x, 0.9) ** 3 + np.remainder(1.3, x + 3) * x + np.nan_to_num(x) ** 2)


def h_stats(x):
    return (np.var(x, ddof=1) ** 2 + np.std(x) * np.ptp(x) + np.median(x) ** 2 + np.average(x, weights=x * x + 1)
            + np.nanmean(x ** 2) * np.nansum(x) + np.prod(x) + np.max(x) ** 2 + np.mean(x) ** 3)


def h_scans(x):
    return (np.sum(np.cumsum(x) ** 2) + np.sum(np.cumprod(x) ** 2) + np.sum(np.diff(x, 2) ** 3)
            + np.sum(np.sort(x) * np.arange(5.0)) ** 2 + np.sum(np.partition(x, 2)[:2] ** 2))


XH = np.array([0.35, -0.55, 0.85, 0.15, -1.2])   # distinct, away from the jumps of % 0.7 and fmod 0.9
VH = np.array([1.0, 0.5, -2.0, 0.25, 0.7])


def _fd_hessian(f, x, eps=1e-5):
    g = funcgrad.grad(f, mode="python")
    return np.stack([(g(x + eps * e) - g(x - eps * e)) / (2 * eps) for e in np.eye(x.size)], axis=-1)


@pytest.mark.parametrize("mode", ["python", "auto"])
@pytest.mark.parametrize("f", [h_elementwise, h_mod, h_stats, h_scans])
def test_hessians(f, mode):
    from funcgrad.forward_mode import hessian
    np.testing.assert_allclose(hessian(f, mode=mode)(XH), _fd_hessian(f, XH), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("f", [h_elementwise, h_mod, h_stats, h_scans])
def test_forward_mode(f, mode):
    out, tan = funcgrad.jvp(f, (XH,), (VH,), **MODES[mode])
    eps = 1e-6
    assert out == pytest.approx(f(XH), rel=1e-12)
    assert tan == pytest.approx((f(XH + eps * VH) - f(XH - eps * VH)) / (2 * eps), rel=1e-6, abs=1e-7)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_tie_weight_one_pass_equals_its_ufunc(dt):
    """ReLU's backward weight (``tie_weight``) of contiguous arrays runs as one compiled pass; it equals the
    general ufunc on ties, NaNs, a scalar or an array second operand, and keeps z's dtype."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((16, 9)).astype(dt)
    x[0, :4] = 0.0
    x[1, 0] = np.nan
    y = rng.standard_normal((16, 9)).astype(dt)
    y[2, :3] = x[2, :3]
    y[3, 1] = np.nan
    for a, b in ((x, 0.0), (x, 0), (x, dt(0.5)), (x, y), (y, x)):
        z = np.maximum(a, b)
        got = cm.tie_weight(a, b, z)
        want = cm._tie(a, b, z, dtype=z.dtype)
        assert got.dtype == z.dtype and got.shape == z.shape
        np.testing.assert_array_equal(got, want)
    assert np.count_nonzero(cm.tie_weight(x, 0.0, np.maximum(x, 0.0)) == 0.5) == 4
    xt = x.T                                   # not contiguous: the general path, the same values
    np.testing.assert_array_equal(cm.tie_weight(xt, 0.0, np.maximum(xt, 0.0)),
                                  cm._tie(xt, 0.0, np.maximum(xt, 0.0), dtype=xt.dtype))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_maximum_and_minimum_with_a_number_equal_numpy(dt):
    """K.maximum/K.minimum of a contiguous float array and a number (ReLU) take one compiled pass; values,
    NaNs, infinities, dtype (NumPy 2 keeps a Python number weak: float32 stays float32) and shape are NumPy's.
    Other operands (a float64 scalar with a float32 array, views, small arrays) go to NumPy itself."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((16, 9)).astype(dt)
    x[0, :5] = [np.nan, -0.0, 0.0, np.inf, -np.inf]
    for y in (0.0, 0, -1, 0.5, np.nan, np.inf, dt(0.25), np.float64(0.25), 2 ** 30, True):
        for a in (x, x.T, x[:2, :3]):
            for mine, theirs in ((K.maximum, np.maximum), (K.minimum, np.minimum)):
                got, want = mine(a, y), theirs(a, y)
                assert got.dtype == want.dtype and got.shape == want.shape, (y, a.shape)
                np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(K.maximum(x, 0.0, out=np.empty_like(x)), np.maximum(x, 0.0))

    @numba.njit
    def relu_clip(a):
        return K.minimum(K.maximum(a, 0.0), 1.0)
    np.testing.assert_array_equal(relu_clip(x), np.minimum(np.maximum(x, 0.0), 1.0))


def _conv_program(a, v):
    acc = 0.0
    for k in range(3):
        for mode in ("full", "same", "valid"):
            acc = acc + np.sum(np.sin(np.convolve(a * (k + 1), v, mode)))
    return acc + np.sum(np.copysign(a, v[0] - 0.3)) + math.copysign(v[1], -1.0)


@pytest.mark.parametrize("jit", ["auto", "python", False])
@pytest.mark.parametrize("n, m", [(5, 3), (3, 5), (4, 4)])
def test_np_convolve_and_copysign_in_a_loop(jit, n, m):
    rng = np.random.default_rng(n * 10 + m)
    a, v = rng.standard_normal(n), rng.standard_normal(m)
    val, (ga, gv) = funcgrad.value_and_grad(_conv_program, argnums=(0, 1), jit=jit)(a, v)
    assert np.isclose(val, _conv_program(a, v))
    for i, g in ((0, ga), (1, gv)):
        np.testing.assert_allclose(g, numerical_vjp(_conv_program, (a, v), i, 1.0, 1e-6), atol=1e-6)


def test_np_convolve_under_whole_function_numba_is_refused_in_the_users_words():
    with pytest.raises(funcgrad.CompileError, match="numpy.convolve has no nopython implementation"):
        funcgrad.grad(_conv_program, jit="njit")(np.ones(4), np.ones(3))
