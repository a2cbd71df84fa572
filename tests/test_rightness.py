"""Right or refused (issue 12): programs found by random testing that gave a silently wrong value or
gradient, or crashed inside funcgrad.

Each program runs through funcgrad in every mode (``auto``, ``python``, ``njit``, ``jit=False``): its
value must match plain Python and its gradient central differences in float64, or the call must be
refused at the user's line with a message in the user's terms.
"""
import inspect

import numpy as np
import pytest

import funcgrad
from funcgrad.errors import FuncgradError, NoDerivativeError, UnsupportedSyntaxError
from funcgrad.testing import numerical_vjp
from funcgrad.tree import tree_flatten

MODES = [dict(mode="auto"), dict(mode="python"), dict(mode="njit"), dict(jit=False)]
MODE_IDS = ["auto", "python", "njit", "nojit"]
HERE = __file__


def _right(f, args, argnums=0, kw=None):
    """Value equal to Python's and gradient equal to central differences, in the mode ``kw``."""
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    want_v = f(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
    v, g = funcgrad.value_and_grad(f, argnums=nums, **(kw or {}))(*[a.copy() if isinstance(a, np.ndarray) else a
                                                                     for a in args])
    np.testing.assert_allclose(v, want_v, rtol=1e-12, atol=1e-12)
    for k, i in enumerate(nums):
        want = numerical_vjp(lambda *a: f(*[x.copy() if isinstance(x, np.ndarray) else x for x in a]),
                             args, i, 1.0, 1e-6)
        got_l, got_t = tree_flatten(g[k])
        want_l, want_t = tree_flatten(want)
        assert got_t == want_t, (got_t, want_t)
        for a, b in zip(got_l, want_l):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7, err_msg=f"argument {i}")


def _line_of(fn, text):
    """The line number of the first line of ``fn``'s source containing ``text``."""
    lines, first = inspect.getsourcelines(fn)
    for k, ln in enumerate(lines):
        if text in ln:
            return first + k
    raise AssertionError(f"{text!r} not in {fn.__name__}")


def _refused_at(exc, fn, text):
    assert exc.filename == HERE, str(exc)
    assert exc.lineno == _line_of(fn, text), str(exc)
    assert "K." not in str(exc) and "_t1" not in str(exc), str(exc)   # no generated names


# ---------------------------------------------------------------- 1. generated names never collide

C = np.array([0.0, 0.5, 1.0])


def user_t1(x, t1):                       # a user variable t1 beside the generated temporary _t1
    ts = C * t1
    return np.sum(np.sin(ts * x)[-1])


def user_underscore(x, _x):               # x and _x: both once had the cotangent d_x
    a = np.sin(x) * _x
    _a = a * a
    return np.sum(_a + a * x)


def user_generated_looking(x, d_x, _t1, _v1, g_out0):   # names the passes generate, written by the user
    _t1_ = x * d_x
    t1_ = _t1_ * _t1 + _v1
    _tape_x = t1_ * g_out0
    return np.sum(_tape_x * x)


def user_tangent_names(x, t_x):           # t_x is the forward pass's tangent of x
    _x = np.sin(x) * t_x
    return np.sum(_x * x)


def loop_names(x, c):                     # n2 beside the inner loop's trip counter _n2 and its tape _tape_n2
    s = 0.0
    n2 = c * 1.0
    for i in range(3):
        for j in range(2):
            n2 = n2 * 1.1 + x[j] * s
            s = s + np.sin(n2)
    return s


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_user_t1_and_generated_t1_have_different_cotangents(kw):
    x = np.array([0.3, 0.5, 0.7])
    _right(user_t1, (x, 2.0), (0, 1), kw)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_names_that_look_generated(kw):
    rng = np.random.default_rng(1)
    x = rng.normal(size=3)
    _right(user_underscore, (x, 0.7), (0, 1), kw)
    _right(user_generated_looking, (x, 0.4, 1.3, 0.2, 0.9), (0, 1, 2, 3, 4), kw)
    _right(user_tangent_names, (x, 0.6), (0, 1), kw)
    _right(loop_names, (x, 0.3), (0, 1), kw)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_forward_mode_tangent_names_never_collide(kw):
    rng = np.random.default_rng(2)
    for f, args in [(user_tangent_names, (rng.normal(size=3), 0.6)), (user_t1, (rng.normal(size=3), 2.0)),
                    (user_underscore, (rng.normal(size=3), 0.7)),
                    (user_generated_looking, (rng.normal(size=3), 0.4, 1.3, 0.2, 0.9))]:
        tans = tuple(np.ones_like(a) if isinstance(a, np.ndarray) else 1.0 for a in args)
        out, tan = funcgrad.jvp(f, args, tans, **kw)
        eps = 1e-6
        plus = f(*[a + eps * t for a, t in zip(args, tans)])
        minus = f(*[a - eps * t for a, t in zip(args, tans)])
        np.testing.assert_allclose(out, f(*args), rtol=1e-12)
        np.testing.assert_allclose(tan, (plus - minus) / (2 * eps), rtol=1e-6, atol=1e-7, err_msg=f.__name__)


