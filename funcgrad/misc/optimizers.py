"""autograd's optimizers (``autograd.misc.optimizers``): ``sgd``, ``rmsprop``, ``adam``.

Each is ``opt(grad, x0, callback=None, num_iters=..., step_size=..., ...)`` with autograd's signature,
defaults and arithmetic, operation for operation, so code written for autograd trains the same:

* ``grad(x, i)`` returns the gradient at ``x`` (a pytree: nested tuples, lists, dicts of arrays) on
  iteration ``i``;
* ``callback(x, i, g)``, when given, is called before each update with ``x`` and ``g`` in ``x0``'s
  structure;
* the updates run on the flat vector of :func:`funcgrad.misc.flatten` (one float vector), and the result
  comes back in ``x0``'s structure (leaves as arrays, as autograd's ``unflatten`` gives them).

These run outside any transform, as plain NumPy. :mod:`funcgrad.optim` has optax-style optimizers with
PyTorch's update rules for new code; these keep autograd's (autograd's rmsprop starts its average of
squares at ones, its sgd scales the gradient by ``1 - mass``).
"""
from __future__ import annotations

import functools

import numpy as np

from .flatten import flatten

__all__ = ["sgd", "rmsprop", "adam", "unflatten_optimizer"]


def unflatten_optimizer(optimize):
    """An optimizer of flat 1-D vectors as one of pytrees (autograd's decorator of the same name)."""

    @functools.wraps(optimize)
    def _optimize(grad, x0, callback=None, *args, **kwargs):
        _x0, unflatten = flatten(x0)
        _grad = lambda x, i: flatten(grad(unflatten(x), i))[0]  # noqa: E731
        if callback:
            _callback = lambda x, i, g: callback(unflatten(x), i, unflatten(g))  # noqa: E731
        else:
            _callback = None
        return unflatten(optimize(_grad, _x0, _callback, *args, **kwargs))

    return _optimize


@unflatten_optimizer
def sgd(grad, x, callback=None, num_iters=200, step_size=0.1, mass=0.9):
    """Stochastic gradient descent with momentum; ``grad(x, i)`` is the gradient on iteration ``i``."""
    velocity = np.zeros(len(x))
    for i in range(num_iters):
        g = grad(x, i)
        if callback:
            callback(x, i, g)
        velocity = mass * velocity - (1.0 - mass) * g
        x = x + step_size * velocity
    return x


@unflatten_optimizer
def rmsprop(grad, x, callback=None, num_iters=100, step_size=0.1, gamma=0.9, eps=10**-8):
    """Root mean squared prop (the running average of squared gradients starts at ones)."""
    avg_sq_grad = np.ones(len(x))
    for i in range(num_iters):
        g = grad(x, i)
        if callback:
            callback(x, i, g)
        avg_sq_grad = avg_sq_grad * gamma + g**2 * (1 - gamma)
        x = x - step_size * g / (np.sqrt(avg_sq_grad) + eps)
    return x


@unflatten_optimizer
def adam(grad, x, callback=None, num_iters=100, step_size=0.001, b1=0.9, b2=0.999, eps=10**-8):
    """Adam (Kingma and Ba, arXiv:1412.6980), with bias-corrected moment estimates."""
    m = np.zeros(len(x))
    v = np.zeros(len(x))
    for i in range(num_iters):
        g = grad(x, i)
        if callback:
            callback(x, i, g)
        m = (1 - b1) * g + b1 * m  # first moment estimate
        v = (1 - b2) * (g**2) + b2 * v  # second moment estimate
        mhat = m / (1 - b1 ** (i + 1))  # bias correction
        vhat = v / (1 - b2 ** (i + 1))
        x = x - step_size * mhat / (np.sqrt(vhat) + eps)
    return x
