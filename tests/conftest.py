import os
import tempfile

# generated sources and Numba's disk cache go to a per-run directory unless the caller chose one
os.environ.setdefault("FUNCGRAD_CACHE_DIR", os.path.join(tempfile.gettempdir(), "funcgrad-test-cache"))
