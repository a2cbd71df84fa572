"""The losses of funcgrad.nn, each one fused primitive with its derivative rule.

Owns ``mse``, ``huber``, ``cross_entropy`` (integer labels or probability
targets), ``nll``, ``binary_cross_entropy`` and
``binary_cross_entropy_with_logits``, each with ``reduction="mean"|"sum"|"none"``,
and the gradient primitives their VJPs are made of (``mse_grad``, ...; no VJP
of their own; second derivatives differentiate their definitions over primitives in
:mod:`funcgrad.nn.second_order`). The class
axis is last; integer labels and ``reduction`` are static (never
differentiated). Kernels: :mod:`funcgrad.kernels.cpu_nn`; sample specs:
:mod:`funcgrad.ops.samples_nn`.
"""
from __future__ import annotations

import numpy as np

from funcgrad.kernels import cpu_nn as K
from funcgrad.ops import samples_nn as S
from funcgrad.ops.core import unbroadcast
from funcgrad.ops.registry import primitive, vjp, d, t

__all__ = ["mse", "huber", "cross_entropy", "nll", "binary_cross_entropy", "binary_cross_entropy_with_logits"]


@primitive(sample=S.pair_loss())
def mse(pred, target, reduction="mean"):
    """(pred - target)**2, reduced."""
    return K.mse(pred, target, reduction)


@vjp(mse)
def _mse_vjp(y, pred, target, reduction="mean"):
    d[pred] = mse_grad(d[y], pred, target, reduction)
    d[target] = -mse_grad(d[y], pred, target, reduction)
    t[y] = (unbroadcast(mse_grad(t[pred], pred, target, reduction), y)
            - unbroadcast(mse_grad(t[target], pred, target, reduction), y))


@primitive(sample=S.loss_grad(S.pair_loss(), S.elem_shape), tested_via=mse)
def mse_grad(g, pred, target, reduction="mean"):
    """Cotangent of mse's pred. No VJP (defined in nn/second_order.py)."""
    return K.mse_grad(g, pred, target, reduction)


@primitive(sample=S.huber)
def huber(pred, target, delta=1.0, reduction="mean"):
    """0.5 r**2 if |r| <= delta else delta * (|r| - delta / 2), r = pred - target, reduced."""
    return K.huber(pred, target, delta, reduction)


@vjp(huber)
def _huber_vjp(y, pred, target, delta=1.0, reduction="mean"):
    d[pred] = huber_grad(d[y], pred, target, delta, reduction)
    d[target] = -huber_grad(d[y], pred, target, delta, reduction)
    t[y] = (unbroadcast(huber_grad(t[pred], pred, target, delta, reduction), y)
            - unbroadcast(huber_grad(t[target], pred, target, delta, reduction), y))


@primitive(sample=S.huber_grad, tested_via=huber)
def huber_grad(g, pred, target, delta=1.0, reduction="mean"):
    """Cotangent of huber's pred. No VJP (defined in nn/second_order.py)."""
    return K.huber_grad(g, pred, target, delta, reduction)


@primitive(sample=S.cross_entropy)
def cross_entropy(logits, labels, reduction="mean"):
    """Softmax cross-entropy over the last axis of (N, C) logits, fused and stable.

    ``labels``: (N,) integer class ids (not differentiable) or (N, C) target
    probabilities (differentiable)."""
    return K.cross_entropy(logits, labels, reduction)


@vjp(cross_entropy)
def _cross_entropy_vjp(y, logits, labels, reduction="mean"):
    d[logits] = cross_entropy_grad(d[y], logits, labels, reduction)
    d[labels] = cross_entropy_grad_target(d[y], logits, labels, reduction)
    # per row: <dloss/dlogits, t[logits]> + <dloss/dlabels, t[labels]>, then reduced (unbroadcast to y);
    # with integer labels dloss/dlabels is (N,) zeros, so the second row sum is a 0 that broadcasts
    t[y] = unbroadcast(np.sum(cross_entropy_grad(1.0, logits, labels, reduction) * t[logits], axis=-1)
                       + np.sum(cross_entropy_grad_target(1.0, logits, labels, reduction) * t[labels], axis=-1), y)


@primitive(sample=S.loss_grad(S.cross_entropy, S.row_shape), tested_via=cross_entropy)
def cross_entropy_grad(g, logits, labels, reduction="mean"):
    """Cotangent of cross_entropy's logits: g * (softmax * sum(t) - t). No VJP (defined in nn/second_order.py)."""
    return K.cross_entropy_grad(g, logits, labels, reduction)


