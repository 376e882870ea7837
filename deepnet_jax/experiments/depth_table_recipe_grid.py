"""The ``recipe`` setting's grid as docs/reproduction.md shows it ("The recipe"): a row per
(peak learning rate, warm-up), a column per scheme, each cell the run's verdict, its final
metric and its updates to leave chance / reach 50% / reach 90% training accuracy
(:func:`depth_table_report.onsets`). Written between the doc's markers by
:mod:`deepnet_jax.experiments.docs_tables` from ``docs/reproduction/depth_table_recipe.json``.
"""

from __future__ import annotations

from typing import Any

from deepnet_jax.experiments import depth_table_report as table_report
from deepnet_jax.experiments import report
from deepnet_jax.experiments.depth_table_costs import MILESTONES


def cell(runs: list[dict[str, Any]], levels: dict[str, Any], field: str) -> str:
    """Each seed's ``verdict metric (chance / 50% / 90%)``, seeds separated by ``; `` (``—``
    for a level never reached; the grid has one seed)."""
    texts = []
    for run in sorted(runs, key=lambda r: r["seed"]):
        o = table_report.onsets(run, levels)
        steps = " / ".join("—" if o[m] is None else str(o[m]) for m in MILESTONES)
        texts.append(f"{run['verdict']} {run[field]:.3f} ({steps})")
    return "; ".join(texts)


def recipe_grid(payload: dict[str, Any], task: str = "reversal64") -> str:
    """The grid of ``payload`` (``depth_table.json`` of the ``recipe`` setting) on ``task``:
    rows ordered by learning rate then warm-up, columns the schemes in the grid's order,
    ``—`` where no run is recorded."""
    levels = payload["settings"]["levels"][task]
    field = table_report.metric(levels)[0]
    runs = [r for r in payload["runs"] if r["task"] == task]
    schemes = list(dict.fromkeys(scheme for scheme, _ in payload["settings"]["grid"]["cells"]))
    recipes = sorted({(r["lr"], r["warmup"]) for r in runs})
    rows = []
    for lr, warmup in recipes:
        row: list[Any] = [f"{lr:g}", warmup]
        for scheme in schemes:
            mine = [r for r in runs if (r["lr"], r["warmup"], r["scheme"]) == (lr, warmup, scheme)]
            row.append(cell(mine, levels, field) if mine else report.NO_RUN)
        rows.append(row)
    return report.markdown_table(["peak lr", "warm-up", *schemes], rows)
