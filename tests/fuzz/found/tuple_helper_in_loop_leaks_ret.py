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


ARGS = (['f', (3,), 'i'], 0, 2)   # argument kinds, seed, loop count: tests/fuzz/check.py args_from
