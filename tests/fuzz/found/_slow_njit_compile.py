# Found by tests/fuzz: mode="njit" (and "auto") did not finish within 120 s on a loaded 2-core
# machine; the stack dump shows Numba still compiling (numba/core/lowering.py, typing a kernel
# called from the generated function). python and jit=False are right in ~2 s.
# Named with a leading underscore so tests/test_fuzz_found.py skips it: it is a compile-time
# budget problem to look at, not (yet) a wrong answer.
# funcgrad fuzz: FAILURE in mode(s) ?: timeout
#   no answer in 120.0 s (hang or endless compile)
# program 3063 of FUZZ_SEED=3000
# features: augassign, continue, div, elementwise, for_n, maximum, methods, pow, reduce, reversed_range, ternary
# reproduce: check_program(open(__file__).read(), make_args(), ARGNUMS)  (tests/fuzz/check.py)
import math

import numpy as np


def f(x, n):
    for i1 in range(1, n + 1):
        for i2 in range(0, -1, -1):
            if ((0.25 if x < -0.2 else 0.5) if n > 1 else (x if i1 % 2 == 0 else x)) < -0.2:
                continue
            s3 = ((np.maximum((np.ones((1, 2, 3)) * x), x)).sum() + i2)
            x = ((0.5 / (1.5 + (np.sin(s3)) * (np.sin(s3))))) ** 3
        x += x
    return np.sin(x)


# ---- the arguments it fails at ----
ARGNUMS = (0,)


ARGS = (['f', 'i'], 36004, 3)   # argument kinds, seed, loop count: tests/fuzz/check.py args_from
