"""A test backend: the CPU kernels wrapped to count every call (proves the backend seam).

With ``FUNCGRAD_TEST_BACKEND=counting`` the test session makes it the default
backend (tests/conftest.py): every gradient test then runs through it, and the
counts are written to ``$FUNCGRAD_COUNTS`` at exit.
"""
import collections
import functools
import json
import types

from funcgrad.kernels.base import Backend, register_backend
from funcgrad.kernels.cpu_backend import CPU

COUNTS = collections.Counter()


def _counting(ns):
    out = types.SimpleNamespace()
    for name in dir(ns):
        if name.startswith("__"):
            continue
        v = getattr(ns, name)
        if callable(v) and not isinstance(v, type):
            def wrap(f, name=name):
                @functools.wraps(f)
                def counted(*a, **k):
                    COUNTS[name] += 1
                    return f(*a, **k)
                return counted
            v = wrap(v)
        setattr(out, name, v)
    return out


class CountingBackend(Backend):
    """CPU arrays and kernels, each kernel call counted. Whole-function compilation cannot call
    Python wrappers, so the "njit" strategy runs as Python over the counted compiled kernels."""

    name = "counting"
    array_types = CPU.array_types
    operators_as_syntax = False      # every arithmetic operation goes through K, so it is counted

    def __init__(self):
        self._ns = {}

    def namespace(self, compiled=True):
        if compiled not in self._ns:
            self._ns[compiled] = _counting(CPU.namespace(compiled))
        return self._ns[compiled]

    def compile(self, base_fn, strategy, externals, cache=True):
        return super().compile(base_fn, "python" if strategy == "njit" else strategy, externals, cache=cache)


COUNTING = register_backend(CountingBackend())


def dump(path):
    with open(path, "w") as f:
        json.dump(dict(COUNTS), f)