def test_hessian_with_names_that_look_generated():
    x = np.array([0.3, -0.2, 0.5])

    def g(x):
        return user_tangent_names(x, 0.6) + user_t1(x, 1.5)

    H = funcgrad.hessian(g, jit=False)(x)
    gr = funcgrad.grad(g, jit=False)
    eps = 1e-5
    want = np.stack([(gr(x + eps * e) - gr(x - eps * e)) / (2 * eps) for e in np.eye(3)], axis=-1)
    np.testing.assert_allclose(H, want, rtol=1e-6, atol=1e-6)


def brk_flag(x, n):
    s = 0.0
    __brk1 = x * 5.0                      # the structure pass names its first break flag __brk1
    for i in range(n):
        if s > 10.0:
            break
        s = s + x
    return s + __brk1


def early_return(x):
    s = 0.0
    for i in range(4):
        if s > 2.0:
            return s * x
        s = s + x * x
    return s


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_control_flow_flag_names_are_refused_at_the_users_line(kw):
    with pytest.raises(UnsupportedSyntaxError) as e:
        funcgrad.grad(brk_flag, **kw)(1.0, 3)
    _refused_at(e.value, brk_flag, "__brk1 = x")
    assert "reserved" in str(e.value)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_grad_of_grad_reads_generated_code_with_early_returns(kw):
    # the generated code names the result flag _ret, not __ret (which the user may not use)
    g = funcgrad.grad(early_return, **kw)
    h = 1e-5
    want = (g(0.9 + h) - g(0.9 - h)) / (2 * h)
    assert funcgrad.grad(funcgrad.grad(early_return, **kw), **kw)(0.9) == pytest.approx(want, rel=1e-6)


# ---------------------------------------------------------------- 6. None and other static arguments

def sum_axis(x, axis):
    return np.sum(np.sum(x, axis=axis) ** 2)


def optional_bias(x, opts):
    y = x * opts["scale"]
    if opts["bias"] is None:
        return np.sum(y ** 2)
    return np.sum((y + opts["bias"]) ** 2)


def statics(x, name, act, dt, sl):
    y = act(x[sl]) * np.ones(1, dtype=dt)
    if name == "sq":
        return np.sum(y * y)
    return np.sum(y)


def ellipsis_index(x):
    return np.sum(x[...] * 2.0)


