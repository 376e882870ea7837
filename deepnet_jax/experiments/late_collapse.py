"""Why Pre-LN under CompleteP falls back after it has fitted the task: ``lr_transfer``'s and the
depth table's CompleteP row reaches training accuracy 1.0 on ``reversal64`` and then, on some
seeds, falls to near chance within a few dozen updates (docs/schemes.md, "Measurements"; the
result: docs/reproduction.md, section 5).

Each arm trains the row's 6L-6L ``reversal64`` cell at the recipe's peak rate 2e-3 (the depth
table's recipe, :data:`~deepnet_jax.configs.depth_table_recipe.RECIPE`: 800 updates, warm-up
400, inverse square root decay; the cell as ``lr_transfer`` trains it,
:func:`lr_transfer.make_config`) over the same seeds, with one change per arm (:data:`ARMS`):

* ``recipe``: none (AdamW ε = 1e-8, CompleteP's σ_base = 0.02; at 6 layers and d 64, its base,
  every CompleteP multiplier is 1);
* ``eps_1e-6``, ``eps_1e-4``: AdamW's ε (a floor under √v: Bai et al. 2025, arXiv 2506.04805,
  trace Adam's loss spikes to squared gradients falling far below the second-moment estimate
  they lag, as they do once a run has fitted);
* ``init_std_0.125``: σ_base 0.125 (about Xavier's √(2/(64 + 64)) at d 64, the Pre-LN row's init
  scale) instead of 0.02;
* ``grad_clip_1``: the global gradient norm clipped at 1 (the recipe clips none; the main job's
  config clips at 1).

Per run it keeps the training records (every 25 updates: accuracy, NLL, gradient norm) and its
validation after the last update; the table reads from them (:func:`collapse.collapse`) when the
run first reached training accuracy :data:`collapse.FIT`, the largest fall of its accuracy after
that (the validation accuracy the last point) and the update it fell to, and whether that fall
is at least :data:`collapse.FALL`.

The setting ``lr_transfer_runs`` instead retrains, under the recipe, the ``lr_transfer`` runs of
the row that docs/reproduction.md reads a fall off (:data:`LR_TRANSFER_RUNS`: a depth, seed and
rate each) and two of its runs that did not fall, keeping the curves that ``lr_transfer``'s
results file did not keep before its runs of 2026-12-01; each run's validation NLL against
``lr_transfer``'s says whether it is the same run.

================  ==========================================  ==================  ==========
setting           cell                                         arms                seeds
================  ==========================================  ==================  ==========
smoke             the smoke reversal model, 1L-1L, 4 updates   recipe, eps_1e-4    0, 1
quick             reversal64 6L-6L at 2e-3, 800 updates        :data:`ARMS`        0 … 5
lr_transfer_runs  reversal64, :data:`LR_TRANSFER_RUNS`         recipe              theirs
================  ==========================================  ==================  ==========

Run: ``python -m deepnet_jax.experiments.late_collapse --setting=quick --out=DIR``; writes
``late_collapse.json`` and ``late_collapse.md`` (a row per arm: runs that fitted, runs that
fell, the validation NLL; then a row per run). ``--shard=i/n`` splits the runs among processes
sharing one ``--out``; a run stopped mid-way resumes from its checkpoint.
"""

from __future__ import annotations

import functools
import os
import statistics
import sys
from typing import Any

import ml_collections

from deepnet_jax.common import console
from deepnet_jax.configs import depth_table_recipe as table_recipe
from deepnet_jax.configs import experiment_rows
from deepnet_jax.experiments import (
    collapse,
    common,
    lr_transfer,
    opening,
    report,
    results_file,
    resumable,
)
from deepnet_jax.experiments.lr_tolerance import lr_text

