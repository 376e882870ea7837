"""DeepNet's Table 1 and Figure 6 in miniature: every scheme, depths 6 to 200, one recipe, seeds.

Under one recipe (:data:`RECIPE`: the same optimizer, learning rate, warm-up, batch and updates
for every scheme and depth, fixed before the table was run; docs/reproduction.md gives the
exploratory grid it was chosen on), each scheme trains the DeepNet paper's tiny 64-128-2
encoder-decoder (d_model 64, FFN 128, 2 heads; its Figure 5) with N encoder and N decoder
layers on two synthetic tasks (:data:`TASKS`, ``data.dataset="synthetic_reversal"``: the target is
the source reversed, then EOS):

* ``reversal``: 11 content symbols, 2–11 tokens (the thousand-layer run's task);
* ``reversal64``: 64 content symbols, 16–24 tokens (longer sequences over a larger vocabulary).

The ``corpus`` setting trains the main job instead (``configs/default.py``: LibreOffice help
German→English, its width, batches, optimizer, learning rate, warm-up and 1,800 updates) with
only the scheme, the depth and the seed changed.

Each run ends with its validation NLL and token accuracy (corpus: NLL and greedy BLEU on the
first :data:`CORPUS_BLEU_SENTENCES` validation sentences), its **verdict** — ``diverged`` (a
non-finite loss or gradient: the trainer's ``nan_policy="halt"``), ``stuck`` or ``trained``; on
a synthetic task trained means a final validation NLL at least 1 nat below the unigram entropy
of the validation targets (:func:`deepnet_jax.experiments.thousand_layers.verdict`), on the
corpus 0.25 nats (:func:`deepnet_jax.experiments.common.verdict`) with a decoder that reads its
source (:func:`verdict`: a target-side language model is stuck) — and its **onset**: the first
logged update whose training accuracy is 0.1 above the best source-blind predictor's
(:func:`~deepnet_jax.experiments.thousand_layers.blind_chance`; corpus: whose training NLL is
0.25 nats below the unigram entropy), and the first to reach 50% and 90% training accuracy.
:mod:`deepnet_jax.experiments.depth_table_report` aggregates the seeds of each cell (mean and
min–max spread) and calls a difference between two schemes only where their seed ranges do not
overlap.

Settings (measured on this project's 2-core CPU VM; docs/reproduction.md has the figures):

=========  ==========================================  ==========================  =====
setting    schemes × depths (N in NL-NL)               tasks                       seeds
=========  ==========================================  ==========================  =====
smoke      post_ln, deepnorm × 2; dlcl_pre × 2         reversal (16-32-2, 4 upd.)  2
quick      post_ln, pre_ln, deepnorm, subln × 6, 18,   reversal, reversal64        3
           50, 100; dlcl_pre, dlcl_post × 6, 18
full       quick's, plus 12 and 200 layers             reversal, reversal64        3
corpus     post_ln, pre_ln, deepnorm × 6, 18           the main job's corpus       2
modern_lm  pre_ln, deepnorm, subln × 6, 100 (1 stack)  char-level Shakespeare      2
since_     mix_ln, peri_ln, ln_scaling, deepscalelm,   reversal64                  3
deepnet    rezero, skipinit, admin, denseformer,
           pre_ln+dyt × 6, 18
=========  ==========================================  ==========================  =====

``since_deepnet`` puts the schemes since DeepNet (docs/schemes.md) beside quick's rows under the
same recipe and verdict rules, seed 0 of every cell before seeds 1 and 2; its row ``pre_ln+dyt``
is Pre-LN with Dynamic Tanh in place of every norm (``model.norm="dyt"``).

``modern_lm`` trains configs/deepnorm_lm.py's modern decoder (rotary positions, SwiGLU,
grouped-query attention, RMSNorm; docs/blocks.md) at :data:`MODERN_LM`'s tiny width and recipe,
its metric validation bits per character (lower is better).

Run: ``python -m deepnet_jax.experiments.depth_table --setting=quick --out=DIR``; writes
``depth_table.json`` (every run's key, results and training curves, compact:
:mod:`compact_results`; a run started again skips the runs it holds), ``depth_table.md`` (the
table, onsets and called differences; on the synthetic tasks what each depth costs),
``depth_table.png`` (the final metric against depth, a line per scheme, the seeds' spread as
bars) and, on the synthetic tasks, ``depth_table_onsets.png`` (the updates to leave chance and to
reach 50% and 90% against depth: :mod:`depth_table_costs`).
``--shard=i/n`` splits the runs among processes sharing one ``--out``; ``--tasks`` and
``--layers`` restrict a process to part of the setting (e.g. one machine takes ``reversal``,
another ``reversal64``; the results files merge by run: docs/reproduction.md).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import sys
from typing import Any

import ml_collections
from absl import flags

from deepnet_jax.common import console
from deepnet_jax.common.tokens import FIRST_CONTENT_ID
from deepnet_jax.experiments import common, opening, report, thousand_layers
from deepnet_jax.experiments import depth_table_costs as depth_costs
from deepnet_jax.experiments import depth_table_report as table_report
from deepnet_jax.model import schemes
from deepnet_jax.training import progress

NAME = "depth_table"
SETTINGS = ("smoke", "recipe", "init", "quick", "full", "corpus", "modern_lm", "since_deepnet")
_SHARD = flags.DEFINE_string(
    "shard",
    "0/1",
    "i/n: run every n-th run from the i-th, beside processes running the other "
    "shards into the same --out (2 shards on 2 cores: about 1.3x the runs per hour)",
)
_TASKS = flags.DEFINE_list(
    "tasks",
    [],
    "run only these of the setting's tasks (e.g. reversal), so that machines can split a "
    "setting by task; default: all; the table reports every run the file holds",
)
_LAYERS = flags.DEFINE_list(
    "layers", [], "run only the setting's cells with these N (NL-NL; e.g. 6,18); default: all"
)
_MERGE = flags.DEFINE_list(
    "merge",
    [],
    "results files of this setting written elsewhere (another machine's --out/depth_table.json): "
    "add their runs that --out's file lacks, write the table, train nothing",
)
_CHECKPOINT_EVERY = flags.DEFINE_integer(
    "checkpoint_every",
    50,
    "checkpoint each run every this many updates, in a workdir named by the run, so that a run "
    "stopped before its end (a signal, a crash, the machine's session ending) resumes from its "
    "newest checkpoint when the experiment is started again; 0: a run stopped starts over",
    lower_bound=0,
)
CORPUS_BLEU_SENTENCES = 300  # greedy BLEU at the end of a corpus run (the main job's count)


@dataclasses.dataclass(frozen=True)
class Task:
    """A reversal task: ``symbols`` content symbols, content lengths ``min_len`` … ``max_len``
    − 1 (``max_len`` is ``data.max_len``: the target adds EOS)."""

    symbols: int
    min_len: int
    max_len: int

    @property
    def vocab_size(self) -> int:
        return self.symbols + FIRST_CONTENT_ID


TASKS = {
    "reversal": Task(symbols=11, min_len=2, max_len=12),
    "reversal64": Task(symbols=64, min_len=16, max_len=25),
}


@dataclasses.dataclass(frozen=True)
class Recipe:
    """What every run of a synthetic setting shares (the model is common.base_config's)."""

    lr: float
    warmup: int
    updates: int
    batch_size: int
    dropout: float
    log_every: int


# Fixed on 2026-11-26 from the exploratory grid (the ``recipe`` setting; docs/reproduction.md,
# "The recipe") by the rule written before its last runs: the grid point where Post-LN 6L-6L
# reaches the highest validation accuracy, every scheme trained; before any other run of the
# table (earlier designs of the experiment ran before it: docs/reproduction.md, "What was tried
# before this design").
RECIPE = Recipe(lr=2e-3, warmup=400, updates=800, batch_size=32, dropout=0.0, log_every=25)
SMOKE_RECIPE = Recipe(lr=3e-3, warmup=2, updates=4, batch_size=8, dropout=0.0, log_every=2)

_SCHEMES = list(common.SCHEMES)  # the papers' scanned schemes
_DLCL = list(schemes.names(stack="dlcl"))
GRIDS: dict[str, dict[str, Any]] = {
    "smoke": {
        "tasks": ["reversal"],
        "cells": [(s, 2) for s in ("post_ln", "deepnorm", "dlcl_pre")],
        "seeds": [0, 1],
    },
    # the exploratory grid RECIPE was chosen on (one seed; docs/reproduction.md, "The recipe")
    "recipe": {
        "tasks": ["reversal64"],
        "cells": [(s, 6) for s in ("post_ln", "pre_ln", "deepnorm")],
        "seeds": [0],
        "recipes": [(lr, warmup) for lr in (5e-4, 1e-3, 2e-3) for warmup in (50, 400)],
    },
    # Post-LN and Pre-LN under the reference initializations (model.init: docs/reproduction.md,
    # "Is our Post-LN the paper's?"), at the recipe
    "init": {
        "tasks": ["reversal64"],
        "cells": [(s, n) for n in (6, 18) for s in ("post_ln", "pre_ln")],
        "seeds": [0, 1, 2],
        "inits": ["fairseq", "torchscale"],
    },
    "quick": {
        "tasks": ["reversal64", "reversal"],
        "cells": [(s, n) for n in (6, 18, 50, 100) for s in _SCHEMES]
        + [(s, n) for n in (6, 18) for s in _DLCL],
        "seeds": [0, 1, 2],
        # the 1,000-layer columns, on reversal64 only, after the runs above: 200L-200L with
        # every seed (seed 0 of each scheme first), 500L-500L with seed 0 of each scheme, then
        # DeepNorm's seeds 1 and 2
        "more": [
            {"tasks": ["reversal64"], "cells": [(s, 200) for s in _SCHEMES], "seeds": [0]},
            {"tasks": ["reversal64"], "cells": [(s, 200) for s in _SCHEMES], "seeds": [1, 2]},
            {"tasks": ["reversal64"], "cells": [(s, 500) for s in _SCHEMES], "seeds": [0]},
            {"tasks": ["reversal64"], "cells": [("deepnorm", 500)], "seeds": [1, 2]},
        ],
    },
    "full": {
        "tasks": ["reversal64", "reversal"],
        "cells": [(s, n) for n in (6, 12, 18, 50, 100, 200) for s in _SCHEMES]
        + [(s, n) for n in (6, 12, 18) for s in _DLCL],
        "seeds": [0, 1, 2],
    },
    # the schemes since DeepNet under the same recipe and verdict rules, beside quick's rows
    # (docs/schemes.md); seed 0 of every cell first, then seeds 1 and 2
    "since_deepnet": {
        "tasks": ["reversal64"],
        "cells": [(s, n) for n in (6, 18) for s in common.SINCE_DEEPNET_ROWS],
        "seeds": [0, 1, 2],
        "seeds_first": True,
    },
    "corpus": {
        "tasks": ["corpus"],
        "cells": [(s, n) for n in (6, 18) for s in ("post_ln", "pre_ln", "deepnorm")],
        "seeds": [0, 1],
    },
    # the modern decoder (configs/deepnorm_lm.py's blocks at MODERN_LM's tiny width) on
    # character-level Shakespeare: DeepNorm and Sub-LN against Pre-LN at equal updates
    "modern_lm": {
        "tasks": ["shakespeare"],
        "cells": [(s, n) for n in (6, 100) for s in ("pre_ln", "deepnorm", "subln")],
        "seeds": [0, 1],
    },
}
# the modern_lm setting's model and recipe: configs/deepnorm_lm.py's blocks (rotary positions,
# SwiGLU at ⅔·4d → 168, 2 kv heads of 4, RMSNorm, no biases) at d 64, windows of 128 characters
MODERN_LM = {
    "d_model": 64,
    "num_heads": 4,
    "num_kv_heads": 2,
    "ffn_dim": 168,
    "max_len": 128,
    "batch_size": 16,
    "updates": 600,
    "warmup": 100,
    "lr": 1e-3,
}


def keys(setting: str, base: ml_collections.ConfigDict) -> list[dict[str, Any]]:
    """The setting's runs in the order they run: task by task (the grid's order), the scanned
    schemes by depth before the unrolled stacks (DLCL, DenseFormer), every seed of a cell
    together (or, in a grid with ``seeds_first``, every cell of a seed together), so that a
    partial table holds the paper's Table 1 shape on the first task first, then the runs of
    the grid's ``more`` (sub-grids of their own tasks, cells and seeds), each in that order:
    ``{"task", "scheme", "layers", "seed", "lr", "warmup"}`` each, plus ``"init"`` in a grid of
    initializations; the learning rate and warm-up are ``base``'s (the recipe's) except in the
    ``recipe`` setting's grid."""
    grid = GRIDS[setting]
    runs = _grid_keys(grid, base)
    for part in grid.get("more", []):  # runs the grid adds after its own, in their order
        runs += _grid_keys(part, base)
    return runs


def _grid_keys(grid: dict[str, Any], base: ml_collections.ConfigDict) -> list[dict[str, Any]]:
    """One grid's runs (:func:`keys` without the grid's ``more``)."""
    scannable = {row: schemes.get(common.split_row(row)[0]).scannable for row, _ in grid["cells"]}
    cells = sorted(grid["cells"], key=lambda cell: (not scannable[cell[0]], cell[1]))
    recipes = grid.get("recipes", [(base.optimizer.learning_rate, base.schedule.warmup_steps)])
    inits = [{"init": init} for init in grid["inits"]] if "inits" in grid else [{}]
    runs = [
        {"task": task, "scheme": scheme, "layers": n, "seed": seed, "lr": lr, "warmup": warmup}
        | init
        for lr, warmup in recipes
        for init in inits
        for task in grid["tasks"]
        for scheme, n in cells
        for seed in grid["seeds"]
    ]
    if grid.get("seeds_first"):  # stable: within a seed, the order above
        runs.sort(key=lambda run: grid["seeds"].index(run["seed"]))
    return runs


def base_config(setting: str) -> ml_collections.ConfigDict:
    """The main job's config (corpus; greedy BLEU on the validation split at the end, no
    validation before it, the diagnostics every 100 updates), or common.base_config's tiny
    model under :data:`RECIPE` (smoke: common's 16-32-2 smoke model under
    :data:`SMOKE_RECIPE`); the task is set per run."""
    if setting == "corpus":
        c = common.main_job_config()
        c.eval_every = 0
        c.decode.eval_sentences = CORPUS_BLEU_SENTENCES
        c.diagnostics.every = 100  # per-layer gradient norms and LN inputs (measurement only)
        return c
    if setting == "modern_lm":
        return modern_lm_config()
    c = common.base_config("smoke" if setting == "smoke" else "quick")
    recipe = SMOKE_RECIPE if setting == "smoke" else RECIPE
    c.data.dataset = "synthetic_reversal"
    c.data.max_tokens, c.data.bucket_boundaries = 0, ()
    c.data.batch_size = recipe.batch_size
    c.model.dropout = recipe.dropout
    c.log_every = recipe.log_every
    c.eval_batches = 4
    c.peak_flops = 1e12  # no fp32 matmul measurement for the MFU estimate
    c.model.remat_policy = "none"  # 200 layers of B×T×64 activations fit; no recompute
    c.optimizer.learning_rate = recipe.lr
    c.schedule.warmup_steps = recipe.warmup
    c.total_steps = recipe.updates
    return c


def modern_lm_config() -> ml_collections.ConfigDict:
    """configs/deepnorm_lm.py at :data:`MODERN_LM`'s width and recipe (the inverse square root
    schedule every depth_table run takes from ``common.with_run``, not the shipped config's
    polynomial decay; dropout 0), validation NLL at the end only, no checkpoints."""
    c = common.shipped_config("deepnorm_lm")
    m, k = c.model, MODERN_LM
    m.d_model, m.num_heads, m.num_kv_heads, m.ffn_dim = (
        k["d_model"], k["num_heads"], k["num_kv_heads"], k["ffn_dim"]
    )  # fmt: skip
    m.dropout = 0.0
    c.data.max_len, c.data.batch_size = k["max_len"], k["batch_size"]
    c.optimizer.learning_rate, c.schedule.warmup_steps = k["lr"], k["warmup"]
    c.schedule.name = "inverse_sqrt"  # what with_run gives each run, so the record says it
    c.total_steps = k["updates"]
    c.eval_every, c.eval_batches, c.log_every = 0, 16, 25
    c.peak_flops = 1e12  # no fp32 matmul measurement for the MFU estimate
    return c


def task_config(base: ml_collections.ConfigDict, task: str) -> ml_collections.ConfigDict:
    """``base`` on ``task`` (a :data:`TASKS` name; "corpus", "shakespeare": ``base`` as it
    is)."""
    c = ml_collections.ConfigDict(base.to_dict())
    if task in TASKS:
        t = TASKS[task]
        c.model.vocab_size = c.data.vocab_size = t.vocab_size
        c.model.max_len = c.data.max_len = t.max_len
        c.data.min_len = t.min_len
    return c


def make_config(base: ml_collections.ConfigDict, key: dict[str, Any]) -> ml_collections.ConfigDict:
    """``base`` for one run: ``key``'s task, scheme, N encoder and N decoder layers, seed, peak
    learning rate and warm-up (inverse square root) and, if it names one, its ``model.init``;
    the updates stay the recipe's."""
    c = task_config(base, key["task"])
    c = common.with_run(c, key["scheme"], key["layers"], key["lr"], key["warmup"], c.total_steps)
    c.seed = key["seed"]
    c.model.init = key.get("init", c.model.init)
    return c


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the setting's runs (this shard's share) not yet in ``<out>/depth_table.json`` (with
    ``--merge``: take them from the files named instead), then write the table and the figure
    of every run the file holds; returns the results payload."""
    args, base, out = opening.start(argv, NAME, base_config, SETTINGS)
    try:
        index, count = parse_shard(_SHARD.value)
        chosen = select(keys(args.setting, base), args.setting, _TASKS.value, _LAYERS.value)
    except ValueError as e:
        sys.exit(console.error_line(e))
    levels = {task: _levels(task_config(base, task)) for task in GRIDS[args.setting]["tasks"]}
    grid = GRIDS[args.setting]
    settings = {"grid": grid, "levels": levels, **_recipe(base, "recipes" not in grid)}
    results = common.Results(out, NAME, args.setting, settings, grid=["grid"])
    for path in _MERGE.value:
        print(f"merged {merge(results, path, chosen)} runs from {path}")
    if not _MERGE.value:
        common.run_grid(
            results,
            chosen[index::count],
            functools.partial(make_config, base),
            None,
            os.path.join(out, "runs"),
            judged=False,
            keep=functools.partial(_keep, levels),
            checkpoint_every=_CHECKPOINT_EVERY.value,
            cache_dir=os.path.join(out, "runs", "xla_cache", str(index)),
        )
    results.reload()  # with the runs other shards finished meanwhile
    table = table_report.table(results.runs, settings)
    if "chance" in next(iter(levels.values())):  # the synthetic tasks: what depth costs
        table += "\n" + depth_costs.cost_table(results.runs, settings)
    paths = [
        results.path,
        report.write_table(out, NAME, table),
        table_report.plot(results.runs, settings, out, NAME),
    ]
    onsets = depth_costs.onset_plot(results.runs, settings, out, f"{NAME}_onsets")
    paths += [onsets] if onsets else []
    print(table)
    print("wrote " + ", ".join(paths))
    return results.payload


def merge(results: common.Results, path: str, wanted: list[dict[str, Any]]) -> int:
    """Add to ``results`` the runs of the results file at ``path`` whose key is one of
    ``wanted`` and which ``results`` lacks; returns how many. SystemExit if that file was made
    with another setting or recipe (its runs would not belong in this table)."""
    try:
        with open(path) as f:
            theirs = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise SystemExit(console.error_line(f"--merge={path}: {e}")) from None
    differ = results.differing(theirs)
    if differ:
        differ_text = ", ".join(differ)
        message = f"--merge={path}: made with other settings ({differ_text})"
        raise SystemExit(console.error_line(message))
    added = 0
    for key in wanted:
        run = common.find_run(theirs.get("runs", []), key)
        if run is not None and results.find(key) is None:
            results.add(key, run)
            added += 1
    return added


def select(
    runs: list[dict[str, Any]], setting: str, tasks: list[str], layers: list[str]
) -> list[dict[str, Any]]:
    """The ``runs`` (a setting's :func:`keys`) on one of ``tasks`` with one of ``layers`` (each
    list empty: no restriction), in their order; ValueError naming the flag and the setting's
    values for a task or depth the setting does not have."""
    allowed = {
        "tasks": list(dict.fromkeys(run["task"] for run in runs)),
        "layers": sorted({run["layers"] for run in runs}),
    }
    for name, given, values in (
        ("tasks", tasks, allowed["tasks"]),
        ("layers", layers, allowed["layers"]),
    ):
        wrong = [v for v in given if v not in map(str, values)]
        if wrong:
            shown = ", ".join(map(str, values))
            raise ValueError(f"--{name}={','.join(given)}: {setting} has {name} {shown}")
    return [
        run
        for run in runs
        if (not tasks or run["task"] in tasks) and (not layers or str(run["layers"]) in layers)
    ]


def parse_shard(text: str) -> tuple[int, int]:
    """``--shard=i/n`` → (i, n): this process runs every n-th run from the i-th (0 ≤ i < n)."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard={text!r}: expected i/n, e.g. 0/2") from None
    if not 0 <= index < count:
        raise ValueError(f"--shard={text!r}: needs 0 <= i < n")
    return index, count


