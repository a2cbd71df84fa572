"""Optimizers as optax-style pure pairs of functions, with PyTorch update rules.

Owns :class:`GradientTransformation` ``(init, update)``, its composition
(:func:`chain`, :func:`multi_transform`), the optimizers (:func:`sgd`,
:func:`adam`, :func:`adamw`, :func:`rmsprop`, :func:`adagrad`), the gradient
transforms (:func:`clip_by_global_norm`, :func:`scale`,
:func:`scale_by_learning_rate`, :func:`add_decayed_weights`), learning-rate
schedules (callables ``step -> lr``) and :func:`apply_updates`.

Guarantees:

* ``init(params) -> state`` and ``update(grads, state, params=None) ->
  (updates, new_state)`` never modify their inputs; ``state`` is a pytree of
  NamedTuples, ints and arrays (it checkpoints with :mod:`funcgrad.checkpoint`).
* Each optimizer reproduces the update rule of the PyTorch optimizer of the
  same name (``torch.optim.SGD``, ``Adam``, ``AdamW``, ``RMSprop``,
  ``Adagrad``, non-foreach semantics): ``apply_updates(params, updates)``
  gives what ``optimizer.step()`` gives, up to floating-point rounding.
* Every ``lr`` accepts a float or a schedule; the schedule is called with the
  number of updates already applied (0 on the first update), the way a
  PyTorch LR scheduler stepped once per ``optimizer.step()`` behaves.
* Updates keep each parameter's dtype (float32 params stay float32).
* A grads tree whose structure or leaf shapes differ from the params raises
  :class:`funcgrad.errors.TreeStructureError` naming the key path.
"""
from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Union

import numpy as np

from .errors import TreeStructureError
from .tree import (assert_same_structure, tree_flatten, tree_flatten_with_path, tree_map,
                   tree_unflatten)

__all__ = [
    "GradientTransformation", "chain", "multi_transform", "apply_updates",
    "sgd", "adam", "adamw", "rmsprop", "adagrad",
    "clip_by_global_norm", "global_norm", "scale", "scale_by_learning_rate",
    "add_decayed_weights", "identity",
    "constant_schedule", "step_decay", "piecewise_constant_schedule", "exponential_decay",
    "cosine_decay", "linear_schedule", "linear_warmup", "join_schedules",
    "warmup_cosine_decay",
    "EmptyState", "ScaleByScheduleState", "SGDState", "AdamState", "RMSPropState",
    "AdagradState", "MultiTransformState",
]

Schedule = Callable[[int], float]
ScalarOrSchedule = Union[float, Schedule]


class GradientTransformation(NamedTuple):
    """A pure optimizer: ``init(params) -> state``, ``update(grads, state, params=None) -> (updates, state)``."""
    init: Callable
    update: Callable


# --------------------------------------------------------------------------- states

class EmptyState(NamedTuple):
    """State of a stateless transformation."""


class ScaleByScheduleState(NamedTuple):
    count: int


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


class MultiTransformState(NamedTuple):
    inner_states: dict


# --------------------------------------------------------------------------- checks

# ``update.elementwise = True`` marks an optimizer whose rule treats every element on its own
# with the same hyperparameters (sgd, adam, adamw, rmsprop, adagrad): running it once on all
# leaves concatenated into one vector gives bit for bit what it gives leaf by leaf, so callers
# that keep parameters flat (funcgrad.dist.DataParallel) may do that instead of a pass per leaf.


def _check_hparam(name: str, value, *, low=0.0, high=None, high_open=False, opt="") -> None:
    if callable(value):
        return
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{opt}: {name} must be a number{' or a schedule' if name == 'lr' else ''}, "
                        f"received {value!r} of type {type(value).__name__}")
    v = float(value)
    if not math.isfinite(v) or v < low or (high is not None and (v >= high if high_open else v > high)):
        rng = f"in [{low:g}, {high:g}{')' if high_open else ']'}" if high is not None else f">= {low:g}"
        raise ValueError(f"{opt}: invalid {name} {value!r}; expected a finite value {rng}")


def _as_schedule(lr: ScalarOrSchedule, opt: str) -> Schedule:
    _check_hparam("lr", lr, opt=opt)
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


