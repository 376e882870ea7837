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
gated      6, 18, 50, 100,   100      10              docs/blocks.md (DeepNorm, Sub-LN; no
           200                                        warm-up; a plain and a gated FFN)
gated_     6, 18, 50, 100,   10       1               gated's runs, ΔF after each of the
first      200                                        first 10 updates (docs/blocks.md)
since_     6, 18             100      5               quick's, for the schemes since DeepNet,
deepnet                                               Pre-LN with DyT and Pre-LN under
                                                      CompleteP (docs/schemes.md)
=========  ================  =======  ==============  ======================================

The ``since_deepnet`` setting's rows are ``common.SINCE_DEEPNET_ROWS``, each keyed by its name
(``"scheme"`` in a run's key); ``pre_ln+completep`` (``configs.experiment_rows.ROW_FIELDS``) has its
base at the setting's shallowest depth and the model's width, 6 layers per side and d_model 64, so
that its multipliers are 1 at 6L-6L and its branches weigh 1/3 at 18L-18L.

The ``gated`` setting asks whether DeepNorm's β and Sub-LN's γ on a gated FFN's fc1 and fc2
(the gate at gain 1; docs/blocks.md) bound the update as they do on the plain FFN: each scheme
and depth with the ReLU FFN (F = 128) and with SwiGLU at the same parameters (F = ⅔·128 → 88),
at the paper's peak learning rate from the first update (no warm-up, the hard case). By
update 10 every ``gated`` run from 50 layers on has turned its output completely (ΔF ≈ 11, the
most a normed 64-wide output can move), so ``gated_first`` repeats the runs for 10 updates,
measuring ΔF after each: the first updates, before that ceiling, are where the depths and the
FFNs can differ.

Run: ``python -m deepnet_jax.experiments.model_update --setting=quick --out=DIR``; writes
``model_update.json``, ``model_update.png`` (ΔF over updates: a row per warm-up, a column
per scheme, a curve per depth) and ``model_update.md``.
"""

from __future__ import annotations

import functools
import math
import os
import sys
from typing import Any

import ml_collections

from deepnet_jax.configs import experiment_base, experiment_rows
from deepnet_jax.experiments import common, opening, report, results_file
from deepnet_jax.model import schemes

NAME = "model_update"
SETTINGS = {
    "smoke": {"depths": [2], "steps": 4, "every": 2},
    "quick": {"depths": [6, 18], "steps": 100, "every": 5},
    "full": {"depths": [6, 18, 50, 100], "steps": 300, "every": 10},
    "gated": {"depths": [6, 18, 50, 100, 200], "steps": 100, "every": 10},
    "gated_first": {"depths": [6, 18, 50, 100, 200], "steps": 10, "every": 1},
    "since_deepnet": {"depths": [6, 18], "steps": 100, "every": 5},
}
# the gated setting's FFNs: (activation, ffn_dim) at equal parameters (docs/blocks.md's rule)
FFNS = {"relu": ("relu", 128), "swiglu": ("swiglu", 88)}
WARMUPS = {"none": 0, "paper": common.PAPER_WARMUP}  # warm-up updates (0: constant lr)
GATED = ("gated", "gated_first")  # the settings that pair a plain and a gated FFN


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args, base, out = opening.start(argv, NAME, _base_config, tuple(SETTINGS))
    s = SETTINGS[args.setting]
    schemes = _schemes(args.setting)
    entropy = None if args.setting == "smoke" else common.unigram_entropy(base)
    gated = args.setting in GATED
    recorded = {**s, "schemes": schemes, "lr": common.PAPER_LR} | ({"ffns": FFNS} if gated else {})
    results = results_file.Results(
        out, NAME, args.setting, recorded, grid=["schemes", "depths"], head=args.header
    )
    make_config = functools.partial(run_config, base, args.setting)
    runs = common.run_grid(
        results, run_keys(args.setting), make_config, entropy, os.path.join(out, "runs")
    )
    rows = []
    for run in runs:
        series = _series(run)
        early = series[1][1] if len(series) > 1 else math.nan
        rows.append(
            [
                run["scheme"] + (f" {run['ffn']}" if "ffn" in run else ""),
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
    paths = [results.path, report.write_table(out, NAME, table), _plot(runs, schemes, gated, out)]
    print(table)
    print("wrote " + ", ".join(paths))
    return results.payload


def run_keys(setting: str) -> list[dict[str, Any]]:
    """The setting's runs in the order they run: ``{"scheme", "layers", "warmup"}`` each
    (gated: warm-up "none" only, and ``"ffn"``, a :data:`FFNS` name, both FFNs of a depth
    one after the other)."""
    gated = setting in GATED
    return [
        {"scheme": scheme, "layers": n, "warmup": w} | ({"ffn": ffn} if gated else {})
        for w in (["none"] if gated else WARMUPS)
        for scheme in _schemes(setting)
        for n in SETTINGS[setting]["depths"]
        for ffn in (FFNS if gated else [None])  # each depth's pair together
    ]


def run_config(
    base: ml_collections.ConfigDict, setting: str, key: dict[str, Any]
) -> ml_collections.ConfigDict:
    """``base`` for one run of ``setting``: the key's scheme, depth, warm-up (at the paper's
    peak learning rate) and FFN, the model update measured every few updates."""
    s = SETTINGS[setting]
    c = experiment_rows.with_run(
        base, key["scheme"], key["layers"], common.PAPER_LR, WARMUPS[key["warmup"]], s["steps"]
    )
    c.diagnostics.every = s["every"]
    if "ffn" in key:
        c.model.activation, c.model.ffn_dim = FFNS[key["ffn"]]
    return c


def _base_config(setting: str):
    """:func:`configs.experiment_base.base_config`'s (gated, gated_first, since_deepnet: the
    quick setting's model and data)."""
    return experiment_base.base_config("quick" if setting in (*GATED, "since_deepnet") else setting)


