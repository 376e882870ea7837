"""docs/scaling.md's tables of the steps measured on a lent GPU, generated from their records
(``docs/records/h200/``, ``docs/records/h100/``): the steps as ``benchmarks.on_device`` measured
them, and the profiled steps' time per kernel class against the kernel model
(``benchmarks.device_profile``).

    python -m benchmarks.device_tables --docs=docs/scaling.md

``tests/test_device_profile.py`` regenerates them from the committed records.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from deepnet_jax.common import records
from deepnet_jax.scale import kernels

FOLDER = os.path.join(records.RECORDS_DIR, "h200")
H100 = os.path.join(records.RECORDS_DIR, "h100", "on_device.jsonl")  # the H100's rerun
PROFILES = ("wmt_cudnn_dots", "wmt_cudnn_full", "deepnet3b_dots")  # <name>.profile.json
GIB = 2**30


def _setting(row: dict) -> str:
    """The row's overrides, shortened to what differs from the config."""
    short = [s.replace("model.", "") for s in row["overrides"]]
    return ", ".join(short) or "(defaults: attention and remat auto)"


def steps_table(rows: list[dict]) -> str:
    """One row per measured step: setting, remat, ms/update, tokens/s, MFU, peaks, losses."""
    out = [
        "| config | set | remat | batch | ms/update | tokens/s | MFU | planned peak = "
        "allocator peak | compile | loss first → last |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        peaks = f"{r['planned_peak'] / GIB:.2f} / {r['allocator_peak'] / GIB:.2f} GiB"
        out.append(
            f"| {r['config']} | {_setting(r)} | {r['remat_policy']} | "
            f"{r['batch_shape'][0]}×{r['batch_shape'][1]} | {r['step_s'] * 1e3:.1f} | "
            f"{r['tokens_per_s']:,.0f} | {r['mfu']:.1%} | {peaks} | {r['compile_s']:.0f} s | "
            f"{r['first_loss']:.3f} → {r['last_loss']:.3f} |"
        )
    return "\n".join(out)


def classes_table(profiles: list[dict]) -> str:
    """Per kernel class, measured and predicted milliseconds of each profiled step."""
    heads = [f"{p['config']} {p['overrides'][-1].split('=')[-1]}" for p in profiles]
    out = [
        "| class | " + " | ".join(f"{h}: measured ms | predicted | ratio" for h in heads) + " |",
        "|---|" + "---|---|---|" * len(profiles),
    ]
    kinds = [*kernels.CLASSES, "unmatched"]
    for kind in kinds:
        cells = []
        for p in profiles:
            c = p["classes"].get(kind, {"measured_ms": 0.0, "predicted_ms": None})
            m, pr = c["measured_ms"], c["predicted_ms"]
            ratio = f"{pr / m:.2f}" if pr and m else "–"
            cells.append(f"{m:.1f} | {'–' if pr is None else f'{pr:.1f}'} | {ratio}")
        out.append(f"| {kind} | " + " | ".join(cells) + " |")
    totals = [
        f"**{p['measured_kernel_ms']:.1f}** | **{p['predicted_ms']:.1f}** | "
        f"**{p['predicted_ms'] / p['measured_kernel_ms']:.2f}**"
        for p in profiles
    ]
    out.append("| all kernels | " + " | ".join(totals) + " |")
    return "\n".join(out)


def read_rows(path: str) -> list[dict]:
    """``benchmarks.on_device``'s JSON lines."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def load_from(folder: str = FOLDER) -> tuple[list[dict], list[dict]]:
    """The measured steps (``on_device.jsonl``) and the profiles' records in ``folder``."""
    rows = read_rows(os.path.join(folder, "on_device.jsonl"))
    profiles = []
    for name in PROFILES:
        with open(os.path.join(folder, f"{name}.profile.json")) as f:
            profiles.append(json.load(f))
    return rows, profiles


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", default="", help="a markdown file whose tables to rewrite")
    args = parser.parse_args(argv)
    rows, profiles = load_from()
    steps, classes = steps_table(rows), classes_table(profiles)
    h100 = steps_table(read_rows(H100))
    if args.docs:
        records.replace_block(args.docs, "h200-steps", steps)
        records.replace_block(args.docs, "h200-classes", classes)
        records.replace_block(args.docs, "h100-steps", h100)
    print(steps + "\n\n" + classes + "\n\n" + h100)


if __name__ == "__main__":
    main(sys.argv[1:])
