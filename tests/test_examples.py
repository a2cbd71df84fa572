"""The example scripts run end to end, as a user runs them: one subprocess per run.

Each training example runs on reduced epochs and must exit 0, print a sane final
metric, write its checkpoint and its curves PNG, and resume exactly: a 2-epoch
run continued with ``--resume --epochs 3`` trains one more epoch and ends with
the same checkpoint contents, bit for bit, as a straight 3-epoch run. The runs go
side by side (one per core): the straight run starts once the first has
finished an epoch (a cold Numba cache is compiled only once), the resumed one
as soon as the first has finished.
One test per example, so that under pytest-xdist no run is repeated on both
workers.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from funcgrad import checkpoint, tree_flatten

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TIMEOUT = 300  # seconds per run; a cold Numba cache compiles the conv kernels (tens of seconds)


def _env():
    env = dict(os.environ)
    env["MPLBACKEND"] = "Agg"
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _start(script, *args, log=None):
    """Launch ``examples/<script> args``; stdout is piped, stderr (tqdm's bars) goes to ``log``."""
    err = open(log, "w") if log is not None else subprocess.DEVNULL
    proc = subprocess.Popen([sys.executable, str(EXAMPLES / script), *map(str, args)], cwd=ROOT, env=_env(),
                            stdout=subprocess.PIPE, stderr=err, text=True)
    proc.log = log
    if log is not None:
        err.close()
    return proc


def _wait_for_epoch(proc):
    """Read ``proc``'s stdout up to its first epoch line (its kernels are compiled and disk-cached by
    then); returns what was read."""
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("epoch "):
            break
    return "".join(lines)


def _finish(proc, what, head=""):
    try:
        out, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"{what} did not finish in {TIMEOUT} s\n--- stdout\n{head + out}\n--- stderr\n{_tail(proc)}")
    out = head + out
    assert proc.returncode == 0, f"{what} exited with {proc.returncode}\n--- stdout\n{out}\n--- stderr\n{_tail(proc)}"
    return out


def _tail(proc):
    if proc.log is None or not os.path.exists(proc.log):
        return ""
    with open(proc.log, errors="replace") as f:
        return f.read()[-3000:]


def _final_metric(out):
    last = out.strip().splitlines()[-1]
    m = re.fullmatch(r"final test accuracy(?: \(R\^2\))?: ([0-9.]+)", last)
    assert m, f"the last line should report the final test accuracy, got {last!r}"
    return float(m.group(1))


def _epoch_lines(out):
    return re.findall(r"^epoch\s+(\d+)/(\d+)\s", out, flags=re.M)


def _assert_same_checkpoint(a, b):
    ta, ma = checkpoint.load(a, with_metadata=True)
    tb, mb = checkpoint.load(b, with_metadata=True)
    la, sa = tree_flatten(ta)
    lb, sb = tree_flatten(tb)
    assert sa == sb, f"checkpoint structures differ:\n{sa}\n{sb}"
    assert len(la) == len(lb)
    for i, (x, y) in enumerate(zip(la, lb)):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape, f"leaf {i}: {x.dtype}{x.shape} vs {y.dtype}{y.shape}"
        assert x.tobytes() == y.tobytes(), f"leaf {i} differs (max |diff| {np.max(np.abs(x - y))})"
    assert ma["epoch"] == mb["epoch"] == 3
    assert ma["history"] == mb["history"], "the recorded curves differ"


def _train_and_resume(script, tmp_path, extra=()):
    """Runs: 2 epochs into a/ and 3 epochs into b/ side by side, then a/ resumed to 3 epochs (while b/ runs).
    Returns (stdout of the 3-epoch run, stdout of the resumed run, a/, b/)."""
    a, b = tmp_path / "a", tmp_path / "b"
    p2 = _start(script, "--epochs", 2, "--out", a, *extra, log=tmp_path / "a.err")
    head2 = _wait_for_epoch(p2)  # on a cold Numba cache, p3 then loads the kernels p2 compiled
    p3 = _start(script, "--epochs", 3, "--out", b, *extra, log=tmp_path / "b.err")
    out2 = _finish(p2, f"{script} --epochs 2", head2)
    assert [int(e) for e, _ in _epoch_lines(out2)] == [1, 2], out2
    pr = _start(script, "--epochs", 3, "--out", a, "--resume", *extra, log=tmp_path / "r.err")
    out3 = _finish(p3, f"{script} --epochs 3")
    assert [int(e) for e, _ in _epoch_lines(out3)] == [1, 2, 3], out3
    out_r = _finish(pr, f"{script} --resume --epochs 3")
    assert "resumed from" in out_r, out_r
    assert [int(e) for e, _ in _epoch_lines(out_r)] == [3], f"the resumed run should train epoch 3 only:\n{out_r}"

    for d in (a, b):
        assert (d / "checkpoint.npz").is_file(), f"no checkpoint in {d}: {sorted(os.listdir(d))}"
        png = d / "curves.png"
        assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"no PNG curves in {d}"
    _assert_same_checkpoint(a / "checkpoint.npz", b / "checkpoint.npz")
    # the resumed run ends where the straight run ends, and says so
    assert _final_metric(out_r) == _final_metric(out3)
    return out3, out_r, a, b


