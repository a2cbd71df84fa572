# Found by tests/fuzz (exception, every mode). (2,2,3) @ (3,2):
# auto/python/jit=False: ValueError 'operands could not be broadcast together' in the
# adjoint; njit: Numba TypingError (no matmul _impl for 3d, 2d arrays).
import numpy as np

def f(x, A, B, n):
    return np.sum(A @ B)

# ---- the arguments it fails at ----
ARGNUMS = (0, 1, 2)
INPLACE = False


def make_args():
    rng = np.random.RandomState(0)
    out = []
    for k in ['f', (2, 2, 3), (3, 2), 'i']:
        if k == "f":
            out.append(float(rng.uniform(-1.0, 1.0)))
        elif k == "i":
            out.append(2)
        else:
            out.append(rng.uniform(-1.0, 1.0, size=k))
    return tuple(out)
