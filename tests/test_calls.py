"""Calls, not only rules (issue 14): what funcgrad can be handed, and what a differentiated function may call.

* ``grad``/``value_and_grad``/``vjp``/``jit`` take NumPy and SciPy functions, ufuncs, builtins,
  ``functools.partial`` objects, callable objects and ``custom_vjp`` functions directly;
* int and bool arguments are not differentiated (ints are runtime values, or specialization keys
  where the code needs a constant such as an axis; bools are specialization keys); asking to
  differentiate one is refused at the user's call;
* a call of any library function whose arguments do not depend on the differentiated inputs just
  runs; with a differentiated argument and no rule it is refused at the user's line, naming the
  function, and funcgrad never reads the library's source;
* ``custom_vjp`` functions inside loops: ``auto`` runs the function as Python over the kernels,
  ``"whole"`` refuses at the call's line.

Every case runs in every mode (``jit`` auto, "kernels" = Python over compiled kernels, "whole" =
whole-function Numba, False = plain Python); values are compared with the plain function and
gradients with central differences in float64.
"""
import collections
import functools
import importlib
import math
import os
import statistics
import sys
import traceback
import warnings

import numpy as np
import pytest
import scipy.linalg
import scipy.special

import funcgrad
from funcgrad.errors import ArgumentTypeError, CompileError, FuncgradError, FuncgradWarning, NoDerivativeError
from funcgrad.ops.registry import definition, lookup
from funcgrad.testing import numerical_vjp
from tests.support import tagged_line

JITS = ["auto", "kernels", "whole", False]
JIT_IDS = ["auto", "python", "njit", "nojit"]
HERE = os.path.abspath(__file__)
PKG = os.path.dirname(os.path.abspath(funcgrad.__file__))
rng = np.random.default_rng(14)


def _line(tag):
    return tagged_line(HERE, tag)


def _has_rule(fn):
    p = lookup(fn)
    return p is not None and p.template is not None or definition(fn) is not None


def _python_only(fn):
    """A rule whose kernels have no nopython version (SciPy's, here): whole-function compiling refuses it."""
    p = lookup(fn)
    return p is not None and p.python_only or (getattr(fn, "__module__", None) or "").startswith("scipy")


def _cd(f, args, argnum):
    """Central differences of a scalar-valued f with respect to args[argnum]."""
    return numerical_vjp(f, args, argnum, 1.0, 1e-6)


def _cd_vjp(f, args, argnum, ct):
    return numerical_vjp(f, args, argnum, ct, 1e-6)


def _assert_refused_here(err, tag, *names):
    """The refusal names the user's file and line, and the names given; nothing internal shows."""
    msg = str(err)
    assert err.filename == HERE, msg
    assert err.lineno == _line(tag), msg
    assert f"{HERE}:{_line(tag)}" in msg
    for n in names:
        assert n in msg, msg
    for internal in ("_ext", "_target", " K.", "funcgrad/transform", "normalize", "_t1", "<funcgrad"):
        assert internal not in msg, msg
    _assert_trimmed(err)


def _assert_trimmed(err):
    """Only the API's own frames (its entry and re-raise) stand between the user's call and the error."""
    frames = traceback.extract_tb(err.__traceback__)
    inside = [f for f in frames if os.path.abspath(f.filename).startswith(PKG)]
    assert all(f.filename.endswith(os.path.join("funcgrad", "api.py")) for f in inside) and len(inside) <= 2, \
        [f"{f.filename}:{f.lineno}" for f in inside]
    assert frames[0].filename == HERE


# ----------------------------------------------------------------------------------------------------
# 1. NumPy and SciPy functions, ufuncs, partials, callable objects, custom_vjp functions, handed directly

UNARY = [np.sin, np.exp, np.tanh, np.log, np.sqrt, np.log1p, math.sin, math.exp]


@pytest.mark.parametrize("jit", JITS, ids=JIT_IDS)
@pytest.mark.parametrize("fn", UNARY, ids=lambda f: f"{type(f).__name__}-{f.__name__}")
def test_grad_of_a_library_function_handed_directly(fn, jit):
    x = 0.7
    v, g = funcgrad.value_and_grad(fn, jit=jit)(x)
    assert v == pytest.approx(fn(x), rel=1e-14)
    assert isinstance(g, float)
    assert g == pytest.approx(_cd(fn, (x,), 0), rel=1e-7)
    assert funcgrad.grad(fn, jit=jit)(x) == g


