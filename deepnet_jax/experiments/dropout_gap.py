"""Does a model's prediction depend on dropout? Each checkpoint of one run scored with dropout off
(evaluation mode, as every reported figure) and on (the training's rates), on training and
validation batches.

The question comes from Post-LN on the main job (docs/reproduction.md, "It is dropout"): its
validation NLL ends above the uniform level while its training NLL does not. A model whose
predictions are the same in both modes scores alike; one that adapted to dropout's noise scores
far worse with it off. The ``deepnorm18`` setting asks it of DeepNorm 18L-18L seed 0, which
ignores its source ("Why DeepNorm 18L-18L ignores its source on some seeds"): does it ignore it
only in one mode?

==========  ==========================================================  ==================
setting     run                                                         scored checkpoints
==========  ==========================================================  ==================
smoke       common's 16-32-2 Post-LN on the synthetic reversal task     2, 4
            (one held-out set for both splits), dropout 0.1, 4 updates
quick       the main job (configs/default.py) with Post-LN 6L-6L, seed  400, 1800
            0, its 1,800 updates
deepnorm18  the main job with DeepNorm 18L-18L, seed 0, at its peak     200, 400, 600, 800
            (2e-3): its first 800 updates (the inverse square root
            schedule does not depend on the budget: the 1,800-update
            run's first 800)
==========  ==========================================================  ==================

Each checkpoint is scored on the first :data:`BATCHES` batches of the training split (in its
evaluation order) and of the validation split: token-weighted NLL and accuracy, teacher-forced,
with ``deterministic`` True (dropout off) and False (dropout on, one mask per batch from a
fixed key). An encoder-decoder's batches are scored a second time with their sources shifted
between rows (:mod:`deepnet_jax.training.source_sensitivity`, the trainer's measure; the same
dropout masks): ``source_sensitivity`` is the NLL that adds, in nats per target token.

Run: ``python -m deepnet_jax.experiments.dropout_gap --setting=quick --out=DIR``; writes
``dropout_gap.json`` (the command's header, :func:`deepnet_jax.common.records.header`, the
setting and the scores) and ``dropout_gap.md``.
"""

from __future__ import annotations

import itertools
import os
import sys
from typing import Any

import jax
import ml_collections

from deepnet_jax.configs import experiment_base, experiment_rows
from deepnet_jax.experiments import opening, report, resumable
from deepnet_jax.training import data as train_data
from deepnet_jax.training import loading, source_sensitivity, steps
from deepnet_jax.training.run_config import RunConfig

NAME = "dropout_gap"
SETTINGS = {"smoke": (2, 4), "quick": (400, 1800), "deepnorm18": (200, 400, 600, 800)}  # scored
RUNS = {"smoke": ("post_ln", 2), "quick": ("post_ln", 6), "deepnorm18": ("deepnorm", 18)}
BATCHES = 8  # batches of each split scored
MODES = {"dropout off": True, "dropout on": False}  # name → deterministic


