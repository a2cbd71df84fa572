"""isinstance() of a number whose kind the signature fixes (a float, int or NumPy scalar argument, an element
of an array, a reduction's result) is decided when the code is generated, as Python decides it: each kind of
argument gets the branch Python takes, in every mode."""
import numpy as np
import pytest

import funcgrad

MODES = ["auto", "whole", False]


def branchy(x, s):
    a = s * 3.0 if isinstance(s, float) else s * 5.0          # np.float64 is a float, np.float32 is not
    b = 2.0 if isinstance(np.sum(x), np.floating) else 7.0      # a reduction's result: a NumPy scalar
    c = 1.0 if isinstance(x[0], (int, float)) else 4.0         # an element of a float64 array: np.float64
    d = 0.5 if isinstance(s, np.ndarray) else 1.5
    return np.sum(x * x) * a * b * c * d


@pytest.mark.parametrize("jit", MODES, ids=str)
@pytest.mark.parametrize("s", [0.5, np.float64(0.5), np.float32(0.5), 2], ids=["float", "f64", "f32", "int"])
def test_isinstance_of_numbers_takes_pythons_branch(s, jit):
    x = np.array([1.5, -2.0, 0.25])
    v, g = funcgrad.value_and_grad(branchy, jit=jit)(x, s)
    np.testing.assert_allclose(v, branchy(x, s), rtol=1e-6)
    eps = 1e-6
    fd = np.array([(branchy(x + eps * e, s) - branchy(x - eps * e, s)) / (2 * eps) for e in np.eye(3)])
    np.testing.assert_allclose(g, fd, rtol=1e-5)


def test_isinstance_of_a_value_only_known_when_the_function_runs_is_still_refused():
    def unknowable(x):
        y = x.tolist()[0]
        return np.sum(x) * (2.0 if isinstance(y, float) else 3.0)
    with pytest.raises(funcgrad.FuncgradError, match="isinstance"):
        funcgrad.grad(unknowable)(np.array([1.0, 2.0]))
