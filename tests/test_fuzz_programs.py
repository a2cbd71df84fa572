"""Right or refused: random programs over the constructs funcgrad documents.

hypothesis draws programs from ``tests/fuzz/gen.py`` (loops, branches, helpers,
tuple assignment, in-place writes, indexing, reductions, matmul, elementwise
functions), ``tests/fuzz/check.py`` runs each one through funcgrad in every mode
(``auto``, ``python``, ``njit``, ``jit=False``) and compares with plain Python and
central differences in float64 (and autograd when installed). The only acceptable
outcomes are *right* and *refused at the user's line with a clear message*; a
failure is shrunk by hypothesis to a small program, printed in full.

The budget is fixed and derandomized (the same programs every run):
``FUZZ_CI_EXAMPLES`` (default 5) programs; ``FUZZ_CI_FEATURES`` /
``FUZZ_CI_WITHOUT`` (comma lists) choose the constructs; shrinking a failure stops
taking new programs ``FUZZ_CI_SHRINK_SECONDS`` (default 180) after the first one
(``FUZZ_CI_NO_SHRINK=1`` skips it). Each program that is right in float64 is also given float32
arrays, its compiled value and gradient compared with the Python mode's (``FUZZ_FLOAT32`` of the long run;
``FUZZ_CI_FLOAT32=0`` leaves it out). ``make fuzz`` is the
long run (``tests/fuzz/run.py``).
"""
import os
import time
import warnings

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402

import tests.fuzz.check as _check  # noqa: E402
from tests.fuzz.check import FAILURE, INVALID, check  # noqa: E402
from tests.fuzz.gen import ALL_FEATURES, Config, programs  # noqa: E402

# each program right in float64 is also run on float32 arrays, compiled against Python (FUZZ_CI_FLOAT32=0: not)
_check.FLOAT32 = os.environ.get("FUZZ_CI_FLOAT32", "1") == "1"

# The constructs the CI run draws from: all of them. To leave one out while it is
# being fixed, set FUZZ_CI_WITHOUT (the long run takes --without).
_feats = os.environ.get("FUZZ_CI_FEATURES")
FEATURES = frozenset(_feats.split(",")) if _feats else ALL_FEATURES
FEATURES -= frozenset(filter(None, os.environ.get("FUZZ_CI_WITHOUT", "").split(",")))
CI_CONFIG = Config(features=FEATURES, max_stmts=3)
EXAMPLES = int(os.environ.get("FUZZ_CI_EXAMPLES", 5))   # (CI's 15 minutes; make fuzz runs thousands)
PHASES = (Phase.explicit, Phase.generate) + (() if os.environ.get("FUZZ_CI_NO_SHRINK") else (Phase.shrink,))


# Shrinking re-runs programs for as long as it finds smaller failing ones; past this many
# seconds after the first failure, programs not yet seen are rejected, so the test ends with
# the smallest failing program found so far.
SHRINK_SECONDS = float(os.environ.get("FUZZ_CI_SHRINK_SECONDS", 180))
CHECK_TIMEOUT = int(os.environ.get("FUZZ_CI_TIMEOUT", 300))    # seconds per mode and program (a cold njit compile on a loaded 2-core box can take a minute)
VERBOSE = bool(os.environ.get("FUZZ_CI_VERBOSE"))                  # one line per program (with pytest -s)
_failed: dict = {}
_first_failure = []


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None, phases=PHASES,
          suppress_health_check=list(HealthCheck), print_blob=False)
@given(programs(CI_CONFIG))
def test_random_programs_are_right_or_refused(prog):
    key = (prog.source, prog.seed, prog.n_value, repr(prog.arg_kinds))
    out = _failed.get(key)
    if out is None:
        if _first_failure and time.monotonic() - _first_failure[0] > SHRINK_SECONDS:
            hypothesis.reject()
        t0 = time.monotonic()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = check(prog, timeout=CHECK_TIMEOUT)
        if VERBOSE:
            print(f"[fuzz] {time.monotonic() - t0:5.1f}s {out.status} {out.kind} {out.mode}", flush=True)
        hypothesis.assume(out.status != INVALID)
        if out.status == FAILURE:
            _failed[key] = out
            _first_failure[:] = _first_failure or [time.monotonic()]
    assert out.status != FAILURE, f"\n{prog!r}\n{out}"


def test_generator_covers_the_documented_constructs():
    """A fixed sample of programs uses every construct the generator knows (so none silently drops out)."""
    from tests.fuzz.draw import RandomDrawer
    from tests.fuzz.gen import generate
    seen = set()
    for seed in range(400):
        seen |= generate(RandomDrawer(seed), Config()).features
    missing = ALL_FEATURES - seen
    assert not missing, f"never generated: {sorted(missing)}"


def test_generated_programs_are_valid_python_and_numpy():
    """Programs run in plain Python (the checker discards the rare one that does not, so keep that rare)."""
    import numpy as np
    from tests.fuzz.check import load_program
    from tests.fuzz.draw import RandomDrawer
    from tests.fuzz.gen import generate
    bad = 0
    for seed in range(200):
        prog = generate(RandomDrawer(seed), CI_CONFIG)
        fn, _ = load_program(prog.source)
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                v = fn(*prog.make_args())
            assert np.ndim(v) == 0
        except Exception:
            bad += 1
    assert bad <= 10, f"{bad} of 200 generated programs fail in plain Python"
