"""What depth costs in the depth table: each depth's CPU and wall time per run, and the updates
each scheme needs to leave chance and to reach 50% and 90% training accuracy against depth (the
table's :func:`~deepnet_jax.experiments.depth_table_report.onsets`), as a table and a figure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from deepnet_jax.experiments import depth_table_devices as devices
from deepnet_jax.experiments import depth_table_plot as table_plot
from deepnet_jax.experiments import depth_table_plot_devices as plot_devices
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
    a seed never did; where a task's runs ran on more than one kind of device its depths, lines
    and points say which (:mod:`depth_table_plot_devices`). ``<out>/<name>.png``; None when no
    task has a chance level."""
    tasks = [t for t in settings["grid"]["tasks"] if "chance" in settings["levels"][t]]
    tasks = [t for t in tasks if any(r["task"] == t for r in runs)]
    if not tasks:
        return None
    plt = report.pyplot()
    fig, axes = plt.subplots(
        len(tasks), len(MILESTONES), figsize=(5 * len(MILESTONES), 3.2 * len(tasks)), squeeze=False
    )
    for row, task in zip(axes, tasks, strict=True):
        mine = [r for r in runs if r["task"] == task]
        for ax, milestone in zip(row, MILESTONES, strict=True):
            _panel(ax, mine, settings["levels"][task], settings["updates"], milestone)
            ax.set_title(f"{task}: {_TITLES[milestone]}", fontsize=9)
        row[0].legend(fontsize=7)
    return report.save_figure(fig, out, name)


def _panel(
    ax: Any, mine: list[dict[str, Any]], levels: dict[str, Any], budget: int, milestone: str
) -> None:
    """One task's (``mine``: its runs) onsets at ``milestone``, a line per scheme; its depths,
    lines and points say their device where its runs ran on several
    (:mod:`depth_table_plot_devices`)."""
    grouped = table_report.cells(mine)
    depths = sorted({n for (_, _, n) in grouped})
    columns = devices.column_devices(grouped, depths)
    schemes = list(dict.fromkeys(r["scheme"] for r in mine))
    named = False
    for scheme in schemes:
        points = onsets_by_depth(mine, levels, scheme, milestone)
        cells_at = {n: grouped[(t, s, n)] for (t, s, n) in grouped if s == scheme}
        style = table_plot.style(scheme, schemes)
        named |= _draw(ax, points, budget, scheme, style, (cells_at, columns))
    plot_devices.axis(ax, depths, columns)
    plot_devices.note(ax, columns, named)
    ax.set_ylim(0, budget * 1.05)
    ax.set_xlabel("layers per side (N in NL-NL)")
    ax.set_ylabel("update")


def _draw(
    ax: Any,
    points: list[tuple[int, list[int | None]]],
    budget: int,
    scheme: str,
    style: dict[str, Any],
    marks: tuple[dict[int, list[dict[str, Any]]], dict[int, str | None]],
) -> bool:
    """One scheme's line through the seeds that reached the milestone, and open markers at the
    budget for the depths where a seed never did; ``marks``: the scheme's cells by depth and
    the panel's column devices (:func:`plot_devices.draw`). Returns whether a point was named
    with its cell's device."""
    cells_at, columns = marks
    reached = [(n, [v for v in vs if v is not None]) for n, vs in points]
    line = [(n, sum(vs) / len(vs), min(vs), max(vs)) for n, vs in reached if vs]
    named = plot_devices.draw(ax, line, cells_at, columns, scheme, style) if line else False
    never = [n for n, vs in points if any(v is None for v in vs)]
    if never:
        ax.plot(never, [budget] * len(never), linestyle="none", marker="o", fillstyle="none",
                color=style["color"], label=None if line else f"{scheme} (never)")  # fmt: skip
    on_line = {n for n, *_ in line}
    for n in never:  # a cell with no seed on the line is named at the budget
        if n not in on_line:
            named |= plot_devices.name(ax, n, budget, cells_at[n], columns, style["color"])
    if not line and not never:
        ax.plot([], [], label=scheme, **style)
    return named
