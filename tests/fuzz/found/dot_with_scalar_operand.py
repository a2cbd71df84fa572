# Found by tests/fuzz. np.dot(x, A) with a float x and an array A (valid NumPy: a scaling):
# python, jit=False: ValueError 'matmul: Input operand 0 does not have enough dimensions'
#   (np.dot is lowered to matmul);
# auto, njit: AttributeError "'Float' object has no attribute 'dtype'" from the dot overload
#   in kernels/cpu.py (_dot_impl), raised inside Numba's typing.
# (The fuzzer met it through list_index_in_loop.py: B[[0]] read as B[0] made a scalar.)
import numpy as np

def f(x, A, n):
    for i in range(n):
        x = x + np.sum(np.dot(x, A))
    return x

# ---- the arguments it fails at ----
ARGNUMS = (0, 1)
INPLACE = False


ARGS = (['f', (3,), 'i'], 0, 2)   # argument kinds, seed, loop count: tests/fuzz/check.py args_from
