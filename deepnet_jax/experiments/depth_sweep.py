"""DeepNet's Table 1 / Figure 6 on the main job: which schemes still translate as depth grows.

Each scheme trains the main job's encoder-decoder (``configs/default.py``: LibreOffice help
German→English split by page, its width, vocabulary, token-budget batches, optimizer, learning
rate and warm-up) at several depths, with nothing but the scheme and the depth changed. Each run
ends with its validation NLL, greedy BLEU on the first 500 validation sentences, the **source
sensitivity** (how many nats per target token the validation NLL rises when every row gets
another row's source; ≈ 0 means the decoder ignores its source, see
:mod:`deepnet_jax.training.source_sensitivity`) and a verdict: diverged, stuck or trained
(``common.verdict``: stuck = validation NLL within 0.25 nats of the unigram entropy).

Settings (peak learning rate and warm-up: the main job's, 2e-3 after 400 updates; smoke: the
synthetic reversal task at 16-32-2, lr 2e-3):

=========  ==========================  =============  =======================================
setting    schemes                     depths (N)     updates; wall on 2 CPU cores
=========  ==========================  =============  =======================================
smoke      deepnorm, dlcl_pre          2              4; 43 s as a fresh process
quick      post_ln, deepnorm           6 (main job)   1,400 (main job: 1,800); 28 min measured
                                                      (691 s + 759 s of runs, machine shared)
full       post_ln, pre_ln, deepnorm,  6, 12, 18, 50  1,800 (the main job's); not run here
           subln (+ dlcl_pre at 6, 12)
=========  ==========================  =============  =======================================

The quick setting answers one question: at the main job's depth and settings, does Post-LN
train where DeepNorm does? It was chosen after the main job's 800-update probes had shown
Post-LN stuck there (docs/main_job.md: validation NLL 6.28–6.37, the unigram level), so it
checks that observation over a longer run rather than testing a prediction made blind. The
main job's greedy validation BLEU passes 10 between updates 800 and 1,200 (docs/main_job.md),
so 1,400 updates leave a margin; two runs were estimated at 20 minutes and took 28.

Run: ``python -m deepnet_jax.experiments.depth_sweep --setting=quick --out=DIR``; writes
``depth_sweep.json``, ``depth_sweep.png`` (validation NLL, greedy BLEU and source sensitivity
against depth, crosses for diverged runs) and ``depth_sweep.md``.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any

import ml_collections

from deepnet_jax.experiments import common, opening, report

NAME = "depth_sweep"
MAIN_JOB_DEPTH = 6  # configs/default.py's (checked by the tests)
QUICK_STEPS = 1400
SETTINGS = {
    "smoke": {
        "depths": [2],
        "dlcl_depths": [2],
        "steps": 4,
        "schemes": ["deepnorm"],
        "dlcl": ["dlcl_pre"],
        "bleu_sentences": 0,
    },
    "quick": {
        "depths": [MAIN_JOB_DEPTH],
        "dlcl_depths": [],
        "steps": QUICK_STEPS,
        "schemes": ["post_ln", "deepnorm"],
        "dlcl": [],
        "bleu_sentences": 500,
    },
    "full": {
        "depths": [MAIN_JOB_DEPTH, 12, 18, 50],
        "dlcl_depths": [MAIN_JOB_DEPTH, 12],
        "steps": 0,  # the main job's total_steps
        "schemes": list(common.SCHEMES),
        "dlcl": ["dlcl_pre"],
        "bleu_sentences": 500,
    },
}
# what the table and the figure show of a run, where the run has it
FIGURES = (
    ("eval_loss", "validation NLL"),
    ("eval_bleu_greedy", "greedy BLEU"),
    ("eval_source_sensitivity", "source sensitivity (nats)"),
)


def base_config(setting: str) -> ml_collections.ConfigDict:
    """The main job's config (quick, full) or the synthetic smoke config, with validation at the
    end only and greedy BLEU on the setting's number of validation sentences."""
    if setting == "smoke":
        c = common.base_config(setting)
        c.optimizer.learning_rate = 2e-3
    else:
        c = common.main_job_config()
        c.eval_every = 0
    c.decode.eval_sentences = SETTINGS[setting]["bleu_sentences"]
    return c


