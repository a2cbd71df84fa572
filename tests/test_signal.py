"""scipy.signal.convolve: every mode, 1-D to 3-D, either operand larger, real and complex, both arguments
differentiated, against central differences (complex cotangents: tests/test_complex.py's convention);
autograd's convolve as an optional oracle where its semantics are scipy's (full and valid)."""
import numpy as np
import pytest
import scipy.signal

import funcgrad
from funcgrad.errors import CompileError

from test_complex import check_vjp, cplx

PY_MODES = [dict(jit="auto"), dict(jit=False), dict(jit="kernels")]
PY_IDS = ["auto", "nojit", "kernels"]

try:
    import autograd
    import autograd.scipy.signal as asig
except ImportError:  # pragma: no cover
    autograd = None


def conv(mode, method="auto"):
    def f(a, b):
        return scipy.signal.convolve(a, b, mode, method)
    return f


SHAPES = [((6,), (3,)), ((3,), (5,)), ((1,), (4,)), ((4, 3), (2, 2)), ((2, 5), (3, 4)), ((5, 4), (4, 1)),
          ((3, 4, 2), (2, 2, 2)), ((2, 3, 2), (3, 3, 3))]


def _valid_ok(s1, s2):
    return all(a >= b for a, b in zip(s1, s2)) or all(a <= b for a, b in zip(s1, s2))


CASES = [(s1, s2, mode) for s1, s2 in SHAPES for mode in ("full", "same", "valid")
         if mode != "valid" or _valid_ok(s1, s2)]


@pytest.mark.parametrize("mode", PY_MODES, ids=PY_IDS)
@pytest.mark.parametrize("s1,s2,cmode", CASES, ids=[f"{a}x{b}-{m}" for a, b, m in CASES])
def test_convolve_both_arguments(s1, s2, cmode, mode):
    rng = np.random.default_rng(len(s1) * 10 + len(s2))
    for method in ("auto", "direct", "fft"):
        f = conv(cmode, method)
        check_vjp(f, (rng.standard_normal(s1), rng.standard_normal(s2)), (0, 1), mode)
    check_vjp(conv(cmode), (cplx(rng, *s1), rng.standard_normal(s2)), (0, 1), mode)
    check_vjp(conv(cmode), (cplx(rng, *s1), cplx(rng, *s2)), (0, 1), mode)


def smoothed_loss(x, k, target):
    y = scipy.signal.convolve(x, k, "same")
    z = scipy.signal.convolve(y, k[::-1], "valid")
    return np.sum((y - target) ** 2) + np.sum(np.abs(z))


def test_a_program_of_convolutions():
    rng = np.random.default_rng(1)
    x, k, target = rng.standard_normal(9), rng.standard_normal(3), rng.standard_normal(9)
    for mode in PY_MODES:
        check_vjp(smoothed_loss, (x, k, target), (0, 1), mode)


def test_invalid_valid_shapes_raise_scipys_error():
    with pytest.raises(ValueError):
        funcgrad.grad(lambda a, b: np.sum(scipy.signal.convolve(a, b, "valid")))(np.ones((2, 5)), np.ones((3, 4)))


def test_whole_compilation_is_refused_at_the_users_line():
    with pytest.raises(CompileError, match="convolve has no nopython implementation") as ei:
        funcgrad.grad(lambda a: np.sum(scipy.signal.convolve(a, a)), jit="whole")(np.ones(3))
    assert "test_signal.py" in str(ei.value)


@pytest.mark.parametrize("s1,s2,cmode", CASES[::2], ids=[f"{a}x{b}-{m}" for a, b, m in CASES[::2]])
def test_forward_mode(s1, s2, cmode):
    rng = np.random.default_rng(3)
    a, b, ta, tb = cplx(rng, *s1), rng.standard_normal(s2), cplx(rng, *s1), rng.standard_normal(s2)
    f = conv(cmode)
    want = (f(a + 1e-6 * ta, b + 1e-6 * tb) - f(a - 1e-6 * ta, b - 1e-6 * tb)) / 2e-6
    for jit in ("auto", False):
        y, t = funcgrad.jvp(f, (a, b), (ta, tb), jit=jit)
        np.testing.assert_allclose(y, f(a, b), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(t, want, rtol=1e-6, atol=1e-6)


@pytest.mark.skipif(autograd is None, reason="autograd not installed")
@pytest.mark.parametrize("s1,s2,cmode", [c for c in CASES if c[2] != "same"],
                         ids=[f"{a}x{b}-{m}" for a, b, m in CASES if m != "same"])
def test_vjp_matches_autograd(s1, s2, cmode):
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal(s1), rng.standard_normal(s2)
    np.testing.assert_allclose(asig.convolve(a, b, mode=cmode), scipy.signal.convolve(a, b, cmode), atol=1e-12)
    out, vjp_fn = funcgrad.vjp(conv(cmode), a, b)
    ct = rng.standard_normal(out.shape)
    got = vjp_fn(ct)
    for i in (0, 1):
        ag_vjp, _ = autograd.make_vjp(lambda a, b: asig.convolve(a, b, mode=cmode), i)(a, b)
        np.testing.assert_allclose(got[i], ag_vjp(ct), rtol=1e-10, atol=1e-12)


def test_import_funcgrad_leaves_scipy_signal_alone(tmp_path):
    """scipy.signal costs seconds to import: funcgrad registers its convolve when the user imports it."""
    import subprocess
    import sys
    script = tmp_path / "late_import.py"
    script.write_text("import sys, numpy as np, funcgrad\n"
            "assert 'scipy.signal' not in sys.modules\n"
            "import scipy.signal\n"
            "def f(a, b):\n"
            "    return np.sum(scipy.signal.convolve(a, b, 'same') ** 2)\n"
            "g = funcgrad.grad(f, argnums=(0, 1))(np.arange(4.0), np.array([1.0, -2.0]))\n"
            "print(g[1])\n")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    a, b = np.arange(4.0), np.array([1.0, -2.0])
    y = scipy.signal.convolve(a, b, "same")
    want = [np.sum(2 * y * scipy.signal.convolve(a, e, "same")) for e in np.eye(2)]
    np.testing.assert_allclose(np.array(r.stdout.split("[")[1].split("]")[0].split(), dtype=float), want)
