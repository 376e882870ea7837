"""Fit the kernel model's per-class factors on profiled GPU steps and check them on others —
docs/scaling.md ("The kernel model, calibrated").

    python -m benchmarks.kernel_calibration --out=docs/records/kernel_calibration.json \\
        --docs=docs/scaling.md

Every profile (a ``benchmarks.on_device --profile`` folder packed as ``.tgz`` and its row of
``on_device.jsonl``) is read again with :func:`benchmarks.device_profile.compare`, so its
predicted time per class is the current kernel model's on the device's own HLO. The factors
(:mod:`deepnet_jax.scale.calibration`) are fitted on :data:`FIT` and written as the family's
JSON beside that module; every profile, fitted and held out (:data:`HELD_OUT`), is then
predicted with them, calibrated ÷ measured per step, into the record.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from benchmarks import device_profile
from deepnet_jax.common import records
from deepnet_jax.scale import calibration, targets

_R = records.RECORDS_DIR
# (record folder, profile name, its row of the folder's on_device.jsonl)
FIT = (
    (os.path.join(_R, "h200_run2"), "wmt_cudnn_dots", 0),  # the current step, recomputing dots
    (os.path.join(_R, "h200"), "wmt_cudnn_full", 0),  # the same model recomputing everything
)
HELD_OUT = (
    (os.path.join(_R, "h200_run2"), "deepnet3b_dots", 1),  # another model: d 1024, 100L-100L
    (os.path.join(_R, "h200"), "wmt_cudnn_dots", 1),  # the step before the masks and loss changes
    (os.path.join(_R, "h200"), "deepnet3b_dots", 2),
)


def read(folder: str, name: str, row: int) -> dict[str, Any]:
    """One profile against the current kernel model: its row and ``device_profile.compare``."""
    with open(os.path.join(folder, "on_device.jsonl")) as f:
        line = [json.loads(x) for x in f if x.strip()][row]
    hlo, events = device_profile.read_profile(os.path.join(folder, f"{name}.profile.tgz"))
    chip = targets.parse(line["target"]).chip
    found = device_profile.compare(hlo, events, line["profile"]["steps"], chip, line["model_flops"])
    label = f"{os.path.relpath(folder, _R)}/{name}"
    return {"profile": label, "chip": chip.name, "row": line, **found}


def check(profile: dict[str, Any], cal: calibration.Calibration, role: str) -> dict[str, Any]:
    """Predicted (roofline sum) and calibrated step against the measured one."""
    classes = {
        k: (c["predicted_ms"] or 0.0) / 1e3
        for k, c in profile["classes"].items()
        if k != "unmatched"
    }
    measured = profile["row"]["step_s"] * 1e3
    calibrated = cal.seconds(classes) * 1e3
    return {
        "profile": profile["profile"],
        "role": role,
        "config": profile["row"]["config"],
        "overrides": profile["row"]["overrides"],
        "measured_step_ms": measured,
        "roofline_sum_ms": profile["predicted_ms"],
        "calibrated_ms": calibrated,
        "roofline_sum_over_measured": profile["predicted_ms"] / measured,
        "calibrated_over_measured": calibrated / measured,
    }


def table(result: dict[str, Any]) -> str:
    """The factors and the checks, as markdown."""
    f = result["calibration"]["class_factors"]
    out = ["| class | " + " | ".join(f) + " | unmatched u |", "|---|" + "---|" * (len(f) + 1)]
    out.append(
        "| η (measured ÷ roofline) | "
        + " | ".join(f"{v:.2f}" for v in f.values())
        + f" | {result['calibration']['unmatched']:.3f} |"
    )
    out += [
        "",
        "| profile | role | measured ms | roofline sum ms (÷ measured) | "
        "calibrated ms (÷ measured) |",
        "|---|---|---|---|---|",
    ]
    for c in result["checks"]:
        out.append(
            f"| {c['profile']} | {c['role']} | {c['measured_step_ms']:.1f} | "
            f"{c['roofline_sum_ms']:.1f} ({c['roofline_sum_over_measured']:.2f}) | "
            f"{c['calibrated_ms']:.1f} ({c['calibrated_over_measured']:.2f}) |"
        )
    return "\n".join(out)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="", help="write the record (JSON) here")
    parser.add_argument("--docs", default="", help="rewrite this markdown file's table")
    args = parser.parse_args(argv)
    fitted = [read(*p) for p in FIT]
    held = [read(*p) for p in HELD_OUT]
    factors, unmatched = calibration.fit([p["classes"] for p in fitted])
    head = records.header()  # taken before hopper.json is written: one commit for both files
    source = {**head, "fitted_on": [p["profile"] for p in fitted]}
    cal = calibration.Calibration("hopper", factors, unmatched, source)
    written = calibration.save(cal)
    checks = [check(p, cal, "fitted") for p in fitted] + [check(p, cal, "held out") for p in held]
    result = {"calibration": {"family": "hopper", "class_factors": factors, "unmatched": unmatched}}
    result["checks"] = checks
    print(table(result) + f"\n\nwrote {written}")
    if args.out:
        records.write(args.out, result, head)
    if args.docs:
        records.replace_block(args.docs, "kernel-calibration", table(result))


if __name__ == "__main__":
    main(sys.argv[1:])
