

import os as _os
import tempfile as _tempfile

# as tests/conftest.py does for the suite: run with the optimiser off (NUMBA_OPT=0, the documented way to fuzz),
# the package's kernels compile into a Numba cache of the tests' own, never the one benchmarks and users load
# (Numba's cache key does not include the optimisation level). Set before anything imports Numba.
if _os.environ.get("NUMBA_OPT") == "0":
    _os.environ.setdefault("NUMBA_CACHE_DIR", _os.path.join(_tempfile.gettempdir(), "funcgrad-test-numba-cache"))
