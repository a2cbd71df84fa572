# Found by tests/fuzz (bad refusal, every mode). '-=' on a helper's parameter that holds,
# through a second helper's returned tuple, the array another helper's parameter holds:
# the refusal named the inlined variables 'h1___ret_1' and 'g12_p14' instead of the
# user's 'p9' (in h8) and 'p14' (in g12).
import numpy as np


def h1(p2):
    s4 = p2
    return np.sum(p2), s4


def h8(p9):
    p9 -= np.cos(p9)
    return np.sum(p9)


def f(x, n):
    def g12(p13, p14):
        p13, p14 = (p13 + p14, p13)
        return h8(h1(p14)[1]) + np.sum(p14 * p13)
    y = x * 1.0
    return g12(y, y)

# ---- the arguments it fails at ----
ARGNUMS = (0,)
INPLACE = True


ARGS = ([(3,), 'i'], 0, 2)   # argument kinds, seed, loop count: tests/fuzz/check.py args_from
