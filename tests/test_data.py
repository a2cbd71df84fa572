"""funcgrad.data: datasets, prefetching loader, distributed sampler, splits, digits and IDX readers."""
import gc
import gzip
import math
import struct
import threading
import time

import numpy as np
import pytest

from funcgrad import data
from funcgrad.data import ArrayDataset, DataLoader, DistributedSampler, IDXFormatError


def make_ds(n=23):
    X = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    y = np.arange(n, dtype=np.int64)
    return ArrayDataset(X, y)


# ---------------------------------------------------------------- ArrayDataset

def test_array_dataset():
    ds = make_ds(5)
    assert len(ds) == 5
    x, y = ds[np.array([4, 1])]
    np.testing.assert_array_equal(y, [4, 1])
    np.testing.assert_array_equal(x, [[8, 9], [2, 3]])
    with pytest.raises(ValueError, match="array 1 has length 4 but array 0 has length 5"):
        ArrayDataset(np.zeros(5), np.zeros(4))
    with pytest.raises(ValueError):
        ArrayDataset()


# ---------------------------------------------------------------- DataLoader

@pytest.mark.parametrize("prefetch", [0, 1, 3])
@pytest.mark.parametrize("drop_last", [False, True])
def test_loader_covers_epoch(prefetch, drop_last):
    ds = make_ds(23)
    dl = DataLoader(ds, batch_size=5, drop_last=drop_last, prefetch=prefetch)
    assert len(dl) == (4 if drop_last else 5)
    batches = list(dl)
    assert len(batches) == len(dl)
    ys = np.concatenate([b[1] for b in batches])
    np.testing.assert_array_equal(ys, np.arange(20 if drop_last else 23))  # no shuffle: in order
    assert batches[-1][0].dtype == np.float32
    for x, y in batches:
        np.testing.assert_array_equal(x[:, 0], 2 * y)  # rows stay together


def test_shuffle_reshuffles_every_epoch_and_is_deterministic():
    ds = make_ds(50)
    a = DataLoader(ds, batch_size=8, shuffle=True, seed=3)
    b = DataLoader(ds, batch_size=8, shuffle=True, seed=3)
    e0 = np.concatenate([y for _, y in a])
    e1 = np.concatenate([y for _, y in a])
    assert sorted(e0) == list(range(50)) and sorted(e1) == list(range(50))
    assert not np.array_equal(e0, e1)                     # new order each epoch
    assert not np.array_equal(e0, np.arange(50))
    np.testing.assert_array_equal(np.concatenate([y for _, y in b]), e0)   # same seed, same epochs
    np.testing.assert_array_equal(np.concatenate([y for _, y in b]), e1)
    c = DataLoader(ds, batch_size=8, shuffle=True, seed=4)
    assert not np.array_equal(np.concatenate([y for _, y in c]), e0)
    # resume at epoch 1
    d = DataLoader(ds, batch_size=8, shuffle=True, seed=3)
    d.set_epoch(1)
    np.testing.assert_array_equal(np.concatenate([y for _, y in d]), e1)
    np.testing.assert_array_equal(d.epoch_indices(0), e0)


def test_batches_are_copies():
    X = np.zeros((6, 2))
    dl = DataLoader(ArrayDataset(X), batch_size=3, prefetch=0)
    (xb,) = next(iter(dl))
    xb[:] = 1
    assert np.all(X == 0)


class Boom(ArrayDataset):
    def __getitem__(self, idx):
        if 10 in idx:
            raise KeyError("bad sample 10")
        return super().__getitem__(idx)


@pytest.mark.parametrize("prefetch", [0, 2])
def test_exception_in_worker_reraised_in_consumer(prefetch):
    dl = DataLoader(Boom(np.arange(20)), batch_size=4, prefetch=prefetch)
    it = iter(dl)
    got = [next(it), next(it)]
    assert [g[0].tolist() for g in got] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(KeyError, match="bad sample 10"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)


class Slow(ArrayDataset):
    def __init__(self, *a):
        super().__init__(*a)
        self.calls = 0

    def __getitem__(self, idx):
        self.calls += 1
        time.sleep(0.005)
        return super().__getitem__(idx)


