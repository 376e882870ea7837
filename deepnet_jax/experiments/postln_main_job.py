"""Post-LN on the main job's recipe, instrumented: validation, every layer's gradient norm, the
post-norms' inputs and the model update through training (docs/reproduction.md, "Why Post-LN
fails on the main job's recipe").

=========  ===============================================================  =======  ==========
setting    run                                                              updates  measured
=========  ===============================================================  =======  ==========
smoke      common's 16-32-2 Post-LN on the synthetic reversal task          8        every 2;
                                                                                     validated
                                                                                     every 4
quick      the main job (configs/default.py) with Post-LN 6L-6L, seed 0     800      every 25;
                                                                                     validated
                                                                                     every 100
                                                                                     (greedy
                                                                                     BLEU on
                                                                                     100)
=========  ===============================================================  =======  ==========

The diagnostics are the trainer's (``config.diagnostics.every``): per layer ``grad_norm/<side>/
all`` (the norm of the whole layer's gradient, layer 1 first), ``ln_input/<side>/<norm>`` (the
RMS of each post-norm's input over the measurement batch's tokens) and ``model_update``, DeepNet's
ΔF (§2, Figure 5): ‖F(x, θ_t) − F(x, θ_0)‖ on a fixed batch.

Run: ``python -m deepnet_jax.experiments.postln_main_job --setting=quick --out=DIR``; writes
``postln_main_job.json`` (the command's header, the setting, and per update the training loss,
the validation figures and the diagnostics) and ``postln_main_job.md`` (the gradient table).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import ml_collections

from deepnet_jax.configs import experiment_base, experiment_rows
from deepnet_jax.experiments import opening, report, resumable
from deepnet_jax.runs import metrics

NAME = "postln_main_job"
# setting → (updates, diagnostics every, validation every, greedy-BLEU sentences)
SETTINGS = {"smoke": (8, 2, 4, 4), "quick": (800, 25, 100, 100)}
RESUME_EVERY = {"smoke": 0, "quick": 200}  # checkpoint interval
TABLE_UPDATES = {"smoke": (2, 8), "quick": (25, 125, 325, 625)}  # rows of the gradient table
VALIDATION_KEYS = ("loss", "accuracy", "bleu", "source_sensitivity")
TRAIN_KEYS = ("loss", "nll", "accuracy")


def base_config(setting: str) -> ml_collections.ConfigDict:
    """The run: the main job with Post-LN 6L-6L (smoke: common's smoke model with dropout),
    checkpoints to resume from (quick) and no final test pass."""
    updates, every, eval_every, sentences = SETTINGS[setting]
    if setting == "smoke":
        c = experiment_base.base_config("smoke")
        c = experiment_rows.with_run(c, "post_ln", 2, 3e-3, 0, updates)
        c.model.dropout = 0.1
    else:
        c = experiment_base.main_job_config()
        lr, warmup = c.optimizer.learning_rate, c.schedule.warmup_steps
        c = experiment_rows.with_run(c, "post_ln", 6, lr, warmup, updates)
    c.diagnostics.every, c.diagnostics.plot = every, False
    c.eval_every, c.decode.eval_sentences, c.final_split = eval_every, sentences, ""
    c.checkpoint_every = RESUME_EVERY[setting]  # a stopped run resumes from its newest one
    return c


def compact(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """A run's metrics records (:func:`deepnet_jax.runs.metrics.read`), kept for the docs:
    ``train`` (update and :data:`TRAIN_KEYS`), ``validation`` (update and
    :data:`VALIDATION_KEYS`), ``diagnostics`` (update, ``model_update`` and every
    ``grad_norm/…`` and ``ln_input/…`` list, floats)."""
    out: dict[str, list[dict[str, Any]]] = {"train": [], "validation": [], "diagnostics": []}
    for r in records:
        if r["split"] == "train":
            out["train"].append({"update": r["step"], **{k: r[k] for k in TRAIN_KEYS}})
        elif r["split"] == "eval":
            out["validation"].append(
                {"update": r["step"], **{k: r[k] for k in VALIDATION_KEYS if k in r}}
            )
        elif r["split"] == "diagnostics":
            kept = {
                k: v
                for k, v in r.items()
                if k == "model_update" or k.startswith(("grad_norm/", "ln_input/"))
            }
            out["diagnostics"].append({"update": r["step"], **kept})
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Train the setting's run (resuming a stopped one from its checkpoint), write the results
    and the gradient table; returns the results payload."""
    args, config, out = opening.start(argv, NAME, base_config, tuple(SETTINGS))
    os.makedirs(out, exist_ok=True)
    workdir = os.path.join(out, "run")
    result = resumable.train_once(config, workdir, resume=True)
    payload = {
        "header": args.header,
        "setting": args.setting,
        "cpu_seconds": result["cpu_seconds"],
        **compact(metrics.read(workdir)),
    }
    report.write_results(out, NAME, payload, docs_table(payload))
    return payload


def docs_table(payload: dict[str, Any]) -> str:
    """Every layer's gradient norm (``grad_norm/<side>/all``, layer 1 … L) at the setting's
    :data:`TABLE_UPDATES`, a row per update: docs/reproduction.md's table."""
    by_update = {d["update"]: d for d in payload["diagnostics"]}
    rows = []
    for update in TABLE_UPDATES[payload["setting"]]:
        d = by_update[update]
        rows.append(
            [update] + [", ".join(_figure(g) for g in d[f"grad_norm/{side}/all"]) for side in SIDES]
        )
    return report.markdown_table(["update", *SIDES], rows).strip()


SIDES = ("decoder", "encoder")


def _figure(value: float) -> str:
    """Two significant figures, in scientific notation below 1e-3 (3.4e-06 → 3.4e-6)."""
    if value >= 1e-3:
        return f"{value:.2g}"
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


if __name__ == "__main__":
    main(sys.argv[1:])
