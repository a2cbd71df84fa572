"""Data pipeline: array datasets, a prefetching loader, distributed sampling, small data sets.

Owns :class:`ArrayDataset`, :class:`DataLoader`, :class:`DistributedSampler`,
:func:`train_test_split`, :func:`load_digits` / :func:`to_images`,
:func:`read_idx` / :func:`load_mnist` and :class:`IDXFormatError`.

Guarantees:

* Randomness is explicit and deterministic: the shuffle order of epoch ``e``
  is a function of ``(seed, e)`` only (``np.random.default_rng([seed, e])``),
  so a run can be resumed at any epoch with ``set_epoch(e)``. The orders are
  NumPy's, not PyTorch's ``randperm``; everything else (batch counts, padding,
  rank slicing) follows PyTorch.
* :class:`DataLoader` builds batches in a background thread through a bounded
  queue of ``prefetch`` batches; an exception raised while building a batch is
  re-raised in the consumer at that batch; an abandoned iterator (``break``,
  ``del``, garbage collection, ``close()``) stops its thread.
* Batches are fresh arrays (fancy-indexed copies), never views of the data.
* Readers fail loudly: a wrong IDX magic number, a truncated file, trailing
  bytes or mismatched image/label counts raise :class:`IDXFormatError`
  naming the file.
"""
from __future__ import annotations

import gzip
import math
import os
import queue
import threading
from typing import Iterator

import numpy as np

from .kernels.cuda_backend import _device_index, current_device, device_put

__all__ = [
    "ArrayDataset", "DataLoader", "DistributedSampler", "train_test_split",
    "load_digits", "to_images", "read_idx", "load_mnist", "IDXFormatError",
]


def _check_seed(seed, where):
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise TypeError(f"{where}: seed must be a non-negative int, received {seed!r}")
    return int(seed)


# --------------------------------------------------------------------------- datasets

class ArrayDataset:
    """Equal-length arrays indexed together along axis 0; ``ds[idx]`` returns a tuple of ``a[idx]``."""

    def __init__(self, *arrays):
        if not arrays:
            raise ValueError("ArrayDataset needs at least one array")
        arrays = tuple(np.asarray(a) for a in arrays)
        for i, a in enumerate(arrays):
            if a.ndim == 0:
                raise ValueError(f"ArrayDataset: array {i} is 0-dimensional; arrays are indexed along axis 0")
        n = len(arrays[0])
        for i, a in enumerate(arrays[1:], 1):
            if len(a) != n:
                raise ValueError(f"ArrayDataset: array {i} has length {len(a)} but array 0 has length {n}; "
                                 "all arrays must have the same first dimension")
        self.arrays = arrays

    def __len__(self) -> int:
        return len(self.arrays[0])

    def __getitem__(self, idx):
        return tuple(a[idx] for a in self.arrays)


# --------------------------------------------------------------------------- samplers

class DistributedSampler:
    """The indices one rank sees of a data set of ``n`` samples (``torch.utils.data.DistributedSampler``).

    Every rank gets ``num_samples`` indices: ``ceil(n / world_size)``, padding by wrapping around the
    (shuffled) order, or with ``drop_last`` ``ceil((n - world_size) / world_size)`` dropping the tail.
    Rank ``r`` takes ``order[r::world_size]``. Call :meth:`set_epoch` before each epoch to reshuffle.
    ``n`` may be an int or anything with ``len()``.
    """

    def __init__(self, n, rank: int, world_size: int, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False):
        n = n if isinstance(n, (int, np.integer)) else len(n)
        if n < 0:
            raise ValueError(f"DistributedSampler: n must be >= 0, received {n}")
        if not isinstance(world_size, (int, np.integer)) or world_size < 1:
            raise ValueError(f"DistributedSampler: world_size must be a positive int, received {world_size!r}")
        if not isinstance(rank, (int, np.integer)) or not 0 <= rank < world_size:
            raise ValueError(f"DistributedSampler: rank must be in [0, {world_size - 1}], received {rank!r}")
        self.n, self.rank, self.world_size = int(n), int(rank), int(world_size)
        self.shuffle, self.seed, self.drop_last = bool(shuffle), _check_seed(seed, "DistributedSampler"), drop_last
        self.epoch = 0
        if drop_last and self.n % self.world_size != 0:
            self.num_samples = math.ceil((self.n - self.world_size) / self.world_size)
        else:
            self.num_samples = math.ceil(self.n / self.world_size)
        self.total_size = self.num_samples * self.world_size

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def indices(self) -> np.ndarray:
        if self.shuffle:
            order = np.random.default_rng([self.seed, self.epoch]).permutation(self.n)
        else:
            order = np.arange(self.n)
        if not self.drop_last:
            pad = self.total_size - self.n
            if pad > 0 and self.n > 0:
                order = np.concatenate([order, np.resize(order, pad)])  # np.resize wraps around
        else:
            order = order[:self.total_size]
        return order[self.rank:self.total_size:self.world_size]

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices().tolist())

    def __len__(self) -> int:
        return self.num_samples


