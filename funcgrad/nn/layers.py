"""stax-style layers of funcgrad.nn and their composition (:func:`serial`).

Owns ``serial``, ``Dense``, ``Conv2D``, ``MaxPool2D``, ``AvgPool2D``,
``Flatten``, ``Relu``, ``Tanh``, ``Dropout`` and ``BatchNorm``. Each layer is
a pair ``(init_fn(seed, input_shape, dtype=np.float64) -> (output_shape,
params), apply_fn(params, x, train=False, seed=0) -> y)``.

Guarantee: every apply_fn is a plain ``def`` of primitives whose source
``inspect.getsource`` returns, because the source transformer reads source
(it does not trace). The ones with constants (strides, rates, eps) and
``serial``'s straight-line composition are generated source, and all of it
goes through :func:`_generated`, the one way this package turns source text
into a function.
"""
from __future__ import annotations

import math
import types

import numpy as np

from funcgrad import initializers
from funcgrad.kernels.cpu_nn import _pair
from ..transform.emit import write_module
from .rules import avg_pool2d, batch_norm, batch_norm_stats, conv2d, dropout, max_pool2d, relu

__all__ = ["serial", "Dense", "Conv2D", "MaxPool2D", "AvgPool2D", "Flatten", "Relu", "Tanh", "Dropout",
           "BatchNorm"]


def _generated(name, src, env):
    """The function ``name`` that source text ``src`` defines, with ``np`` and ``env`` as globals.

    The text is written like all generated code (:func:`funcgrad.transform.emit.write_module`:
    once, to a content-hashed file in the cache directory), so ``inspect.getsource``,
    tracebacks and the source transformer see it. Layers with the same text share that
    file; each call gets a function of its own over its ``env`` (two ``serial`` models
    of three layers have the same source but different layers)."""
    base = getattr(write_module(f"nn_{name}", src), name)
    g = dict(base.__globals__)
    g["np"] = np
    g.update(env)
    fn = types.FunctionType(base.__code__, g, name, base.__defaults__)
    fn.__module__ = "funcgrad.nn"
    return fn


def _static(v):
    """Source text of a static argument (int, float, None, tuple of ints)."""
    if isinstance(v, (list, tuple)):
        return "(" + ", ".join(_static(e) for e in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, (bool, np.bool_)):
        return repr(bool(v))
    if isinstance(v, (int, np.integer)):
        return repr(int(v))
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    if v is None:
        return "None"
    raise TypeError(f"layer argument must be an int, float, None or a tuple of ints, got {v!r}")


def _seed_of(seed):
    if seed is None or isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"init_fn: seed must be an int (randomness is explicit), got {seed!r}")
    return int(seed)


def Dense(out_dim, W_init=None, b_init=None):
    """Fully connected: ``x @ w + b`` with w (in, out) (Glorot-uniform) and b (out,) (zeros)."""
    out_dim = int(out_dim)

    def init_fn(seed, input_shape, dtype=np.float64):
        seed = _seed_of(seed)
        fan_in = int(input_shape[-1])
        if W_init is None:
            w = initializers.glorot_uniform(seed, (fan_in, out_dim), dtype=dtype, in_axis=0, out_axis=1)
        else:
            w = W_init(seed, (fan_in, out_dim), dtype=dtype)
        b = (initializers.zeros if b_init is None else b_init)(seed + 1, (out_dim,), dtype=dtype)
        return tuple(input_shape[:-1]) + (out_dim,), {"w": w, "b": b}

    def dense_apply(params, x, train=False, seed=0):
        return x @ params["w"] + params["b"]

    return init_fn, dense_apply


