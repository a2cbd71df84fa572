"""funcgrad.kernels: the compute behind each primitive (cpu: Numba; cuda: numba.cuda)."""
