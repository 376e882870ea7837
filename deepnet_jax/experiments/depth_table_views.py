"""The depth table's results files as the docs show them: compact tables of a record's runs
(docs/reproduction.md, docs/schemes.md, docs/blocks.md), written between the docs' markers by
:mod:`deepnet_jax.experiments.docs_tables`.

Each function takes results payloads (``depth_table.json``: ``settings`` and ``runs``) and
returns markdown. The aggregation is :mod:`depth_table_report`'s (verdicts, the mean and
min–max over seeds, onsets, differences called beyond the seed spread); only the shape differs
from the report's tables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from deepnet_jax.experiments import depth_table_devices as devices
from deepnet_jax.experiments import depth_table_report as table_report
from deepnet_jax.experiments import depth_table_settings as table_settings
from deepnet_jax.experiments import report
from deepnet_jax.experiments.depth_table_costs import MILESTONES
from deepnet_jax.model import schemes

Payload = dict[str, Any]
Run = dict[str, Any]
# the papers' rows that docs/schemes.md puts beside the since_deepnet setting's (quick's runs)
SINCE_DEEPNET_REFERENCE = ("post_ln", "pre_ln", "deepnorm")
DLCL = schemes.names(stack="dlcl")


def task_runs(
    payload: Payload,
    task: str,
    schemes: Sequence[str] | None = None,
    layers: Sequence[int] | None = None,
) -> list[Run]:
    """The payload's runs on ``task``, of ``schemes`` and ``layers`` where given."""
    return [
        r
        for r in payload["runs"]
        if r["task"] == task
        and (schemes is None or r["scheme"] in schemes)
        and (layers is None or r["layers"] in layers)
    ]


def _grid(runs: Sequence[Run]) -> tuple[dict, list[str], list[int]]:
    """(the cells, the schemes in order of appearance, the depths ascending)."""
    grouped = table_report.cells(runs)
    schemes = list(dict.fromkeys(s for (_, s, _) in grouped))
    return grouped, schemes, sorted({n for (_, _, n) in grouped})


def setting_rows(payload: Payload, task: str) -> list[str]:
    """The rows of the payload's setting on ``task``: its recorded grid's, then those the
    setting's grid has now (:data:`depth_table_settings.GRIDS`) and the file's lacks
    (:func:`report.setting_rows`)."""
    recorded = table_report.grid_rows(payload["settings"]["grid"], task)
    now = table_settings.GRIDS.get(payload["setting"], {"tasks": [], "cells": []})
    return report.setting_rows(recorded, table_report.grid_rows(now, task))


def _scheme_by_depth(
    runs: Sequence[Run],
    levels: dict[str, Any],
    text: Callable[[list[Run]], str],
    planned: Sequence[str] = (),
) -> str:
    """A row per scheme, a column per depth, ``text(cell_runs)`` in each cell ("" not run);
    then a row of ``—`` for each of the ``planned`` rows that has no run. Where the runs ran
    on more than one kind of device, each column's header names its device and each cell on
    another is marked (:mod:`depth_table_devices`)."""
    grouped, schemes, depths = _grid(runs)
    (task,) = {t for (t, _, _) in grouped}
    columns = devices.column_devices(grouped, depths)
    header = ["scheme"] + [
        devices.header(table_report.depth_label(n, levels), n, columns) for n in depths
    ]

    def shown(cell_runs: list[Run], n: int) -> str:
        return devices.cell(text(cell_runs), cell_runs, n, columns)

    rows = [
        [s] + [shown(grouped[(task, s, n)], n) if (task, s, n) in grouped else "" for n in depths]
        for s in schemes
    ]
    rows += [[s] + [report.NO_RUN] * len(depths) for s in planned if s not in schemes]
    return report.markdown_table(header, rows)


def verdicts(payload: Payload, task: str) -> str:
    """Each cell's verdicts and final metric, mean (min–max) over its seeds; a row of the
    setting (:func:`setting_rows`) without a run ``—``."""
    levels = payload["settings"]["levels"][task]
    field = table_report.metric(levels)[0]
    runs = task_runs(payload, task)
    text = lambda cell: table_report.cell_text(cell, field)  # noqa: E731
    return _scheme_by_depth(runs, levels, text, setting_rows(payload, task))


def since_deepnet_verdicts(since: Payload, quick: Payload) -> str:
    """:func:`verdicts` of the since_deepnet setting under :data:`SINCE_DEEPNET_REFERENCE`'s
    rows from the quick setting (the same recipe, task and seeds) at its depths; a row of the
    setting (:func:`setting_rows`) without a run ``—``."""
    (task,) = since["settings"]["grid"]["tasks"]
    depths = sorted({r["layers"] for r in since["runs"]})
    runs = task_runs(quick, task, SINCE_DEEPNET_REFERENCE, depths) + task_runs(since, task)
    levels = since["settings"]["levels"][task]
    field = table_report.metric(levels)[0]
    text = lambda cell: table_report.cell_text(cell, field)  # noqa: E731
    return _scheme_by_depth(runs, levels, text, setting_rows(since, task))


