"""Argument checks and leaf helpers shared by every optimizer transform (internal).

Owns the error messages a user of :mod:`funcgrad.optim` sees for a bad
hyperparameter, a grads tree that does not match the params (naming the key
path), a missing ``params`` argument or a non-float parameter, and the
array helpers that keep updates in the parameters' dtype.
"""
from __future__ import annotations

import math
from typing import Callable, Union

import numpy as np

from funcgrad.errors import TreeStructureError
from funcgrad.kernels.base import is_device_array as on_device
from funcgrad.kernels.cuda_backend import CUDA
from funcgrad.tree import assert_same_structure, tree_flatten, tree_flatten_with_path, tree_unflatten

Schedule = Callable[[int], float]
ScalarOrSchedule = Union[float, Schedule]


def check_hparam(name: str, value, *, low=0.0, high=None, high_open=False, opt="") -> None:
    """A finite number in [low, high] (or [low, high)); ``lr`` may also be a schedule."""
    if callable(value):
        return
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{opt}: {name} must be a number{' or a schedule' if name == 'lr' else ''}, "
                        f"received {value!r} of type {type(value).__name__}")
    v = float(value)
    if not math.isfinite(v) or v < low or (high is not None and (v >= high if high_open else v > high)):
        rng = f"in [{low:g}, {high:g}{')' if high_open else ']'}" if high is not None else f">= {low:g}"
        raise ValueError(f"{opt}: invalid {name} {value!r}; expected a finite value {rng}")


def as_schedule(lr: ScalarOrSchedule, opt: str) -> Schedule:
    """``lr`` as a schedule ``step -> float``; a callable's values are checked when it is called."""
    check_hparam("lr", lr, opt=opt)
    if callable(lr):
        def checked(step, _fn=lr):
            v = float(_fn(step))
            if not (v >= 0.0 and math.isfinite(v)):
                raise ValueError(f"{opt}: the learning-rate schedule returned {v!r} at step {step}; "
                                 "a learning rate must be finite and >= 0")
            return v
        return checked
    v = float(lr)
    return lambda step: v


def flat_leaves(tree, opt: str, what: str = "params"):
    """(leaves as ndarrays, treedef); a non-numeric leaf raises naming ``what``."""
    leaves, td = tree_flatten(tree)
    arrs = []
    for x in leaves:
        if on_device(x):   # a GPU array: updated by GPU kernels (DK)
            arrs.append(DK().as_device(x))
            continue
        a = np.asarray(x)
        if a.dtype == object:
            raise TypeError(f"{opt}: {what} contain a non-numeric leaf of type {type(x).__name__}")
        arrs.append(a)
    return arrs, td


def leaf_paths(tree):
    return [p for p, _ in tree_flatten_with_path(tree)[0]]


def check_grads(grads, ref, opt: str, ref_name: str = "params"):
    """Flatten grads, checking structure and leaf shapes against ``ref``; return (leaves, treedef)."""
    g, gtd = flat_leaves(grads, opt, "grads")
    r, rtd = tree_flatten(ref)
    if gtd != rtd:
        try:
            assert_same_structure(grads, ref, root="grads")
        except TreeStructureError as e:
            raise TreeStructureError(f"{opt}: grads do not match {ref_name}: {e}") from None
        raise TreeStructureError(f"{opt}: grads have structure {gtd!r}, {ref_name} have {rtd!r}")
    for i, (a, b) in enumerate(zip(g, r)):
        if a.shape != np.shape(b):
            path = leaf_paths(grads)[i]
            raise TreeStructureError(
                f"{opt}: grads{path} has shape {a.shape} but {ref_name}{path} has shape {np.shape(b)}")
    return g, gtd


def need_params(params, opt: str, why: str):
    if params is None:
        raise ValueError(f"{opt}: {why} needs the parameters; call update(grads, state, params)")


def float_dtype(a: np.ndarray):
    return a.dtype if np.issubdtype(a.dtype, np.floating) else np.dtype(np.float64)


def zeros_like_params(params, opt: str, fill: float = 0.0):
    """A tree like ``params`` of arrays filled with ``fill``, in each parameter's (float) dtype."""
    leaves, td = flat_leaves(params, opt)
    out = []
    for path, a in zip(leaf_paths(params), leaves):
        if not np.issubdtype(a.dtype, np.floating):
            raise TypeError(f"{opt}: params{path} has dtype {a.dtype}; optimizers need floating-point "
                            "parameters (cast with .astype(np.float32))")
        out.append(DK().full(tuple(a.shape), fill, a.dtype) if on_device(a) else np.full(a.shape, fill, dtype=a.dtype))
    return tree_unflatten(td, out)


def cast(g: np.ndarray, like_dtype) -> np.ndarray:
    if on_device(g):
        return g if g.dtype == like_dtype else DK().astype(g, like_dtype)
    return g if g.dtype == like_dtype else g.astype(like_dtype)


def DK():
    """The GPU kernel namespace (funcgrad.kernels.cuda): leaves on the device are updated with it, each
    update's elementwise arithmetic fused into one kernel per result."""
    return CUDA.namespace()


def dev_leaf(g, like):
    """``g`` (a GPU array, or a host number) in the dtype of the GPU array ``like``: a NumPy array here is refused."""
    if not on_device(g) and isinstance(g, np.ndarray) and g.ndim:
        raise TypeError("a gradient in host memory (a NumPy array) for a parameter on the GPU; move it with "
                        "funcgrad.device_put")
    return cast(DK().as_device(g), like.dtype) if on_device(g) else g


def fresh(ufunc, a, b, dtype=None) -> np.ndarray:
    """``ufunc(a, b)`` into a new ndarray (also for 0-d inputs, where NumPy would return a scalar)."""
    a = np.asarray(a)
    dt = dtype if dtype is not None else np.result_type(a, b)
    if type(b) is float or type(b) is int or (type(b) is np.ndarray and b.shape == a.shape):
        shape = a.shape                    # (np.broadcast_shapes costs more than the update here)
    else:
        shape = np.broadcast_shapes(a.shape, np.shape(b))
    return ufunc(a, b, out=np.empty(shape, dtype=dt))