def astype_of_a_computed_value(x):
    return np.sum(np.tanh(x).astype(np.float64))


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_none_argument_is_static(kw):
    x = np.arange(4.0).reshape(2, 2) + 0.5
    _right(sum_axis, (x, None), 0, kw)
    _right(optional_bias, (np.array([0.3, -0.7]), {"scale": 2.0, "bias": None}), (0, 1), kw)
    _right(optional_bias, (np.array([0.3, -0.7]), {"scale": 2.0, "bias": np.array([0.1, 0.2])}), (0, 1), kw)
    out, tan = funcgrad.jvp(sum_axis, (x, None), (np.ones_like(x), None), **kw)
    assert out == pytest.approx(sum_axis(x, None)) and tan == pytest.approx(2 * np.sum(x) * 4)
    H = funcgrad.hessian(sum_axis, **kw)(x, None)
    np.testing.assert_allclose(H, 2 * np.ones((2, 2, 2, 2)), atol=1e-9)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_strings_functions_dtypes_and_slices_are_static(kw):
    x = np.array([0.3, -0.5, 0.8])
    for args in [(x, "sq", np.tanh, np.float64, slice(0, 2)), (x, "id", np.sin, np.float64, slice(1, None))]:
        _right(statics, args, 0, kw)
    g = funcgrad.grad(statics, **kw)
    g(x, "sq", np.tanh, np.float64, slice(0, 2))
    np.testing.assert_allclose(g(x, "sq", np.sin, np.float64, slice(0, 2)),
                               [2 * np.sin(0.3) * np.cos(0.3), 2 * np.sin(-0.5) * np.cos(-0.5), 0.0])


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_int_axis_argument_is_right_in_every_mode(kw):
    # an int argument used as an axis becomes part of the specialization (its value keys the compiled code)
    x = np.arange(4.0).reshape(2, 2) + 0.5
    _right(sum_axis, (x, 0), 0, kw)
    _right(sum_axis, (x, 1), 0, kw)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_numba_lowering_failure_is_refused_at_the_users_line(kw):
    if kw.get("mode") == "njit":
        with pytest.raises(funcgrad.errors.CompileError) as e:
            funcgrad.grad(ellipsis_index, **kw)(np.ones(2))
        _refused_at(e.value, ellipsis_index, "x[...]")
    else:
        _right(ellipsis_index, (np.array([0.5, 2.0]),), 0, kw)


def rank_changes_on_a_branch(x, n):
    if n == 0:
        x = np.max(x, axis=0)
    return np.sum(x * x)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_a_variable_of_two_types_is_named_when_compiled_code_refuses(kw):
    x = np.array([[0.5, 2.0], [1.5, -1.0]])
    if kw.get("mode") == "njit":
        with pytest.raises(funcgrad.errors.CompileError) as e:
            funcgrad.grad(rank_changes_on_a_branch, **kw)(x, 0)
        _refused_at(e.value, rank_changes_on_a_branch, "return np.sum(x * x)")
        assert "'x' takes values of different types on different paths: 2-D float64 array on one and 1-D " \
               "float64 array on another" in str(e.value)
    else:
        _right(rank_changes_on_a_branch, (x, 0), 0, kw)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_method_of_a_computed_value_is_seen_by_the_passes(kw):
    # np.tanh(x).astype(...) was one opaque call: the gradient was silently zero (then refused; now a cast
    # primitive differentiates it)
    _right(astype_of_a_computed_value, (np.array([0.3, -0.8]),), 0, kw)


# ---------------------------------------------------------------- 2. a differentiated value into a parameter with no rule

def clip_lo(lo, x):
    return np.sum(np.clip(x, lo, 5.0))


def clip_all(x, lo, hi):
    return np.sum(np.clip(x, lo, hi) ** 2 * np.arange(1.0, 1.0 + x.shape[0]))


def clip_one_sided(x, hi):
    return np.sum(np.clip(x, None, hi) ** 2) + np.sum(x.clip(-0.25, None) ** 3)


