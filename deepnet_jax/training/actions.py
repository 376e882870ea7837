"""The trainer's periodic actions, each an object with its own explicit state.

* :class:`StepReader` brings each step's metrics to the host one step late (no device sync per
  step), applies ``nan_policy`` and carries the agreed stop signal.
* :class:`Validator` runs validation (loss, source sensitivity, greedy BLEU) and keeps the best
  parameters; it also scores the final split.
* :class:`Instruments` measures the stability instruments (model update ΔF against θ₀, LN
  inputs, layer gradient norms) every ``diagnostics.every`` updates.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from deepnet_jax.common import console
from deepnet_jax.data import pipeline
from deepnet_jax.decoding import options as decoding_options
from deepnet_jax.decoding import scoring
from deepnet_jax.runs import checkpoint
from deepnet_jax.runs import metrics as metrics_lib
from deepnet_jax.runs.workdir import RunDir
from deepnet_jax.scale import sharding
from deepnet_jax.training import diagnostics, preemption
from deepnet_jax.training import steps as train_steps
from deepnet_jax.training.progress import Interval, say, scored_set, source_blind_warning
from deepnet_jax.training.run_config import RunConfig


class NonFiniteError(console.UserError, RuntimeError):
    """Training stopped on a non-finite loss or gradient (``nan_policy``) at micro-step
    ``step`` (1-based)."""

    def __init__(self, message: str, step: int):
        super().__init__(message)
        self.step = step


@dataclasses.dataclass
class StepRecord:
    """A dispatched step's device metrics, read later: micro-step ``index`` (0-based), whether
    it ended an optimizer update, and its FLOPs."""

    metrics: dict[str, Any]
    index: int
    boundary: bool
    flops: float


class StepReader:
    """Reads step metrics one step late into ``progress.interval``; checks them first.

    A non-finite loss or gradient skips the step's metrics under ``nan_policy="skip"`` (the
    optimizer already dropped the update) and raises :class:`NonFiniteError` under ``"halt"`` or
    after ``nan_max_skips`` in a row, first saving the state as ``<workdir>/diagnostic/<step>``.
    The step function's non-finite gate left that state as the failing step made it (the step
    dispatched after it changed nothing).
    """

    def __init__(
        self,
        config: RunConfig,
        workdir: str | None,
        checkpointer: checkpoint.Checkpointer | None,
    ):
        self.config, self.workdir, self.checkpointer = config, workdir, checkpointer
        self.pending: StepRecord | None = None
        self.skipped_in_a_row = 0
        self.stop_agreed = False  # a stop signal reached some process: every process stops
        self.layer_grads: dict[str, Any] = {}  # the last read step's, with the instruments on
        self.first_loss: float | None = None
        self.track_first = True  # False on resume: the first loss is the logged one

    def push(self, record: StepRecord, interval: Interval, state: dict[str, Any]) -> None:
        """Read the previous step's metrics (if unread) and keep ``record`` for later."""
        if self.track_first and self.first_loss is None:
            self.first_loss = float(record.metrics["loss"])
        self.drain(interval, state)
        self.pending = record

    def drain(self, interval: Interval, state: dict[str, Any]) -> None:
        """Read the unread step, if any (before logging, measuring or checkpointing)."""
        if self.pending is not None:
            record, self.pending = self.pending, None
            self._read(record, interval, state)

    def _read(self, record: StepRecord, interval: Interval, state: dict[str, Any]) -> None:
        host = jax.device_get(record.metrics)
        self.stop_agreed |= bool(host.pop(preemption.STOP_KEY, 0))
        host.pop(train_steps.BAD_IN_A_ROW, None)
        if "layer_grad_norm" in host:
            self.layer_grads = host.pop("layer_grad_norm")
        bad = [n for n in ("loss", "grad_norm") if not np.isfinite(float(host[n]))]
        if not bad:
            self.skipped_in_a_row = 0
            interval.add(host, record.boundary, record.flops)
            return
        self.skipped_in_a_row += 1
        interval.skipped += 1
        c, step, value = self.config, record.index + 1, float(host[bad[0]])
        if c.nan_policy == "skip" and self.skipped_in_a_row < c.nan_max_skips:
            say(f"step {step}: non-finite {bad[0]}={value}; update skipped")
            return
        message = f"step {step}: non-finite {bad[0]}={value} " + (
            "(nan_policy='halt')"
            if c.nan_policy == "halt"
            else f"in {self.skipped_in_a_row} steps in a row (nan_policy='skip', "
            f"nan_max_skips={c.nan_max_skips})"
        )
        if self.workdir:  # every process: the metrics, hence the halt, are the same on all
            where = checkpoint.save_diagnostic(self.workdir, step, state)
            message += f"; diagnostic state saved in {where}"
        if self.checkpointer:
            self.checkpointer.close()  # the last good checkpoints stay complete
        raise NonFiniteError(message, step)


