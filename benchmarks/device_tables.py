"""docs/scaling.md's tables of the steps measured on a lent GPU, generated from their records:
per run (:data:`RUNS`: ``docs/records/h200/``, the first H200 run; ``docs/records/h200_run2/``,
the second) the steps as ``benchmarks.on_device`` measured them and the profiled steps' time
per kernel class against the kernel model (``benchmarks.device_profile``); the steps both H200
runs measured, side by side; and the H100's rerun (``docs/records/h100/``).

    python -m benchmarks.device_tables --docs=docs/scaling.md

``tests/test_device_profile.py`` regenerates them from the committed records.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from deepnet_jax.common import records
from deepnet_jax.scale import kernels


@dataclasses.dataclass(frozen=True)
class Run:
    """One session's records: ``folder`` (from the repository root) holds ``on_device.jsonl``
    and ``<name>.profile.json`` for each of ``profiles``; its blocks are ``<prefix>-steps``
    and ``<prefix>-classes``."""

    folder: str
    profiles: tuple[str, ...]
    prefix: str


_H200 = os.path.join(records.RECORDS_DIR, "h200")
RUNS = (
    Run(_H200, ("wmt_cudnn_dots", "wmt_cudnn_full", "deepnet3b_dots"), "h200"),
    Run(f"{_H200}_run2", ("wmt_cudnn_dots", "deepnet3b_dots"), "h200-run2"),
)
COMPARED = "h200-runs-compared"  # the steps of RUNS[0] that RUNS[1] measured again
H100 = os.path.join(records.RECORDS_DIR, "h100", "on_device.jsonl")  # the H100's rerun
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


def load_run(run: Run, root: str = "") -> tuple[list[dict], list[dict]]:
    """The run's measured steps (``on_device.jsonl``) and its profiles' records, ``root`` the
    repository root ("": the working directory)."""
    folder = os.path.join(root, run.folder)
    rows = read_rows(os.path.join(folder, "on_device.jsonl"))
    profiles = []
    for name in run.profiles:
        with open(os.path.join(folder, f"{name}.profile.json")) as f:
            profiles.append(json.load(f))
    return rows, profiles


def compared_table(first: list[dict], second: list[dict]) -> str:
    """A row per (config, overrides) measured in both runs, in the first run's order: ms per
    update in each, second ÷ first, and MFU in each (the same model FLOPs in both)."""
    later = {}
    for r in second:
        later.setdefault((r["config"], tuple(r["overrides"])), r)
    out = [
        "| config | set | remat | first run: ms/update | second run: ms/update | second ÷ first "
        "| MFU first → second |",
        "|---|---|---|---|---|---|---|",
    ]
    for a in first:
        b = later.get((a["config"], tuple(a["overrides"])))
        if b is None:
            continue
        remat = " → ".join(dict.fromkeys([a["remat_policy"], b["remat_policy"]]))
        out.append(
            f"| {a['config']} | {_setting(a)} | {remat} | {a['step_s'] * 1e3:.1f} | "
            f"{b['step_s'] * 1e3:.1f} | {b['step_s'] / a['step_s']:.3f} | "
            f"{a['mfu']:.1%} → {b['mfu']:.1%} |"
        )
    return "\n".join(out)


def blocks(root: str = "") -> dict[str, str]:
    """Every block's text by its name, from the records under ``root``."""
    out = {}
    loaded = [load_run(run, root) for run in RUNS]
    for run, (rows, profiles) in zip(RUNS, loaded, strict=True):
        out[f"{run.prefix}-steps"] = steps_table(rows)
        out[f"{run.prefix}-classes"] = classes_table(profiles)
    out[COMPARED] = compared_table(loaded[0][0], loaded[1][0])
    out["h100-steps"] = steps_table(read_rows(os.path.join(root, H100)))
    return out


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", default="", help="a markdown file whose tables to rewrite")
    args = parser.parse_args(argv)
    tables = blocks()
    for name, text in tables.items():
        if args.docs:
            records.replace_block(args.docs, name, text)
        print(f"{name}:\n{text}\n")


if __name__ == "__main__":
    main(sys.argv[1:])
