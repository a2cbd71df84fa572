"""Second derivatives of the nn losses, activations and norms: their gradient kernels defined over primitives.

The VJP and JVP lines of ``mse``, ``huber``, the cross-entropies, ``nll``, ``gelu``'s second derivative, the
softmax family, ``layer_norm`` and ``batch_norm`` call fused gradient kernels (``mse_grad``, ``layer_norm_grad_input``
...). First-order code calls them as they are. A Hessian, a Hessian-vector product (a Newton step of a loss over a
model), grad of grad or a gradient taken inside a differentiated function differentiates the generated code again,
so each kernel is also *defined* here, as funcgrad/ops/second_order.py defines the linalg helpers: the same value,
written over primitives that have rules, inlined where generated code read back calls the kernel. The definitions
follow the kernels in funcgrad/kernels/cpu_nn.py line by line (tests/test_second_order_rules.py compares them).

Each loss's grad kernel takes the cotangent ``g`` either as one number (``reduction="mean"`` or ``"sum"``: it is
broadcast) or as one value per loss (``"none"``, and the JVP lines, which pass a tangent of the input's shape with
any reduction), times ``1 / (number of losses)`` for ``"mean"``.
"""
from __future__ import annotations

import math

import numpy as np

from funcgrad.ops.second_order import kernel_definition
from .rules import sigmoid, softmax

_INV_SQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)
_TINY = 3.720075976020836e-44          # below it the kernels' clamped log is -100 (PyTorch's rule)


def _scale(reduction, n):
    if reduction == "mean":
        return 1.0 / max(n, 1)
    return 1.0


def _per_element(g, p):
    """The cotangent the kernels read for element i of ``p``: g itself when it holds one number, else g's i-th
    (the kernels read g flat). No branch on g's ndim: g may be the float 1.0 read back, and a test of np.ndim
    would not compile under njit."""
    return np.reshape(np.reshape(g, (-1,)) + np.zeros(np.size(p)), np.shape(p))


def _per_row(g, z):
    """The cotangent of row i of (N, C) ``z``, as a column that broadcasts along the row (one number: a 1x1)."""
    return np.reshape(g, (-1, 1))


def _clog(v):
    return np.where(v > _TINY, np.log(np.maximum(v, _TINY)), -100.0)


def _onehot(labels, z):
    # reshape, not labels[:, None]: read back, labels may be the generated code's constant array
    return (np.reshape(labels, (-1, 1)) == np.reshape(np.arange(z.shape[1]), (1, -1))).astype(z.dtype)


# ----------------------------------------------------------------------------- losses
@kernel_definition("mse_grad")
def mse_grad(g, pred, target, reduction="mean"):
    return 2.0 * _scale(reduction, pred.size) * _per_element(g, pred) * (pred - target)


@kernel_definition("huber_grad")
def huber_grad(g, pred, target, delta=1.0, reduction="mean"):
    return _scale(reduction, pred.size) * _per_element(g, pred) * np.clip(pred - target, -delta, delta)


@kernel_definition("binary_cross_entropy_grad")
def binary_cross_entropy_grad(g, probs, target, reduction="mean"):
    q = probs
    return _scale(reduction, q.size) * _per_element(g, q) * (q - target) / np.maximum(q * (1.0 - q), 1e-12)


@kernel_definition("binary_cross_entropy_grad_target")
def binary_cross_entropy_grad_target(g, probs, target, reduction="mean"):
    return _scale(reduction, probs.size) * _per_element(g, probs) * (_clog(1.0 - probs) - _clog(probs))


@kernel_definition("binary_cross_entropy_with_logits_grad")
def binary_cross_entropy_with_logits_grad(g, logits, target, reduction="mean"):
    return _scale(reduction, logits.size) * _per_element(g, logits) * (sigmoid(logits) - target)


@kernel_definition("binary_cross_entropy_with_logits_grad_target")
def binary_cross_entropy_with_logits_grad_target(g, logits, target, reduction="mean"):
    return -_scale(reduction, logits.size) * _per_element(g, logits) * logits


@kernel_definition("cross_entropy_grad")
def cross_entropy_grad(g, logits, labels, reduction="mean"):
    gs = _scale(reduction, logits.shape[0]) * _per_row(g, logits)
    if labels.ndim == 1:   # integer class ids
        return gs * (softmax(logits, -1) - _onehot(labels, logits))
    return gs * (softmax(logits, -1) * np.sum(labels, axis=-1, keepdims=True) - labels)


