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
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from tqdm import tqdm

from deepnet_jax import (
    checkpoint,
    diagnostics,
    distributed,
    evaluation,
    flops,
    inference,
    losses,
    models,
    plots,
    preemption,
    sharding,
    source_sensitivity,
    synthetic,
    train_config,
)
from deepnet_jax import metrics as metrics_lib
from deepnet_jax import workdir as workdir_lib
from deepnet_jax.data import DataPreparationError, pipeline, sources

Batch = dict[str, jax.Array]
SYNTHETIC = "synthetic_reversal"
DATASETS = (SYNTHETIC, *sources.DATASETS)
SCHEDULES = ("inverse_sqrt", "polynomial", "linear", "cosine", "constant")
OPTIMIZERS = ("adamw",)
NAN_POLICIES = ("halt", "skip")


class NonFiniteError(RuntimeError):
    """Training stopped on a non-finite loss or gradient (``nan_policy``) at micro-step
    ``step`` (1-based)."""

    def __init__(self, message: str, step: int):
        super().__init__(message)
        self.step = step


def validate(config: ml_collections.ConfigDict, device_count: int | None = None) -> None:
    """One clear error for the first invalid training field (the model is checked by build).

    ``device_count``: the devices the mesh spans (default: all).
    """
    train_config.check_fields(config)  # typos and missing fields first
    models.build(config.model)  # the model's own checks, before any data is prepared
    if config.model.attention_impl == "cudnn" and jax.default_backend() != "gpu":
        raise ValueError(
            f"model.attention_impl='cudnn' needs a GPU; this backend is "
            f"{jax.default_backend()!r}: allowed here are 'reference' and 'xla'"
        )
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
    _validate_run_fields(config)
    diagnostics.validate(config.diagnostics)
    sharding.logical_axis_rules(config.mesh)
    device_count = jax.device_count() if device_count is None else device_count
    dp = sharding.mesh_shape(config.mesh, device_count)
    dp = dp[0] * dp[1]  # data × fsdp: the devices a batch's rows are split over
    if config.data.dataset == SYNTHETIC and config.data.batch_size % dp:
        raise ValueError(
            f"data.batch_size={config.data.batch_size} does not divide over the {dp} "
            "data-parallel devices (mesh.data × mesh.fsdp)"
        )
    if config.data.dataset == SYNTHETIC:
        if config.final_split:
            raise ValueError(
                f"final_split={config.final_split!r} needs a corpus; data.dataset="
                f"{SYNTHETIC!r} is evaluated on its held-out batches (use final_split='')"
            )
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


def _validate_run_fields(config: ml_collections.ConfigDict) -> None:
    """Decoding options, the final split and the MFU peak."""
    d = config.decode
    inference.search_options(config).validate(prefix="decode.")
    for name in ("batch_size", "eval_sentences", "num_samples"):
        value, low = d[name], 1 if name == "batch_size" else 0
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"decode.{name}={value!r} must be an integer >= {low}")
    if config.final_split not in ("", *sources.SPLITS):
        raise ValueError(
            f"final_split={config.final_split!r}; allowed values are {('', *sources.SPLITS)}"
        )
    if config.nan_policy not in NAN_POLICIES:
        raise ValueError(f"nan_policy={config.nan_policy!r}; allowed values are {NAN_POLICIES}")
    m = config.nan_max_skips
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ValueError(f"nan_max_skips={m!r} must be an integer >= 1")
    if not config.peak_flops >= 0:
        raise ValueError(f"peak_flops={config.peak_flops!r} must be >= 0 (0: table or measured)")


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


