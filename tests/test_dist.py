"""funcgrad.dist: MPI programs in tests/mpi launched under mpiexec, plus the size-1 path.

Each launch uses the ``mpiexec`` next to ``sys.executable`` (the mpich wheel
in the venv) and is bounded by a timeout; many checks are batched into each
launch because a launch costs about a second.
"""
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MPI_DIR = HERE / "mpi"
MPIEXEC = Path(sys.executable).parent / "mpiexec"

try:
    import mpi4py  # noqa: F401  (only the package: MPI itself is initialised in the children)
    HAVE_MPI4PY = True
except ImportError:
    HAVE_MPI4PY = False

needs_mpi = pytest.mark.skipif(not (MPIEXEC.exists() and HAVE_MPI4PY),
                               reason=f"mpiexec not found next to sys.executable ({MPIEXEC}) or mpi4py missing")


def run_mpi(p, script, *args, timeout=60, comm_timeout=30, module=True, flags=(), env=None, shell=False):
    """Launch ``script`` on p ranks; returns (returncode, stdout, stderr, seconds). With
    ``shell=True`` each rank is ``sh -c <args[0]>`` (``script`` is then "-c")."""
    e = dict(os.environ)
    e["FUNCGRAD_COMM_TIMEOUT"] = str(comm_timeout)
    e.setdefault("PYTHONUNBUFFERED", "1")
    if env:
        e.update(env)
    cmd = [str(MPIEXEC), *flags, "-n", str(p)] + (["sh"] if shell else [sys.executable])
    if module:
        cmd += ["-m", "mpi4py"]
    cmd += [str(script), *map(str, args)]
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e, cwd=ROOT)
    except subprocess.TimeoutExpired as ex:
        pytest.fail(f"{' '.join(cmd)} did not finish within {timeout} s (a hang):\n"
                    f"{(ex.stdout or b'')[-3000:]}\n{(ex.stderr or b'')[-3000:]}")
    return r.returncode, r.stdout, r.stderr, time.monotonic() - t0


def ok(res, marker):
    rc, out, err, _ = res
    assert rc == 0 and marker in out, f"rc={rc}\nstdout:\n{out[-4000:]}\nstderr:\n{err[-4000:]}"
    # the ranks share one stdout: a line of one rank can be written straight after another's, with no
    # newline between them; give every result line its own line before the tests parse it
    return re.sub(r"(?<!\n)RESULT ", "\nRESULT ", out)


# CI's 15 minutes: the MPI tests run one at a time (about 4 minutes); the cases marked SWEEP repeat a path
# another case covers (a fourth rank, the other server count of one protocol) and run in `make test-sweep`
SWEEP = pytest.mark.sweep


# ---------------------------------------------------------------- collectives
@needs_mpi
@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("p,node_shm", [(2, True), (3, True), pytest.param(4, True, marks=SWEEP), (3, False)])
def test_ring_and_tree_collectives(p, node_shm):
    """ring_allreduce == comm.Allreduce for every size/dtype/path, input unchanged, bit-identical
    across ranks; allreduce_tree/broadcast_tree; mismatched lengths/dtypes/ops/trees raise on every
    rank. Repeated mid-size calls go through node shared memory, or (switched off) bind a
    persistent allreduce checked by a header round."""
    env = None if node_shm else {"FUNCGRAD_COMM_NODE_SHM": "0"}
    out = ok(run_mpi(p, MPI_DIR / "collectives.py", timeout=100, env=env), f"COLLECTIVES OK p={p}")
    assert int(out.split("checks=")[1].split()[0]) > 300


@needs_mpi
@pytest.mark.mpi
@pytest.mark.timeout(60)
def test_ranks_agree_on_thresholds_when_nodes_differ():
    """A rank that sees its node oversubscribed and one that does not still pick the same
    MPI-or-ring path for every call (World.oversubscribed is agreed at world())."""
    ok(run_mpi(2, MPI_DIR / "agreement.py", timeout=50), "AGREEMENT OK")


# ---------------------------------------------------------------- data parallel
@needs_mpi
@pytest.mark.mpi
@pytest.mark.timeout(90)
@pytest.mark.parametrize("p", [2, 3, pytest.param(4, marks=SWEEP)])
def test_data_parallel_matches_single_process(p, tmp_path):
    """N ranks x B/N == 1 process x B after 20 steps (1e-10, float64), accumulation, checksum, resume."""
    out = ok(run_mpi(p, MPI_DIR / "ddp.py", tmp_path, timeout=80), f"DDP OK p={p}")
    maxdiff = float(out.split("maxdiff=")[1].split()[0])
    assert maxdiff < 1e-10


