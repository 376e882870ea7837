"""DeepNet's Table 1 and Figure 6 in miniature: every scheme, depths 6 to 200, one recipe, seeds.

Under one recipe (:data:`~deepnet_jax.configs.depth_table_recipe.RECIPE`: the same optimizer,
learning rate, warm-up, batch and updates for every scheme and depth, fixed before the table was
run; docs/reproduction.md gives the exploratory grid it was chosen on), each scheme trains the
DeepNet paper's tiny 64-128-2 encoder-decoder (d_model 64, FFN 128, 2 heads; its Figure 5) with
N encoder and N decoder layers on two synthetic tasks
(:data:`~deepnet_jax.configs.depth_table_recipe.TASKS`, ``data.dataset="synthetic_reversal"``:
the target is the source reversed, then EOS):

* ``reversal``: 11 content symbols, 2–11 tokens (the thousand-layer run's task);
* ``reversal64``: 64 content symbols, 16–24 tokens (longer sequences over a larger vocabulary).

The ``corpus`` setting trains the main job instead (``configs/default.py``: LibreOffice help
German→English, its width, batches, optimizer, learning rate, warm-up and 1,800 updates) with
only the scheme, the depth and the seed changed.

Each run ends with its validation NLL and token accuracy (corpus: NLL and greedy BLEU on the first
:data:`~deepnet_jax.configs.depth_table_recipe.CORPUS_BLEU_SENTENCES` validation sentences), its
**verdict** — ``diverged`` (a non-finite loss or gradient: the trainer's ``nan_policy="halt"``),
``stuck`` or ``trained``; on a synthetic task trained means a final validation NLL at least 1 nat
below the unigram entropy of the validation targets
(:func:`deepnet_jax.experiments.thousand_layers.verdict`), on the corpus 0.25 nats
(:func:`deepnet_jax.experiments.common.verdict`) with a decoder that reads its source
(:func:`verdict`: a target-side language model is stuck) — and its **onset**: the first logged
update whose training accuracy is 0.1 above the best source-blind predictor's
(:func:`~deepnet_jax.experiments.thousand_layers.blind_chance`; corpus: whose training NLL is 0.25
nats below the unigram entropy), and the first to reach 50% and 90% training accuracy.
:mod:`deepnet_jax.experiments.depth_table_report` aggregates the seeds of each cell (mean and
min–max spread) and calls a difference between two schemes only where their seed ranges do not
overlap.

Settings (their grids: :mod:`depth_table_settings`; their recipe and configs:
:mod:`deepnet_jax.configs.depth_table_recipe`; measured on this project's 2-core CPU VM;
docs/reproduction.md has the figures):

=========  ==========================================  ==========================  =====
setting    schemes × depths (N in NL-NL)               tasks                       seeds
=========  ==========================================  ==========================  =====
smoke      post_ln, deepnorm × 2; dlcl_pre × 2         reversal (16-32-2, 4 upd.)  2
quick      post_ln, pre_ln, deepnorm, subln × 6, 18,   reversal, reversal64        3
           50, 100; dlcl_pre, dlcl_post × 6, 18
full       quick's, plus 12 and 200 layers             reversal, reversal64        3
long500    post_ln, pre_ln, deepnorm, subln × 500,     reversal64                  1
           1,600 updates (quick's recipe otherwise)
corpus     post_ln, pre_ln, deepnorm × 6, 18           the main job's corpus       2
modern_lm  pre_ln, deepnorm, subln × 6, 100 (1 stack)  char-level Shakespeare      2
since_     mix_ln, peri_ln, ln_scaling, deepscalelm,   reversal64                  3
deepnet    rezero, skipinit, admin, denseformer,
           hyper_connections, mhc, pre_ln+dyt,
           pre_ln+completep × 6, 18
=========  ==========================================  ==========================  =====

``since_deepnet`` puts the schemes since DeepNet (docs/schemes.md) beside quick's rows under the
same recipe and verdict rules, seed 0 of every cell before seeds 1 and 2; its row ``pre_ln+dyt`` is
Pre-LN with Dynamic Tanh in place of every norm (``model.norm="dyt"``), its row ``pre_ln+completep``
Pre-LN under CompleteP with its base at the setting's shallowest depth and its width, 6 layers per
side and d_model 64, so that its multipliers are 1 at 6L-6L and 3 deep (m_L) at 18L-18L
(``configs.experiment_rows.ROW_FIELDS``; positions learned: ``configs.experiment_rows.set_row``).
Rows are keyed by name (``"scheme"`` in a run's key), so a row added to the grid trains only its own
runs.

``modern_lm`` trains configs/deepnorm_lm.py's modern decoder (rotary positions, SwiGLU,
grouped-query attention, RMSNorm; docs/blocks.md) at
:data:`~deepnet_jax.configs.depth_table_recipe.MODERN_LM`'s tiny width and recipe, its metric
validation bits per character (lower is better).

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

import functools
import json
import math
import os
import sys
from typing import Any

import ml_collections
from absl import flags

from deepnet_jax.common import console
from deepnet_jax.configs import depth_table_recipe as table_recipe
from deepnet_jax.experiments import (
    common,
    opening,
    report,
    results_file,
    resumable,
    thousand_layers,
)
from deepnet_jax.experiments import depth_table_costs as depth_costs
from deepnet_jax.experiments import depth_table_plot as table_plot
from deepnet_jax.experiments import depth_table_report as table_report
from deepnet_jax.experiments import depth_table_settings as table_settings
from deepnet_jax.training import progress

NAME = "depth_table"
FLAGS_FROM = ("resumable",)  # --shard, --checkpoint_every (opening.own_flags)
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


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the setting's runs (this shard's share) not yet in ``<out>/depth_table.json`` (with
    ``--merge``: take them from the files named instead), then write the table and the figure
    of every run the file holds; returns the results payload."""
    args, base, out = opening.start(argv, NAME, table_recipe.base_config, table_settings.SETTINGS)
    try:
        index, count = resumable.parse_shard(resumable.SHARD.value)
        runs = table_settings.keys(args.setting, base)
        chosen = select(runs, args.setting, _TASKS.value, _LAYERS.value)
    except ValueError as e:
        sys.exit(console.error_line(e))
    grid = table_settings.GRIDS[args.setting]
    levels = {task: task_levels(table_recipe.task_config(base, task)) for task in grid["tasks"]}
    settings = {"grid": grid, "levels": levels, **run_recipe(base, "recipes" not in grid)}
    results = results_file.Results(
        out, NAME, args.setting, settings, grid=["grid"], head=args.header
    )
    for path in _MERGE.value:
        print(f"merged {merge(results, path, chosen)} runs from {path}")
    if not _MERGE.value:
        common.run_grid(
            results,
            chosen[index::count],
            functools.partial(table_recipe.make_config, base),
            None,
            os.path.join(out, "runs"),
            judged=False,
            keep=functools.partial(_keep, levels),
            checkpoint_every=resumable.CHECKPOINT_EVERY.value,
            cache_dir=os.path.join(out, "runs", "xla_cache", str(index)),
        )
    results.reload()  # with the runs other shards finished meanwhile
    table = table_report.table(results.runs, settings)
    if "chance" in next(iter(levels.values())):  # the synthetic tasks: what depth costs
        table += "\n" + depth_costs.cost_table(results.runs, settings)
    paths = [
        results.path,
        report.write_table(out, NAME, table),
        table_plot.plot(results.runs, settings, out, NAME),
    ]
    onsets = depth_costs.onset_plot(results.runs, settings, out, f"{NAME}_onsets")
    paths += [onsets] if onsets else []
    print(table)
    print("wrote " + ", ".join(paths))
    return results.payload


