# Found by tests/fuzz: 2-D @ 3-D matmul under njit: Numba TypingError
# (no implementation of _impl(array 2d, array 3d)); the other modes are right here because
# nothing differentiated flows through the product. See also matmul_3d_3d.py.
# funcgrad fuzz: FAILURE in mode(s) njit: TypingError
#   Failed in nopython mode pipeline (step: nopython frontend)
#   auto: RIGHT  
#   python: RIGHT  
#   njit: FAILURE TypingError Failed in nopython mode pipeline (step: nopython frontend)
#   nojit: RIGHT  
#   Failed in nopython mode pipeline (step: nopython frontend)
#   No implementation of function Function(<intrinsic _impl>) found for signature:
#    
#    >>> _impl(array(float64, 2d, C), array(float64, 3d, C))
#    
#   There are 2 candidate implementations:
#    - Of which 2 did not match due to:
#    Intrinsic in function 'dot_2_impl.<locals>._impl': File: numba/np/linalg.py: Line 603.
#      With argument(s): '(array(float64, 2d, C), array(float64, 3d, C))':
#     Rejected as the implementation raised a specific error:
#       TypingError: '@': inputs must have compatible dimensions
#     raised from /work/wt-fuzz/.venv/lib/python3.11/site-packages/numba/np/linalg.py:633
#   
#   During: resolving callee type: Function(<intrinsic _impl>)
#   During: typing of call at /work/wt-fuzz/.venv/lib/python3.11/site-packages/numba/np/linalg.py (644)
#   
# program 2009 of FUZZ_SEED=2000
# features drawn (before shrinking): for_range, matmul, matmul3d, methods, pow, reduce
# reproduce: check_program(open(__file__).read(), make_args(), ARGNUMS)  (tests/fuzz/check.py)
import math
import numpy as np

def f(x, A, B, n):
    x = (np.ones((2, 3)) @ np.ones((3, 3, 1))).sum()
    return x


# ---- the arguments it fails at ----
ARGNUMS = (0, 1, 2)


ARGS = (['f', (3, 2, 1), (3,), 'i'], 35679, 3)   # argument kinds, seed, loop count: tests/fuzz/check.py args_from