def make_loss_fn(model: nn.Module, arch: str, label_smoothing: float = 0.0) -> Callable:
    """Build ``loss_fn(params, batch, dropout_rng, deterministic)``.

    It returns ``(mean loss, sums)``: the mean (label-smoothed) loss over non-padding target
    tokens, and float32 sums ``loss_sum`` (smoothed), ``nll_sum`` (plain cross-entropy),
    ``weight`` (target tokens) and ``correct`` (argmax hits) that add up across micro-batches
    and devices exactly.
    """

    def loss_fn(params, batch: Batch, dropout_rng: jax.Array, deterministic: bool):
        logits = model.apply(
            {"params": params},
            *synthetic.model_inputs(arch, batch),
            deterministic=deterministic,
            rngs={"dropout": dropout_rng},
            **pipeline.model_kwargs(batch),
        )
        targets, weights = batch["targets"], batch["weights"]
        loss_sum, weight = losses.cross_entropy(logits, targets, weights, label_smoothing)
        nll_sum = losses.cross_entropy(logits, targets, weights)[0] if label_smoothing else loss_sum
        sums = {
            "loss_sum": loss_sum,
            "nll_sum": nll_sum,
            "weight": weight,
            "correct": losses.accuracy(logits, targets, weights),
        }
        return loss_sum / jnp.maximum(weight, 1.0), sums

    return loss_fn


def make_train_step(
    loss_fn: Callable,
    optimizer: optax.GradientTransformation,
    base_key: jax.Array,
    layer_grad_norms: bool = False,
) -> Callable:
    """Jitted ``(params, opt_state, batch, step, learning_rate) -> (params, opt_state,
    metrics)``, donating the state; ``learning_rate`` (a float32 scalar: the update's entry of
    :func:`learning_rates`) goes to ``optimizer.update`` as its keyword argument.

    Dropout keys are ``fold_in(base_key, step)``, so a step's randomness depends only on its
    index. ``metrics`` holds the loss function's sums plus ``loss`` (the optimized mean),
    ``grad_norm`` (global L2 norm of this micro-batch's gradient), ``update_norm`` (of the
    applied update; 0 on micro-steps that only accumulate) and ``param_norm`` (after the step).
    With ``layer_grad_norms``, ``metrics["layer_grad_norm"]`` holds each sublayer type's
    per-layer gradient norms (``diagnostics.layer_grad_norms``, [L] each).
    A batch entry ``preemption.STOP_KEY`` (int32 [B], each process's stop flag on its rows) is
    not fed to the model; its max over the global batch comes back as the metric of that name.
    """

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def train_step(params, opt_state, batch: Batch, step, learning_rate):
        batch = dict(batch)
        stop = batch.pop(preemption.STOP_KEY, None)
        dropout_rng = jax.random.fold_in(base_key, step)
        (loss, sums), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            params, batch, dropout_rng, False
        )
        updates, opt_state = optimizer.update(grads, opt_state, params, learning_rate=learning_rate)
        params = optax.apply_updates(params, updates)
        metrics = {
            **sums,
            "loss": loss,
            "grad_norm": optax.tree.norm(grads),
            "update_norm": optax.tree.norm(updates),
            "param_norm": optax.tree.norm(params),
        }
        if layer_grad_norms:
            metrics["layer_grad_norm"] = diagnostics.layer_grad_norms(grads)
        if stop is not None:  # any process's stop flag, the same on all (an all-reduce)
            metrics[preemption.STOP_KEY] = jnp.max(stop)
        return params, opt_state, metrics

    return train_step


def make_eval_step(model: nn.Module, arch: str) -> Callable:
    """Jitted ``(params, batch) -> sums`` of the plain (unsmoothed) NLL, without dropout.

    For an encoder-decoder the sums also hold ``shifted_nll_sum``: the NLL of the same targets
    with each row's source swapped for another row's (:mod:`deepnet_jax.source_sensitivity`).
    """
    loss_fn = make_loss_fn(model, arch, 0.0)

    @jax.jit
    def eval_step(params, batch: Batch):
        sums = loss_fn(params, batch, jax.random.key(0), True)[1]
        if arch == "encdec":
            shifted = source_sensitivity.with_shifted_sources(batch)
            sums["shifted_nll_sum"] = loss_fn(params, shifted, jax.random.key(0), True)[1][
                "nll_sum"
            ]
        return sums

    return eval_step


