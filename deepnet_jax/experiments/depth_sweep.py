"""DeepNet's Table 1 / Figure 6 in miniature: which schemes train as the depth grows.

Each scheme (Post-LN, Pre-LN, DeepNorm, Sub-LN, and the DLCL baselines at the depths where
they are affordable here) trains tiny 64-128-2 encoder-decoders (``common``) of increasing
depth for a fixed budget of updates at the paper's peak learning rate (5e-4) and at 4× it
(the quick setting: 4× only, see below), with an inverse-square-root schedule whose warm-up
(from 1e-7) is half the budget, the proportion of the paper's IWSLT-14 runs (4,000 of 8,000
updates). Each run ends with its validation NLL and accuracy (and greedy BLEU in the full
setting) and a verdict: diverged, stuck or trained (``common.verdict``).

Settings (fixed before any result was seen):

=========  ================  ==============  =======  ====================================
setting    depths (N L-N L)  DLCL depths     updates  cost on 2 CPU cores
=========  ================  ==============  =======  ====================================
smoke      2                 2 (dlcl_pre)    4        about 1 min (synthetic reversal, 16-32-2)
quick      6, 18             6 (dlcl_pre)    200      17 min, measured (lr 2e-3 only)
full       6, 18, 50, 100    6, 18           2,000    about 2 days (100L-100L: ~2 s/update)
=========  ================  ==============  =======  ====================================

The quick setting trains at 2e-3 only: with the warm-up over half of 200 updates, the
learning rate summed over the run is 0.17 at 2e-3 and 0.04 at 5e-4, and the model-update runs
were still at the unigram entropy after 100 constant updates at 5e-4 (a sum of 0.05), so a
5e-4 run could only come out stuck, for every scheme.

Run: ``python -m deepnet_jax.experiments.depth_sweep --setting=quick --out=DIR``; writes
``depth_sweep.json``, ``depth_sweep.png`` (validation NLL against depth, a panel per learning
rate, crosses for diverged runs) and ``depth_sweep.md``.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any

from deepnet_jax.experiments import common

NAME = "depth_sweep"
SETTINGS = {
    "smoke": {
        "depths": [2],
        "dlcl_depths": [2],
        "steps": 4,
        "schemes": ["deepnorm"],
        "dlcl": ["dlcl_pre"],
        "lrs": [5e-4, 2e-3],
        "bleu_sentences": 0,
    },
    "quick": {
        "depths": [6, 18],
        "dlcl_depths": [6],
        "steps": 200,
        "schemes": list(common.SCHEMES),
        "dlcl": ["dlcl_pre"],
        "lrs": [2e-3],
        "bleu_sentences": 0,
    },
    "full": {
        "depths": [6, 18, 50, 100],
        "dlcl_depths": [6, 18],
        "steps": 2000,
        "schemes": list(common.SCHEMES),
        "dlcl": ["dlcl_pre", "dlcl_post"],
        "lrs": [5e-4, 2e-3],
        "bleu_sentences": 500,
    },
}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = common.parser(__doc__.splitlines()[0]).parse_args(argv)
    common.compile_fast_for_smoke(args.setting)
    base = common.base_config(args.setting)
    common.configure_data(base, args)
    s = SETTINGS[args.setting]
    base.decode.eval_sentences = s["bleu_sentences"]
    out = common.output_dir(args, NAME)
    entropy = None if args.setting == "smoke" else common.unigram_entropy(base)
    results = common.Results(out, NAME, args.setting, {**s, "unigram_entropy": entropy})
    keys = [
        {"scheme": scheme, "layers": n, "lr": lr}
        for lr in s["lrs"]
        for n in sorted(set(s["depths"]) | set(s["dlcl_depths"]))
        for scheme in s["schemes"] + s["dlcl"]
        if n in (s["dlcl_depths"] if scheme.startswith("dlcl") else s["depths"])
    ]

    def make_config(key):
        steps = s["steps"]
        return common.with_run(base, key["scheme"], key["layers"], key["lr"], steps // 2, steps)

    runs = common.run_grid(results, keys, make_config, entropy, os.path.join(out, "runs"))
    table = _table(runs, s, entropy)
    paths = [results.path, common.write_table(out, NAME, table), _plot(runs, s, entropy, out)]
    print(table)
    print("wrote " + ", ".join(paths))
    return results.payload


def _table(runs: list[dict[str, Any]], s: dict[str, Any], entropy: float | None) -> str:
    """A row per (scheme, learning rate), a column per depth: verdict and validation NLL."""
    depths = sorted({run["layers"] for run in runs})
    header = ["scheme", "peak lr"] + [f"{n}L-{n}L" for n in depths]
    rows = []
    for lr in s["lrs"]:
        for scheme in s["schemes"] + s["dlcl"]:
            row: list[Any] = [scheme, f"{lr:g}"]
            for n in depths:
                run = next(
                    (r for r in runs if (r["scheme"], r["layers"], r["lr"]) == (scheme, n, lr)),
                    None,
                )
                row.append("" if run is None else _cell(run))
            rows.append(row)
    note = f"Verdict and validation NLL after {s['steps']} updates"
    if entropy is not None:
        note += f"; unigram entropy of the validation targets {entropy:.3f} nats"
    if s["bleu_sentences"]:
        note += f"; greedy BLEU on {s['bleu_sentences']} validation sentences"
    return f"{note}.\n\n" + common.markdown_table(header, rows)


def _cell(run: dict[str, Any]) -> str:
    if run["verdict"] == "diverged":
        return f"diverged (update {run['nonfinite_step']})"
    text = f"{run['verdict']} {run['eval_loss']:.3f}"
    if "eval_bleu_greedy" in run:
        text += f", BLEU {run['eval_bleu_greedy']:.1f}"
    return text


def _plot(runs: list[dict[str, Any]], s: dict[str, Any], entropy: float | None, out: str) -> str:
    plt = common.pyplot()
    lrs = s["lrs"]
    fig, axes = plt.subplots(1, len(lrs), figsize=(4.2 * len(lrs), 3.2), sharey=True, squeeze=False)
    finite = [r["eval_loss"] for r in runs if not math.isnan(r["eval_loss"])]
    top = max(finite) if finite else 1.0
    for ax, lr in zip(axes[0], lrs, strict=True):
        for scheme in s["schemes"] + s["dlcl"]:
            mine = sorted(
                (r for r in runs if r["scheme"] == scheme and r["lr"] == lr),
                key=lambda r: r["layers"],
            )
            if not mine:
                continue
            xs = [r["layers"] for r in mine]
            ys = [top * 1.05 if math.isnan(r["eval_loss"]) else r["eval_loss"] for r in mine]
            (line,) = ax.plot(xs, ys, marker="o", label=scheme)
            for x, r in zip(xs, mine, strict=True):
                if r["verdict"] == "diverged":
                    ax.plot([x], [top * 1.05], marker="x", markersize=10, color=line.get_color())
        common.mark_stuck(ax, entropy)
        ax.set_xscale("log")
        ax.set_xticks(sorted({r["layers"] for r in runs}))
        ax.set_xticklabels([str(n) for n in sorted({r["layers"] for r in runs})])
        ax.set_xlabel("layers per side (N in NL-NL)")
        ax.set_title(f"peak lr {lr:g}", fontsize=9)
    axes[0][0].set_ylabel("validation NLL (× = diverged)")
    axes[0][0].legend(fontsize=7)
    return common.save_figure(fig, out, NAME)


if __name__ == "__main__":
    main(sys.argv[1:])
