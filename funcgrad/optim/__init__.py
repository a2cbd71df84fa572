"""funcgrad.optim: optimizers as optax-style pure pairs of functions, with PyTorch update rules.

This package only re-exports; one concept per module, as optax has them:

* :mod:`.base`: :class:`GradientTransformation` ``(init, update)``,
  :class:`EmptyState`, :func:`identity`, :func:`apply_updates`;
* :mod:`.transform`: the links optimizers are made of (:func:`scale`,
  :func:`scale_by_learning_rate`, :func:`add_decayed_weights`, :func:`trace`,
  :func:`scale_by_adam`, :func:`scale_by_rms`, :func:`scale_by_rss`);
* :mod:`.clipping`: :func:`clip_by_global_norm`, :func:`global_norm`;
* :mod:`.combine`: :func:`chain`, :func:`multi_transform`;
* :mod:`.alias`: the optimizers (:func:`sgd`, :func:`adam`, :func:`adamw`,
  :func:`rmsprop`, :func:`adagrad`), each a chain of transforms;
* :mod:`.schedules`: learning-rate schedules (callables ``step -> lr``).

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
from .base import GradientTransformation, EmptyState, identity, apply_updates
from .combine import chain, multi_transform, MultiTransformState
from .clipping import clip_by_global_norm, global_norm
from .transform import (scale, scale_by_learning_rate, add_decayed_weights, trace, scale_by_adam, scale_by_rms,
                        scale_by_rss, ScaleByScheduleState, TraceState, ScaleByAdamState, ScaleByRmsState,
                        ScaleByRssState)
from .alias import sgd, adam, adamw, rmsprop, adagrad, SGDState, AdamState, RMSPropState, AdagradState
from .schedules import (constant_schedule, step_decay, piecewise_constant_schedule, exponential_decay,
                        cosine_decay, linear_schedule, linear_warmup, join_schedules, warmup_cosine_decay)

__all__ = [
    "GradientTransformation", "chain", "multi_transform", "apply_updates",
    "sgd", "adam", "adamw", "rmsprop", "adagrad",
    "clip_by_global_norm", "global_norm", "scale", "scale_by_learning_rate",
    "add_decayed_weights", "identity", "trace", "scale_by_adam", "scale_by_rms", "scale_by_rss",
    "constant_schedule", "step_decay", "piecewise_constant_schedule", "exponential_decay",
    "cosine_decay", "linear_schedule", "linear_warmup", "join_schedules",
    "warmup_cosine_decay",
    "EmptyState", "ScaleByScheduleState", "SGDState", "AdamState", "RMSPropState",
    "AdagradState", "MultiTransformState", "TraceState", "ScaleByAdamState", "ScaleByRmsState",
    "ScaleByRssState",
]

# Checkpoints name a NamedTuple by its import path: keep every state at the public one, so
# files written before this package was split (funcgrad.optim:AdamState) and after read the same.
for _state in (EmptyState, MultiTransformState, ScaleByScheduleState, TraceState, ScaleByAdamState,
               ScaleByRmsState, ScaleByRssState, SGDState, AdamState, RMSPropState, AdagradState):
    _state.__module__ = __name__
del _state
