"""Regression tests for wrong values, wrong gradients and internal crashes (issue 12).

Every program runs plainly (the value oracle) and through funcgrad in every mode:
``auto``, ``python``, ``njit`` and ``jit=False``; values must match Python and
gradients central differences in float64.
"""
import gc
import math
import operator
import warnings

import numpy as np
import scipy.integrate
import pytest

import funcgrad
from funcgrad.testing import numerical_vjp
from tests.fixtures import regressions as R
from tests.support import assert_value_and_gradient

MODES = [dict(mode="auto"), dict(mode="python"), dict(mode="njit"), dict(jit=False)]
MODE_IDS = ["auto", "python", "njit", "nojit"]
rng = np.random.default_rng(0)

CASES = [
    (R.fib_tuple, (1.0, 2.0, 5), (0, 1)),
    (R.swap_in_branch, (0.3, 0.8, 5), (0, 1)),
    (R.prev_and_next, (0.4, 6), 0),
    (R.chained_targets, (0.7,), 0),
    (R.nested_unpack, (rng.normal(size=3), rng.normal(size=3)), (0, 1)),
    (R.repeated_gather, (rng.normal(size=5),), 0),
    (R.repeated_rows, (rng.normal(size=(4, 3)),), 0),
    (R.repeated_pairs, (rng.normal(size=(3, 2)),), 0),
    (R.mask_gather, (np.array([0.5, -1.0, 2.0, 0.25, -0.3]),), 0),
    (R.take_repeats, (rng.normal(size=4),), 0),
    (R.repeated_write, (rng.normal(size=5), rng.normal(size=3)), (0, 1)),
    (R.gather_in_loop, (rng.normal(size=3), 3), 0),
    (R.max_in_loop, (rng.normal(size=3), rng.normal(size=(4, 2))), (0, 1)),
    (R.reductions_in_loop, (rng.normal(size=3), rng.normal(size=(3, 2))), (0, 1)),
    (R.stack_scalars, (0.3, 0.7), (0, 1)),
    (R.stack_scalars_in_loop, (0.3, 0.7, 3), (0, 1)),
    (R.early_return, (1.1, 5), 0),
    (R.early_return, (0.3, 5), 0),
    (R.early_return_nested, (0.5, 4), 0),
    (R.early_return_nested, (0.01, 2), 0),
    (R.search_array, (np.array([0.1, 0.7, 0.9]),), 0),
    (R.search_array, (np.array([0.1, 0.2]),), 0),
    (R.early_return_in_helper, (1.5,), 0),
    (R.first_above_one, (np.array([0.5, 1.5, 3.0]),), 0),
    (R.first_above_one, (np.array([0.5, 0.25]),), 0),
    (R.returns_container_from_loop, (np.array([0.1, 0.7, 0.2]),), 0),
    (R.returns_container_from_loop, (np.array([0.1, 0.3, 0.2]),), 0),
    (R.container_carried_by_loop, (np.array([0.3, 0.4]), 3), 0),
    (R.list_index_with_repeats, (0.7, np.array([0.3, -0.2, 0.5]), 2), (0, 1)),
]
IDS = [f"{i:02d}-{f.__name__}" for i, (f, _, _) in enumerate(CASES)]


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_value_and_gradient_in_every_mode(case, kw):
    f, args, argnums = case
    assert_value_and_gradient(f, args, argnums, **kw)


def test_tuple_assignment_value_from_the_issue():
    def f(a, b, n):
        for i in range(n):
            a, b = b, a + 0.5 * b
        return a * b
    # lowered as sequential assignments this gave 153.77 instead of Python's 27.91
    for kw in MODES:
        assert funcgrad.value_and_grad(f, **kw)(1.0, 2.0, 5)[0] == pytest.approx(f(1.0, 2.0, 5), rel=1e-14)
    assert f(1.0, 2.0, 5) == pytest.approx(27.90625)


def test_vjp_cache_never_hands_back_another_functions_gradient():
    # closures made in a loop share a code object; a garbage-collected one's id can be reused. The loop
    # runs until that happened once (and its gradient was checked), so the test always exercises the case;
    # how soon CPython's allocator hands an address back varies (12 rounds were not always enough on CI).
    # gc.freeze: each gc.collect() looks only at what the loop made, not at a test worker's whole heap
    gc.freeze()
    try:
        _closures_until_an_id_is_reused()
    finally:
        gc.unfreeze()


def _closures_until_an_id_is_reused():
    seen, reused = set(), False
    for k in range(200):
        fk = (lambda c: (lambda x: np.sum(x * x) * c))(float(k))
        reused = id(fk) in seen
        seen.add(id(fk))
        _, vjp_fn = funcgrad.vjp(fk, np.ones(2))
        assert vjp_fn(1.0)[0][0] == pytest.approx(2.0 * k, rel=1e-14), f"closure {k} got another one's gradient"
        del fk, vjp_fn
        gc.collect()
        if reused:
            break
    assert reused, "no id was reused in 200 closures: the case this test is about did not happen"


def test_generated_source_does_not_depend_on_earlier_builds():
    # break/continue/return-in-loop flags were numbered by a process-wide counter: the second build of
    # the same function read `__brk2`, a different file, so Numba's disk cache missed in every new process
    # that built things in another order
    first = funcgrad.source(funcgrad.grad(R.early_return_nested), 0.7, 3)
    funcgrad.source(funcgrad.grad(R.search_array), np.array([0.2, 1.4, 0.3]))
    again = funcgrad.source(funcgrad.grad(R.early_return_nested), 0.7, 3)
    assert "brk" in first or "rf1" in first
    assert again == first