def halt_after(config: RunConfig) -> int:
    """Consecutive non-finite steps after which the run halts (the step function's gate)."""
    return 1 if config.nan_policy == "halt" else config.nan_max_skips


@dataclasses.dataclass
class EvalContext:
    """What evaluation needs of a run: its config and workdir, the mesh, the model, its data,
    and where results go (:class:`deepnet_jax.training.trainer.Run` is one)."""

    config: RunConfig
    workdir: str | None
    mesh: jax.sharding.Mesh
    model: Any
    data: Any  # train_data.Data: SyntheticData or CorpusData
    checkpointer: checkpoint.Checkpointer | None
    writer: metrics_lib.MetricsWriter | None

    def place(self, local_batch: dict[str, np.ndarray]) -> train_steps.Batch:
        """This process's rows → global arrays split over the data-parallel devices."""
        return pipeline.global_batch(local_batch, sharding.batch_sharding(self.mesh))

    @property
    def translates(self) -> bool:
        return getattr(self.data, "translates", False)


class Validator:
    """Validation loss (+ source sensitivity, + greedy BLEU for translation with
    ``decode.eval_sentences`` > 0); keeps the best parameters in ``best/`` (by BLEU, else by
    loss). ``best`` is the best score so far (restored on resume)."""

    def __init__(self, ctx: EvalContext, best: float | None):
        self.ctx, self.best = ctx, best
        self.eval_step = train_steps.make_eval_step(ctx.model, ctx.config.model.arch)
        self.with_bleu = ctx.translates and ctx.config.decode.eval_sentences > 0

    def loss(self, params: Any, split: str = "validation") -> dict[str, float]:
        """Token-weighted NLL, perplexity, accuracy (and source sensitivity) of ``split``, with
        the set they cover: ``loss_examples`` scored, ``loss_truncated`` of them cut to
        ``data.max_len``, ``loss_dropped`` records left out."""
        batches = map(self.ctx.place, self.ctx.data.eval_batches(split))
        result = train_steps.split_loss(self.eval_step, params, batches)
        return {**result, **self.ctx.data.eval_counts(split)}

    def translation_scores(self, params: Any, split: str, beam: int, limit: int) -> dict:
        """BLEU/chrF of ``split`` (first ``limit`` sentences; 0: all) behind a progress bar,
        printing the samples."""
        c, pipeline = self.ctx.config, self.ctx.data.pipeline
        pairs = pipeline.translation_set(split)
        options = decoding_options.search_options(c.decode, beam)
        label = f"{split}, " + ("greedy" if beam == 1 else f"beam {beam}")
        hyps, scores = scoring.translate_split(
            self.ctx.model,
            params,
            pipeline.tokenizer,
            pairs,
            options,
            c.decode.batch_size,
            limit,
            progress=label,
        )
        shown = range(min(c.decode.num_samples, len(hyps)))
        for i in shown:
            say(f"  src: {pairs.sources[i]}\n  ref: {pairs.references[i]}\n  hyp: {hyps[i]}")
        scores["samples"] = [
            {"source": pairs.sources[i], "reference": pairs.references[i], "hypothesis": hyps[i]}
            for i in shown
        ]
        return scores

    def __call__(self, params: Any, updates: int) -> dict[str, Any]:
        """Validate after ``updates`` updates: print the line, write the record, keep the best."""
        c = self.ctx.config
        result = self.loss(params)
        line = f"step {updates}: validation loss {result['loss']:.3f}, "
        line += f"ppl {result['perplexity']:.1f}"
        if "source_sensitivity" in result:
            line += f", source sensitivity {result['source_sensitivity']:.2f} nats"
        line += f" on {scored_set(result, self.ctx.translates, c.data.max_len)}"
        if self.with_bleu:
            s = self.translation_scores(params, "validation", 1, c.decode.eval_sentences)
            result.update(
                bleu=s["bleu"],
                chrf=s["chrf"],
                bleu_sentences=s["sentences"],
                distinct_hypotheses=s["distinct_hypotheses"],
                unseen_sentences=s["unseen_sentences"],
            )
            if "unseen_bleu" in s:
                result["unseen_bleu"] = s["unseen_bleu"]
            line += (
                f"; greedy BLEU {s['bleu']:.2f} on the first {s['sentences']:,} sentences "
                f"({s['distinct_hypotheses']:.0%} distinct)"
            )
        say(line)
        warning = source_blind_warning(result, updates, c.schedule.warmup_steps)
        if warning:
            say(warning)
        score = result["bleu"] if self.with_bleu else -result["loss"]
        if self.ctx.checkpointer and (self.best is None or score > self.best):
            self.best = score
            self.ctx.checkpointer.save_best(updates * c.grad_accum_steps, params, score)
        if self.ctx.writer:
            self.ctx.writer.write("eval", updates, result)
        return result


