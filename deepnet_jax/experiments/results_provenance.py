"""What each committed results file of the experiments says of its own making: whether it has
a header (:func:`deepnet_jax.common.records.header`: the command that created it, its commit
and date), and how many of its runs record their own ``commit``, ``device`` and ``cpu``.

A results file made before the experiments kept these has none of them, and nothing is typed in
after the fact (docs/reproduction.md, "How the table is run"); this table, generated into
docs/reproduction.md by :mod:`~deepnet_jax.experiments.docs_tables`, says which files those are,
so that the statement cannot go stale as runs are added.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from typing import Any

RESULTS_GLOB = os.path.join("docs", "reproduction", "*.json")  # from the repository root


def row(name: str, payload: dict[str, Any]) -> str:
    """One file's markdown row: its name, its header's commit and date (``none`` without a
    header), its runs, and those with their own ``commit``, ``device`` and ``cpu`` (the
    processor's model) (``–`` for a file with no ``runs``: one measurement's record)."""
    head = payload.get("header")
    made = "none"
    if head:
        made = f"{(head.get('commit') or '?')[:7]}, {(head.get('date') or '?')[:10]}"
    if "runs" not in payload:  # a record of one measurement, not of runs
        return f"| `{name}` | {made} | – | – | – | – |"
    runs = payload["runs"]
    counts = [sum(1 for r in runs if r.get(k)) for k in ("commit", "device", "cpu")]
    return f"| `{name}` | {made} | {len(runs)} | " + " | ".join(map(str, counts)) + " |"


def docs_table(paths: Sequence[str], *payloads: dict[str, Any]) -> str:
    """The table over the results files ``paths`` (their payloads in that order), by name."""
    lines = [
        "| results file | header (commit, date) | runs | runs with their commit "
        "| … their device | … their processor |",
        "|---|---|---:|---:|---:|---:|",
    ]
    named = sorted(zip((os.path.basename(p) for p in paths), payloads, strict=True))
    lines += [row(name, payload) for name, payload in named]
    return "\n".join(lines)


def results_files(root: str) -> tuple[str, ...]:
    """Every ``docs/reproduction/*.json`` under ``root``, relative to it, sorted."""
    found = glob.glob(os.path.join(root, RESULTS_GLOB))
    return tuple(sorted(os.path.relpath(p, root) for p in found))
