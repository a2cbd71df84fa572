"""funcgrad.checkpoint: exact round trips, atomic writes under SIGKILL, clear errors, exact resume."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import NamedTuple

import numpy as np
import pytest

from funcgrad import checkpoint, optim
from funcgrad.checkpoint import CheckpointError
from funcgrad.errors import TreeStructureError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Pair(NamedTuple):
    a: object
    b: object


def assert_identical(x, y, where="tree"):
    """Same types all the way down, arrays with identical dtype, shape and bytes."""
    assert type(x) is type(y), f"{where}: {type(x)} vs {type(y)}"
    if isinstance(x, dict):
        assert list(x) == list(y), where
        for k in x:
            assert_identical(x[k], y[k], f"{where}[{k!r}]")
    elif isinstance(x, (list, tuple)):
        assert len(x) == len(y), where
        for i, (a, b) in enumerate(zip(x, y)):
            assert_identical(a, b, f"{where}[{i}]")
    elif isinstance(x, (np.ndarray, np.generic)):
        assert x.dtype == y.dtype and x.shape == y.shape, where
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes(), where
    elif isinstance(x, float):
        assert x.hex() == y.hex(), where  # bit-exact, nan included
    else:
        assert x == y, where


def sample_tree():
    rng = np.random.default_rng(1)
    params = {"W": rng.normal(size=(3, 4)), "b": rng.normal(size=4).astype(np.float32), "n": np.arange(5)}
    opt = optim.chain(optim.clip_by_global_norm(1.0), optim.adam(1e-3, amsgrad=False))
    state = opt.init(params | {"n": np.zeros(5)})
    return {
        "params": params,
        "opt": state,
        "step": 5,
        "seed": 2 ** 70 + 3,
        "rng": np.random.default_rng(7).bit_generator.state,
        "lr": 0.1,
        "weird_floats": [float("nan"), float("-inf"), -0.0, 5e-324],
        "np_scalars": (np.float32(1.5), np.int64(-3), np.float64(np.pi), np.bool_(True)),
        "zero_d": np.array(2.5),
        "flags": [True, False, None],
        "name": "run-α",
        "z": 1 + 2j,
        "pair": Pair(np.zeros((0, 3)), Pair(None, [1, 2])),
        3: "int key",
        "empty": {},
        "bytes": np.array([b"ab", b"c"]),
        "unicode": np.array(["x", "yz"]),
    }


def test_round_trip_exact(tmp_path):
    tree = sample_tree()
    p = tmp_path / "ck.npz"
    checkpoint.save(p, tree, metadata={"epoch": 3, "note": "hi"})
    back, meta = checkpoint.load(p, with_metadata=True)
    assert_identical(tree, back)
    assert meta == {"epoch": 3, "note": "hi"}
    assert checkpoint.load_metadata(p) == meta
    assert isinstance(back["opt"][1], optim.AdamState) and back["opt"][1].nu_max is None
    # np.random state restores exactly
    g = np.random.default_rng()
    g.bit_generator.state = back["rng"]
    np.testing.assert_array_equal(g.random(5), np.random.default_rng(7).random(5))
    # loading with a matching template is fine
    checkpoint.load(p, like=sample_tree())
    # no temporary files left behind
    assert sorted(os.listdir(tmp_path)) == ["ck.npz"]


def test_file_is_plain_npz_without_pickle(tmp_path):
    p = tmp_path / "ck.npz"
    checkpoint.save(p, {"w": np.ones(3)})
    with np.load(p, allow_pickle=False) as z:
        header = json.loads(bytes(z["__tree__"]).decode())
        assert header["format"] == "funcgrad-checkpoint"
        np.testing.assert_array_equal(z["leaf_0"], np.ones(3))


def test_overwrite_replaces(tmp_path):
    p = tmp_path / "ck.npz"
    checkpoint.save(p, {"v": np.array(1)})
    checkpoint.save(p, {"v": np.array(2)})
    assert checkpoint.load(p)["v"] == 2


# ---------------------------------------------------------------- refusals at save

class Opaque:
    pass


@pytest.mark.parametrize("tree,match", [
    ({"a": np.array([1, "x", None], dtype=object)}, r"tree\['a'\].*object"),
    ({"a": [Opaque()]}, r"tree\['a'\]\[0\].*Opaque"),
    ({"s": {1, 2}}, r"tree\['s'\].*set"),
    ({(1, 2): 3}, r"key \(1, 2\)"),
])
def test_save_refuses(tmp_path, tree, match):
    p = tmp_path / "ck.npz"
    with pytest.raises(CheckpointError, match=match):
        checkpoint.save(p, tree)
    assert not os.listdir(tmp_path)  # nothing written, no temp file


def test_save_refuses_local_namedtuple_and_bad_metadata(tmp_path):
    class Local(NamedTuple):
        x: int

    with pytest.raises(CheckpointError, match="inside a function"):
        checkpoint.save(tmp_path / "a.npz", {"l": Local(1)})
    with pytest.raises(CheckpointError, match="JSON"):
        checkpoint.save(tmp_path / "a.npz", {"x": 1}, metadata={"arr": np.ones(2)})
    assert not os.listdir(tmp_path)


# ---------------------------------------------------------------- corrupt files

def test_truncated_and_corrupt_files_raise_clear_error(tmp_path):
    p = tmp_path / "ck.npz"
    checkpoint.save(p, {"w": np.arange(1000.0), "opt": optim.sgd(0.1, momentum=0.9).init({"w": np.ones(3)})})
    data = p.read_bytes()
    for cut in (0, 10, len(data) // 2, len(data) - 1):
        bad = tmp_path / f"cut{cut}.npz"
        bad.write_bytes(data[:cut])
        with pytest.raises(CheckpointError, match=r"cut%d\.npz.*truncated or corrupt" % cut):
            checkpoint.load(bad)
    # one flipped byte inside the array data: the zip CRC catches it
    i = data.index(np.arange(1000.0).tobytes()[800:816])
    flipped = bytearray(data)
    flipped[i] ^= 0xFF
    bad = tmp_path / "flip.npz"
    bad.write_bytes(bytes(flipped))
    with pytest.raises(CheckpointError, match="flip.npz"):
        checkpoint.load(bad)
    # an npz that is not a funcgrad checkpoint
    other = tmp_path / "other.npz"
    np.savez(other, x=np.ones(2))
    with pytest.raises(CheckpointError, match="__tree__"):
        checkpoint.load(other)
    with pytest.raises(FileNotFoundError):
        checkpoint.load(tmp_path / "missing.npz")


def test_structure_mismatch_names_key_path(tmp_path):
    p = tmp_path / "ck.npz"
    params = {"layer": {"W": np.ones((2, 3)), "b": np.zeros(3)}}
    opt = optim.adam(1e-3)
    checkpoint.save(p, {"params": params, "opt": opt.init(params), "step": 1})
    like = {"params": {"layer": {"W": np.ones((2, 3)), "c": np.zeros(3)}}, "opt": opt.init(params), "step": 1}
    with pytest.raises(TreeStructureError, match=r"checkpoint\['params'\]\['layer'\].*'b'.*'c'"):
        checkpoint.load(p, like=like)
    like = {"params": {"layer": {"W": np.ones((3, 3)), "b": np.zeros(3)}}, "opt": opt.init(params), "step": 1}
    with pytest.raises(TreeStructureError, match=r"checkpoint\['params'\]\['layer'\]\['W'\] has shape \(2, 3\)"):
        checkpoint.load(p, like=like)
    like = {"params": params, "opt": optim.sgd(0.1, momentum=0.9).init(params), "step": 1}
    with pytest.raises(TreeStructureError, match=r"checkpoint\['opt'\]"):
        checkpoint.load(p, like=like)
    like = {"params": params, "opt": opt.init(params), "step": 1.0}
    with pytest.raises(TreeStructureError, match=r"checkpoint\['step'\] is a int"):
        checkpoint.load(p, like=like)


# ---------------------------------------------------------------- atomicity under SIGKILL

CHILD = textwrap.dedent("""
    import sys, time, numpy as np
    from funcgrad import checkpoint
    path, signal_file = sys.argv[1], sys.argv[2]
    real = checkpoint._write_npz

    class SlowFile:
        # forwards to the real temp file; after 1 MiB, announces itself and stalls mid-write
        def __init__(self, f):
            self.f, self.n, self.stalled = f, 0, False
        def write(self, b):
            r = self.f.write(b)
            self.n += len(b)
            if self.n > (1 << 20) and not self.stalled:
                self.stalled = True
                self.f.flush()
                open(signal_file, "w").close()
                time.sleep(120)
            return r
        def __getattr__(self, k):
            return getattr(self.f, k)

    checkpoint._write_npz = lambda f, arrays: real(SlowFile(f), arrays)
    checkpoint.save(path, {"w": np.full(2_000_000, 2.0), "step": 2})
