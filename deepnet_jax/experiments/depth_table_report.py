"""The depth table's report: each cell's seeds aggregated (verdicts, the final metric's mean and
min–max spread, onsets), the differences between schemes that exceed the seed spread, the
markdown tables (the Figure-6-like figure: :mod:`depth_table_plot`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from deepnet_jax.experiments import common, report
from deepnet_jax.experiments import depth_table_devices as devices
from deepnet_jax.experiments.thousand_layers_report import LEVELS, ONSET_MARGIN, first_reaching
from deepnet_jax.model import schemes
from deepnet_jax.training import progress

# the papers' schemes: every other scheme's differences are called against these
REFERENCE_SCHEMES = schemes.names(origin=schemes.PAPER)
# the final metric of a run on each kind of task: (run field, label, higher is better)
METRICS = {
    "synthetic": ("eval_accuracy", "validation accuracy", True),
    "corpus": ("eval_bleu_greedy", "greedy BLEU (validation)", True),
    "lm": ("eval_bits_per_char", "validation bits per character", False),
}


def metric(task_levels: dict[str, Any]) -> tuple[str, str, bool]:
    """(run field, label, higher is better) of a task's final metric (its ``levels``)."""
    if task_levels.get("lm"):
        return METRICS["lm"]
    return METRICS["synthetic" if "chance" in task_levels else "corpus"]


def onsets(run: dict[str, Any], task_levels: dict[str, Any]) -> dict[str, int | None]:
    """The first logged update at which the run left chance (training accuracy ONSET_MARGIN
    above the source-blind best; corpus: training NLL ``common.STUCK_MARGIN`` below the
    unigram entropy) and reached each of ``LEVELS`` training accuracy (None: never)."""
    train = [r for r in run.get("records", []) if r["split"] == "train"]
    curve = [(r["step"], r["accuracy"]) for r in train]
    if "chance" in task_levels:
        left = first_reaching(curve, task_levels["chance"]["accuracy"] + ONSET_MARGIN)
    else:
        bar = task_levels["unigram_entropy"] - common.STUCK_MARGIN
        left = next((r["step"] for r in train if r["nll"] <= bar), None)
    return {"left_chance": left, **{f"to_{v:g}": first_reaching(curve, v) for v in LEVELS}}


def depth_label(n: int, task_levels: dict[str, Any]) -> str:
    """ "6L-6L" (encoder-decoder), "6L" (a language model's one stack)."""
    return f"{n}L" if task_levels.get("lm") else f"{n}L-{n}L"


def cells(runs: Sequence[dict[str, Any]]) -> dict[tuple[str, str, int], list[dict[str, Any]]]:
    """(task, scheme, layers) → the cell's runs in seed order."""
    out: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for run in sorted(runs, key=lambda r: r["seed"]):
        out.setdefault((run["task"], run["scheme"], run["layers"]), []).append(run)
    return out


def grid_rows(grid: dict[str, Any], task: str) -> list[str]:
    """The rows (schemes, or ``configs.experiment_rows.ROW_FIELDS`` rows) of a grid's cells on
    ``task``, its ``more`` parts' too, in the grid's order (none for a grid that lists no cells)."""
    parts = [grid, *grid.get("more", [])]
    return list(
        dict.fromkeys(
            row for part in parts if task in part["tasks"] for row, _ in part.get("cells", [])
        )
    )


def values(cell_runs: Sequence[dict[str, Any]], field: str) -> list[float]:
    """Each seed's final metric; a diverged run's is NaN."""
    return [math.nan if r["verdict"] == "diverged" else float(r[field]) for r in cell_runs]


def compare(a: Sequence[float], b: Sequence[float], higher_better: bool = True) -> str:
    """Called relation of two cells' final metrics, one value per seed: ``>`` where every seed of
    ``a`` beats every seed of ``b`` (a diverged seed, NaN, loses to everything), ``<`` where
    every seed of ``b`` beats every seed of ``a``, else ``≈`` (the seed ranges overlap: no
    difference is called); ``?`` where either side has one seed only (no spread to compare)."""
    if min(len(a), len(b)) < 2:
        return "?"
    sign = 1.0 if higher_better else -1.0
    worst = -math.inf

    def score(v: float) -> float:
        return worst if math.isnan(v) else sign * v

    sa, sb = [score(v) for v in a], [score(v) for v in b]
    if min(sa) > max(sb):
        return ">"
    if min(sb) > max(sa):
        return "<"
    return "≈"


