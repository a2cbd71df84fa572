# Found by tests/fuzz. A[np.array([1, 1])] with a repeated index:
# auto, python, jit=False: wrong gradient, d/dA = [0, 1, 0] instead of [0, 2, 0]
#   (the adjoint assigns instead of accumulating, so repeats drop contributions);
# njit: Numba TypingError, no implementation of stack(UniTuple(Literal[int](1) x 2))
#   (np.array of an int list is lowered to stack, which has no int overload).
import numpy as np

def f(x, A, n):
    return np.sum(A[np.array([1, 1])])

# ---- the arguments it fails at ----
ARGNUMS = (0, 1)
INPLACE = False


ARGS = (['f', (3,), 'i'], 0, 2)   # argument kinds, seed, loop count: tests/fuzz/check.py args_from
