"""Compiled scalar loops: the reversed body's local derivatives are preaccumulated (funcgrad/transform/
preaccumulate.py). The gradient must equal the statement-by-statement adjoint (Python mode) and central
differences, for bodies the rewrite takes and bodies it must leave alone."""
import math

import numpy as np
import pytest

import funcgrad


def logistic(a, b, n):
    x = 0.1
    for _ in range(n):
        x = x + 0.01 * (a * x - b * x * x)
    return x


def two_carried(a, b, n):
    # a tuple assignment of two carried scalars through a rotation: a 2x2 local Jacobian per step
    u, v = 1.0, 0.0
    for _ in range(n):
        u, v = u * math.cos(a) - v * math.sin(a), u * math.sin(a) + v * math.cos(a) + b * u
    return u * v + v


def transcendental(a, b, n):
    s = 0.0
    x = a
    for i in range(n):
        x = np.tanh(x * b + 0.1 * i) / (1.0 + x * x) + np.exp(-x) * np.sqrt(b * b + 1.0)
        s = s + np.sin(x) - x / b
    return s


def accumulate_only(a, b, n):
    # nothing is carried but the sums: every iteration adds to d_a, d_b
    s = 0.0
    for i in range(n):
        t = a * i - b
        s = s + t * t * a
    return s


def nested(a, b, n):
    x = a
    for i in range(n):
        y = x
        for j in range(3):      # the inner body is rewritten; the outer (which holds a loop) is not
            y = y * b + 0.1 * j - y * y * 0.05
        x = 0.5 * x + 0.2 * y
    return x + b


def branchy(a, b, n):
    # a branch on a cotangent-free test inside the body: the rewrite leaves it as it is
    x = a
    for i in range(n):
        if x > 0.3:
            x = x * b - 0.1
        else:
            x = x + a * 0.2
    return x * x


def reads_body_temp_after(a, b, n):
    x = a
    y = 0.0
    for _ in range(n):
        y = x * b
        x = x - 0.1 * y * y
    return x + y * y


def float_power(a, b, n):
    x = a
    for _ in range(n):
        x = (x * x + b) ** 0.5 - 0.01 * x ** 3
    return x


def ring(a, b, n):
    # eight carried scalars, each step mixing all of them: a dense 8x8 local Jacobian, more coefficients than
    # the statement-by-statement adjoint has operations, so the rewrite leaves it alone
    x0, x1, x2, x3, x4, x5, x6, x7 = a, b, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6
    for _ in range(n):
        m = (x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7) * 0.125
        x0, x1, x2, x3, x4, x5, x6, x7 = (x1 * m, x2 * m + a, x3 * m, x4 * m, x5 * m, x6 * m, x7 * m * b,
                                          x0 * m)
    return x0 + x3 * x5 - x7


CASES = [(logistic, (1.5, 0.7, 40)), (two_carried, (0.3, 0.2, 25)), (transcendental, (0.4, 1.3, 15)),
         (accumulate_only, (0.8, 0.3, 10)), (nested, (0.6, 0.9, 6)), (branchy, (0.13, 0.6, 12)),
         (reads_body_temp_after, (0.5, 0.9, 9)), (float_power, (0.7, 0.4, 10)),
         (logistic, (1.5, 0.7, 0)), (two_carried, (0.3, 0.2, 1)), (ring, (0.9, 1.1, 5))]
REWRITTEN = {logistic, two_carried, transcendental, accumulate_only, nested, reads_body_temp_after, float_power}


def _central(f, args, i, h=1e-6):
    lo, hi = list(args), list(args)
    lo[i] -= h
    hi[i] += h
    return (f(*hi) - f(*lo)) / (2 * h)


@pytest.mark.parametrize("f, args", CASES, ids=[f"{c[0].__name__}-{c[1][2]}" for c in CASES])
def test_compiled_loop_gradient_equals_python_mode_and_central_differences(f, args):
    gn = funcgrad.value_and_grad(f, argnums=(0, 1), jit="auto")
    v, g = gn(*args)
    assert list(gn.cache.values())[0].mode == "njit"
    vp, gp = funcgrad.value_and_grad(f, argnums=(0, 1), mode="python")(*args)
    assert v == pytest.approx(f(*args), rel=1e-13, abs=1e-15)
    for i in range(2):
        assert g[i] == pytest.approx(gp[i], rel=1e-11, abs=1e-13)
        assert g[i] == pytest.approx(_central(f, args, i), rel=1e-6, abs=1e-9)
    src = funcgrad.source(gn)
    assert ("(local derivatives preaccumulated)" in src) == (f in REWRITTEN), src


def test_the_rewrite_keeps_loops_of_arrays_statement_by_statement():
    def f(w, n):
        x = np.ones(3)
        for _ in range(n):
            x = np.tanh(w * x)
        return np.sum(x)

    gn = funcgrad.grad(f, jit="auto")
    w = np.array([0.5, -0.3, 0.8])
    g = gn(w, 5)
    assert "preaccumulated" not in funcgrad.source(gn)
    np.testing.assert_allclose(g, funcgrad.grad(f, mode="python")(w, 5), rtol=1e-12)


def test_second_order_through_a_compiled_scalar_loop():
    # grad of grad reads the generated reverse code again: the preaccumulated form must differentiate too
    def f(a):
        x = a
        for _ in range(8):
            x = x - 0.1 * np.sin(x) * a
        return x

    d2 = funcgrad.grad(funcgrad.grad(f))
    h = 1e-4
    g = funcgrad.grad(f, mode="python")
    assert d2(0.7) == pytest.approx((g(0.7 + h) - g(0.7 - h)) / (2 * h), rel=1e-6)
