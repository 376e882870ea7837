"""The learning-rate transfer experiment's table and figure (:mod:`lr_transfer`), from its runs.

Per task, a row per scheme row and a column per depth: the optimum rate (lowest final
validation NLL of the first seed's sweep), the NLL of both seeds at it (their spread), and a
mark where the optimum is not resolved — a neighbouring rate's NLL within the optimum's seed
spread (``≈``), or the optimum on an edge of the sweep that may extend no further (``edge``)
or is still to extend (``edge, 8e-3 next``). The "optimum moved" column compares the
shallowest and deepest resolved optima (:func:`resolved`: not one still to extend). Then, per
task, the first seed's NLL at every rate and depth (``×`` diverged, ``stuck`` at the unigram
entropy, ``fell at 650`` a run that fitted and then lost half its accuracy or more, at its
lowest at update 650, whether or not it came back: :func:`collapse.collapse` of its training
records, which the runs keep since those of 2026-12-01; one recorded before reads ``stuck``
where it ended stuck).
"""

from __future__ import annotations

import math
from typing import Any

from deepnet_jax.experiments import collapse, report
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


def extension(mine: list[dict[str, Any]], grid: dict[str, Any], task: str) -> float | None:
    """The next rate past the edge of ``mine``'s first-seed sweep (one cell's runs) that its
    optimum sits on, while the sweep may still extend there (at most ``grid["extend"]`` rates
    past either end of the grid); None when the sweep is not finished, every run diverged,
    the optimum is interior, or its edge is final."""
    seed = grid["seeds"][0]
    first = [r for r in mine if r["seed"] == seed]
    best = optimum_of(first, seed) if swept(first, grid, task) else None
    if best is None:
        return None
    done = {r["lr"] for r in first}
    centre, reach, exponents = grid["tasks"][task], grid["extend"], grid["exponents"]
    if best["lr"] == max(done) and best["lr"] < centre * 2.0 ** (max(exponents) + reach):
        return best["lr"] * 2
    if best["lr"] == min(done) and best["lr"] > centre * 2.0 ** (min(exponents) - reach):
        return best["lr"] / 2
    return None


def resolved(mine: list[dict[str, Any]], grid: dict[str, Any], task: str) -> tuple | None:
    """``(rate, side)`` of a cell's optimum once its sweep can tell no more: finished, and not
    on an edge it may still extend past (:func:`extension`). ``side`` is 0 inside the sweep,
    +1 on its final upper edge (the optimum may lie higher), -1 on its final lower edge."""
    seed = grid["seeds"][0]
    if not swept(mine, grid, task) or extension(mine, grid, task) is not None:
        return None
    best = optimum_of(mine, seed)
    if best is None:
        return None
    ran = {r["lr"] for r in mine if r["seed"] == seed}
    return best["lr"], (best["lr"] == max(ran)) - (best["lr"] == min(ran))


def optimum_cell(mine: list[dict[str, Any]], grid: dict[str, Any], task: str) -> str:
    """One depth's optimum as the table writes it: ``2e-3 (0.477, 0.480)``, with ``≈`` where a
    neighbouring rate's first-seed NLL lies within the optimum's seed spread (the optimum
    is not resolved from it), ``edge`` where it is the sweep's smallest or largest rate and
    the sweep may extend no further, ``edge, 8e-3 next`` while it may; ``2 of 5 rates``
    while the sweep is not finished."""
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
        after = extension(mine, grid, task)
        text += " edge" if after is None else f" edge, {lr_text(after)} next"
    if len(nlls) > 1:
        top = max(nlls)
        neighbours = [r for r in first if r["lr"] in (best["lr"] * 2, best["lr"] / 2)]
        if any(r.get("verdict") != "diverged" and r["eval_loss"] <= top for r in neighbours):
            text += " ≈"
    return text


