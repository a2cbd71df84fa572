# Found by tests/fuzz (CI run, seed 65535): auto and njit raised Numba's internal
# "ValueError: The truth value of an array with more than one element is ambiguous"
# (numba/core/ir.py __eq__): constant index arrays (A[[0, 0]], A[np.array([1, 0])]) were
# passed to the generated code as global arrays, which Numba compares while compiling.
# Small constant index arrays are now written into the generated code as np.array([...]).
import math

import numpy as np


def f(x, A, B, n):
    def g1(p2):
        p2 = ((p2 / (1.5 + (p2[[0, 1]]) * (p2[[0, 1]]))) / (1.5 + (p2[[0, 0]]) * (p2[[0, 0]])))
        s3 = (np.sin(np.prod(np.tanh((np.ones((2, 3)) * 1.5)))) / (1.5 + 0.25 * 0.25))
        return (np.ones((2, 1, 1)) * s3)
    s4 = -0.7
    s5, a6 = (0.5 + n), np.clip(np.minimum(A[[0, 0]], (np.ones((2, 1, 1)) * s4)), -0.5, 0.6)
    for i7 in range(1, n + 1):
        x, A = a6[1, -1, -1], (((np.ones((1, 2)) * x)).reshape((2, 1, 1)) - (A[::-1] + A[np.array([1, 0])]))
        a6, A = (a6 + A), a6
    return np.sin(x) + np.sum(B) + np.sin(s5) + np.sum(a6)


# ---- the arguments it fails at ----
ARGNUMS = (0, 1, 2)


def make_args():
    rng = np.random.RandomState(0)
    return (0.3, rng.uniform(-1, 1, (2, 1, 1)), rng.uniform(-1, 1, (2, 2, 1)), 2)
