"""Checkpoints: a pytree saved to one ``.npz`` file, written atomically, never unpickled.

Owns :func:`save`, :func:`load`, :func:`load_metadata` and :class:`CheckpointError`.

File format (``format: "funcgrad-checkpoint", version: 1``): a zip written by
``numpy.savez`` holding one array per array leaf (``leaf_0``, ``leaf_1``, ...)
plus ``__tree__``, a uint8 array with UTF-8 JSON describing the structure:
dicts (str or int keys, insertion order kept), lists, tuples, ``None``,
NamedTuples (by importable ``module:QualName``, re-imported on load and
checked to be the same NamedTuple with the same fields), numpy arrays and
numpy scalars (stored as arrays, dtype and bits exact), and Python
``bool``/``int``/``float``/``complex``/``str`` (floats stored as
``float.hex`` so they round-trip bit-exactly, nan and inf included), plus the
user's JSON ``metadata``.

Guarantees:

* ``save`` writes to a temporary file in the target's directory, flushes and
  fsyncs it, ``os.replace``-s it over the target and fsyncs the directory: a
  crash or SIGKILL at any point leaves either the old or the new checkpoint,
  never a mix. The temporary is ``flock``-ed while it is written; a kill may leave it behind,
  and the next save of the same checkpoint deletes every such temporary whose lock no
  writer holds any more (never one another live process is writing).
* ``load`` uses ``allow_pickle=False`` and reads every array eagerly, so a
  truncated or corrupt file raises :class:`CheckpointError` (naming the file)
  at load time, not later.
* Object arrays, registered custom pytree nodes and other leaf types are
  refused at save with the key path of the offending leaf.
* ``load(path, like=template)`` checks structure, leaf kinds, shapes and
  dtypes against ``template`` and names the key path of the first difference.
* GPU arrays (numba.cuda, or anything exposing ``__cuda_array_interface__``) are
  copied to the host by ``save`` and stored as NumPy arrays; ``load`` returns
  host arrays, puts back on the GPU the leaves whose ``like`` leaf is a GPU
  array, and with ``device="cuda"`` / ``"cuda:N"`` puts every array there.
"""
from __future__ import annotations

import fcntl
import importlib
import json
import os
import sys
import tempfile
import types
import zipfile
from typing import Any

import numpy as np

from .custom import remat
from .errors import FuncgradError, TreeStructureError
from .kernels.base import is_device_array
from .kernels.cuda_backend import _device_index, device_get, device_put
from .tree import assert_same_structure, tree_flatten_with_path, tree_map

__all__ = ["save", "load", "load_metadata", "CheckpointError"]

_FORMAT = "funcgrad-checkpoint"
_VERSION = 1
_TREE_KEY = "__tree__"


class CheckpointError(FuncgradError, ValueError):
    """A checkpoint file cannot be written or read (corrupt, truncated, unsupported content)."""


# --------------------------------------------------------------------------- encoding

def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _class_name(cls, where: str) -> str:
    qual = cls.__qualname__
    mod = cls.__module__
    if "<locals>" in qual:
        raise CheckpointError(
            f"checkpoint.save: {where} is a {qual} defined inside a function; checkpoints store NamedTuples "
            "by importable name, so define the NamedTuple at module level")
    try:
        resolved = _import_class(f"{mod}:{qual}")
    except Exception as e:  # noqa: BLE001
        raise CheckpointError(f"checkpoint.save: {where} is a {mod}.{qual}, which cannot be re-imported by name "
                              f"({e}); define the NamedTuple at module level in an importable module") from None
    if resolved is not cls:
        raise CheckpointError(f"checkpoint.save: {where}: importing {mod}:{qual} gives a different class than "
                              "the one in the tree (was the module reloaded?)")
    return f"{mod}:{qual}"


def _import_class(name: str):
    mod, _, qual = name.partition(":")
    obj = importlib.import_module(mod)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


