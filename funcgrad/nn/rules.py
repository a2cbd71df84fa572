"""The neural-network primitives and their derivative rules (everything of funcgrad.nn but losses and layers).

Owns, each declared once with its forward and VJP template side by side (the
kernels are :mod:`funcgrad.kernels.cpu_nn`'s of the same names, the sample
specs :mod:`funcgrad.ops.samples_nn`'s): ``conv2d``, ``max_pool2d``,
``avg_pool2d``, ``softmax``, ``log_softmax``, ``logsumexp``, ``relu``,
``leaky_relu``, ``elu``, ``gelu``, ``sigmoid``, ``softplus``, ``dropout``,
``batch_norm`` (+ ``batch_norm_stats`` for the running statistics),
``layer_norm``, ``embedding``, and the helper primitives their VJPs are made
of (``conv2d_input_grad``, ``channel_sum``, ``relu_grad``, ...).

Conventions: NCHW activations, OIHW conv weights; shapes, axes, strides,
rates and seeds are static (never differentiated). Randomness is explicit:
``dropout(x, rate, seed)`` draws its mask from ``(seed, element index)``, so
the VJP reuses exactly the same mask. Helper primitives that no VJP
differentiates further say "No VJP" and name the primitive that tests them
(``tested_via``).
"""
from __future__ import annotations

import numpy as np

from funcgrad.kernels import cpu_nn as K
from funcgrad.ops import samples_nn as S
from funcgrad.ops.registry import primitive, vjp, d, t

__all__ = [
    "conv2d", "max_pool2d", "avg_pool2d", "softmax", "log_softmax", "logsumexp",
    "relu", "leaky_relu", "elu", "gelu", "sigmoid", "softplus", "dropout",
    "batch_norm", "batch_norm_stats", "layer_norm", "embedding",
]


# --------------------------------------------------------------------------- convolution
@primitive(sample=S.conv2d)
def conv2d(x, w, b=None, stride=1, padding=0, dilation=1):
    """2-D cross-correlation: NCHW ``x``, OIHW ``w``, optional bias ``b`` of shape (O,).

    ``stride``/``padding``/``dilation``: an int or an (h, w) pair; zero padding."""
    return K.conv2d(x, w, b, stride, padding, dilation)


@vjp(conv2d)
def _conv2d_vjp(y, x, w, b=None, stride=1, padding=0, dilation=1):
    # the weight gradient first, while d[y] (just written by the layer above's rule) is warm
    d[w] = conv2d_weight_grad(d[y], x, w.shape, stride, padding, dilation)
    d[b] = channel_sum(d[y])
    d[x] = conv2d_input_grad(d[y], w, x.shape, stride, padding, dilation)
    # bilinear in (x, w), affine in b; b's term rides with w's (both parameters, active together; b=None: none)
    t[y] = conv2d(t[x], w, None, stride, padding, dilation) + conv2d(x, t[w], t[b], stride, padding, dilation)


@primitive(sample=S.conv2d_input_grad)
def conv2d_input_grad(dy, w, x_shape, stride=1, padding=0, dilation=1):
    """Transposed convolution: the cotangent of conv2d's x, shaped ``x_shape``."""
    return K.conv2d_input_grad(dy, w, tuple(x_shape), stride, padding, dilation)


@vjp(conv2d_input_grad)
def _conv2d_input_grad_vjp(r, dy, w, x_shape, stride=1, padding=0, dilation=1):
    d[dy] = conv2d(d[r], w, None, stride, padding, dilation)
    d[w] = conv2d_weight_grad(dy, d[r], w.shape, stride, padding, dilation)
    t[r] = (conv2d_input_grad(t[dy], w, x_shape, stride, padding, dilation)
            + conv2d_input_grad(dy, t[w], x_shape, stride, padding, dilation))


@primitive(sample=S.conv2d_weight_grad)
def conv2d_weight_grad(dy, x, w_shape, stride=1, padding=0, dilation=1):
    """The cotangent of conv2d's w, shaped ``w_shape``."""
    return K.conv2d_weight_grad(dy, x, tuple(w_shape), stride, padding, dilation)


@vjp(conv2d_weight_grad)
def _conv2d_weight_grad_vjp(r, dy, x, w_shape, stride=1, padding=0, dilation=1):
    d[dy] = conv2d(x, d[r], None, stride, padding, dilation)
    d[x] = conv2d_input_grad(dy, d[r], x.shape, stride, padding, dilation)
    t[r] = (conv2d_weight_grad(t[dy], x, w_shape, stride, padding, dilation)
            + conv2d_weight_grad(dy, t[x], w_shape, stride, padding, dilation))


