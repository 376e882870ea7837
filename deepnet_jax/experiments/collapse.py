"""Whether a run fitted a task and then fell back, from its training records: the measure of
:mod:`late_collapse`'s table and of the mark ``collapsed`` in :mod:`lr_transfer_report`'s sweep
table.

A run has **fitted** at the first training record (the mean over the updates since the one
before) whose accuracy reaches :data:`FIT`; its **fall** is the largest drop of the accuracy
below its highest value so far, from that record on, the validation accuracy after the last
update being the last point (a fall within the last interval shows there first); it has
**collapsed** when that fall is at least :data:`FALL`. The levels are for ``reversal64``, whose
models reach training accuracy 1.0: a language model's token accuracy never reaches
:data:`FIT`, so its runs never fit by this rule.
"""

from __future__ import annotations

from typing import Any

from deepnet_jax.runs import metrics

FIT = 0.99  # training accuracy at which a run has fitted reversal64
FALL = 0.5  # a fall of training accuracy by at least this much after fitting is a collapse


def collapse(records: list[dict[str, Any]], final: float) -> dict[str, Any]:
    """From a run's training records (``step``, ``accuracy``: each the mean over the updates
    since the previous record) and ``final``, its validation accuracy after the last update:
    ``fitted_at``, the first update with training accuracy ≥ :data:`FIT` (None if never);
    ``fall``, the largest drop of the accuracy below its highest value so far, after
    ``fitted_at`` (``final`` the last point); ``fell_to`` and ``fell_at``, the accuracy and
    update at the bottom of that drop; ``collapsed``, fall ≥ :data:`FALL`."""
    fitted = next((r["step"] for r in records if r["accuracy"] >= FIT), None)
    out = {"fitted_at": fitted, "fall": 0.0, "fell_to": None, "fell_at": None}
    if fitted is not None:
        end = {"step": records[-1]["step"], "accuracy": final}
        peak = 0.0
        for r in [*(r for r in records if r["step"] >= fitted), end]:
            peak = max(peak, r["accuracy"])
            if peak - r["accuracy"] > out["fall"]:
                out.update(fall=peak - r["accuracy"], fell_to=r["accuracy"], fell_at=r["step"])
    return out | {"collapsed": out["fall"] >= FALL}


def training_records(run: dict[str, Any]) -> list[dict[str, Any]]:
    """A results-file run's training records (a file not yet compacted may hold others; a run
    recorded without curves has none)."""
    return [r for r in run.get("records", []) if r["split"] == "train"]


def of_run(run: dict[str, Any]) -> dict[str, Any] | None:
    """:func:`collapse` of a results-file run (its ``records`` and ``eval_accuracy``); None
    for a run recorded without training records or without a validation accuracy."""
    records = training_records(run)
    if not records or run.get("eval_accuracy") is None:
        return None
    return collapse(records, run["eval_accuracy"])


def keep_records(result: dict[str, Any], workdir: str) -> None:
    """``common.run_grid``'s ``keep`` for runs read by :func:`of_run`: ``result`` takes the
    training records of ``workdir``'s metrics (:func:`metrics.read`) and drops its
    diagnostics."""
    result["records"] = [r for r in metrics.read(workdir) if r["split"] == "train"]
    result.pop("diagnostics", None)
