"""Real programs differentiate unedited (issue 15).

Every program in tests/programs/ is written as an autograd user writes it (plain ``import numpy as
np``, helpers with defaults, lists appended in loops, comprehensions, parameter lists and dicts, a
class with a loss method, prints, docstrings, asserts). For each one, in every mode (``jit`` auto,
"python" = Python over compiled kernels, "njit" = the whole function compiled by Numba, and False =
plain Python):

* the value equals the plain program's;
* the gradient agrees with central differences in float64, along a few random directions;
* the gradient equals HIPS autograd's on the same source (imports rewritten to ``autograd.numpy`` and
  ``autograd.scipy``), when autograd is installed;
* a program Numba cannot compile whole (SciPy functions with Python-only kernels, a variable that changes
  type) runs in "auto", and ``jit="njit"`` refuses it with a ``CompileError`` at one of the program's lines.

The "auto" and "njit" runs of the programs marked ``heavy`` (a cold whole-function Numba compile of tens of
seconds) are marked ``sweep``; ``benchmarks/bench_programs.py`` prints every program's cold and warm
first-call times.
"""
import functools
import importlib
import os
import types

import numpy as np
import pytest

import funcgrad
from funcgrad.errors import CompileError
from funcgrad.tree import tree_flatten, tree_unflatten
from tests.programs import NAMES

MODES = ["auto", "python", "njit", False]
MODE_IDS = ["auto", "python", "njit", "nojit"]
_JIT = {"auto": "auto", "python": "kernels", "njit": "whole", False: False}


def load(name):
    return importlib.import_module(f"tests.programs.{name}")


def entry(module, dotted=None):
    obj = module
    for part in (dotted or module.PROGRAM["f"]).split("."):
        obj = getattr(obj, part)
    return obj


def _leaves(tree):
    return tree_flatten(tree)[0]


def _directions(args, argnums, rng):
    """A random direction (unit normal leaves) for each differentiated argument."""
    out = []
    for i in argnums:
        leaves, td = tree_flatten(args[i])
        out.append(tree_unflatten(td, [rng.normal(size=np.shape(v)) if np.ndim(v) else float(rng.normal())
                                       for v in leaves]))
    return out


def _shift(args, argnums, dirs, h):
    args = list(args)
    for i, d in zip(argnums, dirs):
        leaves, td = tree_flatten(args[i])
        args[i] = tree_unflatten(td, [np.asarray(a, float) + h * b if np.ndim(a) else float(a) + h * b
                                      for a, b in zip(leaves, _leaves(d))])
    return tuple(args)


def _dot(grads, dirs):
    return sum(float(np.sum(np.asarray(g) * np.asarray(d)))
               for gt, dt in zip(grads, dirs) for g, d in zip(_leaves(gt), _leaves(dt)))


def check_directional(f, args, kwargs, argnums, grads, n_dirs=3, h=1e-5, seed=0):
    rng = np.random.default_rng(seed)
    for _ in range(n_dirs):
        dirs = _directions(args, argnums, rng)
        fd = (f(*_shift(args, argnums, dirs, h), **kwargs) - f(*_shift(args, argnums, dirs, -h), **kwargs)) / (2 * h)
        got = _dot(grads, dirs)
        assert abs(got - fd) <= 1e-6 * max(1.0, abs(fd)), (got, fd)


@functools.lru_cache(maxsize=None)
def _plain(name):
    """The plain program's value and gradient (jit=False), computed once for comparisons."""
    m = load(name)
    args, kwargs = m.make_inputs()
    nums = m.PROGRAM["argnums"]
    v, g = funcgrad.value_and_grad(entry(m), argnums=nums, jit=False)(*args, **kwargs)
    return v, g


def _cases():
    for name in NAMES:
        heavy = load(name).PROGRAM.get("heavy", False)
        for mode, mid in zip(MODES, MODE_IDS):
            marks = [pytest.mark.sweep] if heavy and mode in ("auto", "njit") else []
            yield pytest.param(name, mode, id=f"{name}-{mid}", marks=marks)


