"""Learning-rate schedules and the optimizer: optax AdamW with gradient clipping, fed the
update's learning rate as an argument (so runs that differ only in schedule share one compiled
step), with gradient accumulation (``optax.MultiSteps``) and ``nan_policy="skip"``
(``optax.apply_if_finite``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

SCHEDULES = ("inverse_sqrt", "polynomial", "linear", "cosine", "constant")
OPTIMIZERS = ("adamw",)


def validate(config: ml_collections.ConfigDict) -> None:
    """One clear error for the learning rate or a schedule field out of line with it or with
    ``total_steps`` (each field's own type and range are checked by its declaration in
    ``train_config``, first)."""
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


def learning_rate_schedule(config: ml_collections.ConfigDict) -> optax.Schedule:
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


def learning_rates(config: ml_collections.ConfigDict) -> np.ndarray:
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


def make_optimizer(config: ml_collections.ConfigDict) -> optax.GradientTransformationExtraArgs:
    """Clipping + AdamW (decoupled weight decay scaled by the learning rate, as
    ``optax.adamw``) whose ``update`` takes the update's ``learning_rate`` as a keyword
    argument (:func:`learning_rates`); with ``grad_accum_steps`` = k > 1, wrapped in
    ``optax.MultiSteps``: k calls (micro-batches) make one update with their mean gradient;
    with ``nan_policy="skip"``, in ``optax.apply_if_finite``."""
    o = config.optimizer
    optimizer = optax.chain(
        optax.clip_by_global_norm(o.grad_clip) if o.grad_clip else optax.identity(),
        optax.scale_by_adam(b1=o.b1, b2=o.b2, eps=o.eps),
        optax.add_decayed_weights(o.weight_decay),
        scale_by_learning_rate_argument(),
    )
    if config.grad_accum_steps > 1:
        optimizer = optax.MultiSteps(optimizer, every_k_schedule=config.grad_accum_steps)
    if config.nan_policy == "skip":
        # a micro-batch with a non-finite gradient changes nothing (not even the accumulated
        # gradient); the trainer counts such steps and halts after nan_max_skips in a row
        optimizer = optax.apply_if_finite(optimizer, max_consecutive_errors=2**31 - 1)
    return optimizer
