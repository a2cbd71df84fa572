# Found by tests/fuzz (exception while transforming, every mode): KeyError: '_v3'.
# np.max(..., axis=0) inside a loop (same family as max_in_loop.py).
import numpy as np

def f(x, A, n):
    for i in range(n):
        A = np.max(A, axis=0) * x + A
    return np.sum(A)

# ---- the arguments it fails at ----
ARGNUMS = (0, 1)
INPLACE = False


def make_args():
    rng = np.random.RandomState(0)
    out = []
    for k in ['f', (2, 3), 'i']:
        if k == "f":
            out.append(float(rng.uniform(-1.0, 1.0)))
        elif k == "i":
            out.append(2)
        else:
            out.append(rng.uniform(-1.0, 1.0, size=k))
    return tuple(out)
