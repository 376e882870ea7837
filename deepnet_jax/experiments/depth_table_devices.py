"""Which kind of device ran a depth table's cells, as its tables say it where a table's runs
ran on more than one (:mod:`depth_table_views`' docs tables, :mod:`depth_table_report`'s report).

A run's device is the kind JAX reported (``run["device"]``: ``"cpu"``,
``"NVIDIA H100 80GB HBM3"``) or, for a run made before the field was kept, its later note's
(``run["device_note"]["device"]``). A table whose runs name one device (or none) is left as it
is. A table whose runs name two or more says each column's device in its header, the device of
most of the column's cells (``18L-18L (H100)``), and marks each cell whose device differs from
its column's (``…; 0.969 (0.951–0.983) · CPU``); a column whose cells split evenly names none
in its header and every cell in it is marked. The figures mark them alike
(:mod:`depth_table_plot_devices`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

Run = dict[str, Any]
Cells = dict[tuple[str, str, int], list[Run]]  # (task, scheme, layers) → the cell's runs


def device_label(run: Run) -> str | None:
    """The run's device in short: ``"CPU"`` for JAX's ``"cpu"``; the model for an NVIDIA
    GPU (``"H100"`` for ``"NVIDIA H100 80GB HBM3"``); any other kind as JAX reported it. From
    ``run["device"]``, else ``run["device_note"]["device"]``; None where neither names one."""
    device = run.get("device") or (run.get("device_note") or {}).get("device")
    if not device:
        return None
    if device == "cpu":
        return "CPU"
    if device.startswith("NVIDIA "):
        return device.removeprefix("NVIDIA ").split()[0]
    return device


def cell_device(cell_runs: Iterable[Run]) -> str | None:
    """The devices of a cell's runs (:func:`device_label`), ``+``-joined in name order where
    its seeds ran on more than one (``"CPU+H100"``); None where none names one."""
    labels = sorted({label for r in cell_runs if (label := device_label(r))})
    return "+".join(labels) or None


def mixed(runs: Iterable[Run]) -> bool:
    """Whether ``runs`` name more than one device (:func:`device_label`)."""
    return len({label for r in runs if (label := device_label(r))}) > 1


def column_devices(grouped: Cells, depths: Sequence[int]) -> dict[int, str | None]:
    """Per depth, the device of most of its cells (:func:`cell_device`; None where the most
    are tied, or no cell names one); {} where the cells' runs name one device or none, so
    that nothing is marked."""
    if not mixed(r for runs in grouped.values() for r in runs):
        return {}
    out: dict[int, str | None] = {}
    for n in depths:
        counts = Counter(
            d for (_, _, m), runs in grouped.items() if m == n and (d := cell_device(runs))
        ).most_common()
        tied = len(counts) > 1 and counts[0][1] == counts[1][1]
        out[n] = counts[0][0] if counts and not tied else None
    return out


def header(label: str, n: int, columns: dict[int, str | None]) -> str:
    """A column's header: ``label`` with its device (``"18L-18L (H100)"``) where
    :func:`column_devices` gave it one."""
    device = columns.get(n)
    return f"{label} ({device})" if device else label


def off_column(cell_runs: Sequence[Run], n: int, columns: dict[int, str | None]) -> str | None:
    """The cell's device (:func:`cell_device`) where it differs from its column's
    (:func:`column_devices`); None where it does not, or the table is on one device."""
    if n not in columns:
        return None
    device = cell_device(cell_runs)
    return device if device and device != columns[n] else None


def cell(text: str, cell_runs: Sequence[Run], n: int, columns: dict[int, str | None]) -> str:
    """A cell's ``text`` with `` · DEVICE`` appended where its device differs from its
    column's (:func:`off_column`; nothing appended where the table is on one device)."""
    device = off_column(cell_runs, n, columns)
    return f"{text} · {device}" if device else text


def pair(a_runs: Sequence[Run], b_runs: Sequence[Run]) -> str:
    """`` (H100 against CPU)`` where two cells compared ran on different devices, else ``""``."""
    a, b = cell_device(a_runs), cell_device(b_runs)
    return f" ({a} against {b})" if a and b and a != b else ""
