"""Conditions known while transforming (literals, static arguments, module flags) decide their branch then.

An ``if`` whose condition is made of literals (``if 0.25 < -0.2:``), a conditional expression and a
``while`` loop with such a condition keep only the code that runs. The code that cannot run must leave
nothing behind: whole-function Numba prunes a branch whose condition is constant, so a list the gradient
kept for it had no type, and the program was refused ("a branch whose condition is constant never runs",
fuzz seed 21849). A name bound only in the code that never runs stays unbound, as in Python.

Every program runs plainly (the value oracle) and through funcgrad in every mode; values must match
Python and gradients central differences.
"""
import re

import numpy as np
import pytest

import funcgrad
from funcgrad.errors import UnsupportedSyntaxError
from tests.support import assert_value_and_gradient, tagged_line

MODES = [dict(mode="auto"), dict(mode="python"), dict(mode="njit"), dict(jit=False)]
MODE_IDS = ["auto", "python", "njit", "nojit"]

USE_SHORTCUT = False     # a module flag: fixed into the generated code like a literal
shadowed = 5.0           # a module number named like a local bound only in code that never runs


def dead_branch_rebinds(x, A):
    # the program of the issue: the dead branch rebinds x and A to values of other types
    for i in range(3):
        if 0.25 < -0.2:          # a condition made only of literals: never true
            x, A = 1, [2.0]      # rebinds names to values of other types
        x = x * np.sum(A) + 1.0
    return x


def dead_return_in_loop(x, A, n):
    # the program fuzz seed 21849 reduced to: the return in the dead branch became a flag set there and tested
    # after the loop, and Numba pruned the branch it guards, whose gradient tapes then had no type
    for i in range(3):
        if 0.25 < -0.2:
            x, A = ((x if -1.2 > -0.2 else 2.0) + n), (np.ones((9, 1)) * x).reshape((3, 3, 1))
            if A[1, i, -1] < -0.2:
                return np.cos(np.prod(np.tanh(np.ones((3, 3, 1)) * x)))
    s = A[n % 3, -2, 0]
    return x + np.sum(np.sin(A) * A) + np.sin(s)


def if_true_and_if_false_in_loop(x, A):
    for i in range(4):
        if True:
            x = np.sin(x) + np.sum(A * x)
        if 1 > 2:
            A = A * 0.0
            continue
        else:
            A = A * 0.5
    return x + np.sum(A * A)


def literal_conditional_expression(x, A):
    for i in range(3):
        x = (x * np.sum(A) if 1.5 > 0.5 else 0.0) + (np.sum(A) if "a" == "b" else x * x)
    return x + np.sum(np.tanh(A) if not 0 else A)


def while_never_runs(x, A):
    while 0 > 1:
        x = np.sum(np.tanh(A * x))
        A = [x]
    for i in range(2):
        while 2 < 1:
            x = 0.0
            break
        x = x * np.sum(A)
    return x + np.sum(A)


def while_true_with_break(x, A):
    # `while True:` stays a loop: its break is how it ends
    i = 0
    while True:
        x = x * np.sum(A) + 1.0
        i += 1
        if i > 2:
            break
    return x


def nested_not_and(x, A):
    for i in range(3):
        if x > 100.0:            # decided at run time; the literal condition inside it is not
            x = x * 0.5
            if not (2 < 1 and 3 > 2):
                x = x + np.sum(A)
            else:
                return np.sum(A)
        if not (2 < 1 and 3 > 2):
            x = x * np.sum(np.sin(A))
        else:
            A = 1
            return x
    return x


def chained_literal_comparison(x, A):
    for i in range(3):
        if 0 < 1 < 0.5:          # `0 < 1 and 1 < 0.5`: false
            return np.sum(np.tanh(A * x))
        if -1 < 0 <= 0 != 2:
            x = x * np.sum(A) + 1.0
    return x


def _helper(x, A):
    for k in range(2):
        if 3 * 0.5 > 2 ** 3:
            return np.sum(np.tanh(A * x))
        x = x * np.sum(A) + 0.5
    if -1 > 1 or "x" == "y":
        return x * 0.0
    return x


def literal_condition_in_helper(x, A):
    for i in range(3):
        x = _helper(x, A) * 0.5
    return x


def module_flag_in_loop(x, A):
    for i in range(3):
        if USE_SHORTCUT:
            return np.sum(np.tanh(A * x))
        x = x * np.sum(A) + 1.0
    return x