@needs_mpi
@pytest.mark.mpi
@pytest.mark.timeout(150)
def test_data_parallel_on_gpus_matches_the_cpu(tmp_path):
    """One GPU per rank (local_device), GPU gradients staged through pinned host buffers: the GPU run equals
    the CPU run and one process (1e-12), parameters and optimizer state stay on the GPU, GPU trees reduce
    and broadcast, checksum and checkpoint + resume work. On the CUDA simulator unless FUNCGRAD_TEST_GPU=1."""
    pytest.importorskip("numba.cuda", reason="numba.cuda (numba-cuda) is not installed")
    env = {} if os.environ.get("FUNCGRAD_TEST_GPU") == "1" else {"NUMBA_ENABLE_CUDASIM": "1"}
    out = ok(run_mpi(2, MPI_DIR / "gpu_ddp.py", tmp_path, timeout=140, comm_timeout=60, env=env), "GPU DDP OK p=2")
    assert float(out.split("maxdiff=")[1].split()[0]) < 1e-12


# ---------------------------------------------------------------- parameter server
@needs_mpi
@pytest.mark.mpi
@pytest.mark.timeout(90)
@pytest.mark.parametrize("test,servers", [("sync", 1), pytest.param("sync", 2, marks=SWEEP),
                                          pytest.param("ssp", 1, marks=SWEEP), ("ssp", 2),
                                          pytest.param("async", 1, marks=SWEEP), ("async", 2)])
def test_parameter_server(test, servers, tmp_path):
    """sync == sequential SGD on the averaged gradient (and resumes exactly); ssp gap <= s and
    reaches s; async converges on a convex quadratic."""
    out = ok(run_mpi(4, MPI_DIR / "ps.py", tmp_path, test, servers, timeout=80), f"PS OK {test}")
    if test == "sync":
        assert "maxdiff=0" in out or float(out.split("maxdiff=")[1].split()[0]) <= 1e-12


# ---------------------------------------------------------------- faults
@needs_mpi
@pytest.mark.mpi
@pytest.mark.timeout(30)
@pytest.mark.parametrize("module", [False, True], ids=["plain-python", "python-m-mpi4py"])
def test_rank_that_raises_aborts_job(module):
    rc, out, err, dt = run_mpi(3, MPI_DIR / "faults.py", "raise", timeout=25, comm_timeout=60, module=module)
    assert rc != 0 and dt < 10, (rc, dt, err[-2000:])
    assert "deliberate failure on rank 1" in err
    assert "should not get here" not in out


@needs_mpi
@pytest.mark.mpi
@pytest.mark.timeout(30)
def test_rank_that_calls_os_exit_ends_job():
    rc, out, err, dt = run_mpi(3, MPI_DIR / "faults.py", "exit", timeout=25, comm_timeout=3)
    assert rc != 0 and dt < 10, (rc, dt, err[-2000:])
    assert "should not get here" not in out


@needs_mpi
@pytest.mark.mpi
@pytest.mark.timeout(40)
@pytest.mark.parametrize("mode", ["absent", "absent-mpi", "absent-repeated"])
def test_rank_that_never_joins_is_named_in_comm_timeout(mode):
    rc, out, err, dt = run_mpi(4, MPI_DIR / "faults.py", mode, timeout=35, comm_timeout=2)
    # ranks print concurrently: lines from different ranks may share a physical line
    found = re.findall(r"TIMEOUT_NAMED rank=(\d+) ranks=\(([\d, ]*)\)", out)
    ranks = sorted(int(rk) for rk, _ in found)
    assert ranks == [0, 1, 3], f"every waiting rank must raise CommTimeout:\n{out}\n{err[-2000:]}"
    assert all(named.strip(", ") == "2" for _, named in found), found
    assert out.count("rank(s) [2] never joined") == 3, out
    assert dt < 15, dt


