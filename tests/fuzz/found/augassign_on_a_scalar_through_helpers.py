# Found by tests/fuzz (bad refusal, every mode). '-=' on a float a helper returned inside a
# tuple was refused as an in-place write into an array another name holds: the rank of
# np.ones((1,)) * p9 @ (np.ones((1,)) * p9) was unknown (np.ones was not followed), so the
# float p9 was taken for a possible array. A float rebinds under '-='; no array is written.
import math

import numpy as np


def h1(p2):
    s4 = p2
    return math.exp(math.tanh(p2)), s4


def h8(p9):
    p9 -= math.cos(np.ones((1,)) * p9 @ (np.ones((1,)) * p9))
    return p9 * np.float64(2.0)


def f(x, n):
    def g12(p13, p14):
        p13, p14 = (p13 + p14, p13)
        return h8(h1(p14)[1]) + p14 * p13
    return g12(x, x)

# ---- the arguments it fails at ----
ARGNUMS = (0,)
INPLACE = False


ARGS = (['f', 'i'], 0, 2)   # argument kinds, seed, loop count: tests/fuzz/check.py args_from
