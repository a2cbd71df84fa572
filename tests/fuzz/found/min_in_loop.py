# Found by tests/fuzz (exception while transforming, every mode): KeyError: '_v3'.
# np.min inside a loop (same family as max_in_loop.py / max_in_branch.py).
import numpy as np

def f(x, A, n):
    for i in range(n):
        x = x + np.min(A * x)
    return x

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
