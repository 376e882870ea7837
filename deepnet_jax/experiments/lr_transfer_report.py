"""The learning-rate transfer experiment's table and figure (:mod:`lr_transfer`), from its runs.

Per task, a row per scheme row and a column per depth: the optimum rate (lowest final
validation NLL of the first seed's sweep), the NLL of both seeds at it (their spread), and a
mark where the optimum is not resolved — a neighbouring rate's NLL within the optimum's seed
spread (``≈``), or the optimum on an edge of the sweep that could not extend further
(``edge``). Then, per task, the first seed's NLL at every rate and depth (``×`` diverged,
``stuck`` at the unigram entropy).
"""

from __future__ import annotations

import math
from typing import Any

from deepnet_jax.experiments import report
from deepnet_jax.experiments.lr_tolerance import lr_text


def rates(grid: dict[str, Any], task: str) -> list[float]:
    """The sweep's rates on ``task``: its centre · 2^k for the grid's exponents."""
    return [grid["tasks"][task] * 2.0**k for k in grid["exponents"]]


def swept(mine: list[dict[str, Any]], grid: dict[str, Any], task: str) -> bool:
    """Whether the first seed ran every rate of the sweep in ``mine`` (one cell's runs)."""
    done = {r["lr"] for r in mine if r["seed"] == grid["seeds"][0]}
    return set(rates(grid, task)) <= done


def cell_runs(runs: list[dict[str, Any]], task: str, row: str, depth: int) -> list[dict]:
    return [r for r in runs if (r["task"], r["row"], r["layers"]) == (task, row, depth)]


def optimum_of(mine: list[dict[str, Any]], seed: int) -> dict[str, Any] | None:
    """The first seed's run of lowest NLL that did not diverge (None: none yet)."""
    kept = [
        r
        for r in mine
        if r["seed"] == seed and r.get("verdict") != "diverged" and r.get("eval_loss") is not None
    ]
    return min(kept, key=lambda r: (r["eval_loss"], r["lr"])) if kept else None


def optimum_cell(mine: list[dict[str, Any]], grid: dict[str, Any], task: str) -> str:
    """One depth's optimum as the table writes it: ``2e-3 (0.477, 0.480)``, with ``≈`` where a
    neighbouring rate's first-seed NLL lies within the optimum's seed spread (the optimum
    is not resolved from it) and ``edge`` where it is the sweep's smallest or largest rate;
    ``2 of 5 rates`` while the sweep is not finished."""
    seeds = grid["seeds"]
    if not swept(mine, grid, task):
        n = len({r["lr"] for r in mine if r["seed"] == seeds[0]} & set(rates(grid, task)))
        return f"{n} of {len(rates(grid, task))} rates" if n else report.NO_RUN
    best = optimum_of(mine, seeds[0])
    if best is None:
        return "all diverged"
    at = [r for r in mine if r["lr"] == best["lr"]]
    nlls = [r["eval_loss"] for r in sorted(at, key=lambda r: r["seed"])]
    text = f"{lr_text(best['lr'])} ({', '.join(f'{v:.3f}' for v in nlls)})"
    first = [r for r in mine if r["seed"] == seeds[0]]
    ran = sorted({r["lr"] for r in first})
    if best["lr"] in (ran[0], ran[-1]):
        text += " edge"
    if len(nlls) > 1:
        top = max(nlls)
        neighbours = [r for r in first if r["lr"] in (best["lr"] * 2, best["lr"] / 2)]
        if any(r.get("verdict") != "diverged" and r["eval_loss"] <= top for r in neighbours):
            text += " ≈"
    return text


def shift_text(optima: list[float | None]) -> str:
    """How the optimum moved from the shallowest depth with one to the deepest: ``×4``,
    ``×1/2``, ``none``."""
    known = [lr for lr in optima if lr is not None]
    if len(known) < 2:
        return report.NO_RUN
    k = round(math.log2(known[-1] / known[0]))
    return "none" if k == 0 else f"×{2**k}" if k > 0 else f"×1/{2 ** (-k)}"


def optimum_table(runs: list[dict[str, Any]], grid: dict[str, Any], task: str) -> str:
    depths, seed = grid["depths"], grid["seeds"][0]
    header = ["row", *(f"{n}L" for n in depths), "optimum moved"]
    rows = []
    for row in grid["rows"]:
        cells = [cell_runs(runs, task, row, n) for n in depths]
        optima = [optimum_of(c, seed) if swept(c, grid, task) else None for c in cells]
        moved = shift_text([o["lr"] if o else None for o in optima])
        rows.append([row, *(optimum_cell(c, grid, task) for c in cells), moved])
    return report.markdown_table(header, rows)


def docs_table(payload: dict[str, Any], task: str) -> str:
    """docs/reproduction.md's table of a results payload (``lr_transfer.json``; written between
    its markers by :mod:`deepnet_jax.experiments.docs_tables`): :func:`optimum_table`."""
    return optimum_table(payload["runs"], payload["settings"]["grid"], task)


def sweep_table(runs: list[dict[str, Any]], grid: dict[str, Any], task: str) -> str:
    """The first seed's final validation NLL at every rate (a column each) per row and depth."""
    first = [r for r in runs if r["task"] == task and r["seed"] == grid["seeds"][0]]
    lrs = sorted({r["lr"] for r in first})
    header = ["row", "depth", *(lr_text(lr) for lr in lrs)]
    rows = []
    for row in grid["rows"]:
        for n in grid["depths"]:
            mine = {r["lr"]: r for r in first if (r["row"], r["layers"]) == (row, n)}
            if mine:
                rows.append([row, f"{n}L", *(_nll(mine.get(lr)) for lr in lrs)])
    return report.markdown_table(header, rows)