def test_prefetch_is_bounded_and_abandoned_iterator_stops_thread():
    ds = Slow(np.arange(10_000))
    dl = DataLoader(ds, batch_size=1, prefetch=2)
    it = iter(dl)
    next(it)
    time.sleep(0.2)
    # one consumed + at most `prefetch` queued + one being built
    assert ds.calls <= 1 + 2 + 1
    thread = it._thread
    assert thread.is_alive() and thread.daemon
    del it                 # abandon the iterator mid-epoch
    gc.collect()
    thread.join(2.0)
    assert not thread.is_alive()
    calls = ds.calls
    time.sleep(0.05)
    assert ds.calls == calls


def test_break_out_of_for_loop_stops_thread():
    before = {t for t in threading.enumerate() if t.name == "funcgrad-DataLoader"}
    dl = DataLoader(Slow(np.arange(1000)), batch_size=2, prefetch=2)
    for i, _ in enumerate(dl):
        if i == 3:
            break
    gc.collect()
    deadline = time.time() + 2
    while {t for t in threading.enumerate() if t.name == "funcgrad-DataLoader"} - before:
        assert time.time() < deadline, "prefetch thread still running after break"
        time.sleep(0.01)


def test_explicit_close():
    it = iter(DataLoader(Slow(np.arange(1000)), batch_size=2))
    next(it)
    it.close()
    assert not it._thread.is_alive()
    with pytest.raises(StopIteration):
        next(it)


def test_loader_argument_errors():
    ds = make_ds()
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(ds, batch_size=0)
    with pytest.raises(ValueError, match="prefetch"):
        DataLoader(ds, prefetch=-1)
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(ds, shuffle=True, sampler=DistributedSampler(len(ds), 0, 2))
    with pytest.raises(TypeError, match="ArrayDataset"):
        DataLoader(5)
    with pytest.raises(TypeError, match=r"ArrayDataset\(X, y\)"):
        DataLoader((np.zeros(3), np.zeros(3)), batch_size=2)
    # a bare array is a dataset of rows
    np.testing.assert_array_equal(next(iter(DataLoader(np.arange(5), batch_size=2))), [0, 1])


# ---------------------------------------------------------------- DistributedSampler

def ref_distributed(n, world, rank, drop_last, order):
    """PyTorch DistributedSampler.__iter__ (published source), given the epoch's order."""
    if drop_last and n % world != 0:
        num = math.ceil((n - world) / world)
    else:
        num = math.ceil(n / world)
    total = num * world
    idx = list(order)
    if not drop_last:
        pad = total - len(idx)
        if pad <= len(idx):
            idx += idx[:pad]
        else:
            idx += (idx * math.ceil(pad / len(idx)))[:pad]
    else:
        idx = idx[:total]
    return idx[rank:total:world]


@pytest.mark.parametrize("n,world", [(10, 3), (12, 4), (2, 5), (7, 1), (11, 4)])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_distributed_sampler_matches_pytorch_semantics(n, world, drop_last, shuffle):
    per_rank = []
    for r in range(world):
        s = DistributedSampler(n, r, world, shuffle=shuffle, seed=5, drop_last=drop_last)
        s.set_epoch(2)
        order = np.random.default_rng([5, 2]).permutation(n) if shuffle else np.arange(n)
        got = list(s)
        assert got == ref_distributed(n, world, r, drop_last, order.tolist())
        assert len(got) == len(s)
        per_rank.append(got)
    assert len({len(p) for p in per_rank}) == 1        # every rank the same count
    allidx = sum(per_rank, [])
    if drop_last:
        assert len(set(allidx)) == len(allidx)          # no duplicates
    else:
        assert set(allidx) == set(range(n))              # everything covered


