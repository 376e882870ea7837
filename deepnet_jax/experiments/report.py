"""An experiment's output files: its results JSON, its markdown table and its figure."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from typing import Any

from deepnet_jax.experiments.common import STUCK_MARGIN

NO_RUN = "—"  # a table's cell (or row) that the results file has no run of


def setting_rows(recorded: Sequence[str], current: Sequence[str]) -> list[str]:
    """The rows a table of a results file shows: those its settings recorded, then those the
    experiment's setting has now and the file's lacks (a row added to the setting after the file
    was written, shown as not run: :data:`NO_RUN`)."""
    return list(dict.fromkeys([*recorded, *current]))


def write_table(out_dir: str, name: str, text: str) -> str:
    """``<out_dir>/<name>.md``; returns its path."""
    path = os.path.join(out_dir, f"{name}.md")
    with open(path, "w") as f:
        f.write(text)
    return path


def write_results(out_dir: str, name: str, payload: dict[str, Any], table: str) -> str:
    """An experiment's closing lines: ``<out_dir>/<name>.json`` (``payload``) and its table
    ``<out_dir>/<name>.md`` written, the table printed; returns the table's path."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
        json.dump(payload, f, indent=1)
    text = table.rstrip("\n")
    path = write_table(out_dir, name, text + "\n")
    print(text)
    print(f"wrote {path}")
    return path


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table; floats with 3 decimals (NaN as "—")."""

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return "—" if math.isnan(v) else f"{v:.3g}" if abs(v) < 0.01 else f"{v:.3f}"
        return str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def mark_stuck(ax: Any, entropy: float | None) -> None:
    """A dotted line at the "stuck" threshold (unigram entropy − ``STUCK_MARGIN``) on ``ax``;
    nothing for the synthetic smoke data (``entropy`` None)."""
    if entropy is not None:
        ax.axhline(entropy - STUCK_MARGIN, color="gray", linestyle=":", label="stuck above")


def save_figure(fig: Any, out_dir: str, name: str) -> str:
    """Lay out ``fig``, write it to ``<out_dir>/<name>.png`` (80 dpi) and close it; returns
    the path."""
    fig.tight_layout()
    path = os.path.join(out_dir, f"{name}.png")
    fig.savefig(path, dpi=80)
    pyplot().close(fig)
    return path