def none_argument_in_loop(x, A, b=None):
    for i in range(3):
        if b is not None:
            return np.sum(np.tanh(A * x))
        x = x * np.sum(A) + 1.0
    return x


def _args():
    return (0.3, np.array([0.5, 0.25, -0.4]))


CASES = [
    (dead_branch_rebinds, (1.5, np.array([0.5, 0.25])), (0, 1)),
    (dead_return_in_loop, (-0.4, np.linspace(-0.9, 0.8, 9).reshape(3, 3, 1), 3), (0, 1)),
    (if_true_and_if_false_in_loop, _args(), (0, 1)),
    (literal_conditional_expression, _args(), (0, 1)),
    (while_never_runs, _args(), (0, 1)),
    (while_true_with_break, _args(), (0, 1)),
    (nested_not_and, _args(), (0, 1)),
    (chained_literal_comparison, _args(), (0, 1)),
    (literal_condition_in_helper, _args(), (0, 1)),
    (module_flag_in_loop, _args(), (0, 1)),
    (none_argument_in_loop, _args(), (0, 1)),
]
IDS = [f.__name__ for f, _, _ in CASES]


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_value_and_gradient_in_every_mode(case, kw):
    f, args, argnums = case
    assert_value_and_gradient(f, args, argnums, **kw)


def test_generated_code_has_no_dead_branch():
    src = funcgrad.source(funcgrad.grad(dead_branch_rebinds), 1.5, np.array([0.5, 0.25]))
    assert "0.25" not in src and "2.0" not in src, src
    # the return in the dead branch: neither its value nor the flag that said it fired is left
    src = funcgrad.source(funcgrad.grad(dead_return_in_loop, argnums=(0, 1)), -0.4, np.ones((3, 3, 1)), 3)
    assert "prod" not in src and "tanh" not in src and "_rf" not in src, src
    src = funcgrad.source(funcgrad.grad(while_never_runs), *_args())
    assert not re.search(r"^\s*while\b", src, re.M) and "tanh" not in src, src
    assert re.search(r"^\s*while\b", funcgrad.source(funcgrad.grad(while_true_with_break), *_args()), re.M)
    # a helper inlined in a loop, a module flag, a None argument: their dead returns leave nothing either
    # (b=None passed: funcgrad.source does not fill in a parameter's default, "name 'b' is not defined")
    for f, args in ((literal_condition_in_helper, _args()), (module_flag_in_loop, _args()),
                    (none_argument_in_loop, _args() + (None,))):
        src = funcgrad.source(funcgrad.grad(f), *args)
        assert "tanh" not in src and "_rf" not in src, src


def bound_only_in_dead_branch(x):
    if 1 > 2:
        z = x
    return x + z  # LINE: read-after-if


def bound_only_in_dead_branch_in_loop(x):
    for i in range(3):
        if not True:
            z = x
        x = x * 2.0
    return x + z  # LINE: read-after-loop


def shadows_a_module_name(x):
    for i in range(2):
        if 1 > 2:
            shadowed = x
        x = np.sin(x)
    return x * shadowed  # LINE: read-shadowed


def closure_reads_name_bound_only_in_dead_branch(x):
    def scaled(y):
        return y * scale  # LINE: read-in-closure

    if 0.5 > 1.5:
        scale = 3.0
    return scaled(x)


def _line(tag):
    return tagged_line(__file__, tag)


@pytest.mark.parametrize("kw", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("f,tag,name,exc", [
    (bound_only_in_dead_branch, "read-after-if", "z", UnboundLocalError),
    (bound_only_in_dead_branch_in_loop, "read-after-loop", "z", UnboundLocalError),
    (shadows_a_module_name, "read-shadowed", "shadowed", UnboundLocalError),
    (closure_reads_name_bound_only_in_dead_branch, "read-in-closure", "scale", NameError),
], ids=["if", "loop", "shadows-module-name", "closure"])
def test_name_bound_only_in_dead_branch_stays_unbound(f, tag, name, exc, kw):
    # Python makes the name local (it is assigned in the function), so it never reads the module's name,
    # and reading it before a value is bound raises; funcgrad refuses at the same line
    with pytest.raises(exc):
        f(0.5)
    with pytest.raises(UnsupportedSyntaxError) as ei:
        funcgrad.grad(f, **kw)(0.5)
    e = ei.value
    assert e.filename == __file__ and e.lineno == _line(tag), str(e)
    assert f"LINE: {tag}" in e.text
    assert f"'{name}'" in str(e) and exc.__name__ in str(e), str(e)