@primitive(sample=S.channel_sum)
def channel_sum(x):
    """Sum over every axis but 1: (N, C, ...) -> (C,) (the bias / beta cotangent)."""
    return K.channel_sum(x)


@vjp(channel_sum)
def _channel_sum_vjp(r, x):
    d[x] = channel_broadcast(d[r], x.shape)
    t[r] = channel_sum(t[x])


@primitive(sample=S.channel_broadcast)
def channel_broadcast(g, shape):
    """(C,) -> ``shape`` with g[c] along axis 1 (adjoint of channel_sum)."""
    return K.channel_broadcast(g, tuple(shape))


@vjp(channel_broadcast)
def _channel_broadcast_vjp(r, g, shape):
    d[g] = channel_sum(d[r])
    t[r] = channel_broadcast(t[g], shape)


# --------------------------------------------------------------------------- pooling
@primitive(sample=S.max_pool2d)
def max_pool2d(x, kernel_size, stride=None, padding=0):
    """Max over windows of NCHW ``x``; ``stride`` defaults to ``kernel_size``; padding counts as -inf."""
    return K.max_pool2d(x, kernel_size, stride, padding)


@vjp(max_pool2d)
def _max_pool2d_vjp(y, x, kernel_size, stride=None, padding=0):
    d[x] = max_pool2d_grad(d[y], x, kernel_size, stride, padding)
    t[y] = max_pool2d_select(t[x], x, kernel_size, stride, padding)     # the tangent at each window's max


@primitive(sample=S.max_pool2d_grad)
def max_pool2d_grad(dy, x, kernel_size, stride=None, padding=0):
    """dy routed to each window's first maximum of x (shaped like x)."""
    return K.max_pool2d_grad(dy, x, kernel_size, stride, padding)


@vjp(max_pool2d_grad)
def _max_pool2d_grad_vjp(r, dy, x, kernel_size, stride=None, padding=0):
    d[dy] = max_pool2d_select(d[r], x, kernel_size, stride, padding)
    d[x] = None                                                        # piecewise constant in x
    t[r] = max_pool2d_grad(t[dy], x, kernel_size, stride, padding)


@primitive(sample=S.max_pool2d_select)
def max_pool2d_select(g, x, kernel_size, stride=None, padding=0):
    """g read at each window's first maximum of x (adjoint of max_pool2d_grad in dy)."""
    return K.max_pool2d_select(g, x, kernel_size, stride, padding)


@vjp(max_pool2d_select)
def _max_pool2d_select_vjp(r, g, x, kernel_size, stride=None, padding=0):
    d[g] = max_pool2d_grad(d[r], x, kernel_size, stride, padding)
    d[x] = None                  # piecewise constant in x
    t[r] = max_pool2d_select(t[g], x, kernel_size, stride, padding)


@primitive(sample=S.avg_pool2d)
def avg_pool2d(x, kernel_size, stride=None, padding=0):
    """Mean over windows of NCHW ``x``; zero padding counts in the divisor (count_include_pad)."""
    return K.avg_pool2d(x, kernel_size, stride, padding)


@vjp(avg_pool2d)
def _avg_pool2d_vjp(y, x, kernel_size, stride=None, padding=0):
    d[x] = avg_pool2d_grad(d[y], x.shape, kernel_size, stride, padding)
    t[y] = avg_pool2d(t[x], kernel_size, stride, padding)


@primitive(sample=S.avg_pool2d_grad)
def avg_pool2d_grad(dy, x_shape, kernel_size, stride=None, padding=0):
    """Adjoint of avg_pool2d (linear), shaped ``x_shape``."""
    return K.avg_pool2d_grad(dy, tuple(x_shape), kernel_size, stride, padding)


@vjp(avg_pool2d_grad)
def _avg_pool2d_grad_vjp(r, dy, x_shape, kernel_size, stride=None, padding=0):
    d[dy] = avg_pool2d(d[r], kernel_size, stride, padding)
    t[r] = avg_pool2d_grad(t[dy], x_shape, kernel_size, stride, padding)


# --------------------------------------------------------------------------- activations
@primitive(sample=S.unary_kink0, elementwise=True)
def relu(x):
    """max(x, 0)."""
    return K.relu(x)


@vjp(relu)
def _relu_vjp(y, x):
    d[x] = relu_grad(d[y], x)
    t[y] = relu_grad(t[x], x)


@primitive(sample=S.grad_kink0, elementwise=True)
def relu_grad(g, x):
    """g where x > 0, else 0."""
    return K.relu_grad(g, x)