def merge(results: results_file.Results, path: str, wanted: list[dict[str, Any]]) -> int:
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
        run = results_file.find_run(theirs.get("runs", []), key)
        if run is not None and results.find(key) is None:
            results.add(key, run)
            added += 1
    return added


def select(
    runs: list[dict[str, Any]], setting: str, tasks: list[str], layers: list[str]
) -> list[dict[str, Any]]:
    """The ``runs`` (a setting's :func:`~depth_table_settings.keys`) on one of ``tasks`` with
    one of ``layers`` (each list empty: no restriction), in their order; ValueError naming the
    flag and the setting's values for a task or depth the setting does not have."""
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


def _keep(levels: dict[str, Any], result: dict[str, Any], workdir: str) -> None:
    """What a run keeps beyond its result: its curves and its verdict (``result`` holds the
    run's key)."""
    thousand_layers.keep_curves(result, workdir)
    result["verdict"] = verdict(result, levels[result["task"]])
    if levels[result["task"]].get("lm"):  # character-level: NLL per token is per character
        result["eval_bits_per_char"] = result["eval_loss"] / math.log(2)


def task_levels(config: ml_collections.ConfigDict) -> dict[str, Any]:
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


def run_recipe(base: ml_collections.ConfigDict, with_rates: bool = True) -> dict[str, Any]:
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
