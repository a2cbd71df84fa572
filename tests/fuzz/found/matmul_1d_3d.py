# Found by tests/fuzz (exception, every mode). (2,) @ (3,2,2):
# auto/python/jit=False: ValueError 'matmul: Input operand 1 has a mismatch in its core
# dimension 0' in the adjoint; njit: Numba TypingError (no matmul _impl for 1d, 3d arrays).
import numpy as np

def f(x, A, B, n):
    return np.sum(A @ B)

# ---- the arguments it fails at ----
ARGNUMS = (0, 1, 2)
INPLACE = False


def make_args():
    rng = np.random.RandomState(0)
    out = []
    for k in ['f', (2,), (3, 2, 2), 'i']:
        if k == "f":
            out.append(float(rng.uniform(-1.0, 1.0)))
        elif k == "i":
            out.append(2)
        else:
            out.append(rng.uniform(-1.0, 1.0, size=k))
    return tuple(out)