@vjp(relu_grad)
def _relu_grad_vjp(r, g, x):
    d[g] = relu_grad(d[r], x)
    d[x] = None                  # piecewise constant in x
    t[r] = relu_grad(t[g], x)


@primitive(sample=S.leaky_relu, elementwise=True)
def leaky_relu(x, negative_slope=0.01):
    """x if x > 0 else negative_slope * x."""
    return K.leaky_relu(x, negative_slope)


@vjp(leaky_relu)
def _leaky_relu_vjp(y, x, negative_slope=0.01):
    d[x] = leaky_relu_grad(d[y], x, negative_slope)
    t[y] = leaky_relu_grad(t[x], x, negative_slope)


@primitive(sample=S.leaky_relu_grad, elementwise=True)
def leaky_relu_grad(g, x, negative_slope=0.01):
    return K.leaky_relu_grad(g, x, negative_slope)


@vjp(leaky_relu_grad)
def _leaky_relu_grad_vjp(r, g, x, negative_slope=0.01):
    d[g] = leaky_relu_grad(d[r], x, negative_slope)
    d[x] = None                  # piecewise constant in x
    t[r] = leaky_relu_grad(t[g], x, negative_slope)


@primitive(sample=S.elu, elementwise=True)
def elu(x, alpha=1.0):
    """x if x > 0 else alpha * (exp(x) - 1)."""
    return K.elu(x, alpha)


@vjp(elu)
def _elu_vjp(y, x, alpha=1.0):
    d[x] = elu_grad(d[y], x, alpha)
    t[y] = elu_grad(t[x], x, alpha)


@primitive(sample=S.elu_grad, elementwise=True)
def elu_grad(g, x, alpha=1.0):
    return K.elu_grad(g, x, alpha)


@vjp(elu_grad)
def _elu_grad_vjp(r, g, x, alpha=1.0):
    # elu_grad(v, x) - relu_grad(v, x) = v * elu''(x): 0 for x > 0, alpha e^x below
    # (no temporaries: a template's temporaries are shared by its VJP and JVP lines)
    d[g] = elu_grad(d[r], x, alpha)
    d[x] = (elu_grad(d[r], x, alpha) - relu_grad(d[r], x)) * g
    t[r] = elu_grad(t[g], x, alpha) + (elu_grad(t[x], x, alpha) - relu_grad(t[x], x)) * g


@primitive(sample=S.unary, elementwise=True)
def gelu(x):
    """x * Phi(x) (exact, erf-based, like PyTorch's default)."""
    return K.gelu(x)


@vjp(gelu)
def _gelu_vjp(y, x):
    d[x] = gelu_grad(d[y], x)
    t[y] = gelu_grad(t[x], x)


@primitive(sample=S.grad_smooth, elementwise=True)
def gelu_grad(g, x):
    return K.gelu_grad(g, x)


@vjp(gelu_grad)
def _gelu_grad_vjp(r, g, x):
    d[g] = gelu_grad(d[r], x)
    d[x] = gelu_grad2(d[r] * g, x)
    t[r] = gelu_grad(t[g], x) + gelu_grad2(t[x] * g, x)


@primitive(sample=S.grad_smooth, elementwise=True, tested_via=gelu)
def gelu_grad2(g, x):
    """g * gelu''(x). No VJP (defined in nn/second_order.py)."""
    return K.gelu_grad2(g, x)


@primitive(sample=S.unary, elementwise=True)
def sigmoid(x):
    """1 / (1 + exp(-x)), stable for large |x|."""
    return K.sigmoid(x)


@vjp(sigmoid)
def _sigmoid_vjp(y, x):
    d[x] = sigmoid_grad(d[y], y)
    t[y] = sigmoid_grad(t[x], y)


@primitive(sample=S.sigmoid_grad, elementwise=True)
def sigmoid_grad(g, y):
    """g * y * (1 - y)."""
    return K.sigmoid_grad(g, y)


@vjp(sigmoid_grad)
def _sigmoid_grad_vjp(r, g, y):
    d[g] = sigmoid_grad(d[r], y)
    d[y] = d[r] * g * (1.0 - 2.0 * y)
    t[r] = sigmoid_grad(t[g], y) + t[y] * g * (1.0 - 2.0 * y)


@primitive(sample=S.unary, elementwise=True)
def softplus(x):
    """log(1 + exp(x)), stable."""
    return K.softplus(x)


@vjp(softplus)
def _softplus_vjp(y, x):
    d[x] = d[y] * sigmoid(x)
    t[y] = t[x] * sigmoid(x)