def split_loss(eval_step: Callable, params: Any, batches: Iterator[Batch]) -> dict[str, float]:
    """Token-weighted NLL (``loss``), ``perplexity`` = exp(loss) and ``accuracy`` over all
    ``batches`` (placed on the devices) of a split; for an encoder-decoder also
    ``source_sensitivity`` (nats per target token the NLL rises by when sources are swapped
    between rows)."""
    sums: dict[str, float] = {}
    for batch in batches:
        out = jax.device_get(eval_step(params, batch))
        for key in ("nll_sum", "weight", "correct", "shifted_nll_sum"):
            if key in out:
                sums[key] = sums.get(key, 0.0) + float(out[key])
    if not sums.get("weight"):
        raise ValueError("the evaluation split has no target tokens")
    nll = sums["nll_sum"] / sums["weight"]
    result = {
        "loss": nll,
        "perplexity": float(np.exp(min(nll, 50.0))),
        "accuracy": sums["correct"] / sums["weight"],
    }
    if "shifted_nll_sum" in sums:
        result["source_sensitivity"] = source_sensitivity.per_token(
            sums["nll_sum"], sums["shifted_nll_sum"], sums["weight"]
        )
    return result


def _nbytes(tree: Any) -> int:
    """Bytes of the arrays (or shape/dtype structs) of ``tree``."""
    return sum(int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


def init_params(model: nn.Module, arch: str, example: Batch, seed: int) -> Any:
    """Unboxed float parameters of ``model`` for inputs shaped like ``example``."""
    return nn.unbox(synthetic.init_variables(model, arch, example, seed)["params"])


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
    """The reversal task behind the same interface as ``pipeline.DataPipeline``.

    Every process draws the same global batch and keeps its own contiguous share of the rows
    (as the corpus pipeline does), so a run's batches do not depend on the process count.
    """

    def __init__(self, config: ml_collections.ConfigDict):
        make_global = functools.partial(
            synthetic.batch,
            config.model.arch,
            config.data.batch_size,
            config.model.vocab_size,
            config.data.max_len,
        )
        n, i = jax.process_count(), jax.process_index()
        rows = config.data.batch_size // n

        def make(rng: np.random.Generator) -> dict[str, np.ndarray]:
            batch = make_global(rng)
            return {k: v[i * rows : (i + 1) * rows] for k, v in batch.items()}

        self._make = make
        self._seed = config.seed
        self._eval_batches = config.eval_batches

    def train_iterator(self) -> SyntheticIterator:
        return SyntheticIterator(self._make, self._seed)

    def eval_batches(self, split: str = "validation") -> Iterator[dict[str, np.ndarray]]:
        """The held-out batches (the task has one held-out set, whatever ``split`` says)."""
        rng = np.random.default_rng(self._seed + 10_000)
        for _ in range(self._eval_batches):
            yield self._make(rng)


class CorpusData:
    """A real corpus (prepared if missing) through the grain pipeline."""

    def __init__(self, config: ml_collections.ConfigDict, row_multiple: int = 1):
        options = pipeline.DataOptions.from_config(config.data, config.seed)
        self.pipeline = pipeline.DataPipeline(options, config.model.arch, row_multiple=row_multiple)
        if config.model.vocab_size < self.pipeline.vocab_size:  # char: known only now
            raise ValueError(
                f"model.vocab_size={config.model.vocab_size} is smaller than the tokenizer's "
                f"{self.pipeline.vocab_size} pieces (data.vocab_size={options.vocab_size})"
            )
        self.pipeline.check_split("validation")  # fail now, not after training
        if config.final_split:
            self.pipeline.check_split(config.final_split)

    @property
    def translates(self) -> bool:
        return self.pipeline.task == "translation"

    def train_iterator(self):
        """grain's iterator: ``next`` gives a batch; ``get_state``/``set_state`` its position."""
        return iter(self.pipeline.train_dataset())

    def eval_batches(self, split: str = "validation") -> Iterator[dict[str, np.ndarray]]:
        return self.pipeline.eval_batches(split)


def make_data(
    config: ml_collections.ConfigDict, row_multiple: int = 1
) -> SyntheticData | CorpusData:
    """The run's data; every batch's row count divides over ``row_multiple`` devices."""
    if config.data.dataset == SYNTHETIC:
        return SyntheticData(config)
    return CorpusData(config, row_multiple)


class Interval:
    """Host-side sums of the per-step metrics between two log lines."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.steps = 0
        self.updates = 0
        self.update_norm = 0.0
        self.param_norm = 0.0
        self.flops = 0.0
        self.skipped = 0  # steps with a non-finite loss or gradient (nan_policy="skip")
        self.start = time.perf_counter()

    def add(self, metrics: dict[str, Any], boundary: bool, flops: float) -> None:
        for k in ("loss_sum", "nll_sum", "weight", "correct", "grad_norm"):
            self.sums[k] = self.sums.get(k, 0.0) + float(metrics[k])
        self.steps += 1
        self.flops += flops
        if boundary:
            self.updates += 1
            self.update_norm += float(metrics["update_norm"])
            self.param_norm = float(metrics["param_norm"])

    def record(self, lr: float, peak_flops_per_s: float) -> dict[str, float]:
        elapsed = time.perf_counter() - self.start
        sums = {k: self.sums.get(k, 0.0) for k in ("loss_sum", "nll_sum", "weight", "correct")}
        w = max(sums["weight"], 1.0)
        nll = sums["nll_sum"] / w
        steps = max(self.steps, 1)
        return {
            "loss": sums["loss_sum"] / w,
            "nll": nll,
            "perplexity": float(np.exp(min(nll, 50.0))),
            "accuracy": sums["correct"] / w,
            "lr": lr,
            "grad_norm": self.sums.get("grad_norm", 0.0) / steps,
            "update_norm": self.update_norm / max(self.updates, 1),
            "param_norm": self.param_norm,
            "tokens_per_s": sums["weight"] / elapsed,
            "step_time_s": elapsed / (self.steps + self.skipped or 1),
            "mfu": self.flops / elapsed / peak_flops_per_s,
            "skipped_steps": self.skipped,
        }


SOURCE_BLIND_NATS = 0.1  # source sensitivity below this after the warm-up: a warning


def source_blind_warning(result: dict[str, Any], updates: int, warmup_steps: int) -> str:
    """A one-line warning when, past the warm-up, the validation NLL barely depends on the
    source (``source_sensitivity`` < 0.1 nats per target token); else ``""``."""
    sensitivity = result.get("source_sensitivity")
    if sensitivity is None or updates <= warmup_steps or sensitivity >= SOURCE_BLIND_NATS:
        return ""
    return (
        f"warning: source sensitivity {sensitivity:.3f} nats at update {updates} (< "
        f"{SOURCE_BLIND_NATS} after the warm-up): the decoder is ignoring its source, "
        "predicting targets from the target prefix alone"
    )


def say(message: str) -> None:
    """Print on process 0 only (above the progress bar); other processes stay quiet."""
    if jax.process_index() == 0:
        tqdm.write(message)


def _log_line(step: int, total: int, r: dict[str, float]) -> str:
    return (
        f"step {step}/{total} | loss {r['loss']:.3f} | nll {r['nll']:.3f} | "
        f"acc {r['accuracy']:.3f} | lr {r['lr']:.2e} | gnorm {r['grad_norm']:.2f} | "
        f"{r['tokens_per_s']:.0f} tok/s | {r['step_time_s'] * 1e3:.0f} ms/step | "
        f"mfu {100 * r['mfu']:.1f}%"
    )


# What train.py reports as a one-line error: bad configs and environments, not bugs.
USER_ERRORS = (
    ValueError,
    OSError,
    DataPreparationError,
    NonFiniteError,
    checkpoint.CheckpointError,
)


def main(config: ml_collections.ConfigDict, workdir: str | None) -> int:
    """``train.py``'s body: :func:`run`, with the exit status a launcher expects.

    0 when training completes or a stop signal ends it with its checkpoint written; 1 with a
    one-line ``error: ...`` on stderr (no traceback) for a bad config or environment, a
    non-finite loss, or checkpoints that cannot be restored.
    """
    try:
        run(config, workdir)
    except USER_ERRORS as e:
        print("error: " + " ".join(str(e).split()), file=sys.stderr, flush=True)
        return 1
    return 0


def _diagnostics_record(
    model_update: float, ln_inputs: dict[str, Any], layer_grads: dict[str, Any]
) -> dict[str, Any]:
    """A ``split: "diagnostics"`` record: ``model_update``, ``ln_input/<side>/<ln>`` [L] and
    ``grad_norm/<side>/<sublayer>`` [L]."""
    record: dict[str, Any] = {"model_update": model_update}
    record.update({f"ln_input/{k}": v for k, v in jax.device_get(ln_inputs).items()})
    record.update({f"grad_norm/{k}": v for k, v in layer_grads.items()})
    return record


def _stopped(
    config: ml_collections.ConfigDict,
    workdir: str | None,
    checkpointer: checkpoint.Checkpointer | None,
    writer: metrics_lib.MetricsWriter | None,
    signal_name: str | None,
    step: int,
) -> dict[str, Any]:
    """End a run stopped by a signal: wait for the checkpoint of ``step`` micro-batches to be
    written, say where it is, and return ``{"stopped": True, ...}``."""
    cause = signal_name or "a signal to another process"
    updates = step // config.grad_accum_steps
    if checkpointer:
        checkpointer.close()  # the asynchronous saves are complete on disk
        where = f"checkpoint {os.path.join(checkpointer.directory, str(step))} saved"
        line = f"stopped by {cause} after update {updates}/{config.total_steps}; {where}; "
        line += "run the same command again to resume"
    else:
        reason = "no workdir" if not workdir else "checkpoint_every=0"
        line = (
            f"stopped by {cause} after update {updates}/{config.total_steps}; "
            f"nothing saved ({reason})"
        )
    if writer:
        writer.close()
    say(line)
    return {"stopped": True, "message": line, "step": step, "steps": updates}


def run(
    config: ml_collections.ConfigDict,
    workdir: str | None = None,
    devices: Sequence[jax.Device] | None = None,
) -> dict[str, Any]:
    """Train for ``config.total_steps`` updates with a progress bar, then evaluate.

    With a ``workdir``: metrics go to ``metrics.jsonl`` and TensorBoard files, the curves to
    ``curves.png``, the final results to ``eval.json``, and (``checkpoint_every`` > 0)
    checkpoints (train state, data position, config) every ``checkpoint_every`` updates and at
    the end, plus ``best/`` holding the parameters with the best validation score (greedy BLEU
    for translation with ``decode.eval_sentences`` > 0, else loss). A workdir that already
    holds checkpoints resumes from the newest one, continuing exactly where it stopped.

    ``devices``: the devices the mesh spans (default: all of them, every process's); a subset
    is for single-process runs (e.g. comparing a 1-device run with a sharded one).

    A SIGTERM or SIGINT during training ends it after the step in flight (the same step on
    every process) with a checkpoint, and returns ``{"stopped": True, "message", "step",
    "steps"}`` instead of the evaluation; a newest checkpoint that cannot be restored is
    reported and set aside for the previous one (see ``checkpoint.Checkpointer.restore_newest``).
    """
    distributed.initialize(config.distributed)  # before anything touches a backend
    devices = jax.devices() if devices is None else list(devices)
    validate(config, len(devices))
    if workdir:
        workdir_lib.check_writable(workdir)
    mesh = sharding.make_mesh(config.mesh, devices)
    rules = sharding.logical_axis_rules(config.mesh)
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        return _run(config, workdir, mesh, rules)


def _run(config: ml_collections.ConfigDict, workdir: str | None, mesh, rules) -> dict[str, Any]:
    model = models.build(config.model)
    arch = config.model.arch
    data = make_data(config, sharding.data_parallel_size(mesh))
    translates = isinstance(data, CorpusData) and data.translates
    rows = sharding.batch_sharding(mesh)

    def place(local_batch: dict[str, np.ndarray]) -> Batch:
        """This process's rows → global arrays split over the data-parallel devices."""
        return pipeline.global_batch(local_batch, rows)

    train_batches = data.train_iterator()
    start_state = train_batches.get_state()
    example = next(train_batches)  # shapes for init; the stream is rewound below
    train_batches.set_state(start_state)
    optimizer = make_optimizer(config)
    plan = sharding.sharded_state(
        lambda: synthetic.init_variables(model, arch, example, config.seed),
        optimizer.init,
        mesh,
        rules,
    )
    checkpointer = None
    start = 0
    best = None
    if workdir and config.checkpoint_every:
        workdir_lib.check_free_space(
            workdir,
            workdir_lib.checkpoint_bytes_needed(
                _nbytes(plan.abstract), _nbytes(plan.abstract["params"]), config.max_to_keep
            ),
        )
        checkpointer = checkpoint.Checkpointer(workdir, config.checkpoint_every, config.max_to_keep)
        target = {**plan.abstract, "step": np.asarray(0, np.int64)}  # nothing allocated
        restored = checkpointer.restore_newest(target, warn=lambda m: say(f"warning: {m}"))
        if restored is not None:
            latest, state, data_state = restored
            params, opt_state, start = state["params"], state["opt_state"], int(state["step"])
            train_batches.set_state(data_state)
            best = checkpointer.best_score()
            say(f"resuming from {checkpointer.directory}/{latest} (step {start})")
    loss_fn = make_loss_fn(model, arch, config.label_smoothing)
    base_key = jax.random.key(config.seed + 2)
    instruments = config.diagnostics.every  # updates between stability measurements; 0: off
    train_step = make_train_step(loss_fn, optimizer, base_key, layer_grad_norms=bool(instruments))
    k = config.grad_accum_steps  # micro-batches per optimizer update

    if start == 0:
        params, opt_state = plan.create()
    if workdir and isinstance(data, CorpusData) and jax.process_index() == 0:
        os.makedirs(workdir, exist_ok=True)  # the tokenizer travels with the run
        shutil.copyfile(data.pipeline.tokenizer_path, inference.tokenizer_path(workdir))

    eval_step = make_eval_step(model, arch)

    def evaluate(params, split: str = "validation") -> dict[str, float]:
        return split_loss(eval_step, params, map(place, data.eval_batches(split)))

    def translation_scores(params, split: str, beam_size: int, limit: int) -> dict[str, Any]:
        pairs = data.pipeline.translation_set(split)
        options = inference.search_options(config, beam_size)
        hyps, scores = evaluation.translate_split(
            model, params, data.pipeline.tokenizer, pairs, options, config.decode.batch_size, limit
        )
        for i in range(min(config.decode.num_samples, len(hyps))):
            say(f"  src: {pairs.sources[i]}\n  ref: {pairs.references[i]}\n  hyp: {hyps[i]}")
        scores["samples"] = [
            {"source": pairs.sources[i], "reference": pairs.references[i], "hypothesis": hyps[i]}
            for i in range(min(config.decode.num_samples, len(hyps)))
        ]
        return scores

    validation_bleu = translates and config.decode.eval_sentences > 0

    def validate_now(params, updates: int) -> dict[str, Any]:
        """Validation loss (+ greedy BLEU); keeps the best parameters in ``best/``."""
        nonlocal best
        result = evaluate(params)
        line = (
            f"step {updates}: validation loss {result['loss']:.3f}, ppl {result['perplexity']:.1f}"
        )
        if "source_sensitivity" in result:
            line += f", source sensitivity {result['source_sensitivity']:.2f} nats"
        if validation_bleu:
            scores = translation_scores(params, "validation", 1, config.decode.eval_sentences)
            result.update(
                bleu=scores["bleu"],
                chrf=scores["chrf"],
                bleu_sentences=scores["sentences"],
                distinct_hypotheses=scores["distinct_hypotheses"],
            )
            line += (
                f", greedy BLEU {scores['bleu']:.2f} ({scores['sentences']} sentences, "
                f"{scores['distinct_hypotheses']:.0%} distinct)"
            )
        say(line)
        warning = source_blind_warning(result, updates, config.schedule.warmup_steps)
        if warning:
            say(warning)
        score = result["bleu"] if validation_bleu else -result["loss"]
        if checkpointer and (best is None or score > best):
            best = score
            checkpointer.save_best(updates * k, params, score)
        if writer:
            writer.write("eval", updates, result)
        return result

    writer = metrics_lib.MetricsWriter(workdir) if workdir else None
    if writer:  # what a crashed run logged after this checkpoint (all of it, if none) is redone
        writer.rewind(start // k, keep_final=0 < start < config.total_steps * k)
    latest_layer_grads: dict[str, Any] = {}  # the last read step's, with the instruments on
    if instruments:  # F(x; θ_0) on the probe batch (θ_0 initialized again on resume)
        probe = diagnostics.make_probe(model, arch)
        update_size = jax.jit(diagnostics.model_update)
        probe_batch = place(next(iter(data.eval_batches("validation"))))
        features_0, ln_inputs_0 = probe(params if start == 0 else plan.create()[0], probe_batch)
        if writer and start == 0:
            writer.write("diagnostics", 0, _diagnostics_record(0.0, ln_inputs_0, {}))

    def measure(updates: int) -> None:
        """Model update, LN inputs (probe batch) and this step's layer gradient norms (of its
        last micro-batch with gradient accumulation)."""
        features, ln_inputs = probe(params, probe_batch)
        delta = float(update_size(features, features_0, probe_batch["inputs"]))
        if writer:
            record = _diagnostics_record(delta, ln_inputs, latest_layer_grads)
            writer.write("diagnostics", updates, record)

    lrs = learning_rates(config)  # one entry per optimizer update
    peak, peak_source = flops.peak_flops_per_device(config.peak_flops)
    peak_total = peak * mesh.size
    say(f"MFU is measured against {peak / 1e12:.3g} TFLOP/s per device ({peak_source})")
    micro_steps = config.total_steps * k
    bar = tqdm(
        range(start, micro_steps),
        desc="train",
        unit="batch",
        initial=start,
        disable=jax.process_index() != 0,
    )
    first_loss = None
    last_record: dict[str, float] = {}
    pending = None  # the previous step's metrics, read one step late (no sync per step)
    interval = Interval()
    skipped_in_a_row = 0
    stop_agreed = False  # a stop signal reached some process: every process stops

    def read(pending) -> None:
        """Bring a step's metrics to the host: check them (``nan_policy``), then sum them."""
        nonlocal skipped_in_a_row, stop_agreed
        metrics, boundary, step_flops, index = pending
        host = jax.device_get(metrics)
        stop_agreed |= bool(host.pop(preemption.STOP_KEY, 0))
        if "layer_grad_norm" in host:
            latest_layer_grads.clear()
            latest_layer_grads.update(host.pop("layer_grad_norm"))
        bad = [n for n in ("loss", "grad_norm") if not np.isfinite(float(host[n]))]
        if not bad:
            skipped_in_a_row = 0
            interval.add(host, boundary, step_flops)
            return
        skipped_in_a_row += 1
        interval.skipped += 1
        if config.nan_policy == "skip" and skipped_in_a_row < config.nan_max_skips:
            say(f"step {index + 1}: non-finite {bad[0]}={float(host[bad[0]])}; update skipped")
            return
        message = f"step {index + 1}: non-finite {bad[0]}={float(host[bad[0]])} " + (
            "(nan_policy='halt')"
            if config.nan_policy == "halt"
            else f"in {skipped_in_a_row} steps in a row (nan_policy='skip', "
            f"nan_max_skips={config.nan_max_skips})"
        )
        if workdir:  # every process: the metrics, hence the halt, are the same on all
            where = checkpoint.save_diagnostic(
                workdir, index + 1, {"params": params, "opt_state": opt_state}
            )
            message += f"; diagnostic state saved in {where}"
        if checkpointer:
            checkpointer.close()  # the last good checkpoints stay complete
        raise NonFiniteError(message, index + 1)

    def save(step: int) -> None:
        """Checkpoint the state after ``step`` micro-batches (once its metrics are checked)."""
        nonlocal pending
        if pending is not None:  # never save a state whose step has not been checked
            read(pending)
            pending = None
        state = {"params": params, "opt_state": opt_state, "step": np.asarray(step, np.int64)}
        checkpointer.save(step, state, train_batches.get_state(), config)

    with preemption.StopSignals() as signals:  # the handlers are given back on leaving
        for step in bar:
            batch = next(train_batches)
            step_flops = flops.train_flops_per_step(  # the global batch: every process's rows
                config.model,
                {n: (v.shape[0] * jax.process_count(), *v.shape[1:]) for n, v in batch.items()},
            )
            local_rows = next(iter(batch.values())).shape[0]
            batch = {**batch, preemption.STOP_KEY: signals.flags(local_rows)}
            params, opt_state, metrics = train_step(
                params, opt_state, place(batch), step, lrs[step // k]
            )
            if pending is not None:
                read(pending)
            pending = (metrics, (step + 1) % k == 0, step_flops, step)
            if first_loss is None:
                first_loss = float(metrics["loss"])
            updates, boundary = (step + 1) // k, (step + 1) % k == 0
            last = step + 1 == micro_steps
            if (step + 1) % config.log_every == 0 or last:
                read(pending)
                pending = None
                last_record = interval.record(float(lrs[max(updates - 1, 0)]), peak_total)
                bar.set_postfix(
                    loss=f"{last_record['loss']:.3f}",
                    lr=f"{last_record['lr']:.2e}",
                    tok_s=f"{last_record['tokens_per_s']:.0f}",
                )
                say(_log_line(updates, config.total_steps, last_record))
                if writer:
                    writer.write("train", updates, last_record)
                interval = Interval()
            if boundary and config.eval_every and updates % config.eval_every == 0 and not last:
                started = time.perf_counter()
                validate_now(params, updates)
                interval.start += time.perf_counter() - started  # not training time
            if instruments and boundary and updates % instruments == 0:
                if pending is not None:  # this step's layer gradient norms
                    read(pending)
                    pending = None
                started = time.perf_counter()
                measure(updates)
                interval.start += time.perf_counter() - started  # not training time
            saved = checkpointer and boundary and (updates % config.checkpoint_every == 0 or last)
            if saved:
                save(step + 1)
            if stop_agreed:  # every process sees it after the same step
                if checkpointer and not saved:
                    save(step + 1)
                break
    bar.close()
    if stop_agreed:
        return _stopped(config, workdir, checkpointer, writer, signals.received, step + 1)
    result = validate_now(params, config.total_steps)
    metrics_out: dict[str, Any] = {
        "eval_loss": result["loss"],
        "eval_perplexity": result["perplexity"],
        "eval_accuracy": result["accuracy"],
        "first_train_loss": first_loss,
        "train_loss": last_record.get("loss"),
        "steps": config.total_steps,
    }
    if "source_sensitivity" in result:
        metrics_out["eval_source_sensitivity"] = result["source_sensitivity"]
    if validation_bleu:
        metrics_out["eval_bleu_greedy"] = result["bleu"]
        metrics_out["eval_distinct_hypotheses"] = result["distinct_hypotheses"]
    if isinstance(data, CorpusData) and config.final_split:
        split = config.final_split
        final = evaluate(params, split)
        metrics_out.update({f"{split}_{name}": v for name, v in final.items()})
        line = f"{split}: loss {final['loss']:.3f}, perplexity {final['perplexity']:.2f}"
        if translates:
            beam = config.decode.beam_size
            scores = translation_scores(params, split, beam, 0)
            metrics_out.update({f"{split}_{name}": v for name, v in scores.items()})
            if writer:
                writer.write(
                    split, config.total_steps, {"bleu": scores["bleu"], "chrf": scores["chrf"]}
                )
            line += (
                f", source sensitivity {final['source_sensitivity']:.2f} nats, "
                f"BLEU {scores['bleu']:.2f}, chrF {scores['chrf']:.2f}, "
                f"{scores['distinct_hypotheses']:.0%} distinct hypotheses (beam {beam}; "
                f"{scores['bleu_signature']})"
            )
        say(line)
    if checkpointer:
        checkpointer.close()
    say(json.dumps({k: v for k, v in metrics_out.items() if k != f"{config.final_split}_samples"}))
    if workdir and jax.process_index() == 0:
        os.makedirs(workdir, exist_ok=True)
        with open(os.path.join(workdir, "eval.json"), "w") as f:
            json.dump(metrics_out, f, indent=1)
        if writer:
            writer.close()
            say(f"curves: {plots.plot_curves(workdir)}")
            if instruments and config.diagnostics.plot:
                say(f"diagnostics: {', '.join(diagnostics.plot(workdir))}")
    return metrics_out