def shift_text(optima: list[tuple | None], depths: list[int]) -> str:
    """How the resolved optimum (:func:`resolved`: ``(rate, side)`` or None, per depth of
    ``depths``) moved from the shallowest depth with one to the deepest, with the depths:
    ``×4 (6L→50L)``, ``×1/2 (6L→18L)``, ``none (…)``; a final edge makes the move a bound
    (``×2 or more``), two opposite ones leave it open (``unresolved``)."""
    known = [(n, o) for n, o in zip(depths, optima, strict=True) if o is not None]
    if len(known) < 2:
        return report.NO_RUN
    (n0, (lr0, side0)), (n1, (lr1, side1)) = known[0], known[-1]
    k = round(math.log2(lr1 / lr0))
    low = k if side1 >= 0 and side0 <= 0 else None  # the move's bounds, in factors of 2
    high = k if side1 <= 0 and side0 >= 0 else None
    span = f" ({n0}L→{n1}L)"
    if low is None and high is None:
        return "unresolved" + span
    if low is not None and high is not None:
        return ("none" if k == 0 else _factor(k)) + span
    return _factor(k) + (" or more" if high is None else " or less") + span


def _factor(k: int) -> str:
    return f"×{2**k}" if k >= 0 else f"×1/{2 ** (-k)}"


def optimum_table(runs: list[dict[str, Any]], grid: dict[str, Any], task: str) -> str:
    depths = grid["depths"]
    header = ["row", *(f"{n}L" for n in depths), "optimum moved"]
    rows = []
    for row in grid["rows"]:
        cells = [cell_runs(runs, task, row, n) for n in depths]
        moved = shift_text([resolved(c, grid, task) for c in cells], depths)
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
    """A sweep-table cell: the run's final validation NLL, and how it ended where it did not
    train (diverged, fitted and fell back, stuck)."""
    if run is None:
        return report.NO_RUN
    if run.get("verdict") == "diverged":
        return "×"
    fall = collapse.of_run(run)
    if fall is not None and fall["collapsed"]:
        return f"{run['eval_loss']:.3f} fell at {fall['fell_at']}"
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
        marks = "× diverged, fell at N: fitted, then fell back, at its lowest at update N"
        parts.append(f"\n{task}: first seed's {unit} at each rate ({marks})\n")
        parts.append(sweep_table(runs, grid, task))
    return "\n".join(parts)


def plot(runs: list[dict[str, Any]], settings: dict[str, Any], out: str, name: str) -> str:
    """A panel per task and row: the first seed's NLL against the rate, a line per depth (×
    diverged, at the top); and per task a panel of each row's optimum against depth, at the
    depths whose optimum is resolved (:func:`optimum_points`; rows offset a little so that
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
    """(depth, optimum rate) of each depth whose optimum is resolved (:func:`resolved`): the
    points the figure draws, the optima the table's "optimum moved" column compares."""
    points = []
    for n in grid["depths"]:
        best = resolved(cell_runs(runs, task, row, n), grid, task)
        if best is not None:
            points.append((n, best[0]))
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
    _rate_ticks(ax, "x", sorted({r["lr"] for r in first} or rates(grid, task)))
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
    _rate_ticks(ax, "y", sorted(shown or rates(grid, task)))
    ax.set_title(f"{task}: optimum rate, resolved sweeps", fontsize=8)
    ax.set_xlabel("layers per side", fontsize=7)
    ax.set_ylabel("peak rate (rows offset)", fontsize=7)
    ax.tick_params(labelsize=6)
    if ax.lines:
        ax.legend(fontsize=6)


def _rate_ticks(ax: Any, which: str, lrs: list[float]) -> None:
    """``ax``'s ``which`` axis ("x" or "y") on a log-2 rate scale, ticked at ``lrs`` only,
    each written as the docs write a rate."""
    getattr(ax, f"set_{which}scale")("log", base=2)
    axis = getattr(ax, f"{which}axis")
    axis.set_ticks(lrs, labels=[lr_text(lr) for lr in lrs])
    axis.set_ticks([], minor=True)