# --------------------------------------------------------------------------- softmax family
@primitive(sample=S.with_axis)
def softmax(x, axis=-1):
    """exp(x) / sum(exp(x), axis), stable."""
    return K.softmax(x, axis)


@vjp(softmax)
def _softmax_vjp(y, x, axis=-1):
    d[x] = softmax_grad(d[y], y, axis)
    t[y] = softmax_grad(t[x], y, axis)                # J = diag(y) - y y^T: symmetric


@primitive(sample=S.softmax_grad)
def softmax_grad(g, y, axis=-1):
    """y * (g - sum(g * y, axis)) for y = softmax(x, axis)."""
    return K.softmax_grad(g, y, axis)


@vjp(softmax_grad)
def _softmax_grad_vjp(r, g, y, axis=-1):
    d[g] = softmax_grad(d[r], y, axis)           # the softmax Jacobian is symmetric
    d[y] = softmax_grad_y(d[r], g, y, axis)
    t[r] = (softmax_grad(t[g], y, axis) + t[y] * (g - np.sum(g * y, axis=axis, keepdims=True))
            - y * np.sum(g * t[y], axis=axis, keepdims=True))


@primitive(sample=S.softmax_grad_y, tested_via=softmax)
def softmax_grad_y(r, g, y, axis=-1):
    """Cotangent of y in softmax_grad(g, y). No VJP (defined in nn/second_order.py)."""
    return K.softmax_grad_y(r, g, y, axis)


@primitive(sample=S.with_axis)
def log_softmax(x, axis=-1):
    """x - logsumexp(x, axis), stable."""
    return K.log_softmax(x, axis)


@vjp(log_softmax)
def _log_softmax_vjp(y, x, axis=-1):
    d[x] = log_softmax_grad(d[y], y, axis)
    t[y] = t[x] - np.sum(t[x] * np.exp(y), axis=axis, keepdims=True)


@primitive(sample=S.log_softmax_grad, tested_via=log_softmax)
def log_softmax_grad(g, y, axis=-1):
    """g - exp(y) * sum(g, axis). No VJP (defined in nn/second_order.py)."""
    return K.log_softmax_grad(g, y, axis)


@primitive(sample=S.with_axis)
def logsumexp(x, axis=-1):
    """log(sum(exp(x), axis)), stable; ``axis`` (an int) is removed from the shape."""
    return K.logsumexp(x, axis)


@vjp(logsumexp)
def _logsumexp_vjp(y, x, axis=-1):
    d[x] = logsumexp_grad(d[y], x, y, axis)
    t[y] = np.sum(t[x] * softmax(x, axis), axis=axis)


@primitive(sample=S.logsumexp_grad, tested_via=logsumexp)
def logsumexp_grad(g, x, y, axis=-1):
    """g * softmax(x, axis) with g, y broadcast along axis. No VJP (defined in nn/second_order.py)."""
    return K.logsumexp_grad(g, x, y, axis)


# --------------------------------------------------------------------------- dropout, norms, lookup
@primitive(sample=S.dropout)
def dropout(x, rate, seed):
    """Zero each element with probability ``rate`` and scale the rest by 1/(1-rate).

    The mask is a pure function of (seed, element index): the same seed gives
    the same mask everywhere (Python, compiled, and the VJP). rate=0 is the identity."""
    return K.dropout(x, rate, seed)


@vjp(dropout)
def _dropout_vjp(y, x, rate, seed):
    d[x] = dropout(d[y], rate, seed)
    t[y] = dropout(t[x], rate, seed)


@primitive(sample=S.batch_norm)
def batch_norm(x, gamma, beta, running_mean, running_var, train=True, eps=1e-5):
    """Batch normalization over axis 1 of (N, C) or (N, C, H, W) ``x``.

    train=True normalizes with the batch mean and biased variance; train=False
    with ``running_mean``/``running_var``. The running statistics are never
    differentiated; get the new ones with :func:`batch_norm_stats`."""
    return K.batch_norm(x, gamma, beta, running_mean, running_var, train, eps)


@vjp(batch_norm)
def _batch_norm_vjp(y, x, gamma, beta, running_mean, running_var, train=True, eps=1e-5):
    d[x] = batch_norm_grad_input(d[y], x, gamma, running_mean, running_var, train, eps)
    d[gamma] = batch_norm_grad_gamma(d[y], x, running_mean, running_var, train, eps)
    d[beta] = channel_sum(d[y])
    d[running_mean] = None       # running statistics are buffers, never differentiated (as PyTorch's)
    d[running_var] = None
    # the Jacobian in x is symmetric (gamma is per channel, the normalization's projection symmetric);
    # batch_norm is linear in (gamma, beta) together
    t[y] = (batch_norm_grad_input(t[x], x, gamma, running_mean, running_var, train, eps)
            + batch_norm(x, t[gamma], t[beta], running_mean, running_var, train, eps))


