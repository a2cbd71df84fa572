"""CUDA graphs on the GPU backend (funcgrad.kernels.cuda_graph): a compiled function's launches recorded once
and replayed, right or not used.

On the simulator (CI): what the kernels do while a graph is recorded (a full reduction stays on the device,
host reads and host-to-device copies are refused, label checks are deferred, writes into arguments refused)
and when a call records, replays or runs as always. With FUNCGRAD_TEST_GPU=1 on a machine with an NVIDIA GPU
and CuPy: real recordings against the same calls without graphs.
"""
import os

import numpy as np
import pytest

import funcgrad
from funcgrad import nn

pytest.importorskip("numba.cuda", reason="numba.cuda (numba-cuda) is not installed")
from funcgrad.kernels import cuda as K  # noqa: E402
from funcgrad.kernels import cuda_graph as G  # noqa: E402
from funcgrad.kernels import cuda_launch as L  # noqa: E402

ON_GPU = os.environ.get("FUNCGRAD_TEST_GPU") == "1"
RNG = np.random.default_rng(0)
put, get = funcgrad.device_put, funcgrad.device_get


class _Recording:
    """The kernels' view of a recording in progress (no capture: on the simulator kernels run as launched)."""

    def __init__(self, inputs=()):
        self.rec = G.Recording({K.address(K.as_device(a)) for a in inputs})

    def __enter__(self):
        L.LOCAL.recording = self.rec
        return self.rec

    def __exit__(self, *exc):
        L.LOCAL.recording = None
        return False


# ------------------------------------------------------------------------------------------------- while recording
def test_a_full_reduction_stays_on_the_device_while_recording():
    x = RNG.uniform(-1, 1, (5, 7)).astype(np.float32)
    assert type(K.mean(put(x))) is np.float32   # (a host number without a recording)
    with _Recording():
        m, s = K.mean(put(x)), K.sum(put(x))
        twice = K.materialize(K.multiply(m, 2.0))
    for dev, ref in ((m, x.mean()), (s, x.sum()), (twice, 2 * x.mean())):
        assert K.is_device_array(dev) and dev.shape == () and dev.dtype == np.float32
        np.testing.assert_allclose(get(dev), ref, rtol=1e-5)


def test_host_reads_and_copies_to_the_device_are_refused_while_recording():
    xh = RNG.standard_normal((6, 3))
    x = put(xh)
    seen, new = np.array([0, 2, 2, 5]), np.array([1, 4, 3, 1])
    K.getitem(x, seen)   # (without a recording: the index goes to the device, and its copy is kept)
    with _Recording() as rec:
        np.testing.assert_array_equal(get(K.getitem(x, seen)), xh[seen])   # the kept copy: no copy to the device
        assert rec.keep   # (and the recording holds on to it)
        with pytest.raises(L.NotRecordable):
            K.getitem(x, new)
        with pytest.raises(L.NotRecordable):
            K.add(x, 1.0).copy_to_host()
        with pytest.raises(L.NotRecordable):
            K.getitem(x, put(seen))   # (a GPU index is read on the host)


