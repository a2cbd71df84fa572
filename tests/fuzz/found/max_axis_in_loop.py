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


ARGS = (['f', (2, 3), 'i'], 0, 2)   # argument kinds, seed, loop count: tests/fuzz/check.py args_from
