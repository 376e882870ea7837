"""The tables of :mod:`deepnorm18_corpus`'s results (docs/reproduction.md shows them between
markers, :mod:`deepnet_jax.experiments.docs_tables`): per run, when it reads its source and the
encoder's gradient attenuation, predicted from its LayerNorm inputs and measured."""

from __future__ import annotations

import math
from typing import Any

from deepnet_jax.experiments import report
from deepnet_jax.training.progress import SOURCE_BLIND_NATS

# the LayerNorm-input table's updates, per setting (those a run measured)
LN_UPDATES = {"smoke": (2, 8), "probes": (100, 200, 400), "full": (100, 200, 400, 1800)}


def predicted_attenuation(diagnostics: dict[str, Any], alpha_x: float) -> float:
    """∏ over the encoder's LayerNorms of layers 2 … N of ‖α·x‖ / (the LN input's norm): the
    first layer's gradient against the last layer's, as the LN inputs predict it."""
    inputs = (
        diagnostics["ln_input/encoder/self_attn_layer_norm"][1:]
        + diagnostics["ln_input/encoder/final_layer_norm"][1:]
    )
    return math.prod(alpha_x / z for z in inputs)


def _attenuation(diagnostics: dict[str, Any], alpha_x: float) -> tuple[float, float]:
    """(predicted, measured) first ÷ last encoder-layer gradient at one measurement."""
    g = diagnostics["grad_norm/encoder/all"]
    return predicted_attenuation(diagnostics, alpha_x), g[0] / g[-1]


def _at(records: list[dict[str, Any]], update: int, key: str = "update") -> dict[str, Any]:
    return next((r for r in records if r[key] == update), {})


def _figure(value: float | None, fmt: str = ".2f") -> str:
    return "—" if value is None else f"{value:{fmt}}"


def _run_name(run: dict[str, Any]) -> str:
    return f"seed {run['seed']}, peak {run['lr']:g}"


def sensitivity_table(payload: dict[str, Any]) -> str:
    """A row per run: source sensitivity at each validation, the attenuation at the first
    measurement, and whether it reads its source (final sensitivity ≥ 0.1 nats)."""
    alpha_x = payload["settings"]["alpha_x"]
    updates = sorted({v["update"] for r in payload["runs"] for v in r["validation"]})
    first = min(d["step"] for r in payload["runs"] for d in r["diagnostics"] if d["step"] > 0)
    header = [
        "seed",
        "peak lr",
        "source sensitivity at updates " + " / ".join(f"{u:,}" for u in updates) + " (nats)",
        f"first/last encoder gradient at update {first:,}, predicted / measured",
        "reads its source",
    ]
    rows = []
    for run in _ordered(payload["runs"]):
        sens = [_at(run["validation"], u).get("source_sensitivity") for u in updates]
        predicted, measured = _attenuation(_at(run["diagnostics"], first, "step"), alpha_x)
        reads = sens[-1] is not None and sens[-1] >= SOURCE_BLIND_NATS
        rows.append(
            [run["seed"], f"{run['lr']:g}", " / ".join(_figure(s) for s in sens),
             f"{predicted:.2g} / {measured:.2g}", "yes" if reads else "no"]
        )  # fmt: skip
    return report.markdown_table(header, rows).strip()


def final_table(payload: dict[str, Any]) -> str:
    """A row per run: its last validation's greedy BLEU, NLL, sensitivity and distinct
    hypotheses."""
    header = ["seed", "peak lr", "update", "greedy BLEU", "validation NLL",
              "source sensitivity (nats)", "distinct hypotheses"]  # fmt: skip
    rows = []
    for run in _ordered(payload["runs"]):
        v = run["validation"][-1]
        distinct = v.get("distinct_hypotheses")
        rows.append(
            [run["seed"], f"{run['lr']:g}", f"{v['update']:,}", _figure(v.get("bleu")),
             _figure(v["loss"], ".3f"), _figure(v["source_sensitivity"]),
             "—" if distinct is None else f"{distinct:.0%}"]
        )  # fmt: skip
    return report.markdown_table(header, rows).strip()


def ln_input_table(payload: dict[str, Any]) -> str:
    """For each run, at each of its setting's :data:`LN_UPDATES`: the range of the encoder's LN
    inputs over layers 2 … N, the last layer's FFN LN input, and the attenuation."""
    alpha_x = payload["settings"]["alpha_x"]
    header = ["run", "update", "encoder LN inputs (layers 2 … N)", "last layer's FFN LN input",
              "first/last gradient, predicted / measured"]  # fmt: skip
    rows = []
    for run in _ordered(payload["runs"]):
        name = _run_name(run)
        for update in LN_UPDATES[payload["setting"]]:
            d = _at(run["diagnostics"], update, "step")
            if not d:
                continue
            inputs = (
                d["ln_input/encoder/self_attn_layer_norm"][1:]
                + d["ln_input/encoder/final_layer_norm"][1:]
            )
            predicted, measured = _attenuation(d, alpha_x)
            rows.append(
                [name, f"{update:,}", f"{min(inputs):.1f}–{max(inputs):.1f}",
                 f"{d['ln_input/encoder/final_layer_norm'][-1]:.1f}",
                 f"{predicted:.2g} / {measured:.2g}"]
            )  # fmt: skip
            name = ""
    return report.markdown_table(header, rows).strip()


def _ordered(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs by peak learning rate (largest first), then seed."""
    return sorted(runs, key=lambda r: (-r["lr"], r["seed"]))


def tables(payload: dict[str, Any]) -> str:
    """The results file's report: the three tables."""
    return (
        "\n\n".join(
            [
                "Validation, run by run:\n\n" + sensitivity_table(payload),
                "Last validation:\n\n" + final_table(payload),
                "The encoder's LayerNorm inputs:\n\n" + ln_input_table(payload),
            ]
        )
        + "\n"
    )
