"""What depth costs in the depth table: each depth's CPU and wall time per run, and the updates
each scheme needs to leave chance and to reach 50% and 90% training accuracy against depth (the
table's :func:`~deepnet_jax.experiments.depth_table_report.onsets`), as a table and a figure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from deepnet_jax.experiments import depth_table_plot as table_plot
from deepnet_jax.experiments import depth_table_report as table_report
from deepnet_jax.experiments import report
from deepnet_jax.experiments.thousand_layers_report import LEVELS

MILESTONES = ("left_chance", *(f"to_{v:g}" for v in LEVELS))
_TITLES = {"left_chance": "left chance", **{f"to_{v:g}": f"train acc ≥ {v:g}" for v in LEVELS}}


def cost_table(runs: Sequence[dict[str, Any]], settings: dict[str, Any]) -> str:
    """Per task, depth and device: how many runs, their CPU seconds and wall seconds per run
    (min–max, every process that trained a run added up; on an accelerator the CPU is the
    host's) and updates per wall second (the runs shared the machine with the other shards)."""
    rows = []
    for task in settings["grid"]["tasks"]:
        levels = settings["levels"][task]
        for n in sorted({r["layers"] for r in runs if r["task"] == task}):
            mine = [r for r in runs if r["task"] == task and r["layers"] == n]
            for device in sorted({_device(r) for r in mine}):
                timed = [r for r in mine if _device(r) == device and r.get("cpu_seconds")]
                if timed:
                    rows.append(_cost_row(task, table_report.depth_label(n, levels), device,
                                          timed, settings["updates"]))  # fmt: skip
    header = ["task", "depth", "device", "runs", "CPU s / run", "wall s / run", "updates / s"]
    header.append("resumed")
    return "### What depth costs\n\n" + report.markdown_table(header, rows)


def _device(run: dict[str, Any]) -> str:
    """A run's device as the report names it (a later note's, marked so, where none was
    recorded)."""
    if run.get("device"):
        return run["device"]
    note = run.get("device_note")
    return f"{note['device']} (by a later note)" if note else "not recorded"


def _cost_row(
    task: str, depth: str, device: str, timed: list[dict[str, Any]], updates: int
) -> list[Any]:
    cpu = [r["cpu_seconds"] for r in timed]
    wall = [r["seconds"] for r in timed]
    rates = [updates / r["seconds"] for r in timed]
    return [
        task,
        depth,
        device,
        len(timed),
        f"{min(cpu):,.0f}–{max(cpu):,.0f}",
        f"{min(wall):,.0f}–{max(wall):,.0f}",
        f"{min(rates):.3g}–{max(rates):.3g}",
        sum(r.get("segments", 1) > 1 for r in timed),
    ]


def onsets_by_depth(
    runs: Sequence[dict[str, Any]], levels: dict[str, Any], scheme: str, milestone: str
) -> list[tuple[int, list[int | None]]]:
    """(depth, each seed's update at ``milestone``; None: never) for one scheme on one task."""
    out = []
    for n in sorted({r["layers"] for r in runs if r["scheme"] == scheme}):
        cell = [r for r in runs if r["scheme"] == scheme and r["layers"] == n]
        out.append((n, [table_report.onsets(r, levels)[milestone] for r in cell]))
    return out


def onset_plot(
    runs: Sequence[dict[str, Any]], settings: dict[str, Any], out: str, name: str
) -> str | None:
    """A row of panels per synthetic task, one per milestone: the update each scheme reaches it
    against depth (log), the seeds' mean with min–max bars, an open marker at the budget where
    a seed never did. ``<out>/<name>.png``; None when no task has a chance level."""
    tasks = [t for t in settings["grid"]["tasks"] if "chance" in settings["levels"][t]]
    tasks = [t for t in tasks if any(r["task"] == t for r in runs)]
    if not tasks:
        return None
    plt = report.pyplot()
    fig, axes = plt.subplots(
        len(tasks), len(MILESTONES), figsize=(5 * len(MILESTONES), 3.2 * len(tasks)), squeeze=False
    )
    budget = settings["updates"]
    for row, task in zip(axes, tasks, strict=True):
        mine = [r for r in runs if r["task"] == task]
        schemes = list(dict.fromkeys(r["scheme"] for r in mine))
        for ax, milestone in zip(row, MILESTONES, strict=True):
            for scheme in schemes:
                points = onsets_by_depth(mine, settings["levels"][task], scheme, milestone)
                _draw(ax, points, budget, scheme, table_plot.style(scheme, schemes))
            ax.set_xscale("log")
            depths = sorted({r["layers"] for r in mine})
            ax.set_xticks(depths, [str(n) for n in depths])
            ax.set_xticks([], minor=True)
            ax.set_ylim(0, budget * 1.05)
            ax.set_title(f"{task}: {_TITLES[milestone]}", fontsize=9)
            ax.set_xlabel("layers per side (N in NL-NL)")
            ax.set_ylabel("update")
        row[0].legend(fontsize=7)
    return report.save_figure(fig, out, name)


def _draw(
    ax: Any,
    points: list[tuple[int, list[int | None]]],
    budget: int,
    scheme: str,
    style: dict[str, Any],
) -> None:
    """One scheme's line through the seeds that reached the milestone, and open markers at the
    budget for the depths where a seed never did."""
    reached = [(n, [v for v in vs if v is not None]) for n, vs in points]
    line = [(n, sum(vs) / len(vs), min(vs), max(vs)) for n, vs in reached if vs]
    if line:
        xs, means, lows, highs = zip(*line, strict=True)
        errors = [
            [m - lo for m, lo in zip(means, lows, strict=True)],
            [hi - m for m, hi in zip(means, highs, strict=True)],
        ]
        ax.errorbar(xs, means, yerr=errors, capsize=3, label=scheme, **style)
    never = [n for n, vs in points if any(v is None for v in vs)]
    if never:
        ax.plot(never, [budget] * len(never), linestyle="none", marker="o", fillstyle="none",
                color=style["color"], label=None if line else f"{scheme} (never)")  # fmt: skip
    if not line and not never:
        ax.plot([], [], label=scheme, **style)