def _schemes(setting: str) -> list[str]:
    return {
        "smoke": ["post_ln", "deepnorm"],
        "gated": ["deepnorm", "subln"],
        "gated_first": ["deepnorm", "subln"],
        "since_deepnet": list(common.SINCE_DEEPNET_ROWS),
    }.get(setting, list(common.SCHEMES))


def _series(run: dict[str, Any]) -> list[tuple[int, float]]:
    """(update, ΔF) pairs of a run's diagnostics records."""
    return [(r["step"], r["model_update"]) for r in run["diagnostics"]]


# The docs' tables of a results payload (``model_update.json``), written between their markers
# by deepnet_jax.experiments.docs_tables.


def _title(row: str) -> str:
    """A row's name in the tables: its scheme's title ("DeepNorm"), else the row itself."""
    return schemes.get(row).title if row in schemes.SCHEMES else row


def _after(run: dict[str, Any], step: int) -> float:
    """ΔF after ``step`` updates."""
    return dict(_series(run))[step]


def _gated_runs(payload: dict[str, Any]) -> dict[tuple[str, int, str], dict[str, Any]]:
    """(scheme, layers, FFN kind) → the run, of a gated setting's payload."""
    return {(r["scheme"], r["layers"], r["ffn"]): r for r in payload["runs"]}


def first_update_table(payload: dict[str, Any]) -> str:
    """A gated setting's ΔF after the first update: a row per depth, per scheme the plain and
    the gated FFN's (``relu / swiglu``, 3 significant digits) and their ratio gated ÷ plain."""
    s, runs = payload["settings"], _gated_runs(payload)
    plain, gated = s["ffns"]
    header = ["NL-NL"]
    for scheme in s["schemes"]:
        header += [_title(scheme), "ratio"]
    rows = []
    for n in s["depths"]:
        row: list[Any] = [n]
        for scheme in s["schemes"]:
            a, b = (_after(runs[(scheme, n, ffn)], 1) for ffn in (plain, gated))
            row += [f"{_sig(a, 3)} / {_sig(b, 3)}", f"{b / a:.2f}"]
        rows.append(row)
    return report.markdown_table(header, rows)


def gated_table(payload: dict[str, Any], early: int = 10) -> str:
    """A gated setting after its updates: a row per depth, per scheme ΔF after ``early``
    updates / the largest ΔF / the validation NLL, each as ``plain, gated``."""
    s, runs = payload["settings"], _gated_runs(payload)
    header = ["NL-NL"] + [_title(scheme) for scheme in s["schemes"]]
    rows = []
    for n in s["depths"]:
        row: list[Any] = [n]
        for scheme in s["schemes"]:
            pair = [runs[(scheme, n, ffn)] for ffn in s["ffns"]]
            row.append(
                " / ".join(
                    ", ".join(text(r) for r in pair)
                    for text in (
                        lambda r: f"{_after(r, early):.2f}",
                        lambda r: f"{max(v for _, v in _series(r)):.2f}",
                        lambda r: f"{r['eval_loss']:.3f}",
                    )
                )
            )
        rows.append(row)
    return report.markdown_table(header, rows)


