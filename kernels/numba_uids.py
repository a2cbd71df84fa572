"""Symbols of compiled code that never collide across processes (imported by ``funcgrad.kernels`` first).

Numba names a compiled function's machine-code symbol by its module, qualified name, argument types and a
*uid*: a counter that starts at 1 in every process. Code loaded from Numba's disk cache (funcgrad's
generated modules and kernels are compiled with ``cache=True``) keeps the uids of the process that compiled
it. Two different functions can share module, qualified name and argument types: two ``impl`` kernels
compiled from generated source, the closures one factory makes for several kernels, a function made again
in a loop. When such a function was compiled in this process under the uid that a cached library uses for
another, the library's calls bind to this process's function: the cached code computes the wrong formula
with no error (seen: a cached ``K.matmul_dx`` call running ``K.matmul_dx``'s neighbour ``K.matmul_dy``, the
kernel a different test had compiled first). Numba's issue 10486 describes the same collision after fork.

The remedy here: this process's uids start at a random 62-bit offset (drawn again in a forked child), so the
uids of two processes, and so their symbols, are disjoint. Uids only need to be unique; Numba keys its disk
cache by signature, never by uid, so cached code still loads.
"""
from __future__ import annotations

import itertools
import os
import secrets

from numba.core import bytecode


def _random_start():
    ids = getattr(bytecode.FunctionIdentity, "_unique_ids", None)
    if isinstance(ids, itertools.count):   # (a Numba that numbers its functions otherwise keeps its own scheme)
        bytecode.FunctionIdentity._unique_ids = itertools.count(secrets.randbits(62) + 1)


_random_start()
os.register_at_fork(after_in_child=_random_start)
