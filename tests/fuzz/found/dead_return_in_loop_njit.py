# funcgrad fuzz: FAILURE in mode(s) njit: bad-refusal
#   CompileError without the user's file:line: Numba cannot compile this function in nopython mode (a value of a type nopython mode does not support)
#   auto: RIGHT  
#   python: RIGHT  
#   njit: FAILURE bad-refusal CompileError without the user's file:line: Numba cannot compile this function in nopython mode (a value of a type nopython mode does not support)
#   nojit: RIGHT  
#     hint: use jit="auto" (falls back to Python over compiled kernels) or jit="kernels"
# program 370 of FUZZ_SEED=340
# features drawn (before shrinking): augassign, clip, concatenate, div, dot, early_return, elementwise, enumerate, helpers, keepdims, matmul, methods, pow, reduce_axis, reshape, return_in_loop, reversed_range, swap, ternary, tuple_assign, while
# reproduce: check_program(open(__file__).read(), make_args(), ARGNUMS)  (tests/fuzz/check.py)
import math
import numpy as np

def f(x, A, B, n):
    for i16 in range(0, 1, 1):
        if 0.25 < 0.2:
            return x / (x * x)
    return x


# ---- the arguments it fails at ----
ARGNUMS = (0, 1, 2)


def make_args():
    rng = np.random.RandomState(16287)
    out = []
    for k in ['f', (3, 3), (3, 2), 'i']:
        if k == "f":
            out.append(float(rng.uniform(-1.0, 1.0)))
        elif k == "i":
            out.append(3)
        else:
            out.append(rng.uniform(-1.0, 1.0, size=k))
    return tuple(out)