@needs_mpi
@pytest.mark.mpi
@pytest.mark.timeout(40)
@pytest.mark.parametrize("test,servers", [("die-async", 1), ("die-ssp", 2)])
def test_async_parameter_server_drops_dead_worker(test, servers, tmp_path):
    # -disable-auto-cleanup: MPICH's launcher otherwise kills every rank when one dies
    rc, out, err, dt = run_mpi(4, MPI_DIR / "ps.py", tmp_path, test, servers, timeout=35, comm_timeout=5,
                               flags=["-disable-auto-cleanup"])
    victim = servers + 1
    assert f"PS OK {test} dropped=[{victim}]" in out, f"rc={rc}\n{out}\n{err[-3000:]}"
    assert f"dropped worker rank {victim}" in err
    assert rc in (0, 7), rc          # 7 is the dead worker's own exit code
    assert dt < 20


@needs_mpi
@pytest.mark.mpi
@pytest.mark.timeout(40)
def test_sync_parameter_server_stops_on_dead_worker(tmp_path):
    rc, out, err, dt = run_mpi(4, MPI_DIR / "ps.py", tmp_path, "die-sync", timeout=35, comm_timeout=5,
                               flags=["-disable-auto-cleanup"])
    assert rc != 0 and "PS OK" not in out, (rc, out, err[-3000:])
    assert "WorkerFailure" in err and "worker rank(s) [2]" in err, err[-3000:]
    assert dt < 15, dt


