"""Small functions the per-pass tests transform (they must live in a file: passes read source)."""
import numpy as np

DT = 1e-3


def straight(x, w):
    h = np.tanh(x @ w)
    return np.sum(h * 2.0)


def looped(a, x0, n):
    x = x0
    for t in range(n):
        x = x + DT * (a * x - x * x)
    return x


def early(x, n):
    s = 0.0
    for i in range(n):
        s = s + x
        if s > 2.0:
            return s * 3.0
    return s


def swap(a, b):
    a, b = b, a + b
    return a * b


def with_try(x):
    try:
        y = x
    except Exception:
        y = x
    return y


def inactive_call(x, c):
    k = np.argmax(c)
    return np.sum(x * k)


def writes(x):
    y = x * 1.0
    y[0] = x[1] * 2.0
    return np.sum(y)