class Instruments:
    """The stability instruments every ``diagnostics.every`` updates: ΔF = the model update
    against θ₀ on a fixed probe batch (the first validation batch), the LN-input norms and the
    latest step's layer gradient norms, as ``diagnostics`` records.

    F(x; θ₀) is computed once, on the initial parameters, and kept in
    ``<workdir>/stability_probe/`` so a resumed run reads it back instead of building θ₀ again.
    """

    def __init__(self, ctx: EvalContext, params: Any, fresh: bool, init_params: Callable):
        """``params``: the run's current parameters (θ₀ when ``fresh``); ``init_params()``
        builds θ₀ again, only for a resumed workdir that kept no probe features."""
        self.ctx = ctx
        self.probe = diagnostics.make_probe(ctx.model, ctx.config.model.arch)
        self.update_size = jax.jit(diagnostics.model_update)
        self.probe_batch = ctx.place(next(iter(ctx.data.eval_batches("validation"))))
        workdir = ctx.workdir if ctx.config.checkpoint_every else None  # resumable runs only
        abstract = jax.eval_shape(self.probe, params, self.probe_batch)[0]
        self.features_0 = None if fresh else _load_features(workdir, abstract, self.probe_batch)
        if self.features_0 is None:
            if not fresh:
                say("warning: no stability probe features saved in this run; building θ₀ again")
            theta_0 = params if fresh else init_params()
            self.features_0, ln_inputs_0 = self.probe(theta_0, self.probe_batch)
            if workdir:
                _save_features(workdir, self.features_0)
            if ctx.writer and fresh:
                ctx.writer.write("diagnostics", 0, _record(0.0, ln_inputs_0, {}))

    def due(self, updates: int) -> bool:
        return updates % self.ctx.config.diagnostics.every == 0

    def measure(self, params: Any, updates: int, layer_grads: dict[str, Any]) -> None:
        """One ``diagnostics`` record at ``updates`` (``layer_grads``: the step's, read)."""
        features, ln_inputs = self.probe(params, self.probe_batch)
        delta = float(self.update_size(features, self.features_0, self.probe_batch["inputs"]))
        if self.ctx.writer:
            self.ctx.writer.write("diagnostics", updates, _record(delta, ln_inputs, layer_grads))


def _record(model_update: float, ln_inputs: dict, layer_grads: dict) -> dict[str, Any]:
    """A ``diagnostics`` record: ``model_update``, ``ln_input/<side>/<ln>`` [L] and
    ``grad_norm/<side>/<sublayer>`` [L]."""
    record: dict[str, Any] = {"model_update": model_update}
    record.update({f"ln_input/{k}": v for k, v in jax.device_get(ln_inputs).items()})
    record.update({f"grad_norm/{k}": v for k, v in layer_grads.items()})
    return record


def _save_features(workdir: str, features: jax.Array) -> None:
    path = RunDir(workdir).stability_probe
    with ocp.StandardCheckpointer() as writer:
        writer.save(path, {"features_0": features}, force=True)
        writer.wait_until_finished()


def _load_features(
    workdir: str | None, abstract: Any, batch: train_steps.Batch
) -> jax.Array | None:
    """F(x; θ₀) saved by :func:`_save_features` (shaped like ``abstract``, replicated over the
    probe batch's mesh), or None when the run kept none."""
    path = RunDir(workdir).stability_probe if workdir else ""
    if not path or not os.path.isdir(path):
        return None
    mesh = batch["inputs"].sharding.mesh
    target = jax.ShapeDtypeStruct(abstract.shape, abstract.dtype, sharding=replicated(mesh))
    with ocp.StandardCheckpointer() as reader:
        return reader.restore(path, {"features_0": target})["features_0"]


def replicated(mesh: jax.sharding.Mesh) -> jax.sharding.NamedSharding:
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