def make_config(
    base: ml_collections.ConfigDict, key: dict[str, Any], steps: int
) -> ml_collections.ConfigDict:
    """``base`` with the run's scheme and depth (N encoder and N decoder layers) and ``steps``
    updates (0: the base's own); DLCL stacks are unrolled (each layer reads every earlier one)."""
    c = ml_collections.ConfigDict(base.to_dict())
    c.model.scheme = key["scheme"]
    c.model.num_encoder_layers = c.model.num_decoder_layers = key["layers"]
    c.model.scan_layers = not key["scheme"].startswith("dlcl")
    if steps:
        c.total_steps = steps
    c.schedule.warmup_steps = min(c.schedule.warmup_steps, c.total_steps // 2)
    return c


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args, base, out = opening.start(argv, NAME, base_config)
    s = SETTINGS[args.setting]
    entropy = None if args.setting == "smoke" else common.unigram_entropy(base)
    settings = {**s, "unigram_entropy": entropy, "learning_rate": base.optimizer.learning_rate}
    results = common.Results(out, NAME, args.setting, settings)
    keys = [
        {"scheme": scheme, "layers": n}
        for n in sorted(set(s["depths"]) | set(s["dlcl_depths"]))
        for scheme in s["schemes"] + s["dlcl"]
        if n in (s["dlcl_depths"] if scheme.startswith("dlcl") else s["depths"])
    ]
    runs = common.run_grid(
        results,
        keys,
        lambda key: make_config(base, key, s["steps"]),
        entropy,
        os.path.join(out, "runs"),
    )
    table = _table(runs, s, base, entropy)
    paths = [results.path, report.write_table(out, NAME, table), _plot(runs, s, entropy, out)]
    print(table)
    print("wrote " + ", ".join(paths))
    return results.payload


def _table(
    runs: list[dict[str, Any]],
    s: dict[str, Any],
    base: ml_collections.ConfigDict,
    entropy: float | None,
) -> str:
    """A row per scheme, a column per depth: verdict, validation NLL, BLEU, sensitivity."""
    depths = sorted({run["layers"] for run in runs})
    header = ["scheme"] + [f"{n}L-{n}L" for n in depths]
    rows = []
    for scheme in s["schemes"] + s["dlcl"]:
        row: list[Any] = [scheme]
        for n in depths:
            run = next((r for r in runs if (r["scheme"], r["layers"]) == (scheme, n)), None)
            row.append("" if run is None else _cell(run))
        rows.append(row)
    steps = s["steps"] or base.total_steps
    note = (
        f"Verdict, validation NLL, greedy BLEU and source sensitivity (nats) after {steps} "
        f"updates at peak learning rate {base.optimizer.learning_rate:g}"
    )
    if entropy is not None:
        note += f"; unigram entropy of the validation targets {entropy:.3f} nats"
    if s["bleu_sentences"]:
        note += f"; BLEU on {s['bleu_sentences']} validation sentences"
    return f"{note}.\n\n" + report.markdown_table(header, rows)


def _cell(run: dict[str, Any]) -> str:
    if run["verdict"] == "diverged":
        return f"diverged (update {run['nonfinite_step']})"
    text = f"{run['verdict']} {run['eval_loss']:.3f}"
    if "eval_bleu_greedy" in run:
        text += f", BLEU {run['eval_bleu_greedy']:.1f}"
    if "eval_source_sensitivity" in run:
        text += f", sens. {run['eval_source_sensitivity']:.2f}"
    return text


def _plot(runs: list[dict[str, Any]], s: dict[str, Any], entropy: float | None, out: str) -> str:
    plt = report.pyplot()
    shown = [(k, label) for k, label in FIGURES if any(k in r for r in runs)]
    fig, axes = plt.subplots(1, len(shown), figsize=(4.2 * len(shown), 3.2), squeeze=False)
    depths = sorted({r["layers"] for r in runs})
    for ax, (key, label) in zip(axes[0], shown, strict=True):
        finite = [r[key] for r in runs if key in r and not math.isnan(r[key])]
        cross_at = max(finite) * 1.05 if finite else 1.0
        for scheme in s["schemes"] + s["dlcl"]:
            mine = sorted((r for r in runs if r["scheme"] == scheme), key=lambda r: r["layers"])
            if not mine:
                continue
            xs = [r["layers"] for r in mine]
            ys = [cross_at if math.isnan(r.get(key, math.nan)) else r[key] for r in mine]
            (line,) = ax.plot(xs, ys, marker="o", label=scheme)
            for x, r in zip(xs, mine, strict=True):
                if r["verdict"] == "diverged":
                    ax.plot([x], [cross_at], marker="x", markersize=10, color=line.get_color())
        if key == "eval_loss":
            report.mark_stuck(ax, entropy)
        ax.set_xscale("log")
        ax.set_xticks(depths)
        ax.set_xticklabels([str(n) for n in depths])
        ax.set_xlabel("layers per side (N in NL-NL)")
        ax.set_ylabel(label + " (× = diverged)")
    axes[0][0].legend(fontsize=7)
    return report.save_figure(fig, out, NAME)


if __name__ == "__main__":
    main(sys.argv[1:])
