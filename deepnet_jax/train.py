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
from collections.abc import Callable, Iterator
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from tqdm import tqdm

from deepnet_jax import losses, models, synthetic
from deepnet_jax.data import pipeline, sources

Batch = dict[str, jax.Array]
SYNTHETIC = "synthetic_reversal"
DATASETS = (SYNTHETIC, *sources.DATASETS)
SCHEDULES = ("inverse_sqrt", "constant")


def validate(config: ml_collections.ConfigDict) -> None:
    """One clear error for the first invalid training field (the model is checked by build)."""
    if config.data.dataset not in DATASETS:
        raise ValueError(f"data.dataset={config.data.dataset!r}; allowed values are {DATASETS}")
    if config.schedule.name not in SCHEDULES:
        raise ValueError(f"schedule.name={config.schedule.name!r}; allowed values are {SCHEDULES}")
    for name in ("total_steps", "data.batch_size", "eval_batches", "log_every"):
        if name == "eval_batches" and config.data.dataset != SYNTHETIC:
            continue  # real corpora are evaluated on their whole validation split
        value = functools.reduce(getattr, name.split("."), config)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be an integer >= 1")
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


def learning_rate_schedule(config: ml_collections.ConfigDict) -> optax.Schedule:
    """fairseq's inverse_sqrt: linear warm-up from warmup_init_lr to lr, then lr·√(w/step)."""
    lr, s = config.optimizer.learning_rate, config.schedule
    if s.name == "constant":
        return optax.constant_schedule(lr)
    warmup = optax.linear_schedule(s.warmup_init_lr, lr, s.warmup_steps)

    def decay(step):  # join_schedules passes steps counted from the end of warm-up
        return lr * jnp.sqrt(s.warmup_steps / jnp.maximum(step + s.warmup_steps, 1))

    return optax.join_schedules([warmup, decay], [s.warmup_steps])


def make_optimizer(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
    o = config.optimizer
    return optax.chain(
        optax.clip_by_global_norm(o.grad_clip) if o.grad_clip else optax.identity(),
        optax.adamw(
            learning_rate_schedule(config), b1=o.b1, b2=o.b2, eps=o.eps, weight_decay=o.weight_decay
        ),
    )


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

    def train_iterator(self) -> Iterator[dict[str, np.ndarray]]:
        rng = np.random.default_rng(self._seed)
        while True:
            yield self._make(rng)

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

    def train_iterator(self) -> Iterator[dict[str, np.ndarray]]:
        return iter(self.pipeline.train_dataset())

    def eval_batches(self) -> Iterator[dict[str, np.ndarray]]:
        return self.pipeline.eval_batches("validation")


def make_data(config: ml_collections.ConfigDict) -> SyntheticData | CorpusData:
    return SyntheticData(config) if config.data.dataset == SYNTHETIC else CorpusData(config)


def run(config: ml_collections.ConfigDict, workdir: str | None = None) -> dict[str, float]:
    """Train for ``config.total_steps`` with a progress bar, then evaluate on held-out batches."""
    validate(config)
    model = models.build(config.model)
    arch = config.model.arch
    data = make_data(config)
    train_batches = data.train_iterator()
    first_batch = next(train_batches)
    params = init_params(model, arch, first_batch, config.seed)
    optimizer = make_optimizer(config)
    opt_state = optimizer.init(params)
    loss_fn = make_loss_fn(model, arch, config.label_smoothing)
    base_key = jax.random.key(config.seed + 2)

    train_step = make_train_step(loss_fn, optimizer, base_key)

    @jax.jit
    def eval_step(params, batch):
        return loss_fn(params, batch, base_key, True)[1]

    bar = tqdm(range(config.total_steps), desc="train", unit="step")
    first_loss = None
    batch = first_batch
    for step in bar:
        params, opt_state, loss = train_step(params, opt_state, batch, step)
        if first_loss is None:
            first_loss = float(loss)
        if (step + 1) % config.log_every == 0 or step + 1 == config.total_steps:
            bar.set_postfix(loss=f"{float(loss):.3f}")
        if step + 1 < config.total_steps:
            batch = next(train_batches)
    totals = np.zeros(3)
    for eval_batch in data.eval_batches():
        totals += np.array(jax.device_get(eval_step(params, eval_batch)))
    metrics = {
        "eval_loss": totals[0] / totals[1],
        "eval_accuracy": totals[2] / totals[1],
        "first_train_loss": first_loss,
        "train_loss": float(loss),
        "steps": config.total_steps,
    }
    print(json.dumps(metrics))
    if workdir:
        os.makedirs(workdir, exist_ok=True)
        with open(os.path.join(workdir, "eval.json"), "w") as f:
            json.dump(metrics, f)
    return metrics
