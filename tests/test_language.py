"""The Python people really write (issue 15): every construct in every mode, and refusals in user terms.

Each program in tests/fixtures/language.py runs plainly (the value oracle) and
through funcgrad with ``jit`` auto, "kernels" (Python over compiled kernels),
"whole" (whole-function Numba) and False; gradients are checked against central
differences in float64.
"""
import numpy as np
import pytest

import funcgrad
from funcgrad.errors import CompileError
from funcgrad.testing import numerical_vjp
from tests.fixtures import language as L

JITS = [True, "kernels", "whole", False]
rng = np.random.default_rng(3)
x3 = rng.normal(size=3)
layers = [(rng.normal(size=(3, 3)), rng.normal(size=3)) for _ in range(3)]

CASES = [
    (L.append_in_constant_loop, (x3,), 0),
    (L.append_over_list, ((x3, x3 * 0.5), x3), (0, 1)),
    (L.prints_and_asserts, (x3,), 0),
    (L.logs, (x3,), 0),
    (L.list_and_generator_comprehensions, (x3,), 0),
    (L.dict_comprehension_and_items, ({"a": x3, "b": x3 * 2.0},), 0),
    (L.helper_defaults_and_keywords, (x3,), 0),
    (L.star_args_and_kwargs, (x3, x3 * 2.0), (0, 1)),
    (L.lambdas_and_partial, (x3,), 0),
    (L.closure_from_helper, (x3,), 0),
    (L.Model(0.5), (x3,), 0),
    (L.Model(0.7).loss, (x3,), 0),
    (L.static_checks, (x3, {"s": 2.0}), 0),
    (L.ranges_slices_ellipsis, (rng.normal(size=(4, 2)),), 0),
    (L.list_of_layers, (layers, x3), (0, 1)),
    (L.size_one_result, (x3,), 0),
    (L.mutable_containers, (x3,), 0),
    (L.map_and_filter, ((x3, x3 * 2.0),), 0),
    (L.helper_with_loop_in_loop, (x3, 3), 0),
    (L.container_in_branch, (x3,), 0),
    (L.container_in_branch, (-np.abs(x3),), 0),
]
IDS = [f"{i:02d}-{getattr(f, '__name__', type(f).__name__)}" for i, (f, _, _) in enumerate(CASES)]
OPAQUE = {"logs"}   # calls Numba cannot compile: "whole" must refuse them at the user's line


@pytest.mark.parametrize("jit", JITS, ids=["auto", "kernels", "whole", "nojit"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_construct_value_and_gradient(case, jit):
    f, args, argnums = case
    nums = (argnums,) if isinstance(argnums, int) else argnums
    name = getattr(f, "__name__", "")
    if jit == "whole" and name in OPAQUE:
        with pytest.raises(CompileError, match=r"language\.py:\d+") as ei:
            funcgrad.value_and_grad(f, argnums=nums, jit=jit)(*args)
        assert "log.debug" in str(ei.value)
        return
    v, g = funcgrad.value_and_grad(f, argnums=nums, jit=jit)(*args)
    want = f(*args)
    np.testing.assert_allclose(v, want, rtol=1e-12, atol=1e-12)
    for k, i in enumerate(nums):
        num = numerical_vjp(lambda *a: np.sum(f(*a)), args, i, 1.0, 1e-6)
        got = g[k]
        for a, b in zip(funcgrad.tree_leaves(got), funcgrad.tree_leaves(num)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_calling_the_transformed_function_like_the_original():
    g = funcgrad.grad(L.keyword_call)
    np.testing.assert_allclose(g(x3, dt=0.1), np.cos(x3) * 0.1 * 2.0)
    np.testing.assert_allclose(g(x3), np.cos(x3) * 0.5 * 2.0)
    np.testing.assert_allclose(g(x3, scale=1.0), np.cos(x3) * 0.5)
    np.testing.assert_allclose(g(x=x3, dt=0.2), np.cos(x3) * 0.2 * 2.0)
    with pytest.raises(TypeError, match=r"^keyword_call\(\) missing 1 required positional argument: 'x'$"):
        g()
    with pytest.raises(TypeError, match=r"^keyword_call\(\) got an unexpected keyword argument 'y'$"):
        g(x3, y=1.0)
    with pytest.raises(TypeError, match=r"^keyword_call\(\) takes from 1 to 2 positional arguments but 3 were given$"):
        g(x3, 0.1, 2.0)          # scale is keyword-only: not filled positionally


def test_range_of_a_float_raises_as_python_does():
    def f(x, n):
        s = 0.0
        for i in range(n):
            s = s + x
        return s
    for jit in JITS:
        with pytest.raises(TypeError):
            funcgrad.grad(f, jit=jit)(1.0, 5.7)
