"""Training: ``run(config, workdir)`` validates the config, builds the mesh and trains with a
progress bar, then evaluates (:mod:`deepnet_jax.trainer`); ``main`` is ``train.py``'s body.

Data comes from ``deepnet_jax.data`` (tfds corpora prepared on first use, SentencePiece, grain
batches) or, with ``data.dataset="synthetic_reversal"``, from the built-in reversal task.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import ml_collections

from deepnet_jax import (
    checkpoint,
    diagnostics,
    distributed,
    inference,
    models,
    optimizers,
    sharding,
    train_config,
    trainer,
)
from deepnet_jax import workdir as workdir_lib
from deepnet_jax.data import DataPreparationError, pipeline, sources
from deepnet_jax.train_actions import NonFiniteError
from deepnet_jax.train_data import SYNTHETIC

DATASETS = (SYNTHETIC, *sources.DATASETS)
NAN_POLICIES = ("halt", "skip")


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
    optimizers.validate(config)  # after total_steps is known to be an integer
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
        return trainer.train(trainer.build_run(config, workdir, mesh))
