# Two commands: `make demo` runs the main example, `make test` runs the tests.
# Both create .venv when it is absent and install funcgrad (editable) with
# everything the tests need, MPI included (mpi4py + the mpich wheel).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-sweep install clean fuzz autograd-suite autograd-examples

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

# The main example: a gradient and its generated source, then data-parallel
# training of the digits MLP on 2 ranks.
demo: $(STAMP)
	$(BIN)/python examples/quickstart.py
	$(BIN)/mpiexec -n 2 $(BIN)/python -m mpi4py examples/ddp_digits.py

# Two workers for everything but MPI; the MPI tests (which launch mpiexec jobs with
# deadlines) run alone so that no other test competes for the two cores.
test: $(STAMP)
	$(BIN)/python -m pytest -q -rs -p no:cacheprovider -n 2 -m "not sweep" --ignore=tests/test_dist.py tests
	$(BIN)/python -m pytest -q -rs -p no:cacheprovider -m "not sweep" tests/test_dist.py

# The exhaustive grids `make test` leaves out (marked `sweep`): every function of the NumPy/SciPy
# modules compiled whole with Numba, every parametrization; the same assertions, many more compiles.
test-sweep: $(STAMP)
	FUNCGRAD_SWEEP=1 $(BIN)/python -m pytest -q -rs -p no:cacheprovider -n 2 -m sweep --ignore=tests/test_dist.py tests
	FUNCGRAD_SWEEP=1 $(BIN)/python -m pytest -q -rs -p no:cacheprovider -m sweep tests/test_dist.py
	FUNCGRAD_SWEEP=1 $(BIN)/python -m pytest -q -rs -p no:cacheprovider -n 2 -m "not sweep" tests/test_linalg.py

# The long fuzz run: FUZZ_N random programs (default 2000) through every mode; keeps going
# after failures, shrinks one or two of each kind, writes them to fuzz-failures/ and prints
# a summary. FUZZ_SEED, FUZZ_SHRINK, FUZZ_WITHOUT, ... : see tests/fuzz/run.py.
fuzz: $(STAMP)
	$(BIN)/python -m tests.fuzz.run

# The second generator (tests/fuzz/gen_lang.py): everyday Python idioms (aliases, closures, defaults,
# containers, builtins, and/or values, loop else, recursion) composed in loops, branches and helpers;
# each right program is called again (other arguments, rebound module constants). FUZZ_LANG_N, FUZZ_LANG_SEED.
fuzz-lang: $(STAMP)
	$(BIN)/python -m tests.fuzz.gen_lang --n $(or $(FUZZ_LANG_N),500) --seed $(or $(FUZZ_LANG_SEED),0)

# HIPS autograd's own test suite (15 files, imports rewritten to funcgrad), run file by file; prints
# passed/total per file and writes a JSON summary. Not part of `make test`. SUITE_FILES=numpy,linalg
# picks files, K=EXPR is pytest's -k; SUITE_OUT, SUITE_CACHE, SUITE_TIMEOUT: see tests/autograd_suite/run.py.
autograd-suite: $(STAMP)
	$(BIN)/python tests/autograd_suite/run.py $(if $(K),-k "$(K)")

# HIPS autograd's example programs (29, from the same sdist), unedited but for rewritten imports, run
# under funcgrad and under autograd (installed separately); the first calls of each gradient function are
# compared at the same arguments. Prints MATCH/MISMATCH/ERROR and funcgrad's cold first-call time per
# example, writes summary.json and REPORT.md. Not part of `make test` (~15 min). EXAMPLES=gmm,lstm picks;
# EXAMPLES_OUT, EXAMPLES_TIMEOUT: see tests/autograd_examples/run.py.
autograd-examples: $(STAMP)
	$(BIN)/python tests/autograd_examples/run.py $(if $(EXAMPLES),--examples "$(EXAMPLES)")

clean:
	rm -rf $(VENV) build *.egg-info
