"""Learning-rate schedules and the optimizer: optax AdamW with gradient clipping, fed the
update's learning rate as an argument (so runs that differ only in schedule share one compiled
step), with gradient accumulation (``optax.MultiSteps``) and ``nan_policy="skip"``
(``optax.apply_if_finite``)."""

from __future__ import annotations

import dataclasses
from typing import Protocol

import jax
import jax.numpy as jnp
import numpy as np
import optax

from deepnet_jax.common.config_schema import FRACTION, field
from deepnet_jax.model import parameterization as model_parameterization
from deepnet_jax.training import parameterization

SCHEDULES = ("inverse_sqrt", "polynomial", "linear", "cosine", "constant")
OPTIMIZERS = ("adamw",)


@dataclasses.dataclass(frozen=True)
class OptimizerFields:
    """``config.optimizer``."""

    name: str = field(
        "adamw", "adamw (decoupled weight decay; adam with weight_decay=0)", choices=OPTIMIZERS
    )
    learning_rate: float = field(5e-4, "peak learning rate (> 0)")
    b1: float = field(0.9, "Adam β1", **FRACTION)
    b2: float = field(0.98, "Adam β2 (fairseq's transformer setting)", **FRACTION)
    eps: float = field(1e-8, "Adam ε", low=0)
    weight_decay: float = field(0.0, "decoupled weight decay (AdamW)", low=0)
    grad_clip: float = field(0.0, "global-norm clipping threshold; 0 disables", low=0)


@dataclasses.dataclass(frozen=True)
class ScheduleFields:
    """``config.schedule`` (see :func:`learning_rate_schedule`)."""

    name: str = field("inverse_sqrt", "the learning-rate schedule", choices=SCHEDULES)
    warmup_steps: int = field(4000, "linear warm-up updates (all schedules but constant)", low=0)
    warmup_init_lr: float = field(1e-7, "learning rate at step 0 of the warm-up (<= lr)", low=0)
    end_lr: float = field(0.0, "polynomial/linear/cosine: learning rate at total_steps", low=0)
    power: float = field(1.0, "polynomial: decay exponent (1 = linear)", low=0, low_open=True)


class Optimized(Protocol):
    """What the optimizer and the schedule read of a run's config (a ``RunConfig`` has it)."""

    optimizer: OptimizerFields
    schedule: ScheduleFields
    total_steps: int
    grad_accum_steps: int
    nan_policy: str


def validate(config: Optimized) -> None:
    """One clear error for the learning rate or a schedule field out of line with it or with
    ``total_steps`` (each field's own type and range are checked by its declaration first)."""
    s, lr = config.schedule, config.optimizer.learning_rate
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0:
        raise ValueError(f"optimizer.learning_rate={lr!r} must be a number > 0")
    w = s.warmup_steps
    if s.name == "inverse_sqrt" and w < 1:
        raise ValueError("schedule.warmup_steps=0: inverse_sqrt needs >= 1 warm-up step")
    if s.name in ("polynomial", "linear", "cosine") and w >= config.total_steps:
        raise ValueError(
            f"schedule.warmup_steps={w} must be below total_steps={config.total_steps} "
            f"for schedule.name={s.name!r}"
        )
    if not 0 <= s.warmup_init_lr <= lr:
        raise ValueError(
            f"schedule.warmup_init_lr={s.warmup_init_lr!r} must be in [0, learning_rate={lr}]"
        )
    if not 0 <= s.end_lr <= lr:
        raise ValueError(f"schedule.end_lr={s.end_lr!r} must be in [0, learning_rate={lr}]")