def _keep(levels: dict[str, Any], result: dict[str, Any], workdir: str) -> None:
    """What a run keeps beyond its result: its curves and its verdict (``result`` holds the
    run's key)."""
    thousand_layers.keep_curves(result, workdir)
    result["verdict"] = verdict(result, levels[result["task"]])
    if levels[result["task"]].get("lm"):  # character-level: NLL per token is per character
        result["eval_bits_per_char"] = result["eval_loss"] / math.log(2)


def _levels(config: ml_collections.ConfigDict) -> dict[str, Any]:
    """A task's reference levels: the unigram entropy of its validation targets and, for a
    synthetic task, the best source-blind predictor's accuracy and NLL."""
    out: dict[str, Any] = {"unigram_entropy": common.unigram_entropy(config)}
    if config.model.arch == "decoder":
        out["lm"] = True
    if config.data.dataset == "synthetic_reversal":
        out["chance"] = thousand_layers.blind_chance(
            config.model.vocab_size, config.data.max_len, config.data.min_len
        )
    return out


def verdict(run: dict[str, Any], levels: dict[str, Any]) -> str:
    """The synthetic tasks' verdict (1 nat below the unigram entropy) or the corpus's (0.25
    nats), where a translation run whose decoder ignores its source (validation source
    sensitivity below ``progress.SOURCE_BLIND_NATS``: a target-side language model, however
    low its NLL) is ``stuck``."""
    if "chance" in levels:
        return thousand_layers.verdict(run, levels["unigram_entropy"])
    judged = common.verdict(run, levels["unigram_entropy"])
    sensitivity = run.get("eval_source_sensitivity")
    blind = sensitivity is not None and sensitivity < progress.SOURCE_BLIND_NATS
    return "stuck" if judged == "trained" and blind else judged


def _recipe(base: ml_collections.ConfigDict, with_rates: bool = True) -> dict[str, Any]:
    """What the runs share, as the results file records it (a results file made under another
    recipe is started afresh); the learning rate and warm-up only ``with_rates`` (not for the
    ``recipe`` setting's grid, whose runs have their own)."""
    rates = {"lr": base.optimizer.learning_rate, "warmup": base.schedule.warmup_steps}
    if base.schedule.name != "inverse_sqrt":  # recorded where it is not the settings' usual
        rates["schedule"] = base.schedule.name
    return (rates if with_rates else {}) | {
        "updates": base.total_steps,
        "batch": base.data.batch_size if not base.data.max_tokens else base.data.max_tokens,
        "dropout": base.model.dropout,
        "log_every": base.log_every,
    }


if __name__ == "__main__":
    main(sys.argv[1:])
