"""Magneto's claim that Sub-LN tolerates larger learning rates, at one depth.

Each scheme (Post-LN, Pre-LN, DeepNorm, Sub-LN) trains the same tiny 64-128-2
encoder-decoder (``common``) at every peak learning rate of a fixed grid (geometric, from the
DeepNet paper's 5e-4) for a fixed budget, with an inverse-square-root schedule whose warm-up
(from 1e-7) is half the budget; the result per scheme is the largest learning rate whose run
``trained`` (``common.verdict``: not diverged, not stuck at the unigram entropy) and the
validation NLL at each learning rate.

Settings (fixed before any lr_tolerance result; the quick grid after the first model_update
run, see below):

=========  ============  ==========================  =======  =============================
setting    depth         peak learning rates         updates  cost on 2 CPU cores
=========  ============  ==========================  =======  =============================
smoke      2L-2L         5e-4, 8e-3                  4        about 1 min (synthetic, 16-32-2)
quick      6L-6L         2e-3 × 4^k, k = 0 … 2       150      13 min (measured)
full       18L-18L       5e-4 × 2^k, k = 0 … 6       2,000    about 10 hours
since_     6L-6L         quick's                     150      quick's, for the schemes since
deepnet                                                       DeepNet, Pre-LN with DyT and
                                                              Pre-LN under CompleteP
                                                              (docs/schemes.md)
=========  ============  ==========================  =======  =============================

The ``since_deepnet`` setting's rows are ``common.SINCE_DEEPNET_ROWS``, each keyed by its name
(``"scheme"`` in a run's key); ``pre_ln+completep`` (``configs.experiment_rows.ROW_FIELDS``) has its
base at the setting's one depth and the model's width, 6 layers per side and d_model 64: its
multipliers are 1, so it differs from Pre-LN in its init (N(0, 0.02²)), its unscaled embeddings and
learned positions and its undecayed norms and biases, not in a depth or width scaling.

The quick grid starts at 2e-3, not 5e-4: over 150 updates with a 75-update warm-up the
learning rate sums to 0.05 at 5e-4, where every model-update run was still at the unigram
entropy (100 constant updates at 5e-4), so that point could only say "stuck".

Run: ``python -m deepnet_jax.experiments.lr_tolerance --setting=quick --out=DIR``; writes
``lr_tolerance.json``, ``lr_tolerance.png`` (validation NLL against learning rate, a curve per
scheme, crosses for diverged runs) and ``lr_tolerance.md``.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

import ml_collections

from deepnet_jax.configs import experiment_base, experiment_rows
from deepnet_jax.experiments import common, opening, report, results_file

NAME = "lr_tolerance"
SETTINGS = {
    "smoke": {"layers": 2, "lrs": [5e-4, 8e-3], "steps": 4, "schemes": ["post_ln", "subln"]},
    "quick": {
        "layers": 6,
        "lrs": [2e-3 * 4**k for k in range(3)],
        "steps": 150,
        "schemes": list(common.SCHEMES),
    },
    "full": {
        "layers": 18,
        "lrs": [5e-4 * 2**k for k in range(7)],
        "steps": 2000,
        "schemes": list(common.SCHEMES),
    },
    # quick's grid for the schemes since DeepNet (docs/schemes.md)
    "since_deepnet": {
        "layers": 6,
        "lrs": [2e-3 * 4**k for k in range(3)],
        "steps": 150,
        "schemes": list(common.SINCE_DEEPNET_ROWS),
    },
}


def _base_config(setting: str):
    """experiment_base.base_config's (since_deepnet: the quick setting's model and data)."""
    return experiment_base.base_config("quick" if setting == "since_deepnet" else setting)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args, base, out = opening.start(argv, NAME, _base_config, tuple(SETTINGS))
    s = SETTINGS[args.setting]
    entropy = None if args.setting == "smoke" else common.unigram_entropy(base)
    results = results_file.Results(
        out,
        NAME,
        args.setting,
        {**s, "unigram_entropy": entropy},
        grid=["schemes", "lrs"],
        head=args.header,
    )
    keys = [{"scheme": scheme, "lr": lr} for scheme in s["schemes"] for lr in s["lrs"]]
    make_config = functools.partial(run_config, base, args.setting)
    runs = common.run_grid(results, keys, make_config, entropy, os.path.join(out, "runs"))
    largest = {scheme: largest_trained(runs, scheme) for scheme in s["schemes"]}
    results.payload["largest_trained_lr"] = largest
    results.save()
    table = grid_table(results.payload)
    paths = [results.path, report.write_table(out, NAME, table), _plot(runs, s, entropy, out)]
    print(table)
    print("wrote " + ", ".join(paths))
    return results.payload


def run_config(
    base: ml_collections.ConfigDict, setting: str, key: dict[str, Any]
) -> ml_collections.ConfigDict:
    """``base`` for one run of ``setting``: the key's row (``"scheme"``: a scheme or a
    ``configs.experiment_rows.ROW_FIELDS`` row) at the setting's depth and the key's peak rate,
    warm-up half the updates."""
    s = SETTINGS[setting]
    steps = s["steps"]
    return experiment_rows.with_run(base, key["scheme"], s["layers"], key["lr"], steps // 2, steps)


def largest_trained(runs: list[dict[str, Any]], scheme: str) -> float | None:
    """The largest learning rate at which ``scheme``'s run was ``trained`` (None: none)."""
    ok = [r["lr"] for r in runs if r["scheme"] == scheme and r["verdict"] == "trained"]
    return max(ok) if ok else None


