"""docs/scaling.md's planner table over CPU meshes is its committed record
(benchmarks/plan_meshes.py, docs/records/plan_meshes.json). Reads JSON and markdown only."""

from __future__ import annotations

import json
import os

import pytest

from benchmarks import plan_meshes
from deepnet_jax.common import records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORD = os.path.join(ROOT, "docs", "records", "plan_meshes.json")


def _record() -> dict:
    with open(RECORD) as f:
        return json.load(f)


def test_the_table_is_the_record():
    doc = os.path.join(ROOT, "docs", "scaling.md")
    assert records.block(doc, plan_meshes.BLOCK) == plan_meshes.table(_record())


def test_the_record_has_every_default_row_from_a_clean_commit():
    record = _record()
    assert record["command"].startswith("python -m benchmarks.plan_meshes")
    assert all(record[k] for k in ("commit", "date", "machine", "jax"))
    assert "+dirty" not in record["commit"]
    wanted = [plan_meshes.parse_row(r) for r in plan_meshes.DEFAULT_ROWS]
    assert [{k: r[k] for k in ("devices", "mesh", "group", "layers")} for r in record["rows"]] == (
        wanted
    )
    for r in record["rows"]:  # the plan is of the row's mesh on its devices
        assert r["plan"]["target"] == f"cpu:{r['devices']}"
        assert [r["plan"]["mesh"][k] for k in ("data", "fsdp", "tensor")] == r["mesh"]


def test_rows_parse_and_become_planner_flags():
    row = plan_meshes.parse_row("8:1x8x1:-1:250")
    assert row == {"devices": 8, "mesh": [1, 8, 1], "group": -1, "layers": 250}
    assert plan_meshes.overrides(row) == [
        "--config.mesh.data=1",
        "--config.mesh.fsdp=8",
        "--config.mesh.tensor=1",
        "--config.model.scan_group_size=-1",
        "--config.model.num_encoder_layers=250",
        "--config.model.num_decoder_layers=250",
    ]
    for bad in ("8:1x8:0", "8:1,8,1:0", "eight:1x8x1:0", "8:1x8x1:0:250:1", "8:1x8x1"):
        with pytest.raises(ValueError, match="devices:DATAxFSDPxTENSOR"):
            plan_meshes.parse_row(bad)


def test_the_table_reads_gib_from_bytes():
    def row(item, temporaries):
        r = plan_meshes.parse_row(item)
        plan = {"params": 2**30, "opt_state": 2 * 2**30, "temporaries": temporaries}
        return {**r, "plan": {**plan, "peak": 3 * 2**30 + temporaries}}

    rows = [row(f"{item}:{g}", (4 if g == 0 else 1) * 2**29) for item in plan_meshes.TABLE_ROWS
            for g in (0, -1)]  # fmt: skip
    lines = plan_meshes.table({"rows": rows}).splitlines()
    assert len(lines) == 2 + len(plan_meshes.TABLE_ROWS)
    assert lines[2] == (
        "| 8 | (8, 1, 1) | 1.00 GiB | 2.00 GiB | 2.00 GiB | 0.50 GiB | 5.00 GiB | 3.50 GiB |"
    )
    with pytest.raises(KeyError):
        plan_meshes.table({"rows": rows[1:]})
