"""Code loaded from Numba's disk cache runs its own callees, whatever this process compiled first.

Numba names a compiled function's symbol by module, qualified name, argument types and a per-process
counter. A library saved by one process and loaded by another that had compiled a *different* function
under the same name, types and counter bound its calls to that function: a silent wrong value. Here the
cached function calls ``K.matmul_dx``; the second process first compiles a function calling
``K.matmul_dy``, whose kernel is compiled from generated source under the same name and types
(see kernels/numba_uids.py).
"""
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CACHED = """
from numba import njit
from funcgrad.kernels import cpu as K

@njit(cache=True)
def use_dx(g, x, y):
    return K.matmul_dx(g, x, y)
"""

OTHER = """
from numba import njit
from funcgrad.kernels import cpu as K

@njit
def use_dy(g, x, y):
    return K.matmul_dy(g, x, y)
"""

FIRST = """
import numpy as np, cached_mod
g, x, y = np.array([[2.0]]), np.array([[3.0]]), np.array([[5.0]])
print(float(cached_mod.use_dx(g, x, y)[0, 0]))
"""

SECOND = """
import numpy as np, other_mod, cached_mod
g, x, y = np.array([[2.0]]), np.array([[3.0]]), np.array([[5.0]])
print(float(other_mod.use_dy(g, x, y)[0, 0]))
print(float(cached_mod.use_dx(g, x, y)[0, 0]))
print(sum(cached_mod.use_dx.stats.cache_hits.values()))
"""


def _run(tmp_path, src):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT]),
               NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(src)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.split()


def test_a_cached_kernel_call_runs_its_own_kernel_in_a_process_that_compiled_another_first(tmp_path):
    (tmp_path / "cached_mod.py").write_text(CACHED)
    (tmp_path / "other_mod.py").write_text(OTHER)
    assert _run(tmp_path, FIRST) == ["10.0"]                    # g @ y.T, compiled and saved
    dy, dx, hits = _run(tmp_path, SECOND)
    assert float(dy) == 6.0                                      # x.T @ g
    assert int(hits) == 1, "use_dx was compiled again, not loaded from the cache: the test checks nothing"
    assert float(dx) == 10.0, "the cached use_dx ran K.matmul_dy's kernel"