def _onset_text(run: Run, levels: dict[str, Any]) -> str:
    """``left chance/50%/90%`` of one seed, "—" for a level never reached."""
    o = table_report.onsets(run, levels)
    return "/".join("—" if o[m] is None else str(o[m]) for m in MILESTONES)


def onsets(payload: Payload, task: str) -> str:
    """Each seed's updates to leave chance / reach 50% / reach 90% training accuracy, seeds
    separated by "; "."""
    levels = payload["settings"]["levels"][task]
    runs = task_runs(payload, task)
    return _scheme_by_depth(
        runs, levels, lambda cell: "; ".join(_onset_text(r, levels) for r in cell)
    )


def calls(payload: Payload, task: str) -> str:
    """A line per depth: the differences called beyond the seed spread (``a < b``), then the
    pairs not called because a cell has one seed so far (``a against b``), then "every other pair ≈"
    (:func:`depth_table_report.compare`). Where the runs ran on more than one kind of device,
    each depth names its device as the tables' headers do, and a difference called between
    cells on two devices says so (``a > b (H100 against CPU)``: :mod:`depth_table_devices`)."""
    levels = payload["settings"]["levels"][task]
    field, _, higher = table_report.metric(levels)
    grouped, schemes, depths = _grid(task_runs(payload, task))
    columns = devices.column_devices(grouped, depths)
    lines = []
    for n in depths:
        here = [s for s in schemes if (task, s, n) in grouped]
        value = {s: table_report.values(grouped[(task, s, n)], field) for s in here}
        pairs = [
            (
                a,
                b,
                table_report.compare(value[a], value[b], higher),
                devices.pair(grouped[(task, a, n)], grouped[(task, b, n)]),
            )
            for i, a in enumerate(here)
            for b in here[i + 1 :]
            if a in table_report.REFERENCE_SCHEMES or b in table_report.REFERENCE_SCHEMES
        ]
        depth = devices.header(table_report.depth_label(n, levels), n, columns)
        lines.append(f"- {depth}: {_calls_text(pairs)}")
    return "\n".join(lines)


def _calls_text(pairs: Sequence[tuple[str, str, str, str]]) -> str:
    """``(a, b, relation, devices)`` per pair (devices: :func:`depth_table_devices.pair`)."""
    parts = [f"{a} {rel} {b}{where}" for a, b, rel, where in pairs if rel in "<>"]
    unknown = [f"{a} against {b}" for a, b, rel, _ in pairs if rel == "?"]
    if unknown:
        parts.append("not called, a cell with one seed: " + ", ".join(unknown))
    if any(rel == "≈" for _, _, rel, _ in pairs):
        parts.append("every other pair ≈" if len(parts) else "every pair ≈")
    return "; ".join(parts) if parts else "one scheme, nothing to compare"


def seed_values(payload: Payload, task: str) -> str:
    """Each cell's final metric, one value per seed (3 decimals), the seeds in the header."""
    levels = payload["settings"]["levels"][task]
    field = table_report.metric(levels)[0]
    grouped, schemes, depths = _grid(task_runs(payload, task))
    columns = devices.column_devices(grouped, depths)
    header = ["scheme"]
    for n in depths:
        seeds = sorted({r["seed"] for (_, _, m), c in grouped.items() if m == n for r in c})
        label = devices.header(table_report.depth_label(n, levels), n, columns)
        header.append(f"{label} (seeds {', '.join(str(s) for s in seeds)})")

    def shown(cell_runs: list[Run], n: int) -> str:
        text = ", ".join(f"{r[field]:.3f}" for r in cell_runs)
        return devices.cell(text, cell_runs, n, columns)

    rows = [[s] + [shown(grouped.get((task, s, n), []), n) for n in depths] for s in schemes]
    return report.markdown_table(header, rows)


def corpus_runs(payload: Payload) -> str:
    """The corpus setting: a row per scheme and depth, each seed's verdict, greedy BLEU,
    validation NLL, source sensitivity, the update it left chance and its CPU time."""
    (task,) = payload["settings"]["grid"]["tasks"]
    levels = payload["settings"]["levels"][task]
    grouped, schemes, depths = _grid(task_runs(payload, task))
    sentences = sorted({r["eval_bleu_sentences"] for r in payload["runs"]})
    header = [
        "scheme",
        "depth",
        "verdicts",
        f"greedy BLEU (validation, first {', '.join(str(n) for n in sentences)})",
        "validation NLL",
        "source sensitivity (nats)",
        "left chance (update)",
        "CPU time per run",
    ]
    columns = [
        lambda r: r["verdict"],
        lambda r: f"{r['eval_bleu_greedy']:.2f}",
        lambda r: f"{r['eval_loss']:.2f}",
        lambda r: f"{r['eval_source_sensitivity']:.2f}",
        lambda r: _update(table_report.onsets(r, levels)["left_chance"]),
        lambda r: f"{r['cpu_seconds'] / 60:.0f} min",
    ]
    rows = [
        [s, table_report.depth_label(n, levels)]
        + [", ".join(column(r) for r in grouped[(task, s, n)]) for column in columns]
        for s in schemes
        for n in depths
        if (task, s, n) in grouped
    ]
    return report.markdown_table(header, rows)


