"""The transforms optimizers are made of: small ``(init, update)`` pairs over whole trees.

Owns :func:`scale`, :func:`scale_by_learning_rate`, :func:`add_decayed_weights`
and the directions and momentum of PyTorch's optimizers, each one
transformation: :func:`trace` (SGD's momentum buffer, with dampening and
Nesterov), :func:`scale_by_adam` (Adam's bias-corrected moments),
:func:`scale_by_rms` (RMSprop's running mean square, optionally centered) and
:func:`scale_by_rss` (Adagrad's running sum of squares). :mod:`.alias`
chains them into ``sgd``, ``adam``, ... .

Every transform maps whole trees (``tree_map``), keeps its state arrays in the
parameters' dtype (gradients are cast to it), returns new arrays and never
modifies its inputs. Those with a state check the grads against it and name
the key path of a mismatch.
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from funcgrad.tree import assert_same_structure, tree_flatten, tree_map, tree_unflatten
from ._checks import (DK, ScalarOrSchedule, as_schedule, cast, check_grads, check_hparam, dev_leaf, float_dtype,
                      fresh, need_params, on_device, zeros_like_params)
from .base import EmptyState, GradientTransformation

__all__ = ["scale", "scale_by_learning_rate", "add_decayed_weights", "trace", "scale_by_adam", "scale_by_rms",
           "scale_by_rss", "ScaleByScheduleState", "TraceState", "ScaleByAdamState", "ScaleByRmsState",
           "ScaleByRssState"]


class ScaleByScheduleState(NamedTuple):
    count: int


class TraceState(NamedTuple):
    count: int
    momentum: Any  # pytree like params


class ScaleByAdamState(NamedTuple):
    count: int
    mu: Any
    nu: Any
    nu_max: Any  # pytree like params when amsgrad, else None


class ScaleByRmsState(NamedTuple):
    square_avg: Any
    grad_avg: Any  # pytree like params when centered, else None


class ScaleByRssState(NamedTuple):
    sum: Any


def scale(step_size: float) -> GradientTransformation:
    """Multiply the updates by a constant (``scale(-lr)`` after a direction transform)."""
    if isinstance(step_size, (bool, np.bool_)) or not isinstance(step_size, (int, float, np.number)):
        raise TypeError(f"scale: step_size must be a number, received {step_size!r}")
    f = float(step_size)

    def update(grads, state, params=None):
        return tree_map(lambda g: _dev_mul(g, f) if on_device(g) else fresh(np.multiply, g, f,
                                                                              float_dtype(np.asarray(g))), grads), state
    return GradientTransformation(lambda params: EmptyState(), update)


def scale_by_learning_rate(lr: ScalarOrSchedule) -> GradientTransformation:
    """Multiply the updates by ``-lr(step)``; the state counts the steps."""
    sched = as_schedule(lr, "scale_by_learning_rate")

    def update(grads, state, params=None):
        f = -sched(state.count)
        u = tree_map(lambda g: _dev_mul(g, f) if on_device(g) else fresh(np.multiply, g, f,
                                                                         float_dtype(np.asarray(g))), grads)
        return u, ScaleByScheduleState(state.count + 1)
    return GradientTransformation(lambda params: ScaleByScheduleState(0), update)


def _dev_mul(g, f):
    K = DK()
    g = K.as_device(g)
    return K.materialize(K.multiply(g, g.dtype.type(f) if g.dtype.kind == "f" else f))


def add_decayed_weights(weight_decay: float = 0.0, mask=None) -> GradientTransformation:
    """``updates + weight_decay * params`` (L2 when placed before the optimizer's direction).

    ``mask``: optional pytree of bools like the params (or callable ``params -> mask``);
    leaves with ``False`` are not decayed (biases, norms).
    """
    check_hparam("weight_decay", weight_decay, opt="add_decayed_weights")
    wd = float(weight_decay)

    def update(grads, state, params=None):
        need_params(params, "add_decayed_weights", "weight decay")
        g, gtd = check_grads(grads, params, "add_decayed_weights")
        p = tree_flatten(params)[0]
        if mask is None:
            m = [True] * len(g)
        else:
            mt = mask(params) if callable(mask) else mask
            m, mtd = tree_flatten(mt)
            if mtd != gtd:
                assert_same_structure(mt, params, root="mask")
        out = []
        for gi, pi, mi in zip(g, p, m):
            if mi and wd != 0.0 and on_device(pi):
                K = DK()
                out.append(K.materialize(K.add(K.multiply(K.as_device(pi), wd), dev_leaf(gi, pi))))
            elif mi and wd != 0.0:
                pa = np.asarray(pi)
                o = fresh(np.multiply, pa, wd)
                np.add(o, gi, out=o, casting="same_kind")
                out.append(o)
            else:
                out.append(gi)
        return tree_unflatten(gtd, out), state
    return GradientTransformation(lambda params: EmptyState(), update)


# --------------------------------------------------------------------------- stateful links
# Each link maps whole trees with one step per leaf that returns the leaf's new state and
# output together, so the temporaries of one leaf are shared (a fresh array of a big leaf
# costs its page faults), as PyTorch's per-parameter step does.

def _tree_map_n(step, tree, *rest):
    """``tree_map`` for a ``step`` returning a tuple: the tuple of trees, one per output.
    ``rest`` are trees with the structure of ``tree`` (checked by the caller)."""
    leaves, td = tree_flatten(tree)
    others = [tree_flatten(r)[0] for r in rest]
    columns = zip(*(step(*xs) for xs in zip(leaves, *others)))
    return tuple(tree_unflatten(td, list(c)) for c in columns)


def _ema(avg, g, decay, tmp):
    """``decay * avg + (1 - decay) * g`` into a new array (``tmp``: scratch like avg)."""
    out = fresh(np.multiply, avg, decay)
    np.multiply(g, 1.0 - decay, out=tmp)
    out += tmp
    return out


def _ema_sq(avg, g, decay, tmp):
    """``decay * avg + (1 - decay) * g * g`` into a new array (``tmp``: scratch like avg)."""
    out = fresh(np.multiply, avg, decay)
    np.multiply(g, g, out=tmp)
    tmp *= 1.0 - decay
    out += tmp
    return out


def trace(decay: float, dampening: float = 0.0, nesterov: bool = False) -> GradientTransformation:
    """Momentum, PyTorch's rule: the buffer is the update itself on the first step, then
    ``buf = decay * buf + (1 - dampening) * g``; the output is ``g + decay * buf`` (Nesterov)
    or ``buf`` (the same arrays as the new state's)."""
    opt = "trace"
    check_hparam("decay", decay, opt=opt)
    check_hparam("dampening", dampening, opt=opt)
    if nesterov and (decay <= 0 or dampening != 0):
        raise ValueError(f"{opt}: nesterov momentum requires decay > 0 and dampening = 0 (as in PyTorch)")
    decay, damp = float(decay), float(dampening)

    def init(params):
        return TraceState(0, zeros_like_params(params, opt))

    def update(grads, state, params=None):
        check_grads(grads, state.momentum, opt, "the momentum state")
        first = state.count == 0

        def step(buf, g):
            if on_device(buf):
                K = DK()
                g = dev_leaf(g, buf)
                new = K.materialize(K.add(g, 0.0) if first else
                                    K.add(K.multiply(buf, decay), K.multiply(g, 1.0 - damp) if damp else g))
                return new, (K.materialize(K.add(K.multiply(new, decay), g)) if nesterov else new)
            g = cast(np.asarray(g), buf.dtype)
            if first:
                new = np.array(g, dtype=buf.dtype, copy=True)
            else:
                new = fresh(np.multiply, buf, decay)
                if damp != 0.0:
                    new += (1.0 - damp) * g
                else:
                    new += g
            if not nesterov:
                return new, new
            out = fresh(np.multiply, new, decay)
            out += g
            return new, out

        momentum, updates = _tree_map_n(step, state.momentum, grads)
        return updates, TraceState(state.count + 1, momentum)

    return GradientTransformation(init, update)


def scale_by_adam(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
                  amsgrad: bool = False) -> GradientTransformation:
    """Adam's direction, PyTorch's rule: ``m = b1*m + (1-b1)*g``, ``v = b2*v + (1-b2)*g^2``
    (``v_max = max(v_max, v)`` with amsgrad), output ``m / (sqrt(v)/sqrt(1-b2^t) + eps) / (1-b1^t)``."""
    opt = "scale_by_adam"
    check_hparam("b1", b1, high=1.0, high_open=True, opt=opt)
    check_hparam("b2", b2, high=1.0, high_open=True, opt=opt)
    check_hparam("eps", eps, opt=opt)
    b1, b2, eps = float(b1), float(b2), float(eps)

    def init(params):
        return ScaleByAdamState(0, zeros_like_params(params, opt), zeros_like_params(params, opt),
                                zeros_like_params(params, opt) if amsgrad else None)

    def update(grads, state, params=None):
        check_grads(grads, state.mu, opt, "the optimizer state")
        count = state.count + 1
        bc1 = 1.0 - b1 ** count
        bc2_sqrt = math.sqrt(1.0 - b2 ** count)

        def step(m, v, g, v_max=None):
            if on_device(m):
                K = DK()
                g = dev_leaf(g, m)
                m = K.materialize(K.add(K.multiply(m, b1), K.multiply(g, 1.0 - b1)))
                v = K.materialize(K.add(K.multiply(v, b2), K.multiply(K.multiply(g, g), 1.0 - b2)))
                if v_max is not None:
                    v_max = K.materialize(K.maximum(v_max, v))
                den = K.add(K.divide(K.sqrt(v if v_max is None else v_max), bc2_sqrt), eps)
                return m, v, v_max, K.materialize(K.divide(K.divide(m, den), bc1))
            g = cast(np.asarray(g), m.dtype)
            tmp = np.empty_like(m)
            m = _ema(m, g, b1, tmp)
            v = _ema_sq(v, g, b2, tmp)
            if v_max is not None:
                v_max = fresh(np.maximum, v_max, v)
            np.sqrt(v if v_max is None else v_max, out=tmp)
            tmp /= bc2_sqrt
            tmp += eps
            out = fresh(np.divide, m, tmp)
            out /= bc1
            return m, v, v_max, out

        if amsgrad:
            mu, nu, nu_max, updates = _tree_map_n(step, state.mu, state.nu, grads, state.nu_max)
        else:
            mu, nu, _, updates = _tree_map_n(step, state.mu, state.nu, grads)
            nu_max = None
        return updates, ScaleByAdamState(count, mu, nu, nu_max)

    return GradientTransformation(init, update)


def scale_by_rms(decay: float = 0.99, eps: float = 1e-8, centered: bool = False) -> GradientTransformation:
    """RMSprop's direction, PyTorch's rule: ``s = decay*s + (1-decay)*g^2``; centered also keeps
    ``a = decay*a + (1-decay)*g`` and uses ``s - a^2``; output ``g / (sqrt(s) + eps)``."""
    opt = "scale_by_rms"
    check_hparam("decay", decay, high=1.0, opt=opt)
    check_hparam("eps", eps, opt=opt)
    decay, eps = float(decay), float(eps)

    def init(params):
        return ScaleByRmsState(zeros_like_params(params, opt),
                               zeros_like_params(params, opt) if centered else None)

    def update(grads, state, params=None):
        check_grads(grads, state.square_avg, opt, "the optimizer state")

        def step(s, g, a=None):
            if on_device(s):
                K = DK()
                g = dev_leaf(g, s)
                s = K.materialize(K.add(K.multiply(s, decay), K.multiply(K.multiply(g, g), 1.0 - decay)))
                var = s
                if a is not None:
                    a = K.materialize(K.add(K.multiply(a, decay), K.multiply(g, 1.0 - decay)))
                    var = K.subtract(s, K.multiply(a, a))
                return s, a, K.materialize(K.divide(g, K.add(K.sqrt(var), eps)))
            g = cast(np.asarray(g), s.dtype)
            out = np.empty_like(s)
            s = _ema_sq(s, g, decay, out)
            if a is None:
                np.sqrt(s, out=out)
            else:
                a = _ema(a, g, decay, out)
                np.multiply(a, a, out=out)
                np.subtract(s, out, out=out)
                np.sqrt(out, out=out)
            out += eps
            np.divide(g, out, out=out)
            return s, a, out

        if centered:
            square_avg, grad_avg, updates = _tree_map_n(step, state.square_avg, grads, state.grad_avg)
        else:
            square_avg, _, updates = _tree_map_n(step, state.square_avg, grads)
            grad_avg = None
        return updates, ScaleByRmsState(square_avg, grad_avg)

    return GradientTransformation(init, update)


def scale_by_rss(initial_accumulator_value: float = 0.0, eps: float = 1e-10) -> GradientTransformation:
    """Adagrad's direction, PyTorch's rule: ``sum += g^2`` (from ``initial_accumulator_value``),
    output ``g / (sqrt(sum) + eps)``."""
    opt = "scale_by_rss"
    check_hparam("initial_accumulator_value", initial_accumulator_value, opt=opt)
    check_hparam("eps", eps, opt=opt)
    eps = float(eps)

    def init(params):
        return ScaleByRssState(zeros_like_params(params, opt, float(initial_accumulator_value)))

    def update(grads, state, params=None):
        check_grads(grads, state.sum, opt, "the optimizer state")

        def step(s, g):
            if on_device(s):
                K = DK()
                g = dev_leaf(g, s)
                s = K.materialize(K.add(s, K.multiply(g, g)))
                return s, K.materialize(K.divide(g, K.add(K.sqrt(s), eps)))
            g = cast(np.asarray(g), s.dtype)
            out = fresh(np.multiply, g, g)
            s = fresh(np.add, s, out)
            np.sqrt(s, out=out)
            out += eps
            np.divide(g, out, out=out)
            return s, out

        sums, updates = _tree_map_n(step, state.sum, grads)
        return updates, ScaleByRssState(sums)

    return GradientTransformation(init, update)
