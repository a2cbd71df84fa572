# Found by tests/fuzz. np.stack of scalars: right in auto/python/jit=False, but njit
# fails with a Numba TypingError: no implementation of stack(UniTuple(float64 x 2)).
import numpy as np

def f(x, A, n):
    return np.sum(np.stack([x, 2.0 * x]))

# ---- the arguments it fails at ----
ARGNUMS = (0, 1)
INPLACE = False


ARGS = (['f', (3,), 'i'], 0, 2)   # argument kinds, seed, loop count: tests/fuzz/check.py args_from
