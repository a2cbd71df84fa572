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


ARGS = (['f', (3,), 'i'], 0, 2)   # argument kinds, seed, loop count: tests/fuzz/check.py args_from