def cell_text(cell_runs: Sequence[dict[str, Any]], field: str) -> str:
    """A cell: the verdicts (``trained ×3``, or each seed's), the final metric's mean and
    min–max over the seeds that did not diverge, how each diverged seed broke (its first
    non-finite update, or its final NLL from its first loss: :func:`common.divergence_text`)."""
    verdicts = [r["verdict"] for r in cell_runs]
    kinds = sorted(set(verdicts), key=common.VERDICTS.index)
    text = ", ".join(f"{v} ×{verdicts.count(v)}" for v in kinds)
    finite = [v for v in values(cell_runs, field) if not math.isnan(v)]
    if finite:
        mean = sum(finite) / len(finite)
        text += f"; {mean:.3g} ({min(finite):.3g}–{max(finite):.3g})"
    broke = [common.divergence_text(r) for r in cell_runs if r["verdict"] == "diverged"]
    if broke:
        text += f"; diverged at {', '.join(broke)}"
    return text


def panels(
    runs: Sequence[dict[str, Any]], settings: dict[str, Any]
) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """(title, task, runs) per task, and per variant where the grid has several (the
    ``recipe`` setting's learning rates and warm-ups, the ``init`` setting's initializations)."""
    variants = list(dict.fromkeys(_variant(r) for r in runs))
    out = []
    for task in settings["grid"]["tasks"]:
        for variant in variants:
            mine = [r for r in runs if r["task"] == task and _variant(r) == variant]
            lr, warmup, init = variant
            title = task
            if len({(v[0], v[1]) for v in variants}) > 1:
                title += f", lr {lr:g}, warm-up {warmup}"
            if init is not None:
                title += f", init {init}"
            if mine:
                out.append((title, task, mine))
    return out


def _variant(run: dict[str, Any]) -> tuple[float, int, str | None]:
    return run["lr"], run["warmup"], run.get("init")


def table(runs: Sequence[dict[str, Any]], settings: dict[str, Any]) -> str:
    """Per task (and recipe): the verdict/metric table (a row per scheme, a column per depth;
    the grid's rows without a run yet ``—``), the onsets of every seed, and the differences
    called at each depth. Where a panel's runs ran on more than one kind of device, its
    columns, cells, onset rows and calls say which (:mod:`depth_table_devices`)."""
    parts = [_recipe_note(settings)]
    for title, task, mine in panels(runs, settings):
        grouped = cells(mine)
        levels = settings["levels"][task]
        field, label, higher = metric(levels)
        depths = sorted({n for (_, _, n) in grouped})
        schemes = list(dict.fromkeys(s for (_, s, _) in grouped))
        columns = devices.column_devices(grouped, depths)
        header = ["scheme"] + [devices.header(depth_label(n, levels), n, columns) for n in depths]
        rows = [[s] + [_cell(grouped, task, s, n, field, columns) for n in depths] for s in schemes]
        unrun = [s for s in grid_rows(settings["grid"], task) if s not in schemes]
        rows += [[s] + [report.NO_RUN] * len(depths) for s in unrun]  # a row not run yet
        parts.append(f"### {title}: verdicts and {label} (mean, min–max over seeds)\n")
        translates = any("eval_source_sensitivity" in run for run in mine)
        notes = _levels_note(levels, translates) + " " + devices_note(mine, levels)
        parts.append(notes + "\n\n" + report.markdown_table(header, rows))
        parts.append(f"### {title}: onset (each seed's first logged update)\n")
        parts.append(_onset_table(grouped, task, schemes, depths, levels))
        parts.append(f"### {title}: differences beyond the seed spread\n")
        parts.append(_calls(grouped, task, schemes, depths, field, higher, levels))
    return "\n".join(parts)


def _cell(grouped: dict, task: str, scheme: str, n: int, field: str, columns: dict) -> str:
    if (task, scheme, n) not in grouped:
        return ""
    mine = grouped[(task, scheme, n)]
    return devices.cell(cell_text(mine, field), mine, n, columns)


_SCHEDULES = {  # what follows the warm-up, by schedule.name
    "inverse_sqrt": "inverse square root",
    "polynomial": "then polynomial decay to the end",
    "linear": "then linear decay to the end",
    "cosine": "then cosine decay to the end",
    "constant": "then constant",
}


def _recipe_note(s: dict[str, Any]) -> str:
    if "recipes" in s["grid"]:
        rates = "the peak learning rates and warm-ups of each panel (inverse square root)"
    else:
        rates = f"peak learning rate {s['lr']:g} after a {s['warmup']}-update warm-up"
        rates += f" ({_SCHEDULES[s.get('schedule', 'inverse_sqrt')]})"
    return (
        f"One recipe for every cell: {rates}, {s['updates']} updates, batch {s['batch']}, "
        f"dropout {s['dropout']:g}, training curves logged every {s['log_every']} updates; "
        f"seeds {', '.join(str(x) for x in s['grid']['seeds'])}.\n"
    )


