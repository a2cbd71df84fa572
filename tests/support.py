"""Helpers several test files share: where a tagged line is, the value-and-gradient check of a case, and
whether this is ``make test-sweep``'s run."""
import importlib.util
import linecache
import os

import numpy as np

import funcgrad
from funcgrad.testing import numerical_vjp

# make test-sweep (FUNCGRAD_SWEEP=1) runs the full grids and counts make test trims to keep within its 15 minutes
SWEEP = bool(os.environ.get("FUNCGRAD_SWEEP"))


def drawn_cases(sweep, make_test):
    """How many cases hypothesis draws per test: ``sweep`` in make test-sweep, ``make_test`` otherwise."""
    return sweep if SWEEP else make_test


def tagged_line(path, tag):
    """The line number of the line of file ``path`` that ends with ``# LINE: <tag>``."""
    with open(path) as f:
        for i, ln in enumerate(f, 1):
            if ln.rstrip().endswith(f"# LINE: {tag}"):
                return i
    raise AssertionError(f"no line tagged {tag!r} in {path}")


def assert_value_and_gradient(f, args, argnums, **kw):
    """funcgrad's value and gradient of ``f`` (with transform options ``kw``) equal Python's value and central
    differences of ``f`` in every argument of ``argnums`` (an int or a tuple)."""
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    v, g = funcgrad.value_and_grad(f, argnums=nums, **kw)(*args)
    np.testing.assert_allclose(v, f(*args), rtol=1e-12, atol=1e-12)
    for k, i in enumerate(nums):
        want = numerical_vjp(f, args, i, 1.0, 1e-6)
        np.testing.assert_allclose(g[k], want, rtol=1e-5, atol=1e-6, err_msg=f"argument {i}")


def import_file(path, name):
    """The module in file ``path``, imported under ``name`` (a module whose file a test then rewrites)."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def rewrite_file(path, text):
    """Write ``text`` over ``path`` after its module was imported (linecache then serves the new text)."""
    path.write_text(text)
    linecache.checkcache(str(path))