def elu_alpha(x, a):
    return np.sum(funcgrad.nn.elu(x, a))


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_clip_bounds_have_derivatives(kw):
    x = np.array([0.1, 0.2, 1.0])
    _right(clip_lo, (0.5, x), (0, 1), kw)                 # was 0: lo had no d[...] line
    xs = np.array([-1.3, -0.2, 0.35, 0.9, 2.1])
    _right(clip_all, (xs, -0.5, 0.6), (0, 1, 2), kw)
    _right(clip_all, (xs, np.array([-1.5, -0.1, 0.3, 0.2, 0.0]), 0.6), (0, 1, 2), kw)
    _right(clip_all, (xs, -0.5, np.array([0.6, 0.1, -2.0, 1.5, 3.0])), (0, 1, 2), kw)
    _right(clip_all, (xs, 0.6, -0.5), (0, 1, 2), kw)      # crossed bounds: NumPy gives hi everywhere
    _right(clip_one_sided, (xs, 0.4), (0, 1), kw)          # a None bound crashed in the mask kernel


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_clip_bounds_in_forward_mode(kw):
    xs = np.array([-1.3, -0.2, 0.35, 0.9, 2.1])
    args = (xs, -0.5, 0.6)
    for tans in [(np.zeros(5), 1.0, 0.0), (np.zeros(5), 0.0, 1.0), (np.ones(5), 0.5, -2.0)]:
        out, tan = funcgrad.jvp(clip_all, args, tans, **kw)
        eps = 1e-6
        want = (clip_all(*[a + eps * t for a, t in zip(args, tans)]) -
                clip_all(*[a - eps * t for a, t in zip(args, tans)])) / (2 * eps)
        assert out == pytest.approx(clip_all(*args), rel=1e-12) and tan == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_a_parameter_without_a_rule_is_refused_at_the_users_line(kw):
    x = np.array([0.1, -0.7, 0.4])
    with pytest.raises(NoDerivativeError) as e:
        funcgrad.grad(elu_alpha, argnums=1, **kw)(x, 0.8)
    _refused_at(e.value, elu_alpha, "nn.elu(x, a)")
    assert "'alpha'" in str(e.value) and "elu" in str(e.value)
    # forward mode gives every float argument a tangent: a nonzero one into alpha is refused when it runs
    with pytest.raises(NoDerivativeError) as e:
        funcgrad.jvp(elu_alpha, (x, 0.8), (np.zeros(3), 1.0), **kw)
    assert f"{HERE}:{_line_of(elu_alpha, 'nn.elu(x, a)')}" in str(e.value) and "'alpha'" in str(e.value)
    # the same call differentiated only through x is fine: grad, jvp with a zero tangent, hessian
    _right(elu_alpha, (x, 0.8), 0, kw)
    out, tan = funcgrad.jvp(elu_alpha, (x, 0.8), (np.ones(3), 0.0), **kw)
    eps = 1e-6
    assert tan == pytest.approx((elu_alpha(x + eps, 0.8) - elu_alpha(x - eps, 0.8)) / (2 * eps), rel=1e-6)
    H = funcgrad.hessian(lambda x, a: elu_alpha(x, a) ** 2, **kw)(x, 0.8)
    g = funcgrad.grad(lambda x, a: elu_alpha(x, a) ** 2, jit=False)
    want = np.stack([(g(x + 1e-5 * e, 0.8) - g(x - 1e-5 * e, 0.8)) / 2e-5 for e in np.eye(3)], axis=-1)
    np.testing.assert_allclose(H, want, rtol=1e-6, atol=1e-6)


def test_templates_declare_every_parameter_a_differentiated_value_can_reach():
    # shape-only operands and masks say so (d[p] = None), so higher order runs through them
    from funcgrad.ops.registry import registry
    reg = registry()
    assert "x" in reg["unbroadcast"].template.nondiff and "condition" in reg["where"].template.nondiff
    assert {"a_min", "a_max"} <= set(reg["clip"].template.diff_params)
    assert {"a_min", "a_max"} <= reg["clip"].template.jvp_params


# ---------------------------------------------------------------- 3. the lambda meant, among lambdas on one line

sq, sine = (lambda x: x * x), (lambda x: np.sin(x))                        # noqa: E731
two, three = (lambda x: x * 2.0), (lambda x: x * 3.0)                      # noqa: E731
outer = lambda x: (lambda y: y * 5.0)(x) + x * x                           # noqa: E731
pair = [lambda x, c=c: np.tanh(x) * c for c in (2.0, 3.0)], (lambda x, c=4.0: x * c)   # noqa: E731
spread = (lambda x: x * 7.0,
          lambda x: np.exp(x))                                             # noqa: E731


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_the_lambda_differentiated_is_the_one_passed(kw):
    x = 0.3
    cases = [(sq, 2 * x), (sine, np.cos(x)), (two, 2.0), (three, 3.0), (outer, 5.0 + 2 * x),
             (pair[0][0], 2.0 * (1 - np.tanh(x) ** 2)), (pair[0][1], 3.0 * (1 - np.tanh(x) ** 2)), (pair[1], 4.0),
             (spread[0], 7.0), (spread[1], np.exp(x))]
    for f, want in cases:
        assert funcgrad.grad(f, **kw)(x) == pytest.approx(want, rel=1e-12), f
        assert funcgrad.value_and_grad(f, **kw)(x)[0] == pytest.approx(f(x), rel=1e-12)


