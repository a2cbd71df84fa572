# Found by tests/fuzz (wrong value, every mode: auto, python, njit, jit=False).
# A tuple assignment inside a loop is lowered as two sequential assignments: the
# second right-hand side reads the new x instead of the old one.
# Plain Python: 0.0420..., funcgrad: 0.1852... (at make_args()).
import numpy as np

def f(x, y, n):
    for i in range(n):
        x, y = y, x * y
    return x

# ---- the arguments it fails at ----
ARGNUMS = (0, 1)
INPLACE = False


ARGS = (['f', 'f', 'i'], 0, 2)   # argument kinds, seed, loop count: tests/fuzz/check.py args_from