def test_host_arrays_copied_to_the_device_are_kept_by_content_not_by_object():
    a = np.arange(7, dtype=np.int64)
    d1 = K._to_device(a)
    d2 = K._to_device(a.copy())
    assert d1 is d2
    b = a.copy()
    b[3] = 99
    d3 = K._to_device(b)
    assert d3 is not d1 and get(d3)[3] == 99 and get(d1)[3] == 3
    assert K._to_device(a.astype(np.int32)) is not d1   # (the dtype is part of the content)
    big = np.zeros(K._CACHE_ONE // 8 + 1)
    assert K._to_device(big) is not K._to_device(big)   # (large arrays are copied every time)


def test_a_label_check_is_read_after_the_replay_while_recording():
    z = put(RNG.standard_normal((4, 3)).astype(np.float32))
    bad = put(np.array([0, 1, 7, 2]))
    with pytest.raises(IndexError, match="label"):
        K.cross_entropy(z, bad)
    with _Recording() as rec:
        K.cross_entropy(z, bad)   # not raised here: the graph has not run
    [(flag, exc, msg)] = rec.checks
    assert exc is IndexError and "label" in msg
    assert get(flag)[0] != 0   # (the simulator ran the kernel: the flag a replay reads is set)


def test_an_in_place_write_into_an_argument_is_refused_while_recording():
    arg, own = put(np.zeros(5)), put(np.zeros(5))
    K.index_put(own, np.array([1]), 2.0)   # (the positions are now kept on the device)
    with _Recording(inputs=[arg]):
        with pytest.raises(L.NotRecordable):
            K.index_put(arg, np.array([1]), 2.0)
        K.index_put(own, np.array([1]), 3.0)   # into an array of the function's own: recorded
    np.testing.assert_array_equal(get(own), [0, 3, 0, 0, 0])
    np.testing.assert_array_equal(get(arg), np.zeros(5))


# ------------------------------------------------------------------------------------------------- when a call records
class _FakeReplay(G._Replay):
    def __init__(self, fn, args):
        self.fn, self.recorded_with, self.runs = fn, args, 0

    def run(self, args):
        self.runs += 1
        return ("replayed", self.fn(*args))


@pytest.fixture
def fake_recordings(monkeypatch):
    made, failing = [], []

    def record(K_, fn, materialize, args):
        if failing:
            raise L.NotRecordable(failing[0])
        made.append(_FakeReplay(fn, args))
        return made[-1]

    monkeypatch.setattr(G, "_record", record)
    monkeypatch.setattr(G, "enabled", lambda K_: True)
    return made, failing


def _graphs():
    calls = []

    def fn(*args):
        calls.append(args)
        return sum(a for a in args if isinstance(a, float))
    return G.Graphs(fn, K), calls, (lambda args: ("eager", fn(*args)))


def test_the_first_call_runs_the_second_records_and_later_ones_replay(fake_recordings):
    made, _ = fake_recordings
    graphs, _, eager = _graphs()
    x = put(np.ones(3))
    assert graphs((x, 1.0), eager)[0] == "eager"
    assert graphs((x, 1.0), eager) == ("replayed", 1.0)
    assert graphs((x, 1.0), eager) == ("replayed", 1.0)
    assert len(made) == 1 and made[0].runs == 2
    assert graphs((x, 2.0), eager)[0] == "eager"   # a host number is part of the key: its value selects the graph
    assert graphs((put(np.ones(4)), 1.0), eager)[0] == "eager"   # so is a shape
    assert graphs((put(np.ones(3)), 1.0), eager)[0] == "replayed"   # not the array's address
    assert graphs((x, [1.0]), eager)[0] == "eager" and graphs((x, [1.0]), eager)[0] == "eager"   # no key: never


def test_a_key_whose_recording_fails_twice_runs_without_one(fake_recordings):
    made, failing = fake_recordings
    graphs, _, eager = _graphs()
    x = put(np.ones(3))
    failing.append("a device value read on the host")
    before = G.STATS["reasons"].get("NotRecordable: a device value read on the host", 0)
    for _ in range(5):
        assert graphs((x, 1.0), eager) == ("eager", 1.0)
    assert G.STATS["reasons"]["NotRecordable: a device value read on the host"] == before + G.MAX_FAILURES
    failing.clear()
    assert graphs((x, 1.0), eager)[0] == "eager" and not made


def test_at_most_max_graphs_recordings_are_kept(fake_recordings):
    made, _ = fake_recordings
    graphs, _, eager = _graphs()
    x = put(np.ones(3))
    for c in range(G.MAX_GRAPHS + 2):
        graphs((x, float(c)), eager)
        graphs((x, float(c)), eager)
    assert sum(isinstance(v, G._Replay) for v in graphs.keys.values()) == G.MAX_GRAPHS
    assert graphs((x, float(G.MAX_GRAPHS + 1)), eager)[0] == "replayed"   # the most recent stay
    assert graphs((x, 0.0), eager)[0] == "eager"                          # the least recent went


def test_a_function_records_at_most_max_recordings_times(fake_recordings, monkeypatch):
    made, _ = fake_recordings
    monkeypatch.setattr(G, "MAX_GRAPHS", 100)
    graphs, _, eager = _graphs()
    x = put(np.ones(3))
    for c in range(G.MAX_RECORDINGS + 5):   # (a host number that changes all the time: a new key each)
        graphs((x, float(c)), eager)
        graphs((x, float(c)), eager)
    assert len(made) == G.MAX_RECORDINGS
    assert graphs((x, 0.0), eager)[0] == "replayed"
    assert graphs((x, float(G.MAX_RECORDINGS + 4)), eager)[0] == "eager"


def test_keys_seen_once_are_forgotten_beyond_max_keys(fake_recordings):
    graphs, _, eager = _graphs()
    x = put(np.ones(3))
    graphs((x, -1.0), eager)
    graphs((x, -1.0), eager)   # (a graph: kept)
    for c in range(G.MAX_KEYS * 3):
        graphs((x, float(c)), eager)
    assert len(graphs.keys) <= G.MAX_KEYS
    assert graphs((x, -1.0), eager)[0] == "replayed"


def test_a_function_called_while_another_records_runs_inline(fake_recordings, monkeypatch):
    made, _ = fake_recordings
    graphs, _, eager = _graphs()
    x = put(np.ones(3))
    monkeypatch.setattr(L.LOCAL, "stream", object())   # (another function's recording runs on its stream)
    for _ in range(3):
        assert graphs((x, 1.0), eager)[0] == "eager"
    assert not made


def test_code_that_calls_something_for_its_effect_is_never_replayed():
    import logging
    from typing import NamedTuple

    from funcgrad.kernels.cuda_backend import CUDA

    class P(NamedTuple):
        w: object

    def fn(x):
        return x
    assert CUDA.compile(fn, "python", {})._fg_graphs is not None
    assert CUDA.compile(fn, "python", {"_e0": np.tanh, "_e1": len, "_e2": P, "_e3": 2.0})._fg_graphs is not None
    for effect in (print, logging.info, lambda v: v):   # (a replay runs no Python: print would run once)
        assert CUDA.compile(fn, "python", {"_e0": effect})._fg_graphs is None
    assert CUDA.compile(fn, "nojit", {})._fg_graphs is None   # (jit=False, and the code funcgrad reads back)


def test_a_recording_may_hold_at_most_half_the_free_memory():
    assert not G.too_big(400, 1000) and G.too_big(600, 1000)


def test_graphs_are_off_on_the_simulator_and_when_turned_off(monkeypatch):
    assert not G.enabled(K) or not K.SIM
    monkeypatch.setattr(G, "ENABLED", [False])
    assert not G.enabled(K)


# ------------------------------------------------------------------------------------------------- on a GPU
needs_graphs = pytest.mark.skipif(not ON_GPU or K.SIM, reason="CUDA graphs need a GPU (FUNCGRAD_TEST_GPU=1) and CuPy")


@pytest.fixture
def graphs_on(monkeypatch):
    pytest.importorskip("cupy", reason="CuPy is not installed")
    K.set_allocator("cupy")
    monkeypatch.setattr(G, "ENABLED", [True])
    return G.STATS


def _without_graphs(fn, *args):
    G.ENABLED[0] = False
    try:
        return get(fn(*args))
    finally:
        G.ENABLED[0] = True


def _mlp_loss(params, x, y):
    (W1, b1), (W2, b2) = params
    h = nn.relu(x @ W1 + b1)
    return -np.mean(np.sum(nn.log_softmax(h @ W2 + b2, axis=-1) * y, axis=1))


@needs_graphs
def test_a_training_step_replays_the_same_values_as_without_graphs(graphs_on):
    rng = np.random.default_rng(1)
    p = put([(rng.standard_normal((20, 16)).astype(np.float32) * 0.3, np.zeros(16, np.float32)),
             (rng.standard_normal((16, 5)).astype(np.float32) * 0.3, np.zeros(5, np.float32))])
    vg = funcgrad.value_and_grad(_mlp_loss)
    rec0, rep0 = graphs_on["recorded"], graphs_on["replayed"]
    kept = []
    for i in range(6):
        x = put(rng.standard_normal((8, 20)).astype(np.float32))
        y = put(np.eye(5, dtype=np.float32)[rng.integers(0, 5, 8)])
        v, g = vg(p, x, y)
        rv, rg = _without_graphs(vg, p, x, y)
        assert type(v) is type(rv)
        np.testing.assert_allclose(v, rv, rtol=1e-5)
        for a, b in zip(get(g), rg):
            np.testing.assert_allclose(a[0], b[0], rtol=1e-4, atol=1e-6)
            np.testing.assert_allclose(a[1], b[1], rtol=1e-4, atol=1e-6)
        kept.append((g, get(g)))
        p = put([(W - 0.1 * gW, b - 0.1 * gb) for (W, b), (gW, gb) in zip(get(p), get(g))])
    assert graphs_on["recorded"] > rec0 and graphs_on["replayed"] >= rep0 + 4
    for g, host in kept:   # a result is the caller's: a later replay does not write into it
        for a, b in zip(get(g), host):
            np.testing.assert_array_equal(a[0], b[0])


@needs_graphs
def test_a_branch_on_a_device_value_is_never_replayed_stale(graphs_on):
    def f(x):
        if np.sum(x) > 0:
            return np.sum(x * x)
        return np.sum(np.sin(x))

    gf = funcgrad.grad(f)
    for sign in (1, 1, 1, -1, 1, -1, -1):
        x = sign * np.abs(RNG.standard_normal(7)) + 0.01 * sign
        want = 2 * x if x.sum() > 0 else np.cos(x)
        np.testing.assert_allclose(get(gf(put(x))), want, rtol=1e-12)


@needs_graphs
def test_a_bad_label_raises_on_a_replay(graphs_on):
    def f(z, labels):
        return nn.cross_entropy(z, labels)

    gf = funcgrad.grad(f)
    z = put(RNG.standard_normal((4, 3)).astype(np.float32))
    good = put(np.array([0, 1, 2, 1]))
    for _ in range(3):
        gf(z, good)
    with pytest.raises(IndexError, match="label"):
        gf(z, put(np.array([0, 1, 9, 1])))
    assert np.isfinite(get(gf(z, good))).all()


@needs_graphs
def test_a_changing_host_number_and_constant_indices_are_right(graphs_on):
    idx = np.array([0, 3, 3, 1])

    def f(x, c):
        return np.sum(np.tanh(c * x[idx]))

    gf = funcgrad.grad(f)
    for c in (0.5, 0.5, 0.5, 2.0, 2.0, 0.5, 3.0, 2.0):
        x = RNG.standard_normal(5)
        want = np.zeros(5)
        np.add.at(want, idx, c * (1 - np.tanh(c * x[idx]) ** 2))
        np.testing.assert_allclose(get(gf(put(x), c)), want, rtol=1e-9, atol=1e-14)


@needs_graphs
def test_a_jitted_update_replays(graphs_on):
    def sgd(p, g):
        return [(W - 0.1 * gW, b - 0.1 * gb) for (W, b), (gW, gb) in zip(p, g)]

    step = funcgrad.jit(sgd)
    rec0 = graphs_on["recorded"]
    for _ in range(4):
        p = [(RNG.standard_normal((3, 4)), RNG.standard_normal(4))]
        g = [(RNG.standard_normal((3, 4)), RNG.standard_normal(4))]
        out = get(step(put(p), put(g)))
        np.testing.assert_allclose(out[0][0], p[0][0] - 0.1 * g[0][0], rtol=1e-12)
        np.testing.assert_allclose(out[0][1], p[0][1] - 0.1 * g[0][1], rtol=1e-12)
    assert graphs_on["recorded"] > rec0