def devices_note(runs: Sequence[dict[str, Any]], levels: dict[str, Any]) -> str:
    """Which device ran which runs (``run["device"]``, the kind JAX reported; "not recorded"
    for runs made before it was kept, saying so where a ``device_note`` gives a later account
    of where they ran; and the default matmul precision if one was set), with the depths each
    device's runs have."""
    by_device: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        device = run.get("device") or "not recorded"
        note = run.get("device_note")
        if not run.get("device") and note:  # a later account of where it ran, not a record
            device = f"not recorded ({note['device']} by a later note, device_note)"
        if run.get("matmul_precision"):  # None: the platform's default
            device += f" at matmul precision {run['matmul_precision']}"
        by_device.setdefault(device, []).append(run)
    parts = []
    for device, mine in sorted(by_device.items()):
        depths = ", ".join(depth_label(n, levels) for n in sorted({r["layers"] for r in mine}))
        parts.append(f"{device}: {len(mine)} ({depths})")
    return "Runs by device: " + "; ".join(parts) + "."


def _levels_note(levels: dict[str, Any], translates: bool = False) -> str:
    """The bar a trained run passes (:func:`depth_table.verdict`'s rules), in words."""
    entropy = levels["unigram_entropy"]
    if "chance" not in levels:
        bar = f"validation NLL < {entropy - common.STUCK_MARGIN:.3f}"
        if translates:
            bar += f" and source sensitivity ≥ {progress.SOURCE_BLIND_NATS:g} nats"
        return f"Unigram entropy {entropy:.3f} nats (trained: {bar})."
    chance = levels["chance"]
    return (
        f"Unigram entropy {entropy:.3f} nats (trained: validation NLL ≤ {entropy - 1:.3f}); "
        f"the best source-blind predictor: accuracy {chance['accuracy']:.3f}, NLL "
        f"{chance['nll']:.3f}."
    )


def _onset_table(
    grouped: dict, task: str, schemes: list[str], depths: list[int], levels: dict[str, Any]
) -> str:
    """A row per (scheme, depth): each seed's update leaving chance and reaching each level;
    the depth with the cell's device where the runs ran on more than one kind."""
    header = ["scheme", "depth", "left chance", *(f"train acc ≥ {v:g}" for v in LEVELS)]
    mixed = devices.mixed(r for cell_runs in grouped.values() for r in cell_runs)
    rows = []
    for scheme in schemes:
        for n in depths:
            if (task, scheme, n) not in grouped:
                continue
            per_seed = [onsets(r, levels) for r in grouped[(task, scheme, n)]]
            columns = ["left_chance"] + [f"to_{v:g}" for v in LEVELS]
            depth = depth_label(n, levels)
            if mixed:  # the cell's own device, as the verdict table's columns name theirs
                depth += f" ({devices.cell_device(grouped[(task, scheme, n)]) or 'not recorded'})"
            rows.append(
                [scheme, depth]
                + [", ".join("—" if o[c] is None else str(o[c]) for o in per_seed) for c in columns]
            )
    return report.markdown_table(header, rows)


_CALLS_LEGEND = (
    "`a > b`: every seed of a ends better than every seed of b; `≈`: their seed ranges "
    "overlap, no difference called; `?`: a cell with one seed so far, nothing called."
)


def _calls(
    grouped: dict,
    task: str,
    schemes: list[str],
    depths: list[int],
    field: str,
    higher: bool,
    levels: dict[str, Any],
) -> str:
    """Each pair of schemes at each depth where both ran: the called relation (``?``: a cell
    of one seed, nothing called; ``>`` reads "better than", lower being better where the
    metric is a loss). Among more than the papers' schemes, only the pairs that hold one of
    them (:data:`REFERENCE_SCHEMES`): each newer scheme against the papers' rows. Where the
    runs ran on more than one kind of device, each depth names its device and a pair of cells
    on two devices says so (:mod:`depth_table_devices`)."""
    columns = devices.column_devices(grouped, depths)
    lines = []
    for n in depths:
        here = [s for s in schemes if (task, s, n) in grouped]
        called = []
        for i, a in enumerate(here):
            for b in here[i + 1 :]:
                if a not in REFERENCE_SCHEMES and b not in REFERENCE_SCHEMES:
                    continue
                rel = compare(
                    values(grouped[(task, a, n)], field),
                    values(grouped[(task, b, n)], field),
                    higher,
                )
                where = devices.pair(grouped[(task, a, n)], grouped[(task, b, n)])
                called.append(f"{a} {rel} {b}{where}")
        depth = devices.header(depth_label(n, levels), n, columns)
        lines.append(f"- {depth}: " + "; ".join(called))
    return _CALLS_LEGEND + "\n\n" + "\n".join(lines) + "\n"