def Conv2D(out_channels, kernel_size, stride=1, padding=0, dilation=1, W_init=None, b_init=None):
    """2-D convolution layer (NCHW / OIHW) with bias; weights Kaiming-uniform(a=sqrt(5)) like PyTorch."""
    O = int(out_channels)
    kh, kw = _pair(kernel_size)
    sh, sw = _pair(stride)
    ph, pw = _pair(padding)
    dh, dw = _pair(dilation)

    def init_fn(seed, input_shape, dtype=np.float64):
        seed = _seed_of(seed)
        N, C, H, W = input_shape
        wshape = (O, int(C), kh, kw)
        if W_init is None:
            w = initializers.kaiming_uniform(seed, wshape, a=math.sqrt(5.0), dtype=dtype)
            bound = 1.0 / math.sqrt(C * kh * kw)
            b = initializers.uniform(seed + 1, (O,), -bound, bound, dtype=dtype) if b_init is None else \
                b_init(seed + 1, (O,), dtype=dtype)
        else:
            w = W_init(seed, wshape, dtype=dtype)
            b = (initializers.zeros if b_init is None else b_init)(seed + 1, (O,), dtype=dtype)
        OH = (H + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        OW = (W + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        return (N, O, OH, OW), {"w": w, "b": b}

    src = (f"def conv2d_apply(params, x, train=False, seed=0):\n"
           f"    return conv2d(x, params['w'], params['b'], {_static((sh, sw))}, {_static((ph, pw))}, "
           f"{_static((dh, dw))})\n")
    return init_fn, _generated("conv2d_apply", src, {"conv2d": conv2d})


def _pool_layer(name, fn, kernel_size, stride, padding):
    kh, kw = _pair(kernel_size)
    sh, sw = (kh, kw) if stride is None else _pair(stride)
    ph, pw = _pair(padding)

    def init_fn(seed, input_shape, dtype=np.float64):
        N, C, H, W = input_shape
        return (N, C, (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1), ()

    src = (f"def {name}_apply(params, x, train=False, seed=0):\n"
           f"    return {name}(x, {_static((kh, kw))}, {_static((sh, sw))}, {_static((ph, pw))})\n")
    return init_fn, _generated(f"{name}_apply", src, {name: fn})


def MaxPool2D(kernel_size, stride=None, padding=0):
    return _pool_layer("max_pool2d", max_pool2d, kernel_size, stride, padding)


def AvgPool2D(kernel_size, stride=None, padding=0):
    return _pool_layer("avg_pool2d", avg_pool2d, kernel_size, stride, padding)


def _shape_preserving(apply_fn):
    def init_fn(seed, input_shape, dtype=np.float64):
        return tuple(input_shape), ()
    return init_fn, apply_fn


def _flatten_init(seed, input_shape, dtype=np.float64):
    return (input_shape[0], int(np.prod(input_shape[1:]))), ()


def flatten_apply(params, x, train=False, seed=0):
    return np.reshape(x, (x.shape[0], -1))


def relu_apply(params, x, train=False, seed=0):
    return relu(x)


def tanh_apply(params, x, train=False, seed=0):
    return np.tanh(x)


Flatten = (_flatten_init, flatten_apply)
Relu = _shape_preserving(relu_apply)
Tanh = _shape_preserving(tanh_apply)


def Dropout(rate):
    """Dropout with probability ``rate`` when ``train`` is true (mask from the apply's ``seed``);
    the identity when it is false."""
    rate = float(rate)
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"Dropout: rate must be in [0, 1), got {rate}")
    src = (f"def dropout_apply(params, x, train=False, seed=0):\n"
           f"    return dropout(x, {_static(rate)} * train, seed)\n")
    return _shape_preserving(_generated("dropout_apply", src, {"dropout": dropout}))


def BatchNorm(eps=1e-5, momentum=0.1):
    """Batch normalization over axis 1. params: gamma (ones), beta (zeros) and the running
    statistics ``mean`` (zeros) and ``var`` (ones). train=True normalizes with the batch
    statistics, train=False with the running ones. apply_fn never changes params; the new
    running statistics come from ``serial``'s ``apply_fn.with_stats`` (returned as auxiliary
    data of the differentiated loss) and go back in with ``apply_fn.merge_stats``, with
    PyTorch's rule ``new = (1 - momentum) * running + momentum * batch`` (unbiased variance)."""
    momentum = float(momentum)
    if not 0.0 <= momentum <= 1.0:
        raise ValueError(f"BatchNorm: momentum must be in [0, 1], got {momentum}")

    def init_fn(seed, input_shape, dtype=np.float64):
        C = int(input_shape[1])
        return tuple(input_shape), {"gamma": np.ones(C, dtype), "beta": np.zeros(C, dtype),
                                    "mean": np.zeros(C, dtype), "var": np.ones(C, dtype)}

    src = (f"def batch_norm_apply(params, x, train=False, seed=0):\n"
           f"    return batch_norm(x, params['gamma'], params['beta'], params['mean'], params['var'], train, "
           f"{_static(float(eps))})\n")
    apply_fn = _generated("batch_norm_apply", src, {"batch_norm": batch_norm})
    src = (f"def batch_norm_new_stats(params, x):\n"
           f"    return batch_norm_stats(x, params['mean'], params['var'], {_static(momentum)})\n")
    apply_fn.new_stats = _generated("batch_norm_new_stats", src, {"batch_norm_stats": batch_norm_stats})
    return init_fn, apply_fn


def _merge_layer_stats(p, s):
    """params of one BatchNorm layer with its running statistics replaced by s = [mean, var]."""
    if not (isinstance(p, dict) and "mean" in p and "var" in p):
        raise TypeError("merge_stats: params do not match the layers (expected a BatchNorm layer's dict)")
    s = np.asarray(s)
    if s.shape != (2,) + np.shape(p["mean"]):
        raise ValueError(f"merge_stats: statistics of shape {s.shape} for a layer of {np.shape(p['mean'])[0]} channels")
    out = dict(p)
    out["mean"] = s[0].astype(np.asarray(p["mean"]).dtype, copy=True)
    out["var"] = s[1].astype(np.asarray(p["var"]).dtype, copy=True)
    return out


def serial(*layers):
    """Compose layers. params is a tuple with one entry per layer; apply_fn is GENERATED
    straight-line source (``x = _layer0(params[0], x, train, seed * 1000003 + 0)``, ...),
    never a Python loop over closures, so the source transformer can read it.

    With BatchNorm layers, apply_fn also has ``with_stats(params, x, train=True, seed=0)
    -> (y, stats)`` and ``merge_stats(params, stats) -> params``::

        def loss(params, x, y):
            logits, stats = apply_fn.with_stats(params, x)
            return nn.cross_entropy(logits, y), stats
        (value, stats), grads = funcgrad.value_and_grad(loss, has_aux=True)(params, x, y)
        params = apply_fn.merge_stats(optim.apply_updates(params, updates), stats)
    """
    if not layers:
        raise ValueError("serial: give at least one layer")
    for i, layer in enumerate(layers):
        if not (isinstance(layer, tuple) and len(layer) == 2 and callable(layer[0]) and callable(layer[1])):
            raise TypeError(f"serial: layer {i} must be an (init_fn, apply_fn) pair, got {layer!r}")
    inits = [l[0] for l in layers]
    applies = [l[1] for l in layers]

    def init_fn(seed, input_shape, dtype=np.float64):
        seed = _seed_of(seed)
        seeds = np.random.default_rng(seed).integers(0, 2**31 - 1, len(inits))
        params = []
        shape = tuple(input_shape)
        for s, init in zip(seeds, inits):
            shape, p = init(int(s), shape, dtype=dtype)
            params.append(p)
        return shape, tuple(params)

    lines = ["def serial_apply(params, x, train=False, seed=0):"]
    for i in range(len(applies)):
        lines.append(f"    x = _layer{i}(params[{i}], x, train, seed * 1000003 + {i})")
    lines.append("    return x")
    src = "\n".join(lines) + "\n"
    env = {f"_layer{i}": a for i, a in enumerate(applies)}
    # the content hash names the file: same source -> same file; globals differ per call
    apply_fn = _generated("serial_apply", src, env)

    # Layers with running statistics (BatchNorm, or a nested serial holding one): with_stats
    # also returns their new statistics, computed from each layer's training-mode input.
    stateful = [i for i, a in enumerate(applies) if hasattr(a, "new_stats") or hasattr(a, "with_stats")]
    if stateful:
        lines = ["def serial_apply_with_stats(params, x, train=True, seed=0):"]
        for i, a in enumerate(applies):
            if hasattr(a, "with_stats"):
                lines.append(f"    x, _s{i} = _layer{i}_with_stats(params[{i}], x, train, seed * 1000003 + {i})")
                env[f"_layer{i}_with_stats"] = a.with_stats
                continue
            if hasattr(a, "new_stats"):
                lines.append(f"    _s{i} = _layer{i}_new_stats(params[{i}], x)")
                env[f"_layer{i}_new_stats"] = a.new_stats
            lines.append(f"    x = _layer{i}(params[{i}], x, train, seed * 1000003 + {i})")
        lines.append("    return x, (" + "".join(f"_s{i}, " for i in stateful) + ")")
        apply_fn.with_stats = _generated("serial_apply_with_stats", "\n".join(lines) + "\n", env)
        nested = {i: applies[i].merge_stats for i in stateful if hasattr(applies[i], "merge_stats")}

        def merge_stats(params, stats):
            """params with every BatchNorm's running statistics replaced by ``stats``
            (the auxiliary output of ``with_stats``); other entries are returned as they are."""
            if not isinstance(params, tuple) or len(params) != len(applies):
                raise TypeError(f"merge_stats: params must be the tuple of {len(applies)} layer params")
            if not isinstance(stats, tuple) or len(stats) != len(stateful):
                raise TypeError(f"merge_stats: expected the {len(stateful)} statistics returned by with_stats")
            out = list(params)
            for i, s in zip(stateful, stats):
                out[i] = nested[i](params[i], s) if i in nested else _merge_layer_stats(params[i], s)
            return tuple(out)
        apply_fn.merge_stats = merge_stats
    return init_fn, apply_fn
