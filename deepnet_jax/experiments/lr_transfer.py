"""Does the learning rate found on a shallow model hold on a deep one? A learning-rate sweep per
scheme and depth, and where each sweep's optimum lies.

Each row (a scheme, or a scheme with a parameterization: :data:`ROWS`) trains at every depth of
the setting a sweep of peak learning rates a factor 2 apart around the task's recipe rate, one
seed, under the depth table's recipes (:mod:`deepnet_jax.configs.depth_table_recipe`: the same
model, data, warm-up, batch and updates for every rate and depth):

* ``reversal64``: the depth table's tiny 64-128-2 encoder-decoder on the 64-symbol reversal task
  (:data:`~deepnet_jax.configs.depth_table_recipe.RECIPE`: 800 updates, warm-up 400; rates
  5e-4 … 8e-3);
* ``shakespeare``: its modern decoder language model on character-level Shakespeare
  (:data:`~deepnet_jax.configs.depth_table_recipe.MODERN_LM`: 600 updates, warm-up 100; rates
  2.5e-4 … 4e-3).

A cell's **optimum** is the rate of its lowest final validation NLL (a diverged run ranks
last). While the optimum lies on the sweep's edge and the edge's neighbour did not diverge,
the sweep extends by one rate past it (at most :data:`EXTEND` on each side); then a second seed
trains at the optimum, whose two NLLs give the optimum's seed spread. The runs go depth by
depth, shallowest first, so a stopped experiment has whole depths: :func:`pending`.

=========  ==============================  =========================  ========  =====
setting    rows × depths (N in NL-NL)      tasks                      rates     seeds
=========  ==============================  =========================  ========  =====
smoke      pre_ln, deepnorm × 1, 2          reversal (16-32-2, 4 upd.) 2 (+ 0)   1 (+1)
quick      :data:`ROWS` × 6, 18, 50, 100     reversal64, shakespeare    5 (+ 2)   1 (+1)
=========  ==============================  =========================  ========  =====

``--reuse=FILE`` takes the runs of a depth-table results file (``depth_table.json`` of its
``quick`` or ``modern_lm`` setting) whose configs are this experiment's (the same recipe, task,
scheme, depth, seed and rate: the depth table trains its cells at the recipe's rate), each
marked with the file it came from; they are not trained again.

Run: ``python -m deepnet_jax.experiments.lr_transfer --setting=quick --out=DIR``; writes
``lr_transfer.json`` (each run's final validation, verdict and, since the runs of 2026-12-01,
training records), ``lr_transfer.md`` (the optimum per row and depth with its seed spread,
and the NLL at every rate) and ``lr_transfer.png`` (NLL against rate, a line per depth, a
panel per row and task; and the optimum against depth). Processes started on one ``--out``
with ``--shard=0/n`` … ``--shard=n-1/n`` share the runs: each walks the same list and takes the
next run no other process holds (:func:`train_all`); a run stopped mid-way resumes from its
checkpoint, in whichever process takes it next.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from typing import Any

import ml_collections
from absl import flags

from deepnet_jax.common import console
from deepnet_jax.configs import depth_table_recipe as table_recipe
from deepnet_jax.configs import experiment_rows
from deepnet_jax.experiments import (
    collapse,
    common,
    depth_table,
    opening,
    report,
    results_file,
    resumable,
)
from deepnet_jax.experiments import lr_transfer_report as transfer_report

NAME = "lr_transfer"
FLAGS_FROM = ("resumable",)  # --shard, --checkpoint_every (opening.own_flags)
SETTINGS = ("smoke", "quick")
EXTEND = 2  # rates a sweep may add past each edge of its grid while its optimum sits there

# a row: its name, and the model fields it sets (experiment_rows.row_fields). CompleteP's row
# (experiment_rows.COMPLETEP_ROW) has its base at the sweep's shallowest depth and the tasks'
# width (6 layers, d 64): at 6 layers its multipliers are 1, so what transfers is the rate tuned
# there; where the task's model adds sinusoids its positions are learned instead
# (experiment_rows.set_row). mHC takes its paper's defaults: 4 streams, 20 Sinkhorn iterations
ROWS: dict[str, dict[str, Any]] = {
    row: experiment_rows.row_fields(row)
    for row in ("pre_ln", "deepnorm", experiment_rows.COMPLETEP_ROW, "mhc")
}
# per setting: the tasks with the centre of their rate grid (the recipe's rate), the grid's
# exponents k (rate = centre · 2^k), the rows, the depths and the seeds (the second trains at
# each cell's optimum)
GRIDS: dict[str, dict[str, Any]] = {
    "smoke": {
        "tasks": {"reversal": table_recipe.SMOKE_RECIPE.lr},
        "exponents": [0, 1],
        "rows": ["pre_ln", "deepnorm"],
        "depths": [1, 2],
        "seeds": [0, 1],
        "extend": 0,  # the follow-ups: the second seeds only
    },
    "quick": {
        "tasks": {
            "reversal64": table_recipe.RECIPE.lr,
            "shakespeare": table_recipe.MODERN_LM["lr"],
        },
        "exponents": [-2, -1, 0, 1, 2],
        "rows": list(ROWS),
        "depths": [6, 18, 50, 100],
        "seeds": [0, 1],
        "extend": EXTEND,
    },
}
_REUSE = flags.DEFINE_list(
    "reuse",
    [],
    "depth-table results files (depth_table.json) whose runs with this experiment's configs "
    "are taken instead of trained",
)
_NOT_REUSED = ("scheme", "warmup", "diagnostics")  # the key's, and the curves it does not keep
_ROWS = flags.DEFINE_list("rows", [], "train only these rows (default: the setting's)")
_REPORT = flags.DEFINE_bool(
    "report",
    False,
    "train nothing: write the table and figure of the runs --out's results file holds (a "
    "copy of a running experiment's file, for the docs)",
)


def cells(grid: dict[str, Any], depth: int) -> list[dict[str, Any]]:
    """The grid's cells at ``depth`` (``task``, ``row``, ``layers``), task by task."""
    return [
        {"task": task, "row": row, "layers": depth}
        for task in grid["tasks"]
        for row in grid["rows"]
    ]