def _flat_leaves(tree, opt: str, what: str = "params"):
    leaves, td = tree_flatten(tree)
    arrs = []
    for x in leaves:
        a = np.asarray(x)
        if a.dtype == object:
            raise TypeError(f"{opt}: {what} contain a non-numeric leaf of type {type(x).__name__}")
        arrs.append(a)
    return arrs, td


def _leaf_paths(tree):
    return [p for p, _ in tree_flatten_with_path(tree)[0]]


def _check_grads(grads, ref, opt: str, ref_name: str = "params"):
    """Flatten grads, checking structure and leaf shapes against ``ref``; return (leaves, treedef)."""
    g, gtd = _flat_leaves(grads, opt, "grads")
    r, rtd = tree_flatten(ref)
    if gtd != rtd:
        try:
            assert_same_structure(grads, ref, root="grads")
        except TreeStructureError as e:
            raise TreeStructureError(f"{opt}: grads do not match {ref_name}: {e}") from None
        raise TreeStructureError(f"{opt}: grads have structure {gtd!r}, {ref_name} have {rtd!r}")
    for i, (a, b) in enumerate(zip(g, r)):
        if a.shape != np.shape(b):
            path = _leaf_paths(grads)[i]
            raise TreeStructureError(
                f"{opt}: grads{path} has shape {a.shape} but {ref_name}{path} has shape {np.shape(b)}")
    return g, gtd


def _float_dtype(a: np.ndarray):
    return a.dtype if np.issubdtype(a.dtype, np.floating) else np.dtype(np.float64)


def _zeros_like_params(params, opt: str, fill: float = 0.0):
    leaves, td = _flat_leaves(params, opt)
    out = []
    for path, a in zip(_leaf_paths(params), leaves):
        if not np.issubdtype(a.dtype, np.floating):
            raise TypeError(f"{opt}: params{path} has dtype {a.dtype}; optimizers need floating-point "
                            "parameters (cast with .astype(np.float32))")
        out.append(np.full(a.shape, fill, dtype=a.dtype))
    return tree_unflatten(td, out)


def _cast(g: np.ndarray, like_dtype) -> np.ndarray:
    return g if g.dtype == like_dtype else g.astype(like_dtype)


def _fresh(ufunc, a, b, dtype=None) -> np.ndarray:
    """``ufunc(a, b)`` into a new ndarray (also for 0-d inputs, where NumPy would return a scalar)."""
    a = np.asarray(a)
    dt = dtype if dtype is not None else np.result_type(a, b)
    if type(b) is float or type(b) is int or (type(b) is np.ndarray and b.shape == a.shape):
        shape = a.shape                    # (np.broadcast_shapes costs more than the update here)
    else:
        shape = np.broadcast_shapes(a.shape, np.shape(b))
    return ufunc(a, b, out=np.empty(shape, dtype=dt))


def _need_params(params, opt: str, why: str):
    if params is None:
        raise ValueError(f"{opt}: {why} needs the parameters; call update(grads, state, params)")


# --------------------------------------------------------------------------- schedules

def constant_schedule(value: float) -> Schedule:
    """``step -> value``."""
    _check_hparam("value", value, opt="constant_schedule")
    v = float(value)
    return lambda step: v


def piecewise_constant_schedule(init_value: float, boundaries_and_scales: dict | None = None) -> Schedule:
    """Multiply the value by ``scale`` once ``step >= boundary``, for each ``{boundary: scale}`` (optax)."""
    items = sorted((int(b), float(s)) for b, s in (boundaries_and_scales or {}).items())
    init_value = float(init_value)

    def schedule(step):
        v = init_value
        for b, s in items:
            if step >= b:
                v *= s
        return v
    return schedule