# ---------------------------------------------------------------- size 1, no mpiexec
SIZE1 = textwrap.dedent("""
    import sys, numpy as np
    BLOCK = sys.argv[1] == "nompi"
    if BLOCK:
        sys.modules["mpi4py"] = None          # as if mpi4py were not installed
    import funcgrad.dist as fd
    w = fd.world()
    assert (w.rank, w.size, w.local_rank) == (0, 1, 0), w
    assert (w.MPI is None) == BLOCK
    x = np.arange(5.0)
    y = fd.ring_allreduce(x, op="mean")
    assert np.array_equal(y, x) and y is not x
    assert fd.ring_allreduce(x, out=x) is x
    t = fd.allreduce_tree({"a": x, "b": 2.0})
    assert np.array_equal(t["a"], x) and t["b"] == 2.0 and t["a"] is not x
    b = fd.broadcast_tree([x, 3])
    assert np.array_equal(b[0], x) and b[1] == 3
    class SGD:
        def init(self, p): return None
        def update(self, g, s, p): return {k: -0.1 * v for k, v in g.items()}, s
    dp = fd.DataParallel(SGD(), grad_fn=lambda p, x: {"w": p["w"] - x.mean()}, check_every=1)
    params, st = dp.init({"w": np.ones(3)})
    params, st = dp.step(params, st, np.zeros(4))
    assert np.allclose(params["w"], 0.9)
    try:
        fd.ParameterServer({"w": np.ones(3)}, SGD())
    except fd.MPIUnavailableError as e:
        msg = str(e)
        assert "mpiexec -n" in msg
        assert ("pip install" in msg) == BLOCK, msg
    else:
        raise AssertionError("ParameterServer must refuse a world of size 1")
    try:
        fd.ring_allreduce(np.ones(3, dtype=np.int64), op="mean")
    except TypeError as e:
        assert "floating" in str(e)
    print("SIZE1 OK", sys.argv[1])
""")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("variant", ["mpi", "nompi"])
def test_world_of_size_one_without_mpiexec(variant):
    if variant == "mpi" and not HAVE_MPI4PY:
        pytest.skip("mpi4py not installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "HYDRA_", "MPI_LOCALRANKID"))}
    r = subprocess.run([sys.executable, "-c", SIZE1, variant], capture_output=True, text=True, timeout=50,
                       cwd=ROOT, env=env)
    assert r.returncode == 0 and f"SIZE1 OK {variant}" in r.stdout, r.stdout + r.stderr


MPIT = r"""
import os, sys
from mpi4py import MPI
from funcgrad.dist import _mpit
os.environ.pop("MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM", None)   # (MPICH read it at MPI_Init)
if sys.argv[1] == "env":
    print("VALUE", _mpit.read(MPI))
    raise SystemExit
class W:
    MPI = MPI
    small_rd = True
before = _mpit.read(MPI)
with _mpit.small_allreduce_algorithm(W, 4096) as on:
    inside = _mpit.read(MPI)
after = _mpit.read(MPI)
with _mpit.small_allreduce_algorithm(W, 10 ** 6) as on_big:
    big = _mpit.read(MPI)
W.small_rd = False
with _mpit.small_allreduce_algorithm(W, 4096) as on_off:
    off = _mpit.read(MPI)
print("MPIT", before, inside, after, on, on_big, big, on_off, off)
"""


@pytest.mark.skipif(not HAVE_MPI4PY, reason="mpi4py not installed")
def test_small_allreduce_schedule_is_set_and_restored():
    """_mpit sets MPICH's iallreduce algorithm to recursive doubling only inside its context, only
    for small messages, and to the value MPICH itself gives that name (read back from a process
    launched with the variable set)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "HYDRA_", "MPI_LOCALRANKID"))}
    r = subprocess.run([sys.executable, "-c", MPIT, "env"], capture_output=True, text=True, timeout=50,
                       cwd=ROOT, env={**env, "MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM": "sched_recursive_doubling"})
    m = re.search(r"VALUE (\S+)", r.stdout)
    assert r.returncode == 0 and m, r.stdout + r.stderr
    if m.group(1) == "None":
        pytest.skip("this MPI has no MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM (not MPICH)")
    want = int(m.group(1))
    r = subprocess.run([sys.executable, "-c", MPIT, "run"], capture_output=True, text=True, timeout=50,
                       cwd=ROOT, env=env)
    m = re.search(r"MPIT (.*)", r.stdout)
    assert r.returncode == 0 and m, r.stdout + r.stderr
    before, inside, after, on, on_big, big, on_off, off = m.group(1).split()
    assert on == "True" and int(inside) == want != int(before), m.group(1)
    assert after == before and on_big == "False" and big == before, m.group(1)
    assert on_off == "False" and off == before, m.group(1)


def test_comm_timeout_env_var(monkeypatch):
    from funcgrad.dist.comm import default_timeout
    monkeypatch.setenv("FUNCGRAD_COMM_TIMEOUT", "2.5")
    assert default_timeout() == 2.5
    monkeypatch.delenv("FUNCGRAD_COMM_TIMEOUT")
    assert default_timeout() == 120.0
    monkeypatch.setenv("FUNCGRAD_COMM_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="FUNCGRAD_COMM_TIMEOUT"):
        default_timeout()
    monkeypatch.setenv("FUNCGRAD_COMM_TIMEOUT", "-1")
    with pytest.raises(ValueError, match="> 0"):
        default_timeout()


def test_public_names():
    import funcgrad.dist as fd
    for name in ["world", "ring_allreduce", "allreduce_tree", "broadcast_tree", "DataParallel",
                 "data_parallel_step", "ParameterServer", "CommTimeout", "CommMismatchError"]:
        assert name in fd.__all__ and hasattr(fd, name)
    assert issubclass(fd.CommTimeout, TimeoutError)


# ---------------------------------------------------------------- examples
def _final_accuracy(out):
    line = [l for l in out.splitlines() if l.startswith("final test accuracy:")]
    assert len(line) == 1, f"the accuracy must be printed once (rank 0):\n{out}"
    return float(line[0].split(":")[1].split()[0])


@needs_mpi
@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_example_ddp_digits(tmp_path):
    ck = tmp_path / "ddp.npz"
    # launched the way the issue writes it: plain `python script.py` under mpiexec
    out = ok(run_mpi(4, ROOT / "examples" / "ddp_digits.py", "--epochs", "4", "--handwritten",
                     "--checkpoint", ck, timeout=110, module=False), "final test accuracy")
    assert _final_accuracy(out) > 0.9
    assert out.count("epoch ") == 4 and ck.exists()


@needs_mpi
@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.timeout(120)
# one mode in `make test` (test_parameter_server checks every mode's semantics); all three in `make test-sweep`
@pytest.mark.parametrize("mode,servers", [("sync", 1), pytest.param("async", 2, marks=pytest.mark.sweep),
                                          pytest.param("ssp", 2, marks=pytest.mark.sweep)])
def test_example_ps_digits(mode, servers):
    out = ok(run_mpi(4, ROOT / "examples" / "ps_digits.py", "--mode", mode, "--servers", servers,
                     "--clocks", 150, "--handwritten", timeout=110, module=False), "final test accuracy")
    assert _final_accuracy(out) > 0.85
    assert f"mode={mode} servers={servers}" in out


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_examples_without_mpiexec():
    """A plain `python example.py` is a world of one rank: DDP trains, the PS explains what it needs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "HYDRA_", "MPI_LOCALRANKID"))}
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "ddp_digits.py"), "--epochs", "2", "--handwritten"],
                       capture_output=True, text=True, timeout=100, cwd=ROOT, env=env)
    assert r.returncode == 0 and "1 rank(s)" in r.stdout and _final_accuracy(r.stdout) > 0.8, r.stdout + r.stderr
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "ps_digits.py"), "--handwritten"],
                       capture_output=True, text=True, timeout=100, cwd=ROOT, env=env)
    assert r.returncode != 0 and "needs at least 2 MPI ranks" in r.stderr and "mpiexec -n" in r.stderr, r.stderr