def test_an_unlocatable_lambda_is_refused_not_guessed(tmp_path):
    # the file changed since the lambda was compiled: no lambda on its line holds its code; refuse, never
    # differentiate another lambda of that line
    from tests.support import import_file, rewrite_file
    path = tmp_path / "rightness_lambda_mod.py"
    path.write_text("import numpy as np\ng = (lambda x: x * 2.0)\n")
    mod = import_file(path, "rightness_lambda_mod")
    rewrite_file(path, "import numpy as np\ng = (lambda x: x)     ;     h = (lambda x: np.sin(x))\n")
    with pytest.raises(UnsupportedSyntaxError) as e:
        funcgrad.grad(mod.g, jit=False)(0.3)
    assert e.value.lineno == 2 and "lambda" in str(e.value)


# ---------------------------------------------------------------- 5. nested sequences and tuple targets

def array_2d(x):
    A = np.array([[x, x * 1.0, x + 2.5], [x ** 2, x, x / 2.0]])
    return np.sum(A * np.arange(6.0).reshape(2, 3))


def arrays_2d_from_arrays(x):
    return np.sum(np.array([[2 * x, x + 1], [x, x]]) ** 2) + np.sum(np.stack([[x[0], x[1]], [x[1], x[0]]]) ** 3)


def concat_nested(x):
    return np.sum(np.concatenate([x, [x[0] * 2.0, x[1]]]) ** 2)


def enumerate_zip_lists(x, y):
    s = 0.0
    for i, (a, b) in enumerate(zip([x, y, x * y], [y, x, x])):
        s = s + a * b * (i + 1)
    return s


def enumerate_zip_arrays(x, y):
    s = 0.0
    for i, (a, b) in enumerate(zip(x, y)):
        s = s + a * b * i
    return s


def nested_targets(x):
    (a, b), c = (x, x * 2.0), x * 3.0
    [d, (e, f)] = [a * b, (c, np.sin(c))]
    return d * e + f


def comprehension_targets(x, y):
    return sum([a * b for (a, b) in zip([x, y], [y, x * x])]) + sum(i * v for i, (v, _) in enumerate([(x, 1), (y, 2)]))


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_nested_lists_are_nested_arrays(kw):
    _right(array_2d, (3.0,), 0, kw)        # crashed: 'Tuple' object has no attribute 'id'
    _right(arrays_2d_from_arrays, (np.array([[0.3, -0.2], [0.5, 1.1], [0.7, 0.1]]),), 0, kw)
    _right(concat_nested, (np.array([0.3, -0.2, 0.5]),), 0, kw)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_tuple_targets(kw):
    _right(enumerate_zip_lists, (0.3, 0.7), (0, 1), kw)    # was refused: zip of lists inside enumerate
    _right(enumerate_zip_arrays, (np.array([0.3, 0.5, -0.1]), np.array([1.0, 2.0, 0.5])), (0, 1), kw)
    _right(nested_targets, (0.4,), 0, kw)
    _right(comprehension_targets, (0.4, -0.3), (0, 1), kw)


# ---------------------------------------------------------------- 4. in-place writes through aliases

def alias_then_write(x):
    a = x * 1.0
    b = a
    a[0] = 5.0
    return np.sum(b * 3.0)


def write_through_alias(x):
    a = x * 1.0
    b = a
    b[1] = a[0] * 2.0
    return np.sum(a * x)


def alias_rebound(x):
    a = x * 1.0
    b = a
    a = a * 2.0
    a[0] = 7.0
    return np.sum(b * a)


def view_not_used_after(x):
    a = x * 1.0
    b = a[1:]
    s = np.sum(b * b)
    a[1] = x[0] * 4.0
    return s + np.sum(a * x)


def previous_in_loop(x, n):
    cur = x * 1.0
    prev = cur
    for i in range(n):
        prev = cur
        cur = cur * 1.5
        cur[0] = prev[1] * x[2]
    return np.sum(cur * prev)


def view_slice_then_write(x):
    a = x * 1.0
    b = a[1:]
    a[1] = 5.0
    return np.sum(b * x[1:])


def view_flip_then_write(x):
    a = x * 1.0
    b = np.flip(a)
    a[0] = x[1] * 3.0
    return np.sum(b * b)


def view_reshape_then_write(x):
    a = x * 1.0
    b = a.reshape(2, 2)
    a[0] = x[1] * 3.0
    return np.sum(b * b)


def write_through_row(x):
    a = x.reshape(2, 2) * 1.0
    r = a[0]
    r[1] = x[3] * 2.0
    return np.sum(a * a)


