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


ARGS = (['f', (3,), 'i'], 0, 2)   # argument kinds, seed, loop count: tests/fuzz/check.py args_from
