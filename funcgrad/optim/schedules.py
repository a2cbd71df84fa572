"""Learning-rate schedules: callables ``step -> lr``, step = number of updates already applied.

Owns the schedules every ``lr`` argument accepts: ``constant_schedule``,
``piecewise_constant_schedule``, ``step_decay``, ``exponential_decay``,
``cosine_decay``, ``linear_schedule``, ``linear_warmup``, ``join_schedules``
and ``warmup_cosine_decay``. Where PyTorch has a scheduler of the same
shape, the docstring names it: stepping it once per ``optimizer.step()``
gives the same values.
"""
from __future__ import annotations

import math

from ._checks import Schedule, check_hparam

__all__ = ["constant_schedule", "step_decay", "piecewise_constant_schedule", "exponential_decay",
           "cosine_decay", "linear_schedule", "linear_warmup", "join_schedules", "warmup_cosine_decay"]


def constant_schedule(value: float) -> Schedule:
    """``step -> value``."""
    check_hparam("value", value, opt="constant_schedule")
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
