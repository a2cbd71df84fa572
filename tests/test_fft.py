"""numpy.fft: every transform, with n/s/axes/norm, real and complex inputs, against central differences.

VJPs follow autograd's convention (tests/test_complex.py): ``vjp(f)(ct)`` is the derivative of
``Re(sum(ct * f(x)))``, ``d/dRe - 1j d/dIm`` for a complex input; checked with complex cotangents
(real and imaginary parts of every output matter) in every mode that runs them. Numba has no
``np.fft``: ``jit="auto"`` runs such functions as Python (loops too, with no fallback warning) and
``jit="whole"`` refuses at the user's line. autograd (tests/test_fft.py's cases) is an optional oracle.
"""
import warnings

import numpy as np
import pytest

import funcgrad
from funcgrad.errors import CompileError, FuncgradWarning
from funcgrad.testing import numerical_vjp

from test_complex import check_vjp, cplx

PY_MODES = [dict(jit="auto"), dict(jit=False), dict(jit="kernels")]
PY_IDS = ["auto", "nojit", "kernels"]

try:
    import autograd
    import autograd.numpy as anp
except ImportError:  # pragma: no cover
    autograd = None

needs_autograd = pytest.mark.skipif(autograd is None, reason="autograd not installed")
# NumPy 2 deprecates fftn(s=...) without axes; the cases with it test that NumPy 1's meaning is kept
pytestmark = pytest.mark.filterwarnings("ignore:`axes` should not be `None`:DeprecationWarning")


def call(fn, kwargs):
    """``a -> fn(a, **kwargs)`` as a function funcgrad reads (the keywords are fixed into its code)."""
    def f(a):
        return fn(a, **kwargs)
    f.__name__ = f"{fn.__name__}_{'_'.join(f'{k}{v}' for k, v in kwargs.items())}"
    return f


def _one_d_cases():
    cases = []
    for fn in (np.fft.fft, np.fft.ifft, np.fft.rfft, np.fft.irfft):
        for kw in ({}, {"norm": "ortho"}, {"norm": "forward"}, {"axis": 0}, {"n": 3}, {"n": 7}, {"n": 6, "axis": 0},
                   {"n": 5, "axis": -1, "norm": "backward"}):
            cases.append((fn, kw))
    return cases


def _n_d_cases():
    cases = []
    for fn in (np.fft.fft2, np.fft.ifft2, np.fft.fftn, np.fft.ifftn, np.fft.rfft2, np.fft.irfft2, np.fft.rfftn,
               np.fft.irfftn):
        two = fn.__name__.endswith("2")
        kws = [{}, {"norm": "ortho"}, {"s": (6, 3), "axes": (0, 2)}, {"s": (3, 5), "axes": (2, 0), "norm": "forward"},
               {"axes": (1, 0)}, {"s": (5, 4)} if two else {"s": (3, 5, 2)}]
        if not two:
            kws += [{"axes": (1,)}, {"axes": (2, 0, 1), "s": (2, 3, 7)}]
        for kw in kws:
            cases.append((fn, kw))
    return cases


def _ids(cases):
    return [f"{fn.__name__}-{'-'.join(f'{k}={v}' for k, v in kw.items()) or 'default'}" for fn, kw in cases]


ONE_D, N_D = _one_d_cases(), _n_d_cases()


def _inputs(fn, shape, rng):
    """A real input and a complex one (for the inverse real transforms: a spectrum, Hermitian or not)."""
    return [rng.standard_normal(shape), cplx(rng, *shape)]


@pytest.mark.parametrize("mode", PY_MODES, ids=PY_IDS)
@pytest.mark.parametrize("fn,kw", ONE_D, ids=_ids(ONE_D))
def test_one_d_transforms(fn, kw, mode):
    rng = np.random.default_rng(0)
    for x in _inputs(fn, (4, 5), rng):
        if fn is np.fft.rfft and np.iscomplexobj(x):
            continue  # NumPy's rfft takes real input only
        check_vjp(call(fn, kw), (x,), (0,), mode)