# ---------------------------------------------------------------- issue 19: fail fast, name the culprit
FAULTS2 = MPI_DIR / "faults2.py"


@needs_mpi
@pytest.mark.mpi
@pytest.mark.timeout(40)
@pytest.mark.parametrize("module", [False, True], ids=["plain-python", "python-m-mpi4py"])
def test_rank_that_raises_before_any_dist_call_aborts_job(module):
    """Rank 1 raises right after `import funcgrad.dist` (before world()): MPI was initialised at
    import, so its abort hook ends the job within 10 s, naming rank 1 and its exception."""
    rc, out, err, dt = run_mpi(2, FAULTS2, "early", timeout=35, comm_timeout=60, module=module)
    assert rc != 0 and dt < 10, (rc, dt, err[-2000:])
    assert "rank 1: uncaught FileNotFoundError" in err, err[-2000:]
    assert "bad config on rank 1: data/shard1.npz does not exist" in err
    assert "should not get here" not in out


@needs_mpi
@pytest.mark.mpi
@pytest.mark.timeout(40)
def test_killed_rank_is_named_by_survivors():
    """Rank 1 SIGKILLs itself mid-training. Under -disable-auto-cleanup, with each rank in a shell
    that outlives it (MPICH's launcher otherwise kills every rank at once), the survivors raise
    RankFailure naming rank 1 within a second (deadline 60 s), with the whole traceback."""
    rc, out, err, dt = run_mpi(3, "-c", f"trap '' USR1; {sys.executable} {FAULTS2} kill",
                               timeout=35, comm_timeout=60, module=False, flags=["-disable-auto-cleanup"],
                               shell=True)
    assert rc != 0 and dt < 15, (rc, dt, err[-3000:])
    assert "uncaught RankFailure" in err and "rank 1 (pid" in err and "exited or was killed" in err, \
        err[-3000:]
    assert "Traceback (most recent call last)" in err and "ring_allreduce" in err


@needs_mpi
@pytest.mark.mpi
@pytest.mark.timeout(40)
def test_uneven_inputs_name_the_rank_that_stopped_early():
    """Rank 1 runs 9 DataParallel steps, the others 10: they raise RankFailure at step 10 saying
    rank 1 finished after 9 steps (uneven inputs), within seconds instead of the 60 s deadline."""
    rc, out, err, dt = run_mpi(3, FAULTS2, "uneven", timeout=35, comm_timeout=60)
    assert rc != 0 and dt < 15, (rc, dt, err[-3000:])
    assert "rank 1 finished its script after 9 DataParallel step(s)" in err, err[-3000:]
    assert "during DataParallel step 10" in err and "uneven inputs" in err
    assert "no error" not in out


@needs_mpi
@pytest.mark.mpi
@pytest.mark.timeout(40)
def test_distributed_sampler_gives_every_rank_the_same_steps():
    """103 samples on 3 ranks through DataParallel.sampler: every rank runs the same number of
    steps, training ends normally and the parameters agree."""
    out = ok(run_mpi(3, FAULTS2, "sampler", timeout=35), "RESULT sampler")
    steps = re.findall(r"RESULT sampler rank=(\d) steps=(\d+) ok", out)
    assert sorted(int(r) for r, _ in steps) == [0, 1, 2] and len({s for _, s in steps}) == 1, out


