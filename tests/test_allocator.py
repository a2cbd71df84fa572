"""After ``import funcgrad`` (glibc Linux) a step's large temporaries reuse freed memory instead of mapping fresh
pages from the OS each step (kernels/cpu_backend.py: settle_allocator). Checked in fresh processes: the test
process's own history (other libraries' large frees) would settle it anyway."""
import os
import platform
import subprocess
import sys

import pytest

from funcgrad.kernels.cpu_backend import settle_allocator

pytest.importorskip("resource", reason="no resource module (not POSIX)")

_STEP = """
import resource, numpy as np, funcgrad
def step():   # like a LeNet step: several 0.3-1 MB temporaries alive at once, all freed at the end
    ts = [np.empty(n) for n in (40000, 90000, 120000, 60000, 131072, 100000)]
    for t in ts:
        t.fill(1.0)
    del ts
for _ in range(3):
    step()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    step()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / 20)
"""


def _faults_per_step(settle):
    env = dict(os.environ, FUNCGRAD_SETTLE_MALLOC=settle)
    out = subprocess.run([sys.executable, "-c", _STEP], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return float(out.stdout.split()[-1])


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")
def test_large_temporaries_reuse_freed_pages():
    settled, unsettled = _faults_per_step("1"), _faults_per_step("0")
    assert settled < 50, (settled, unsettled)   # ~1,100 pages (4.3 MB) mapped afresh every step when unsettled
    assert unsettled > 10 * max(settled, 1), (settled, unsettled)


def test_settling_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("FUNCGRAD_SETTLE_MALLOC", "0")
    assert settle_allocator() is False