@pytest.mark.parametrize("mode", PY_MODES, ids=PY_IDS)
@pytest.mark.parametrize("fn,kw", N_D, ids=_ids(N_D))
def test_n_d_transforms(fn, kw, mode):
    rng = np.random.default_rng(1)
    for x in _inputs(fn, (4, 3, 5), rng):
        if fn in (np.fft.rfft2, np.fft.rfftn) and np.iscomplexobj(x):
            continue
        check_vjp(call(fn, kw), (x,), (0,), mode)


@pytest.mark.parametrize("fn", [np.fft.fftshift, np.fft.ifftshift])
@pytest.mark.parametrize("axes", [None, 0, 1, (1, 0), (-1,)])
def test_shifts(fn, axes):
    rng = np.random.default_rng(2)
    for x in (rng.standard_normal((5, 4)), cplx(rng, 3, 5)):
        for mode in PY_MODES:
            check_vjp(call(fn, {"axes": axes}), (x,), (0,), mode)


def spectrum_power(x, w):
    s = np.fft.fftshift(np.fft.fft2(x * w, norm="ortho"))
    p = np.abs(s) ** 2
    r = np.fft.irfft(np.fft.rfft(x, axis=0) * np.exp(1j * w[:3, :1]), n=x.shape[0], axis=0)
    return np.sum(p * w) + np.sum(r * r) + np.real(np.sum(np.fft.ifftn(s, s=(3, 4)) * (1 - 2j)))


@pytest.mark.parametrize("mode", PY_MODES, ids=PY_IDS)
def test_programs_of_transforms(mode):
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((4, 5)), rng.standard_normal((4, 5))
    v, (gx, gw) = funcgrad.value_and_grad(spectrum_power, argnums=(0, 1), **mode)(x, w)
    assert abs(v - spectrum_power(x, w)) < 1e-10
    assert gx.dtype == np.float64 and gw.dtype == np.float64
    np.testing.assert_allclose(gx, numerical_vjp(spectrum_power, (x, w), 0, 1.0, 1e-6), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(gw, numerical_vjp(spectrum_power, (x, w), 1, 1.0, 1e-6), rtol=1e-6, atol=1e-6)


def filtered_energy(x, n):
    y = x
    for i in range(n):                  # a loop: auto would compile it whole, but np.fft is Python only
        y = np.fft.irfft(np.fft.rfft(y) * (0.9 - 0.1j * i), n=x.shape[0])
    return np.sum(y ** 2)


def test_auto_runs_loops_with_fft_as_python_without_a_fallback():
    x = np.random.default_rng(4).standard_normal(6)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FuncgradWarning)        # no "Numba cannot compile ... runs as Python"
        g = funcgrad.grad(filtered_energy)(x, 3)
    np.testing.assert_allclose(g, numerical_vjp(filtered_energy, (x, 3), 0, 1.0, 1e-6), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("fn", [np.fft.fft, np.fft.irfft, np.fft.fftn, np.fft.fftshift])
def test_whole_compilation_is_refused_at_the_users_line(fn):
    f = call(fn, {})
    with pytest.raises(CompileError) as ei:
        funcgrad.grad(lambda x: np.sum(np.abs(f(x))), jit="whole")(np.ones((2, 4)))
    msg = str(ei.value)
    assert fn.__name__ in msg and "no nopython implementation" in msg
    assert "test_fft.py" in msg and "jit=" in msg


def repeated_axes(x):
    return np.sum(np.abs(np.fft.fftn(x, axes=(0, 0))) ** 2)


def test_repeated_axes_are_refused_when_differentiated():
    x = np.random.default_rng(5).standard_normal((3, 4))
    assert np.isfinite(repeated_axes(x))
    with pytest.raises(NotImplementedError, match="repeated axis"):
        funcgrad.grad(repeated_axes)(x)


def test_float32_stays_single_precision():
    x = np.random.default_rng(6).standard_normal((3, 8)).astype(np.float32)
    f = call(np.fft.rfft, {"n": 10})
    out, vjp_fn = funcgrad.vjp(f, x)
    ct = (np.ones(out.shape) + 0.5j).astype(out.dtype)
    (g,) = vjp_fn(ct)
    assert g.dtype == np.float32
    want = numerical_vjp(f, (x.astype(np.float64),), 0, ct.astype(np.complex128), 1e-6)
    np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-4)


