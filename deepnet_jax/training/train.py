"""Training: ``run(config, workdir)`` validates the config, builds the mesh and trains with a
progress bar, then evaluates (:mod:`deepnet_jax.training.trainer`); ``main`` is ``train.py``'s body.

Data comes from ``deepnet_jax.data`` (tfds corpora prepared on first use, SentencePiece, grain
batches) or, with ``data.dataset="synthetic_reversal"``, from the built-in reversal task.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import ml_collections

from deepnet_jax.data import DataPreparationError, registry
from deepnet_jax.runs import checkpoint
from deepnet_jax.runs import workdir as workdir_lib
from deepnet_jax.scale import distributed, sharding
from deepnet_jax.training import config as train_config
from deepnet_jax.training import fingerprint, trainer
from deepnet_jax.training.actions import NonFiniteError

DATASETS = registry.NAMES  # every data.dataset value, from the dataset registry
validate = train_config.validate  # one clear error for the first invalid training field


# What train.py reports as a one-line error: bad configs and environments, not bugs.
USER_ERRORS = (
    ValueError,
    OSError,
    DataPreparationError,
    NonFiniteError,
    checkpoint.CheckpointError,
    fingerprint.FingerprintMismatchError,
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
    validate(config, len(devices))  # model.remat_policy='auto' is resolved by build_run
    if workdir:
        workdir_lib.check_writable(workdir)
    mesh = sharding.make_mesh(config.mesh, devices)
    rules = sharding.logical_axis_rules(config.mesh)
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        built = trainer.build_run(config, workdir, mesh)
        try:
            return trainer.train(built)
        finally:  # on an error too: orbax's pending work ends before the interpreter does
            if built.checkpointer:
                built.checkpointer.close()
