import atexit
import os
import tempfile

import pytest

# GPU tests (tests/test_cuda.py) run on Numba's CUDA simulator unless FUNCGRAD_TEST_GPU=1 says a GPU is there;
# the variable must be set before Numba loads
if os.environ.get("FUNCGRAD_TEST_GPU") != "1":
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

# generated sources and Numba's disk cache go to a per-run directory unless the caller chose one
os.environ.setdefault("FUNCGRAD_CACHE_DIR", os.path.join(tempfile.gettempdir(), "funcgrad-test-cache"))

# The tests compile hundreds of generated functions and check values, not speed: LLVM's optimiser is off
# for them (NUMBA_OPT=0: test_loops.py 147 s -> 86 s on this 2-core machine) unless the caller set a level,
# and Numba's disk cache then lives in a directory of the tests' own, so that the unoptimised code of the
# package's kernels never lands in the cache that benchmarks and users load (Numba's cache key does not
# include the optimisation level).
if "NUMBA_OPT" not in os.environ:
    os.environ["NUMBA_OPT"] = "0"
    os.environ["NUMBA_CACHE_DIR"] = os.path.join(tempfile.gettempdir(), "funcgrad-test-numba-cache")

if os.environ.get("FUNCGRAD_TEST_BACKEND") == "counting":  # tests/test_backend_seam.py runs the suite this way
    from funcgrad.kernels.base import set_default_backend
    from tests import backends as _backends

    set_default_backend(_backends.COUNTING)
    if os.environ.get("FUNCGRAD_COUNTS"):
        atexit.register(_backends.dump, os.environ["FUNCGRAD_COUNTS"])


# ``make test`` leaves the exhaustive grids to ``make test-sweep`` (marker ``sweep``), by one rule per file:
# * modules whose functions compile: their whole-function (njit) parametrizations; the kernels-compiled and
#   Python parametrizations stay, and each file's compiled-whole-equals-Python tests (one per function) stay;
# * modules whose kernels run as Python only (numpy.fft, scipy.*): ``jit="kernels"``, which is then the same
#   strategy ``jit="auto"`` picks.
_WHOLE = ("njit", "whole")
_SWEEP = {
    "test_numpy_math.py": _WHOLE, "test_numpy_shape.py": _WHOLE, "test_linalg.py": _WHOLE,
    "test_complex.py": _WHOLE, "test_calls.py": _WHOLE,
    "test_fft.py": ("kernels",), "test_signal.py": ("kernels",), "test_scipy_special.py": ("kernels",),
    "test_scipy_stats.py": ("kernels",), "test_scipy_integrate.py": ("kernels",),
}


# Whole tests whose every case compiles fresh code with Numba (tens of seconds each on 2 cores), where
# make test already checks the same rules compiled through the registry grid (tests/test_primitives.py):
_SWEEP_TESTS = {
    "test_numpy_shape.py": {"test_kernel_compiled_equals_python"},
    "test_numpy_math.py": {"test_primitive_compiled_whole_equals_python"},
    "test_complex.py": {"test_vjp_of_complex_valued_functions_compiled_whole",
                        "test_grad_of_real_functions_of_complex_arrays_compiled_whole"},
    "test_linalg.py": {"test_norms_compiled", "test_scipy_aliases"},
    "test_matmul_nd.py": {"test_value_and_gradient_compiled"},
    "test_nn_kernels.py": {"test_kernels_same_from_python_and_njit"},
    # every primitive's JVP through funcgrad.jvp (a minute and a half); make test keeps each JVP line against
    # central differences (test_jvp_rules.py) and the core primitives through funcgrad.jvp, compiled and Python
    "test_forward.py": {"test_jvp_of_every_primitive"},
    # the gradient test files rerun on the counting backend (one process, minutes)
    "test_backend_seam.py": {"test_gradient_test_files_pass_on_the_counting_backend"},
}


def _strategies(value):
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return {str(v) for k, v in value.items() if k in ("jit", "mode")}
    return set()


def pytest_collection_modifyitems(config, items):
    import pytest
    for item in items:
        which = _SWEEP.get(os.path.basename(str(item.fspath)))
        spec = getattr(item, "callspec", None)
        if which and spec is not None and any(_strategies(v) & set(which) for v in spec.params.values()):
            item.add_marker(pytest.mark.sweep)
        elif getattr(item, "originalname", item.name) in _SWEEP_TESTS.get(os.path.basename(str(item.fspath)), ()):
            item.add_marker(pytest.mark.sweep)


@pytest.fixture
def arrays_kept(monkeypatch):
    """Compiled code keeps small 1-D arrays as arrays (funcgrad/transform/scalarize.py holds none as scalars):
    for tests of the array code itself (index_add scatters, tapes of arrays, Numba's refusals of it)."""
    from funcgrad.transform import scalarize
    monkeypatch.setattr(scalarize, "MAXLEN", 0)