""")


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_sigkill_during_save_keeps_previous_checkpoint(tmp_path):
    path = tmp_path / "ck.npz"
    old = {"w": np.full(2_000_000, 1.0), "step": 1}
    checkpoint.save(path, old)
    before = path.read_bytes()
    sig = tmp_path / "stalled"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path), str(sig)], env=_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 30
        while not sig.exists():
            assert child.poll() is None, child.stderr.read().decode()
            assert time.time() < deadline, "child never started writing"
            time.sleep(0.02)
        temps = [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]
        assert len(temps) == 1 and os.path.getsize(tmp_path / temps[0]) > (1 << 20)
        child.send_signal(signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(10)
    assert child.returncode == -signal.SIGKILL
    assert path.read_bytes() == before
    assert_identical(checkpoint.load(path), old)
    # the half-written temp file is not a loadable checkpoint
    with pytest.raises(CheckpointError):
        checkpoint.load(tmp_path / temps[0])
    # and the next save still works
    checkpoint.save(path, {"w": np.zeros(2), "step": 3})
    assert checkpoint.load(path)["step"] == 3


# ---------------------------------------------------------------- exact resume

def _train(opt, n_steps, start=None, stop_at=None, ckpt=None):
    """Minibatch linear regression; returns the state dict after n_steps (float64)."""
    rng0 = np.random.default_rng(42)
    X = rng0.normal(size=(64, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.3 + 0.01 * rng0.normal(size=64)
    if start is None:
        params = {"w": np.zeros(3), "b": np.zeros(())}
        st = {"params": params, "opt": opt.init(params), "step": 0,
              "rng": np.random.default_rng(123).bit_generator.state}
    else:
        st = start
    rng = np.random.default_rng()
    rng.bit_generator.state = st["rng"]
    params, ostate, step = st["params"], st["opt"], st["step"]
    while step < n_steps:
        idx = rng.choice(64, size=16, replace=False)
        xb, yb = X[idx], y[idx]
        r = xb @ params["w"] + params["b"] - yb
        grads = {"w": xb.T @ r / 16, "b": np.asarray(r.mean())}
        upd, ostate = opt.update(grads, ostate, params)
        params = optim.apply_updates(params, upd)
        step += 1
        if step == stop_at:
            checkpoint.save(ckpt, {"params": params, "opt": ostate, "step": step,
                                   "rng": rng.bit_generator.state})
    return {"params": params, "opt": ostate, "step": step, "rng": rng.bit_generator.state}


@pytest.mark.parametrize("make", [
    lambda: optim.sgd(0.1, momentum=0.9, nesterov=True, weight_decay=1e-3),
    lambda: optim.chain(optim.clip_by_global_norm(5.0),
                        optim.adam(optim.warmup_cosine_decay(0.1, 3, 7), weight_decay=1e-2)),
], ids=["sgd-nesterov", "clip-adam-schedule"])
def test_resume_is_bit_exact(tmp_path, make):
    ck = tmp_path / "ck.npz"
    full = _train(make(), 10, stop_at=5, ckpt=ck)
    template = _train(make(), 0)
    resumed_state = checkpoint.load(ck, like=template)
    assert resumed_state["step"] == 5
    resumed = _train(make(), 10, start=resumed_state)
    assert_identical(full, resumed)
    # a sanity check that the comparison can fail: five extra steps change the params
    assert not np.array_equal(_train(make(), 5)["params"]["w"], full["params"]["w"])


@pytest.mark.parametrize("make", [
    lambda: optim.sgd(0.1, momentum=0.9), lambda: optim.adam(0.1, amsgrad=True), lambda: optim.adamw(0.1),
    lambda: optim.rmsprop(0.1, centered=True, momentum=0.5), lambda: optim.adagrad(0.1),
    lambda: optim.multi_transform({"a": optim.adam(0.1), "b": optim.chain(optim.clip_by_global_norm(1.0),
                                                                          optim.sgd(0.1))},
                                  {"W": "a", "b": "b"}),
])
def test_every_optimizer_state_round_trips(tmp_path, make):
    params = {"W": np.ones((2, 3), np.float32), "b": np.zeros(3, np.float32)}
    opt = make()
    st = opt.init(params)
    for _ in range(2):
        u, st = opt.update({"W": np.full((2, 3), 0.3, np.float32), "b": np.ones(3, np.float32)}, st, params)
        params = optim.apply_updates(params, u)
    checkpoint.save(tmp_path / "s.npz", {"params": params, "opt": st})
    back = checkpoint.load(tmp_path / "s.npz", like={"params": params, "opt": st})
    assert_identical({"params": params, "opt": st}, back)


REAL_CHILD = textwrap.dedent("""
    import sys, numpy as np
    from funcgrad import checkpoint
    checkpoint.save(sys.argv[1], {"w": np.full(8_000_000, 2.0), "step": 2})   # 64 MB, real writer
""")


def test_sigkill_real_writer_leaves_old_or_new_never_partial(tmp_path):
    path = tmp_path / "ck.npz"
    checkpoint.save(path, {"w": np.full(10, 1.0), "step": 1})
    child = subprocess.Popen([sys.executable, "-c", REAL_CHILD, str(path)], env=_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 30
        while not any(f.endswith(".tmp") for f in os.listdir(tmp_path)) and child.poll() is None:
            assert time.time() < deadline
            time.sleep(0.001)
        child.send_signal(signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(10)
    back = checkpoint.load(path)       # whatever happened, the file is a complete checkpoint
    assert back["step"] in (1, 2)
    assert back["w"].shape == ((10,) if back["step"] == 1 else (8_000_000,))
    assert np.all(back["w"] == back["step"])
