# Found by tests/fuzz (exception while transforming, every mode): KeyError: '_v3'
# from funcgrad/source/reverse.py for np.max inside a loop.
import numpy as np

def f(x, A, n):
    s = 0.0
    for i in range(n):
        s = s + np.max(A * x)
    return s

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
