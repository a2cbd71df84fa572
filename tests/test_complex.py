"""Complex numbers, in autograd's convention (autograd/numpy/numpy_vjps.py, numpy_vspaces.py).

A cotangent is a covector: ``vjp(f)(g)`` is the derivative of ``Re(sum(g * f(z)))`` given as
``d/dRe(z) - 1j * d/dIm(z)`` (the real derivative for a real input), so ``grad`` of a real function of
complex ``z`` is the conjugate of its steepest-ascent direction and a holomorphic function's VJP
multiplies by its derivative. Everything is checked against central differences in float64 (real and
imaginary parts), in every mode, with autograd as an optional oracle; real code must be unchanged.
"""
import re
import warnings

import numpy as np
import pytest

import funcgrad
from funcgrad.ops.complex import csign, inv_abs, match_complex
from funcgrad.testing import numerical_vjp

MODES = [dict(jit="auto"), dict(jit=False), dict(jit="kernels"), dict(jit="whole")]
IDS = ["auto", "nojit", "kernels", "whole"]
PY_MODES, PY_IDS = MODES[:3], IDS[:3]   # large grids: compiled whole once, on all their functions together

try:
    import autograd
    import autograd.numpy as anp
except ImportError:  # pragma: no cover
    autograd = None

needs_autograd = pytest.mark.skipif(autograd is None, reason="autograd not installed")


