"""Parameter initializers with explicit seeds (re-exported as ``funcgrad.nn.initializers``).

Owns the initializer functions and :func:`calculate_gain`. Every initializer is
``fn(seed, shape, ..., dtype=np.float32) -> np.ndarray``:

* ``seed`` is an ``int`` (a fresh ``np.random.default_rng(seed)``: the same seed
  always gives the same array) or a ``np.random.Generator`` (drawn from, so
  its state advances). ``None`` is refused: randomness is explicit.
* Values are drawn in float64 and cast to ``dtype``, so a seed gives the same
  values (up to rounding) in every floating dtype.
* Fans follow PyTorch's layout by default: ``shape[0]`` is the output
  dimension, ``shape[1]`` the input dimension and the rest the receptive
  field, so a dense ``(out, in)`` weight has ``fan_in = in`` and a conv
  ``OIHW`` weight has ``fan_in = I*kh*kw``, ``fan_out = O*kh*kw``. For
  ``(in, out)`` dense weights (``x @ W``) pass ``in_axis=0, out_axis=1``.
* Scales match ``torch.nn.init``: ``xavier_*`` (Glorot), ``kaiming_*`` (He;
  plain, not truncated, normal), ``orthogonal`` (QR of a Gaussian with the
  sign of ``diag(R)`` fixed), gains from :func:`calculate_gain`.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

__all__ = [
    "calculate_gain", "compute_fans",
    "zeros", "ones", "constant", "normal", "uniform",
    "xavier_uniform", "xavier_normal", "glorot_uniform", "glorot_normal",
    "kaiming_uniform", "kaiming_normal", "he_uniform", "he_normal",
    "orthogonal",
]

_LINEAR = ("linear", "identity", "conv1d", "conv2d", "conv3d",
           "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "sigmoid")


def calculate_gain(nonlinearity: str, param=None) -> float:
    """The recommended gain for a nonlinearity, as ``torch.nn.init.calculate_gain``:
    1 for linear/conv/sigmoid, 5/3 for tanh, sqrt(2) for relu,
    sqrt(2 / (1 + negative_slope^2)) for leaky_relu (``param`` = slope, default 0.01), 3/4 for selu."""
    if nonlinearity in _LINEAR:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, numbers.Number) and not isinstance(param, bool):
            slope = float(param)
        else:
            raise ValueError(f"calculate_gain: negative_slope {param!r} is not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}; expected one of "
                     f"{', '.join(_LINEAR + ('tanh', 'relu', 'leaky_relu', 'selu'))}")


def _rng(seed, fn: str) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, (bool, np.bool_)):
        if seed < 0:
            raise ValueError(f"{fn}: seed must be >= 0, received {seed}")
        return np.random.default_rng(int(seed))
    raise TypeError(f"{fn}: seed must be an int or a numpy.random.Generator, received {seed!r} "
                    f"(randomness is explicit: pass e.g. seed=0)")


def _shape(shape, fn: str) -> tuple:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        out = tuple(int(s) for s in shape)
        ok = all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in shape)
    except TypeError:
        ok = False
    if not ok or any(s < 0 for s in out):
        raise ValueError(f"{fn}: shape must be a tuple of non-negative ints, received {shape!r}")
    return out


def _float_dtype(dtype, fn: str) -> np.dtype:
    dt = np.dtype(dtype)
    if not np.issubdtype(dt, np.floating):
        raise TypeError(f"{fn}: random initializers produce floating-point arrays; received dtype {dt}")
    return dt


def compute_fans(shape, in_axis: int = 1, out_axis: int = 0) -> tuple[int, int]:
    """``(fan_in, fan_out)``: ``shape[in_axis] * receptive``, ``shape[out_axis] * receptive``, where
    receptive is the product of the other dimensions (PyTorch layout by default)."""
    shape = _shape(shape, "compute_fans")
    if len(shape) < 2:
        raise ValueError(f"fan in and fan out need a weight with at least 2 dimensions, received shape {shape}")
    ia, oa = in_axis % len(shape), out_axis % len(shape)
    if ia == oa:
        raise ValueError(f"compute_fans: in_axis and out_axis are both axis {ia}")
    receptive = 1
    for i, s in enumerate(shape):
        if i not in (ia, oa):
            receptive *= s
    return shape[ia] * receptive, shape[oa] * receptive


def _fan(shape, mode, in_axis, out_axis, fn):
    fan_in, fan_out = compute_fans(shape, in_axis, out_axis)
    if mode == "fan_in":
        fan = fan_in
    elif mode == "fan_out":
        fan = fan_out
    else:
        raise ValueError(f"{fn}: mode must be 'fan_in' or 'fan_out', received {mode!r}")
    if fan == 0:
        raise ValueError(f"{fn}: {mode} is 0 for shape {tuple(shape)}")
    return fan


# --------------------------------------------------------------------------- constant

def zeros(seed, shape, dtype=np.float32) -> np.ndarray:
    """All zeros (``seed`` accepted for a uniform signature, unused)."""
    return np.zeros(_shape(shape, "zeros"), dtype=dtype)


def ones(seed, shape, dtype=np.float32) -> np.ndarray:
    """All ones (``seed`` unused)."""
    return np.ones(_shape(shape, "ones"), dtype=dtype)


def constant(seed, shape, value=0.0, dtype=np.float32) -> np.ndarray:
    """Every element ``value`` (``seed`` unused)."""
    return np.full(_shape(shape, "constant"), value, dtype=dtype)


# --------------------------------------------------------------------------- random

def normal(seed, shape, mean: float = 0.0, std: float = 1.0, dtype=np.float32) -> np.ndarray:
    """Gaussian with ``mean`` and ``std``."""
    if std < 0:
        raise ValueError(f"normal: std must be >= 0, received {std}")
    dt = _float_dtype(dtype, "normal")
    return _rng(seed, "normal").normal(mean, std, size=_shape(shape, "normal")).astype(dt)


def uniform(seed, shape, low: float = 0.0, high: float = 1.0, dtype=np.float32) -> np.ndarray:
    """Uniform on ``[low, high)``."""
    if not high >= low:
        raise ValueError(f"uniform: need low <= high, received low={low}, high={high}")
    dt = _float_dtype(dtype, "uniform")
    return _rng(seed, "uniform").uniform(low, high, size=_shape(shape, "uniform")).astype(dt)


def xavier_uniform(seed, shape, gain: float = 1.0, dtype=np.float32, *, in_axis=1, out_axis=0) -> np.ndarray:
    """U(-a, a) with ``a = gain * sqrt(6 / (fan_in + fan_out))`` (Glorot & Bengio 2010)."""
    fan_in, fan_out = compute_fans(shape, in_axis, out_axis)
    a = gain * math.sqrt(6.0 / max(fan_in + fan_out, 1))
    return uniform(seed, shape, -a, a, dtype)


def xavier_normal(seed, shape, gain: float = 1.0, dtype=np.float32, *, in_axis=1, out_axis=0) -> np.ndarray:
    """N(0, std^2) with ``std = gain * sqrt(2 / (fan_in + fan_out))``."""
    fan_in, fan_out = compute_fans(shape, in_axis, out_axis)
    return normal(seed, shape, 0.0, gain * math.sqrt(2.0 / max(fan_in + fan_out, 1)), dtype)


def kaiming_uniform(seed, shape, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                    dtype=np.float32, *, in_axis=1, out_axis=0) -> np.ndarray:
    """U(-b, b) with ``b = gain * sqrt(3 / fan)``, ``gain = calculate_gain(nonlinearity, a)`` (He et al. 2015)."""
    fan = _fan(shape, mode, in_axis, out_axis, "kaiming_uniform")
    bound = math.sqrt(3.0) * calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return uniform(seed, shape, -bound, bound, dtype)


def kaiming_normal(seed, shape, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                   dtype=np.float32, *, in_axis=1, out_axis=0) -> np.ndarray:
    """N(0, std^2) with ``std = gain / sqrt(fan)``."""
    fan = _fan(shape, mode, in_axis, out_axis, "kaiming_normal")
    return normal(seed, shape, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(fan), dtype)


def orthogonal(seed, shape, gain: float = 1.0, dtype=np.float32) -> np.ndarray:
    """A (semi-)orthogonal matrix of ``shape[0]`` rows by ``prod(shape[1:])`` columns, times ``gain``
    (Saxe et al. 2013; ``torch.nn.init.orthogonal_``): rows orthonormal when rows <= cols,
    columns orthonormal otherwise."""
    shape = _shape(shape, "orthogonal")
    if len(shape) < 2:
        raise ValueError(f"orthogonal: needs at least 2 dimensions, received shape {shape}")
    dt = _float_dtype(dtype, "orthogonal")
    rows = shape[0]
    cols = int(np.prod(shape[1:]))
    if rows == 0 or cols == 0:
        return np.zeros(shape, dtype=dt)
    flat = _rng(seed, "orthogonal").standard_normal((rows, cols))
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    d = np.sign(np.diag(r))
    d[d == 0] = 1.0
    q = q * d
    if rows < cols:
        q = q.T
    return (gain * q).reshape(shape).astype(dt)


glorot_uniform = xavier_uniform
glorot_normal = xavier_normal
he_uniform = kaiming_uniform
he_normal = kaiming_normal