def cell_sweep(grid: dict[str, Any], cell: dict[str, Any]) -> list[dict[str, Any]]:
    """The first seed's runs of one cell: every rate of its task's grid."""
    seed0 = grid["seeds"][0]
    return [{**cell, "seed": seed0, "lr": lr} for lr in transfer_report.rates(grid, cell["task"])]


def sweep_keys(grid: dict[str, Any], depth: int) -> list[dict[str, Any]]:
    """The first seed's runs at ``depth``: every task, row and rate of the grid."""
    return [k for cell in cells(grid, depth) for k in cell_sweep(grid, cell)]


def followup(grid: dict[str, Any], cell: dict[str, Any], runs: list[dict[str, Any]]):
    """The next run of one cell (``cell``: task, row, layers) once its first-seed sweep is in
    ``runs``: a rate past the edge its optimum sits on while the sweep may extend there
    (:func:`~deepnet_jax.experiments.lr_transfer_report.extension`: at most :data:`EXTEND`
    rates past each edge of the grid), else the second seed at the optimum; None when the
    cell is done or its sweep is not finished."""
    seed0, seed1 = grid["seeds"][0], grid["seeds"][1]
    mine = [r for r in runs if all(r[k] == v for k, v in cell.items()) and r["seed"] == seed0]
    best = transfer_report.optimum_of(mine, seed0)
    if not transfer_report.swept(mine, grid, cell["task"]) or best is None:
        return None
    after = transfer_report.extension(mine, grid, cell["task"])
    if after is not None:
        return {**cell, "seed": seed0, "lr": after}
    key = {**cell, "seed": seed1, "lr": best["lr"]}
    return None if any(all(r[k] == v for k, v in key.items()) for r in runs) else key


