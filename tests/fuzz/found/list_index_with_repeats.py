# Found by tests/fuzz (exception, every mode). An integer-list index A[[0, 0]] is
# read as the tuple index A[0, 0]: IndexError 'too many indices for array' in
# auto/python/jit=False, a Numba TypingError (getitem(array 1d, UniTuple(int x 2))) in njit.
import numpy as np

def f(x, A, n):
    return np.sum(A[[0, 0]])

# ---- the arguments it fails at ----
ARGNUMS = (0, 1)
INPLACE = False


ARGS = (['f', (3,), 'i'], 0, 2)   # argument kinds, seed, loop count: tests/fuzz/check.py args_from
