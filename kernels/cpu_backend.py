"""The CPU backend: NumPy arrays, the kernel namespace :mod:`funcgrad.kernels.cpu`, Numba's ``njit``."""
from __future__ import annotations

import hashlib
import os
import warnings

import numba
import numpy as np
from numba.core.errors import NumbaPerformanceWarning

from . import cpu
from .base import Backend, register_backend

__all__ = ["CPUBackend", "CPU"]


class CPUBackend(Backend):
    name = "cpu"
    array_types = (np.ndarray, np.generic)

    def __init__(self):
        self._python = None
        self._fingerprint = None

    def namespace(self, compiled=True):
        if compiled:
            return cpu
        if self._python is None:
            self._python = cpu.python_namespace()
        return self._python

    def compile_whole(self, fn, cache=True):
        return numba.njit(cache=cache)(fn)

    def fingerprint(self):
        if self._fingerprint is None:
            h = hashlib.sha256(f"{numba.__version__} {np.__version__}".encode())
            here = os.path.dirname(cpu.__file__)   # every kernel module: cpu.py star-imports the others
            for name in sorted(os.listdir(here)):
                if name.endswith(".py"):
                    with open(os.path.join(here, name), "rb") as f:
                        h.update(f.read())
            self._fingerprint = f"cpu {h.hexdigest()[:16]}"
        return self._fingerprint


CPU = register_backend(CPUBackend())

# Numba's advice about generated code ("'@' is faster on contiguous arrays") points into funcgrad's
# generated files, where the user can do nothing with it
warnings.filterwarnings("ignore", category=NumbaPerformanceWarning, module=r"funcgrad_generated_")