def test_distributed_sampler_epochs_and_torch():
    s = DistributedSampler(20, 1, 3, seed=1)
    e0 = list(s)
    s.set_epoch(1)
    assert list(s) != e0
    s.set_epoch(0)
    assert list(s) == e0
    with pytest.raises(ValueError, match="rank"):
        DistributedSampler(10, 3, 3)
    with pytest.raises(ValueError, match="world_size"):
        DistributedSampler(10, 0, 0)
    torch = pytest.importorskip("torch")
    from torch.utils.data import DistributedSampler as TDS
    for n, world, drop_last in [(10, 3, False), (10, 3, True), (2, 5, False), (11, 4, True)]:
        for r in range(world):
            t = TDS(range(n), num_replicas=world, rank=r, shuffle=False, drop_last=drop_last)
            assert list(DistributedSampler(n, r, world, shuffle=False, drop_last=drop_last)) == list(t)


def test_loader_with_sampler():
    ds = make_ds(10)
    samplers = [DistributedSampler(ds, r, 3, seed=2) for r in range(3)]
    loaders = [DataLoader(ds, batch_size=2, sampler=s) for s in samplers]
    assert [len(dl) for dl in loaders] == [2, 2, 2]
    seen = [np.concatenate([y for _, y in dl]) for dl in loaders]
    assert set(np.concatenate(seen)) == set(range(10)) and all(len(x) == 4 for x in seen)
    for dl in loaders:
        dl.set_epoch(1)
    seen1 = [np.concatenate([y for _, y in dl]) for dl in loaders]
    assert any(not np.array_equal(a, b) for a, b in zip(seen, seen1))


# ---------------------------------------------------------------- train_test_split

def test_train_test_split():
    X = np.arange(100).reshape(50, 2)
    y = np.arange(50)
    Xtr, Xte, ytr, yte = data.train_test_split(X, y, test_size=0.2, seed=1)
    assert len(Xte) == 10 and len(Xtr) == 40
    np.testing.assert_array_equal(Xtr[:, 0], 2 * ytr)
    assert sorted(np.concatenate([ytr, yte])) == list(range(50))
    again = data.train_test_split(X, y, test_size=0.2, seed=1)
    np.testing.assert_array_equal(again[3], yte)
    assert not np.array_equal(data.train_test_split(X, y, seed=2)[3], yte)
    _, te = data.train_test_split(y, test_size=7, shuffle=False)
    np.testing.assert_array_equal(te, np.arange(43, 50))
    with pytest.raises(ValueError, match="length"):
        data.train_test_split(X, y[:-1])
    with pytest.raises(ValueError, match="test_size"):
        data.train_test_split(y, test_size=1.5)


def test_train_test_split_stratified():
    y = np.array([0] * 60 + [1] * 30 + [2] * 10)
    X = np.arange(100)
    Xtr, Xte, ytr, yte = data.train_test_split(X, y, test_size=0.25, seed=0, stratify=y)
    assert len(yte) == 25
    assert np.bincount(yte).tolist() == [15, 8, 2] or np.bincount(yte).tolist() == [15, 7, 3]
    counts = np.bincount(yte)
    assert abs(counts[0] - 15) <= 1 and abs(counts[1] - 7.5) <= 1 and abs(counts[2] - 2.5) <= 1
    np.testing.assert_array_equal(y[Xte], yte)
    with pytest.raises(ValueError, match="least populated"):
        data.train_test_split(X, stratify=np.array([0] * 99 + [1]))


# ---------------------------------------------------------------- digits

def test_load_digits():
    pytest.importorskip("sklearn")
    X, y = data.load_digits()
    assert X.shape == (1797, 64) and X.dtype == np.float32
    assert y.shape == (1797,) and y.dtype == np.int64 and set(y.tolist()) == set(range(10))
    assert X.min() == 0.0 and X.max() == 1.0
    imgs, y2 = data.load_digits(dtype=np.float64, images=True)
    assert imgs.shape == (1797, 1, 8, 8) and imgs.dtype == np.float64
    np.testing.assert_allclose(data.to_images(X), imgs, rtol=1e-6)
    with pytest.raises(ValueError, match="shape"):
        data.to_images(np.zeros((3, 10)))


# ---------------------------------------------------------------- IDX / MNIST