@pytest.mark.parametrize("jit", JITS, ids=JIT_IDS)
def test_vjp_and_grad_of_array_functions_and_binary_ufuncs(jit):
    x = rng.normal(size=(3, 2))
    out, vjp_fn = funcgrad.vjp(np.tanh, x, jit=jit)
    np.testing.assert_allclose(out, np.tanh(x), rtol=1e-14)
    ct = rng.normal(size=x.shape)
    (cx,) = vjp_fn(ct)
    np.testing.assert_allclose(cx, _cd_vjp(np.tanh, (x,), 0, ct), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(funcgrad.grad(np.sum, jit=jit)(x), np.ones_like(x))
    gm = funcgrad.grad(np.multiply, argnums=(0, 1), jit=jit)(2.0, 3.0)
    assert gm == pytest.approx((3.0, 2.0))
    gp = funcgrad.grad(np.power, argnums=(0, 1), jit=jit)(1.5, 2.5)
    assert gp[0] == pytest.approx(_cd(np.power, (1.5, 2.5), 0), rel=1e-7)
    assert gp[1] == pytest.approx(_cd(np.power, (1.5, 2.5), 1), rel=1e-7)
    gmax = funcgrad.grad(max, argnums=(0, 1), jit=jit)(3.0, 2.0)   # a builtin with no signature
    assert gmax == (1.0, 0.0)
    assert funcgrad.jit(np.sin)(0.3) == pytest.approx(math.sin(0.3), rel=1e-15)


@pytest.mark.parametrize("jit", JITS, ids=JIT_IDS)
@pytest.mark.parametrize("fn,name", [(np.linalg.det, "numpy.linalg.det"),
                                     (scipy.special.gammaln, "scipy.special.gammaln"),
                                     (scipy.special.multigammaln, "scipy.special.multigammaln"),
                                     (scipy.special.logsumexp, "scipy.special.logsumexp"),
                                     (scipy.linalg.expm, "scipy.linalg.expm")],
                         ids=["det", "gammaln", "multigammaln", "logsumexp", "expm"])
def test_a_library_function_handed_directly_is_differentiated_by_its_rule_or_refused_at_the_call(fn, name, jit):
    A = np.array([[2.0, 0.3], [0.1, 1.5]])
    args = {"numpy.linalg.det": (A,), "scipy.special.gammaln": (3.5,), "scipy.special.multigammaln": (3.5, 2),
            "scipy.special.logsumexp": (A[0],), "scipy.linalg.expm": (A,)}[name]
    if _has_rule(fn) and jit == "whole" and _python_only(fn):
        with pytest.raises(CompileError) as ei:
            funcgrad.vjp(fn, *args, argnums=0, jit=jit)  # LINE: direct-python-only
        _assert_refused_here(ei.value, "direct-python-only", "nopython")
        return
    if _has_rule(fn):  # a rule: the value and gradient must be right
        out, vjp_fn = funcgrad.vjp(fn, *args, argnums=0, jit=jit)
        ct = np.ones_like(out)
        np.testing.assert_allclose(vjp_fn(ct)[0], _cd_vjp(fn, args, 0, ct), rtol=1e-6, atol=1e-9)
        return
    with pytest.raises(NoDerivativeError) as ei:
        funcgrad.vjp(fn, *args, argnums=0, jit=jit)  # LINE: direct-library
    _assert_refused_here(ei.value, "direct-library", name, "custom_vjp")   # not a line of the library's source


def _scaled_sin(a, b):
    return np.sin(a) * b


class _Affine:
    def __init__(self, w):
        self.w = w

    def __call__(self, x):
        return np.sum(np.tanh(x * self.w))


@pytest.mark.parametrize("jit", JITS, ids=JIT_IDS)
def test_partials_and_callable_objects(jit):
    g = funcgrad.grad(functools.partial(_scaled_sin, b=2.0), jit=jit)(0.4)
    assert g == pytest.approx(2.0 * math.cos(0.4), rel=1e-14)
    g = funcgrad.grad(functools.partial(_scaled_sin, 0.4), jit=jit)(3.0)      # the free argument is b
    assert g == pytest.approx(math.sin(0.4), rel=1e-14)
    assert funcgrad.grad(functools.partial(np.multiply, 3.0), jit=jit)(0.3) == pytest.approx(3.0)
    x = rng.normal(size=4)
    f = _Affine(0.7)
    v, g = funcgrad.value_and_grad(f, jit=jit)(x)
    assert v == pytest.approx(f(x), rel=1e-14)
    np.testing.assert_allclose(g, _cd(f, (x,), 0), rtol=1e-6, atol=1e-9)
    f.w = 1.3   # an attribute read at every call
    np.testing.assert_allclose(funcgrad.grad(f, jit=jit)(x), _cd(f, (x,), 0), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("jit", JITS, ids=JIT_IDS)
def test_a_library_callable_object_is_called_not_read(jit):
    vsin = np.vectorize(math.sin)   # its __call__ is NumPy's Python: never read
    with pytest.raises(NoDerivativeError) as ei:
        funcgrad.grad(vsin, jit=jit)(0.3)  # LINE: vectorize
    _assert_refused_here(ei.value, "vectorize", "numpy.vectorize object", "custom_vjp")


@funcgrad.custom_vjp
def clip_identity(x):
    return x


clip_identity.defvjp(lambda x: (x, None), lambda res, g: (np.clip(g, -1.0, 1.0),))


@pytest.mark.parametrize("jit", JITS, ids=JIT_IDS)
def test_custom_vjp_function_and_jit_function_handed_directly(jit):
    x = np.ones(3)
    if jit == "whole":  # its Python fun, fwd and bwd cannot run inside whole-function compiled code
        with pytest.raises(CompileError) as ei:
            funcgrad.vjp(clip_identity, x, jit=jit)  # LINE: direct-custom-whole
        _assert_refused_here(ei.value, "direct-custom-whole", "custom_vjp function 'clip_identity'")
    else:
        out, vjp_fn = funcgrad.vjp(clip_identity, x, jit=jit)     # its rule, not its body's derivative
        np.testing.assert_allclose(out, x)
        np.testing.assert_allclose(vjp_fn(10.0 * x)[0], np.ones(3))
    jf = funcgrad.jit(_scaled_sin)
    g = funcgrad.grad(jf, argnums=(0, 1), jit=jit)(0.4, 2.0)   # grad(jit(f)) is grad(f)
    assert g == pytest.approx((2.0 * math.cos(0.4), math.sin(0.4)), rel=1e-14)
    g = funcgrad.grad(lambda a: jf(a, 2.0) * a, jit=jit)(0.4)   # a jit(f) called inside is f
    assert g == pytest.approx(2.0 * math.sin(0.4) + 0.8 * math.cos(0.4), rel=1e-14)


def test_a_gradient_function_is_differentiated_again_or_refused():
    assert funcgrad.grad(funcgrad.grad(np.sin))(0.3) == pytest.approx(-math.sin(0.3), rel=1e-12)
    with pytest.raises(TypeError, match="returned by funcgrad.grad"):
        funcgrad.vjp(funcgrad.grad(np.sin), 0.3)


# ----------------------------------------------------------------------------------------------------
# 2. int and bool arguments

def _int_uses(x, n):
    s = 0.0
    for i in range(n):
        s = s + np.sum(np.sin(x) * i)
    return s + np.sum(x[:n] ** 2) + np.sum(x.reshape(n, -1)[0]) + np.sum(np.zeros(n))


def _axis(x, k, keep):
    return np.sum(np.sum(x ** 2, axis=k, keepdims=keep) ** 2)


def _flag(x, flag, p):
    if flag:
        return np.sum(x * p["w"]) + p["n"]
    return np.sum(x ** 3)


@pytest.mark.parametrize("jit", JITS, ids=JIT_IDS)
def test_int_arguments_are_runtime_values_in_loops_slices_and_shapes(jit):
    x = rng.normal(size=6)
    g = funcgrad.value_and_grad(_int_uses, jit=jit)
    for n in (2, 3):
        v, gx = g(x, n)
        assert v == pytest.approx(_int_uses(x, n), rel=1e-13)
        np.testing.assert_allclose(gx, _cd(_int_uses, (x, n), 0), rtol=1e-6, atol=1e-8)
    assert g.specializations == 1   # a new n reuses the compiled code


@pytest.mark.parametrize("jit", JITS, ids=JIT_IDS)
def test_int_and_bool_arguments_used_as_constants_specialize(jit):
    x = rng.normal(size=(2, 3))
    g = funcgrad.value_and_grad(_axis, jit=jit)
    for k, keep in ((0, False), (1, True), (1, False)):
        v, gx = g(x, k, keep)
        assert v == pytest.approx(_axis(x, k, keep), rel=1e-13)
        np.testing.assert_allclose(gx, _cd(_axis, (x, k, keep), 0), rtol=1e-6, atol=1e-8)
    assert g.specializations == 3
    f = funcgrad.value_and_grad(_flag, jit=jit)
    p = {"w": 2.0, "n": 3}
    for flag in (True, False, np.True_):
        v, gx = f(x, flag, p)
        assert v == pytest.approx(_flag(x, flag, p), rel=1e-13)
        np.testing.assert_allclose(gx, _cd(_flag, (x, flag, p), 0), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("jit", JITS, ids=JIT_IDS)
def test_differentiating_an_int_or_bool_is_refused_at_the_call(jit):
    x = rng.normal(size=6)
    with pytest.raises(ArgumentTypeError) as ei:
        funcgrad.grad(_int_uses, argnums=(0, 1), jit=jit)(x, 2)  # LINE: diff-int
    e = ei.value
    assert isinstance(e, FuncgradError) and isinstance(e, TypeError)
    assert "argument 1 (n) is an int" in str(e) and "only floating-point" in str(e)
    frames = traceback.extract_tb(e.__traceback__)
    assert (frames[0].filename, frames[0].lineno) == (HERE, _line("diff-int"))
    _assert_trimmed(e)
    with pytest.raises(ArgumentTypeError, match=r"argument 1 \(flag\) is a bool"):
        funcgrad.grad(_flag, argnums=1, jit=jit)(x, True, {"w": 1.0, "n": 1})
    with pytest.raises(ArgumentTypeError, match=r"argument 2 \(p\) at \['n'\] is an int"):
        funcgrad.grad(_flag, argnums=2, jit=jit)(x, True, {"w": 1.0, "n": 1})
    with pytest.raises(ArgumentTypeError, match=r"array of dtype int64.*astype\(np.float64\)"):
        funcgrad.grad(lambda a: np.sum(a * 2.0), jit=jit)(np.arange(3))


# ----------------------------------------------------------------------------------------------------
# 3. library calls whose arguments are not differentiated just run; 4. with differentiated ones they
#    are refused at the user's line, naming the function

FAKELIB = '''
import numpy as np


def helper(x, scale=1.0):
    """Pure Python of an installed package: funcgrad may call it, never read it."""
    try:
        out = np.asarray(x) * scale
    except TypeError:
        raise ValueError("bad input")
    return out + 1.0


def gather(d):
    with np.errstate(all="ignore"):
        return float(np.sum(d))
'''


lib = None   # the fake installed module, while the fixture holds it


@pytest.fixture(scope="module")
def fakelib(tmp_path_factory):
    """A pure-Python module installed in a site-packages folder (with try, with and raise inside)."""
    global lib
    root = tmp_path_factory.mktemp("env") / "lib" / "site-packages"
    root.mkdir(parents=True)
    (root / "calls_fakelib.py").write_text(FAKELIB)
    sys.path.insert(0, str(root))
    try:
        lib = importlib.import_module("calls_fakelib")
        yield lib
    finally:
        lib = None
        sys.path.remove(str(root))
        sys.modules.pop("calls_fakelib", None)


def _inactive_calls(x, c, n):
    s = np.sum(x * x)
    s = s + math.lgamma(n) + scipy.special.multigammaln(n, 2) + statistics.fmean(c)  # LINE: inactive
    s = s + np.sum(scipy.special.gammaln(c)) + scipy.special.logsumexp(c) + np.linalg.det(np.diag(c))
    s = s + np.sum(scipy.linalg.expm(np.diag(c))) + lib.gather(lib.helper(c, 2.0))
    return s * np.sum(np.sin(x))


def _inactive_calls_in_loop(x, c, n):
    s = np.sum(x)
    for i in range(3):
        s = s * 0.5 + np.sum(np.cos(x)) * scipy.special.gammaln(n + i) + lib.gather(c)  # LINE: opaque-loop
    return s


@pytest.mark.parametrize("jit", JITS, ids=JIT_IDS)
def test_library_calls_without_differentiated_arguments_just_run(fakelib, jit):
    x = rng.normal(size=3)
    c = np.array([0.5, 1.5, 2.5])
    n = 3.5
    f = funcgrad.value_and_grad(_inactive_calls, jit=jit)
    if jit == "whole":   # whole-function Numba cannot call SciPy's Python: refused at the first such call
        with pytest.raises(CompileError) as ei:
            f(x, c, n)
        _assert_refused_here(ei.value, "inactive", "scipy.special.multigammaln", 'jit="auto"')
        return
    v, g = f(x, c, n)
    assert v == pytest.approx(_inactive_calls(x, c, n), rel=1e-13)
    np.testing.assert_allclose(g, _cd(_inactive_calls, (x, c, n), 0), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("jit", JITS, ids=JIT_IDS)
def test_library_calls_in_loops_choose_python_or_are_refused_by_whole(fakelib, jit):
    x = rng.normal(size=3)
    c = np.array([0.5, 1.5, 2.5])
    f = funcgrad.value_and_grad(_inactive_calls_in_loop, jit=jit)
    if jit == "whole":
        with pytest.raises(CompileError) as ei:
            f(x, c, 2.5)
        _assert_refused_here(ei.value, "opaque-loop", "scipy.special.gammaln", 'jit="auto"')
        return
    with warnings.catch_warnings():
        warnings.simplefilter("error", FuncgradWarning)   # auto decides up front: no failed compile, no warning
        v, g = f(x, c, 2.5)
    assert v == pytest.approx(_inactive_calls_in_loop(x, c, 2.5), rel=1e-13)
    np.testing.assert_allclose(g, _cd(_inactive_calls_in_loop, (x, c, 2.5), 0), rtol=1e-6, atol=1e-8)
    if jit == "auto":
        assert list(f.cache.values())[0].mode == "python"


def _math_in_loop(x, n):
    s = x
    for i in range(4):
        s = s * x + math.lgamma(n + i) * 1e-2 + np.sum(np.zeros(2))
    return s


def test_calls_numba_can_compile_keep_auto_whole():
    g = funcgrad.value_and_grad(_math_in_loop)
    v, gx = g(0.9, 2.5)
    assert list(g.cache.values())[0].mode == "njit"    # math.lgamma and np.zeros compile: no reason to leave njit
    assert v == pytest.approx(_math_in_loop(0.9, 2.5), rel=1e-13)
    assert gx == pytest.approx(_cd(_math_in_loop, (0.9, 2.5), 0), rel=1e-7)


def _active_lgamma(x):
    return math.lgamma(x) * 2.0  # LINE: active-lgamma


def _active_multigammaln(x):
    return scipy.special.multigammaln(x, 2) + x  # LINE: active-multigammaln


def _active_gammaln_in_loop(x):
    s = 0.0
    for i in range(3):
        s = s + np.sum(scipy.special.gammaln(x + i))  # LINE: active-gammaln
    return s


def _active_fakelib(x):
    y = np.sin(x)
    return np.sum(lib.helper(y))  # LINE: active-fakelib


@pytest.mark.parametrize("jit", JITS, ids=JIT_IDS)
@pytest.mark.parametrize("case", ["active-lgamma", "active-multigammaln", "active-gammaln"])
def test_differentiated_argument_into_a_library_function_is_right_or_refused_at_the_line(case, jit):
    fn, target, name, x = {
        "active-lgamma": (_active_lgamma, math.lgamma, "math.lgamma", 3.5),
        "active-multigammaln": (_active_multigammaln, scipy.special.multigammaln, "scipy.special.multigammaln", 3.5),
        "active-gammaln": (_active_gammaln_in_loop, scipy.special.gammaln, "scipy.special.gammaln",
                           np.array([1.5, 2.5])),
    }[case]
    if _has_rule(target) and jit == "whole" and _python_only(target):
        with pytest.raises(CompileError) as ei:
            funcgrad.grad(fn, jit=jit)(x)
        _assert_refused_here(ei.value, case, "nopython")
        return
    if _has_rule(target):   # a rule: then it must be right
        np.testing.assert_allclose(funcgrad.grad(fn, jit=jit)(x), _cd(fn, (x,), 0), rtol=1e-6)
        return
    with pytest.raises(NoDerivativeError) as ei:
        funcgrad.grad(fn, jit=jit)(x)
    _assert_refused_here(ei.value, case, name, "custom_vjp")


@pytest.mark.parametrize("jit", JITS, ids=JIT_IDS)
def test_installed_python_library_is_never_read(fakelib, jit):
    with pytest.raises(NoDerivativeError) as ei:
        funcgrad.grad(_active_fakelib, jit=jit)(np.ones(2))
    _assert_refused_here(ei.value, "active-fakelib", "calls_fakelib.helper", "custom_vjp")
    assert "try" not in str(ei.value) and "raise" not in str(ei.value)


# ----------------------------------------------------------------------------------------------------
# custom_vjp gives a library function a rule; 5. custom_vjp functions inside loops

lgamma = funcgrad.custom_vjp(math.lgamma)
lgamma.defvjp(lambda x: (math.lgamma(x), x), lambda x, g: (g * scipy.special.digamma(x),))

softplus = funcgrad.custom_vjp(lambda x: np.log1p(np.exp(x)))
softplus.defvjp(lambda x: (np.log1p(np.exp(x)), x), lambda x, g: (g / (1.0 + np.exp(-x)),))


def _custom_calls(x, w):
    return lgamma(x * 2.0) + np.sum(softplus(w * x))  # LINE: custom-calls


def _custom_in_loop(x, w, n):
    s = 0.0
    h = w
    for i in range(n):
        h = np.tanh(h * x) + softplus(h) * 0.1  # LINE: custom-loop
        s = s + lgamma(x + i) * 0.01
    return s + np.sum(h)


def _clip_in_loop(x):
    s = 0.0
    for i in range(3):
        s = s + np.sum(clip_identity(x) * 10.0)
    return s


@pytest.mark.parametrize("jit", JITS, ids=JIT_IDS)
def test_custom_vjp_gives_a_library_function_a_rule(jit):
    w = rng.normal(size=3)
    if jit == "whole":
        with pytest.raises(CompileError) as ei:
            funcgrad.value_and_grad(_custom_calls, argnums=(0, 1), jit=jit)(1.7, w)
        _assert_refused_here(ei.value, "custom-calls", "custom_vjp function 'lgamma'", 'jit="auto"')
        return
    v, (gx, gw) = funcgrad.value_and_grad(_custom_calls, argnums=(0, 1), jit=jit)(1.7, w)
    assert v == pytest.approx(_custom_calls(1.7, w), rel=1e-13)
    assert gx == pytest.approx(_cd(_custom_calls, (1.7, w), 0), rel=1e-7)
    np.testing.assert_allclose(gw, _cd(_custom_calls, (1.7, w), 1), rtol=1e-6)
    assert funcgrad.grad(lgamma, jit=jit)(2.5) == pytest.approx(scipy.special.digamma(2.5), rel=1e-14)


@pytest.mark.parametrize("jit", JITS, ids=JIT_IDS)
def test_custom_vjp_inside_loops_runs_as_python_or_is_refused_by_whole(jit):
    w = rng.normal(size=3)
    f = funcgrad.value_and_grad(_custom_in_loop, argnums=(0, 1), jit=jit)
    if jit == "whole":
        with pytest.raises(CompileError) as ei:
            f(0.8, w, 4)
        _assert_refused_here(ei.value, "custom-loop", "custom_vjp function", 'jit="auto"')
        return
    with warnings.catch_warnings():
        warnings.simplefilter("error", FuncgradWarning)
        v, (gx, gw) = f(0.8, w, 4)
    assert v == pytest.approx(_custom_in_loop(0.8, w, 4), rel=1e-13)
    assert gx == pytest.approx(_cd(_custom_in_loop, (0.8, w, 4), 0), rel=1e-6)
    np.testing.assert_allclose(gw, _cd(_custom_in_loop, (0.8, w, 4), 1), rtol=1e-6)
    np.testing.assert_allclose(funcgrad.grad(_clip_in_loop, jit=jit)(np.ones(2)), [3.0, 3.0])  # the rule is used
    if jit == "auto":
        assert list(f.cache.values())[0].mode == "python"


def _builds_an_object(x):
    d = collections.OrderedDict()  # LINE: object-inside
    d["a"] = x
    return np.sum(d["a"])


def _numpy_scalar_class(x, n):
    return np.sum(x * np.float64(n)) + float(np.int64(n))


@pytest.mark.parametrize("jit", JITS, ids=JIT_IDS)
def test_objects_built_inside_are_refused_numpy_scalars_are_not(jit):
    with pytest.raises(funcgrad.UnsupportedSyntaxError) as ei:
        funcgrad.grad(_builds_an_object, jit=jit)(np.ones(2))
    _assert_refused_here(ei.value, "object-inside", "collections.OrderedDict")
    x = rng.normal(size=3)
    v, g = funcgrad.value_and_grad(_numpy_scalar_class, jit=jit)(x, 3)
    assert v == pytest.approx(_numpy_scalar_class(x, 3), rel=1e-14)
    np.testing.assert_allclose(g, np.full(3, 3.0))