@needs_mpi
@pytest.mark.mpi
@pytest.mark.timeout(40)
def test_nonfinite_gradient_raises_on_every_rank_naming_rank_step_leaf():
    """A NaN and an Inf in rank 1's gradient of params['W1'] at step 3: NonFiniteGradientError on
    every rank (fused and per-leaf paths) naming rank 1, step 3 and params['W1']."""
    out = ok(run_mpi(3, FAULTS2, "nan-raise", timeout=35), "RESULT nan-raise")
    lines = re.findall(r"RESULT nan-raise fused=(\w+) rank=(\d) ranks=\[1\] step=3 "
                       r"leaves=\{1: \[\"params\['W1'\]\"\]\} msg=(.*)", out)
    assert sorted((f, int(r)) for f, r, _ in lines) == [(f, r) for f in ("False", "True") for r in range(3)], out
    for _, _, msg in lines:
        assert "step 3" in msg and "rank 1: params['W1'] (1 NaN and 1 Inf of 4096 values)" in msg, msg


MISMATCH_MESSAGES = {   # faults2.py mismatch: what each rank's CommMismatchError must say
    "shape": "broadcast_tree: the ranks passed different trees (seen on rank {r}):\\n"
             "  tree['W1']: rank 0 (64, 64) float64, rank 1 (64, 80) float64",
    "missing": "allreduce_tree: the ranks passed different trees (seen on rank {r}):\\n"
               "  tree['b2']: rank 0 missing, rank 1 (10,) float64",
    "dtype": "  tree['W1']: rank 0 (4, 4) float64, rank 1 (4, 4) float32",
    "ring-shape": "ring_allreduce: the ranks passed different shape (seen on rank {r}):\\n"
                  "  shape: rank 0: (3, 4), rank 1: (4, 3)",
    "ring-shape-big": "  shape: rank 0: (300, 400), rank 1: (400, 300)",
    "ring-shape-spec": "  shape: rank 0: (3, 4), rank 1: (4, 3)",
    "ring-shape-shm": "  shape: rank 0: (64, 64), rank 1: (32, 128)",
    "dp-init": "  tree['W1']: rank 0 (64, 64) float64, rank 1 (64, 80) float64",
}


@needs_mpi
@pytest.mark.mpi
@pytest.mark.timeout(40)
def test_mismatched_trees_and_shapes_name_the_leaf_on_every_rank():
    """Issue 19 item 3: trees that differ by a leaf's shape, a missing key or a dtype, and
    ring_allreduce on (3, 4) vs (4, 3) (first call, 960 KB, after repeated calls, through node
    shared memory): every rank raises CommMismatchError naming the rank, the leaf and each rank's
    shape/dtype (not a hash), within seconds, and the communicator still works afterwards."""
    rc, out, err, dt = run_mpi(2, FAULTS2, "mismatch", timeout=35, comm_timeout=60)
    assert rc == 0 and dt < 15, (rc, dt, err[-3000:])
    got = {(t, int(r)): m for t, r, m in re.findall(r"RESULT (\S+) rank=(\d) msg=(.*?)(?=RESULT |\n|$)", out)}
    for tag, want in MISMATCH_MESSAGES.items():
        for r in (0, 1):
            assert (tag, r) in got, (tag, r, out[-4000:])
            assert want.format(r=r) in got[tag, r], (tag, r, got[tag, r])
            assert "tree signature" not in got[tag, r] and not re.search(r"rank \d: \d{6,}", got[tag, r])
    assert "RESULT after rank=0 ok=True" in out and "RESULT after rank=1 ok=True" in out, out[-2000:]


@needs_mpi
@pytest.mark.mpi
@pytest.mark.timeout(40)
def test_uncaught_mismatch_ends_the_job_naming_rank_and_leaf():
    """An uncaught CommMismatchError (broadcast_tree, W1 (64, 64) on rank 0, (64, 80) on ranks 1
    and 2) ends the job in seconds with exit status 1, the deadline being 60 s: the error is raised
    on every rank at once instead of leaving any rank waiting."""
    rc, out, err, dt = run_mpi(3, FAULTS2, "mismatch-uncaught", timeout=35, comm_timeout=60, module=False)
    assert rc == 1 and dt < 10, (rc, dt, err[-3000:])
    assert "uncaught CommMismatchError; aborting the job" in err, err[-3000:]
    assert "broadcast_tree: the ranks passed different trees" in err
    assert "tree['W1']: rank 0 (64, 64) float64, ranks 1, 2 (64, 80) float64" in err, err[-3000:]
    assert "no error" not in out


