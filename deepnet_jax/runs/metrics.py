"""Training metrics as JSON lines in the workdir's metrics file and TensorBoard event files in
its ``tensorboard/`` folder (``RunDir.metrics``, ``RunDir.tensorboard``; written by process 0
only).

Each line is one record: ``{"split": "train" | "eval" | <final split>, "step": <optimizer
updates>, ...}``. Train records carry, over the interval since the last one: ``loss``
(label-smoothed, as optimized) and ``nll`` per target token, ``perplexity`` = exp(nll),
``accuracy``, ``lr``, ``grad_norm`` (mean), ``update_norm`` (mean over updates),
``param_norm`` (at the interval's end), ``tokens_per_s`` (non-padding target tokens),
``step_time_s`` and ``mfu`` (see ``deepnet_jax.scale.flops``) over the interval's time less
``compile_s``, the seconds jax spent compiling in it (the first interval compiles the step).
Eval records carry ``loss`` (plain NLL), ``perplexity`` and ``accuracy``, and for translation
greedy ``bleu``/``chrf``. In TensorBoard every numeric value is the scalar ``<split>/<name>``.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from typing import Any

import jax

from deepnet_jax.runs.workdir import RunDir

# tensorboardX names event files by the second they were opened and truncates an existing one;
# a per-process counter in the suffix keeps two writers opened in the same second apart.
_EVENT_FILE_IDS = itertools.count()
FLUSH_SECS = 30  # the event-writer thread's flush period, so a live TensorBoard keeps up


def summary_writer_class() -> type:
    """tensorboardX's ``SummaryWriter``, imported without torch. tensorboardX's writer module
    imports torch when it is installed, only to accept torch tensors (3-5 s of every run's
    start on a machine with torch, which this project's scalars never need): while it is
    imported, ``torch`` is marked as missing, unless the process has imported torch already.
    Later ``import torch`` calls work as usual."""
    if "torch" in sys.modules:
        from tensorboardX import SummaryWriter

        return SummaryWriter
    sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` raises ImportError
    try:
        from tensorboardX import SummaryWriter
    finally:
        del sys.modules["torch"]
    return SummaryWriter


class MetricsWriter:
    """Appends records to the workdir's metrics file and TensorBoard scalars to its
    ``tensorboard/`` folder; a resumed run appends to the same JSONL file and adds an event
    file beside the earlier ones (TensorBoard merges them). Does nothing on processes other than
    0. Call ``flush()`` or ``close()`` before reading the event files back."""

    def __init__(self, workdir: str | RunDir):
        self.run_dir = RunDir(workdir)
        self.path = self.run_dir.metrics
        self.tensorboard_dir = self.run_dir.tensorboard
        self._enabled = jax.process_index() == 0
        self._tensorboard: Any = None  # tensorboardX's SummaryWriter, opened on the first write
        self._purge_step: int | None = None
        if self._enabled:
            os.makedirs(self.run_dir.root, exist_ok=True)

    def rewind(self, step: int, keep_final: bool = True) -> None:
        """Forget what a crashed run logged after its checkpoint at update ``step``, before a
        resumed run logs it again: JSONL records past ``step`` are dropped (with
        ``keep_final=False`` also the evaluation records at ``step``, the end-of-training ones a
        resumed final checkpoint repeats), and TensorBoard hides events from ``step + 1`` on
        (tensorboardX's ``purge_step``)."""
        self._purge_step = step + 1
        if not self._enabled or not os.path.exists(self.path):
            return
        kept = [
            r
            for r in read(self.run_dir)
            if r["step"] < step or (r["step"] == step and (keep_final or r["split"] == "train"))
        ]
        with open(self.path + ".tmp", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in kept)
        os.replace(self.path + ".tmp", self.path)

    def write(self, split: str, step: int, values: dict[str, Any]) -> None:
        """Append ``{"split": split, "step": step, **values}`` (arrays made Python numbers or
        lists) to the JSONL file, and each int/float value (bools excluded; lists such as the
        per-layer diagnostics stay JSONL-only) as the TensorBoard scalar ``<split>/<name>`` at
        ``step``."""
        if not self._enabled:
            return
        record = {"split": split, "step": step, **{k: _plain(v) for k, v in values.items()}}
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        if self._tensorboard is None:  # first write, or the first after close()
            suffix = f".{os.getpid()}.{next(_EVENT_FILE_IDS)}"
            self._tensorboard = summary_writer_class()(
                self.tensorboard_dir,
                flush_secs=FLUSH_SECS,
                filename_suffix=suffix,
                purge_step=self._purge_step,
            )
            self._purge_step = None  # once, in the first event file after a rewind
        for name, value in record.items():
            if name in ("split", "step") or isinstance(value, bool):
                continue
            if isinstance(value, (int, float)):
                self._tensorboard.add_scalar(f"{split}/{name}", value, step)

    def flush(self) -> None:
        """Put every TensorBoard event written so far on disk (the JSONL file is closed after
        each write already).

        tensorboardX's own ``flush`` does not drain its background queue, so this closes the
        current event file; the next ``write`` opens a new one beside it. Meant for log or eval
        intervals, not every step. Without it, events reach disk within ``FLUSH_SECS``.
        """
        self.close()

    def close(self) -> None:
        """Drain, flush and close the TensorBoard event file; a later ``write`` opens a new one."""
        if self._tensorboard is not None:
            self._tensorboard.close()
            self._tensorboard = None


def _plain(value: Any) -> Any:
    """Arrays and numpy scalars as Python numbers or (nested) lists."""
    return value.tolist() if hasattr(value, "tolist") else value


def read(workdir: str | RunDir) -> list[dict[str, Any]]:
    """All records of the workdir's metrics file, in order."""
    with open(RunDir(workdir).metrics) as f:
        return [json.loads(line) for line in f if line.strip()]


def read_if_any(workdir: str | RunDir | None) -> list[dict[str, Any]]:
    """:func:`read`, or no records without a workdir or a metrics file."""
    if not workdir or not os.path.exists(RunDir(workdir).metrics):
        return []
    return read(workdir)
