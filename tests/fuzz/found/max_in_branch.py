# Found by tests/fuzz (exception while transforming, every mode): KeyError: '_v1'
# from funcgrad/source/reverse.py (_rev_if -> _zero) for np.max inside an if.
# Same family as max_in_loop.py (np.max inside a loop: KeyError '_v3').
import numpy as np

def f(x, A, n):
    if n == 0:
        x = np.max(A * x)
    return x

# ---- the arguments it fails at ----
ARGNUMS = (0, 1)
INPLACE = False


ARGS = (['f', (3,), 'i'], 0, 2)   # argument kinds, seed, loop count: tests/fuzz/check.py args_from