def alias_in_loop(x, n):
    a = x * 1.0
    b = x * 2.0
    for i in range(n):
        b = a
        a[0] = b[1] * 2.0
        b = b * 1.0
    return np.sum(a * b)


def alias_on_a_branch(x):
    a = x * 1.0
    if x[0] > 0:
        b = a
    else:
        b = a * 2.0
    a[1] = 3.0
    return np.sum(b * x)


def augmented_through_alias(x):
    y = x * 1.0
    z = y
    z += 1.0
    return np.sum(y * x)


def augmented_through_a_branch_alias(x):
    y = x * 1.0
    w = x * 2.0
    z = y if x[0] > 0 else w   # z is y on one path only: which array the write reaches is known at run time
    z += 1.0
    return np.sum(y * x) + np.sum(w)


def returns_a_view(x):
    a = x * 2.0
    b = a[:2]
    a[0] = 1.0
    return b


X4 = np.array([0.3, 0.5, 0.7, 0.9])


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_plain_aliases_are_one_array(kw):
    _right(alias_then_write, (X4,), 0, kw)          # b's gradient kept the overwritten element
    _right(write_through_alias, (X4,), 0, kw)
    _right(alias_rebound, (X4,), 0, kw)
    _right(view_not_used_after, (X4,), 0, kw)
    _right(previous_in_loop, (X4, 3), 0, kw)
    _right(augmented_through_alias, (X4,), 0, kw)   # z += 1 changes y's array too, as in NumPy
    _right(alias_in_loop, (X4, 2), 0, kw)           # b = a in the loop: b is a again after a[0] = ...
    _right(view_slice_then_write, (X4,), 0, kw)     # b = a[1:] is made again after a[1] = 5
    _right(write_through_row, (X4,), 0, kw)         # r = a[0]; r[1] = v is written back: a[0] = r


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_writes_seen_through_another_name_are_refused_at_the_users_line(kw):
    for f, args, line in [(view_flip_then_write, (X4,), "a[0] = x[1] * 3.0"),
                          (view_reshape_then_write, (X4,), "a[0] = x[1] * 3.0"),   # a view or a copy: run time
                          (alias_on_a_branch, (X4,), "a[1] = 3.0")]:
        with pytest.raises(UnsupportedSyntaxError) as e:
            funcgrad.grad(f, **kw)(*args)
        _refused_at(e.value, f, line)
        assert "shares its memory" in str(e.value)
    with pytest.raises(UnsupportedSyntaxError) as e:   # named as the user wrote them, not by their versions
        funcgrad.grad(augmented_through_a_branch_alias, **kw)(X4)
    _refused_at(e.value, augmented_through_a_branch_alias, "z += 1.0")
    assert "on 'z' writes" in str(e.value) and ("('y')" in str(e.value) or "('w')" in str(e.value))
    out, vjp = funcgrad.vjp(returns_a_view, X4.copy(), **kw)   # the view is made again after the write
    np.testing.assert_array_equal(out, returns_a_view(X4.copy()))
    ct = np.array([1.0, -2.0])
    np.testing.assert_allclose(vjp(ct)[0], numerical_vjp(returns_a_view, (X4.copy(),), 0, ct, 1e-6), atol=1e-8)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_forward_mode_follows_aliases_and_views(kw):
    v = np.array([1.0, -0.5, 0.25, 2.0])
    for f in (alias_then_write, write_through_alias, view_slice_then_write, view_reshape_then_write,
              write_through_row, alias_on_a_branch):
        out, tan = funcgrad.jvp(f, (X4.copy(),), (v,), **kw)
        eps = 1e-6
        assert out == pytest.approx(f(X4.copy()), rel=1e-12)
        assert tan == pytest.approx((f(X4 + eps * v) - f(X4 - eps * v)) / (2 * eps), rel=1e-6), f.__name__


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_second_order_refusals_name_the_users_line(kw):
    # second order transforms generated code: a refusal found there is reported where that code came from
    x = np.array([0.1, 0.7, -0.5])
    with pytest.raises(NoDerivativeError) as e:
        funcgrad.hvp(elu_alpha, (x, 0.8), (np.ones(3), 0.0), **kw)   # hvp differentiates alpha too
    _refused_at(e.value, elu_alpha, "nn.elu(x, a)")
    with pytest.raises(UnsupportedSyntaxError) as e:
        funcgrad.hessian(view_flip_then_write, **kw)(X4)
    _refused_at(e.value, view_flip_then_write, "a[0] = x[1] * 3.0")
    # the view b = a[1:] is made again after a[1] = 5.0: f = 5 x1 + x2^2 + x3^2
    np.testing.assert_allclose(funcgrad.hessian(view_slice_then_write, **kw)(X4), np.diag([0.0, 0.0, 2.0, 2.0]),
                               atol=1e-12)


