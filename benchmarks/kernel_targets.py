"""The speed targets of docs/scaling.md ("The targets") against the kernel model's record
(``benchmarks.kernel_model``, docs/records/kernel_model.json): a row per target with the
predicted, calibrated and measured MFU of its case.

A measured MFU is the case's predicted MFU scaled by predicted ÷ measured step time (the same
model FLOPs over the same devices), the measurement being the case's own (a committed
``benchmarks.on_device`` record, or the H100 figures copied from the docs and flagged so in the
record). ``benchmarks.kernel_model --docs`` writes the table between the ``kernel-targets``
markers; ``tests/test_kernel_model_record.py`` regenerates it from the committed record.
"""

from __future__ import annotations

from typing import Any

# (config, target, the case's overrides, predicted target, measured target): a target of None
# is not set for that case (a row for reference)
TARGETS: list[tuple[str, str, list[str], float | None, float | None]] = [
    ("wmt17_ende", "h100-1", [], 0.40, None),
    (
        "wmt17_ende",
        "h100-1",
        ["model.attention_impl=cudnn", "model.attention_dropout=0.0", "model.remat_policy=dots"],
        None,
        0.35,
    ),
    (
        "wmt17_ende",
        "h200-1",
        ["model.attention_impl=cudnn", "model.attention_dropout=0.0", "model.remat_policy=dots"],
        None,
        0.35,
    ),
    ("wmt17_ende", "v5p-8", [], 0.50, None),
    ("deepnet_3b", "h100-1", ["data.max_tokens=8192", "model.remat_policy=full"], 0.55, None),
    ("deepnet_3b", "h200-1", ["data.max_tokens=8192", "model.remat_policy=dots"], None, 0.45),
    ("deepnet_3b", "h100-8", ["mesh.data=1", "mesh.fsdp=8", "model.remat_policy=dots"], None, None),
    (
        "deepnet_3b",
        "v5p-8",
        ["mesh.data=1", "mesh.fsdp=4", "data.max_tokens=32768", "model.remat_policy=dots"],
        0.60,
        None,
    ),
]


def measured_mfu(case: dict[str, Any]) -> float | None:
    """The case's measured MFU (its predicted MFU × predicted ÷ measured time), None if it
    has no measurement."""
    measured = case.get("measured", {}).get("ms_per_update")
    if not measured or "predicted_step_s" not in case:
        return None
    return case["predicted_mfu"] * case["predicted_step_s"] * 1e3 / measured


def table(record: dict[str, Any]) -> str:
    """A row per target: the case, its attention and remat, predicted, calibrated and measured
    MFU, the targets and whether each is met."""
    rows = [
        "| config | target | set | attention, remat | predicted MFU | calibrated MFU | "
        "measured MFU | target (predicted / measured) | met |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for config, target, overrides, want_predicted, want_measured in TARGETS:
        case = _case(record, config, target, overrides)
        predicted, measured = case["predicted_mfu"], measured_mfu(case)
        calibrated = case.get("calibrated_mfu")
        met = [
            f"{'yes' if have is not None and have >= want else 'no'}"
            for want, have in ((want_predicted, predicted), (want_measured, measured))
            if want is not None
        ]
        wanted = " / ".join(
            f"≥ {100 * w:.0f}%" if w else "–" for w in (want_predicted, want_measured)
        )
        chosen = case["chosen"]
        rows.append(
            f"| `{config}` | `{target}` | {', '.join(overrides) or '(defaults)'} | "
            f"{chosen['attention_impl']}, {chosen['remat_policy']} | {_pct(predicted)} | "
            f"{_pct(calibrated)} | {_pct(measured)} | {wanted} | {', '.join(met) or '–'} |"
        )
    return "\n".join(rows)


def _case(record: dict[str, Any], config: str, target: str, overrides: list[str]) -> dict:
    for case in record["cases"]:
        if (case["config"], case["target"], case["set"]) == (config, target, overrides):
            if "error" in case:
                raise ValueError(f"{config} on {target} {overrides}: {case['error']}")
            return case
    raise ValueError(f"the record has no case {config} on {target} {overrides}")


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"
