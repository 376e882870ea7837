"""Training loop: optax AdamW with an inverse-sqrt schedule on a real corpus or a synthetic task.

The core-library trainer (jitted train/eval steps, progress bar, final evaluation). Data comes
from ``deepnet_jax.data`` (tfds corpora prepared on first use, SentencePiece, grain batches) or,
with ``data.dataset="synthetic_reversal"``, from the built-in reversal task. Checkpointing and
sharding arrive with their own modules.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from tqdm import tqdm

from deepnet_jax import checkpoint, losses, models, synthetic
from deepnet_jax import metrics as metrics_lib
from deepnet_jax.data import pipeline, sources

Batch = dict[str, jax.Array]
SYNTHETIC = "synthetic_reversal"
DATASETS = (SYNTHETIC, *sources.DATASETS)
SCHEDULES = ("inverse_sqrt", "polynomial", "linear", "cosine", "constant")
OPTIMIZERS = ("adamw",)


def validate(config: ml_collections.ConfigDict) -> None:
    """One clear error for the first invalid training field (the model is checked by build)."""
    if config.data.dataset not in DATASETS:
        raise ValueError(f"data.dataset={config.data.dataset!r}; allowed values are {DATASETS}")
    if config.schedule.name not in SCHEDULES:
        raise ValueError(f"schedule.name={config.schedule.name!r}; allowed values are {SCHEDULES}")
    if config.optimizer.name not in OPTIMIZERS:
        raise ValueError(
            f"optimizer.name={config.optimizer.name!r}; allowed values are {OPTIMIZERS}"
        )
    if not 0.0 <= config.label_smoothing < 1.0:
        raise ValueError(f"label_smoothing={config.label_smoothing!r} must be in [0, 1)")
    for name, low in (("checkpoint_every", 0), ("max_to_keep", 1), ("eval_every", 0)):
        value = config[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name}={value!r} must be an integer >= {low}")
    for name in ("total_steps", "data.batch_size", "eval_batches", "log_every", "grad_accum_steps"):
        if name == "eval_batches" and config.data.dataset != SYNTHETIC:
            continue  # real corpora are evaluated on their whole validation split
        value = functools.reduce(getattr, name.split("."), config)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be an integer >= 1")
    _validate_schedule(config)  # after total_steps is known to be an integer
    if config.data.max_len > config.model.max_len:
        raise ValueError(
            f"data.max_len={config.data.max_len} exceeds model.max_len={config.model.max_len}"
        )
    if config.data.dataset == SYNTHETIC:
        for name in ("max_tokens", "bucket_boundaries", "packing", "source_dir"):
            if config.data.get(name):
                raise ValueError(
                    f"data.{name}={config.data[name]!r} is not used by data.dataset={SYNTHETIC!r}"
                )
        return
    options = pipeline.DataOptions.from_config(config.data, config.seed)
    options.validate()
    if options.tokenizer != "char" and config.model.vocab_size < options.vocab_size:
        raise ValueError(
            f"model.vocab_size={config.model.vocab_size} is smaller than "
            f"data.vocab_size={options.vocab_size} (the tokenizer's pieces)"
        )


def _validate_schedule(config: ml_collections.ConfigDict) -> None:
    s, lr = config.schedule, config.optimizer.learning_rate
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0:
        raise ValueError(f"optimizer.learning_rate={lr!r} must be a number > 0")
    w = s.warmup_steps
    if isinstance(w, bool) or not isinstance(w, int) or w < 0:
        raise ValueError(f"schedule.warmup_steps={w!r} must be an integer >= 0")
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
    if not s.power > 0:
        raise ValueError(f"schedule.power={s.power!r} must be > 0")


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


def make_optimizer(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
    """Clipping + AdamW on the schedule; with ``grad_accum_steps`` = k > 1, wrapped in
    ``optax.MultiSteps``: k calls (micro-batches) make one update with their mean gradient."""
    o = config.optimizer
    optimizer = optax.chain(
        optax.clip_by_global_norm(o.grad_clip) if o.grad_clip else optax.identity(),
        optax.adamw(
            learning_rate_schedule(config), b1=o.b1, b2=o.b2, eps=o.eps, weight_decay=o.weight_decay
        ),
    )
    if config.grad_accum_steps > 1:
        return optax.MultiSteps(optimizer, every_k_schedule=config.grad_accum_steps)
    return optimizer


def make_loss_fn(model: nn.Module, arch: str, label_smoothing: float = 0.0) -> Callable:
    """Build ``loss_fn(params, batch, dropout_rng, deterministic)``.

    It returns ``(mean loss, (summed loss, summed weight, summed correct))``.
    """

    def loss_fn(params, batch: Batch, dropout_rng: jax.Array, deterministic: bool):
        logits = model.apply(
            {"params": params},
            *synthetic.model_inputs(arch, batch),
            deterministic=deterministic,
            rngs={"dropout": dropout_rng},
            **pipeline.model_kwargs(batch),
        )
        loss_sum, weight_sum = losses.cross_entropy(
            logits, batch["targets"], batch["weights"], label_smoothing
        )
        hits = losses.accuracy(logits, batch["targets"], batch["weights"])
        return loss_sum / jnp.maximum(weight_sum, 1.0), (loss_sum, weight_sum, hits)

    return loss_fn


def make_train_step(
    loss_fn: Callable, optimizer: optax.GradientTransformation, base_key: jax.Array
) -> Callable:
    """Jitted ``(params, opt_state, batch, step) -> (params, opt_state, loss)`` with donated state.

    Dropout keys are ``fold_in(base_key, step)``, so a step's randomness depends only on its index.
    """

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def train_step(params, opt_state, batch: Batch, step):
        dropout_rng = jax.random.fold_in(base_key, step)
        (loss, _), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            params, batch, dropout_rng, False
        )
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return train_step


def init_params(model: nn.Module, arch: str, example: Batch, seed: int) -> Any:
    """Unboxed float parameters of ``model`` for inputs shaped like ``example``."""
    variables = model.init(
        {"params": jax.random.key(seed), "dropout": jax.random.key(seed + 1)},
        *synthetic.model_inputs(arch, example),
    )
    return nn.unbox(variables["params"])


class SyntheticIterator:
    """The reversal task's endless batch stream; batch i is drawn from ``default_rng([seed, i])``
    so the stream position is its whole state (``get_state``/``set_state`` like grain's)."""

    def __init__(self, make: Callable[[np.random.Generator], dict], seed: int):
        self._make, self._seed, self._next = make, seed, 0

    def __iter__(self) -> SyntheticIterator:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        batch = self._make(np.random.default_rng([self._seed, self._next]))
        self._next += 1
        return batch

    def get_state(self) -> dict[str, int]:
        return {"next_index": self._next}

    def set_state(self, state: dict[str, int]) -> None:
        self._next = int(state["next_index"])


class SyntheticData:
    """The reversal task behind the same interface as ``pipeline.DataPipeline``."""

    def __init__(self, config: ml_collections.ConfigDict):
        self._make = functools.partial(
            synthetic.batch,
            config.model.arch,
            config.data.batch_size,
            config.model.vocab_size,
            config.data.max_len,
        )
        self._seed = config.seed
        self._eval_batches = config.eval_batches

    def train_iterator(self) -> SyntheticIterator:
        return SyntheticIterator(self._make, self._seed)

    def eval_batches(self) -> Iterator[dict[str, np.ndarray]]:
        rng = np.random.default_rng(self._seed + 10_000)
        for _ in range(self._eval_batches):
            yield self._make(rng)


class CorpusData:
    """A real corpus (prepared if missing) through the grain pipeline."""

    def __init__(self, config: ml_collections.ConfigDict):
        options = pipeline.DataOptions.from_config(config.data, config.seed)
        self.pipeline = pipeline.DataPipeline(options, config.model.arch)
        if config.model.vocab_size < self.pipeline.vocab_size:  # char: known only now
            raise ValueError(
                f"model.vocab_size={config.model.vocab_size} is smaller than the tokenizer's "
                f"{self.pipeline.vocab_size} pieces (data.vocab_size={options.vocab_size})"
            )
        self.pipeline.check_split("validation")  # fail now, not after training

    def train_iterator(self):
        """grain's iterator: ``next`` gives a batch; ``get_state``/``set_state`` its position."""
        return iter(self.pipeline.train_dataset())

    def eval_batches(self) -> Iterator[dict[str, np.ndarray]]:
        return self.pipeline.eval_batches("validation")


def make_data(config: ml_collections.ConfigDict) -> SyntheticData | CorpusData:
    return SyntheticData(config) if config.data.dataset == SYNTHETIC else CorpusData(config)


def run(config: ml_collections.ConfigDict, workdir: str | None = None) -> dict[str, float]:
    """Train for ``config.total_steps`` updates with a progress bar, then evaluate.

    With a ``workdir`` and ``checkpoint_every`` > 0, checkpoints (train state, data position,
    config) are saved every ``checkpoint_every`` updates and at the end; a workdir that already
    holds checkpoints resumes from the newest one, continuing exactly where it stopped.
    """
    validate(config)
    model = models.build(config.model)
    arch = config.model.arch
    data = make_data(config)
    train_batches = data.train_iterator()
    start_state = train_batches.get_state()
    example = next(train_batches)  # shapes for init; the stream is rewound below
    train_batches.set_state(start_state)
    params = init_params(model, arch, example, config.seed)
    optimizer = make_optimizer(config)
    opt_state = optimizer.init(params)
    loss_fn = make_loss_fn(model, arch, config.label_smoothing)
    base_key = jax.random.key(config.seed + 2)
    train_step = make_train_step(loss_fn, optimizer, base_key)

    checkpointer = None
    start = 0
    if workdir and config.checkpoint_every:
        checkpointer = checkpoint.Checkpointer(workdir, config.checkpoint_every, config.max_to_keep)
        latest = checkpointer.latest_step()
        if latest is not None:
            target = {"params": params, "opt_state": opt_state, "step": np.asarray(0, np.int64)}
            state, data_state = checkpointer.restore(latest, target)
            params, opt_state, start = state["params"], state["opt_state"], int(state["step"])
            train_batches.set_state(data_state)
            print(f"resuming from {checkpointer.directory}/{latest} (step {start})")

    eval_loss_fn = make_loss_fn(model, arch, 0.0)  # evaluation reports the plain NLL

    @jax.jit
    def eval_step(params, batch):
        return eval_loss_fn(params, batch, base_key, True)[1]

    def evaluate(params) -> dict[str, float]:
        totals = np.zeros(3)
        for eval_batch in data.eval_batches():
            totals += np.array(jax.device_get(eval_step(params, eval_batch)))
        nll = totals[0] / totals[1]
        return {"loss": nll, "perplexity": float(np.exp(nll)), "accuracy": totals[2] / totals[1]}

    writer = metrics_lib.MetricsWriter(workdir) if workdir else None
    schedule = learning_rate_schedule(config)
    # One call per micro-batch; with grad_accum_steps = k, every k-th call updates the params.
    k = config.grad_accum_steps
    micro_steps = config.total_steps * k
    bar = tqdm(range(start, micro_steps), desc="train", unit="batch", initial=start)
    first_loss = last_loss = None
    pending = None  # the previous step's loss, read one step late (no sync per step)
    losses_seen, tokens, tick = [], 0.0, time.perf_counter()
    for step in bar:
        batch = next(train_batches)
        params, opt_state, loss = train_step(params, opt_state, batch, step)
        if pending is not None:
            losses_seen.append(float(pending))
        pending = loss
        tokens += float(np.sum(batch["weights"]))
        if first_loss is None:
            first_loss = float(loss)
        updates, boundary = (step + 1) // k, (step + 1) % k == 0
        last = step + 1 == micro_steps
        if (step + 1) % config.log_every == 0 or last:
            losses_seen.append(float(pending))
            pending = None
            elapsed = time.perf_counter() - tick
            last_loss = float(np.mean(losses_seen))
            record = {
                "loss": last_loss,
                "lr": float(schedule(max(updates - 1, 0))),
                "tokens_per_s": tokens / elapsed,
                "step_time_s": elapsed / len(losses_seen),
            }
            bar.set_postfix(
                loss=f"{last_loss:.3f}", lr=f"{record['lr']:.2e}", tok_s=f"{tokens / elapsed:.0f}"
            )
            if writer:
                writer.write("train", updates, record)
            losses_seen, tokens, tick = [], 0.0, time.perf_counter()
        if boundary and config.eval_every and updates % config.eval_every == 0 and not last:
            result = evaluate(params)
            tqdm.write(f"step {updates}: validation loss {result['loss']:.3f}")
            if writer:
                writer.write("eval", updates, result)
        if checkpointer and boundary and (updates % config.checkpoint_every == 0 or last):
            state = {
                "params": params,
                "opt_state": opt_state,
                "step": np.asarray(step + 1, np.int64),
            }
            checkpointer.save(step + 1, state, train_batches.get_state(), config)
    if checkpointer:
        checkpointer.close()
    result = evaluate(params)
    if writer:
        writer.write("eval", config.total_steps, result)
    metrics = {
        "eval_loss": result["loss"],
        "eval_perplexity": result["perplexity"],
        "eval_accuracy": result["accuracy"],
        "first_train_loss": first_loss,
        "train_loss": last_loss,
        "steps": config.total_steps,
    }
    print(json.dumps(metrics))
    if workdir:
        os.makedirs(workdir, exist_ok=True)
        with open(os.path.join(workdir, "eval.json"), "w") as f:
            json.dump(metrics, f)
    return metrics