@primitive(sample=S.loss_grad(S.cross_entropy, S.row_shape), tested_via=cross_entropy)
def cross_entropy_grad_target(g, logits, labels, reduction="mean"):
    """Cotangent of cross_entropy's probability targets: -g * log_softmax. No VJP (defined in nn/second_order.py)."""
    return K.cross_entropy_grad_target(g, logits, labels, reduction)


@primitive(sample=S.nll)
def nll(logp, labels, reduction="mean"):
    """Negative log-likelihood -logp[i, labels[i]] of (N, C) log-probabilities, reduced."""
    return K.nll(logp, labels, reduction)


@vjp(nll)
def _nll_vjp(y, logp, labels, reduction="mean"):
    d[logp] = nll_grad(d[y], logp, labels, reduction)
    t[y] = nll(t[logp], labels, reduction)     # linear in logp


@primitive(sample=S.loss_grad(S.nll, S.row_shape), tested_via=nll)
def nll_grad(g, logp, labels, reduction="mean"):
    """Cotangent of nll's logp (linear in g). No VJP (defined in nn/second_order.py)."""
    return K.nll_grad(g, logp, labels, reduction)


@primitive(sample=S.pair_loss(0.05, 0.95, 0.0, 1.0))
def binary_cross_entropy(probs, target, reduction="mean"):
    """-(t log p + (1 - t) log(1 - p)) with the logs clamped at -100 (PyTorch's rule), reduced."""
    return K.binary_cross_entropy(probs, target, reduction)


@vjp(binary_cross_entropy)
def _bce_vjp(y, probs, target, reduction="mean"):
    d[probs] = binary_cross_entropy_grad(d[y], probs, target, reduction)
    d[target] = binary_cross_entropy_grad_target(d[y], probs, target, reduction)
    t[y] = (unbroadcast(binary_cross_entropy_grad(t[probs], probs, target, reduction), y)
            + unbroadcast(binary_cross_entropy_grad_target(t[target], probs, target, reduction), y))


@primitive(sample=S.loss_grad(S.pair_loss(0.05, 0.95, 0.0, 1.0), S.elem_shape), tested_via=binary_cross_entropy)
def binary_cross_entropy_grad(g, probs, target, reduction="mean"):
    """No VJP (defined in nn/second_order.py)."""
    return K.binary_cross_entropy_grad(g, probs, target, reduction)


@primitive(sample=S.loss_grad(S.pair_loss(0.05, 0.95, 0.0, 1.0), S.elem_shape), tested_via=binary_cross_entropy)
def binary_cross_entropy_grad_target(g, probs, target, reduction="mean"):
    """No VJP (defined in nn/second_order.py)."""
    return K.binary_cross_entropy_grad_target(g, probs, target, reduction)


@primitive(sample=S.pair_loss(-3.0, 3.0, 0.0, 1.0))
def binary_cross_entropy_with_logits(logits, target, reduction="mean"):
    """max(z, 0) - z t + log1p(exp(-|z|)): binary cross-entropy of sigmoid(z), stable, reduced."""
    return K.binary_cross_entropy_with_logits(logits, target, reduction)


@vjp(binary_cross_entropy_with_logits)
def _bcel_vjp(y, logits, target, reduction="mean"):
    d[logits] = binary_cross_entropy_with_logits_grad(d[y], logits, target, reduction)
    d[target] = binary_cross_entropy_with_logits_grad_target(d[y], logits, target, reduction)
    t[y] = (unbroadcast(binary_cross_entropy_with_logits_grad(t[logits], logits, target, reduction), y)
            + unbroadcast(binary_cross_entropy_with_logits_grad_target(t[target], logits, target, reduction), y))


@primitive(sample=S.loss_grad(S.pair_loss(-3.0, 3.0, 0.0, 1.0), S.elem_shape), tested_via=binary_cross_entropy_with_logits)
def binary_cross_entropy_with_logits_grad(g, logits, target, reduction="mean"):
    """g * (sigmoid(z) - t). No VJP (defined in nn/second_order.py)."""
    return K.binary_cross_entropy_with_logits_grad(g, logits, target, reduction)


@primitive(sample=S.loss_grad(S.pair_loss(-3.0, 3.0, 0.0, 1.0), S.elem_shape), tested_via=binary_cross_entropy_with_logits)
def binary_cross_entropy_with_logits_grad_target(g, logits, target, reduction="mean"):
    """-g * z. No VJP (defined in nn/second_order.py)."""
    return K.binary_cross_entropy_with_logits_grad_target(g, logits, target, reduction)
