"""DeepNet's Figure 5: the model update ‖F(x; θ_t) − F(x; θ_0)‖ over the first updates.

Post-LN, Pre-LN, DeepNorm and Sub-LN tiny 64-128-2 encoder-decoders (``common``) at several
depths, trained at the paper's peak learning rate 5e-4 without warm-up (constant from the
first update) and with the paper's warm-up (4,000 updates from 1e-7, inverse square root),
measuring the model update (``deepnet_jax.training.diagnostics``: the decoder's output on the first
validation batch, L2 over the hidden axis, mean over non-padding tokens) every few updates.

Settings (fixed before any model_update result):

=========  ================  =======  ==============  ======================================
setting    depths (N L-N L)  updates  measured every  cost on 2 CPU cores
=========  ================  =======  ==============  ======================================
smoke      2                 4        2               about 1 min (synthetic reversal, 16-32-2)
quick      6, 18             100      5               19.4 min (measured)
full       6, 18, 50, 100    300      10              about 5 hours (100L-100L: ~2 s/update)
=========  ================  =======  ==============  ======================================

Run: ``python -m deepnet_jax.experiments.model_update --setting=quick --out=DIR``; writes
``model_update.json``, ``model_update.png`` (ΔF over updates: a row per warm-up, a column
per scheme, a curve per depth) and ``model_update.md``.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any

from deepnet_jax.experiments import common, opening, report

NAME = "model_update"
SETTINGS = {
    "smoke": {"depths": [2], "steps": 4, "every": 2},
    "quick": {"depths": [6, 18], "steps": 100, "every": 5},
    "full": {"depths": [6, 18, 50, 100], "steps": 300, "every": 10},
}
WARMUPS = {"none": 0, "paper": common.PAPER_WARMUP}  # warm-up updates (0: constant lr)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args, base, out = opening.start(argv, NAME, common.base_config)
    s = SETTINGS[args.setting]
    schemes = ["post_ln", "deepnorm"] if args.setting == "smoke" else list(common.SCHEMES)
    entropy = None if args.setting == "smoke" else common.unigram_entropy(base)
    results = common.Results(
        out, NAME, args.setting, {**s, "schemes": schemes, "lr": common.PAPER_LR}
    )
    keys = [
        {"scheme": scheme, "layers": n, "warmup": w}
        for w in WARMUPS
        for scheme in schemes
        for n in s["depths"]
    ]

    def make_config(key):
        c = common.with_run(
            base, key["scheme"], key["layers"], common.PAPER_LR, WARMUPS[key["warmup"]], s["steps"]
        )
        c.diagnostics.every = s["every"]
        return c

    runs = common.run_grid(results, keys, make_config, entropy, os.path.join(out, "runs"))
    rows = []
    for run in runs:
        series = _series(run)
        early = series[1][1] if len(series) > 1 else math.nan
        rows.append(
            [
                run["scheme"],
                f"{run['layers']}L-{run['layers']}L",
                run["warmup"],
                early,
                max(v for _, v in series),
                series[-1][1],
                run.get("train_loss", math.nan),
                run["eval_loss"],
                run["verdict"] if entropy is None else common.verdict(run, entropy),
            ]
        )
    header = [
        "scheme",
        "depth",
        "warm-up",
        f"ΔF after {s['every']}",
        "max ΔF",
        f"ΔF after {s['steps']}",
        "last train loss",
        "validation NLL",
        "run",
    ]
    table = report.markdown_table(header, rows)
    if entropy is not None:
        table = f"Unigram entropy of the validation targets: {entropy:.3f} nats.\n\n" + table
    paths = [results.path, report.write_table(out, NAME, table), _plot(runs, schemes, s, out)]
    print(table)
    print("wrote " + ", ".join(paths))
    return results.payload


def _series(run: dict[str, Any]) -> list[tuple[int, float]]:
    """(update, ΔF) pairs of a run's diagnostics records."""
    return [(r["step"], r["model_update"]) for r in run["diagnostics"]]


def _plot(runs: list[dict[str, Any]], schemes: list[str], s: dict[str, Any], out: str) -> str:
    plt = report.pyplot()
    fig, axes = plt.subplots(
        len(WARMUPS),
        len(schemes),
        figsize=(3.2 * len(schemes), 2.6 * len(WARMUPS)),
        sharex=True,
        sharey=True,
        squeeze=False,
    )
    for row, warmup in enumerate(WARMUPS):
        for col, scheme in enumerate(schemes):
            ax = axes[row][col]
            for run in runs:
                if run["scheme"] == scheme and run["warmup"] == warmup:
                    steps, values = zip(*_series(run)[1:], strict=True)
                    ax.plot(steps, values, label=f"{run['layers']}L-{run['layers']}L")
            ax.set_yscale("log")
            ax.set_title(f"{scheme}, warm-up: {warmup}", fontsize=9)
            if row == len(WARMUPS) - 1:
                ax.set_xlabel("updates")
            if col == 0:
                ax.set_ylabel("model update ΔF")
    axes[0][0].legend(fontsize=7)
    return report.save_figure(fig, out, NAME)


if __name__ == "__main__":
    main(sys.argv[1:])