class _Encoder:
    def __init__(self):
        self.arrays: dict[str, np.ndarray] = {}

    def _array(self, a: np.ndarray, where: str) -> int:
        if a.dtype.hasobject:
            raise CheckpointError(f"checkpoint.save: {where} is an array of dtype {a.dtype}; object arrays would "
                                  "need pickle, which checkpoints never use. Convert it to a numeric or string dtype")
        i = len(self.arrays)
        self.arrays[f"leaf_{i}"] = a
        return i

    def encode(self, x: Any, where: str):
        t = type(x)
        if x is None:
            return {"t": "none"}
        if t is bool:
            return {"t": "bool", "v": x}
        if t is int:
            return {"t": "int", "v": x}
        if t is float:
            return {"t": "float", "v": x.hex()}
        if t is complex:
            return {"t": "complex", "v": [x.real.hex(), x.imag.hex()]}
        if t is str:
            return {"t": "str", "v": x}
        if isinstance(x, np.ndarray):
            if isinstance(x, np.ma.MaskedArray):
                raise CheckpointError(f"checkpoint.save: {where} is a masked array; save .data and .mask separately")
            return {"t": "array", "i": self._array(np.asarray(x), where)}
        if isinstance(x, np.generic):
            return {"t": "npscalar", "i": self._array(np.asarray(x), where)}
        if is_device_array(x):   # a GPU array: stored from a host copy
            return {"t": "array", "i": self._array(device_get(x), where)}
        if _is_namedtuple(x):
            return {"t": "namedtuple", "cls": _class_name(t, where), "fields": list(t._fields),
                    "c": [self.encode(v, f"{where}.{f}") for f, v in zip(t._fields, x)]}
        if t is tuple or t is list:
            return {"t": t.__name__, "c": [self.encode(v, f"{where}[{i}]") for i, v in enumerate(x)]}
        if t is dict:
            keys, children = [], []
            for k, v in x.items():
                if type(k) is str:
                    keys.append(["s", k])
                elif type(k) is int:
                    keys.append(["i", k])
                else:
                    raise CheckpointError(f"checkpoint.save: {where} has a key {k!r} of type {type(k).__name__}; "
                                          "checkpoint dict keys must be str or int")
                children.append(self.encode(v, f"{where}[{k!r}]"))
            return {"t": "dict", "k": keys, "c": children}
        raise CheckpointError(
            f"checkpoint.save: {where} is a {t.__module__}.{t.__qualname__}; checkpoints hold dict, list, tuple, "
            "None, NamedTuple, numpy arrays/scalars and Python bool/int/float/complex/str. "
            "Convert it (e.g. np.asarray) or store its fields")


