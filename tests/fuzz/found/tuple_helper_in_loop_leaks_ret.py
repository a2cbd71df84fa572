# Found by tests/fuzz (bad refusal, every mode). A helper with a branch that returns a
# tuple, called inside a loop, is refused with a message that leaks an internal name:
#   fz_....py:6: '__ret' is bound to a container or function inside a loop or branch
#   hint: only arrays and numbers can be assigned inside loops and branches
# The user never wrote '__ret' (and helpers returning tuples are documented).
import numpy as np

def h(p):
    if p < 0.0:
        pass
    return p, p

def f(x, A, n):
    for i in range(n):
        x = h(x)[1]
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
