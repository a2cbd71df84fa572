"""The optimizers: PyTorch's update rules, each a short chain of transforms.

Owns :func:`sgd`, :func:`adam`, :func:`adamw`, :func:`rmsprop` and
:func:`adagrad` and their states. Each is ``chain``-ed from the transforms
of :mod:`.transform`, in PyTorch's order::

    sgd      add_decayed_weights -> trace                    -> scale_by_learning_rate
    adam     add_decayed_weights -> scale_by_adam            -> scale_by_learning_rate
    adamw                           scale_by_adam -> add_decayed_weights -> scale_by_learning_rate
    rmsprop  add_decayed_weights -> scale_by_rms -> trace    -> scale_by_learning_rate
    adagrad  add_decayed_weights -> scale_by_rss             -> scale_by_learning_rate

(a link a hyperparameter turns off, ``weight_decay=0`` or ``momentum=0``, is left out).

Guarantees:

* ``apply_updates(params, updates)`` gives what the PyTorch optimizer of the
  same name gives (``torch.optim.SGD``, ``Adam``, ``AdamW``, ``RMSprop``,
  ``Adagrad``, non-foreach semantics), up to floating-point rounding;
* the state is ONE NamedTuple per optimizer (``AdamState(count, mu, nu,
  nu_max)``, ...), whatever the chain: the links' states are merged by field
  name (see :func:`_optimizer`), so checkpoints and
  ``funcgrad.dist.DataParallel`` see the trees they always saw;
* grads are checked against the params (or the state) under the optimizer's
  own name and cast to the parameters' dtype before the links run, and every
  ``update`` is marked ``elementwise`` (see :mod:`.base`).
"""
from __future__ import annotations

from typing import Any, NamedTuple

from funcgrad.tree import tree_flatten, tree_unflatten
from ._checks import (ScalarOrSchedule, as_schedule, cast, check_grads, check_hparam, flat_leaves, float_dtype,
                      need_params)
from .base import EmptyState, GradientTransformation
from .combine import chain
from .transform import (ScaleByAdamState, ScaleByRmsState, ScaleByRssState, ScaleByScheduleState, TraceState,
                        add_decayed_weights, scale_by_adam, scale_by_learning_rate, scale_by_rms, scale_by_rss,
                        trace)

__all__ = ["sgd", "adam", "adamw", "rmsprop", "adagrad", "SGDState", "AdamState", "RMSPropState", "AdagradState"]


class SGDState(NamedTuple):
    count: int
    momentum: Any  # pytree like params, or None when momentum == 0


class AdamState(NamedTuple):
    count: int
    mu: Any
    nu: Any
    nu_max: Any  # pytree like params when amsgrad, else None


class RMSPropState(NamedTuple):
    count: int
    square_avg: Any
    grad_avg: Any  # pytree like params when centered, else None
    momentum: Any  # pytree like params when momentum > 0, else None


class AdagradState(NamedTuple):
    count: int
    sum: Any


def _optimizer(name: str, state_cls, links, *, like: str, like_name: str, weight_decay: float):
    """``chain`` of ``links`` presented as the optimizer ``name``, whose state is one ``state_cls``.

    ``links`` are ``(transform, the NamedTuple type of its state)`` pairs, ``None`` for a link
    a hyperparameter turns off. Their states are merged into ``state_cls`` field by field (a
    field several links keep, the step ``count``, is stored once: they advance together; a
    field no link keeps is None) and split again for each update. ``like`` names the state
    field shaped like the params: without ``params``, grads are checked against it, and its
    dtypes are the ones grads are cast to."""
    links = [link for link in links if link is not None]
    inner = chain(*(t for t, _ in links))
    kinds = [k for _, k in links]

    def merge(states):
        fields = {}
        for s in states:
            fields.update(zip(s._fields, s))
        return state_cls(*(fields.get(f) for f in state_cls._fields))

    def split(state):
        return tuple(k(*(getattr(state, f) for f in k._fields)) for k in kinds)

    def init(params):
        return merge(inner.init(params))

    def update(grads, state, params=None):
        if weight_decay != 0.0:
            need_params(params, name, "weight_decay")
        ref = getattr(state, like)
        if params is not None:
            g, gtd = check_grads(grads, params, name)
        elif ref is not None:
            g, gtd = check_grads(grads, ref, name, like_name)
        else:
            g, gtd = flat_leaves(grads, name, "grads")
        if ref is not None:
            dtypes = [a.dtype for a in tree_flatten(ref)[0]]
        elif params is not None:
            dtypes = [float_dtype(a) for a in flat_leaves(params, name)[0]]
        else:
            dtypes = [float_dtype(a) for a in g]
        if any(a.dtype != dt for a, dt in zip(g, dtypes)):
            grads = tree_unflatten(gtd, [cast(a, dt) for a, dt in zip(g, dtypes)])
        updates, states = inner.update(grads, split(state), params)
        return updates, merge(states)

    update.elementwise = True   # every link treats each element on its own (see .base)
    return GradientTransformation(init, update)


def _learning_rate(lr: ScalarOrSchedule, name: str, decay: float = 0.0):
    """scale_by_learning_rate for ``lr``, checked under the optimizer's name; with ``decay``,
    PyTorch Adagrad's ``lr / (1 + step * decay)``."""
    sched = as_schedule(lr, name)
    if decay != 0.0:
        return scale_by_learning_rate(lambda step: sched(step) / (1.0 + step * decay)), ScaleByScheduleState
    return scale_by_learning_rate(sched if callable(lr) else float(lr)), ScaleByScheduleState


