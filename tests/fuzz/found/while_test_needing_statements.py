# Found by tests/fuzz (wrong value, every mode). A while loop whose test needs statements
# before it can be evaluated (a conditional expression, here `(p8 if k9 > 1 else p8)`; an
# inlined helper with a branch does the same) evaluated them once, before the loop: every
# later test read the first iteration's value, so the loop ran on (4.795 instead of 4.649).
import numpy as np


def h1(p2):
    s3 = 0.25
    s5 = np.ones((3,)) @ np.mean(np.ones((2, 3)) * p2, axis=0)
    return (s5, s3)


def h6(p7, p8):
    p8, p7 = (p7, p8 - p7)
    k9 = 0
    while k9 < 3 and (p8 if k9 > 1 else p8) < 0.0:
        k9 += 1
        p8 = -p8 - p8 if k9 % 2 == 0 else np.tanh(p7 * k9)
    return (h1(p7)[0] + p8, -p7 ** 3)


def f(x, n):
    s10 = h6(x, 0.5)[0]
    return s10

# ---- the arguments it fails at ----
ARGNUMS = (0,)
INPLACE = False


def make_args():
    return (-0.7654434769876417, 0)
