# funcgrad fuzz: FAILURE in mode(s) auto,python,njit,nojit: wrong-value
#   value 1.0555845500393106, plain Python gives np.float64(-1.9755605653859294)
#   auto: FAILURE wrong-value value 1.0555845500393106, plain Python gives np.float64(-1.9755605653859294)
#   python: FAILURE wrong-value value np.float64(1.0555845500393106), plain Python gives np.float64(-1.9755605653859294)
#   njit: FAILURE wrong-value value 1.0555845500393106, plain Python gives np.float64(-1.9755605653859294)
#   nojit: FAILURE wrong-value value np.float64(1.0555845500393106), plain Python gives np.float64(-1.9755605653859294)
# program 1115 of FUZZ_SEED=1000
# features drawn (before shrinking): abs, augassign, broadcast, clip, div, dot, early_return, elementwise, elif, else, enumerate, for_rows, helpers, if, math, matmul, max_min, maximum, neg_step, pow, prod, reduce, reshape, stack, stack_scalars, ternary, tuple_assign, tuple_helpers, where
# reproduce: check_program(open(__file__).read(), make_args(), ARGNUMS)  (tests/fuzz/check.py)
import math
import numpy as np

def f(x, A, n):
    if n > 1:
        return x
    for r17 in A:
        A = (np.ones((1, 2)) * r17).reshape((2,))
    return np.sum(A)


# ---- the arguments it fails at ----
ARGNUMS = (0, 1)


def make_args():
    rng = np.random.RandomState(35332)
    out = []
    for k in ['f', (2,), 'i']:
        if k == "f":
            out.append(float(rng.uniform(-1.0, 1.0)))
        elif k == "i":
            out.append(1)
        else:
            out.append(rng.uniform(-1.0, 1.0, size=k))
    return tuple(out)
