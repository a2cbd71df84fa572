# Companion of while_test_needing_statements.py: the loop's test calls a helper whose
# branch is inlined as statements; they must run before every test, not only the first.
def pos(v):
    if v > 0.0:
        return v * 1.0
    return -v * 0.5


def f(x, n):
    p = x
    k = 0
    while k < 4 + n and pos(p) < 1.5:
        k += 1
        if k == 2:
            continue
        p = p * 2.0 + 0.1
    return p * k

# ---- the arguments it fails at ----
ARGNUMS = (0,)
INPLACE = False


def make_args():
    return (-0.7654434769876417, 1)
