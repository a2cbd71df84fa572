import atexit
import os
import tempfile

# generated sources and Numba's disk cache go to a per-run directory unless the caller chose one
os.environ.setdefault("FUNCGRAD_CACHE_DIR", os.path.join(tempfile.gettempdir(), "funcgrad-test-cache"))

if os.environ.get("FUNCGRAD_TEST_BACKEND") == "counting":  # tests/test_backend_seam.py runs the suite this way
    from funcgrad.kernels.base import set_default_backend
    from tests import backends as _backends

    set_default_backend(_backends.COUNTING)
    if os.environ.get("FUNCGRAD_COUNTS"):
        atexit.register(_backends.dump, os.environ["FUNCGRAD_COUNTS"])
