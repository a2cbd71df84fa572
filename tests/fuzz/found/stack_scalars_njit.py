# Found by tests/fuzz. np.stack of scalars: right in auto/python/jit=False, but njit
# fails with a Numba TypingError: no implementation of stack(UniTuple(float64 x 2)).
import numpy as np

def f(x, A, n):
    return np.sum(np.stack([x, 2.0 * x]))

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