def _weight_decay(wd: float):
    return (add_decayed_weights(wd), EmptyState) if wd != 0.0 else None


def sgd(lr: ScalarOrSchedule = 1e-3, momentum: float = 0.0, nesterov: bool = False,
        dampening: float = 0.0, weight_decay: float = 0.0) -> GradientTransformation:
    """``torch.optim.SGD``: ``d = g + wd*p``; ``buf = d`` on the first step, else
    ``buf = momentum*buf + (1-dampening)*d``; ``d = d + momentum*buf`` (nesterov) or ``buf``;
    update ``-lr * d``."""
    opt = "sgd"
    lr_link = _learning_rate(lr, opt)
    check_hparam("momentum", momentum, opt=opt)
    check_hparam("dampening", dampening, opt=opt)
    check_hparam("weight_decay", weight_decay, opt=opt)
    if nesterov and (momentum <= 0 or dampening != 0):
        raise ValueError("sgd: nesterov momentum requires momentum > 0 and dampening = 0 (as in PyTorch)")
    mom, wd = float(momentum), float(weight_decay)
    return _optimizer(opt, SGDState, [
        _weight_decay(wd),
        (trace(mom, dampening, nesterov), TraceState) if mom != 0.0 else None,
        lr_link,
    ], like="momentum", like_name="the momentum state", weight_decay=wd)


def _adam_like(opt, lr, b1, b2, eps, weight_decay, decoupled, amsgrad):
    lr_link = _learning_rate(lr, opt)
    check_hparam("b1", b1, high=1.0, high_open=True, opt=opt)
    check_hparam("b2", b2, high=1.0, high_open=True, opt=opt)
    check_hparam("eps", eps, opt=opt)
    check_hparam("weight_decay", weight_decay, opt=opt)
    wd = float(weight_decay)
    return _optimizer(opt, AdamState, [
        None if decoupled else _weight_decay(wd),
        (scale_by_adam(b1, b2, eps, amsgrad), ScaleByAdamState),
        _weight_decay(wd) if decoupled else None,
        lr_link,
    ], like="mu", like_name="the optimizer state", weight_decay=wd)


def adam(lr: ScalarOrSchedule = 1e-3, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
         weight_decay: float = 0.0, amsgrad: bool = False) -> GradientTransformation:
    """``torch.optim.Adam``: L2 weight decay added to the gradient; bias-corrected moments;
    update ``-lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)``."""
    return _adam_like("adam", lr, b1, b2, eps, weight_decay, decoupled=False, amsgrad=amsgrad)


def adamw(lr: ScalarOrSchedule = 1e-3, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
          weight_decay: float = 1e-2, amsgrad: bool = False) -> GradientTransformation:
    """``torch.optim.AdamW``: decoupled weight decay ``p -= lr*wd*p`` plus the Adam step."""
    return _adam_like("adamw", lr, b1, b2, eps, weight_decay, decoupled=True, amsgrad=amsgrad)


def rmsprop(lr: ScalarOrSchedule = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0.0,
            momentum: float = 0.0, centered: bool = False) -> GradientTransformation:
    """``torch.optim.RMSprop``: ``s = alpha*s + (1-alpha)*g^2``; centered subtracts the squared mean
    gradient; ``avg = sqrt(s') + eps``; with momentum ``buf = momentum*buf + g/avg``, update ``-lr*buf``."""
    opt = "rmsprop"
    lr_link = _learning_rate(lr, opt)
    check_hparam("alpha", alpha, high=1.0, opt=opt)
    check_hparam("eps", eps, opt=opt)
    check_hparam("weight_decay", weight_decay, opt=opt)
    check_hparam("momentum", momentum, opt=opt)
    mom, wd = float(momentum), float(weight_decay)
    return _optimizer(opt, RMSPropState, [
        _weight_decay(wd),
        (scale_by_rms(alpha, eps, centered), ScaleByRmsState),
        (trace(mom), TraceState) if mom > 0 else None,
        lr_link,
    ], like="square_avg", like_name="the optimizer state", weight_decay=wd)


def adagrad(lr: ScalarOrSchedule = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
            initial_accumulator_value: float = 0.0, eps: float = 1e-10) -> GradientTransformation:
    """``torch.optim.Adagrad``: ``clr = lr / (1 + (t-1)*lr_decay)``; ``sum += g^2``;
    update ``-clr * g / (sqrt(sum) + eps)``."""
    opt = "adagrad"
    check_hparam("lr", lr, opt=opt)
    check_hparam("lr_decay", lr_decay, opt=opt)
    lr_link = _learning_rate(lr, opt, float(lr_decay))
    check_hparam("weight_decay", weight_decay, opt=opt)
    check_hparam("initial_accumulator_value", initial_accumulator_value, opt=opt)
    check_hparam("eps", eps, opt=opt)
    wd = float(weight_decay)
    return _optimizer(opt, AdagradState, [
        _weight_decay(wd),
        (scale_by_rss(initial_accumulator_value, eps), ScaleByRssState),
        lr_link,
    ], like="sum", like_name="the optimizer state", weight_decay=wd)
