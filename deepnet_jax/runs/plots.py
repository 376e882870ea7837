"""Training and validation curves of a run as a PNG (matplotlib's Agg canvas, no display).

The figure is built on ``matplotlib.figure.Figure`` with an explicit Agg canvas rather than
through ``pyplot``, so importing this module changes no global backend and leaks no figures.
"""

from __future__ import annotations

from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from deepnet_jax.runs import metrics
from deepnet_jax.runs.workdir import RunDir


def _series(records: list[dict[str, Any]], name: str) -> tuple[list[int], list[float]]:
    """(steps, values) of ``name`` over the records that carry it."""
    kept = [r for r in records if name in r]
    return [r["step"] for r in kept], [r[name] for r in kept]


def plot_curves(workdir: str | RunDir, path: str | None = None) -> str:
    """Draw the workdir's metrics (see ``deepnet_jax.runs.metrics``) to a PNG; return its
    path.

    Left panel, over optimizer updates: training loss (label-smoothed, as optimized), training
    NLL when recorded, and validation loss (plain NLL) of the ``eval`` records. Right panel, only
    when some ``eval`` record has ``bleu``: validation BLEU. Other splits (the final test
    evaluation) are not drawn. ``path`` defaults to ``RunDir.curves``.

    Raises ``ValueError`` when the file has no ``train`` record (``FileNotFoundError`` when there
    is no file).
    """
    run_dir = RunDir(workdir)
    records = metrics.read(run_dir)
    train = [r for r in records if r["split"] == "train"]
    evals = [r for r in records if r["split"] == "eval"]
    if not train:
        raise ValueError(f"{run_dir.metrics} has no training records")
    bleu_steps, bleu = _series(evals, "bleu")
    fig = Figure(figsize=(11, 4) if bleu else (6, 4))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2 if bleu else 1, squeeze=False)[0]
    ax = axes[0]
    ax.plot(*_series(train, "loss"), label="train loss")
    nll_steps, nll = _series(train, "nll")
    if nll:
        ax.plot(nll_steps, nll, label="train NLL")
    eval_steps, eval_loss = _series(evals, "loss")
    if eval_loss:
        ax.plot(eval_steps, eval_loss, "o-", label="validation loss (NLL)")
    ax.set_xlabel("update")
    ax.set_ylabel("nats per target token")
    ax.legend()
    ax.grid(alpha=0.3)
    if bleu:
        ax = axes[1]
        ax.plot(bleu_steps, bleu, "o-", color="C3")
        ax.set_xlabel("update")
        ax.set_ylabel("validation BLEU (greedy)")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path = path or run_dir.curves
    fig.savefig(path, dpi=100, format="png")
    return path