@needs_mpi
@pytest.mark.mpi
@pytest.mark.timeout(40)
def test_nonfinite_gradient_skip_mode_skips_the_step_everywhere():
    out = ok(run_mpi(3, FAULTS2, "nan-skip", timeout=35), "RESULT nan-skip")
    lines = re.findall(r"RESULT nan-skip fused=(\w+) rank=(\d) skipped=\[3\] finite=True W1=(\S+)", out)
    assert len(lines) == 6, out
    assert len({w for _, _, w in lines}) == 1, lines          # the same parameters on every rank


@needs_mpi
@pytest.mark.mpi
@pytest.mark.timeout(40)
@pytest.mark.parametrize("mode", ["async", "sync"])
def test_parameter_server_sees_dead_worker_in_seconds(mode, tmp_path):
    """A worker exits at clock 5 with worker_timeout=60 s: the servers see its process gone within
    about a second (no 60 s stall): async drops it and finishes, sync stops with WorkerFailure
    naming it (the server's message, not a worker blaming the server)."""
    rc, out, err, dt = run_mpi(4, MPI_DIR / "ps.py", tmp_path, f"die-{mode}", 1, timeout=35, comm_timeout=60,
                               flags=["-disable-auto-cleanup"], env={"PS_WORKER_TIMEOUT": "60"})
    assert dt < 15, (dt, err[-3000:])
    if mode == "async":
        assert "PS OK die-async dropped=[2]" in out and "its process exited or was killed" in err, err[-3000:]
    else:
        assert rc != 0 and "WorkerFailure" in err and "worker rank(s) [2] exited or were killed" in err, \
            err[-3000:]
        assert "timed out waiting for rank(s) [0]" not in err


@needs_mpi
@pytest.mark.mpi
@pytest.mark.timeout(40)
def test_parameter_server_survives_sigkilled_worker(tmp_path):
    """A SIGKILLed worker (as the OOM killer does) under async: dropped within seconds, training
    finishes (each rank in a shell that outlives the kill, as the README says)."""
    cmd = f"trap '' USR1; {sys.executable} {MPI_DIR / 'ps.py'} {tmp_path} kill-async 1"
    rc, out, err, dt = run_mpi(4, "-c", cmd, timeout=35, comm_timeout=60, module=False,
                               flags=["-disable-auto-cleanup"], env={"PS_WORKER_TIMEOUT": "60"}, shell=True)
    assert "PS OK kill-async dropped=[2]" in out, (rc, out, err[-3000:])
    assert dt < 15, dt


def test_interrupted_checkpoint_writes_leave_no_temporaries(tmp_path):
    """10 saves of a 16 MB checkpoint killed mid-write, then one save: no .tmp file is left; a
    temporary that a live writer holds is never removed."""
    import fcntl
    import signal as _signal
    import funcgrad.checkpoint as ck
    import numpy as np
    path = tmp_path / "ck.npz"
    script = ("import sys, numpy as np, funcgrad.checkpoint as ck\n"
              "big = {'w': np.ones(2 * 2 ** 20)}\n"
              "while True:\n    ck.save(sys.argv[1], big)\n")
    left = 0
    for _ in range(10):
        p = subprocess.Popen([sys.executable, "-c", script, str(path)], cwd=ROOT)
        t0 = time.monotonic()
        while not any(n.endswith(".tmp") for n in os.listdir(tmp_path)) and time.monotonic() - t0 < 20:
            time.sleep(0.01)
        time.sleep(0.02)
        p.send_signal(_signal.SIGKILL)
        p.wait(timeout=10)
        left = max(left, len([n for n in os.listdir(tmp_path) if n.endswith(".tmp")]))
    assert left >= 1, "the kills never interrupted a write: the test proves nothing"
    # a live writer's temporary (its lock held) must survive the next save
    live = tmp_path / ".ck.npz.live.tmp"
    fd = os.open(live, os.O_CREAT | os.O_WRONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        ck.save(path, {"w": np.zeros(3)})
        rest = sorted(n for n in os.listdir(tmp_path) if n.endswith(".tmp"))
        assert rest == [live.name], rest
    finally:
        os.close(fd)
    ck.save(path, {"w": np.zeros(3)})
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    assert np.array_equal(ck.load(path)["w"], np.zeros(3))
