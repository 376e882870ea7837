"""Orbax checkpoints of a training run: train state, data-iterator position and config.

A checkpoint of step s (micro-batches consumed) lives in ``<workdir>/checkpoints/<s>/`` with
four items:

* ``state`` — ``{"params", "opt_state", "step"}`` (``ocp.args.StandardSave``), restored onto an
  abstract target shaped like a freshly initialized state, so optax's state classes come back
  intact;
* ``data`` — the training iterator's ``get_state()`` as JSON (grain's position and packer
  state, or the synthetic stream's step), so a resumed run sees exactly the batches an
  uninterrupted run would have;
* ``config`` — the run's config as JSON (``RunConfig.to_dict()``), for evaluation tools and
  for the record (a config saved before a field existed is read with the field's declared
  ``before`` value: ``deepnet_jax.training.config.upgrade_saved``);
* ``fingerprint`` — the tokenizer's sha256 (``deepnet_jax.training.fingerprint``): with ``config``,
  what a resumed run is compared with before any state is read.

The parameters with the best validation score so far (greedy BLEU for translation when
``decode.eval_sentences`` > 0, else −loss; higher is better) are kept apart in
``<workdir>/best/<s>/`` (items ``params`` and ``score``), so the rotation of ``max_to_keep``
never deletes them.

Orbax writes each step into a temporary folder and renames it when complete (saves are
asynchronous; :meth:`Checkpointer.close` waits for them), so a crash never leaves a step that
looks complete. A step damaged afterwards (a truncated or deleted file, a step folder copied
half-way) is caught when it is read (a run whose config differs from the checkpoints' has
stopped before that, ``deepnet_jax.training.fingerprint``, so a failed restore is damage):
:meth:`Checkpointer.restore_newest` warns, moves the damaged step to
``<workdir>/corrupt_checkpoints/<s>`` (kept for inspection, never deleted) and falls back to
the next older step.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

from deepnet_jax.common import console
from deepnet_jax.runs.workdir import RunDir

FINGERPRINT = "fingerprint"  # the item holding deepnet_jax.training.fingerprint.record(...)


class CheckpointError(console.UserError, RuntimeError):
    """No checkpoint of a run can be restored."""


class Checkpointer:
    """Saves every ``every`` optimizer updates (and at the end), keeps the last ``max_to_keep``."""

    def __init__(
        self, workdir: str | RunDir, every: int, max_to_keep: int, read_only: bool = False
    ):
        """``read_only``: for evaluation tools; nothing is created in the workdir."""
        self.run_dir = RunDir(workdir)
        self.directory = self.run_dir.checkpoints
        self.best_directory = self.run_dir.best
        self.every = every
        self._closed = False
        self.manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(
                max_to_keep=max_to_keep, create=not read_only, read_only=read_only
            ),
        )
        self.best_manager = None
        if not read_only or os.path.isdir(self.best_directory):
            self.best_manager = ocp.CheckpointManager(
                self.best_directory,
                options=ocp.CheckpointManagerOptions(
                    max_to_keep=1, create=not read_only, read_only=read_only
                ),
            )

    def save_best(self, step: int, params: Any, score: float) -> None:
        """Keep ``params`` as the best so far (replacing the previous best once written). A best
        already kept at ``step`` is replaced: a run resumed from an older checkpoint (the newer
        one lost, or the run moved to another mesh) reaches that step again, and the
        parameters it holds now are the ones it continues from."""
        self.best_manager.wait_until_finished()
        if step in self.best_manager.all_steps():
            self.best_manager.delete(step)
        self.best_manager.save(
            step,
            args=ocp.args.Composite(
                params=ocp.args.StandardSave(params),
                score=ocp.args.JsonSave({"score": float(score), "step": step}),
            ),
            force=True,
        )

    def best_score(self) -> float | None:
        """The score of the kept best parameters, or None when there are none yet."""
        self.best_manager.wait_until_finished()
        step = self.best_manager.latest_step()
        if step is None:
            return None
        restored = self.best_manager.restore(
            step, args=ocp.args.Composite(score=ocp.args.JsonRestore())
        )
        return float(restored["score"]["score"])

    def latest_step(self) -> int | None:
        """The newest complete checkpoint's step (micro-batches consumed), or None."""
        return self.manager.latest_step()

    def save(
        self,
        step: int,
        state: dict[str, Any],
        data_state: dict[str, Any],
        config: Mapping[str, Any],
        fingerprint: dict[str, Any] | None = None,
    ) -> None:
        """Start an asynchronous save of ``state`` at ``step`` (overwrites nothing) with the
        run's ``config`` as a nested dict (``RunConfig.to_dict()``) and its ``fingerprint``
        item (``deepnet_jax.training.fingerprint.record``) when given."""
        items = {
            "state": ocp.args.StandardSave(state),
            "data": ocp.args.JsonSave(data_state),
            "config": ocp.args.JsonSave(dict(config)),
        }
        if fingerprint is not None:
            items[FINGERPRINT] = ocp.args.JsonSave(fingerprint)
        self.manager.save(step, args=ocp.args.Composite(**items), force=True)

    def restore(self, step: int, target: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(state restored onto ``target``'s structure, the data iterator's saved state)."""
        restored = self.manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(target), data=ocp.args.JsonRestore()
            ),
        )
        return restored["state"], restored["data"]

    def restore_newest(
        self, target: dict[str, Any], warn: Callable[[str], None] = logging.warning
    ) -> tuple[int, dict[str, Any], dict[str, Any]] | None:
        """(step, state, data state) of the newest checkpoint that restores completely, or None
        when there is none.

        A step that fails to restore (whatever the damage: a missing or truncated file, a
        half-copied folder) is reported through ``warn`` and moved to
        ``<workdir>/corrupt_checkpoints/`` once an older step has restored, so the next save
        of that step number does not collide with it; the good steps are left alone. With
        several processes, a step counts as restored only if it restored on all of them.
        Raises :class:`CheckpointError` (moving nothing) when every step is damaged.
        """
        damaged: list[int] = []
        reasons: list[str] = []
        for step in reversed(self.all_steps()):
            reason = "it failed on another process"
            try:
                state, data = self.restore(step, target)
                ok = True
            except Exception as e:
                ok, reason = False, _first_words(e)
            if jax.process_count() > 1:
                ok = bool(np.all(multihost_utils.process_allgather(np.asarray(ok))))
            if ok:
                self._set_aside(damaged)
                return step, state, data
            damaged.append(step)
            reasons.append(reason)
            warn(
                f"checkpoint {self.run_dir.checkpoint(step)} cannot be restored "
                f"({reason}); falling back to the previous one"
            )
        if damaged:
            raise CheckpointError(
                f"none of the checkpoints {sorted(damaged)} under {self.directory} can be "
                f"restored (newest: {reasons[0]}); move them away to start afresh"
            )
        return None

    def _set_aside(self, steps: list[int]) -> None:
        """Move damaged step folders out of the rotation, to ``<workdir>/corrupt_checkpoints``."""
        if not steps:
            return
        if jax.process_index() == 0:
            aside = self.run_dir.corrupt_checkpoints
            os.makedirs(aside, exist_ok=True)
            for step in steps:
                destination = os.path.join(aside, str(step))
                n = 1
                while os.path.exists(destination):
                    destination, n = os.path.join(aside, f"{step}.{n}"), n + 1
                shutil.move(self.run_dir.checkpoint(step), destination)
        if jax.process_count() > 1:
            multihost_utils.sync_global_devices("deepnet_jax_checkpoints_set_aside")
        self.manager.reload()

    def all_steps(self) -> list[int]:
        """Steps of the complete checkpoints, oldest first."""
        return sorted(self.manager.all_steps())

    def read_config(self, step: int) -> dict[str, Any]:
        """The config a checkpoint was saved with, as written (a nested dict; fields added
        since are filled by ``training.run_config.RunConfig.from_dict``)."""
        restored = self.manager.restore(
            step, args=ocp.args.Composite(config=ocp.args.JsonRestore())
        )
        return dict(restored["config"])

    def read_fingerprint(self, step: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """(the saved config as written, the ``fingerprint`` item or None when the checkpoint
        predates it) of checkpoint ``step``: JSON items only, no array is read."""
        items = {"config": ocp.args.JsonRestore()}
        has_item = os.path.isdir(os.path.join(self.run_dir.checkpoint(step), FINGERPRINT))
        if has_item:
            items[FINGERPRINT] = ocp.args.JsonRestore()
        restored = self.manager.restore(step, args=ocp.args.Composite(**items))
        return dict(restored["config"]), dict(restored[FINGERPRINT]) if has_item else None

    def restore_params(self, step: int, abstract_params: Any) -> Any:
        """Only the parameters of checkpoint ``step`` (the optimizer state is not read),
        placed as ``abstract_params``' shardings say."""
        target = {"params": abstract_params}
        with ocp.Checkpointer(ocp.PyTreeCheckpointHandler()) as reader:
            restored = reader.restore(
                os.path.join(self.run_dir.checkpoint(step), "state"),
                args=ocp.args.PyTreeRestore(
                    item=target,
                    restore_args=ocp.checkpoint_utils.construct_restore_args(target),
                    partial_restore=True,
                ),
            )
        return restored["params"]

    def restore_best_params(self, abstract_params: Any) -> tuple[Any, int, float]:
        """(best parameters, their step, their validation score); an error when none exist."""
        step = None
        if self.best_manager is not None:
            self.best_manager.wait_until_finished()
            step = self.best_manager.latest_step()
        if step is None:
            raise ValueError(f"no best parameters under {self.best_directory}")
        restored = self.best_manager.restore(
            step,
            args=ocp.args.Composite(
                params=ocp.args.StandardRestore(abstract_params), score=ocp.args.JsonRestore()
            ),
        )
        return restored["params"], step, float(restored["score"]["score"])

    def average_params(self, steps: list[int], abstract_params: Any) -> Any:
        """The element-wise mean of the parameters of checkpoints ``steps`` (fairseq's
        ``average_checkpoints.py``: θ̄ = (1/k)·Σᵢ θᵢ), accumulated in float32 one checkpoint at
        a time, so at most two copies of the parameters are held."""
        if not steps:
            raise ValueError("average_params needs at least one checkpoint step")
        add = jax.jit(lambda a, b: jax.tree.map(lambda x, y: x + y.astype(jnp.float32), a, b))
        total = jax.tree.map(
            lambda x: x.astype(jnp.float32), self.restore_params(steps[0], abstract_params)
        )
        for step in steps[1:]:
            total = add(total, self.restore_params(step, abstract_params))
        k = float(len(steps))
        return jax.jit(
            lambda t: jax.tree.map(lambda x, a: (x / k).astype(a.dtype), t, abstract_params)
        )(total)

    def close(self) -> None:
        """Wait for pending asynchronous saves, then release the managers (once: later calls
        do nothing)."""
        if self._closed:
            return
        self._closed = True
        for manager in (self.manager, self.best_manager):
            if manager is not None:
                manager.wait_until_finished()
                manager.close()


def read_fingerprints(workdir: str | RunDir) -> list[tuple[int, dict, dict | None]]:
    """(step, config, fingerprint item or None) of each checkpoint under ``workdir``, newest
    first, read without creating anything; a step whose JSON items do not read (damaged) is
    left out."""
    if not os.path.isdir(RunDir(workdir).checkpoints):
        return []
    reader = Checkpointer(workdir, every=1, max_to_keep=1, read_only=True)
    found = []
    try:
        for step in reversed(reader.all_steps()):
            try:
                found.append((step, *reader.read_fingerprint(step)))
            except Exception:  # any damage: restore_newest reports it
                continue
    finally:
        reader.close()
    return found


def _first_words(error: Exception, limit: int = 160) -> str:
    """``Type: message`` on one line, cut to ``limit`` characters (tensorstore errors run long)."""
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def save_diagnostic(workdir: str | RunDir, step: int, state: dict[str, Any]) -> str:
    """Write ``state`` (e.g. parameters that went non-finite) to
    ``<workdir>/diagnostic/<step>`` for inspection, apart from the resumable checkpoints;
    returns the folder."""
    path = RunDir(workdir).diagnostic(step)
    with ocp.StandardCheckpointer() as writer:
        writer.save(path, state, force=True)
        writer.wait_until_finished()
    return path