@pytest.mark.parametrize("name,mode", list(_cases()))
def test_program_value_and_gradient(name, mode):
    m = load(name)
    f = entry(m)
    args, kwargs = m.make_inputs()
    nums = m.PROGRAM["argnums"]
    if mode == "njit" and not m.PROGRAM["njit"]:
        with pytest.raises(CompileError) as ei:
            funcgrad.value_and_grad(f, argnums=nums, jit=_JIT[mode])(*args, **kwargs)
        assert os.path.abspath(ei.value.filename) == os.path.abspath(m.__file__), str(ei.value)
        assert f"{os.path.basename(m.__file__)}:" in str(ei.value)
        return
    v, g = funcgrad.value_and_grad(f, argnums=nums, jit=_JIT[mode])(*args, **kwargs)
    want = f(*args, **kwargs)
    np.testing.assert_allclose(v, want, rtol=1e-10, atol=1e-12)
    check_directional(lambda *a, **k: f(*a, **k), args, kwargs, nums, g)
    if mode is not False:
        _, g0 = _plain(name)
        for a, b in zip(_leaves(g), _leaves(g0)):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)


# ----------------------------------------------------------------------------------------- autograd
_AUTOGRAD_IMPORTS = [
    ("from scipy.special import", "from autograd.scipy.special import"),
    ("from scipy.stats import", "from autograd.scipy.stats import"),
    ("from scipy.linalg import", "from autograd.scipy.linalg import"),
    ("import numpy as np", "import autograd.numpy as np"),
]


def _autograd_module(m):
    """The program's own source, with its NumPy/SciPy imports pointed at autograd's wrappers."""
    with open(m.__file__) as fh:
        src = fh.read()
    for a, b in _AUTOGRAD_IMPORTS:
        src = src.replace(a, b)
    mod = types.ModuleType(m.__name__ + "_autograd")
    mod.__file__ = m.__file__
    exec(compile(src, m.__file__, "exec"), mod.__dict__)
    return mod


@pytest.mark.parametrize("name", NAMES)
def test_program_gradient_matches_autograd(name):
    autograd = pytest.importorskip("autograd", reason="autograd not installed")
    m = load(name)
    if m.PROGRAM["autograd"] is not True:
        pytest.skip(m.PROGRAM["autograd"])
    am = _autograd_module(m)
    args, kwargs = am.make_inputs()
    nums = m.PROGRAM["argnums"]
    want = autograd.grad(entry(am), argnum=nums if len(nums) > 1 else nums[0])(*args, **kwargs)
    if len(nums) == 1:
        want = (want,)
    _, got = _plain(name)   # the other modes are compared with this one above
    ga, wa = _leaves(got), _leaves(want)
    assert len(ga) == len(wa)
    for a, b in zip(ga, wa):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)


# ----------------------------------------------------------------------------------------- float32
def _float32(tree):
    leaves, td = tree_flatten(tree)
    return tree_unflatten(td, [v.astype(np.float32) if isinstance(v, np.ndarray) and v.dtype.kind == "f" else v
                               for v in leaves])


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.sweep] if load(n).PROGRAM.get("heavy") else [])
                                  for n in NAMES if load(n).PROGRAM["njit"] and n != "wave"])
def test_program_in_float32_compiles_whole_like_python(name):
    """The programs Numba compiles whole, given float32 arrays: compiled whole (Python numbers stay weak, as
    NumPy 2 has them, so nothing turns float64 between iterations), with the Python mode's dtypes and values
    to float32's precision. (Not wave.py: its ``np.zeros(n)`` is float64, so in NumPy too the state turns
    float64 after one step, a change of type Numba cannot compile; "auto" runs it as Python.)"""
    m = load(name)
    f = entry(m)
    args, kwargs = m.make_inputs()
    args = _float32(args)
    nums = m.PROGRAM["argnums"]
    v0, g0 = funcgrad.value_and_grad(f, argnums=nums, jit="kernels")(*args, **kwargs)
    v, g = funcgrad.value_and_grad(f, argnums=nums, jit="whole")(*args, **kwargs)
    np.testing.assert_allclose(v, v0, rtol=1e-4)
    for a, b in zip(_leaves(g), _leaves(g0)):
        assert np.asarray(a).dtype == np.asarray(b).dtype
        np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-4 * float(np.max(np.abs(b))))
