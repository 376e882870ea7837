"""The device marks of the depth table's figures (:mod:`depth_table_plot`'s final metric against
depth, :mod:`depth_table_costs`' onsets against depth), the marks its tables give
(:mod:`depth_table_devices`).

In a panel whose runs ran on more than one kind of device (``columns``:
:func:`~depth_table_devices.column_devices` of the panel's cells, ``{}`` otherwise), each depth's
tick names the device of most of its cells (``18 (H100)``, as a table's column header), a point
whose cell ran on another device carries that device's name (as a table's `` · CPU``), and a
scheme's line is drawn in one piece per stretch of consecutive depths whose cells ran on one
device (:func:`~depth_table_devices.cell_device`; an unrecorded one counts as its own), so that
no line joins two devices; the legend says so. A panel on one device, or with none recorded,
is drawn without any of these marks.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from deepnet_jax.experiments import depth_table_devices as devices

Point = tuple[int, float, float, float]  # (depth, mean, min, max) over a cell's seeds
NOTE_BREAK = "a line breaks where its cells' device changes"
NOTE_LABEL = "a device beside a point: its cell's, not its depth's"


def axis(ax: Any, depths: Sequence[int], columns: dict[int, str | None]) -> None:
    """A log depth axis with a tick per depth, labelled ``N``, or ``N (DEVICE)`` where
    ``columns`` names the depth's device (:func:`depth_table_devices.header`)."""
    ax.set_xscale("log")
    ax.set_xticks(list(depths), [devices.header(str(n), n, columns) for n in depths])
    ax.set_xticks([], minor=True)  # the log axis's own minor labels (2×10¹ …) overlap them


def stretches(on: Sequence[str | None]) -> list[tuple[int, int]]:
    """``[start, stop)`` of each run of equal consecutive entries of ``on`` (the devices of a
    line's points, in depth order): ``["H100", "H100", "CPU"]`` → ``[(0, 2), (2, 3)]``."""
    bounds = [i for i in range(len(on)) if i == 0 or on[i] != on[i - 1]] + [len(on)]
    return list(itertools.pairwise(bounds))


def draw(
    ax: Any,
    points: Sequence[Point],
    cells_at: Mapping[int, Sequence[dict[str, Any]]],
    columns: dict[int, str | None],
    label: str,
    style: dict[str, Any],
) -> bool:
    """One scheme's line through ``points`` (depth order) with min–max bars, in one piece per
    stretch of points on one device (one piece where ``columns`` is ``{}``), ``label`` on the
    first; each point whose cell (``cells_at[depth]``: its runs) ran off its depth's device
    named beside it (:func:`name`). Returns whether any was."""
    on = [devices.cell_device(cells_at[n]) if columns else None for n, *_ in points]
    for piece, (start, stop) in enumerate(stretches(on)):
        xs, means, lows, highs = zip(*points[start:stop], strict=True)
        errors = [
            [m - lo for m, lo in zip(means, lows, strict=True)],
            [hi - m for m, hi in zip(means, highs, strict=True)],
        ]
        mine = label if piece == 0 else "_nolegend_"
        ax.errorbar(xs, means, yerr=errors, capsize=3, label=mine, **style)
    named = [name(ax, n, mean, cells_at[n], columns, style["color"]) for n, mean, _, _ in points]
    return any(named)


def name(
    ax: Any,
    n: int,
    y: float,
    cell_runs: Sequence[dict[str, Any]],
    columns: dict[int, str | None],
    color: str,
) -> bool:
    """The cell's device to the right of its point ``(n, y)``, in ``color``, where it differs
    from its depth's (:func:`depth_table_devices.off_column`); after the names already at depth
    ``n`` (about 4.5 points a character at 6 points), so that two cells' names do not overlap.
    Returns whether it named one."""
    device = devices.off_column(cell_runs, n, columns)
    if device:
        before = [t.get_text() for t in ax.texts if getattr(t, "xy", (None,))[0] == n]
        x = 5 + sum(4.5 * len(text) + 3 for text in before)
        ax.annotate(device, (n, y), xytext=(x, 0), textcoords="offset points", fontsize=6,
                    color=color, va="center")  # fmt: skip
    return bool(device)


def note(ax: Any, columns: dict[int, str | None], named: bool) -> None:
    """Legend entries (no handle) saying what the marks mean, for a panel on several devices
    (nothing where ``columns`` is ``{}``); the second only where a point was ``named``."""
    if not columns:
        return
    ax.plot([], [], linestyle="none", label=NOTE_BREAK)
    if named:
        ax.plot([], [], linestyle="none", label=NOTE_LABEL)
