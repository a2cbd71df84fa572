# Two commands: `make demo` runs the main example, `make test` runs the tests.
# Both create .venv when it is absent and install funcgrad (editable) with
# everything the tests need, MPI included (mpi4py + the mpich wheel).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/quickstart.py

test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests

clean:
	rm -rf $(VENV) build *.egg-info