def _decode(spec, arrays, where: str):
    t = spec["t"]
    if t == "none":
        return None
    if t == "bool":
        return bool(spec["v"])
    if t == "int":
        return int(spec["v"])
    if t == "float":
        return float.fromhex(spec["v"])
    if t == "complex":
        return complex(float.fromhex(spec["v"][0]), float.fromhex(spec["v"][1]))
    if t == "str":
        return str(spec["v"])
    if t == "array":
        return arrays[spec["i"]]
    if t == "npscalar":
        return arrays[spec["i"]][()]
    if t == "list":
        return [_decode(c, arrays, f"{where}[{i}]") for i, c in enumerate(spec["c"])]
    if t == "tuple":
        return tuple(_decode(c, arrays, f"{where}[{i}]") for i, c in enumerate(spec["c"]))
    if t == "dict":
        out = {}
        for (kt, k), c in zip(spec["k"], spec["c"]):
            key = int(k) if kt == "i" else str(k)
            out[key] = _decode(c, arrays, f"{where}[{key!r}]")
        return out
    if t == "namedtuple":
        name = spec["cls"]
        try:
            cls = _import_class(name)
        except Exception as e:  # noqa: BLE001
            raise CheckpointError(f"checkpoint.load: {where} was saved as NamedTuple {name}, which cannot be "
                                  f"imported now ({type(e).__name__}: {e})") from None
        if not (isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")):
            raise CheckpointError(f"checkpoint.load: {where} was saved as NamedTuple {name}, but {name} is now "
                                  f"{cls!r}, not a NamedTuple class")
        if list(cls._fields) != list(spec["fields"]):
            raise CheckpointError(f"checkpoint.load: {where}: NamedTuple {name} now has fields {cls._fields}, "
                                  f"the checkpoint has {tuple(spec['fields'])}")
        return cls(*[_decode(c, arrays, f"{where}.{f}") for f, c in zip(spec["fields"], spec["c"])])
    raise ValueError(f"unknown node type {t!r} at {where}")


# --------------------------------------------------------------------------- io

def _write_npz(fileobj, arrays: dict) -> None:
    """Write the arrays as an uncompressed npz into an open binary file."""
    np.savez(fileobj, **arrays)


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _locked_temporary(path, directory):
    """(fd, name) of a new temporary file for ``path``, with an exclusive ``flock`` held on it until
    the fd is closed (after ``os.replace``), so no other saver takes it for a stale one. A
    cleaner may unlink it between its creation and our lock: then try again."""
    while True:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.stat(tmp).st_ino == os.fstat(fd).st_ino:
                return fd, tmp
        except FileNotFoundError:
            pass
        os.close(fd)


def _remove_stale_temporaries(path, directory, keep):
    """Delete the temporaries of earlier saves of ``path`` that were interrupted (killed,
    preempted): those whose writer no longer holds their lock. A live writer's are kept."""
    prefix = f".{os.path.basename(path)}."
    try:
        names = [n for n in os.listdir(directory) if n.startswith(prefix) and n.endswith(".tmp")]
    except OSError:
        return
    for n in names:
        full = os.path.join(directory, n)
        if full == keep:
            continue
        try:
            fd = os.open(full, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:        # held: another process is writing it right now
            os.close(fd)
            continue
        try:
            if os.stat(full).st_ino == os.fstat(fd).st_ino:
                os.unlink(full)
        except OSError:
            pass
        finally:
            os.close(fd)


def save(path, tree, metadata: Any = None) -> None:
    """Atomically write ``tree`` (and JSON-serializable ``metadata``) to ``path`` (written as given;
    use a ``.npz`` suffix by convention)."""
    path = os.fspath(path)
    enc = _Encoder()
    spec = enc.encode(tree, "tree")
    header = {"format": _FORMAT, "version": _VERSION, "tree": spec, "metadata": metadata}
    try:
        blob = json.dumps(header, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"checkpoint.save: metadata must be JSON-serializable (dict/list/str/number/bool/None): "
                              f"{e}") from None
    arrays = dict(enc.arrays)
    arrays[_TREE_KEY] = np.frombuffer(blob, dtype=np.uint8)

    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = _locked_temporary(path, directory)
    _remove_stale_temporaries(path, directory, keep=tmp)
    try:
        with os.fdopen(fd, "wb") as f:
            _write_npz(f, arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(directory)


def _read(path):
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"checkpoint.load: no checkpoint at {path}")
    try:
        with np.load(path, allow_pickle=False) as z:
            if not isinstance(z, np.lib.npyio.NpzFile):
                raise ValueError("a single .npy array, not an .npz archive")
            if _TREE_KEY not in z.files:
                raise ValueError(f"no {_TREE_KEY} entry (not written by funcgrad.checkpoint.save)")
            header = json.loads(bytes(z[_TREE_KEY]).decode("utf-8"))
            if not isinstance(header, dict) or header.get("format") != _FORMAT:
                raise ValueError("the structure header is not a funcgrad checkpoint header")
            if header.get("version") != _VERSION:
                raise ValueError(f"checkpoint format version {header.get('version')!r}, this funcgrad reads "
                                 f"version {_VERSION}")
            n = sum(1 for k in z.files if k.startswith("leaf_"))
            arrays = [z[f"leaf_{i}"] for i in range(n)]  # read eagerly: CRC checked here
    except CheckpointError:
        raise
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError, UnicodeDecodeError) as e:
        size = os.path.getsize(path)
        raise CheckpointError(f"checkpoint.load: {path} ({size} bytes) is truncated or corrupt and cannot be "
                              f"loaded: {type(e).__name__}: {e}") from None
    return path, header, arrays


def load_metadata(path):
    """The ``metadata`` saved with the checkpoint (without reconstructing the tree's NamedTuples)."""
    return _read(path)[1]["metadata"]


def load(path, like=None, with_metadata: bool = False, device=None):
    """Read a checkpoint written by :func:`save`.

    ``like``: optional template tree; the loaded tree must have its structure, and array leaves its
    shapes and dtypes (TreeStructureError naming the key path otherwise); a leaf whose ``like`` leaf is a
    GPU array is put on the GPU. ``device``: ``"cuda"`` / ``"cuda:N"`` puts every array leaf on that GPU,
    ``"cpu"`` keeps every leaf in host memory, ``None`` (default) follows ``like``.
    Returns the tree, or ``(tree, metadata)`` when ``with_metadata``.
    """
    if device not in (None, "cpu"):
        _device_index(device)   # a bad name fails before the file is read
    path, header, arrays = _read(path)
    try:
        tree = _decode(header["tree"], arrays, "tree")
    except CheckpointError as e:
        raise CheckpointError(f"{path}: {e}") from None
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise CheckpointError(f"checkpoint.load: {path} has a corrupt structure header: "
                              f"{type(e).__name__}: {e}") from None
    if like is not None:
        _check_like(path, tree, like)
    if device not in (None, "cpu"):
        tree = device_put(tree, device)
    elif device is None and like is not None and any(is_device_array(x) for x in _leaves(like)):
        tree = tree_map(lambda a, t: device_put(a) if is_device_array(t) and isinstance(a, np.ndarray) else a,
                        tree, like)
    return (tree, header["metadata"]) if with_metadata else tree


def _leaves(tree):
    return [leaf for _, leaf in tree_flatten_with_path(tree)[0]]


def _check_like(path, tree, like):
    try:
        assert_same_structure(tree, like, root="checkpoint")
    except TreeStructureError as e:
        raise TreeStructureError(f"checkpoint.load: {path} does not match the template `like` "
                                 f"(first = checkpoint, second = like): {e}") from None
    got, _ = tree_flatten_with_path(tree)
    want, _ = tree_flatten_with_path(like)
    for (p, a), (_, b) in zip(got, want):
        where = f"checkpoint{p}"
        if isinstance(b, (np.ndarray, np.generic)) or is_device_array(b):
            if not isinstance(a, (np.ndarray, np.generic)):
                raise TreeStructureError(f"checkpoint.load: {path}: {where} is a {type(a).__name__}, "
                                         f"the template has an array")
            if a.shape != tuple(b.shape) or a.dtype != np.dtype(b.dtype):
                raise TreeStructureError(f"checkpoint.load: {path}: {where} has shape {a.shape} dtype {a.dtype}, "
                                         f"the template has shape {b.shape} dtype {b.dtype}")
        elif type(a) is not type(b):
            raise TreeStructureError(f"checkpoint.load: {path}: {where} is a {type(a).__name__}, "
                                     f"the template has a {type(b).__name__}")


class _CallableModule(types.ModuleType):
    """``funcgrad.checkpoint(helper)`` is ``jax.checkpoint``: :func:`funcgrad.remat` (the module's ``save`` and
    ``load`` are model checkpoints; calling the module checkpoints a helper's intermediates)."""

    def __call__(self, fun):
        return remat(fun)


sys.modules[__name__].__class__ = _CallableModule