def cplx(rng, *shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def _ct(rng, out):
    """A random cotangent in the output's space (complex for complex outputs)."""
    if np.iscomplexobj(out):
        c = cplx(rng, *np.shape(out))
        return complex(c) if np.shape(out) == () else c
    c = rng.standard_normal(np.shape(out))
    return float(c) if np.shape(out) == () else c


def check_vjp(f, args, argnums, mode, seed=0, tol=1e-6):
    """funcgrad's VJP of ``f`` along a random (complex where the output is) cotangent against central
    differences of ``Re(sum(ct * f))`` in the real and imaginary part of every input element."""
    rng = np.random.default_rng(seed)
    out, vjp_fn = funcgrad.vjp(f, *args, argnums=argnums, **mode)
    want_out = f(*args)
    np.testing.assert_allclose(out, want_out, rtol=1e-12, atol=1e-12)
    assert np.iscomplexobj(out) == np.iscomplexobj(want_out)
    ct = _ct(rng, out)
    got = vjp_fn(ct)
    for k, i in enumerate(argnums):
        want = numerical_vjp(f, args, i, ct, 1e-6)
        assert np.iscomplexobj(got[k]) == np.iscomplexobj(args[i]), "a cotangent keeps its input's kind"
        assert type(got[k]) is type(args[i]) or isinstance(args[i], np.ndarray)
        np.testing.assert_allclose(got[k], want, rtol=tol, atol=tol, err_msg=f"argument {i}")


# ----------------------------------------------------------------------------- grad of real functions
@pytest.mark.parametrize("mode", MODES, ids=IDS)
def test_grad_of_abs_squared_is_autograds_conjugate_gradient(mode):
    g = funcgrad.grad(lambda z: np.abs(z) ** 2, **mode)(1 + 2j)
    assert isinstance(g, complex)
    assert abs(g - (2 - 4j)) < 1e-12            # 2 conj(z): d/dRe - 1j d/dIm of |z|^2


@pytest.mark.parametrize("mode", MODES, ids=IDS)
def test_grad_of_complex_intermediate_of_real_input(mode):
    x = np.array([0.3, -0.5, 1.2])
    g = funcgrad.grad(lambda x: np.real(np.sum(np.exp(1j * x) * (2 - 1j))), **mode)(x)
    assert g.dtype == np.float64                 # a real input's gradient is real
    np.testing.assert_allclose(g, np.real(1j * np.exp(1j * x) * (2 - 1j)), rtol=1e-12)
    g = funcgrad.grad(lambda x: np.sum(np.abs(np.exp(1j * x) + x) ** 2), **mode)(x)
    np.testing.assert_allclose(g, numerical_vjp(lambda x: np.sum(np.abs(np.exp(1j * x) + x) ** 2), (x,), 0, 1.0,
                                                1e-6), rtol=1e-6, atol=1e-7)


W = np.array([0.7 - 0.2j, -1.1 + 0.4j, 0.3 + 0.9j])


def f_abs(z):
    return np.sum(np.abs(z) * np.array([1.0, 2.0, -0.5]))


def f_abs_sq(z):
    return np.sum(np.abs(z * W) ** 2)


def f_angle(z):
    return np.sum(np.angle(z) * np.array([1.0, -2.0, 0.5]))


def f_angle_deg(z):
    return np.sum(np.angle(z * W, deg=True))


def f_real_imag(z):
    return np.sum(np.real(z) * np.imag(z * W))


def f_attrs(z):
    return np.sum(z.real ** 2 - 3.0 * z.imag + (z.conj() * W).real)


def f_conj(z):
    return np.real(np.sum(np.conj(z) * W * z))


def f_holo(z):
    return np.real(np.sum(np.exp(z) * np.log(z) + np.sqrt(z) / (1 + z * z) - np.tanh(z) ** 3))


def f_trig(z):
    return np.imag(np.sum(np.sin(z) * np.cos(W * z) + np.tan(0.3 * z) + np.sinh(z) - np.cosh(z)))


def f_power(z):
    return np.abs(np.sum(z ** 2.5 + np.square(z) + np.reciprocal(z) + (z + 0j) ** W))


def f_reduce(z):
    return np.abs(np.prod(z)) + np.real(np.mean(z * W)) + np.imag(np.sum(z[::2]))


def _real_functions():
    return {k[2:]: v for k, v in globals().items() if k.startswith("f_")}


REAL_FUNCTIONS = _real_functions()


@pytest.mark.parametrize("mode", PY_MODES, ids=PY_IDS)
@pytest.mark.parametrize("name", sorted(REAL_FUNCTIONS))
def test_grad_of_real_function_of_complex_array(name, mode):
    f = REAL_FUNCTIONS[name]
    z = np.array([0.8 + 0.3j, -0.4 + 1.1j, 1.3 - 0.6j])
    g = funcgrad.grad(f, **mode)(z)
    assert g.dtype == np.complex128 and g.shape == z.shape
    np.testing.assert_allclose(g, numerical_vjp(f, (z,), 0, 1.0, 1e-6), rtol=1e-6, atol=1e-7)


def f_all_together(z):
    return (f_abs(z) + f_abs_sq(z) + f_angle(z) + f_angle_deg(z) + f_real_imag(z) + f_attrs(z) + f_conj(z)
            + f_holo(z) + f_trig(z) + f_power(z) + f_reduce(z))


def test_grad_of_real_functions_of_complex_arrays_compiled_whole():
    z = np.array([0.8 + 0.3j, -0.4 + 1.1j, 1.3 - 0.6j])
    g = funcgrad.grad(f_all_together, jit="whole")(z)
    np.testing.assert_allclose(g, numerical_vjp(f_all_together, (z,), 0, 1.0, 1e-6), rtol=1e-6, atol=1e-6)


@needs_autograd
@pytest.mark.parametrize("name", sorted(set(REAL_FUNCTIONS) - {"angle_deg", "attrs"}))  # no deg=, no .real there
def test_grad_matches_autograd(name):
    f = REAL_FUNCTIONS[name]
    z = np.array([0.8 + 0.3j, -0.4 + 1.1j, 1.3 - 0.6j])
    g_ag = autograd.grad(_with_numpy(f, anp))(z)      # the same lambda, over autograd's numpy
    np.testing.assert_allclose(funcgrad.grad(f)(z), g_ag, rtol=1e-10, atol=1e-12)


def _with_numpy(f, module):
    """``f`` with its global ``np`` bound to ``module`` (autograd.numpy for the oracle)."""
    import types
    g = dict(f.__globals__)
    g["np"] = module
    return types.FunctionType(f.__code__, g, f.__name__, f.__defaults__, f.__closure__)


@needs_autograd
def test_autograd_complex_suite_facts():
    """autograd's tests/test_complex.py: real/complex result types and abs, angle on both kinds."""
    for x, realobj in ((2.0, True), (1.0j, False)):
        g = funcgrad.grad(lambda x: np.sum(np.real(x)))(x)
        assert np.isrealobj(g) == realobj
        assert abs(g - autograd.grad(lambda x: anp.sum(anp.real(x)))(x)) < 1e-12
    for x in (1.1, 2.1, 1.1 + 1.2j, 1.1 + 1.3j, 0.7 + 0.2j):
        for fn, afn in ((np.abs, anp.abs), (np.angle, anp.angle)):
            np.testing.assert_allclose(funcgrad.grad(lambda x: fn(x))(x), autograd.grad(afn)(x), rtol=1e-12,
                                       atol=1e-14)


# ----------------------------------------------------------------------------- VJPs of complex-valued functions
def v_holomorphic(z):
    return np.exp(z) * np.sin(z) / (z + 2.0) - np.sqrt(z) * np.log(z)


def v_binary(z, w):
    return z * w - z / w + z ** 2 * w


def v_broadcast(A, w):
    return A * w + A[0] - w[None, :] ** 2


def v_mixed_real(x, w):
    return x * w + np.exp(1j * x) - (x + 0.5) ** w


def v_nonholomorphic(z):
    return np.abs(z) * np.conj(z) + np.angle(z) * np.real(z) - 1j * np.imag(z)


def v_matmul(A, B):
    return A @ B + np.dot(A, B) * 2.0 - np.tensordot(A, B, 1)


def v_matmul_mixed(A, R):
    return A @ R + np.outer(A[:, 0], R[0])


def v_shapes(A):
    return np.concatenate([A.T.reshape(-1), np.sum(A, axis=0), np.stack([A[1], A[0]])[1]])


def v_concat_mixed(x, z):
    return np.concatenate([x, z, x * z])


def v_reductions(A):
    return np.sum(A * A, axis=1) + np.mean(A, axis=1) * np.prod(A, axis=1)


def _vjp_cases():
    rng = np.random.default_rng(3)
    z, w = cplx(rng, 3), cplx(rng, 3)
    A, B = cplx(rng, 2, 3), cplx(rng, 3, 2)
    x = rng.standard_normal(3)
    R = rng.standard_normal((3, 2))
    args = {"holomorphic": (z,), "binary": (z, w), "broadcast": (A, w), "mixed_real": (x, w),
            "nonholomorphic": (z,), "matmul": (A, B), "matmul_mixed": (A, R), "shapes": (A,),
            "concat_mixed": (x, z), "reductions": (A,)}
    return {k: (globals()["v_" + k], a, tuple(range(len(a)))) for k, a in args.items()}


VJP_CASES = _vjp_cases()


@pytest.mark.parametrize("mode", PY_MODES, ids=PY_IDS)
@pytest.mark.parametrize("name", sorted(VJP_CASES))
def test_vjp_of_complex_valued_function(name, mode):
    f, args, nums = VJP_CASES[name]
    check_vjp(f, args, nums, mode)


def v_all_together(z, w, A, B, x):
    return (v_holomorphic(z), v_binary(z, w), v_broadcast(A, w), v_mixed_real(x, w), v_nonholomorphic(z),
            v_matmul(A, B), v_shapes(A), v_concat_mixed(x, z), v_reductions(A))


def test_vjp_of_complex_valued_functions_compiled_whole():
    rng = np.random.default_rng(3)
    args = (cplx(rng, 3), cplx(rng, 3), cplx(rng, 2, 3), cplx(rng, 3, 2), rng.standard_normal(3))
    out, vjp_fn = funcgrad.vjp(v_all_together, *args, jit="whole")
    ct = tuple(_ct(rng, o) for o in out)
    got = vjp_fn(ct)
    for i in range(len(args)):
        np.testing.assert_allclose(got[i], numerical_vjp(v_all_together, args, i, ct, 1e-6), rtol=1e-6, atol=1e-6)
    # complex @ real: Numba's own `@` takes operands of one dtype; funcgrad's promotes them, as NumPy does
    f, margs, nums = VJP_CASES["matmul_mixed"]
    out, vjp_fn = funcgrad.vjp(f, *margs, argnums=nums, jit="whole")
    ct = _ct(rng, out)
    got = vjp_fn(ct)
    for k, i in enumerate(nums):
        np.testing.assert_allclose(got[k], numerical_vjp(f, margs, i, ct, 1e-6), rtol=1e-6, atol=1e-6)


@needs_autograd
# not mixed_real: autograd's power VJP takes the real log of a negative real base (NaN; ours is checked above)
@pytest.mark.parametrize("name", sorted(set(VJP_CASES) - {"mixed_real"}))
def test_vjp_matches_autograd(name):
    f, args, nums = VJP_CASES[name]
    rng = np.random.default_rng(7)
    out, vjp_fn = funcgrad.vjp(f, *args, argnums=nums)
    ct = _ct(rng, out)
    got = vjp_fn(ct)
    af = _with_numpy(f, anp)
    for k, i in enumerate(nums):
        def fi(a, i=i):
            full = list(args)
            full[i] = a
            return af(*full)
        ag_vjp, _ = autograd.make_vjp(fi)(args[i])
        want = ag_vjp(ct)
        if not np.iscomplexobj(args[i]):   # autograd's concatenate leaves a real input's cotangent complex
            want = np.real(want)
        np.testing.assert_allclose(got[k], want, rtol=1e-10, atol=1e-12)


# ----------------------------------------------------------------------------- loops, scalars, in-place writes
def _iterate(c, n):
    z = 0.0 + 0.0j
    for _ in range(n):
        z = z * z + c
    return z


def _fill(x, w):
    out = np.zeros(3, dtype=np.complex128)
    for i in range(3):
        out[i] = x[i] * w[i] + 1j * x[i]
    return out


def _fill_real(z):
    out = np.zeros(3)
    for i in range(3):
        out[i] = np.abs(z[i]) ** 2 + z[i].real       # a complex value's real function into a real array
    return out


@pytest.mark.parametrize("mode", MODES, ids=IDS)
def test_complex_scalars_in_loops(mode):
    check_vjp(_iterate, (0.3 + 0.2j, 5), (0,), mode)
    check_vjp(lambda c, n: np.abs(_iterate(c, n)), (0.25 - 0.3j, 4), (0,), mode)


@pytest.mark.parametrize("mode", MODES, ids=IDS)
def test_in_place_writes_between_real_and_complex(mode):
    rng = np.random.default_rng(1)
    x, w, z = rng.standard_normal(3), cplx(rng, 3), cplx(rng, 3)
    check_vjp(_fill, (x, w), (0, 1), mode)
    check_vjp(_fill_real, (z,), (0,), mode)


@pytest.mark.parametrize("mode", MODES, ids=IDS)
def test_value_and_grad_with_complex_and_real_arguments(mode):
    x, z = np.array([0.5, -1.5]), np.array([1 + 1j, 2 - 0.5j])
    f = lambda x, z: np.sum(np.abs(x * z) ** 2) + np.sum(x)          # noqa: E731
    v, (gx, gz) = funcgrad.value_and_grad(f, argnums=(0, 1), **mode)(x, z)
    assert abs(v - f(x, z)) < 1e-12
    assert gx.dtype == np.float64 and gz.dtype == np.complex128
    np.testing.assert_allclose(gx, 2 * x * np.abs(z) ** 2 + 1, rtol=1e-12)
    np.testing.assert_allclose(gz, 2 * x ** 2 * np.conj(z), rtol=1e-12)


def test_grad_of_complex_output_is_refused():
    with pytest.raises(TypeError, match="real scalar output"):
        funcgrad.grad(lambda z: z * z)(1 + 1j)


# ----------------------------------------------------------------------------- the rules' own derivatives
# np.abs's VJP multiplies by csign(x) = conj(x)/|x|, whose VJP uses inv_abs(x) = 1/|x|: derivatives of every
# order are these primitives again. Their VJPs on complex values, against central differences:
@pytest.mark.parametrize("mode", MODES, ids=IDS)
def test_derivative_rules_of_abs_are_right_on_complex_values(mode):
    rng = np.random.default_rng(5)
    z, x = cplx(rng, 4), rng.standard_normal(4)
    check_vjp(lambda z: csign(z), (z,), (0,), mode)
    check_vjp(lambda z: inv_abs(z) * z, (z,), (0,), mode)
    check_vjp(lambda x: csign(x) * x + inv_abs(x), (x,), (0,), mode)
    check_vjp(lambda g, z: match_complex(g * z, z), (x, z), (0, 1), mode)
    check_vjp(lambda g, x: match_complex(g * x, x), (z, x), (0, 1), mode)
    # at 0 the rules give 0, not NaN
    assert csign(np.array([0j]))[0] == 0 and inv_abs(np.array([0.0]))[0] == 0


def _abs_at_zero(x):
    return np.sum(3.0 * np.abs(x) + np.absolute(x) - np.fabs(np.real(x)))


@pytest.mark.parametrize("mode", MODES, ids=IDS)
def test_abs_at_zero_is_autograds_convention_in_both_modes(mode):
    """autograd's abs rules (numpy_vjps.np_abs_vjp, numpy_jvps.np_abs_jvp) divide by |x| with zeros replaced:
    0 is the derivative at 0 in both modes, the central difference there (the kink is symmetric), and the second
    derivative is 0 too. Real and complex 0, beside nonzero entries. autograd's test_abs checks 0 at first
    order only: no rule can pass an order-2 check at a kink (the JVP jumps from -3 to 3 across it)."""
    x = np.array([0.0, -1.5, 2.0])
    want = np.array([0.0, -3.0, 3.0])
    np.testing.assert_allclose(funcgrad.grad(_abs_at_zero, **mode)(x), want, rtol=1e-15, atol=0)
    for e in np.eye(3):
        assert funcgrad.jvp(_abs_at_zero, (x,), (e,), **mode)[1] == pytest.approx(want @ e, abs=1e-15)
    np.testing.assert_allclose(numerical_vjp(_abs_at_zero, (x,), 0, 1.0, 1e-6), want, atol=1e-9)
    assert funcgrad.hessian(lambda s: 3.0 * np.abs(s), **mode)(0.0) == 0.0
    assert funcgrad.grad(funcgrad.grad(lambda s: 3.0 * np.abs(s), **mode), **mode)(0.0) == 0.0
    z = np.array([0j, 1.0 + 2.0j])
    g = funcgrad.grad(lambda z: np.sum(np.abs(z)), **mode)(z)
    assert g[0] == 0 and g[1] == pytest.approx((1.0 - 2.0j) / np.sqrt(5.0), rel=1e-14)
    assert funcgrad.jvp(lambda z: np.abs(z), (0j,), (1.0 + 1.0j,), **mode)[1] == 0.0


def j_abs_angle(z):
    return np.abs(z) + np.angle(z)


def j_exp_conj(z):
    return np.exp(z) * np.conj(z)


def j_real_imag(z):
    return np.real(z) * np.imag(z)


def j_helpers(z):
    return csign(z) * inv_abs(z)


def j_power(x, w):
    return (x - 0.5) ** w          # a negative real base with a complex exponent: the complex logarithm


def test_jvp_of_complex_functions():
    rng = np.random.default_rng(2)
    z, v = cplx(rng, 3), cplx(rng, 3)
    for f in (j_abs_angle, j_exp_conj, j_real_imag, j_helpers):
        want = (f(z + 1e-6 * v) - f(z - 1e-6 * v)) / 2e-6
        for jit in ("auto", False, "whole"):
            y, t = funcgrad.jvp(f, (z,), (v,), jit=jit)
            np.testing.assert_allclose(t, want, rtol=1e-6, atol=1e-7)
    x, u = np.array([0.1, 0.9, 0.3]), np.array([0.2, -1.0, 0.5])
    want = (j_power(x + 1e-6 * u, z + 1e-6 * v) - j_power(x - 1e-6 * u, z - 1e-6 * v)) / 2e-6
    for jit in ("auto", False, "whole"):
        y, t = funcgrad.jvp(j_power, (x, z), (u, v), jit=jit)
        np.testing.assert_allclose(t, want, rtol=1e-6, atol=1e-7)


# ----------------------------------------------------------------------------- real code is unchanged
def _real_program(x, w, n):
    s = 0.0
    h = np.tanh(x @ w)
    for i in range(n):
        s = s + np.sum(np.abs(h - 0.1 * i)) * np.sign(s + 0.5)
    return s + np.sum(np.sqrt(np.abs(x)))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_real_code_has_no_complex_handling(dtype):
    """Real programs generate exactly what they did before complex numbers: np.abs's rule is np.sign, and
    no kind matching or conjugate is emitted (nothing extra runs, compiled or not)."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((3, 2)).astype(dtype), rng.standard_normal((2, 2)).astype(dtype)
    src = funcgrad.source(funcgrad.grad(_real_program, argnums=(0, 1)), x, w, 3)
    assert "K.sign(" in src
    for name in ("match_complex", "csign", "conj", "inv_abs", "real", "imag"):
        assert not re.search(rf"K\.{name}\(", src), name


def test_complex_code_matches_kinds_only_where_kinds_meet():
    z = np.array([1 + 1j, 2 - 1j])
    src = funcgrad.source(funcgrad.grad(lambda z: np.sum(np.abs(z) ** 2)), z)
    assert "K.csign(" in src and "K.match_complex(" in src
    x = np.array([0.5, 1.5])
    src = funcgrad.source(funcgrad.grad(lambda x: np.real(np.sum(np.exp(1j * x)))), x)
    assert "K.match_complex(" in src


def test_complex_kernels_compile_for_real_and_complex_values():
    """The dtype-dependent kernels agree compiled and uncompiled, for real and complex arrays and scalars."""
    from numba import njit
    from funcgrad.kernels import cpu as K

    @njit
    def run(x, g):
        return K.csign(x), K.inv_abs(x), K.match_complex(g, x), K.angle_unit(True)

    for x, g in ((np.array([3 + 4j, 0j, -2.0 + 0j]), np.array([1.0, 2.0, 3.0])),
                 (np.array([-1.5, 0.0, 2.0]), np.array([1 + 1j, 2j, 3.0 + 0j])),
                 (np.array([-1.5, 0.0, 2.0]), np.array([1.0, 2.0, 3.0])),
                 (3 + 4j, 2.0), (-2.5, 1 + 2j)):
        got = run(x, g)
        want = (K.csign(x), K.inv_abs(x), K.match_complex(g, x), K.angle_unit(True))
        for a, b in zip(got, want):
            assert np.iscomplexobj(a) == np.iscomplexobj(b)
            np.testing.assert_allclose(a, b, rtol=1e-14)
    np.testing.assert_allclose(K.csign(np.array([3 + 4j, 0j])), [0.6 - 0.8j, 0])
    assert K.match_complex(np.array([1 + 2j]), np.array([1.0])).dtype == np.float64
    assert K.match_complex(np.array([1.0]), np.array([1j])).dtype == np.complex128
    with warnings.catch_warnings():
        warnings.simplefilter("error", funcgrad.errors.FuncgradWarning)
        K.inv_abs(np.array([0.0, 2.0]))          # no division warning at 0


# ----------------------------------------------------------------------------- second order
def through_complex(x):
    z = np.exp(1j * x * np.array([1.0, 2.0, -0.5])) * (x + 1j)
    return np.sum(np.abs(z) ** 3) + np.real(np.sum(np.conj(z) * z * z)) + np.sum(np.angle(z + 2))


def scalar_through_complex(x):
    return np.abs(np.exp(1j * x) * (x + 0.5j)) ** 3 + np.angle(x + 1j)


def test_second_order_of_real_functions_through_complex_values():
    x = np.array([0.3, -0.7, 1.1])
    for jit in ("auto", False):
        H = funcgrad.hessian(through_complex, jit=jit)(x)
        Hn = np.stack([numerical_vjp(funcgrad.grad(through_complex), (x,), 0, e, 1e-5) for e in np.eye(3)])
        np.testing.assert_allclose(H, Hn, rtol=1e-6, atol=1e-6)
    gg = funcgrad.grad(funcgrad.grad(scalar_through_complex))(0.4)
    assert abs(gg - numerical_vjp(funcgrad.grad(scalar_through_complex), (0.4,), 0, 1.0, 1e-5)) < 1e-6


def test_second_order_of_complex_arguments_is_refused():
    z = np.array([1 + 1j, 0.5 - 2j, 0.1j])
    with pytest.raises(TypeError, match="complex arguments are not supported"):
        funcgrad.hessian(f_abs_sq)(z)
    with pytest.raises(TypeError, match="complex arguments are not supported"):
        funcgrad.hvp(f_abs_sq, (z,), (np.ones(3, complex),))


def _complex_builtin(x, a):
    z = complex(x, a[0])
    w = complex(a[1])
    return abs(z * w) + (z * z).real + complex(1, 2).imag * x


@pytest.mark.parametrize("kw", [dict(mode="auto"), dict(mode="njit"), dict(jit=False)], ids=["auto", "njit", "nojit"])
def test_complex_builtin_of_computed_numbers(kw):
    """complex(re, im) of numbers computed inside the function is re + im * 1j (it was refused as 'creating a
    complex object')."""
    from tests.support import assert_value_and_gradient
    assert_value_and_gradient(_complex_builtin, (0.7, np.array([1.0, 2.0])), (0, 1), **kw)
