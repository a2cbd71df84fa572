"""The Backend object: what generated code runs on.

A backend names a kernel namespace ``K`` (every primitive's compute, by the
primitive's name), says which array types it accepts, and compiles a
generated function under one of three strategies:

* ``"njit"``: the whole generated function compiled (loops, scalar code);
* ``"python"``: the generated function runs as Python, calling compiled kernels;
* ``"nojit"``: the generated function and every kernel run as plain Python
  (the oracle of differential tests).

Generated modules never import a kernel namespace by name: the backend
injects ``K`` into the function's globals when it compiles it. Backends are
found by name with :func:`get_backend`; a new one (a GPU, a call-counting
wrapper for tests) registers itself with :func:`register_backend`.
"""
from __future__ import annotations

import types

import numpy as np

__all__ = ["Backend", "is_device_array", "register_backend", "get_backend", "set_default_backend", "backends", "STRATEGIES"]

STRATEGIES = ("njit", "python", "nojit")


class Backend:
    """Base class: subclasses set ``name``, ``array_types`` and implement ``namespace``/``compile``."""

    name = "?"
    array_types: tuple = ()
    strategies = STRATEGIES          # the strategies this backend can run
    operators_as_syntax = True       # generated code may write x + y, x @ y (False: K.add(x, y), ...)

    def namespace(self, compiled=True):
        """The kernel namespace ``K`` (``compiled=False``: every kernel's plain Python)."""
        raise NotImplementedError

    def accepts(self, x) -> bool:
        """True for an array this backend computes on."""
        return isinstance(x, self.array_types)

    def supports(self, name) -> bool:
        """Whether kernel ``name`` exists here (a backend that covers fewer primitives than the CPU's says no,
        and the build refuses the call at the user's line)."""
        return True

    def effective_strategy(self, strategy: str) -> str:
        """The strategy that ``compile`` really runs for ``strategy`` (a backend that has no whole-function
        compiler runs "njit" as Python: its errors are then never taken for Numba's)."""
        return strategy

    def compile(self, base_fn, strategy: str, externals: dict, cache: bool = True):
        """A callable running generated function ``base_fn`` under ``strategy``, with ``K`` and
        ``externals`` in globals of its own (two builds never share globals); ``cache=False`` keeps a
        whole-function compile out of the disk cache."""
        if strategy not in self.strategies:
            raise ValueError(f"backend {self.name!r} cannot run strategy {strategy!r}; it runs {self.strategies}")
        g = dict(base_fn.__globals__)
        g.update(externals)
        g["K"] = self.namespace(compiled=strategy != "nojit")
        g[INTERPRETED] = strategy != "njit"   # a branch only Python runs (Numba drops it: a constant global)
        fn = types.FunctionType(base_fn.__code__, g, base_fn.__name__)
        fn.__qualname__ = base_fn.__qualname__
        fn.__module__ = base_fn.__module__
        if strategy == "njit":
            return self.compile_whole(fn, cache)
        return fn

    def compile_whole(self, fn, cache=True):
        raise NotImplementedError

    def fingerprint(self) -> str:
        """A digest of what compiled code depends on besides its source (the kernels' code, library
        versions): it goes into every generated file, so a changed kernel never meets stale cached code."""
        return self.name

    def __repr__(self):
        return f"<funcgrad backend {self.name}>"


# The global a generated module reads to tell whether it runs as Python: True unless Numba compiles it whole
INTERPRETED = "_fg_interpreted"

_BACKENDS: dict = {}


def register_backend(backend: Backend) -> Backend:
    _BACKENDS[backend.name] = backend
    return backend


_DEFAULT = ["cpu"]


def set_default_backend(name_or_backend) -> None:
    """The backend transforms use when they are given none (``backend=None``)."""
    _DEFAULT[0] = get_backend(name_or_backend).name if not isinstance(name_or_backend, Backend) else name_or_backend


def get_backend(name_or_backend=None) -> Backend:
    """The backend named ``name`` (or the object itself when given one; ``None``: the default)."""
    if name_or_backend is None:
        name_or_backend = _DEFAULT[0]
    if isinstance(name_or_backend, Backend):
        return name_or_backend
    b = _BACKENDS.get(name_or_backend)
    if b is None:
        raise ValueError(f"unknown backend {name_or_backend!r}; available: {sorted(_BACKENDS)}")
    return b


def backends() -> dict:
    return dict(_BACKENDS)


_HOST_TYPES = (np.ndarray, float, int, bool, complex, str, type(None))


#: exact types of GPU arrays the transforms' fast call path takes as leaves (the GPU backend adds numba's
#: device array type when it loads)
FAST_DEVICE_TYPES: set = set()


def is_device_array(x) -> bool:
    """An array in GPU memory: a numba.cuda device array (also the simulator's) or any object exposing
    ``__cuda_array_interface__`` (CuPy arrays, torch CUDA tensors). Imports nothing."""
    t = type(x)
    if t in _HOST_TYPES or isinstance(x, np.generic):
        return False
    return hasattr(t, "__cuda_array_interface__") or (t.__name__ == "FakeCUDAArray" and
                                                      t.__module__.startswith(("numba", "numba_cuda")))
