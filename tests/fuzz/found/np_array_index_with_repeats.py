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


def make_args():
    rng = np.random.RandomState(0)
    out = []
    for k in ['f', (3,), 'i']:
        if k == "f":
            out.append(float(rng.uniform(-1.0, 1.0)))
        elif k == "i":
            out.append(2)
        else:
            out.append(rng.uniform(-1.0, 1.0, size=k))
    return tuple(out)
