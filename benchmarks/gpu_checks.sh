#!/usr/bin/env bash
# The GPU checks, on a machine with an NVIDIA GPU, numba-cuda, CuPy, PyTorch and JAX already installed
# (no network needed): tests/test_cuda_graphs.py on the hardware (FUNCGRAD_TEST_GPU=1, no simulator), then
# benchmarks/gpu_step.py, tests/test_cuda.py, then the two-rank data-parallel step on the GPU. funcgrad runs from a copy laid out as the installed package (kernels/ as
# funcgrad/kernels), so no pip install is needed. Logs go to $OUT (or ./gpu-out).
set -u
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
PY=${PY:-python3}; PY=$(command -v "$PY" || echo "$PY")   # absolute: mpiexec may start another python3
W=$(mktemp -d)
if ls .whl/*.whl >/dev/null 2>&1; then   # wheels carried along (e.g. a NumPy that the machine's Numba supports)
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$W/site" .whl/*.whl
  export PYTHONPATH="$W/site"
fi
cp -r funcgrad tests benchmarks pyproject.toml "$W"/ && cp -r kernels "$W/funcgrad/kernels" && cp -r dist "$W/funcgrad/dist"
cd "$W"
export PYTHONPATH="$W${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false FUNCGRAD_CACHE_DIR="$W/cache"
unset NUMBA_ENABLE_CUDASIM
{ nvidia-smi -L; $PY -c "import numba, numpy, cupy; from numba import cuda; print('numba', numba.__version__, 'numpy', numpy.__version__, 'cupy', cupy.__version__, 'numba.cuda', cuda.__file__)"; } 2>&1 | tee "$OUT/env.txt"
# what launching one operation costs the host (the floor under a small model's step), then the step itself;
# SIGINT at a deadline: pytest still prints what failed so far
# the CUDA-graph tests first (quick, and what the benchmark's fastest rows rest on), then the benchmark, then
# the kernel tests (KERNEL_TEST_K: a pytest -k selection of them, e.g. KERNEL_TEST_K='jvp or hvp')
[ "${SKIP_TESTS:-0}" = 1 ] || FUNCGRAD_TEST_GPU=1 timeout -s INT ${GRAPH_TEST_TIMEOUT:-120} $PY -m pytest -q -rs -p no:cacheprovider \
  --tb=short tests/test_cuda_graphs.py 2>&1 | tee "$OUT/graph_tests.txt" | tail -${TEST_TAIL:-40}
[ "${SKIP_LAUNCH:-0}" = 1 ] || timeout ${LAUNCH_TIMEOUT:-60} $PY benchmarks/gpu_launch_overhead.py 2>&1 | tee "$OUT/launch.txt" | tail -20
timeout -s INT ${BENCH_TIMEOUT:-240} $PY benchmarks/gpu_step.py ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.txt" | tail -${BENCH_TAIL:-40}
[ "${SKIP_TESTS:-0}" = 1 ] || [ "${SKIP_KERNEL_TESTS:-0}" = 1 ] || FUNCGRAD_TEST_GPU=1 timeout -s INT ${TEST_TIMEOUT:-300} $PY -m pytest -q -rs -p no:cacheprovider -n ${NPROC:-4} --tb=short \
  tests/test_cuda.py ${KERNEL_TEST_K:+-k "$KERNEL_TEST_K"} 2>&1 | tee "$OUT/tests.txt" | tail -${TEST_TAIL:-50}
[ "${SKIP_DIST:-0}" = 1 ] && exit 0
# two ranks sharing the GPU(s) (local_device: rank mod GPUs), when mpi4py and an mpiexec are there (carry the
# mpi4py and mpich wheels in .whl/: the machine has no network)
MPIEXEC=${MPIEXEC:-$(command -v mpiexec || echo "$W/site/bin/mpiexec")}
if [ -x "$MPIEXEC" ] && $PY -c "import mpi4py" 2>/dev/null; then
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 FUNCGRAD_COMM_TIMEOUT=60 timeout ${DIST_TIMEOUT:-180} "$MPIEXEC" -n 2 $PY -m mpi4py tests/mpi/gpu_ddp.py "$W" 2>&1 \
    | tee "$OUT/gpu_ddp.txt" | tail -20
else
  echo "no mpiexec or mpi4py here: the two-rank GPU data-parallel check (tests/mpi/gpu_ddp.py) did not run" \
    | tee "$OUT/gpu_ddp.txt"
fi
