"""funcgrad.kernels: the compute behind each primitive, one backend per file.

:mod:`.base` defines the :class:`~funcgrad.kernels.base.Backend` object;
:mod:`.cpu` is the CPU kernel namespace (Numba) and :mod:`.cpu_backend` the
CPU backend, the only one built so far.
"""