def learning_rate_schedule(config: Optimized) -> optax.Schedule:
    """The learning rate at optimizer update ``t`` (counted from 0).

    Every schedule but ``constant`` first warms up linearly from ``warmup_init_lr`` to the peak
    ``lr`` over ``w = warmup_steps`` updates. Then, with T = ``total_steps``:

    * ``inverse_sqrt`` (fairseq): lr·√(w / t).
    * ``polynomial`` (fairseq's polynomial_decay): (lr − end_lr)·(1 − (t − w)/(T − w))^power
      + end_lr; ``linear`` is power 1.
    * ``cosine``: end_lr + (lr − end_lr)·(1 + cos(π·(t − w)/(T − w)))/2.
    * ``constant``: lr.
    """
    lr, s, total = config.optimizer.learning_rate, config.schedule, config.total_steps
    if s.name == "constant":
        return optax.constant_schedule(lr)
    if s.name == "cosine":
        return optax.warmup_cosine_decay_schedule(
            s.warmup_init_lr, lr, s.warmup_steps, total, end_value=s.end_lr
        )
    warmup = optax.linear_schedule(s.warmup_init_lr, lr, s.warmup_steps)
    if s.name == "inverse_sqrt":

        def decay(step):  # join_schedules passes steps counted from the end of warm-up
            return lr * jnp.sqrt(s.warmup_steps / jnp.maximum(step + s.warmup_steps, 1))

    else:
        power = 1.0 if s.name == "linear" else s.power
        decay = optax.polynomial_schedule(lr, s.end_lr, power, total - s.warmup_steps)
    return optax.join_schedules([warmup, decay], [s.warmup_steps])


def learning_rates(config: Optimized) -> np.ndarray:
    """float32 [total_steps]: the learning rate of each optimizer update
    (:func:`learning_rate_schedule` at 0 … total_steps − 1), computed once on the host. The
    trainer feeds the update's entry to the jitted step as an argument, so runs that differ
    only in learning rate or schedule compile the same step (and share a compilation cache).
    Update t uses entry t whether or not earlier updates were skipped (``nan_policy="skip"``):
    the schedule follows the step counter, as PyTorch's schedulers do."""
    rates = learning_rate_schedule(config)(jnp.arange(config.total_steps))
    return np.broadcast_to(np.asarray(rates, np.float32), (config.total_steps,)).copy()


def scale_by_learning_rate_argument() -> optax.GradientTransformationExtraArgs:
    """``u ← −η·u`` with η the ``learning_rate`` keyword argument of ``update`` (a scalar
    array): optax's ``scale_by_learning_rate`` with the rate supplied per call instead of
    computed from a step count inside the optimizer state (no state)."""

    def init(params):
        del params
        return optax.EmptyState()

    def update(updates, state, params=None, *, learning_rate, **extra_args):
        del params, extra_args
        return jax.tree.map(lambda u: (-learning_rate * u).astype(u.dtype), updates), state

    return optax.GradientTransformationExtraArgs(init, update)


def make_optimizer(config: Optimized) -> optax.GradientTransformationExtraArgs:
    """Clipping + AdamW (decoupled weight decay scaled by the learning rate, as
    ``optax.adamw``; under ``model.parameterization="completep"`` with each parameter group's
    learning rate, ε and weight decay, :func:`.parameterization.grouped_adamw`) whose
    ``update`` takes the update's ``learning_rate`` as a keyword argument
    (:func:`learning_rates`); with ``grad_accum_steps`` = k > 1, wrapped in
    ``optax.MultiSteps``: k calls (micro-batches) make one update with their mean gradient;
    with ``nan_policy="skip"``, in ``optax.apply_if_finite``."""
    o = config.optimizer
    if model_parameterization.completep(config.model):  # per parameter group (CompleteP)
        adamw = [parameterization.grouped_adamw(config)]
    else:  # one group: the chain every run saved before the field existed has
        adamw = [
            optax.scale_by_adam(b1=o.b1, b2=o.b2, eps=o.eps),
            optax.add_decayed_weights(o.weight_decay),
        ]
    optimizer = optax.chain(
        optax.clip_by_global_norm(o.grad_clip) if o.grad_clip else optax.identity(),
        *adamw,
        scale_by_learning_rate_argument(),
    )
    if config.grad_accum_steps > 1:
        multi = optax.MultiSteps(optimizer, every_k_schedule=config.grad_accum_steps)
        # MultiSteps is a class, not a GradientTransformationExtraArgs: apply_if_finite (any
        # wrapper through optax.with_extra_args_support) would call its update without the
        # learning_rate argument. Its own update passes extra arguments on to the chain.
        optimizer = optax.GradientTransformationExtraArgs(multi.init, multi.update)
    if config.nan_policy == "skip":
        # a micro-batch with a non-finite gradient changes nothing (not even the accumulated
        # gradient); the trainer counts such steps and halts after nan_max_skips in a row
        optimizer = optax.apply_if_finite(optimizer, max_consecutive_errors=2**31 - 1)
    return optimizer