def test_quickstart(tmp_path):
    out = _finish(_start("quickstart.py", log=tmp_path / "err"), "quickstart.py")
    assert "matches central finite differences" in out, out


def test_linear_regression(tmp_path):
    out3, _, _, b = _train_and_resume("linear_regression.py", tmp_path)
    assert _final_metric(out3) > 0.99, out3
    err = float(re.search(r"max \|learned - true\| = ([0-9.]+)", out3).group(1))
    assert err < 0.05, f"the learned weights should be near the true ones:\n{out3}"
    params = checkpoint.load(b / "checkpoint.npz")["params"]
    assert params["w"].shape == (8,) and params["w"].dtype == np.float64


def test_mlp_digits(tmp_path):
    out3, _, _, _ = _train_and_resume("mlp_digits.py", tmp_path)
    assert _final_metric(out3) > 0.90, out3


@pytest.mark.sweep   # ~40 s on 2 cores: make test-sweep (conv/pool kernels and gradients are tested on their own)
def test_lenet_digits(tmp_path):
    # one straight run: stopping and resuming is the examples' shared code, which the linear regression and
    # MLP runs above check exactly (two more LeNet runs cost CI half a minute)
    b = tmp_path / "b"
    out3 = _finish(_start("lenet_digits.py", "--epochs", 3, "--out", b, log=tmp_path / "b.err"), "lenet_digits.py")
    assert [int(e) for e, _ in _epoch_lines(out3)] == [1, 2, 3], out3
    assert _final_metric(out3) > 0.90, out3
    png = b / "curves.png"
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"no PNG curves in {b}"
    params = checkpoint.load(b / "checkpoint.npz")["params"]
    assert params["conv1"]["w"].shape == (32, 1, 3, 3) and params["conv1"]["w"].dtype == np.float32


def test_resume_without_checkpoint_starts_fresh(tmp_path):
    out = _finish(_start("linear_regression.py", "--epochs", 1, "--out", tmp_path, "--resume", log=tmp_path / "err"),
                  "linear_regression.py --resume (no checkpoint)")
    assert "starting from scratch" in out and [int(e) for e, _ in _epoch_lines(out)] == [1], out


# On the simulator these run in `make test-sweep` (MLP ~30 s, LeNet ~35 s on 2 cores); tests/test_cuda.py checks
# every kernel and gradient they use on the simulator in make test
@pytest.mark.sweep
@pytest.mark.parametrize("script, size", [("mlp_digits.py", ("--hidden", 4)),
                                          ("lenet_digits.py", ("--channels", "2,3,4"))])
def test_examples_train_on_the_gpu_as_on_the_cpu(tmp_path, script, size):
    # --device cuda, on Numba's CUDA simulator here (a tiny model: the simulator runs a Python thread per CUDA
    # thread); the parameters it ends with are the CPU run's, to float32 rounding
    args = ("--epochs", 1, "--limit", 50, "--batch-size", 20, *size)
    cpu = _start(script, *args, "--out", tmp_path / "cpu", log=tmp_path / "cpu.err")
    out_cpu = _finish(cpu, f"{script} on the CPU")
    env = _env()
    env["NUMBA_ENABLE_CUDASIM"] = "1"
    gpu = subprocess.Popen([sys.executable, str(EXAMPLES / script), *map(str, args), "--device", "cuda",
                            "--out", str(tmp_path / "gpu")], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                           stderr=open(tmp_path / "gpu.err", "w"), text=True)
    gpu.log = tmp_path / "gpu.err"
    out_gpu = _finish(gpu, f"{script} --device cuda")
    assert _final_metric(out_gpu) == _final_metric(out_cpu), (out_cpu, out_gpu)
    a = checkpoint.load(tmp_path / "cpu" / "checkpoint.npz")
    b = checkpoint.load(tmp_path / "gpu" / "checkpoint.npz")
    la, lb = tree_flatten(a)[0], tree_flatten(b)[0]
    assert len(la) == len(lb) > 4
    for x, y in zip(la, lb):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_allclose(y, x, rtol=1e-4, atol=1e-5)