def _nll(run: dict[str, Any] | None) -> str:
    if run is None:
        return report.NO_RUN
    if run.get("verdict") == "diverged":
        return "×"
    return f"{run['eval_loss']:.3f}" + (" stuck" if run.get("verdict") == "stuck" else "")


def table(runs: list[dict[str, Any]], settings: dict[str, Any]) -> str:
    """The experiment's markdown: per task its optimum table, then its sweep table."""
    grid = settings["grid"]
    parts = []
    for task in grid["tasks"]:
        unit = "validation NLL (nats per character)" if task == "shakespeare" else "validation NLL"
        seeds = " and ".join(map(str, grid["seeds"]))
        parts.append(f"**{task}**: optimum rate per depth ({unit} of seeds {seeds} at it)\n")
        parts.append(optimum_table(runs, grid, task))
        parts.append(f"\n{task}: first seed's {unit} at each rate (× diverged)\n")
        parts.append(sweep_table(runs, grid, task))
    return "\n".join(parts)


def plot(runs: list[dict[str, Any]], settings: dict[str, Any], out: str, name: str) -> str:
    """A panel per task and row: the first seed's NLL against the rate, a line per depth (×
    diverged, at the top); and per task a panel of each row's optimum against depth, at the
    depths whose sweeps are finished (:func:`optimum_points`; rows offset a little so that
    rows at one rate stay apart). Rates are ticked at the runs' rates only."""
    plt = report.pyplot()
    grid = settings["grid"]
    tasks, rows = list(grid["tasks"]), grid["rows"]
    fig, axes = plt.subplots(
        len(tasks), len(rows) + 1, figsize=(3.0 * (len(rows) + 1), 2.6 * len(tasks)), squeeze=False
    )
    for t, task in enumerate(tasks):
        for c, row in enumerate(rows):
            _sweep_panel(axes[t][c], runs, grid, task, row)
        _optimum_panel(axes[t][-1], runs, grid, task)
    return report.save_figure(fig, out, name)


def optimum_points(runs: list[dict], grid: dict[str, Any], task: str, row: str) -> list[tuple]:
    """(depth, optimum rate) of each depth whose first-seed sweep is finished: the points the
    figure draws, the table's optima (a depth still sweeping has none yet)."""
    points = []
    for n in grid["depths"]:
        mine = cell_runs(runs, task, row, n)
        best = optimum_of(mine, grid["seeds"][0]) if swept(mine, grid, task) else None
        if best is not None:
            points.append((n, best["lr"]))
    return points


def _sweep_panel(ax: Any, runs: list[dict], grid: dict[str, Any], task: str, row: str) -> None:
    first = [r for r in runs if (r["task"], r["row"], r["seed"]) == (task, row, grid["seeds"][0])]
    finite = [r["eval_loss"] for r in first if r.get("verdict") != "diverged"]
    top = max(finite) * 1.05 if finite else 1.0
    for n in grid["depths"]:
        mine = sorted((r for r in first if r["layers"] == n), key=lambda r: r["lr"])
        if not mine:
            continue
        ys = [top if r.get("verdict") == "diverged" else r["eval_loss"] for r in mine]
        (line,) = ax.plot([r["lr"] for r in mine], ys, marker="o", markersize=3, label=f"{n}L")
        for r in mine:
            if r.get("verdict") == "diverged":
                ax.plot([r["lr"]], [top], marker="x", color=line.get_color())
    _rate_ticks(ax.xaxis, ax, sorted({r["lr"] for r in first} or rates(grid, task)))
    ax.set_title(f"{task}: {row}", fontsize=8)
    ax.set_xlabel("peak learning rate", fontsize=7)
    ax.set_ylabel("validation NLL", fontsize=7)
    ax.tick_params(labelsize=6)
    if ax.lines:
        ax.legend(fontsize=6)


def _optimum_panel(ax: Any, runs: list[dict], grid: dict[str, Any], task: str) -> None:
    shown, rows = set(), grid["rows"]
    for k, row in enumerate(rows):
        points = optimum_points(runs, grid, task, row)
        dodge = 2.0 ** (0.05 * (k - (len(rows) - 1) / 2))  # rows at one rate stay apart
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, [lr * dodge for lr in ys], marker="o", markersize=3, label=row)
            shown |= set(ys)
    ax.set_xscale("log")
    ax.set_xticks(grid["depths"], labels=[str(n) for n in grid["depths"]])
    ax.set_xticks([], minor=True)
    _rate_ticks(ax.yaxis, ax, sorted(shown or rates(grid, task)))
    ax.set_title(f"{task}: optimum rate, finished sweeps", fontsize=8)
    ax.set_xlabel("layers per side", fontsize=7)
    ax.set_ylabel("peak rate (rows offset)", fontsize=7)
    ax.tick_params(labelsize=6)
    if ax.lines:
        ax.legend(fontsize=6)


def _rate_ticks(axis: Any, ax: Any, lrs: list[float]) -> None:
    """A log-2 rate axis ticked at ``lrs`` only, each written as the docs write a rate."""
    (ax.set_xscale if axis is ax.xaxis else ax.set_yscale)("log", base=2)
    axis.set_ticks(lrs, labels=[lr_text(lr) for lr in lrs])
    axis.set_ticks([], minor=True)