def _update(step: int | None) -> str:
    return "—" if step is None else str(step)


def encoder_gradient_ratios(
    payload: Payload,
    scheme: str = "deepnorm",
    layers: int = 18,
    updates: Sequence[int] = (100, 200, 400, 1800),
) -> str:
    """A row per seed of ``scheme`` at ``layers`` and per update of ``updates``: the ratio
    r = ‖∇ first encoder layer‖ / ‖∇ last encoder layer‖ of the run's diagnostics
    (``grad_norm/encoder/all_first`` ÷ ``all_last``), two significant digits; "—" where the
    run has no diagnostics record at that update."""
    first, last = "grad_norm/encoder/all_first", "grad_norm/encoder/all_last"
    runs = [r for r in payload["runs"] if r["scheme"] == scheme and r["layers"] == layers]
    rows = []
    for run in sorted(runs, key=lambda r: r["seed"]):
        at = {d["step"]: d for d in run.get("diagnostics", []) if first in d and last in d}
        for i, step in enumerate(updates):
            d = at.get(step)
            ratio = report.NO_RUN if d is None else _two_digits(d[first] / d[last])
            label = f"seed {run['seed']} ({run['verdict']})" if i == 0 else ""
            rows.append([label, f"{step:,}", ratio])
    header = ["run", "update", "first/last encoder gradient, measured"]
    return report.markdown_table(header, rows)


def _two_digits(value: float) -> str:
    """``value`` to two significant digits: ``0.020``, ``1.5``, ``1.4e-5`` below 10⁻³."""
    if abs(value) >= 1e-3:
        return f"{value:#.2g}".rstrip(".")
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def init_cells(init: Payload, quick: Payload) -> str:
    """The init setting beside the quick setting's cells of the same schemes and depths under
    the papers' initialization (``paper``): a row per scheme, depth and initialization, its
    verdicts and validation accuracy (mean, min–max) and each seed's onsets."""
    (task,) = init["settings"]["grid"]["tasks"]
    levels = init["settings"]["levels"][task]
    field = table_report.metric(levels)[0]
    grid_cells = [(s, n) for s, n in init["settings"]["grid"]["cells"]]  # JSON lists
    runs = task_runs(init, task) + [
        {**r, "init": "paper"}
        for r in task_runs(quick, task)
        if (r["scheme"], r["layers"]) in grid_cells
    ]
    inits = ["paper", *init["settings"]["grid"]["inits"]]
    header = [
        "scheme",
        "depth",
        "init",
        f"verdicts; {table_report.metric(levels)[1]}, mean (min–max)",
        "left chance / 50% / 90% per seed",
    ]
    rows = []
    for s in dict.fromkeys(s for s, _ in grid_cells):
        for n in sorted({n for t, n in grid_cells if t == s}):
            for name in inits:
                cell = [r for r in runs if (r["scheme"], r["layers"], r["init"]) == (s, n, name)]
                cell.sort(key=lambda r: r["seed"])
                onset = "; ".join(_onset_text(r, levels) for r in cell)
                rows.append(
                    [
                        s,
                        table_report.depth_label(n, levels),
                        name,
                        table_report.cell_text(cell, field),
                        onset,
                    ]
                )
    return report.markdown_table(header, rows)


def _is_cpu(run: Run) -> bool:
    """Ran on a CPU, by its record or by a later note (``device_note``)."""
    return devices.device_label(run) == "CPU"


def cpu_costs(payload: Payload) -> str:
    """A row per task, a column per depth: the min–max CPU seconds of the runs made on a CPU,
    DLCL's apart; where a depth's other runs ran elsewhere, the device that ran them."""
    depths = sorted({r["layers"] for r in payload["runs"]})
    tasks = payload["settings"]["grid"]["tasks"]
    header = ["task"] + [
        table_report.depth_label(n, payload["settings"]["levels"][tasks[0]]) for n in depths
    ]
    rows = [
        [f"`{task}`"] + [_cost_cell(task_runs(payload, task, layers=[n])) for n in depths]
        for task in tasks
    ]
    return report.markdown_table(header, rows)


def _seconds(runs: Sequence[Run]) -> str:
    cpu = [r["cpu_seconds"] for r in runs]
    return f"{min(cpu):,.0f}–{max(cpu):,.0f} s"


def _cost_cell(runs: Sequence[Run]) -> str:
    timed = [r for r in runs if _is_cpu(r) and r.get("cpu_seconds")]
    plain = [r for r in timed if r["scheme"] not in DLCL]
    dlcl = [r for r in timed if r["scheme"] in DLCL]
    elsewhere = sorted(
        {devices.device_label(r) or "device not recorded" for r in runs if not _is_cpu(r)}
    )
    text = _seconds(plain) if plain else ""
    if dlcl:
        text = f"{text} (DLCL {_seconds(dlcl)})" if text else f"DLCL {_seconds(dlcl)}"
    if elsewhere:
        where = ", ".join(elsewhere)
        text = f"{text} (the rest: {where})" if text else f"({where})"
    return text