N_D_FUNCS = {fn for fn, _ in N_D}


@pytest.mark.parametrize("fn,kw", ONE_D[::3] + N_D[::4], ids=_ids(ONE_D[::3] + N_D[::4]))
def test_forward_mode(fn, kw):
    rng = np.random.default_rng(7)
    shape = (4, 3, 5) if fn in N_D_FUNCS else (4, 5)
    f = call(fn, kw)
    for x, v in ((rng.standard_normal(shape), rng.standard_normal(shape)), (cplx(rng, *shape), cplx(rng, *shape))):
        if fn in (np.fft.rfft, np.fft.rfft2, np.fft.rfftn) and np.iscomplexobj(x):
            continue
        want = (f(x + 1e-6 * v) - f(x - 1e-6 * v)) / 2e-6
        for jit in ("auto", False):
            y, t = funcgrad.jvp(f, (x,), (v,), jit=jit)
            np.testing.assert_allclose(y, f(x), rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(t, want, rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------- autograd as oracle
def _positional(name, kw):
    """The keywords as positional arguments: autograd's rules read ``n`` only when it is positional."""
    if name.endswith("shift"):
        return (kw.get("axes"),)
    if name in ("fft", "ifft", "rfft", "irfft"):
        return kw.get("n"), kw.get("axis", -1), kw.get("norm")
    return kw.get("s"), kw.get("axes", (-2, -1) if name.endswith("2") else None), kw.get("norm")


@needs_autograd
@pytest.mark.parametrize("name,kw,shape,spectrum", [
    ("fft", {}, (5, 5), False), ("fft", {"norm": "ortho"}, (5, 5), False), ("fft", {"axis": 0}, (5, 5), False),
    ("fft", {"n": 3}, (5, 5), False), ("fft", {"n": 7}, (5, 5), False), ("ifft", {"n": 7}, (5, 5), False),
    ("rfft", {}, (4, 4), False), ("rfft", {"norm": "ortho"}, (4, 4), False), ("rfft", {"axis": 0}, (4, 4), False),
    ("rfft", {"n": 2}, (4, 4), False), ("rfft", {"n": 6}, (4, 4), False),
    ("irfft", {}, (4, 4), True), ("irfft", {"norm": "ortho"}, (4, 4), True), ("irfft", {"n": 6}, (4, 4), True),
    ("fft2", {"s": (7, 3), "axes": (0, 2)}, (5, 5, 5), False), ("ifftn", {"s": (7, 3), "axes": (0, 2)}, (5, 5, 5), False),
    ("rfft2", {}, (4, 4), False), ("irfft2", {}, (4, 4), True), ("rfftn", {"axes": (0, 2)}, (4, 4, 4), False),
    ("irfftn", {}, (4, 4, 4), True), ("irfftn", {"s": (6, 2), "axes": (0, 2)}, (4, 4, 4), True),
    ("fftshift", {}, (5, 5), False), ("ifftshift", {"axes": 1}, (5, 5), False),
])
def test_vjp_matches_autograd(name, kw, shape, spectrum):
    rng = np.random.default_rng(8)
    x = rng.standard_normal(shape) / 10.0
    if spectrum:  # autograd's tests feed the inverse real transforms a spectrum of a real signal
        x = getattr(np.fft, name[1:])(x)
    f = call(getattr(np.fft, name), kw)
    out, vjp_fn = funcgrad.vjp(f, x)
    ct = cplx(rng, *out.shape) if np.iscomplexobj(out) else rng.standard_normal(out.shape)
    (got,) = vjp_fn(ct)
    ag_vjp, _ = autograd.make_vjp(lambda a: getattr(anp.fft, name)(a, *_positional(name, kw)))(x)
    want = ag_vjp(ct)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got, numerical_vjp(f, (x,), 0, ct, 1e-6), rtol=1e-6, atol=1e-7)