def _recurrence_written_in_place(x):
    y = np.zeros_like(x)
    for i in range(1, x.shape[0]):
        y[i] = y[i - 1] * 0.5 + np.sin(x[i])
    return np.sum(y ** 2)


def test_in_place_writes_in_a_loop_copy_the_cotangent_once():
    # the adjoint of y[i] = v zeroes d_y[i]; it copied all of d_y first in every reversed iteration,
    # so n writes cost O(n^2) (100k writes: 2.4 s); the copy now happens once, before the loop
    x = np.random.default_rng(3).normal(size=7)
    g = funcgrad.grad(_recurrence_written_in_place)
    src = funcgrad.source(g, x)
    body = src.split("# reversed:")[1].split("return")[0]
    assert "K.copy(d_y)" not in body and "K.copy(d_y)" in src.split("# reversed:")[0]
    for kw in MODES:
        np.testing.assert_allclose(funcgrad.grad(_recurrence_written_in_place, **kw)(x),
                                   numerical_vjp(_recurrence_written_in_place, (x,), 0, 1.0, 1e-6), rtol=1e-6)


def _prints_in_a_loop(x):
    s = 0.0
    for i in range(4):
        print(i, end=" ")      # Numba's print takes no end=: auto falls back to Python, with a warning
        s = s + np.sin(x) * i
    return s


def test_second_order_warnings_name_the_users_line(capsys):
    # the fallback warning of grad(grad(f)) pointed into funcgrad's generated file, at `_ext0_print(...)`
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        v = funcgrad.grad(funcgrad.grad(_prints_in_a_loop))(0.3)
    assert v == pytest.approx(-np.sin(0.3) * 6.0)
    assert caught and all(w.filename == __file__ for w in caught), [(w.filename, str(w.message)) for w in caught]


_FALLS_BACK = """
import numpy as np

def f(x):
    s = 0.0
    for i in range(3):
        print(i, end=" ")
        s = s + np.sin(x) * i
    return s
"""