def step_decay(init_value: float, step_size: int, gamma: float = 0.1) -> Schedule:
    """``init_value * gamma ** (step // step_size)`` (``torch.optim.lr_scheduler.StepLR``)."""
    if int(step_size) <= 0:
        raise ValueError(f"step_decay: step_size must be a positive int, received {step_size!r}")
    init_value, gamma, step_size = float(init_value), float(gamma), int(step_size)
    return lambda step: init_value * gamma ** (int(step) // step_size)


def exponential_decay(init_value: float, decay_rate: float, transition_steps: int = 1,
                      staircase: bool = False, end_value: float | None = None) -> Schedule:
    """``init_value * decay_rate ** (step / transition_steps)`` (integer division if ``staircase``),
    clipped at ``end_value`` when given. ``transition_steps=1`` is ``torch ExponentialLR(gamma=decay_rate)``."""
    if int(transition_steps) <= 0:
        raise ValueError(f"exponential_decay: transition_steps must be positive, received {transition_steps!r}")
    init_value, decay_rate, ts = float(init_value), float(decay_rate), int(transition_steps)

    def schedule(step):
        p = (int(step) // ts) if staircase else step / ts
        v = init_value * decay_rate ** p
        if end_value is not None:
            v = max(v, end_value) if decay_rate < 1 else min(v, end_value)
        return v
    return schedule


def cosine_decay(init_value: float, decay_steps: int, end_value: float = 0.0) -> Schedule:
    """``end + (init - end) * (1 + cos(pi * min(step, decay_steps) / decay_steps)) / 2``
    (``torch CosineAnnealingLR(T_max=decay_steps, eta_min=end_value)`` for ``step <= decay_steps``)."""
    if int(decay_steps) <= 0:
        raise ValueError(f"cosine_decay: decay_steps must be positive, received {decay_steps!r}")
    init_value, end_value, n = float(init_value), float(end_value), int(decay_steps)

    def schedule(step):
        t = min(max(int(step), 0), n)
        return end_value + (init_value - end_value) * (1.0 + math.cos(math.pi * t / n)) / 2.0
    return schedule


def linear_schedule(init_value: float, end_value: float, transition_steps: int) -> Schedule:
    """Linear from ``init_value`` at step 0 to ``end_value`` at ``transition_steps``, constant after."""
    init_value, end_value, n = float(init_value), float(end_value), int(transition_steps)
    if n <= 0:
        return lambda step: end_value
    return lambda step: init_value + (end_value - init_value) * min(max(int(step), 0), n) / n


def linear_warmup(peak_value: float, warmup_steps: int, init_value: float = 0.0) -> Schedule:
    """Linear from ``init_value`` to ``peak_value`` over ``warmup_steps``, then ``peak_value``."""
    return linear_schedule(init_value, peak_value, warmup_steps)


def join_schedules(schedules, boundaries) -> Schedule:
    """Use ``schedules[i]`` from ``boundaries[i-1]`` on, called with the step counted from that boundary
    (optax ``join_schedules``): ``join_schedules([linear_warmup(1e-3, 100), cosine_decay(1e-3, 900)], [100])``."""
    schedules, boundaries = list(schedules), [int(b) for b in boundaries]
    if len(schedules) != len(boundaries) + 1:
        raise ValueError(f"join_schedules: {len(schedules)} schedules need {len(schedules) - 1} boundaries, "
                         f"received {len(boundaries)}")
    if boundaries != sorted(boundaries):
        raise ValueError(f"join_schedules: boundaries must be increasing, received {boundaries}")

    def schedule(step):
        start = 0
        for s, b in zip(schedules, boundaries):
            if step < b:
                return s(step - start)
            start = b
        return schedules[-1](step - start)
    return schedule


def warmup_cosine_decay(peak_value: float, warmup_steps: int, decay_steps: int,
                        init_value: float = 0.0, end_value: float = 0.0) -> Schedule:
    """Linear warmup to ``peak_value`` over ``warmup_steps``, then cosine decay to ``end_value``
    over the following ``decay_steps``."""
    return join_schedules([linear_warmup(peak_value, warmup_steps, init_value),
                           cosine_decay(peak_value, decay_steps, end_value)], [warmup_steps])


# --------------------------------------------------------------------------- combinators

def identity() -> GradientTransformation:
    """Return the gradients unchanged."""
    return GradientTransformation(lambda params: EmptyState(),
                                  lambda grads, state, params=None: (grads, state))


def chain(*transforms: GradientTransformation) -> GradientTransformation:
    """Apply the transformations in order; the state is a tuple of their states."""
    for i, t in enumerate(transforms):
        if not isinstance(t, GradientTransformation):
            raise TypeError(f"chain: argument {i} is {type(t).__name__}, expected a GradientTransformation")

    def init(params):
        return tuple(t.init(params) for t in transforms)

    def update(grads, state, params=None):
        if not isinstance(state, tuple) or len(state) != len(transforms):
            raise ValueError(f"chain: expected a state tuple of length {len(transforms)} (from chain(...).init), "
                             f"received {type(state).__name__}")
        new = []
        for t, s in zip(transforms, state):
            grads, s = t.update(grads, s, params)
            new.append(s)
        return grads, tuple(new)

    return GradientTransformation(init, update)


def apply_updates(params, updates):
    """``params + updates`` leaf-wise, keeping each parameter's dtype."""
    _check_grads(updates, params, "apply_updates")  # names the key path on mismatch

    def add(p, u):
        pa = np.asarray(p)
        out = np.add(pa, u)
        if isinstance(p, np.ndarray):
            return np.asarray(out, dtype=pa.dtype)  # stays an ndarray (0-d too), in the param's dtype
        return out.astype(pa.dtype) if np.issubdtype(pa.dtype, np.floating) else out
    return tree_map(add, params, updates)


def multi_transform(transforms: dict, labels) -> GradientTransformation:
    """Route each parameter to the transformation of its label (PyTorch param groups).

    ``labels`` is a pytree with the structure of the params whose leaves are keys of
    ``transforms``, or a callable ``params -> labels``. Each inner transformation sees
    the flat list of its parameters (in canonical leaf order).
    """
    if not isinstance(transforms, dict) or not transforms:
        raise TypeError("multi_transform: transforms must be a non-empty dict {label: GradientTransformation}")
    for k, t in transforms.items():
        if not isinstance(t, GradientTransformation):
            raise TypeError(f"multi_transform: transforms[{k!r}] is {type(t).__name__}, "
                            "expected a GradientTransformation")

    def groups(params, opt="multi_transform"):
        lab = labels(params) if callable(labels) else labels
        lab_leaves, ltd = tree_flatten(lab)
        p_leaves, ptd = tree_flatten(params)
        if ltd != ptd:
            try:
                assert_same_structure(lab, params, root="labels")
            except TreeStructureError as e:
                raise TreeStructureError(f"{opt}: labels do not match params: {e}") from None
            raise TreeStructureError(f"{opt}: labels have structure {ltd!r}, params have {ptd!r}")
        paths = _leaf_paths(params)
        idx: dict = {k: [] for k in transforms}
        for i, (path, l) in enumerate(zip(paths, lab_leaves)):
            if l not in transforms:
                raise ValueError(f"{opt}: labels{path} is {l!r}, which is not one of the transforms' labels "
                                 f"{sorted(map(repr, transforms))}")
            idx[l].append(i)
        return idx, ptd

    def init(params):
        idx, _ = groups(params)
        leaves = tree_flatten(params)[0]
        return MultiTransformState({k: transforms[k].init([leaves[i] for i in ix]) for k, ix in idx.items()})

    def update(grads, state, params=None):
        if params is None:
            _need_params(params, "multi_transform", "routing by labels")
        g, gtd = _check_grads(grads, params, "multi_transform")
        idx, _ = groups(params)
        p_leaves = tree_flatten(params)[0]
        out: list = [None] * len(g)
        new = {}
        for k, ix in idx.items():
            u, new[k] = transforms[k].update([g[i] for i in ix], state.inner_states[k],
                                             [p_leaves[i] for i in ix])
            for i, ui in zip(ix, u):
                out[i] = ui
        return tree_unflatten(gtd, out), MultiTransformState(new)

    return GradientTransformation(init, update)


# --------------------------------------------------------------------------- gradient transforms

def global_norm(tree) -> float:
    """sqrt of the sum of squares of every leaf (float64 accumulation)."""
    total = 0.0
    for x in tree_flatten(tree)[0]:
        a = np.asarray(x)
        total += float(np.vdot(a, a).real) if a.size else 0.0
    return math.sqrt(total)


def clip_by_global_norm(max_norm: float) -> GradientTransformation:
    """Scale all gradients by ``min(1, max_norm / (global_norm + 1e-6))`` (``torch.nn.utils.clip_grad_norm_``)."""
    _check_hparam("max_norm", max_norm, opt="clip_by_global_norm")
    max_norm = float(max_norm)

    def update(grads, state, params=None):
        norm = global_norm(grads)
        if not math.isfinite(norm):
            raise FloatingPointError(f"clip_by_global_norm: the gradient norm is {norm}; "
                                     "a gradient contains nan or inf")
        coef = max_norm / (norm + 1e-6)
        if coef >= 1.0:
            return grads, state
        return tree_map(lambda g: _fresh(np.multiply, g, coef, _float_dtype(np.asarray(g))), grads), state

    return GradientTransformation(lambda params: EmptyState(), update)


def scale(step_size: float) -> GradientTransformation:
    """Multiply the updates by a constant (``scale(-lr)`` after a direction transform)."""
    if isinstance(step_size, (bool, np.bool_)) or not isinstance(step_size, (int, float, np.number)):
        raise TypeError(f"scale: step_size must be a number, received {step_size!r}")
    f = float(step_size)

    def update(grads, state, params=None):
        return tree_map(lambda g: _fresh(np.multiply, g, f, _float_dtype(np.asarray(g))), grads), state
    return GradientTransformation(lambda params: EmptyState(), update)


def scale_by_learning_rate(lr: ScalarOrSchedule) -> GradientTransformation:
    """Multiply the updates by ``-lr(step)``; the state counts the steps."""
    sched = _as_schedule(lr, "scale_by_learning_rate")

    def update(grads, state, params=None):
        f = -sched(state.count)
        u = tree_map(lambda g: _fresh(np.multiply, g, f, _float_dtype(np.asarray(g))), grads)
        return u, ScaleByScheduleState(state.count + 1)
    return GradientTransformation(lambda params: ScaleByScheduleState(0), update)


def add_decayed_weights(weight_decay: float = 0.0, mask=None) -> GradientTransformation:
    """``updates + weight_decay * params`` (L2 when placed before the optimizer's direction).

    ``mask``: optional pytree of bools like the params (or callable ``params -> mask``);
    leaves with ``False`` are not decayed (biases, norms).
    """
    _check_hparam("weight_decay", weight_decay, opt="add_decayed_weights")
    wd = float(weight_decay)

    def update(grads, state, params=None):
        _need_params(params, "add_decayed_weights", "weight decay")
        g, gtd = _check_grads(grads, params, "add_decayed_weights")
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
            if mi and wd != 0.0:
                pa = np.asarray(pi)
                o = _fresh(np.multiply, pa, wd)
                np.add(o, gi, out=o, casting="same_kind")
                out.append(o)
            else:
                out.append(gi)
        return tree_unflatten(gtd, out), state
    return GradientTransformation(lambda params: EmptyState(), update)


# --------------------------------------------------------------------------- optimizers

def _l2(g: np.ndarray, p, wd: float) -> np.ndarray:
    """New array ``g + wd * p`` in g's dtype."""
    d = _fresh(np.multiply, p, wd, g.dtype)
    np.add(d, g, out=d)
    return d


def sgd(lr: ScalarOrSchedule = 1e-3, momentum: float = 0.0, nesterov: bool = False,
        dampening: float = 0.0, weight_decay: float = 0.0) -> GradientTransformation:
    """``torch.optim.SGD``: ``d = g + wd*p``; ``buf = d`` on the first step, else
    ``buf = momentum*buf + (1-dampening)*d``; ``d = d + momentum*buf`` (nesterov) or ``buf``;
    update ``-lr * d``."""
    opt = "sgd"
    sched = _as_schedule(lr, opt)
    _check_hparam("momentum", momentum, opt=opt)
    _check_hparam("dampening", dampening, opt=opt)
    _check_hparam("weight_decay", weight_decay, opt=opt)
    if nesterov and (momentum <= 0 or dampening != 0):
        raise ValueError("sgd: nesterov momentum requires momentum > 0 and dampening = 0 (as in PyTorch)")
    mom, damp, wd = float(momentum), float(dampening), float(weight_decay)

    def init(params):
        return SGDState(0, _zeros_like_params(params, opt) if mom != 0.0 else None)

    def update(grads, state, params=None):
        ref = params if params is not None else state.momentum
        if wd != 0.0:
            _need_params(params, opt, "weight_decay")
        g, gtd = (_check_grads(grads, ref, opt, "params" if params is not None else "the momentum state")
                  if ref is not None else _flat_leaves(grads, opt, "grads"))
        lr_t = sched(state.count)
        p = tree_flatten(params)[0] if params is not None else [None] * len(g)
        bufs = tree_flatten(state.momentum)[0] if mom != 0.0 else [None] * len(g)
        ups, new_bufs = [], []
        for gi, pi, bi in zip(g, p, bufs):
            dt = bi.dtype if bi is not None else (_float_dtype(np.asarray(pi)) if pi is not None else _float_dtype(gi))
            gi = _cast(gi, dt)
            d = _l2(gi, pi, wd) if wd != 0.0 else gi
            if mom != 0.0:
                if state.count == 0:
                    buf = np.array(d, dtype=dt, copy=True)
                else:
                    buf = _fresh(np.multiply, bi, mom)
                    if damp != 0.0:
                        buf += (1.0 - damp) * d
                    else:
                        buf += d
                new_bufs.append(buf)
                if nesterov:
                    nd = _fresh(np.multiply, buf, mom)
                    nd += d
                    d = nd
                else:
                    d = buf
            u = _fresh(np.multiply, d, -lr_t)
            ups.append(u)
        new_m = tree_unflatten(gtd, new_bufs) if mom != 0.0 else None
        return tree_unflatten(gtd, ups), SGDState(state.count + 1, new_m)

    update.elementwise = True   # one rule per element (see the note above _check_hparam)
    return GradientTransformation(init, update)


def _adam_like(opt, lr, b1, b2, eps, weight_decay, decoupled, amsgrad):
    sched = _as_schedule(lr, opt)
    _check_hparam("b1", b1, high=1.0, high_open=True, opt=opt)
    _check_hparam("b2", b2, high=1.0, high_open=True, opt=opt)
    _check_hparam("eps", eps, opt=opt)
    _check_hparam("weight_decay", weight_decay, opt=opt)
    b1, b2, eps, wd = float(b1), float(b2), float(eps), float(weight_decay)

    def init(params):
        z = _zeros_like_params(params, opt)
        return AdamState(0, z, _zeros_like_params(params, opt),
                         _zeros_like_params(params, opt) if amsgrad else None)

    def update(grads, state, params=None):
        if wd != 0.0:
            _need_params(params, opt, "weight_decay")
        g, gtd = _check_grads(grads, params if params is not None else state.mu, opt,
                              "params" if params is not None else "the optimizer state")
        step = state.count + 1
        lr_t = sched(state.count)
        bc1 = 1.0 - b1 ** step
        bc2_sqrt = math.sqrt(1.0 - b2 ** step)
        step_size = lr_t / bc1
        p = tree_flatten(params)[0] if params is not None else [None] * len(g)
        mus, nus = tree_flatten(state.mu)[0], tree_flatten(state.nu)[0]
        nmax = tree_flatten(state.nu_max)[0] if amsgrad else [None] * len(g)
        ups, new_mu, new_nu, new_max = [], [], [], []
        for gi, pi, m, v, vm in zip(g, p, mus, nus, nmax):
            gi = _cast(gi, m.dtype)
            if wd != 0.0 and not decoupled:
                gi = _l2(gi, pi, wd)
            # m = b1*m + (1-b1)*g ; v = b2*v + (1-b2)*g*g   (fresh arrays, temporaries in place)
            m2 = _fresh(np.multiply, m, b1)
            tmp = _fresh(np.multiply, gi, 1.0 - b1)
            m2 += tmp
            v2 = _fresh(np.multiply, v, b2)
            np.multiply(gi, gi, out=tmp)
            tmp *= 1.0 - b2
            v2 += tmp
            if amsgrad:
                vm2 = _fresh(np.maximum, vm, v2)
                new_max.append(vm2)
                np.sqrt(vm2, out=tmp)
            else:
                np.sqrt(v2, out=tmp)
            tmp /= bc2_sqrt
            tmp += eps
            u = _fresh(np.divide, m2, tmp)
            u *= -step_size
            if decoupled and wd != 0.0:
                u -= (lr_t * wd) * np.asarray(pi, dtype=u.dtype)
            ups.append(u)
            new_mu.append(m2)
            new_nu.append(v2)
        return tree_unflatten(gtd, ups), AdamState(
            step, tree_unflatten(gtd, new_mu), tree_unflatten(gtd, new_nu),
            tree_unflatten(gtd, new_max) if amsgrad else None)

    update.elementwise = True   # one rule per element (see the note above _check_hparam)
    return GradientTransformation(init, update)


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
    sched = _as_schedule(lr, opt)
    _check_hparam("alpha", alpha, high=1.0, opt=opt)
    _check_hparam("eps", eps, opt=opt)
    _check_hparam("weight_decay", weight_decay, opt=opt)
    _check_hparam("momentum", momentum, opt=opt)
    alpha, eps, wd, mom = float(alpha), float(eps), float(weight_decay), float(momentum)

    def init(params):
        return RMSPropState(0, _zeros_like_params(params, opt),
                            _zeros_like_params(params, opt) if centered else None,
                            _zeros_like_params(params, opt) if mom > 0 else None)

    def update(grads, state, params=None):
        if wd != 0.0:
            _need_params(params, opt, "weight_decay")
        g, gtd = _check_grads(grads, params if params is not None else state.square_avg, opt,
                              "params" if params is not None else "the optimizer state")
        lr_t = sched(state.count)
        p = tree_flatten(params)[0] if params is not None else [None] * len(g)
        sq = tree_flatten(state.square_avg)[0]
        ga = tree_flatten(state.grad_avg)[0] if centered else [None] * len(g)
        bufs = tree_flatten(state.momentum)[0] if mom > 0 else [None] * len(g)
        ups, nsq, nga, nbuf = [], [], [], []
        for gi, pi, s, a, b in zip(g, p, sq, ga, bufs):
            gi = _cast(gi, s.dtype)
            if wd != 0.0:
                gi = _l2(gi, pi, wd)
            s2 = _fresh(np.multiply, s, alpha)
            tmp = _fresh(np.multiply, gi, gi)
            tmp *= 1.0 - alpha
            s2 += tmp
            nsq.append(s2)
            if centered:
                a2 = _fresh(np.multiply, a, alpha)
                np.multiply(gi, 1.0 - alpha, out=tmp)
                a2 += tmp
                nga.append(a2)
                np.multiply(a2, a2, out=tmp)
                np.subtract(s2, tmp, out=tmp)
                np.sqrt(tmp, out=tmp)
            else:
                np.sqrt(s2, out=tmp)
            tmp += eps
            np.divide(gi, tmp, out=tmp)
            if mom > 0:
                b2 = _fresh(np.multiply, b, mom)
                b2 += tmp
                nbuf.append(b2)
                u = _fresh(np.multiply, b2, -lr_t)
            else:
                tmp *= -lr_t
                u = tmp
            ups.append(u)
        return tree_unflatten(gtd, ups), RMSPropState(
            state.count + 1, tree_unflatten(gtd, nsq),
            tree_unflatten(gtd, nga) if centered else None,
            tree_unflatten(gtd, nbuf) if mom > 0 else None)

    update.elementwise = True   # one rule per element (see the note above _check_hparam)
    return GradientTransformation(init, update)


def adagrad(lr: ScalarOrSchedule = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
            initial_accumulator_value: float = 0.0, eps: float = 1e-10) -> GradientTransformation:
    """``torch.optim.Adagrad``: ``clr = lr / (1 + (t-1)*lr_decay)``; ``sum += g^2``;
    update ``-clr * g / (sqrt(sum) + eps)``."""
    opt = "adagrad"
    sched = _as_schedule(lr, opt)
    _check_hparam("lr_decay", lr_decay, opt=opt)
    _check_hparam("weight_decay", weight_decay, opt=opt)
    _check_hparam("initial_accumulator_value", initial_accumulator_value, opt=opt)
    _check_hparam("eps", eps, opt=opt)
    lr_decay, wd, eps = float(lr_decay), float(weight_decay), float(eps)

    def init(params):
        return AdagradState(0, _zeros_like_params(params, opt, float(initial_accumulator_value)))

    def update(grads, state, params=None):
        if wd != 0.0:
            _need_params(params, opt, "weight_decay")
        g, gtd = _check_grads(grads, params if params is not None else state.sum, opt,
                              "params" if params is not None else "the optimizer state")
        step = state.count + 1
        clr = sched(state.count) / (1.0 + (step - 1) * lr_decay)
        p = tree_flatten(params)[0] if params is not None else [None] * len(g)
        sums = tree_flatten(state.sum)[0]
        ups, nsum = [], []
        for gi, pi, s in zip(g, p, sums):
            gi = _cast(gi, s.dtype)
            if wd != 0.0:
                gi = _l2(gi, pi, wd)
            tmp = _fresh(np.multiply, gi, gi)
            s2 = _fresh(np.add, s, tmp)
            nsum.append(s2)
            np.sqrt(s2, out=tmp)
            tmp += eps
            np.divide(gi, tmp, out=tmp)
            tmp *= -clr
            ups.append(tmp)
        return tree_unflatten(gtd, ups), AdagradState(step, tree_unflatten(gtd, nsum))

    update.elementwise = True   # one rule per element (see the note above _check_hparam)
    return GradientTransformation(init, update)
