"""The memory planner on the 1,000-layer model over CPU meshes, flat and grouped: docs/scaling.md's
table "Will it fit?".

Run from the repository root (each row plans in its own process, ``deepnet_jax.cli.plan``)::

    python -m benchmarks.plan_meshes --out=docs/records/plan_meshes.json --docs=docs/scaling.md

A row is ``devices:DATAxFSDPxTENSOR:group[:layers]`` (``8:1x8x1:-1``):
``configs/deepnet_1000l.py`` planned on ``cpu:<devices>`` with that mesh,
``model.scan_group_size=<group>`` (0 flat, -1 the nested √L scan, k > 0 groups of k layers) and,
where given, ``<layers>`` layers per stack instead of the config's 500. Output: one JSON line
per row (the plan's figures, ``cli.plan``'s JSON line);
``--out`` writes them as a record (command, commit, date, machine, jax: ``common.records``);
``--docs`` writes block ``cpu-plan-meshes`` of that file from the record
(``tests/test_plan_meshes_record.py`` regenerates it). Every byte figure is deterministic for
a commit and a jax version; the compile times the plans carry are wall-clock and not shown.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from benchmarks.plan_targets import run_plan
from deepnet_jax.common import records

GIB = 2**30
BLOCK = "cpu-plan-meshes"
TABLE_ROWS = (
    "8:8x1x1",
    "8:2x4x1",
    "8:1x4x2",
    "8:1x8x1",
    "32:1x32x1",
    "64:4x16x1",
)
# the table's rows flat and grouped; the remainder-group and 250-layer rows the prose quotes
DEFAULT_ROWS = (
    *(f"{r}:{g}" for r in TABLE_ROWS for g in (0, -1)),
    "8:1x8x1:23",
    "8:1x8x1:0:250",
)


def parse_row(item: str) -> dict[str, Any]:
    """``devices:DATAxFSDPxTENSOR:group[:layers]`` as a dict; ValueError naming the form."""
    parts = item.split(":")
    try:
        mesh = [int(x) for x in parts[1].split("x")]
        row = {"devices": int(parts[0]), "mesh": mesh, "group": int(parts[2])}
        row["layers"] = int(parts[3]) if len(parts) == 4 else None
    except (IndexError, ValueError):
        row = None
    if row is None or len(parts) > 4 or len(mesh) != 3:
        raise ValueError(f"--rows: {item!r} is not devices:DATAxFSDPxTENSOR:group[:layers]")
    return row


def overrides(row: dict[str, Any]) -> list[str]:
    """The planner flags of ``row``."""
    data, fsdp, tensor = row["mesh"]
    out = [
        f"--config.mesh.data={data}",
        f"--config.mesh.fsdp={fsdp}",
        f"--config.mesh.tensor={tensor}",
        f"--config.model.scan_group_size={row['group']}",
    ]
    if row["layers"] is not None:
        out += [
            f"--config.model.num_encoder_layers={row['layers']}",
            f"--config.model.num_decoder_layers={row['layers']}",
        ]
    return out


def find(record: dict, devices: int, mesh: list[int], group: int, layers=None) -> dict:
    """The record's row of that plan; KeyError if it has none."""
    for r in record["rows"]:
        if (r["devices"], r["mesh"], r["group"], r["layers"]) == (devices, mesh, group, layers):
            return r
    raise KeyError(f"no row {devices}:{mesh}:{group}:{layers} in the record")


def table(record: dict) -> str:
    """Block ``cpu-plan-meshes``: per table row, the state per device and, flat and grouped,
    temporaries and peak (GiB = 2^30 bytes)."""
    lines = [
        "| devices | mesh (data, fsdp, tensor) | params | optimizer state | temporaries flat "
        "| temporaries grouped | peak flat | peak grouped |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for item in TABLE_ROWS:
        row = parse_row(f"{item}:0")
        flat = find(record, row["devices"], row["mesh"], 0)["plan"]
        grouped = find(record, row["devices"], row["mesh"], -1)["plan"]
        cells = [flat["params"], flat["opt_state"], flat["temporaries"], grouped["temporaries"]]
        cells += [flat["peak"], grouped["peak"]]
        mesh = ", ".join(map(str, row["mesh"]))
        gib = " | ".join(f"{c / GIB:.2f} GiB" for c in cells)
        lines.append(f"| {row['devices']} | ({mesh}) | {gib} |")
    return "\n".join(lines)


def measure(item: str) -> dict[str, Any]:
    """Plan one row in its own process; its dict with the plan's JSON under ``plan``."""
    row = parse_row(item)
    plan, error = run_plan("deepnet_1000l", f"cpu:{row['devices']}", overrides(row))
    if plan is None:
        raise SystemExit(f"{item}: the planner failed: {error}")
    return {**row, "plan": plan}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default=",".join(DEFAULT_ROWS))
    parser.add_argument("--out", help="write the rows as a JSON record here")
    parser.add_argument("--docs", help=f"write block {BLOCK} of this file from the record")
    args = parser.parse_args(argv)
    items = [s.strip() for s in args.rows.split(",") if s.strip()]
    for item in items:
        parse_row(item)  # every error before planning
    record: dict[str, Any] = {**records.header(), "rows": []}
    for item in items:
        record["rows"].append(measure(item))
        print(json.dumps(record["rows"][-1]), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(record, f, indent=1)
            f.write("\n")
    if args.docs:
        records.replace_block(args.docs, BLOCK, table(record))
    return record


if __name__ == "__main__":
    main(sys.argv[1:])
