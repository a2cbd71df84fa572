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


def test_generated_functions_run_llvms_full_module_pipeline_once_and_kernels_keep_numbas():
    """kernels/cpu_backend.py: a function compiled for generated code runs LLVM's full module pipeline once
    (not Numba's cheap pipeline before it, nor the function-level run), still with refcount pruning; a plain
    njit function (a kernel) keeps Numba's runs. Both compute the same values."""
    from numba.core import codegen
    from funcgrad.kernels.cpu_backend import CPU

    calls = []
    real = codegen.JITCPUCodegen._module_pass_manager

    def spy(self, **kwargs):
        calls.append(kwargs.get("cost", "full"))
        return real(self, **kwargs)

    def body(x, n):
        s = np.zeros_like(x)
        for i in range(n):
            s = s + np.sin(x) * i
        return s

    x = np.linspace(0.0, 1.0, 5)
    import numba
    codegen.JITCPUCodegen._module_pass_manager = spy
    try:   # the plain function first: the kernels both call are compiled then, and reused by the second
        # (generated code's error model and bounds checks: callees compiled under other flags are compiled again)
        plain = numba.njit(cache=False, error_model="numpy", boundscheck=True)(body)
        want = plain(x, 4)
        seen_plain = list(calls)
        calls.clear()
        generated = CPU.compile_whole(body, cache=False)
        got = generated(x, 4)
        seen_generated = list(calls)
    finally:
        codegen.JITCPUCodegen._module_pass_manager = real
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, np.sin(x) * 6, rtol=1e-15)
    assert seen_generated == ["full"]
    assert "cheap" in seen_plain and "full" in seen_plain