def test_a_remembered_fallback_names_this_copys_file(tmp_path, capsys):
    # the fallback is remembered beside the content-hashed generated file, shared by every copy of the same
    # source: a second checkout's warning named the first checkout's file
    import importlib.util
    import warnings
    names = []
    for d in ("first", "second"):
        (tmp_path / d).mkdir()
        path = tmp_path / d / "model_falls_back.py"
        path.write_text(_FALLS_BACK)
        spec = importlib.util.spec_from_file_location(f"model_falls_back_{d}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert funcgrad.grad(mod.f)(0.3) == pytest.approx(np.cos(0.3) * 3.0)
        names.append({w.filename for w in caught if issubclass(w.category, funcgrad.FuncgradWarning)})
    assert names == [{str(tmp_path / "first" / "model_falls_back.py")},
                     {str(tmp_path / "second" / "model_falls_back.py")}]


def _size_one_output_reads_broadcast(x):
    m = np.atleast_2d(x) @ np.ones((2, 1))      # (1, 1)
    s = np.sqrt(np.sum(x * x)) * np.ones(1)     # (1,)
    return m[0] - 0.3 * np.tanh(m[0] - s) + s * np.exp(-m[0])   # shape (1,): autograd's bayesian_optimization


def test_size_one_array_output_gets_a_seed_of_its_shape():
    # the first call seeded a scalar; the adjoint of `a + b` with a (1,) operand then crashed inside
    # unbroadcast (IndexError) instead of seeding with the output's shape
    x = np.array([0.2, 0.4])
    want = numerical_vjp(lambda v: _size_one_output_reads_broadcast(v)[0], (x,), 0, 1.0, 1e-6)
    for kw in MODES:
        v, g = funcgrad.value_and_grad(_size_one_output_reads_broadcast, **kw)(x)
        np.testing.assert_allclose(v, _size_one_output_reads_broadcast(x), rtol=1e-12)
        np.testing.assert_allclose(g, want, rtol=1e-6)


def _iterates_a_name_it_rebinds(x):
    a = np.stack([x, x * 2.0, x * 3.0])
    s = 0.0
    for r in a:                       # Python iterates the array `a` held here
        a = a * 10.0
        s = s + np.sum(r)
    for i, (r, q) in enumerate(zip(a, a[::-1])):
        a = np.sin(a)
        s = s + np.sum(r * q) * i
    return s


def test_loop_over_a_name_the_body_rebinds_iterates_the_old_array():
    # found by the fuzz run (program 1078): `for r in a8: a8 = np.concatenate(...)` read a8[i] of the new a8
    x = np.array([0.3, -0.2])
    want = numerical_vjp(_iterates_a_name_it_rebinds, (x,), 0, 1.0, 1e-6)
    for kw in MODES:
        v, g = funcgrad.value_and_grad(_iterates_a_name_it_rebinds, **kw)(x)
        assert v == pytest.approx(_iterates_a_name_it_rebinds(x), rel=1e-13)
        np.testing.assert_allclose(g, want, rtol=1e-6)


def test_rebinding_a_global_function_takes_effect():
    g = funcgrad.grad(_uses_global_act)
    global _ACT
    _ACT = np.sin
    a = g(0.3)
    _ACT = np.cos
    b = g(0.3)
    assert a == pytest.approx(np.cos(0.3)) and b == pytest.approx(-np.sin(0.3))


_ACT = np.sin


def _uses_global_act(x):
    return _ACT(x)


class _Cfg:
    scale = 2.0
    power = 2


def test_changing_an_objects_attribute_takes_effect():
    cfg = _Cfg()

    def f(x):
        return cfg.scale * x ** cfg.power

    g = funcgrad.grad(f)
    assert g(3.0) == pytest.approx(12.0)
    cfg.scale = 5.0
    assert g(3.0) == pytest.approx(30.0)
    cfg.power = 3
    assert g(3.0) == pytest.approx(135.0)


def test_same_source_different_constant_arrays_do_not_share_externals():
    src = "import numpy as np\ndef f(x):\n    return np.sum(x[np.array({idx})] * 1.0)\n"
    import importlib.util
    import os
    import tempfile
    fns = []
    for k, idx in enumerate(([0, 0, 1], [2, 2, 2])):
        d = tempfile.mkdtemp()
        path = os.path.join(d, "same_src.py")
        with open(path, "w") as fh:
            fh.write(src.format(idx=idx))
        spec = importlib.util.spec_from_file_location(f"same_src_{k}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        fns.append(mod.f)
    x = np.arange(3.0)
    g0 = funcgrad.grad(fns[0], mode="python")
    g1 = funcgrad.grad(fns[1], mode="python")
    a = g0(x)
    b = g1(x)
    np.testing.assert_allclose(g0(x), [2.0, 1.0, 0.0])
    np.testing.assert_allclose(b, [0.0, 0.0, 3.0])
    np.testing.assert_allclose(a, [2.0, 1.0, 0.0])


def test_numba_typing_failure_falls_back_in_auto_and_is_refused_in_njit():
    import warnings
    from funcgrad.errors import CompileError, FuncgradWarning
    x, c = np.ones(3), np.arange(3.0)
    with warnings.catch_warnings():   # Numba has no np.pad at all: auto knows before compiling (issue 14)
        warnings.simplefilter("error", FuncgradWarning)
        f = funcgrad.value_and_grad(_pads_inside_loop)
        v, g = f(x, c)
    assert v == pytest.approx(_pads_inside_loop(x, c)) and list(f.cache.values())[0].mode == "python"
    c4 = np.array([3.0, 1.0, 2.0, 1.0])   # Numba has np.unique, not with return_counts: found by compiling
    with pytest.warns(FuncgradWarning, match=r"unique has no nopython implementation"):
        v, g = funcgrad.value_and_grad(_unique_inside_loop)(x, c4)
    assert v == pytest.approx(_unique_inside_loop(x, c4))
    with pytest.raises(CompileError) as ei:
        funcgrad.value_and_grad(_pads_inside_loop, mode="njit")(x, c)
    msg = str(ei.value)
    assert "test_regressions.py:" in msg and "np.lexsort((c,))" in msg and "generated" not in msg
    assert "numba" not in msg.lower().replace("numba cannot", "") and "_ext" not in msg


def _unique_inside_loop(x, c):
    s = 0.0
    u, k = np.unique(c, return_counts=True)
    for i in range(3):
        s = s + np.sum(x * u[i]) * k[i]
    return s


def _pads_inside_loop(x, c):
    s = 0.0
    w = np.lexsort((c,)) * 1.0   # no nopython version of lexsort (np.pad, used before, has one now)
    for i in range(3):
        s = s + np.sum(x * w[i])
    return s


def test_error_while_generated_code_runs_names_the_users_line():
    def f(x, W):
        h = np.tanh(x @ W)
        return np.sum(h)
    with pytest.raises(ValueError) as ei:
        funcgrad.grad(f, mode="python")(np.ones((2, 3)), np.ones((4, 5)))
    notes = "\n".join(getattr(ei.value, "__notes__", []))
    assert "test_regressions.py" in notes and "h = np.tanh(x @ W)" in notes


def test_has_aux_pair_returned_from_branches():
    def f(x):
        if np.sum(x) > 0:
            return np.sum(x ** 2), {"n": np.sum(x)}
        else:
            return np.sum(x ** 3), {"n": -np.sum(x)}
    for x in (np.array([1.0, 2.0]), np.array([-1.0, -2.0])):
        (v, aux), g = funcgrad.value_and_grad(f, has_aux=True)(x)
        assert v == pytest.approx(f(x)[0]) and aux["n"] == pytest.approx(f(x)[1]["n"])
        np.testing.assert_allclose(g, numerical_vjp(lambda y: f(y)[0], (x,), 0, 1.0, 1e-6), rtol=1e-6)


def test_containers_of_different_structure_on_branches_are_refused_in_user_terms():
    def f(x):
        if np.sum(x) > 0:
            out = (x, x)
        else:
            out = (x, x, x)
        return np.sum(out[0])
    with pytest.raises(funcgrad.UnsupportedSyntaxError) as ei:
        funcgrad.grad(f)(np.ones(2))
    msg = str(ei.value)
    assert "'out' is given containers of different structure" in msg and "test_regressions.py:" in msg
    assert "__" not in msg and "_v" not in msg


def _ode_rhs(y, t, params):
    h = y
    for W, b in params:
        h = np.tanh(h @ W + b)
    return h


def _ode_loss(params, y0, t):
    return np.sum(scipy.integrate.odeint(_ode_rhs, y0, t, tuple((params,)), rtol=1e-10, atol=1e-10) ** 2)


def test_odeint_with_a_list_of_layer_pairs_among_its_args():
    # autograd's ode_net passes args=(params,), params a list of (W, b): the reverse pass crashed with
    # AttributeError ('Tuple' object has no attribute 'id') and the adjoint method took np.size of the list
    rs = np.random.RandomState(0)
    params = [(rs.randn(2, 3) * .5, rs.randn(3) * .5), (rs.randn(3, 2) * .5, rs.randn(2) * .5)]
    y0, t = np.array([0.5, -0.3]), np.linspace(0, 1, 4)
    g = funcgrad.grad(_ode_loss, jit="auto")(params, y0, t)
    assert isinstance(g, list) and all(isinstance(p, tuple) and len(p) == 2 for p in g)
    for k in range(2):
        for j in range(2):
            def f(v, k=k, j=j):
                ps = [list(p) for p in params]
                ps[k][j] = v
                return _ode_loss([tuple(p) for p in ps], y0, t)
            want = numerical_vjp(f, (params[k][j],), 0, 1.0, 1e-6)
            np.testing.assert_allclose(g[k][j], want, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("kw", MODES)
def test_reshape_and_ravel_of_a_float(kw):
    # compiled whole, np.ravel(2.0) and np.reshape(b, (-1,)) raised "negative dimensions not allowed"
    for f, want in ((lambda b: np.sum(np.ravel(b) * 2.0), 2.0), (lambda b: np.sum(np.reshape(b, (1, -1)) ** 2), 3.0)):
        v, g = funcgrad.value_and_grad(f, **kw)(1.5)
        assert v == pytest.approx(f(1.5)) and g == pytest.approx(want)
    with pytest.raises(ValueError, match="reshape"):
        funcgrad.grad(lambda b: np.sum(np.reshape(b * 1.0, (3,))), **kw)(2.0)


def _vector_valued(x):
    return np.sin(x) * x


def test_hessian_and_hvp_refuse_a_function_that_is_not_scalar():
    # they seeded the output tangent with 1 and returned the Hessian of the outputs' sum, silently
    x = np.array([0.2, 0.5, 0.9])
    with pytest.raises(TypeError, match=r"one real scalar output; .*_vector_valued returns an array of shape \(3,\)"):
        funcgrad.hessian(_vector_valued)(x)
    with pytest.raises(TypeError, match="hvp needs a function with one real scalar output"):
        funcgrad.hvp(_vector_valued, (x,), (np.ones(3),))
    H = funcgrad.hessian(lambda v: np.sum(_vector_valued(v)))(x)   # its sum is scalar: fine
    np.testing.assert_allclose(H, np.diag(2 * np.cos(x) - x * np.sin(x)), atol=1e-10)


def _rows_of_three(params):
    total = 0.0
    for w, m, s in zip(params[0], params[1], params[2]):   # zip of three runtime arrays
        total = total + np.sum(w * np.tanh(m) * s) + min(w, m, s) + max(w[0] * 2.0, m[0], s[0] * 0.5)
    return total


@pytest.mark.parametrize("kw", MODES[:2] + MODES[3:], ids=["auto", "python", "nojit"])
def test_min_max_of_three_and_hvp_over_zip_of_three(kw):
    """min/max of more than two values fold pairwise (the forward code of a zip over three runtime arrays says
    range(min(a, b, c)); reverse over it, as hvp does, stopped at 'bad arguments to minimum')."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, 4, 1))
    f = lambda x: _rows_of_three(x)   # noqa: E731
    g = funcgrad.grad(f, **kw)(x)
    np.testing.assert_allclose(g, numerical_vjp(f, (x,), 0, 1.0, 1e-6), rtol=1e-5, atol=1e-6)
    v = rng.normal(size=x.shape)
    hv = funcgrad.hvp(f, (x,), (v,), **kw)
    eps = 1e-5
    fd = (funcgrad.grad(f, **kw)(x + eps * v) - funcgrad.grad(f, **kw)(x - eps * v)) / (2 * eps)
    np.testing.assert_allclose(hv, fd, rtol=1e-4, atol=1e-6)


def _sample_diag(mean, log_std, rs):
    return rs.randn(*mean.shape) * np.exp(log_std) + mean     # as autograd's variational_autoencoder writes it


def _splats(x):
    m = np.tanh(x) * 2.0
    z = _sample_diag(m, m * 0.1, np.random.RandomState(1))
    return np.sum(z ** 2) + np.sum(x.reshape(*x.shape[::-1]) * np.arange(6.0).reshape(3, 2))


@pytest.mark.parametrize("kw", MODES[:2] + MODES[3:], ids=["auto", "python", "nojit"])
def test_call_with_a_runtime_shape_unpacked(kw):
    """rs.randn(*mean.shape) and x.reshape(*y.shape): the runtime shape tuple is passed on as it is; unpacking an
    array's rows into a call stays refused at the user's line."""
    x = np.linspace(-1, 1, 6).reshape(2, 3)
    g = funcgrad.grad(_splats, **kw)(x)
    np.testing.assert_allclose(g, numerical_vjp(_splats, (x,), 0, 1.0, 1e-6), rtol=1e-5, atol=1e-6)
    with pytest.raises(funcgrad.errors.UnsupportedSyntaxError, match="unpacking over values only known") as ei:
        funcgrad.grad(lambda x: np.sum(np.maximum(*x)), **kw)(x)
    assert __file__ in str(ei.value)


def _show(ax, field, step):
    if ax:
        ax.imshow(field)
        ax.set_title(f"step {step}")


def _no_return_value(x, n):
    ax = None
    for t in range(3):
        _show(ax, x, t)        # a helper that returns nothing, called for its effect (here none)
        x = np.sin(x) * 1.5
    flag = _show(ax, x, n)
    return np.sum(x ** 2) + (1.0 if flag is None else 0.0)


@pytest.mark.parametrize("kw", MODES, ids=["auto", "python", "njit", "nojit"])
def test_helper_that_returns_nothing_is_none(kw):
    """A helper whose body runs no return statement gives None, as in Python (autograd's wing example calls its
    plotting helper with ax=None from inside the simulation)."""
    x = np.linspace(-1, 1, 4)
    v, g = funcgrad.value_and_grad(_no_return_value, **kw)(x, 2)
    assert v == pytest.approx(_no_return_value(x, 2))
    np.testing.assert_allclose(g, numerical_vjp(lambda x: _no_return_value(x, 2), (x,), 0, 1.0, 1e-6),
                               rtol=1e-5, atol=1e-6)


_NB_DATA = np.array([1.0, 4.0, 2.0, 7.0, 3.0, 0.0, 5.0])


def _nb_loglike(r, p):
    return np.sum(np.log(r + _NB_DATA) * r + _NB_DATA * np.log(p) + r * np.log(1 - p))


def _nb_rprime(r):
    p = np.sum(_NB_DATA) / np.sum(r + _NB_DATA)         # a scalar computed inside, then differentiated at
    w = np.tanh(r * _NB_DATA[:3])                        # an array computed inside
    return funcgrad.grad(_nb_loglike)(r, p) + np.sum(funcgrad.grad(lambda v: np.sum(np.sin(v) * v))(w))


@pytest.mark.parametrize("kw", MODES, ids=["auto", "python", "njit", "nojit"])
def test_grad_inside_at_values_computed_inside(kw):
    """grad(f)(r, p(r)) inside a differentiated function, p(r) computed there (autograd's
    negative_binomial_maxlike): its kind and ndim follow from the primitives that make it."""
    r = 2.0
    d = funcgrad.grad(_nb_rprime, **kw)(r)
    assert d == pytest.approx((_nb_rprime(r + 1e-6) - _nb_rprime(r - 1e-6)) / 2e-6, rel=1e-6)


@funcgrad.custom_vjp
def _lse(x):
    m = np.max(x)
    return m + np.log(np.sum(np.exp(x - m)))


_lse.defvjp(lambda x: (_lse(x), (x, _lse(x))), lambda res, g: (g * np.exp(res[0] - res[1]),))


def test_grad_of_grad_through_a_vjp_only_rule_differentiates_the_rule():
    """Reverse over reverse through a custom_vjp with no JVP rule: it was refused (first inside funcgrad's own
    source, "'raise' is not supported" at funcgrad/custom.py, then at the user's line); the second pass now
    reads the user's fwd and bwd as JAX does, and the result is the second derivative of the same function
    written without a rule."""
    f = lambda x: _lse(np.sin(x))   # noqa: E731
    plain = lambda x: _lse.fun(np.sin(x))   # noqa: E731
    x = np.linspace(-1, 1, 4)
    np.testing.assert_allclose(funcgrad.grad(f)(x), numerical_vjp(f, (x,), 0, 1.0, 1e-6), rtol=1e-6, atol=1e-8)
    inner = lambda x: np.sum(funcgrad.grad(plain)(x) * x)   # noqa: E731
    want = funcgrad.grad(inner)(x)
    np.testing.assert_allclose(want, numerical_vjp(inner, (x,), 0, 1.0, 1e-6), rtol=1e-5, atol=1e-7)
    for kw in ({}, {"mode": "python"}):
        got = funcgrad.grad(lambda x: np.sum(funcgrad.grad(f, **kw)(x) * x), **kw)(x)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


class _Rate:
    def __init__(self, lr):
        self.lr = lr


_CFG1, _CFG2 = _Rate(2.0), _Rate(5.0)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_same_attribute_name_of_two_objects_is_two_captures(kw):
    # ``c1.lr`` and ``c2.lr`` were one captured parameter (keyed by the function and the name 'lr'), read
    # through the first object: value 12 and gradient 6 where 21 and 12 are right
    def f(x):
        return np.sum(x * _CFG1.lr + x * x * _CFG2.lr)
    x = np.array([1.0, 0.5, -2.0])
    v, g = funcgrad.value_and_grad(f, **kw)(x)
    np.testing.assert_allclose(v, f(x))
    np.testing.assert_allclose(g, 2.0 + 2 * 5.0 * x)


_COEFS = [2.0, 3.0]                       # module-level configuration a program changes in place
_SETTINGS = {"scale": 2.0, "power": 2}


class _Model:
    def __init__(self):
        self.widths = [1.0, 2.0]


_MODEL = _Model()


def _by_index(x):
    return _COEFS[0] * x + _COEFS[1] * x * x


def _unpacked(x):
    a, b = _COEFS                          # (refused before: "cannot unpack this value")
    return a * x + b * x * x


def _looped(x):
    s = 0.0
    for c in _COEFS:
        s = s + c * x
    return s


def _from_dict(x):
    return _SETTINGS["scale"] * x ** _SETTINGS["power"]


def _from_attribute(x):
    return _MODEL.widths[0] * x + _MODEL.widths[1] * x * x


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("f", [_by_index, _unpacked, _looped, _from_dict, _from_attribute],
                         ids=lambda f: f.__name__)
def test_a_list_or_dict_changed_in_place_between_calls_rebuilds_the_code(f, kw):
    # the list's contents were fixed into the generated code and only the name's binding was checked:
    # after _COEFS[0] = 5.0 the gradient stayed the old one (11 where 14 is right), in every mode
    g = funcgrad.value_and_grad(f, **kw)
    try:
        for change in (lambda: None, lambda: _COEFS.__setitem__(0, 5.0), lambda: _SETTINGS.update(power=3),
                       lambda: _MODEL.widths.__setitem__(1, -4.0)):
            change()
            v, d = g(1.5)
            assert v == pytest.approx(f(1.5), rel=1e-12)
            assert d == pytest.approx(numerical_vjp(f, (1.5,), 0, 1.0, 1e-6), rel=1e-6)
    finally:
        _COEFS[:] = [2.0, 3.0]
        _SETTINGS.update(scale=2.0, power=2)
        _MODEL.widths[:] = [1.0, 2.0]


_SHAPES = ([2.0], 3.0)


def test_a_list_inside_a_tuple_changed_in_place_rebuilds_the_code():
    def f(x):
        return _SHAPES[0][0] * x * x
    g = funcgrad.grad(f)
    assert g(1.5) == pytest.approx(6.0)
    _SHAPES[0][0] = 4.0
    try:
        assert g(1.5) == pytest.approx(12.0)
    finally:
        _SHAPES[0][0] = 2.0


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_operator_comparisons_are_comparisons(kw):
    # operator.gt(x, 0) was inlined as an unknown builtin ("_operator.gt has no derivative rule"); it is x > 0

    def f(x):
        return np.sum(np.where(operator.gt(x, 0.0), x * x, -x) * operator.ne(x, 1.0))
    x = np.array([-1.0, 0.5, 1.0, 2.0])
    v, g = funcgrad.value_and_grad(f, **kw)(x)
    assert v == pytest.approx(f(x))
    np.testing.assert_allclose(g, [-1.0, 1.0, 0.0, 4.0])


def _number_made_an_array(x):
    s = np.sum(x)   # a number: s[None] and s[..., None] are arrays of one element
    return np.sum(np.sin(s[None]) * 2.0) + np.sum(np.cos(s[..., None]))


@pytest.mark.parametrize("kw", [dict(mode="python"), dict(jit=False)], ids=["python", "nojit"])
def test_gradient_of_a_number_indexed_with_none(kw):
    # the adjoint wrote d_s = 0.0; d_s[None] += g: "'float' object is not subscriptable" (Numba itself does not
    # index a number with None, so njit has no such program)
    x = np.array([0.3, 0.4])
    s = 0.7
    want = 2.0 * np.cos(s) - np.sin(s)
    np.testing.assert_allclose(funcgrad.grad(_number_made_an_array, **kw)(x), [want, want], rtol=1e-12)


_E = np.random.default_rng(5).normal(size=(4, 5))


def _grad_of_sliced_global(x):
    return funcgrad.grad(lambda y: np.sum(np.sin(_E[:, :3] @ y)))(x).sum()


def _grad_of_sliced_global_2(x):
    return np.sum(funcgrad.grad(lambda y: np.sum(np.cos(_E[1:, 2:] * y[None, :3]) ** 2))(x) ** 2)


@pytest.mark.parametrize("f", [_grad_of_sliced_global, _grad_of_sliced_global_2])
@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_gradient_inside_indexing_a_captured_array(f, kw):
    # the inner gradient's code, read back, slices the global _E with bounds it computed: "cannot index this value"
    x = np.random.default_rng(6).normal(size=3)
    fd = np.array([(f(x + 1e-6 * e) - f(x - 1e-6 * e)) / 2e-6 for e in np.eye(3)])
    np.testing.assert_allclose(funcgrad.grad(f, **kw)(x), fd, rtol=1e-6, atol=1e-8)


def test_a_local_functions_cache_never_hands_back_another_programs_lambda():
    # a lambda or nested def is compiled once per definition and the globals it reads, keyed by ids; the
    # definition is a node of a per-build copy of the tree, freed after the build, so another program's lambda
    # could get its address (and with the same globals, np, the same key) and run the first one's body
    import linecache
    # a full collection in a test worker that has run thousands of tests walks all their objects (about a
    # second each time): freeze what exists, so that gc.collect() looks only at what this loop made
    gc.freeze()
    try:
        _run_forty_local_function_programs(linecache)
    finally:
        gc.unfreeze()


def _run_forty_local_function_programs(linecache):
    for k in range(40):
        src = ("import numpy as np\nimport funcgrad\n\ndef f(x):\n"
               f"    g = lambda t: np.sum(t * {k}.0 + np.sin(t))\n    return np.sum(funcgrad.grad(g)(x) * x)\n")
        name = f"<test local function cache {k}>"
        linecache.cache[name] = (len(src), None, src.splitlines(True), name)
        ns = {}
        exec(compile(src, name, "exec"), ns)
        x = np.array([0.3, -0.7])
        val, got = funcgrad.value_and_grad(ns["f"])(x)
        assert val == pytest.approx(np.sum((k + np.cos(x)) * x), rel=1e-13), f"program {k} ran another one's lambda"
        np.testing.assert_allclose(got, k + np.cos(x) - x * np.sin(x), rtol=1e-13)
        del ns, got
        gc.collect()


def test_a_function_whose_file_changed_after_import_is_refused_not_misread(tmp_path):
    # funcgrad reads a function's source when it first transforms it; lines inserted above it since the
    # module was imported put another function at its line, whose gradient came back for the one that runs
    from tests.support import import_file, rewrite_file
    path = tmp_path / "edited_module.py"
    path.write_text("import numpy as np\n\n\ndef f(x):\n    return np.sum(x ** 2)\n\n\ndef g(x):\n    return np.sum(x ** 3)\n")
    mod = import_file(path, "edited_module")
    rewrite_file(path, "import numpy as np\n\n\ndef g(x):\n    return np.sum(x ** 3)\n\n\ndef f(x):\n    return np.sum(x ** 2)\n")
    with pytest.raises(funcgrad.UnsupportedSyntaxError, match="changed after it was imported") as e:
        funcgrad.grad(mod.f)(np.ones(2))
    assert "def g" in str(e.value) and "reload the module" in str(e.value)


def _counts_in_a_loop(x, a):
    s = 0.0
    for v in a:
        s = s + np.sum(a > 0) * x + np.mean(a > v) * x * x + np.prod(a > -10) * v * x
    return s


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_a_count_of_a_mask_taped_in_a_loop_is_an_integer(kw):
    # np.sum(a > 0) counts: the kind inference called it a bool (a sum of bools), so the Python modes taped
    # the count 4 in a bool array and read back True: the gradient was 8 instead of 20 (found by gen_lang)
    a = np.array([1.0, 2.0, -3.0, 4.0, 5.0])
    v, g = funcgrad.value_and_grad(_counts_in_a_loop, **kw)(0.7, a)
    assert v == pytest.approx(_counts_in_a_loop(0.7, a), rel=1e-13)
    assert g == pytest.approx(float(numerical_vjp(_counts_in_a_loop, (0.7, a), 0, 1.0, 1e-6)), rel=1e-8)


def _int_then_float_in_branches(x, arrays, n):
    a, B = arrays
    s = 0
    for v1 in B[:, 0]:
        s = s + v1 * 0.1
        if n % 2 == 0:
            s = s + (B[1].sum() - a[0] ** 2)
        else:
            s = s - (a[1] ** 2 * np.sum(a) * 0.3)
    return np.float64(s)


def test_a_two_types_refusal_of_numba_never_names_a_temporary(arrays_kept):
    # (named for Numba: tests/test_backend_seam.py reruns this file on a backend that compiles nothing whole)
    # the adjoint of funcgrad's temporary _t5 is d_t5: the refusal called it "the gradient of 't5'", a name the
    # user never wrote (found by gen_lang); "auto" runs it as Python, right
    args = (0.5, [np.ones(3), np.ones((4, 2))], 3)
    with pytest.raises(funcgrad.CompileError) as e:
        funcgrad.grad(_int_then_float_in_branches, argnums=1, jit="njit")(*args)
    assert "'t" not in str(e.value) and "different types" in str(e.value)
    g = funcgrad.grad(_int_then_float_in_branches, argnums=1)(*args)
    num = numerical_vjp(lambda a, B: _int_then_float_in_branches(0.5, [a, B], 3), (np.ones(3), np.ones((4, 2))), 0,
                        1.0, 1e-6)
    np.testing.assert_allclose(g[0], num, atol=1e-7)


def _abs_of_complex_transpose(x):
    return np.sum(np.abs(np.moveaxis(x, 0, -1).T + 0.5j) ** 2 * np.cbrt(x.T + 2.0).T)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_abs_of_a_complex_transposed_array(kw):
    # csign's compiled kernel made its result with empty_like (F order for a transpose) and reshaped it: a raw
    # NotImplementedError from Numba under njit and auto (found by gen_numpy)
    for dt in (np.float64, np.float32):
        x = np.random.RandomState(3).uniform(-1, 1, (3, 4)).astype(dt)
        g = funcgrad.grad(_abs_of_complex_transpose, **kw)(x)
        tol = 1e-7 if dt == np.float64 else 2e-3
        np.testing.assert_allclose(g, numerical_vjp(_abs_of_complex_transpose, (x.astype(np.float64),), 0, 1.0, 1e-6),
                                   rtol=tol, atol=tol)


def _cumsum_weighted_by_sine(x):
    s = 0.0
    for k in range(2):   # a loop: "auto" compiles it whole
        s = s + np.sum(np.cumsum(x) * np.sin(x) + 0.25 * k * x)
    return s


def test_a_numba_runtime_refusal_falls_back_or_is_refused_at_the_users_line(monkeypatch):
    # Numba's compiled code can refuse an operation only as it runs (a reshape of a non-contiguous array raises
    # NotImplementedError("incompatible shape for array")); "auto" passed it to the user as a raw Numba error.
    # A kernel that does so under njit only stands in for any such gap: "auto" reruns the call as Python (once,
    # warning at the user's line) and "njit" refuses it in the user's terms.
    import warnings
    import numba
    from numba.extending import overload
    from funcgrad.kernels import cpu, cpu_backend
    real = cpu.cumsum_t

    def cumsum_t(g, x, axis):
        return real(g, x, axis)

    @overload(cumsum_t)
    def _nopython(g, x, axis):
        def impl(g, x, axis):
            if x.size > 0:
                raise NotImplementedError("incompatible shape for array")
            return g * 1.0
        return impl

    monkeypatch.setattr(cpu, "cumsum_t", cumsum_t)
    monkeypatch.setattr(cpu_backend.CPUBackend, "compile_whole",
                        lambda self, fn, cache=True: numba.njit(cache=False, pipeline_class=cpu_backend._GeneratedCompiler)(fn))
    x = np.linspace(-1.0, 1.0, 5)
    want = numerical_vjp(_cumsum_weighted_by_sine, (x,), 0, 1.0, 1e-6)
    with pytest.raises(funcgrad.CompileError) as e:
        funcgrad.grad(_cumsum_weighted_by_sine, jit="njit")(x)
    assert "nopython" in str(e.value) and "incompatible shape" in str(e.value)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g = funcgrad.grad(_cumsum_weighted_by_sine, jit="auto")(x)
    np.testing.assert_allclose(g, want, atol=1e-7)
    assert [w.filename for w in caught if issubclass(w.category, funcgrad.FuncgradWarning)] == [__file__]


def _returns_a_constant(x, A):
    for i in range(2):
        x = x * A[0]
    return 0.25


def _returns_constants_in_a_dict(x):
    return {"c": 0.5, "n": 3, "a": np.ones(2), "y": x * 2.0, "s": "label"}


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_jvp_of_a_constant_output_is_zero(kw):
    # an output known when the code was generated came back as its own tangent: jvp of `return 0.25` gave
    # (0.25, 0.25) (found by the fuzz harness's forward-mode check)
    A = np.array([0.5, 0.2])
    v, t = funcgrad.jvp(_returns_a_constant, (0.3, A), (1.0, np.ones(2)), **kw)
    assert (v, t) == (0.25, 0.0)
    x = np.array([0.3, -0.1])
    v, t = funcgrad.jvp(_returns_constants_in_a_dict, (x,), (np.ones(2),), **kw)
    assert v["c"] == 0.5 and v["n"] == 3 and v["s"] == "label"
    assert t["c"] == 0.0 and t["n"] == 0 and t["s"] == "label"
    np.testing.assert_array_equal(t["a"], np.zeros(2))
    np.testing.assert_allclose(t["y"], 2.0 * np.ones(2))


# (found by the fuzz generator, program 200114 of seed 200000)

def _cb_h1(p2):
    for i3 in range(2):
        s4 = np.tanh(p2)
        if math.tanh(np.abs(s4)) > -0.2:
            break
    return p2, ((p2 / (1.5 + 2.0 * 2.0)) / (1.5 + ((p2) ** 2) * ((p2) ** 2)))


def _cb_h5(p6):
    for i7 in range(1):
        s8 = (((-0.7) ** 3 + i7) + i7)
        s8 *= np.tanh(np.abs((p6 if 0.25 < -0.2 else p6)))
        s8, p6 = (np.dot((np.ones((3,)) * s8), (np.ones((3,)) * s8))) ** 2, -1.2
    if (np.mean((np.ones((3, 3, 3)) * p6)) if 0.5 < 0.0 else _cb_h1(2.0)[1]) > 0.0:
        return np.log(1.5 + (np.sqrt(1.5 + 2.0 * 2.0)) * (np.sqrt(1.5 + 2.0 * 2.0)))
    if (p6 if p6 < 0.0 else (p6 if -1.2 < 0.3 else -1.2)) < 0.0:
        return 0.25
    return math.sin(0.25)


def _constant_branch_in_helpers(x, n):
    if n % 2 == 0:
        s9 = 1.5
        s10, s11 = _cb_h1((1.5) ** 3)
        k12 = 0
        while k12 < 1:
            k12 += 1
            s13, s14 = _cb_h1(s10)
            s15, s16 = _cb_h1(math.cos(_cb_h5(0.25)))
            s17 = x
    s18 = np.cos(math.tanh(np.sin(0.5)))
    return x + s18


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_a_helpers_constant_in_a_loop_decides_its_branch_while_transforming(kw):
    # a helper's constant return makes a condition constant: Numba pruned the branch and the tape of a condition
    # inside it was never appended to (njit refused: "a branch whose condition is constant never runs"); the
    # constant now stays known inside the loop, so the branch is decided while transforming, in every mode
    v, g = funcgrad.value_and_grad(_constant_branch_in_helpers, **kw)(0.3, 2)
    assert v == pytest.approx(_constant_branch_in_helpers(0.3, 2), rel=1e-12) and g == pytest.approx(1.0, rel=1e-12)


def _ratio_sum(x, y):
    t = 0.0
    for i in range(x.shape[0]):
        t = t + x[i] / y[i]
    return t


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
def test_a_float_divided_by_zero_is_numpys_inf_in_every_mode(kw):
    # compiled whole, x[i] / y[i] of two float64 elements was Python's ZeroDivisionError (Numba's default error
    # model) where the Python path divides NumPy scalars: inf, with NumPy's warning
    x, y = np.array([1.0, 1.0, -2.0]), np.array([2.0, 0.0, 4.0])
    with np.errstate(divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        v, g = funcgrad.value_and_grad(_ratio_sum, **kw)(x, y)
    assert v == np.inf
    np.testing.assert_array_equal(g, [0.5, np.inf, 0.25])
