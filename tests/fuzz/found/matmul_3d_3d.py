# Found by tests/fuzz (exception, every mode). Batched matmul (2,2,3) @ (2,3,2):
# auto/python/jit=False: ValueError 'operands could not be broadcast together' from the
# adjoint's unbroadcast; njit: Numba TypingError (no matmul _impl for 3d, 3d arrays).
import numpy as np

def f(x, A, B, n):
    return np.sum(A @ B)

# ---- the arguments it fails at ----
ARGNUMS = (0, 1, 2)
INPLACE = False


ARGS = (['f', (2, 2, 3), (2, 3, 2), 'i'], 0, 2)   # argument kinds, seed, loop count: tests/fuzz/check.py args_from