@kernel_definition("cross_entropy_grad_target")
def cross_entropy_grad_target(g, logits, labels, reduction="mean"):
    if labels.ndim == 1:   # integer class ids: no cotangent
        return 0.0 * labels.astype(logits.dtype)
    m = np.max(logits, axis=-1, keepdims=True)
    lse = m + np.log(np.sum(np.exp(logits - m), axis=-1, keepdims=True))
    return _scale(reduction, logits.shape[0]) * _per_row(g, logits) * (lse - logits)


@kernel_definition("nll_grad")
def nll_grad(g, logp, labels, reduction="mean"):
    return -_scale(reduction, logp.shape[0]) * _per_row(g, logp) * _onehot(labels, logp)


# ----------------------------------------------------------------------------- activations, softmax family
@kernel_definition("gelu_grad2")
def gelu_grad2(g, x):
    return g * _INV_SQRT2PI * np.exp(-0.5 * x * x) * (2.0 - x * x)


@kernel_definition("softmax_grad_y")
def softmax_grad_y(r, g, y, axis=-1):
    s = np.sum(g * y, axis=axis, keepdims=True)
    t = np.sum(r * y, axis=axis, keepdims=True)
    return r * (g - s) - t * g


@kernel_definition("log_softmax_grad")
def log_softmax_grad(g, y, axis=-1):
    return g - np.exp(y) * np.sum(g, axis=axis, keepdims=True)


@kernel_definition("logsumexp_grad")
def logsumexp_grad(g, x, y, axis=-1):
    return np.expand_dims(g, axis) * np.exp(x - np.expand_dims(y, axis))


# ----------------------------------------------------------------------------- norms
def _ln_parts(x, eps):
    xc = x - np.mean(x, axis=-1, keepdims=True)
    inv = 1.0 / np.sqrt(np.mean(xc * xc, axis=-1, keepdims=True) + eps)
    return xc * inv, inv


@kernel_definition("layer_norm_grad_input")
def layer_norm_grad_input(dy, x, gamma, eps=1e-5):
    xh, inv = _ln_parts(x, eps)
    gh = dy * gamma
    return inv * (gh - np.mean(gh, axis=-1, keepdims=True) - xh * np.mean(gh * xh, axis=-1, keepdims=True))


@kernel_definition("layer_norm_grad_gamma")
def layer_norm_grad_gamma(dy, x, eps=1e-5):
    xh, inv = _ln_parts(x, eps)
    return np.sum(np.reshape(dy * xh, (-1, x.shape[-1])), axis=0)


@kernel_definition("layer_norm_grad_beta")
def layer_norm_grad_beta(dy):
    return np.sum(np.reshape(dy, (-1, dy.shape[-1])), axis=0)


def _bn_parts(x3, running_mean, running_var, train, eps):
    """(x - mean) / sqrt(var + eps) per channel of (N, C, S) ``x3``, and 1 / sqrt(var + eps)."""
    if train:
        xc = x3 - np.mean(x3, axis=(0, 2), keepdims=True)
        var = np.mean(xc * xc, axis=(0, 2), keepdims=True)
    else:
        xc = x3 - np.reshape(running_mean, (1, -1, 1))
        var = np.reshape(running_var, (1, -1, 1))
    inv = 1.0 / np.sqrt(var + eps)
    return xc * inv, inv


def _ncs(x):
    return np.reshape(x, (x.shape[0], x.shape[1], -1))


@kernel_definition("batch_norm_grad_input")
def batch_norm_grad_input(dy, x, gamma, running_mean, running_var, train=True, eps=1e-5):
    x3 = _ncs(x)
    dy3 = _ncs(dy)
    xh, inv = _bn_parts(x3, running_mean, running_var, train, eps)
    gc = np.reshape(gamma, (1, -1, 1)) * inv
    if train:
        out = gc * (dy3 - np.mean(dy3, axis=(0, 2), keepdims=True)
                    - xh * np.mean(dy3 * xh, axis=(0, 2), keepdims=True))
    else:
        out = gc * dy3
    return np.reshape(out, x.shape)


@kernel_definition("batch_norm_grad_gamma")
def batch_norm_grad_gamma(dy, x, running_mean, running_var, train=True, eps=1e-5):
    xh, inv = _bn_parts(_ncs(x), running_mean, running_var, train, eps)
    return np.sum(_ncs(dy) * xh, axis=(0, 2))