def warmup_table(
    payload: dict[str, Any], warmup: str = "paper", after: tuple[int, ...] = (5, 25, 100)
) -> str:
    """The runs with ``warmup``: a row per scheme (the setting's rows now:
    :func:`report.setting_rows`), ΔF after each of ``after`` updates and the validation NLL,
    each as ``shallowest / … / deepest`` (``—`` for a depth the file has no run of; a row with
    none: ``—``)."""
    header = ["scheme", *(f"ΔF after {step}" for step in after), "validation NLL"]
    return report.markdown_table(header, _warmup_rows(payload, warmup, after))


def warmups_table(payload: dict[str, Any], after: tuple[int, ...] = (5, 25, 100)) -> str:
    """:func:`warmup_table` for each warm-up of :data:`WARMUPS` in turn, in one table with a
    ``warm-up`` column (docs/reproduction.md's table of the quick setting)."""
    header = ["scheme", "warm-up", *(f"ΔF after {step}" for step in after), "validation NLL"]
    rows = [
        [row[0], warmup, *row[1:]]
        for warmup in WARMUPS
        for row in _warmup_rows(payload, warmup, after)
    ]
    return report.markdown_table(header, rows)


def _warmup_rows(payload: dict[str, Any], warmup: str, after: tuple[int, ...]) -> list[list[Any]]:
    s = payload["settings"]
    runs = {(r["scheme"], r["layers"]): r for r in payload["runs"] if r["warmup"] == warmup}
    columns = [lambda r, step=step: delta_f_text(_after(r, step)) for step in after]
    columns.append(lambda r: f"{r['eval_loss']:.3f}")
    rows = []
    for scheme in report.setting_rows(s["schemes"], _schemes(payload["setting"])):
        mine = [runs.get((scheme, n)) for n in s["depths"]]
        if not any(mine):
            rows.append([scheme] + [report.NO_RUN] * len(columns))
            continue
        texts = [[report.NO_RUN if r is None else text(r) for r in mine] for text in columns]
        rows.append([scheme] + [" / ".join(t) for t in texts])
    return rows


def _sig(v: float, digits: int) -> str:
    """``v`` to ``digits`` significant digits, trailing zeros kept (7.00, 0.0020)."""
    return f"{v:#.{digits}g}".rstrip(".")


def delta_f_text(v: float) -> str:
    """A ΔF for the docs: 3 significant digits from 0.1 on, 2 below, in e-notation under
    0.001 (8.2e-05)."""
    if abs(v) < 1e-3:
        return f"{v:.1e}"
    return _sig(v, 3 if abs(v) >= 0.1 else 2)


def _plot(runs: list[dict[str, Any]], schemes: list[str], gated: bool, out: str) -> str:
    """ΔF over updates: a column per scheme, a row per warm-up (gated: per FFN kind), a curve
    per depth."""
    rows = [("ffn", f) for f in FFNS] if gated else [("warmup", w) for w in WARMUPS]
    plt = report.pyplot()
    fig, axes = plt.subplots(
        len(rows),
        len(schemes),
        figsize=(3.2 * len(schemes), 2.6 * len(rows)),
        sharex=True,
        sharey=True,
        squeeze=False,
    )
    for row, (field, value) in enumerate(rows):
        for col, scheme in enumerate(schemes):
            ax = axes[row][col]
            for run in runs:
                if run["scheme"] == scheme and run.get(field) == value:
                    steps, values = zip(*_series(run)[1:], strict=True)
                    ax.plot(steps, values, label=f"{run['layers']}L-{run['layers']}L")
            ax.set_yscale("log")
            ax.set_title(f"{scheme}, {field.replace('warmup', 'warm-up')}: {value}", fontsize=9)
            if row == len(rows) - 1:
                ax.set_xlabel("updates")
            if col == 0:
                ax.set_ylabel("model update ΔF")
    axes[0][0].legend(fontsize=7)
    return report.save_figure(fig, out, NAME)


if __name__ == "__main__":
    main(sys.argv[1:])
