# Found by tests/fuzz (exception, every mode). (2,) @ (3,2,2):
# auto/python/jit=False: ValueError 'matmul: Input operand 1 has a mismatch in its core
# dimension 0' in the adjoint; njit: Numba TypingError (no matmul _impl for 1d, 3d arrays).
import numpy as np

def f(x, A, B, n):
    return np.sum(A @ B)

# ---- the arguments it fails at ----
ARGNUMS = (0, 1, 2)
INPLACE = False


ARGS = (['f', (2,), (3, 2, 2), 'i'], 0, 2)   # argument kinds, seed, loop count: tests/fuzz/check.py args_from
