"""Every program the fuzzer found failing, kept as a named regression test.

Each file in ``tests/fuzz/found/`` is a minimal program written by the fuzzer
(``make fuzz`` / ``tests/test_fuzz_programs.py``), with a comment saying what
failed, ``ARGNUMS`` and ``make_args()``. It must now be right in every mode, or
refused at the user's line with a clear message (tests/fuzz/check.py).
"""
import glob
import importlib.util
import os
import warnings

import pytest

from tests.fuzz.check import FAILURE, INVALID, args_from, check_program

FOUND = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "fuzz", "found", "*.py")))
FOUND = [p for p in FOUND if not os.path.basename(p).startswith("_")]


@pytest.mark.parametrize("path", FOUND, ids=[os.path.basename(p)[:-3] for p in FOUND])
def test_found_program_is_right_or_refused(path):
    with open(path) as fh:
        src = fh.read()
    spec = importlib.util.spec_from_file_location("found_" + os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        args = args_from(*mod.ARGS) if hasattr(mod, "ARGS") else mod.make_args()
        out = check_program(src, args, mod.ARGNUMS, use_autograd=not getattr(mod, "INPLACE", False))
    assert out.status != INVALID, f"{path} no longer tests anything: {out}"
    assert out.status != FAILURE, f"{path}\n{out}"
