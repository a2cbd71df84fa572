"""funcgrad.dist: data-parallel training and a parameter server over MPI (mpi4py).

Launch with ``mpiexec -n N python -m mpi4py train.py`` (``-m mpi4py`` makes
an uncaught exception abort the job; funcgrad also installs that hook itself
when the world has more than one rank). A plain ``python train.py`` is a
world of size 1, also without mpi4py installed.

Modules: ``comm`` (world, waits, failure detection, abort), ``deadline``
(the default deadline, deadline-bounded communicator duplication),
``agreement`` (the cross-rank agreement check and mismatch reports),
``speculation`` (ring_allreduce's speculative rounds), ``shm`` (the node
shared-memory region), ``ring`` (ring allreduce), ``buckets`` (pytree
allreduce/broadcast), ``ddp`` (data-parallel trainer), ``ps`` (parameter
server), ``checkpoint`` (checkpoint files), ``device`` (one GPU per rank: :func:`local_device`,
GPU trees staged through pinned host buffers), ``errors`` (exception types).
"""
from .errors import (DistError, CommTimeout, CommMismatchError, ParameterDivergenceError,
                     MPIUnavailableError, WorkerFailure, RankFailure, NonFiniteGradientError)
from .comm import World, world, default_timeout, install_abort_hook
from .ring import ring_allreduce
from .buckets import allreduce_tree, broadcast_tree
from .device import local_device
from .ddp import DataParallel, data_parallel_step, params_checksum, check_params_in_sync
from .ps import ParameterServer

__all__ = [
    "World", "world", "default_timeout", "install_abort_hook",
    "ring_allreduce", "allreduce_tree", "broadcast_tree",
    "DataParallel", "data_parallel_step", "params_checksum", "check_params_in_sync",
    "ParameterServer", "local_device",
    "DistError", "CommTimeout", "CommMismatchError", "ParameterDivergenceError",
    "MPIUnavailableError", "WorkerFailure", "RankFailure", "NonFiniteGradientError",
]
