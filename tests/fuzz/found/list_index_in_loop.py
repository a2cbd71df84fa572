# Found by tests/fuzz: an integer-list index with repeats inside a loop fails in EVERY mode
# (auto, python, njit, jit=False) with a Numba TypingError: getitem(array, UniTuple(int x 3)),
# i.e. B[[0, 0, 0]] is read as B[0, 0, 0]. See also list_index_with_repeats.py.
# funcgrad fuzz: FAILURE in mode(s) auto,python,njit,nojit: TypingError
#   Failed in nopython mode pipeline (step: nopython frontend)
#   auto: FAILURE TypingError Failed in nopython mode pipeline (step: nopython frontend)
#   python: FAILURE IndexError too many indices for array: array is 1-dimensional, but 3 were indexed
#   njit: FAILURE TypingError Failed in nopython mode pipeline (step: nopython frontend)
#   nojit: FAILURE IndexError too many indices for array: array is 1-dimensional, but 3 were indexed
#   No implementation of function Function(<built-in function getitem>) found for signature:
#    
#    >>> getitem(array(float64, 1d, C), UniTuple(Literal[int](0) x 3))
#    
#   There are 22 candidate implementations:
#         - Of which 20 did not match due to:
#         Overload of function 'getitem': File: <numerous>: Line N/A.
#           With argument(s): '(array(float64, 1d, C), UniTuple(int64 x 3))':
#          No match.
#         - Of which 1 did not match due to:
#         Overload in function 'GetItemBuffer.generic': File: numba/core/typing/arraydecl.py: Line 209.
#           With argument(s): '(array(float64, 1d, C), UniTuple(int64 x 3))':
#          Rejected as the implementation raised a specific error:
#            NumbaTypeError: cannot index array(float64, 1d, C) with 3 indices: UniTuple(int64 x 3)
#     raised from /work/wt-fuzz/.venv/lib/python3.11/site-packages/numba/core/typing/arraydecl.py:122
#         - Of which 1 did not match due to:
# program 2002 of FUZZ_SEED=2000
# features drawn (before shrinking): break, broadcast, div, early_return, elementwise, fancy_index, fancy_np_array, for_n, helpers, loop_index, maximum, neg_index, neg_step, pow, reduce, reduce_axis, ternary, tuple_assign, where, while
# reproduce: check_program(open(__file__).read(), make_args(), ARGNUMS)  (tests/fuzz/check.py)
import math
import numpy as np

def f(x, A, B, n):
    for i7 in range(1, n):
        s8 = B[[0, 0, 0]]
    return x


# ---- the arguments it fails at ----
ARGNUMS = (0, 1, 2)


ARGS = (['f', (3, 3), (1,), 'i'], 54, 3)   # argument kinds, seed, loop count: tests/fuzz/check.py args_from
