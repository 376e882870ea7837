"""Training metrics as JSON lines in ``<workdir>/metrics.jsonl`` (written by process 0 only).

Each line is one record: ``{"split": "train" | "eval", "step": <optimizer updates>, ...}``;
train records carry ``loss`` (mean over the interval, label-smoothed as optimized), ``lr``,
``tokens_per_s`` (non-padding target tokens) and ``step_time_s``; eval records carry ``loss``
(plain NLL), ``perplexity`` and ``accuracy``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jax


class MetricsWriter:
    """Appends records to ``<workdir>/metrics.jsonl``; a resumed run appends to the same file."""

    def __init__(self, workdir: str):
        self.path = os.path.join(workdir, "metrics.jsonl")
        self._enabled = jax.process_index() == 0
        if self._enabled:
            os.makedirs(workdir, exist_ok=True)

    def write(self, split: str, step: int, values: dict[str, Any]) -> None:
        if not self._enabled:
            return
        record = {"split": split, "step": step, **{k: _plain(v) for k, v in values.items()}}
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def read(workdir: str) -> list[dict[str, Any]]:
    """All records of ``<workdir>/metrics.jsonl`` in order."""
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]