@primitive(sample=S.batch_norm_grad_input, tested_via=batch_norm)
def batch_norm_grad_input(dy, x, gamma, running_mean, running_var, train=True, eps=1e-5):
    """Cotangent of batch_norm's x. No VJP (defined in nn/second_order.py)."""
    return K.batch_norm_grad_input(dy, x, gamma, running_mean, running_var, train, eps)


@primitive(sample=S.batch_norm_grad_gamma, tested_via=batch_norm)
def batch_norm_grad_gamma(dy, x, running_mean, running_var, train=True, eps=1e-5):
    """Cotangent of batch_norm's gamma. No VJP (defined in nn/second_order.py)."""
    return K.batch_norm_grad_gamma(dy, x, running_mean, running_var, train, eps)


@primitive(sample=S.batch_norm_stats, tested_via=batch_norm)
def batch_norm_stats(x, running_mean, running_var, momentum=0.1):
    """New running statistics after a training batch, stacked (2, C): ``[mean, var]``.

    ``new = (1 - momentum) * running + momentum * batch`` with the unbiased
    batch variance (PyTorch's rule). Running statistics are state, not a
    differentiable output (as PyTorch's buffers): no cotangent flows through
    them, so they can be computed inside a differentiated function and returned
    as auxiliary data (``has_aux=True``)."""
    return K.batch_norm_stats(x, running_mean, running_var, momentum)


@vjp(batch_norm_stats)
def _batch_norm_stats_vjp(y, x, running_mean, running_var, momentum=0.1):
    """No cotangent: running statistics are buffers."""


@primitive(sample=S.layer_norm)
def layer_norm(x, gamma, beta, eps=1e-5):
    """Normalize over the last axis, then scale by gamma and shift by beta (both of shape (D,))."""
    return K.layer_norm(x, gamma, beta, eps)


@vjp(layer_norm)
def _layer_norm_vjp(y, x, gamma, beta, eps=1e-5):
    d[x] = layer_norm_grad_input(d[y], x, gamma, eps)
    d[gamma] = layer_norm_grad_gamma(d[y], x, eps)
    d[beta] = layer_norm_grad_beta(d[y])
    # J_x v = gamma * P(v) / sigma, and layer_norm_grad_input(v, x, ones) = P(v) / sigma (P symmetric);
    # layer_norm is linear in (gamma, beta) together
    t[y] = gamma * layer_norm_grad_input(t[x], x, np.ones_like(gamma), eps) + layer_norm(x, t[gamma], t[beta], eps)


@primitive(sample=S.layer_norm_grad_input, tested_via=layer_norm)
def layer_norm_grad_input(dy, x, gamma, eps=1e-5):
    """Cotangent of layer_norm's x. No VJP (defined in nn/second_order.py)."""
    return K.layer_norm_grad_input(dy, x, gamma, eps)


@primitive(sample=S.layer_norm_grad_gamma, tested_via=layer_norm)
def layer_norm_grad_gamma(dy, x, eps=1e-5):
    """Cotangent of layer_norm's gamma. No VJP (defined in nn/second_order.py)."""
    return K.layer_norm_grad_gamma(dy, x, eps)


@primitive(sample=S.row_sums, tested_via=layer_norm)
def layer_norm_grad_beta(dy):
    """Sum over every axis but the last. No VJP (defined in nn/second_order.py)."""
    return K.layer_norm_grad_beta(dy)


@primitive(sample=S.embedding)
def embedding(table, ids):
    """``table[ids]``: (V, D) table, integer ids of any shape -> ids.shape + (D,)."""
    return K.embedding(table, ids)


@vjp(embedding)
def _embedding_vjp(y, table, ids):
    d[table] = embedding_grad(d[y], ids, table.shape)
    t[y] = embedding(t[table], ids)


@primitive(sample=S.embedding_grad)
def embedding_grad(dy, ids, table_shape):
    """Scatter-add of dy's rows at ids into a zero table of ``table_shape``."""
    return K.embedding_grad(dy, ids, tuple(table_shape))


@vjp(embedding_grad)
def _embedding_grad_vjp(r, dy, ids, table_shape):
    d[dy] = embedding(d[r], ids)
    t[r] = embedding_grad(t[dy], ids, table_shape)
