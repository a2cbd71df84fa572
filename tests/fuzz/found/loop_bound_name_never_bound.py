# funcgrad fuzz: FAILURE in mode(s) auto,python,nojit: UnboundLocalError
#   cannot access local variable 'r2' where it is not associated with a value
#   auto: FAILURE UnboundLocalError cannot access local variable 'r2' where it is not associated with a value
#   python: FAILURE UnboundLocalError cannot access local variable 'r2' where it is not associated with a value
#   njit: REFUSED CompileError /tmp/funcgrad-fuzz-77b40lq_/fz_d1caedaecc3b.py:7: Numba cannot compile this function in nopython mode (a value of a type nopython mode does not suppor
#   nojit: FAILURE UnboundLocalError cannot access local variable 'r2' where it is not associated with a value
#     File "/work/wt-fuzzrun/tests/fuzz/check.py", line 277, in _run_mode
#       return vg(*_copy_args(args))
#              ^^^^^^^^^^^^^^^^^^^^^
#     File "/work/wt-fuzzrun/funcgrad/api.py", line 142, in wrapper
#       return method(*args, **kwargs)
#              ^^^^^^^^^^^^^^^^^^^^^^^
#     File "/work/wt-fuzzrun/funcgrad/api.py", line 725, in __call__
#       built, (outs, grads) = self._invoke(built, key, "fn", (*leaves, *cap, *seeds), len(leaves))
#                              ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
#     File "/work/wt-fuzzrun/funcgrad/api.py", line 385, in _invoke
#       return built, fn(*call_args)
#                     ^^^^^^^^^^^^^^
#     File "/tmp/fzc-a/generated/funcgrad_generated_f_vjp_2287855ea352f1c9.py", line 69, in f_vjp
#       d_r2 = K.zeros_like(r2)
#                           ^^
#   UnboundLocalError: cannot access local variable 'r2' where it is not associated with a value
# program 799 of FUZZ_SEED=340
# features drawn (before shrinking): continue, div, early_return, enumerate, if, index, math, matmul, neg_index, return_in_loop, ternary
# reproduce: check_program(open(__file__).read(), make_args(), ARGNUMS)  (tests/fuzz/check.py)
import math
import numpy as np

def f(x, A, B, n):
    if n == 0:
        for i1, r2 in A:
            return r2
    return x


# ---- the arguments it fails at ----
ARGNUMS = (0, 1, 2)


def make_args():
    rng = np.random.RandomState(24963)
    out = []
    for k in ['f', (1, 2), (2, 1, 2), 'i']:
        if k == "f":
            out.append(float(rng.uniform(-1.0, 1.0)))
        elif k == "i":
            out.append(1)
        else:
            out.append(rng.uniform(-1.0, 1.0, size=k))
    return tuple(out)
