"""``and``/``or`` as Python evaluates them: the deciding operand's value (derivative included), short-circuit."""
import numpy as np
import pytest

import funcgrad

A = np.array([0.3, 0.7, 0.9])


def and_value(x, a):
    t = x and a[0]         # x is truthy: t is a[0]
    return t * a[1]


def or_value(x, a):
    t = x or a[1]          # x is truthy: t is x
    return t * a[0]


def falsy_decides(x, a):
    z = 0.0
    t = z or x * 2.0       # z is falsy: t is x * 2.0
    u = (x - x) and a[1]   # 0.0 is falsy: u is 0.0
    return t + u * 3.0


def guarded_index(x, a):
    s = 0.0
    i = 0
    while i < len(a) and a[i] < 10.0:   # a[i] is read only while i < len(a)
        s += a[i] * x
        i += 1
    return s


def in_a_loop(x, a):
    s = 0.0
    for i in range(3):
        v = a[i] > 0.5 and a[i] * x or x
        s = s + v
    return s


def condition(x, a):
    if x > 0 and a[0] > 0.1 or a[1] < 0:
        return x * a[0]
    return x


def _central(f, args, k, h=1e-6):
    x = np.asarray(args[k], dtype=float)
    out = np.zeros_like(x)
    for j in range(x.size):
        e = np.zeros_like(x)
        e.flat[j] = h
        up, dn = list(args), list(args)
        up[k], dn[k] = (x + e if x.ndim else float(x + e)), (x - e if x.ndim else float(x - e))
        out.flat[j] = (f(*up) - f(*dn)) / (2 * h)
    return out


@pytest.mark.parametrize("fn", [and_value, or_value, falsy_decides, guarded_index, in_a_loop, condition],
                         ids=lambda f: f.__name__)
def test_boolop_value_and_gradient(fn):
    args = (0.5, A)
    for jit in ("python", "njit", False):
        v, (gx, ga) = funcgrad.value_and_grad(fn, argnums=(0, 1), jit=jit)(*args)
        assert v == pytest.approx(fn(*args), rel=1e-12), jit
        assert gx == pytest.approx(_central(fn, args, 0), rel=1e-6, abs=1e-8), jit
        np.testing.assert_allclose(ga, _central(fn, args, 1), rtol=1e-6, atol=1e-8, err_msg=str(jit))
