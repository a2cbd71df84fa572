"""funcgrad.nn: neural-network primitives, losses and stax-style layer combinators.

This package only re-exports; each concept lives in its own module:

* :mod:`.rules`: the primitives with their VJP templates (``conv2d``, pools,
  activations, the softmax family, ``dropout``, norms, ``embedding``);
* :mod:`.losses`: the losses, each one fused primitive (``mse``, ``huber``,
  ``cross_entropy``, ``nll``, ``binary_cross_entropy[_with_logits]``);
* :mod:`.layers`: ``serial`` and the layers (``Dense``, ``Conv2D``, ...), each
  a pair ``(init_fn, apply_fn)`` whose apply_fn is source the transformer reads.

Importing this package registers its primitives (``import funcgrad``
imports it). The kernels are :mod:`funcgrad.kernels.cpu_nn`; the sample specs
of the registry-driven test are :mod:`funcgrad.ops.samples_nn`.

Conventions: NCHW activations, OIHW conv weights, class axis last for the
losses; integer labels, shapes, axes, strides, rates, seeds, ``train`` and
``reduction`` are static (never differentiated). Randomness is explicit.
"""
from funcgrad import initializers
from .rules import (conv2d, max_pool2d, avg_pool2d, softmax, log_softmax, logsumexp, relu, leaky_relu,
                    elu, gelu, sigmoid, softplus, dropout, batch_norm, batch_norm_stats, layer_norm,
                    embedding)
from .losses import mse, huber, cross_entropy, nll, binary_cross_entropy, binary_cross_entropy_with_logits
from . import second_order  # noqa: F401,E402  (the gradient kernels defined over primitives: second order)
from .layers import serial, Dense, Conv2D, MaxPool2D, AvgPool2D, Flatten, Relu, Tanh, Dropout, BatchNorm
# the helper primitives the VJPs are made of: internal, reachable here as they always were
from .rules import (conv2d_input_grad, conv2d_weight_grad, channel_sum, channel_broadcast,  # noqa: F401
                    max_pool2d_grad, max_pool2d_select, avg_pool2d_grad, relu_grad, leaky_relu_grad,
                    elu_grad, gelu_grad, gelu_grad2, sigmoid_grad, softmax_grad, softmax_grad_y,
                    log_softmax_grad, logsumexp_grad, batch_norm_grad_input, batch_norm_grad_gamma,
                    layer_norm_grad_input, layer_norm_grad_gamma, layer_norm_grad_beta, embedding_grad)
from .losses import (mse_grad, huber_grad, cross_entropy_grad, cross_entropy_grad_target,  # noqa: F401
                     nll_grad, binary_cross_entropy_grad, binary_cross_entropy_grad_target,
                     binary_cross_entropy_with_logits_grad, binary_cross_entropy_with_logits_grad_target)

__all__ = [
    # primitives
    "conv2d", "max_pool2d", "avg_pool2d", "softmax", "log_softmax", "logsumexp",
    "relu", "leaky_relu", "elu", "gelu", "sigmoid", "softplus", "dropout",
    "batch_norm", "batch_norm_stats", "layer_norm", "embedding",
    # losses
    "mse", "huber", "cross_entropy", "nll", "binary_cross_entropy", "binary_cross_entropy_with_logits",
    # layers
    "serial", "Dense", "Conv2D", "MaxPool2D", "AvgPool2D", "Flatten", "Relu", "Tanh", "Dropout",
    "BatchNorm", "initializers",
]