def idx_bytes(arr, code=0x08):
    arr = np.asarray(arr)
    dt = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}[code]
    head = bytes([0, 0, code, arr.ndim]) + b"".join(struct.pack(">I", d) for d in arr.shape)
    return head + arr.astype(dt).tobytes()


def write_mnist(directory, kind, n, gz, shape=(28, 28), n_labels=None, rng=None):
    rng = rng or np.random.default_rng(0)
    images = rng.integers(0, 256, size=(n,) + shape, dtype=np.uint8)
    labels = rng.integers(0, 10, size=n_labels if n_labels is not None else n, dtype=np.uint8)
    for name, arr in ((f"{kind}-images-idx3-ubyte", images), (f"{kind}-labels-idx1-ubyte", labels)):
        b = idx_bytes(arr)
        if gz:
            (directory / (name + ".gz")).write_bytes(gzip.compress(b))
        else:
            (directory / name).write_bytes(b)
    return images, labels


@pytest.mark.parametrize("code,dtype", [(0x08, np.uint8), (0x09, np.int8), (0x0B, np.int16), (0x0C, np.int32),
                                        (0x0D, np.float32), (0x0E, np.float64)])
def test_read_idx_types(tmp_path, code, dtype):
    arr = (np.arange(24).reshape(2, 3, 4) - (0 if code == 0x08 else 5)).astype(dtype)
    p = tmp_path / "a.idx"
    p.write_bytes(idx_bytes(arr, code))
    out = data.read_idx(p)
    assert out.dtype == np.dtype(dtype) and out.dtype.isnative
    np.testing.assert_array_equal(out, arr)


@pytest.mark.parametrize("gz", [False, True])
def test_load_mnist(tmp_path, gz):
    images, labels = write_mnist(tmp_path, "train", 7, gz)
    X, y = data.load_mnist(tmp_path, "train")
    assert X.shape == (7, 1, 28, 28) and X.dtype == np.float32
    np.testing.assert_allclose(X[:, 0] * 255, images, atol=1e-4)
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y, labels)
    Xf, _ = data.load_mnist(tmp_path, "train", flatten=True)
    assert Xf.shape == (7, 784)
    Xu, _ = data.load_mnist(tmp_path, "train", dtype=np.uint8)
    np.testing.assert_array_equal(Xu[:, 0], images)
    with pytest.raises(FileNotFoundError, match="t10k-images"):
        data.load_mnist(tmp_path, "t10k")
    with pytest.raises(ValueError, match="kind"):
        data.load_mnist(tmp_path, "test")


def test_idx_errors(tmp_path):
    good = idx_bytes(np.zeros((3, 4, 4), np.uint8))
    p = tmp_path / "x"
    p.write_bytes(b"\x00\x00\x07\x03" + good[4:])
    with pytest.raises(IDXFormatError, match=r"x: wrong magic number 0x00000703"):
        data.read_idx(p)
    p.write_bytes(b"PK\x03\x04" + good[4:])
    with pytest.raises(IDXFormatError, match="wrong magic"):
        data.read_idx(p)
    p.write_bytes(good[:-5])
    with pytest.raises(IDXFormatError, match=r"truncated: shape \(3, 4, 4\).*48 data bytes.*43"):
        data.read_idx(p)
    p.write_bytes(good[:9])
    with pytest.raises(IDXFormatError, match="truncated header"):
        data.read_idx(p)
    p.write_bytes(good + b"\x00")
    with pytest.raises(IDXFormatError, match="1 unexpected bytes"):
        data.read_idx(p)
    p.write_bytes(gzip.compress(good)[:-12])
    with pytest.raises(IDXFormatError, match="gzip"):
        data.read_idx(p)
    p.write_bytes(b"\x00\x00")
    with pytest.raises(IDXFormatError, match="too short"):
        data.read_idx(p)


def test_mnist_count_mismatch(tmp_path):
    write_mnist(tmp_path, "t10k", 5, gz=True, n_labels=4)
    with pytest.raises(IDXFormatError, match="5 images but .* 4 labels"):
        data.load_mnist(tmp_path, "t10k")