NAME = "late_collapse"
FLAGS_FROM = ("resumable",)  # --shard, --checkpoint_every (opening.own_flags)
SETTINGS = ("smoke", "quick", "lr_transfer_runs")
ROW = experiment_rows.COMPLETEP_ROW
# an arm: the dotted config fields it changes from the cell
ARMS: dict[str, dict[str, Any]] = {
    "recipe": {},
    "eps_1e-6": {"optimizer.eps": 1e-6},
    "eps_1e-4": {"optimizer.eps": 1e-4},
    "init_std_0.125": {"model.completep_init_std": 0.125},
    "grad_clip_1": {"optimizer.grad_clip": 1.0},
}
# the lr_transfer runs of the row whose fall docs/reproduction.md describes (section 5): 6L's 1e-3
# (seed 0), 50L's 1e-3 (seed 0) and its optimum 2e-3 (seed 1); and two that did not fall, 6L's
# 2e-3 (seed 1) and 50L's 5e-4 (seed 0), whose retraining shows how closely a run that does not
# fall repeats its recorded NLL (on another machine: each run's ``cpu``)
LR_TRANSFER_RUNS = [
    {"layers": 6, "seed": 0, "lr": 1e-3},
    {"layers": 50, "seed": 0, "lr": 1e-3},
    {"layers": 50, "seed": 1, "lr": 2e-3},
    {"layers": 6, "seed": 1, "lr": 2e-3},
    {"layers": 50, "seed": 0, "lr": 5e-4},
]
GRIDS: dict[str, dict[str, Any]] = {
    "smoke": {
        "task": "reversal",
        "layers": 1,
        "lr": table_recipe.SMOKE_RECIPE.lr,
        "arms": ["recipe", "eps_1e-4"],
        "seeds": [0, 1],
    },
    "quick": {
        "task": "reversal64",
        "layers": 6,
        "lr": table_recipe.RECIPE.lr,
        "arms": list(ARMS),
        "seeds": list(range(6)),
    },
    "lr_transfer_runs": {"task": "reversal64", "arms": ["recipe"], "runs": LR_TRANSFER_RUNS},
}


def base_config(setting: str) -> ml_collections.ConfigDict:
    """``lr_transfer``'s base for the setting (the depth table's recipe)."""
    return lr_transfer.base_config(setting)


def run_keys(grid: dict[str, Any]) -> list[dict[str, Any]]:
    """The setting's runs: each arm at each seed of the one cell, or each arm at each of the
    grid's ``runs`` (a depth, seed and rate each)."""
    if "runs" in grid:
        return [{"arm": a, **run} for run in grid["runs"] for a in grid["arms"]]
    return [{"arm": a, "seed": s} for s in grid["seeds"] for a in grid["arms"]]


def cell_key(grid: dict[str, Any], key: dict[str, Any]) -> dict[str, Any]:
    """The ``lr_transfer`` key of run ``key`` (its seed; its depth and rate, else the
    grid's)."""
    return {"task": grid["task"], "row": ROW, "layers": key.get("layers", grid.get("layers")),
            "seed": key["seed"], "lr": key.get("lr", grid.get("lr"))}  # fmt: skip