@funcgrad.custom_vjp
def scaled(x, y):
    return x * y


scaled.defvjp(lambda x, y: (x * y, (x, y)), lambda res, g: (g * res[1], None))   # y: declared zero


def uses_scaled(x, y):
    return np.sum(scaled(x, y) * x)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_custom_vjp_none_is_a_zero_cotangent(kw):
    # None for a differentiated argument gave NaN; it is the user's rule for "no derivative" (as in JAX)
    x, y = np.array([0.5, -1.0]), np.array([3.0, 2.0])
    if kw.get("mode") == "njit":     # custom_vjp functions run as Python: whole-function Numba refuses them
        with pytest.raises(funcgrad.errors.CompileError) as e:
            funcgrad.grad(uses_scaled, argnums=(0, 1), **kw)(x, y)
        _refused_at(e.value, uses_scaled, "scaled(x, y) * x")
        return
    gx, gy = funcgrad.grad(uses_scaled, argnums=(0, 1), **kw)(x, y)
    np.testing.assert_allclose(gx, y * x + x * y)
    np.testing.assert_array_equal(gy, np.zeros(2))


def augmented_alias(x):
    y = x * 1.0
    z = y
    y += 1.0                   # NumPy writes into the array z holds too
    return np.sum(z * x)


def augmented_through_a_view(x):
    y = x * 1.0
    z = np.flip(y)
    z *= 2.0                   # NumPy writes into y's array through a reversed view
    return np.sum(y * x)


def augmented_alias_in_loop(x):
    y = x * 1.0
    z = y
    for i in range(2):
        z = y
        y += x
    return np.sum(z * y)


def augmented_without_alias(x, n):
    y = x * 1.0
    s = 0.0
    for i in range(n):
        prev = s               # a number: += rebinds it
        s += np.sum(y) * prev + 1.0
        y += x * 0.5
    return s + np.sum(y * y)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_augmented_assignment_on_an_aliased_array(kw):
    # y += 1 writes into the array z holds too: z is rebound to the result (the generated code binds a new
    # array for y); a write through a reversed view is refused (views by indexing, reshapes and transposes are
    # written back)
    for f in (augmented_alias, augmented_alias_in_loop):
        _right(f, (X4,), 0, kw)
    with pytest.raises(UnsupportedSyntaxError) as e:
        funcgrad.value_and_grad(augmented_through_a_view, **kw)(X4.copy())
    _refused_at(e.value, augmented_through_a_view, "z *= 2.0")
    _right(augmented_without_alias, (X4, 3), 0, kw)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_augmented_assignment_on_an_aliased_array_forward_and_jit(kw):
    v = np.array([1.0, -0.5, 0.25, 2.0])
    for f in (augmented_alias, augmented_alias_in_loop):
        out, tan = funcgrad.jvp(f, (X4.copy(),), (v,), **kw)
        assert out == pytest.approx(f(X4.copy()), rel=1e-12)
        eps = 1e-6
        assert tan == pytest.approx((f(X4 + eps * v) - f(X4 - eps * v)) / (2 * eps), rel=1e-6)
        assert funcgrad.jit(f)(X4.copy()) == pytest.approx(f(X4.copy()), rel=1e-12)
    with pytest.raises(UnsupportedSyntaxError) as e:
        funcgrad.jit(augmented_through_a_view)(X4.copy())
    _refused_at(e.value, augmented_through_a_view, "z *= 2.0")
    out, tan = funcgrad.jvp(augmented_without_alias, (X4, 3), (np.ones(4), 0), **kw)
    assert out == pytest.approx(augmented_without_alias(X4, 3), rel=1e-12)
    assert funcgrad.jit(augmented_without_alias)(X4, 3) == pytest.approx(augmented_without_alias(X4, 3), rel=1e-12)