def base_config(setting: str) -> ml_collections.ConfigDict:
    """The run: the main job with the setting's scheme and depth, seed 0, at its own peak and
    warm-up (smoke: common's smoke model with dropout), a checkpoint at every scored update, no
    validation or BLEU during training."""
    last = SETTINGS[setting][-1]
    row, layers = RUNS[setting]
    if setting == "smoke":  # a constant 3e-3, so that the two checkpoints differ
        c = experiment_rows.with_run(
            experiment_base.base_config("smoke"), row, layers, 3e-3, 0, last
        )
        c.model.dropout = 0.1
    else:
        c = experiment_base.main_job_config()
        lr, warmup = c.optimizer.learning_rate, c.schedule.warmup_steps
        c = experiment_rows.with_run(c, row, layers, lr, warmup, last)
    c.checkpoint_every = SETTINGS[setting][0]
    c.max_to_keep = -(-last // c.checkpoint_every)  # every multiple of it, and the last update
    c.eval_every, c.decode.eval_sentences, c.final_split = 0, 0, ""
    return c


def score(run: loading.LoadedRun, batches: list[dict[str, Any]], deterministic: bool) -> dict:
    """Token-weighted NLL and accuracy of ``run``'s parameters over ``batches``; for an
    encoder-decoder also ``source_sensitivity`` (nats per target token), each batch scored again
    with its sources shifted between rows under the same dropout mask."""
    encdec = run.config.model.arch == "encdec"
    loss_fn = jax.jit(steps.make_loss_fn(run.model, run.config.model.arch, 0.0), static_argnums=3)
    total = {"nll_sum": 0.0, "weight": 0.0, "correct": 0.0, "shifted_nll_sum": 0.0}
    for i, batch in enumerate(batches):
        _, sums = loss_fn(run.params, batch, jax.random.key(i), deterministic)
        for key in ("nll_sum", "weight", "correct"):
            total[key] += float(sums[key])
        if encdec:
            shifted = source_sensitivity.with_shifted_sources(batch)
            _, sums = loss_fn(run.params, shifted, jax.random.key(i), deterministic)
            total["shifted_nll_sum"] += float(sums["nll_sum"])
    scores = {
        "nll": total["nll_sum"] / total["weight"],
        "accuracy": total["correct"] / total["weight"],
    }
    if encdec:
        scores["source_sensitivity"] = source_sensitivity.per_token(
            total["nll_sum"], total["shifted_nll_sum"], total["weight"]
        )
    return scores


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Train the setting's run (again: a workdir from before is emptied), score its
    checkpoints in both modes, write the results and the table; returns the results."""
    args, config, out = opening.start(argv, NAME, base_config, tuple(SETTINGS))
    os.makedirs(out, exist_ok=True)
    workdir = os.path.join(out, "run")
    resumable.train_once(config, workdir)
    data = train_data.make_data(RunConfig.from_config(config).resolved(), 1)
    splits = {
        split: list(itertools.islice(data.eval_batches(split), BATCHES))
        for split in ("train", "validation")
    }
    results = []
    for step in SETTINGS[args.setting]:
        run = loading.load_run(workdir, step)
        for split, batches in splits.items():
            for mode, deterministic in MODES.items():
                results.append({"update": step, "split": split, "mode": mode}
                               | score(run, batches, deterministic))  # fmt: skip
    payload = {"header": args.header, "setting": args.setting, "results": results}
    report.write_results(out, NAME, payload, _table(results))
    return {"results": results}


def docs_table(payload: dict[str, Any]) -> str:
    """The table of a results payload (``dropout_gap.json``), as docs/reproduction.md shows it
    between its markers (:mod:`deepnet_jax.experiments.docs_tables`)."""
    return _table(payload["results"]).strip()


def _table(results: list[dict[str, Any]]) -> str:
    """A row per checkpoint, a column per (split, mode): NLL / accuracy, and / source
    sensitivity where the results have it (records before it have not)."""
    sensitivity = all("source_sensitivity" in r for r in results)
    columns = [(s, m) for s in ("train", "validation") for m in MODES]
    header = ["update"] + [f"{s}, {m}" for s, m in columns]
    rows = []
    for step in dict.fromkeys(r["update"] for r in results):
        cell = {(r["split"], r["mode"]): r for r in results if r["update"] == step}
        rows.append([step] + [_cell(cell[c], sensitivity) for c in columns])
    what = "NLL / token accuracy" + (" / source sensitivity (nats)" if sensitivity else "")
    return f"{what}, teacher-forced:\n\n" + report.markdown_table(header, rows) + "\n"


def _cell(scores: dict[str, Any], sensitivity: bool) -> str:
    text = f"{scores['nll']:.2f} / {100 * scores['accuracy']:.2f}%"
    return text + (f" / {scores['source_sensitivity']:.3f}" if sensitivity else "")


if __name__ == "__main__":
    main(sys.argv[1:])