def lr_text(lr: float) -> str:
    """A learning rate as the docs write it: 3.2e-2, 8e-3."""
    mantissa, exponent = f"{lr:e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def grid_table(payload: dict[str, Any]) -> str:
    """A results payload (``lr_tolerance.json``) as the experiment prints it and the docs show
    it (docs/reproduction.md, between its markers): a note, then a row per scheme with the
    largest learning rate that trained and each rate's verdict and validation NLL (how a
    diverged run broke)."""
    s = payload["settings"]
    header = ["scheme", "largest lr that trained"] + [lr_text(lr) for lr in s["lrs"]]
    rows = []
    for scheme in s["schemes"]:
        largest = largest_trained(payload["runs"], scheme)
        row: list[Any] = [scheme, "none" if largest is None else lr_text(largest)]
        for lr in s["lrs"]:
            run = results_file.find_run(payload["runs"], {"scheme": scheme, "lr": lr})
            row.append(_at_text(run))
        rows.append(row)
    note = f"{s['layers']}L-{s['layers']}L, {s['steps']} updates: verdict and validation NLL"
    if s.get("unigram_entropy") is not None:
        note += f" (unigram entropy of the validation targets {s['unigram_entropy']:.3f} nats)"
    return f"{note}.\n\n" + report.markdown_table(header, rows)


def largest_lr_table(payload: dict[str, Any]) -> str:
    """The docs' table of a results payload (``lr_tolerance.json``; written between its
    markers by deepnet_jax.experiments.docs_tables): a row per scheme (the setting's rows now:
    :func:`report.setting_rows`), the largest learning rate that trained and the verdict and
    validation NLL at the grid's largest; ``—`` where the file has no run."""
    s = payload["settings"]
    top = max(s["lrs"])
    header = ["scheme", "largest lr that trained", f"at {lr_text(top)}"]
    rows = []
    now = SETTINGS[payload["setting"]]["schemes"]
    for scheme in report.setting_rows(s["schemes"], now):
        mine = [r for r in payload["runs"] if r["scheme"] == scheme]
        largest = largest_trained(mine, scheme)
        largest_text = "none" if largest is None else lr_text(largest)
        run = next((r for r in mine if r["lr"] == top), None)
        rows.append([scheme, largest_text if mine else report.NO_RUN, _at_text(run)])
    return report.markdown_table(header, rows)


def _at_text(run: dict[str, Any] | None) -> str:
    """A run's verdict and validation NLL (how a diverged run broke); ``—`` for no run."""
    if run is None:
        return report.NO_RUN
    if run["verdict"] != "diverged":
        return f"{run['verdict']} ({run['eval_loss']:.3f})"
    if run.get("nonfinite_step") is not None:
        return f"diverged ({common.divergence_text(run)})"
    # a finite blow-up: its final NLL from its first loss
    return f"diverged (NLL {_nll(run['eval_loss'])} from {_nll(run['first_train_loss'])})"


def _nll(v: float) -> str:
    """An NLL to 3 significant digits (61.5), from 1,000 on a whole number (1,030, not
    1.03e+03)."""
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def _plot(runs: list[dict[str, Any]], s: dict[str, Any], entropy: float | None, out: str) -> str:
    plt = report.pyplot()
    fig, ax = plt.subplots(figsize=(6.2, 3.4))
    kept = [r["eval_loss"] for r in runs if r["verdict"] != "diverged"]  # a blow-up off the axes
    top = max(kept) * 1.05 if kept else 1.0
    for scheme in s["schemes"]:
        mine = sorted((r for r in runs if r["scheme"] == scheme), key=lambda r: r["lr"])
        xs = [r["lr"] for r in mine]
        ys = [top if r["verdict"] == "diverged" else r["eval_loss"] for r in mine]
        (line,) = ax.plot(xs, ys, marker="o", label=scheme)
        for x, r in zip(xs, mine, strict=True):
            if r["verdict"] == "diverged":
                ax.plot([x], [top], marker="x", markersize=10, color=line.get_color())
    report.mark_stuck(ax, entropy)
    ax.set_xscale("log")
    ax.set_xticks(s["lrs"])
    ax.set_xticklabels([f"{lr:g}" for lr in s["lrs"]])
    ax.minorticks_off()
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel("validation NLL (× = diverged)")
    ax.set_title(f"{s['layers']}L-{s['layers']}L, {s['steps']} updates", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))  # beside the lines
    return report.save_figure(fig, out, NAME)


if __name__ == "__main__":
    main(sys.argv[1:])
