# Found by tests/fuzz (exception, every mode). (2,2,3) @ (3,2):
# auto/python/jit=False: ValueError 'operands could not be broadcast together' in the
# adjoint; njit: Numba TypingError (no matmul _impl for 3d, 2d arrays).
import numpy as np

def f(x, A, B, n):
    return np.sum(A @ B)

# ---- the arguments it fails at ----
ARGNUMS = (0, 1, 2)
INPLACE = False


ARGS = (['f', (2, 2, 3), (3, 2), 'i'], 0, 2)   # argument kinds, seed, loop count: tests/fuzz/check.py args_from