def run_config(
    base: ml_collections.ConfigDict, grid: dict[str, Any], key: dict[str, Any]
) -> ml_collections.ConfigDict:
    """Run ``key`` (its ``arm`` and ``seed``, and its depth and rate where the grid lists
    runs): the cell as ``lr_transfer`` trains it, with the arm's fields (:data:`ARMS`)."""
    bases = lr_transfer.task_bases(base, {"tasks": {grid["task"]: None}}, "")
    c = lr_transfer.make_config(bases, cell_key(grid, key))
    for path, value in ARMS[key["arm"]].items():
        section, name = path.split(".")
        c[section][name] = value
    return c


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Train this shard's runs not yet in ``<out>/late_collapse.json``, then write the table of
    every run the file holds; returns the results payload."""
    args, base, out = opening.start(argv, NAME, base_config, SETTINGS)
    grid = GRIDS[args.setting]
    try:
        index, count = resumable.parse_shard(resumable.SHARD.value)
    except ValueError as e:
        sys.exit(console.error_line(e))
    settings = {"grid": grid, "arms": {a: ARMS[a] for a in grid["arms"]}}
    # an arm added to the setting trains only its own runs beside the file's
    results = results_file.Results(
        out, NAME, args.setting, settings, grid=["grid", "arms"], head=args.header
    )
    keys = run_keys(grid)
    common.run_grid(
        results,
        keys[index::count],
        functools.partial(run_config, base, grid),
        None,
        os.path.join(out, "runs"),
        judged=False,  # what is measured is the fall (collapse.collapse), not a verdict
        keep=collapse.keep_records,
        checkpoint_every=resumable.CHECKPOINT_EVERY.value,
        cache_dir=os.path.join(out, "runs", "xla_cache", str(index)),
    )
    results.reload()
    table = docs_table(results.payload)
    print(table)
    print("wrote " + ", ".join([results.path, report.write_table(out, NAME, table)]))
    return results.payload


def docs_table(payload: dict[str, Any]) -> str:
    """A row per arm (in the setting's order): its runs, those that fitted and those that
    collapsed (their seeds, or their :func:`label` where the setting lists runs), and the median
    and range of the final validation NLL; then a row per run."""
    arms = payload["settings"]["grid"]["arms"]
    which = "runs" if "runs" in payload["settings"]["grid"] else "seeds"
    header = ["arm", "runs", "fitted", f"collapsed ({which})", "validation NLL: median (range)"]
    rows = []
    for arm in arms:
        mine = sorted((r for r in payload["runs"] if r["arm"] == arm), key=_order)
        if not mine:
            continue
        falls = [collapse.of_run(r) for r in mine]
        fell = [label(r) for r, f in zip(mine, falls, strict=True) if f["collapsed"]]
        nll = [r["eval_loss"] for r in mine]
        spread = f"{statistics.median(nll):.3f} ({min(nll):.3f}–{max(nll):.3f})"
        fitted = sum(f["fitted_at"] is not None for f in falls)
        rows.append([arm, len(mine), fitted, f"{len(fell)} ({', '.join(fell) or '–'})", spread])
    return (report.markdown_table(header, rows).strip() + "\n\n" + run_table(payload, arms)).strip()


def run_table(payload: dict[str, Any], arms: list[str]) -> str:
    """A row per run: arm, seed (or :func:`label`), the update it fitted at, its largest fall
    after that (from the peak to the accuracy and update it fell to:
    :func:`collapse.collapse`; – below 0.005), its last training record's accuracy, and its
    validation accuracy and NLL after the last update."""
    which = "run" if "runs" in payload["settings"]["grid"] else "seed"
    header = ["arm", which, "fitted at", "largest fall (to, at update)", "last training "
              "accuracy", "validation accuracy", "validation NLL"]  # fmt: skip
    rows = []
    for r in sorted(payload["runs"], key=lambda r: (arms.index(r["arm"]), *_order(r))):
        fitted, fall = _fit_and_fall(r)
        last = collapse.training_records(r)[-1]["accuracy"]
        rows.append([r["arm"], label(r), fitted, fall, f"{last:.3f}",
                     f"{r['eval_accuracy']:.3f}", f"{r['eval_loss']:.3f}"])  # fmt: skip
    return report.markdown_table(header, rows).strip()


def retrained_table(payload: dict[str, Any], theirs: dict[str, Any]) -> str:
    """The ``lr_transfer_runs`` setting's runs beside ``lr_transfer``'s results (``theirs``): a
    row per run, its fit and fall (:func:`collapse.collapse`), its validation accuracy and NLL,
    the NLL ``lr_transfer`` recorded for the same key, and whether the two are one run (the
    same NLL to 9 significant digits, float32 training's round trip; else their difference)."""
    header = ["run", "fitted at", "largest fall (to, at update)", "validation accuracy",
              "validation NLL", "lr_transfer's validation NLL", "the same run"]  # fmt: skip
    rows = []
    for r in sorted(payload["runs"], key=_order):
        key = {"task": payload["settings"]["grid"]["task"], "row": ROW}
        key |= {k: r[k] for k in ("layers", "seed", "lr")}
        other = results_file.find_run(theirs["runs"], key)
        c = collapse.of_run(r)
        fall = (
            f"{c['fall']:.2f} ({c['fell_to']:.2f}, {c['fell_at']})" if c["fall"] >= 0.005 else "–"
        )
        fitted = "–" if c["fitted_at"] is None else c["fitted_at"]
        if other is None:
            recorded, same = report.NO_RUN, report.NO_RUN
        else:
            recorded = f"{other['eval_loss']:.3f}"
            delta = r["eval_loss"] - other["eval_loss"]
            same = "yes" if abs(delta) <= 1e-9 * abs(other["eval_loss"]) else f"no ({delta:+.2g})"
        rows.append([label(r), fitted, fall, f"{r['eval_accuracy']:.3f}",
                     f"{r['eval_loss']:.3f}", recorded, same])  # fmt: skip
    return report.markdown_table(header, rows).strip()


def label(run: dict[str, Any]) -> str:
    """A run's name in the tables: its seed, or ``50L at 2e-3, seed 1`` for a run the setting
    lists with its depth and rate."""
    if "layers" not in run:
        return str(run["seed"])
    return f"{run['layers']}L at {lr_text(run['lr'])}, seed {run['seed']}"


def _fit_and_fall(run: dict[str, Any]) -> tuple[Any, str]:
    """A run's update of fitting (– if never) and its largest fall's text (– below 0.005, a
    fall that rounds to 0.00)."""
    c = collapse.of_run(run)
    shown = c["fall"] >= 0.005
    fall = f"{c['fall']:.2f} ({c['fell_to']:.2f}, {c['fell_at']})" if shown else "–"
    return ("–" if c["fitted_at"] is None else c["fitted_at"]), fall


def _order(run: dict[str, Any]) -> tuple:
    return (run.get("layers", 0), run.get("lr", 0.0), run["seed"])


if __name__ == "__main__":
    main(sys.argv[1:])
