# Found by tests/fuzz: a straight-line swap gives a wrong VALUE in every mode.
# The tuple assignment is lowered sequentially: x = s5 is done first, then s5 = x
# reads the new x (plain Python returns x**2, funcgrad returns x).
# funcgrad fuzz: FAILURE in mode(s) auto,python,njit,nojit: wrong-value
#   value 0.5314798122439275, plain Python gives 0.28247079082284043
#   auto: FAILURE wrong-value value 0.5314798122439275, plain Python gives 0.28247079082284043
#   python: FAILURE wrong-value value 0.5314798122439275, plain Python gives 0.28247079082284043
#   njit: FAILURE wrong-value value 0.5314798122439275, plain Python gives 0.28247079082284043
#   nojit: FAILURE wrong-value value 0.5314798122439275, plain Python gives 0.28247079082284043
# program 2008 of FUZZ_SEED=2000
# features drawn (before shrinking): abs, clip, div, dot, elementwise, helpers, loop_index, math, matmul, neg_index, pow, swap, ternary
# reproduce: check_program(open(__file__).read(), make_args(), ARGNUMS)  (tests/fuzz/check.py)
import math
import numpy as np

def f(x, A, B, n):
    s5 = x ** 2
    s5, x = (x, s5)
    return x


# ---- the arguments it fails at ----
ARGNUMS = (0, 1, 2)


ARGS = (['f', (2, 2), (1, 1, 1), 'i'], 18776, 1)   # argument kinds, seed, loop count: tests/fuzz/check.py args_from
