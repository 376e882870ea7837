"""Orbax checkpoints of a training run: train state, data-iterator position and config.

A checkpoint of step s (micro-batches consumed) lives in ``<workdir>/checkpoints/<s>/`` with
three items:

* ``state`` — ``{"params", "opt_state", "step"}`` (``ocp.args.StandardSave``), restored onto an
  abstract target shaped like a freshly initialized state, so optax's state classes come back
  intact;
* ``data`` — the training iterator's ``get_state()`` as JSON (grain's position and packer
  state, or the synthetic stream's step), so a resumed run sees exactly the batches an
  uninterrupted run would have;
* ``config`` — the run's config as JSON, for evaluation tools and for the record.

Orbax writes each step into a temporary folder and renames it when complete (saves are
asynchronous; :meth:`Checkpointer.close` waits for them), so a crash never leaves a step that
looks complete.
"""

from __future__ import annotations

import os
from typing import Any

import ml_collections
import orbax.checkpoint as ocp


class Checkpointer:
    """Saves every ``every`` optimizer updates (and at the end), keeps the last ``max_to_keep``."""

    def __init__(self, workdir: str, every: int, max_to_keep: int):
        self.directory = os.path.join(os.path.abspath(workdir), "checkpoints")
        self.every = every
        self.manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True),
        )

    def latest_step(self) -> int | None:
        """The newest complete checkpoint's step (micro-batches consumed), or None."""
        return self.manager.latest_step()

    def save(
        self,
        step: int,
        state: dict[str, Any],
        data_state: dict[str, Any],
        config: ml_collections.ConfigDict,
    ) -> None:
        """Start an asynchronous save of ``state`` at ``step`` (overwrites nothing)."""
        self.manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state),
                data=ocp.args.JsonSave(data_state),
                config=ocp.args.JsonSave(config.to_dict()),
            ),
            force=True,
        )

    def restore(self, step: int, target: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(state restored onto ``target``'s structure, the data iterator's saved state)."""
        restored = self.manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(target), data=ocp.args.JsonRestore()
            ),
        )
        return restored["state"], restored["data"]

    def close(self) -> None:
        """Wait for pending asynchronous saves, then release the manager."""
        self.manager.wait_until_finished()
        self.manager.close()
