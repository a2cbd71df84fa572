"""funcgrad's transforms written inside a function funcgrad differentiates: made while transforming where their
options are known, refused at the user's line (never inside funcgrad's own source) where they are not."""
import numpy as np
import pytest

import funcgrad
from funcgrad import grad
from funcgrad.testing import numerical_vjp

X = np.array([0.3, -0.5, 1.1])


def f2(x, y):
    return np.sum(np.sin(x) * y ** 2)


def _check(fn, args, **kw):
    got = grad(fn, **kw)(*args)
    want = numerical_vjp(fn, args, 0, 1.0, 1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("kw", [dict(mode="auto"), dict(mode="python")], ids=["auto", "python"])
def test_grad_with_an_argnums_tuple_inside(kw):
    # argnums=(0, 1) is a container of constants: the transform is made while transforming (it inlined
    # funcgrad's own grad and refused at a line of funcgrad/api.py)
    def outer(x, y):
        gx, gy = grad(f2, argnums=(0, 1))(x, y)
        return np.sum(gx * x) + gy * y

    _check(outer, (X, 1.3), **kw)


@pytest.mark.parametrize("maker", ["jacobian", "elementwise_grad", "jacfwd", "jit"])
def test_transforms_of_a_local_closure_inside(maker):
    # jacobian and elementwise_grad spell it argnum, jit has none: a local lambda over the outer function's
    # values (closure-converted, its captured values first) failed with "got an unexpected keyword argument"
    make = getattr(funcgrad, maker)

    def outer(x, k):
        inner = make(lambda x: np.sin(x) * k)(x)
        return np.sum(inner * x)

    _check(outer, (X, 1.5))


@pytest.mark.parametrize("case", ["argnums", "mode", "has_aux"])
def test_transforms_inside_with_options_known_only_at_run_time_are_refused(case):
    def by_argnums(x, k):
        return np.sum(grad(f2, argnums=k)(x, 2.0) * x)

    def by_mode(x, k):
        return np.sum(grad(f2, mode="python" if k > 0 else "njit")(x, 2.0))

    def by_aux(x, k):
        return funcgrad.value_and_grad(lambda x: (np.sum(np.sin(x)), 1.0), has_aux=True)(x)[0][0] * k

    fn, want = {"argnums": (by_argnums, "known while transforming"), "mode": (by_mode, "known while transforming"),
                "has_aux": (by_aux, "has_aux=True")}[case]
    with pytest.raises(funcgrad.UnsupportedSyntaxError, match=want) as err:
        grad(fn)(X, 1)
    assert err.value.filename == __file__, str(err.value)
    assert "funcgrad/" not in str(err.value) and "_lambda" not in str(err.value), str(err.value)


def _cubed(a, s=2.0, *, shift=0.5):
    return a ** 3 * s + shift * a


@pytest.mark.parametrize("kw", [dict(mode="auto"), dict(jit=False)], ids=["auto", "nojit"])
def test_jvp_and_vjp_inside_of_a_function_with_defaults(kw):
    # funcgrad.jvp and funcgrad.vjp called inside (and so jacfwd of jacfwd, grad of jacfwd) of a function with
    # default and keyword-only parameters: the inlined transform left them unbound ("name 's' is not defined")
    def by_jvp(a):
        return funcgrad.jvp(_cubed, (a,), (1.0,))[1]

    def by_vjp(a):
        return funcgrad.vjp(_cubed, a)[1](1.0)[0]

    want = 6.0 * 3.0 * 2.0   # d2/da2 (2 a^3 + a/2) at 3
    assert grad(by_jvp, **kw)(3.0) == pytest.approx(want, rel=1e-12)
    assert grad(by_vjp, **kw)(3.0) == pytest.approx(want, rel=1e-12)
    assert funcgrad.jacfwd(funcgrad.jacfwd(_cubed, **kw), **kw)(3.0) == pytest.approx(want, rel=1e-12)
    assert grad(funcgrad.jacfwd(_cubed, **kw), **kw)(3.0) == pytest.approx(want, rel=1e-12)
    _check(by_jvp, (3.0,), **kw)


def _fib_like(v, d):
    if d <= 1:
        return v
    return _fib_like(v, d - 1) * 0.5 + _fib_like(v * 0.9, d - 2)


def _recursion_depth_from_an_int_argument(x, a, n):
    return _fib_like(x, n) + np.sum(a) * _fib_like(a[0], n - 1)


@pytest.mark.parametrize("kw", [dict(mode="auto"), dict(mode="njit"), dict(jit=False)], ids=["auto", "njit", "nojit"])
def test_recursion_whose_depth_is_an_int_argument_specializes_on_it(kw):
    """The depth of a recursion known only from an int argument (gen_lang: refused as nesting more than 50
    deep): the argument becomes a specialization key, as an int used as an axis does."""
    from tests.support import assert_value_and_gradient
    g = funcgrad.value_and_grad(_recursion_depth_from_an_int_argument, argnums=(0, 1), **kw)
    for n in (4, 6):
        assert_value_and_gradient(_recursion_depth_from_an_int_argument, (0.7, np.array([1.0, 2.0]), n), (0, 1), **kw)
        v, _ = g(0.7, np.array([1.0, 2.0]), n)
        np.testing.assert_allclose(v, _recursion_depth_from_an_int_argument(0.7, np.array([1.0, 2.0]), n))


def _nonlocal_accumulator(x, a, n):
    t = 0.0
    cnt = 0

    def add(v):
        nonlocal t, cnt
        t += v * v
        cnt += 1

    add(x)
    for v in a:          # a loop over an argument's elements
        add(v * x)
    for i in range(n):   # a loop that runs at run time
        add(x * i)

    def outer(y):
        acc = y

        def inner(z):
            nonlocal acc
            acc = acc * z
        inner(2.0)
        inner(y)
        return acc
    return t / cnt + outer(x)


@pytest.mark.parametrize("kw", [dict(mode="auto"), dict(mode="njit"), dict(jit=False)], ids=["auto", "njit", "nojit"])
def test_nonlocal_in_a_function_defined_inside(kw):
    """``nonlocal`` in a def nested in the differentiated function rebinds the enclosing function's variable
    (gen_lang: 8 of 200 programs refused it), inside loops that run at run time too."""
    from tests.support import assert_value_and_gradient
    assert_value_and_gradient(_nonlocal_accumulator, (0.7, np.array([1.0, -2.0, 0.5]), 3), (0, 1), **kw)


def _activation_chosen_by_an_int(x, a, *, n=2):
    act = np.tanh if n > 2 else np.sin
    return np.sum(act(a * x))


def _activation_chosen_by_a_value(x, a):
    act = np.tanh if x > 0.5 else np.sin
    return np.sum(act(a * x))


@pytest.mark.parametrize("kw", [dict(mode="auto"), dict(jit=False)], ids=["auto", "nojit"])
def test_a_function_chosen_by_an_int_argument_specializes_on_it(kw):
    """``act = np.tanh if n > 2 else np.sin`` with n an int argument (gen_lang: refused as 'only functions known
    when the function is transformed can be called'): n becomes a specialization key. Chosen by a float, the
    choice is refused in the user's words."""
    args = (0.7, np.array([1.0, 2.0]))
    for n in (2, 3):
        v, g = funcgrad.value_and_grad(_activation_chosen_by_an_int, argnums=(0, 1), **kw)(*args, n=n)
        np.testing.assert_allclose(v, _activation_chosen_by_an_int(*args, n=n), rtol=1e-12)
        for k in (0, 1):
            num = numerical_vjp(lambda x, a: _activation_chosen_by_an_int(x, a, n=n), args, k, 1.0, 1e-6)
            np.testing.assert_allclose(g[k], num, rtol=1e-5, atol=1e-7)
    with pytest.raises(funcgrad.UnsupportedSyntaxError, match="choosing a function") as info:
        funcgrad.grad(_activation_chosen_by_a_value, **kw)(0.7, np.array([1.0, 2.0]))
    assert "test_nested_calls.py" in str(info.value)
