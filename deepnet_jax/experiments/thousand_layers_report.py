"""The thousand-layer experiment's report: what a run's curves show (its onset, the updates to
each accuracy level, ΔF, the time per update), the markdown table and the figure."""

from __future__ import annotations

import math
from typing import Any

from deepnet_jax.experiments import report
from deepnet_jax.model.config import TransformerConfig

MARGIN_NATS = 1.0  # "trained": final validation NLL this far below the unigram entropy
ONSET_MARGIN = 0.1  # "left chance": training accuracy this far above the blind chance accuracy
LEVELS = (0.5, 0.9)  # accuracies whose first update is also reported
# the experiment's subject (DeepNet's 1,000 layers): its runs' onset is plotted against depth
ONSET_SCHEME = "deepnorm"


def first_reaching(curve: list[tuple[int, float]], level: float) -> int | None:
    """The first update of ``curve`` ((update, accuracy) pairs in order) whose accuracy is at
    least ``level``; None if none is."""
    return next((step for step, acc in curve if acc >= level), None)


def summarize(run: dict[str, Any], chance: dict[str, float]) -> dict[str, Any]:
    """What the table shows of a run: its curves from the metrics records, the onset and the
    updates to each of ``LEVELS``, ΔF at its last and largest, the median time per update."""
    train = [r for r in run["records"] if r["split"] == "train"]
    curve = [(r["step"], r["accuracy"]) for r in train]
    times = sorted(r["step_time_s"] for r in train[1:]) or [math.nan]
    delta = [(r["step"], r["model_update"]) for r in run["diagnostics"]]
    return {
        "onset": first_reaching(curve, chance["accuracy"] + ONSET_MARGIN),
        **{f"to_{level:g}": first_reaching(curve, level) for level in LEVELS},
        "median_step_s": times[len(times) // 2],
        "last_delta_f": delta[-1][1] if delta else math.nan,
        "max_delta_f": max((v for _, v in delta), default=math.nan),
    }


def table(
    runs: list[dict[str, Any]], s: dict[str, Any], chance: dict[str, float], entropy: float
) -> str:
    """A row per run: the constants, verdict, final validation NLL and accuracy, onset,
    ΔF, non-finite update, and the time per update, wall and CPU time."""
    header = [
        "scheme",
        "depth",
        "α / β (decoder)",
        "run",
        "validation NLL",
        "validation accuracy",
        "last train accuracy",
        f"left chance (acc ≥ {chance['accuracy'] + ONSET_MARGIN:.3f})",
        *(f"acc ≥ {level:g}" for level in LEVELS),
        "ΔF last / max",
        "non-finite at",
        "s/update (median)",
        "wall / CPU s",
    ]
    rows = []
    for run in runs:
        summary = summarize(run, chance)
        train = [r for r in run["records"] if r["split"] == "train"]
        alpha, beta = _decoder_constants(run["scheme"], run["layers"])
        rows.append(
            [
                run["scheme"],
                f"{run['layers']}L-{run['layers']}L",
                f"{alpha:.2f} / {beta:.3f}",
                run["verdict"],
                run["eval_loss"],
                run["eval_accuracy"],
                train[-1]["accuracy"] if train else math.nan,
                _step(summary["onset"]),
                *(_step(summary[f"to_{level:g}"]) for level in LEVELS),
                f"{summary['last_delta_f']:.3g} / {summary['max_delta_f']:.3g}",
                _step(run.get("nonfinite_step")),
                summary["median_step_s"],
                f"{run['seconds']:.0f} / {run.get('cpu_seconds', math.nan):.0f}",
            ]
        )
    note = (
        f"{s['steps']} updates at peak learning rate {s['lr']:g} after a {s['warmup']}-update "
        f"warm-up (inverse square root), dropout {s['dropout']:g}; unigram entropy of the "
        f"validation targets {entropy:.3f} nats (trained: validation NLL "
        f"≤ {entropy - MARGIN_NATS:.3f}); the best source-blind predictor: accuracy "
        f"{chance['accuracy']:.3f}, NLL {chance['nll']:.3f}. Updates to an accuracy are the "
        f"first log interval (every {s['log_every']}) whose training accuracy reaches it "
        "('—': never)."
    )
    return note + "\n\n" + report.markdown_table(header, rows)


def docs_table(payload: dict[str, Any]) -> str:
    """:func:`table` of a results payload (``thousand_layers.json``), as docs/reproduction.md
    shows it between its markers (:mod:`deepnet_jax.experiments.docs_tables`)."""
    s = payload["settings"]
    return table(payload["runs"], s, s["chance"], s["unigram_entropy"])


def variants_table(*payloads: dict[str, Any], depths: tuple[int, ...]) -> str:
    """The same task at other settings side by side: a row per DeepNorm run at ``depths`` of
    ``payloads`` (results files of the same setting with other ``--lr``, ``--warmup`` or
    ``--dropout``), ordered by depth, dropout, learning rate and warm-up; the updates to each
    level, the final validation NLL / accuracy, the verdict and the median time per update. Each
    payload's task and chance must be the first's."""
    first = payloads[0]["settings"]
    rows = []
    for payload in payloads:
        s = payload["settings"]
        if (s["task"], s["chance"]) != (first["task"], first["chance"]):
            raise ValueError("variants_table: the payloads' tasks differ")
        for run in payload["runs"]:
            if run["scheme"] != ONSET_SCHEME or run["layers"] not in depths:
                continue
            summary = summarize(run, s["chance"])
            key = (run["layers"], run["dropout"], run["lr"], run["warmup"])
            rows.append(
                (
                    key,
                    [
                        f"{run['layers']}L-{run['layers']}L",
                        f"{run['lr']:g}",
                        run["warmup"],
                        f"{run['dropout']:g}",
                        _step(summary["onset"]),
                        *(_step(summary[f"to_{level:g}"]) for level in LEVELS),
                        f"{run['eval_loss']:.3f} / {run['eval_accuracy']:.1%}",
                        run["verdict"],
                        summary["median_step_s"],
                    ],
                )
            )
    header = [
        "DeepNorm",
        "peak lr",
        "warm-up",
        "dropout",
        f"left chance (acc ≥ {first['chance']['accuracy'] + ONSET_MARGIN:.3f})",
        *(f"acc ≥ {level:g}" for level in LEVELS),
        f"validation NLL / accuracy after {first['steps']}",
        "run",
        "s/update (median)",
    ]
    return report.markdown_table(header, [row for _, row in sorted(rows, key=lambda r: r[0])])


def _step(value: int | None) -> str:
    return "—" if value is None else str(value)


def _decoder_constants(scheme: str, layers: int) -> tuple[float, float]:
    """The decoder's (α, init gain) of an encoder-decoder of ``layers`` per side
    (``TransformerConfig.side_constants``): DeepNorm's α and β, 1 and 1 for Post-LN."""
    config = TransformerConfig(
        arch="encdec", scheme=scheme, num_encoder_layers=layers, num_decoder_layers=layers
    )
    return config.side_constants("decoder")


def plot(
    runs: list[dict[str, Any]], chance: dict[str, float], entropy: float, out: str, name: str
) -> str:
    """Training accuracy, NLL (training per log interval, validation as dots) and ΔF against
    updates, a curve per run; with several depths also the onset against depth. Written to
    ``<out>/<name>.png``; returns the path."""
    plt = report.pyplot()
    deep = [r for r in runs if r["scheme"] == ONSET_SCHEME]
    depths = sorted({r["layers"] for r in deep})
    panels = 4 if len(depths) > 1 else 3
    fig, axes = plt.subplots(1, panels, figsize=(4.0 * panels, 3.3))
    for run in runs:
        label = f"{run['scheme']} {run['layers']}L-{run['layers']}L"
        train = [r for r in run["records"] if r["split"] == "train"]
        evals = [r for r in run["records"] if r["split"] == "eval"]
        (line,) = axes[0].plot(
            [r["step"] for r in train], [r["accuracy"] for r in train], label=label
        )
        axes[1].plot([r["step"] for r in train], [r["nll"] for r in train], color=line.get_color())
        axes[1].plot(
            [r["step"] for r in evals], [r["loss"] for r in evals], "o", color=line.get_color()
        )
        delta = [(d["step"], d["model_update"]) for d in run["diagnostics"] if d["step"] > 0]
        if delta:
            axes[2].plot(*zip(*delta, strict=True), marker=".", color=line.get_color())
        if run.get("nonfinite_step") is not None:
            axes[0].axvline(run["nonfinite_step"], color=line.get_color(), linestyle="--")
    axes[0].axhline(chance["accuracy"], color="gray", linestyle=":", label="source-blind best")
    axes[1].axhline(entropy, color="gray", linestyle=":", label="unigram entropy")
    axes[1].axhline(chance["nll"], color="gray", linestyle="-.", label="source-blind best")
    axes[1].axhline(entropy - MARGIN_NATS, color="gray", linestyle="--", label="trained below")
    ylabels = ("training accuracy", "NLL (line: train, dots: validation)", "model update ΔF")
    for ax, ylabel in zip(axes[:3], ylabels, strict=True):
        ax.set_xlabel("updates")
        ax.set_ylabel(ylabel)
    axes[2].set_yscale("log")
    axes[0].legend(fontsize=7)
    axes[1].legend(fontsize=7)
    if panels == 4:
        _plot_onset(axes[3], deep, chance)
    return report.save_figure(fig, out, name)


def _plot_onset(ax: Any, runs: list[dict[str, Any]], chance: dict[str, float]) -> None:
    """Updates to leave chance and to each of ``LEVELS`` against depth (log-log)."""
    runs = sorted(runs, key=lambda r: r["layers"])
    summaries = [summarize(r, chance) for r in runs]
    for key, label in [("onset", "left chance")] + [(f"to_{v:g}", f"acc ≥ {v:g}") for v in LEVELS]:
        points = [(r["layers"], s[key]) for r, s in zip(runs, summaries, strict=True) if s[key]]
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("layers per side (N in NL-NL)")
    ax.set_ylabel("updates")
    if ax.get_lines():
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no run reached a level", ha="center", transform=ax.transAxes)
