"""docs/scaling.md's table of the optimizer's gate ("The optimizer's gate"): each plan record of
a case planned with the gate as a ``lax.cond`` (commit 28e0a52) and as a select (055db37),
its predicted step, MFU, copies, optimizer time and planned peak.

    python -m benchmarks.gate_tables --docs=docs/scaling.md

writes the ``optimizer-gate`` block from :data:`CASES`' records, each made by
``python -m deepnet_jax.cli.plan … --record=<path>`` (the commands are in the records).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from deepnet_jax.common import records

BLOCK = "optimizer-gate"
GIB = 2**30
# (case, record of the lax.cond gate, record of the select)
CASES = (
    (
        "`deepnet_3b`, `h100-1`, `full`",
        "deepnet_3b_h100_full_branch",
        "deepnet_3b_h100_full_select",
    ),
    ("`deepnet_3b`, `v5p-8`, `dots`", "deepnet_3b_v5p8_branch", "deepnet_3b_v5p8_select"),
    ("`deepnet_1000l`, `v5p-8`", "deepnet_1000l_v5p8_branch", "deepnet_1000l_v5p8_select"),
    ("`deepnet_1000l`, `h100-8`", "deepnet_1000l_h1008_branch", "deepnet_1000l_h1008_select"),
)
RECORDS = "docs/records"


def _cells(plan: dict[str, Any]) -> list[str]:
    """Predicted ms, MFU, copies ms (the plain ``copy`` kernels' ms where the plan ran with
    ``--kernels``, which keeps each class's opcodes), copies' share, optimizer ms and the peak
    in GiB."""
    step, classes = plan["predicted_step_s"], plan["kernel_classes"]
    plain = plan.get("kernel_opcodes", {}).get("copies")
    copies = f"{classes['copies'] * 1e3:.2f}"
    if plain is not None:
        copies += f" ({plain.get('copy', 0.0) * 1e3:.2f})"
    return [
        f"{step * 1e3:.2f}",
        f"{plan['predicted_mfu']:.2%}",
        copies,
        f"{classes['copies'] / step:.2%}",
        f"{classes['optimizer'] * 1e3:.2f}",
        f"{plan['peak'] / GIB:.2f}",
    ]


def table(pairs: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> str:
    """The block: where and when the plans were made, then two rows per case (``lax.cond``,
    select) from the records' ``plan``."""
    runs = [r for _, branch, select in pairs for r in (branch, select)]
    lines = [
        records.made_line_of_runs(runs),
        "",
        "| case | gate | predicted ms | predicted MFU | copies ms (plain `copy`) "
        "| copies share | optimizer ms | peak GiB |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for case, branch, select in pairs:
        lines.append(f"| {case} | `lax.cond` | " + " | ".join(_cells(branch["plan"])) + " |")
        lines.append("| | select | " + " | ".join(_cells(select["plan"])) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> str:
    """Write the ``optimizer-gate`` block of ``--docs`` from :data:`CASES`; return it."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--docs", required=True, help=f"write the {BLOCK} block of this file")
    p.add_argument("--records", default=RECORDS, help="the folder holding the records")
    args = p.parse_args(argv)
    pairs = []
    for case, *names in CASES:
        loaded = []
        for name in names:
            path = os.path.join(args.records, f"{name}.json")
            if not os.path.isfile(path):
                p.error(f"--records: {path} is not there; allowed: a folder holding {name}.json")
            with open(path) as f:
                loaded.append(json.load(f))
        pairs.append((case, *loaded))
    text = table(pairs)
    records.replace_block(args.docs, BLOCK, text)
    return text


if __name__ == "__main__":
    main(sys.argv[1:])
