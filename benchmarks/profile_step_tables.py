"""docs/benchmarks.md's table of ``benchmarks/profile_step.py`` records ("Where a CPU step's
time goes"): one row per record (one ``--fields`` each), milliseconds per step per op class.

    python -m benchmarks.profile_step_tables --docs=docs/benchmarks.md [--runs=a.json,b.json]

(default ``--runs``: :data:`RUNS`, the commands in its docstring) writes the ``profile-step``
block.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from benchmarks import profile_step
from deepnet_jax.common import records

BLOCK = "profile-step"
# each from: GLIBC_TUNABLES=glibc.malloc.hugetlb=1 python -m benchmarks.profile_step
#     --fields=<fields> --out=<path>
RUNS = (
    "docs/records/profile_step_defaults.json",  # --fields= (the defaults)
    "docs/records/profile_step_remat_policy_none.json",  # --fields=remat_policy=none
    # --fields=fused_qkv=True,remat_policy=none,scan_layers=False
    "docs/records/profile_step_fused_qkv_True_remat_policy_none_scan_layers_False.json",
)
HEADINGS = {
    "dot_ynnpack": "YNNPACK dots",
    "dot_xla": "XLA dots",
    "copy_transpose": "copy/transpose",
    "dynamic_update_slice": "dyn.-update-slice",
    "dynamic_slice": "dyn.-slice",
    "zero_fill": "zero-fill",
    "elementwise": "element-wise",
}


def _summary(record: dict[str, Any]) -> dict[str, Any]:
    return next(r for r in record["rows"] if r["row"] == "summary")


def _fields(summary: dict[str, Any]) -> str:
    fields = ",".join(f"{k}={v}" for k, v in summary["fields"].items())
    return f"`{fields}`" if fields else "(the model's defaults: scan, remat `full`)"


def table(runs: list[dict[str, Any]]) -> str:
    """The ``profile-step`` block: where and when the runs were made, then per run its
    ``--fields`` and allocator settings, milliseconds per step of each class of
    :data:`profile_step.CLASSES`, all ops summed, and the wall milliseconds per step."""
    heads = [HEADINGS[c] for c in profile_step.CLASSES]
    lines = [
        records.made_line_of_runs(runs) + (" One run per row." if len(runs) > 1 else ""),
        "",
        "| `--fields` | allocator | " + " | ".join(heads) + " | all ops | wall |",
        "|---|---|" + "---:|" * (len(heads) + 2),
    ]
    for run in runs:
        s = _summary(run)
        ms = {r["class"]: r["ms_per_step"] for r in run["rows"] if r["row"] == "class"}
        env = ", ".join(f"`{k}={v}`" for k, v in s.get("malloc_env", {}).items()) or "plain"
        cells = [f"{ms[c]:.0f}" for c in profile_step.CLASSES]
        lines.append(
            f"| {_fields(s)} | {env} | "
            + " | ".join(cells)
            + f" | {s['ops_ms_per_step']:.0f} | {s['wall_s_per_step'] * 1e3:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    """Write the ``profile-step`` block of ``--docs`` from the ``--runs`` records; return it."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", default=",".join(RUNS), help="records, comma-separated")
    p.add_argument("--docs", required=True, help=f"write the {BLOCK} block of this file")
    args = p.parse_args(argv)
    paths = [path for path in args.runs.split(",") if path]
    if not paths:
        p.error("--runs: no record given; allowed are comma-separated record paths")
    runs = []
    for path in paths:
        if not os.path.isfile(path):
            p.error(f"--runs: {path} is not there; allowed are profile_step records (--out)")
        with open(path) as f:
            runs.append(json.load(f))
    text = table(runs)
    records.replace_block(args.docs, BLOCK, text)
    return text


if __name__ == "__main__":
    main(sys.argv[1:])
