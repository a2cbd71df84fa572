"""The backend seam: the gradient tests pass on a backend that is not the CPU one.

A counting backend (tests/backends.py: the CPU kernels, each call counted) is
made the default, the gradient test files run under it in a child pytest, and
the counts prove the generated code called its kernels through the backend's
``K`` and nothing else.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import funcgrad
from funcgrad.kernels.base import get_backend
from tests import backends

GRADIENT_TESTS = ["tests/test_loops.py", "tests/test_regressions.py", "tests/test_nn_grad.py",
                  "tests/test_primitives.py", "tests/test_api.py"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_backend_object_chooses_the_kernels_generated_code_calls():
    counting = get_backend("counting")
    backends.COUNTS.clear()

    def f(x, w):
        return np.sum(np.tanh(x @ w) * 2.0)

    g = funcgrad.grad(f, argnums=(0, 1), backend=counting, jit="kernels")
    x, w = np.ones((2, 3)), np.full((3, 4), 0.1)
    gx, gw = g(x, w)
    rx, rw = funcgrad.grad(f, argnums=(0, 1), jit="kernels")(x, w)
    np.testing.assert_allclose(gx, rx)
    np.testing.assert_allclose(gw, rw)
    assert backends.COUNTS["matmul"] >= 1 and backends.COUNTS["tanh"] >= 1
    assert backends.COUNTS["matmul_dx"] + backends.COUNTS["matmul_dy"] >= 1


@pytest.mark.slow
def test_gradient_test_files_pass_on_the_counting_backend(tmp_path):
    counts = tmp_path / "counts.json"
    env = dict(os.environ, FUNCGRAD_TEST_BACKEND="counting", FUNCGRAD_COUNTS=str(counts))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:xdist",
                        # not: the CPU backend's printed source (x @ w, not K.matmul), its Numba compilation and
                        # the warnings of falling back from it (this backend compiles nothing whole)
                        "-k", "not source and not numba and not fallback and not second_order_warnings",
                        *GRADIENT_TESTS], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    c = json.loads(counts.read_text())
    assert sum(c.values()) > 1000, c
    for kernel in ("matmul", "sum", "exp", "unbroadcast", "index_add"):
        assert c.get(kernel, 0) > 0, f"{kernel} never ran through the counting backend: {sorted(c)}"
