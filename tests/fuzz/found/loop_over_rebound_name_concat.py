# funcgrad fuzz: FAILURE in mode(s) auto,python,nojit: wrong-value
#   value np.float64(-0.5229485519889538), plain Python gives np.float64(-0.5154424707726589)
#   auto: FAILURE wrong-value value np.float64(-0.5229485519889538), plain Python gives np.float64(-0.5154424707726589)
#   python: FAILURE wrong-value value np.float64(-0.5229485519889538), plain Python gives np.float64(-0.5154424707726589)
#   njit: REFUSED CompileError /tmp/funcgrad-fuzz-c_4_hjxh/fz_0efd864e8b3d.py:8: Numba cannot compile this function in nopython mode (tanh has no nopython implementation for (UniTup
#   nojit: FAILURE wrong-value value np.float64(-0.5229485519889538), plain Python gives np.float64(-0.5154424707726589)
# program 1078 of FUZZ_SEED=1000
# features drawn (before shrinking): abs, concatenate, div, dot, elementwise, else, fancy_index, fancy_np_array, for_rows, helpers, if, index, loop_index, math, matmul, matmul3d, max_min, maximum, methods, prod, reduce, reduce_axis, reshape, reversed_range, stack, stack_scalars, swap, ternary, tuple_assign
# reproduce: check_program(open(__file__).read(), make_args(), ARGNUMS)  (tests/fuzz/check.py)
import math
import numpy as np

def f(x, n):
    x, a8 = (x, np.stack([np.ones((3,)), np.ones((3,)), [0.7, 0.7, x]]))
    for r10 in a8:
        a8 = np.concatenate((np.min(np.maximum(np.ones((2, 3, 1)) * x, np.ones((2, 3, 1)) * x), axis=-1), r10 @ (np.ones((1, 3, 3)) * x)))
        s11 = np.prod(np.tanh([np.ones((3, 3)) * x @ r10[np.array([0, 1, 2])], np.ones((3,)) * x @ (np.ones((3, 3)) * x), np.minimum(a8[n], x)]))
        x, s11 = (x + s11, x)
    return x


# ---- the arguments it fails at ----
ARGNUMS = (0,)


def make_args():
    rng = np.random.RandomState(12423)
    out = []
    for k in ['f', 'i']:
        if k == "f":
            out.append(float(rng.uniform(-1.0, 1.0)))
        elif k == "i":
            out.append(0)
        else:
            out.append(rng.uniform(-1.0, 1.0, size=k))
    return tuple(out)