def base_config(setting: str) -> ml_collections.ConfigDict:
    """The depth table's synthetic base (its recipe; smoke: its smoke model and recipe)."""
    return table_recipe.base_config("smoke" if setting == "smoke" else "quick")


def task_bases(base: ml_collections.ConfigDict, grid: dict[str, Any], data_dir: str):
    """Each task's base config: the synthetic tasks' ``base``, Shakespeare the depth table's
    modern decoder (:func:`~deepnet_jax.configs.depth_table_recipe.modern_lm_config`)."""
    out = {}
    for task in grid["tasks"]:
        c = table_recipe.modern_lm_config() if task == "shakespeare" else base
        if data_dir:
            c.data.data_dir = data_dir
        out[task] = table_recipe.task_config(c, task)
    return out


def make_config(bases: dict[str, Any], key: dict[str, Any]) -> ml_collections.ConfigDict:
    """One run's config: the depth table's
    (:func:`~deepnet_jax.configs.depth_table_recipe.make_config`) for the key's row (its model
    fields, and CompleteP's learned positions where the task's model adds sinusoids:
    :func:`configs.experiment_rows.set_row`) at the key's rate."""
    base = bases[key["task"]]
    table_key = {**key, "scheme": key["row"], "warmup": base.schedule.warmup_steps}
    return table_recipe.make_config(base, table_key)


def reuse(
    results: results_file.Results, path: str, bases: dict[str, Any], grid: dict[str, Any]
) -> int:
    """Add the runs of the depth-table results file ``path`` whose configs are this
    experiment's (a plain scheme's row, the grid's task, depth, seed and rate, and the task's
    recipe), each marked ``"reused_from"``; returns how many were added."""
    try:
        with open(path) as f:
            theirs = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise SystemExit(console.error_line(f"--reuse={path}: {e}")) from None
    added = 0
    for run in theirs.get("runs", []):
        task, row = run.get("task"), run.get("scheme")
        if task not in bases or ROWS.get(row) != {"scheme": row} or "init" in run:
            continue
        if depth_table.run_recipe(bases[task]) | {"lr": run["lr"]} != _their_recipe(theirs, run):
            continue
        key = {"task": task, "row": row, "layers": run["layers"], "seed": run["seed"]}
        key["lr"] = run["lr"]
        wanted = run["layers"] in grid["depths"] and run["seed"] in grid["seeds"]
        if wanted and run["lr"] in transfer_report.rates(grid, task) and results.find(key) is None:
            kept = {k: v for k, v in run.items() if k not in _NOT_REUSED}
            results.add(key, kept | {"reused_from": f"{path} ({theirs['setting']})"})
            added += 1
    return added


