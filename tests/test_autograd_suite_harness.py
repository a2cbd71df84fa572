"""The autograd-suite harness (tests/autograd_suite/run.py) rewrites imports as documented and counts
exactly what pytest reports, failures with their first line; no network and no autograd needed."""
import os

import pytest

from tests.autograd_suite import run as R


def test_rewrite_maps_autograd_names_mechanically():
    src = ("import autograd.numpy as np\n"
           "import autograd.numpy.random as npr\n"
           "from autograd import grad, jacobian\n"
           "from autograd.test_util import check_grads\n"
           "from autograd.builtins import isinstance\n"
           "    import autograd.scipy.stats.multivariate_normal as mvn\n"
           "    import autograd.scipy.signal\n"
           "x = autograd.scipy.signal.convolve\n"
           "def fun_autograd(a): pass\n")
    assert R.rewrite(src) == ("import numpy as np\n"
                              "from numpy import random as npr\n"
                              "from funcgrad import grad, jacobian\n"
                              "from funcgrad.test_util import check_grads\n"
                              "from funcgrad.builtins import isinstance\n"
                              "    from scipy.stats import multivariate_normal as mvn\n"
                              "    import scipy.signal\n"
                              "x = scipy.signal.convolve\n"
                              "def fun_autograd(a): pass\n")


def test_summary_line_parsing():
    assert R._summary_counts("3 failed, 10 passed, 1 skipped, 2 warnings, 1 error in 2.01s") == {
        "failed": 3, "passed": 10, "skipped": 1, "error": 1}


SAMPLE = '''
import pytest

def test_ok():
    assert 1 + 1 == 2

def test_ok_too():
    pass

def test_wrong():
    assert 1 == 2, "one is not two\\nsecond line"

def test_raises():
    raise ValueError("bad value")

@pytest.mark.skip(reason="not here")
def test_skipped():
    pass

@pytest.mark.xfail(reason="known")
def test_xfail():
    assert False

@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")

def test_setup_error(broken):
    pass
'''


def _suite_dir(tmp_path, name, src):
    """A folder laid out as the harness lays out autograd's files: its plugin, a pytest.ini, one test file."""
    dest = str(tmp_path)
    for fn, text in (("_suite_plugin.py", R.PLUGIN), ("pytest.ini", "[pytest]\naddopts =\n"), (name, src)):
        with open(os.path.join(dest, fn), "w") as fh:
            fh.write(text)
    return dest


def test_run_file_counts_what_pytest_reports(tmp_path):
    dest = _suite_dir(tmp_path, "test_sample.py", SAMPLE)
    rec, out = R.run_file(dest, "test_sample.py", None, [], 300, 120)
    assert (rec["total"], rec["passed"], rec["failed"], rec["error"], rec["skipped"], rec["xfailed"]) == (
        7, 2, 2, 1, 1, 1)
    assert rec["pytest_summary"].startswith("2 failed, 2 passed, 1 skipped, 1 xfailed, 1 error")
    msgs = {f["id"].split("::")[1]: f["message"] for f in rec["failures"]}
    assert msgs == {"test_wrong": "AssertionError: one is not two",
                    "test_raises": "ValueError: bad value",
                    "test_setup_error": "RuntimeError: fixture broke"}
    rec, _ = R.run_file(dest, "test_sample.py", "ok", [], 300, 120)  # -k passes through
    assert (rec["passed"], rec["failed"], rec["total"]) == (2, 0, 2)


def test_unknown_suite_file_is_refused():
    with pytest.raises(SystemExit, match="unknown suite files"):
        R.main(["--files", "nonsense"])


BOTH2_SAMPLE = '''
import numpy as np
from funcgrad.test_util import check_grads

def test_smooth():              # raised to order 2 in both modes, and it ends
    check_grads(lambda x: np.sin(x) * x, modes=["rev"], order=1)(0.7)

def test_kink_at_order_two():   # right at order 1; order 2 at abs's kink is what the strict run adds
    check_grads(lambda x: 3.0 * np.abs(x), order=1)(0.0)
'''


def test_both_modes_raises_the_tests_own_order_only(tmp_path, monkeypatch):
    # --both-modes raised every level of check_grads' recursion back to order 2, so a check never ended
    dest = _suite_dir(tmp_path, "test_both2.py", BOTH2_SAMPLE)
    monkeypatch.setenv("SUITE_DIAGNOSE", "both2")
    rec, out = R.run_file(dest, "test_both2.py", None, [], 300, 120)
    assert (rec["passed"], rec["failed"]) == (1, 1), out
    assert [f["id"].split("::")[1] for f in rec["failures"]] == ["test_kink_at_order_two"], rec["failures"]
    monkeypatch.delenv("SUITE_DIAGNOSE")
    rec, out = R.run_file(dest, "test_both2.py", None, [], 300, 120)
    assert (rec["passed"], rec["failed"]) == (2, 0), out