# --------------------------------------------------------------------------- loader

_END = object()


class _Raised:
    __slots__ = ("exc",)

    def __init__(self, exc):
        self.exc = exc


def _fetcher(dataset, device):
    """``idx -> batch``: ``dataset[idx]``, its arrays copied to ``device`` when one is given."""
    if device is None:
        return dataset.__getitem__
    device = current_device(device)   # the GPU this thread uses, for the prefetch thread too

    def fetch(idx):
        return device_put(dataset[idx], device)
    return fetch


def _produce(fetch, batches, q: queue.Queue, stop: threading.Event):
    """Thread body; must not reference the iterator object (so abandoning it triggers its cleanup)."""
    def put(item):
        while not stop.is_set():
            try:
                q.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    try:
        for idx in batches:
            if stop.is_set():
                return
            if not put(fetch(idx)):
                return
    except BaseException as e:  # noqa: BLE001 - re-raised in the consumer
        put(_Raised(e))
        return
    put(_END)


class _LoaderIterator:
    """Iterator over one epoch; a background thread fills a bounded queue."""

    def __init__(self, dataset, batches, prefetch: int, device=None):
        self._done = False
        self._thread = None
        fetch = _fetcher(dataset, device)
        if prefetch <= 0:
            self._sync = (fetch(idx) for idx in batches)
            return
        self._sync = None
        self._queue: queue.Queue = queue.Queue(maxsize=prefetch)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=_produce, args=(fetch, batches, self._queue, self._stop),
                                        name="funcgrad-DataLoader", daemon=True)
        self._thread.start()

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        if self._sync is not None:
            try:
                return next(self._sync)
            except StopIteration:
                self._done = True
                raise
        while True:
            try:
                item = self._queue.get(timeout=0.1)
                break
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    self._done = True
                    raise RuntimeError("DataLoader: the prefetch thread ended without finishing the epoch")
        if item is _END:
            self.close()
            raise StopIteration
        if isinstance(item, _Raised):
            self.close()
            raise item.exc
        return item

    def close(self) -> None:
        """Stop the background thread (idempotent)."""
        self._done = True
        if self._thread is None:
            return
        self._stop.set()
        while True:  # unblock a producer waiting on a full queue
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class DataLoader:
    """Batches of ``dataset[indices]`` (``indices`` an int64 array) for one epoch per ``iter()``.

    ``shuffle``: each epoch uses the permutation ``default_rng([seed, epoch])``; the epoch counter
    advances at every ``iter()`` (or set it with :meth:`set_epoch`). ``sampler``: an iterable of
    indices with ``len()`` (e.g. :class:`DistributedSampler`; exclusive with ``shuffle``;
    :meth:`set_epoch` is forwarded to it). ``prefetch``: batches built ahead in a background
    thread (0 builds them in the caller's thread). ``device``: ``"cuda"`` or ``"cuda:N"`` copies each
    batch's arrays to that GPU as it is built (in the background thread, so the copy of the next batch
    overlaps the current step); ``None`` (default) or ``"cpu"`` keeps them in host memory.
    """

    def __init__(self, dataset, batch_size: int = 1, shuffle: bool = False, seed: int = 0,
                 drop_last: bool = False, prefetch: int = 2, sampler=None, device=None):
        if isinstance(dataset, (tuple, list)):
            raise TypeError(f"DataLoader: received a {type(dataset).__name__} of {len(dataset)} items; "
                            "wrap arrays in ArrayDataset(X, y) so they are batched together")
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise TypeError(f"DataLoader: dataset must support len() and indexing, received "
                            f"{type(dataset).__name__} (wrap arrays in ArrayDataset(X, y))")
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"DataLoader: batch_size must be a positive int, received {batch_size!r}")
        if isinstance(prefetch, bool) or not isinstance(prefetch, (int, np.integer)) or prefetch < 0:
            raise ValueError(f"DataLoader: prefetch must be an int >= 0, received {prefetch!r}")
        if sampler is not None and shuffle:
            raise ValueError("DataLoader: sampler and shuffle=True are mutually exclusive "
                             "(the sampler decides the order; use DistributedSampler(shuffle=True))")
        self.dataset, self.batch_size, self.shuffle = dataset, int(batch_size), bool(shuffle)
        self.seed, self.drop_last, self.prefetch = _check_seed(seed, "DataLoader"), bool(drop_last), int(prefetch)
        self.sampler = sampler
        self.epoch = 0
        if device == "cpu":
            device = None
        if device is not None:
            try:
                _device_index(device)
            except ValueError:
                raise ValueError(f"DataLoader: unknown device {device!r}: use None or 'cpu' (host memory), "
                                 "'cuda' or 'cuda:N' (funcgrad.devices() lists them)") from None
        self.device = device

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next ``iter()`` produces (forwarded to the sampler when it has ``set_epoch``)."""
        self.epoch = int(epoch)
        if self.sampler is not None and hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def _num_samples(self) -> int:
        return len(self.sampler) if self.sampler is not None else len(self.dataset)

    def __len__(self) -> int:
        n = self._num_samples()
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def epoch_indices(self, epoch: int | None = None) -> np.ndarray:
        """The sample order of an epoch (the current one by default)."""
        if self.sampler is not None:
            return np.fromiter(iter(self.sampler), dtype=np.int64)
        n = len(self.dataset)
        e = self.epoch if epoch is None else int(epoch)
        if self.shuffle:
            return np.random.default_rng([self.seed, e]).permutation(n).astype(np.int64)
        return np.arange(n, dtype=np.int64)

    def __iter__(self) -> _LoaderIterator:
        order = self.epoch_indices()
        self.epoch += 1
        bs = self.batch_size
        stop = (len(order) // bs) * bs if self.drop_last else len(order)
        batches = [order[i:i + bs] for i in range(0, stop, bs)]
        return _LoaderIterator(self.dataset, batches, self.prefetch, self.device)


# --------------------------------------------------------------------------- splitting

def train_test_split(*arrays, test_size=0.2, seed: int = 0, stratify=None, shuffle: bool = True):
    """Split equal-length arrays into ``[a_train, a_test, b_train, b_test, ...]`` (sklearn order).

    ``test_size``: a fraction in (0, 1) (``ceil(test_size * n)`` test samples) or an int count.
    ``stratify``: labels; each class keeps its proportion (largest-remainder rounding).
    """
    if not arrays:
        raise ValueError("train_test_split needs at least one array")
    arrays = [np.asarray(a) for a in arrays]
    n = len(arrays[0])
    for i, a in enumerate(arrays):
        if len(a) != n:
            raise ValueError(f"train_test_split: array {i} has length {len(a)}, array 0 has length {n}")
    if isinstance(test_size, (float, np.floating)):
        if not 0.0 < test_size < 1.0:
            raise ValueError(f"train_test_split: a fractional test_size must be in (0, 1), received {test_size}")
        n_test = math.ceil(test_size * n)
    elif isinstance(test_size, (int, np.integer)) and not isinstance(test_size, bool):
        n_test = int(test_size)
    else:
        raise TypeError(f"train_test_split: test_size must be a float or an int, received {test_size!r}")
    if not 0 < n_test < n:
        raise ValueError(f"train_test_split: test_size={test_size!r} gives {n_test} test samples out of {n}; "
                         "both splits must be non-empty")
    rng = np.random.default_rng(_check_seed(seed, "train_test_split"))
    if stratify is None:
        order = rng.permutation(n) if shuffle else np.arange(n)
        test_idx, train_idx = order[:n_test], order[n_test:]
        if not shuffle:
            train_idx, test_idx = order[:n - n_test], order[n - n_test:]
    else:
        if not shuffle:
            raise ValueError("train_test_split: stratify requires shuffle=True")
        y = np.asarray(stratify)
        if len(y) != n:
            raise ValueError(f"train_test_split: stratify has length {len(y)}, the arrays have length {n}")
        classes, y_idx, counts = np.unique(y, return_inverse=True, return_counts=True)
        if counts.min() < 2:
            raise ValueError(f"train_test_split: the least populated class in stratify "
                             f"({classes[counts.argmin()]!r}) has only {counts.min()} member; each class needs >= 2")
        if n_test < len(classes) or n - n_test < len(classes):
            raise ValueError(f"train_test_split: {n_test} test and {n - n_test} train samples cannot hold all "
                             f"{len(classes)} classes")
        exact = counts * n_test / n
        alloc = np.floor(exact).astype(int)
        rem = n_test - alloc.sum()
        order_rem = np.lexsort((rng.random(len(classes)), -(exact - alloc)))  # largest remainder, ties random
        alloc[order_rem[:rem]] += 1
        test_parts, train_parts = [], []
        for c in range(len(classes)):
            members = rng.permutation(np.flatnonzero(y_idx == c))
            test_parts.append(members[:alloc[c]])
            train_parts.append(members[alloc[c]:])
        test_idx = rng.permutation(np.concatenate(test_parts))
        train_idx = rng.permutation(np.concatenate(train_parts))
    out = []
    for a in arrays:
        out += [a[train_idx], a[test_idx]]
    return out


# --------------------------------------------------------------------------- digits

def load_digits(dtype=np.float32, images: bool = False):
    """scikit-learn's bundled 8x8 handwritten digits (1797 samples, no download).

    Returns ``(X, y)``: ``X`` of shape ``(1797, 64)`` scaled to ``[0, 1]`` (pixel / 16) in ``dtype``
    (``(1797, 1, 8, 8)`` NCHW with ``images=True``, or use :func:`to_images`), ``y`` int64 in 0..9.
    Needs scikit-learn (``pip install funcgrad[examples]``).
    """
    try:
        from sklearn.datasets import load_digits as _sk_load_digits
    except ImportError as e:
        raise ImportError("funcgrad.data.load_digits needs scikit-learn: pip install scikit-learn "
                          "(or funcgrad[examples])") from e
    d = _sk_load_digits()
    X = (np.asarray(d.data, dtype=np.float64) / 16.0).astype(dtype)
    y = np.asarray(d.target, dtype=np.int64)
    return (to_images(X), y) if images else (X, y)


def to_images(X, image_shape=(1, 8, 8)):
    """Reshape flat rows ``(N, C*H*W)`` to NCHW ``(N, C, H, W)`` (a view when possible)."""
    X = np.asarray(X)
    size = int(np.prod(image_shape))
    if X.ndim != 2 or X.shape[1] != size:
        raise ValueError(f"to_images: expected an array of shape (N, {size}) for images {tuple(image_shape)}, "
                         f"received shape {X.shape}")
    return X.reshape((X.shape[0],) + tuple(image_shape))


# --------------------------------------------------------------------------- IDX (MNIST)

class IDXFormatError(ValueError):
    """An IDX file (MNIST format) is malformed: bad magic number, truncated, or inconsistent."""


_IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        head = f.read(2)
    if head == b"\x1f\x8b":
        try:
            with gzip.open(path, "rb") as f:
                return f.read()
        except (EOFError, OSError, gzip.BadGzipFile) as e:
            raise IDXFormatError(f"{path}: the gzip stream is truncated or corrupt ({e})") from None
    with open(path, "rb") as f:
        return f.read()


def read_idx(path) -> np.ndarray:
    """Read an IDX file (raw, or gzip-compressed: detected from its content) into a native-endian array."""
    path = os.fspath(path)
    data = _read_bytes(path)
    if len(data) < 4:
        raise IDXFormatError(f"{path}: {len(data)} bytes is too short for an IDX header (truncated file?)")
    if data[0] != 0 or data[1] != 0 or data[2] not in _IDX_TYPES:
        raise IDXFormatError(f"{path}: wrong magic number 0x{data[:4].hex()}; an IDX file starts with 00 00, a type "
                             f"code in {{{', '.join(f'0x{t:02x}' for t in _IDX_TYPES)}}} and the number of dimensions "
                             "(e.g. 0x00000803 for MNIST images, 0x00000801 for labels)")
    dt = np.dtype(_IDX_TYPES[data[2]])
    ndim = data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise IDXFormatError(f"{path}: truncated header: {ndim} dimensions need {header} bytes, file has {len(data)}")
    shape = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    expected = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    got = len(data) - header
    if got < expected:
        raise IDXFormatError(f"{path}: truncated: shape {shape} of {dt.name} needs {expected} data bytes, "
                             f"the file has {got}")
    if got > expected:
        raise IDXFormatError(f"{path}: {got - expected} unexpected bytes after the data of shape {shape}")
    arr = np.frombuffer(data, dtype=dt, offset=header).reshape(shape)
    return arr.astype(dt.newbyteorder("="))  # native byte order, writeable copy


def _find(directory: str, names: list[str]) -> str:
    for name in names:
        for cand in (name, name + ".gz"):
            p = os.path.join(directory, cand)
            if os.path.exists(p):
                return p
    raise FileNotFoundError(f"load_mnist: none of {[n + '[.gz]' for n in names]} in {directory}")


def load_mnist(directory, kind: str = "train", dtype=np.float32, flatten: bool = False):
    """MNIST or Fashion-MNIST from the standard IDX files in ``directory`` (raw or ``.gz``; no download).

    ``kind``: ``"train"`` or ``"t10k"`` (files ``{kind}-images-idx3-ubyte`` and
    ``{kind}-labels-idx1-ubyte``). Returns ``(X, y)``: ``X`` of shape ``(N, 1, H, W)``
    (``(N, H*W)`` with ``flatten``) scaled to ``[0, 1]`` in a float ``dtype``, or the raw pixels when
    ``dtype=np.uint8``; ``y`` int64.
    """
    if kind not in ("train", "t10k"):
        raise ValueError(f"load_mnist: kind must be 'train' or 't10k', received {kind!r}")
    directory = os.fspath(directory)
    ipath = _find(directory, [f"{kind}-images-idx3-ubyte", f"{kind}-images.idx3-ubyte"])
    lpath = _find(directory, [f"{kind}-labels-idx1-ubyte", f"{kind}-labels.idx1-ubyte"])
    images, labels = read_idx(ipath), read_idx(lpath)
    if images.ndim != 3:
        raise IDXFormatError(f"{ipath}: expected 3-d images (N, H, W), the file holds shape {images.shape}")
    if labels.ndim != 1:
        raise IDXFormatError(f"{lpath}: expected 1-d labels (N,), the file holds shape {labels.shape}")
    if len(images) != len(labels):
        raise IDXFormatError(f"{ipath} has {len(images)} images but {lpath} has {len(labels)} labels")
    dt = np.dtype(dtype)
    if dt == np.uint8:
        X = images.astype(np.uint8, copy=False)
    elif np.issubdtype(dt, np.floating):
        X = (images.astype(np.float64) / 255.0).astype(dt)
    else:
        raise TypeError(f"load_mnist: dtype must be a float dtype or uint8, received {dt}")
    X = X.reshape(len(X), -1) if flatten else X[:, None, :, :]
    return X, labels.astype(np.int64)