def _their_recipe(payload: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """A depth-table run's recipe as :func:`depth_table.run_recipe` writes it (its rate and
    warm-up the run's)."""
    s = payload["settings"]
    recipe = {k: s[k] for k in ("updates", "batch", "dropout", "log_every") if k in s}
    recipe |= {"lr": run["lr"], "warmup": run["warmup"]}
    return recipe | ({"schedule": s["schedule"]} if "schedule" in s else {})


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Train the setting's runs not yet in ``<out>/lr_transfer.json`` that no other process
    holds (:func:`train_all`), then write the table and figure of every run the
    file holds; returns the results payload."""
    args, base, out = opening.start(argv, NAME, base_config, SETTINGS)
    grid = dict(GRIDS[args.setting])
    try:
        index, _ = resumable.parse_shard(resumable.SHARD.value)
        grid["rows"] = _chosen_rows(grid["rows"], _ROWS.value)
    except ValueError as e:
        sys.exit(console.error_line(e))
    bases = task_bases(base, grid, args.data_dir)
    levels = {task: depth_table.task_levels(c) for task, c in bases.items()}
    recipes = {task: depth_table.run_recipe(c, with_rates=False) for task, c in bases.items()}
    settings = {"grid": GRIDS[args.setting], "levels": levels, "recipes": recipes}
    results = results_file.Results(
        out, NAME, args.setting, settings, grid=["grid"], head=args.header
    )
    for path in _REUSE.value:
        print(f"reused {reuse(results, path, bases, grid)} runs from {path}")
    if not _REPORT.value:
        train = functools.partial(_train, results, bases, levels, out, index)
        train_all(grid, results, train)
    results.reload()
    table = transfer_report.table(results.runs, settings)
    paths = [results.path, report.write_table(out, NAME, table)]
    paths.append(transfer_report.plot(results.runs, settings, out, NAME))
    print(table)
    print("wrote " + ", ".join(paths))
    return results.payload


def pending(grid: dict[str, Any], runs: list[dict[str, Any]], depths: list[int]):
    """The runs that can start now at ``depths``, shallowest depth first, cell by cell: each
    cell's sweep, then the follow-up its finished sweep allows (:func:`followup`, from
    ``runs``): a cell's extensions and second seed come before the later cells' sweeps, so
    the cells finish one after another, not all at the depth's end; finished runs included."""
    out = []
    for cell in [c for d in depths for c in cells(grid, d)]:
        after = followup(grid, cell, runs)
        out += cell_sweep(grid, cell) + ([after] if after is not None else [])
    return out


def train_all(grid: dict[str, Any], results: results_file.Results, train) -> None:
    """The grid's runs, depth by depth: at each depth, :func:`pending` up to it until no run is
    left that this process can take. ``train(keys)`` trains the first of ``keys`` not yet in
    ``results`` and not held by another process (:func:`resumable.claim`: left to it) and
    returns 1 when one finished (trained here, or recorded by another meanwhile), else 0.

    Every process walks the same list, so none idles on a fixed share while another has a
    backlog, and a shallower depth's follow-ups that another process's runs made possible
    come before the deeper depth's sweep."""
    depths = grid["depths"]
    for i in range(len(depths)):
        while train(pending(grid, results.runs, depths[: i + 1])):
            pass


def _chosen_rows(rows: list[str], chosen: list[str]) -> list[str]:
    wrong = [r for r in chosen if r not in rows]
    if wrong:
        raise ValueError(f"--rows={','.join(chosen)}: the setting's rows are {', '.join(rows)}")
    return [r for r in rows if not chosen or r in chosen]


def _train(results, bases, levels, out: str, index: int, keys: list[dict[str, Any]]) -> int:
    """Train the first of ``keys`` that is not in ``results`` yet and that no other process
    holds (checkpointed, resumable); returns 1 when one finished (trained here, or recorded
    by another process meanwhile), 0 when every one left is held by another process."""
    results.reload()
    for key in [k for k in keys if results.find(k) is None]:
        finished = common.run_grid(
            results,
            [key],
            functools.partial(make_config, bases),
            None,
            os.path.join(out, "runs"),
            judged=False,
            keep=functools.partial(_keep, levels),
            checkpoint_every=resumable.CHECKPOINT_EVERY.value,
            cache_dir=os.path.join(out, "runs", "xla_cache", str(index)),
        )
        results.reload()
        if finished:
            return 1
    return 0


def _keep(levels: dict[str, Any], result: dict[str, Any], workdir: str) -> None:
    """A run's verdict by the depth table's rules (:func:`depth_table.verdict`), and its
    training records (every ``log_every`` updates: the sweep table marks a run that fitted and
    fell back, :func:`collapse.collapse`; kept since the runs of 2026-12-01)."""
    result["verdict"] = depth_table.verdict(result, levels[result["task"]])
    collapse.keep_records(result, workdir)


if __name__ == "__main__":
    main(sys.argv[1:])
