"""The depth table's Figure-6-like figure: the final metric against depth, a panel per task, a
line per scheme through its seeds' mean (:mod:`depth_table_report` aggregates the cells), and
the line style every depth-table figure gives a scheme."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from deepnet_jax.experiments import depth_table_devices as devices
from deepnet_jax.experiments import depth_table_plot_devices as plot_devices
from deepnet_jax.experiments import report
from deepnet_jax.experiments.depth_table_report import (
    REFERENCE_SCHEMES,
    cells,
    metric,
    panels,
    values,
)

# one color per paper's scheme in every panel and figure (matplotlib's tab10)
COLORS = dict(
    zip(
        REFERENCE_SCHEMES,
        ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"),
        strict=True,
    )
)
# the other rows (the schemes since DeepNet, DyT) in the colors the papers' rows leave free,
# drawn dashed; in the order they first appear in a panel
OTHER_COLORS = (
    "tab:pink",
    "tab:gray",
    "tab:olive",
    "tab:cyan",
    "black",
    "gold",
    "navy",
    "lime",
    "teal",
    "salmon",
    "maroon",
    "darkviolet",
)


def plot(runs: Sequence[dict[str, Any]], settings: dict[str, Any], out: str, name: str) -> str:
    """The final metric against depth (log scale), a panel per task (and recipe), a line per scheme
    through the seeds' mean, bars from their min to max, a cross above the axis where a seed
    diverged. Where a panel's runs ran on more than one kind of device its depths, lines and
    points say which (:mod:`depth_table_plot_devices`). Written to ``<out>/<name>.png``;
    returns the path."""
    plt = report.pyplot()
    shown = panels(runs, settings)
    fig, axes = plt.subplots(1, len(shown), figsize=(6 * len(shown), 3.4), squeeze=False)
    for ax, (title, task, mine) in zip(axes[0], shown, strict=True):
        levels = settings["levels"][task]
        field, label, _ = metric(levels)
        _plot_task(ax, cells(mine), task, field)
        if "chance" in levels:
            chance = levels["chance"]["accuracy"]
            ax.axhline(chance, color="gray", linestyle=":", label="source-blind best")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("layers" if levels.get("lm") else "layers per side (N in NL-NL)")
        ax.set_ylabel(label)
        if len({s for (t, s, _) in cells(mine) if t == task}) > len(COLORS):  # beside the axes
            ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
        else:
            ax.legend(fontsize=7)
    return report.save_figure(fig, out, name)


def style(scheme: str, schemes: list[str]) -> dict[str, Any]:
    """A row's line: the papers' rows solid in :data:`COLORS`, the others dashed, each in its
    own color from :data:`OTHER_COLORS` (by its place among ``schemes``' other rows)."""
    if scheme in COLORS:
        return {"color": COLORS[scheme], "marker": "o"}
    others = [s for s in schemes if s not in COLORS]
    color = OTHER_COLORS[others.index(scheme) % len(OTHER_COLORS)]
    return {"color": color, "marker": "s", "linestyle": "--"}


def _plot_task(ax: Any, grouped: dict, task: str, field: str) -> None:
    schemes = list(dict.fromkeys(s for (t, s, _) in grouped if t == task))
    depths = sorted({n for (t, _, n) in grouped if t == task})
    top = (
        max(
            [
                v
                for (t, _, _), rs in grouped.items()
                if t == task
                for v in values(rs, field)
                if not math.isnan(v)
            ]
            or [1.0]
        )
        * 1.05
    )
    columns = devices.column_devices(grouped, depths)
    named = False
    for scheme in schemes:
        points = []
        for n in depths:
            if (task, scheme, n) not in grouped:
                continue
            vs = values(grouped[(task, scheme, n)], field)
            finite = [v for v in vs if not math.isnan(v)]
            if finite:
                points.append((n, sum(finite) / len(finite), min(finite), max(finite)))
            if len(finite) < len(vs):
                ax.plot([n], [top], marker="x", markersize=9, color="black")
        if points:
            mine = {n: grouped[(task, scheme, n)] for n, *_ in points}
            named |= plot_devices.draw(ax, points, mine, columns, scheme, style(scheme, schemes))
    plot_devices.axis(ax, depths, columns)
    plot_devices.note(ax, columns, named)
