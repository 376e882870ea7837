"""Training: ``run(config, workdir)`` validates the config, builds the mesh and trains with a
progress bar, then evaluates (:mod:`deepnet_jax.training.trainer`); the command around it is
:mod:`deepnet_jax.cli.train`.

Data comes from ``deepnet_jax.data`` (tfds corpora prepared on first use, SentencePiece, grain
batches) or, with ``data.dataset="synthetic_reversal"``, from the built-in reversal task.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import ml_collections

from deepnet_jax.runs.workdir import RunDir
from deepnet_jax.scale import distributed, sharding
from deepnet_jax.training import config_checks, trainer

validate = config_checks.validate  # one clear error for the first invalid training field


def run(
    config: ml_collections.ConfigDict,
    workdir: str | None = None,
    devices: Sequence[jax.Device] | None = None,
) -> dict[str, Any]:
    """Train for ``config.total_steps`` updates with a progress bar, then evaluate.

    ``config`` (a ``ConfigDict``: ``default_config()`` or a ``configs/*.py``) is validated and
    typed once (``validate`` returns the ``RunConfig``): the trainer and everything below take
    that; ``auto`` choices and the fields derived from the data are made by the trainer.

    With a ``workdir`` (``runs.workdir.RunDir`` names its files): metrics go to a JSON-lines
    file and TensorBoard files, the curves to a PNG, the final results to ``eval.json``, and
    (``checkpoint_every`` > 0) checkpoints (train state, data position, config) every
    ``checkpoint_every`` updates and at the end, plus ``best/`` holding the parameters with the
    best validation score (greedy BLEU for translation with ``decode.eval_sentences`` > 0, else
    loss). A workdir that already holds checkpoints resumes from the newest one, continuing
    exactly where it stopped.

    ``devices``: the devices the mesh spans (default: all of them, every process's); a subset
    is for single-process runs (e.g. comparing a 1-device run with a sharded one).

    A SIGTERM or SIGINT during training ends it after the step in flight (the same step on
    every process) with a checkpoint, and returns ``{"stopped": True, "message", "step",
    "steps"}`` instead of the evaluation; a newest checkpoint that cannot be restored is
    reported and set aside for the previous one (see ``checkpoint.Checkpointer.restore_newest``).
    """
    distributed.initialize(config.distributed)  # before anything touches a backend
    devices = jax.devices() if devices is None else list(devices)
    typed = validate(config, len(devices))  # the config typed once: what all below takes
    if workdir:
        RunDir(workdir).check_writable()
    mesh = sharding.make_mesh(typed.mesh, devices)
    rules = sharding.logical_axis_rules(typed.mesh)
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        built = trainer.build_run(typed, workdir, mesh)
        try:
            return trainer.train(built)
        finally:  # on an error too: orbax's pending work ends before the interpreter does
            if built.checkpointer:
                built.checkpointer.close()
