"""funcgrad.kernels: the compute behind each primitive, one backend per file.

:mod:`.base` defines the :class:`~funcgrad.kernels.base.Backend` object;
:mod:`.cpu` is the CPU kernel namespace (Numba) and :mod:`.cpu_backend` the
CPU backend; :mod:`.cuda` and :mod:`.cuda_backend` the GPU's. :mod:`.numba_uids`
runs first: it keeps compiled code loaded from Numba's disk cache from binding
to a different function compiled in this process.
"""
from . import numba_uids  # noqa: F401  (before any kernel is compiled)
