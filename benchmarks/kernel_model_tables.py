"""The kernel model's tables in docs/scaling.md, made from its record
(``benchmarks.kernel_model``): a row per case, and the profiled case's time per kernel class."""

from __future__ import annotations

from typing import Any

from deepnet_jax.scale import kernels


def summary_table(record: dict[str, Any]) -> str:
    """A row per case: predicted (roofline sum) and calibrated step and MFU, the roofline
    bound, measured and the ratios."""
    rows = [
        "| config | target | set | attention, remat | predicted ms | predicted MFU | "
        "calibrated ms | calibrated MFU | roofline MFU bound | measured ms | "
        "predicted ÷ measured | calibrated ÷ measured |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for case in record["cases"]:
        measured = case.get("measured", {}).get("ms_per_update")
        if "error" in case:
            rows.append(
                f"| {case['config']} | {case['target']} | {_set(case)} | – | "
                f"not planned: {case['error'][:80]} | – | – | – | – | {measured or '–'} | – | – |"
            )
            continue
        ms = case["predicted_step_s"] * 1e3
        cal = case.get("calibrated_step_s")
        chosen = case["chosen"]
        policy = chosen["remat_policy"] + (
            f" (group {chosen['scan_group_size']})" if chosen["scan_group_size"] else ""
        )
        calibrated = f"{cal * 1e3:.1f} | {100 * case['calibrated_mfu']:.1f}%" if cal else "– | –"
        ratios = (
            f"{ms / measured:.2f} | " + (f"{cal * 1e3 / measured:.2f}" if cal else "–")
            if measured
            else ""
        )
        rows.append(
            f"| {case['config']} | {case['target']} | {_set(case)} | "
            f"{chosen['attention_impl']}, {policy} | {ms:.1f} | "
            f"{100 * case['predicted_mfu']:.1f}% | {calibrated} | "
            f"{100 * case['roofline_mfu_bound']:.0f}% | "
            + (f"{measured:.1f} | {ratios} |" if measured else "– | – | – |")
        )
    return "\n".join(rows)


def _set(case: dict[str, Any]) -> str:
    """The case's overrides (the trainer's defaults where it has none)."""
    return ", ".join(case["set"]) or "(defaults: attention and remat auto)"


def class_table(record: dict[str, Any]) -> str:
    """The profiled case's time per kernel class: predicted, measured (profile) and ratio."""
    case = next(c for c in record["cases"] if "profile_ms" in c.get("measured", {}))
    profile = case["measured"]["profile_ms"]
    rows = [
        "| class | predicted ms | share | profile ms | predicted ÷ profile |",
        "|---|---|---|---|---|",
    ]
    total = case["predicted_step_s"]
    for kind in kernels.CLASSES:
        seconds = case["kernel_classes"][kind]
        measured = profile.get(kind)
        ratio = f"{seconds * 1e3 / measured:.2f}" if measured else "–"
        rows.append(
            f"| {kind} | {seconds * 1e3:.1f} | {100 * seconds / total:.1f}% | "
            f"{measured if measured is not None else '–'} | {ratio} |"
        )
    return "\n".join(rows)
