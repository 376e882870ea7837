"""The compile-vs-depth benchmark's committed record (benchmarks/compile_vs_depth.py) and the
tables of docs/benchmarks.md generated from it. Reads JSON and markdown only."""

from __future__ import annotations

import json
import os

from benchmarks import compile_vs_depth as bench
from benchmarks import compile_vs_depth_report as report
from deepnet_jax.common import records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "benchmarks.md")
ROWS = "scan:6,scan:100,scan:1000,unroll:6,unroll:12"


def _record() -> dict:
    with open(os.path.join(ROOT, "docs", "records", "compile_vs_depth.json")) as f:
        return json.load(f)


def test_the_docs_tables_are_the_record():
    assert records.block(DOC, "compile-vs-depth") == report.table(_record())


def test_the_record_holds_every_row_and_its_summary():
    record = _record()
    assert record["command"].startswith("python -m benchmarks.compile_vs_depth")
    assert f"--rows={ROWS}" in record["command"]
    assert all(record[k] for k in ("commit", "date", "machine", "jax"))
    wanted = bench.parse_rows(ROWS, bench.DEFAULT_POLICIES, 100)
    got = [bench.Row(r["layout"], r["depth"], r["remat_policy"]) for r in record["rows"]]
    assert got == wanted
    setup = record["setup"]
    s = record["summary"]
    activation = 2 * setup["batch_size"] * setup["seq_len"] * setup["d_model"] * bench.F32_BYTES
    assert s["limit_activation_bytes"] == activation
    # the summary is its rows' (the per-layer gradient bytes are the one input not in a row)
    assert s == report.summary(record["rows"], s["limit_layer_grad_bytes"], activation)


def test_the_overview_row_quotes_the_record():
    s = _record()["summary"]
    with open(DOC) as f:
        row = next(line for line in f if line.startswith("| `compile_vs_depth.py` |"))
    assert f"{s['compile_ratio_scan1000_over_scan6']:.2f}" in row
    assert f"{s['temp_slope_bytes_per_layer']:,.0f} B/layer" in row
    assert "docs/records/compile_vs_depth.json" in row


GROUPED_ROWS = "scan:64,scan:256,scan:1024,group:64,group:256,group:1024"
SCALING = os.path.join(ROOT, "docs", "scaling.md")


def _grouped_record() -> dict:
    with open(os.path.join(ROOT, "docs", "records", "compile_vs_depth_grouped.json")) as f:
        return json.load(f)


def test_scalings_grouped_table_is_its_record():
    record = _grouped_record()
    assert f"--rows={GROUPED_ROWS}" in record["command"]
    assert "--block=grouped-vs-flat" in record["command"]
    assert all(record[k] for k in ("commit", "date", "machine", "jax"))
    assert "+dirty" not in record["commit"]
    got = [bench.Row(r["layout"], r["depth"], r["remat_policy"]) for r in record["rows"]]
    assert got == bench.parse_rows(GROUPED_ROWS, "", 100)
    assert record["summary"]["temp_growth"] == report.grouped_vs_flat(record["rows"])["temp_growth"]
    assert records.block(SCALING, "grouped-vs-flat") == report.grouped_table(record)


def test_grouped_table_pairs_depths_and_skips_a_lone_layout():
    def row(layout, depth, temp, k=0):
        return {"layout": layout, "depth": depth, "remat_policy": "full", "temp_bytes": temp,
                "group_size": k, "step_s_median": 1.0, "compile_s": 1.0}  # fmt: skip

    rows = [row("scan", 4, 400), row("scan", 16, 1600), row("group", 4, 300, 2)]
    rows += [row("group", 16, 800, 4), row("group", 64, 1000, 8)]  # 64: no flat row
    record = {"rows": rows, "summary": report.summary(rows, 0, 0)}
    lines = report.grouped_table(record).splitlines()
    assert lines[2] == "| 4 | 2 | 400 (0.0 MiB) | 300 (0.0 MiB) | 0.75 |"
    assert lines[3] == "| 16 | 4 | 1,600 (0.0 MiB) | 800 (0.0 MiB) | 0.50 |"
    assert lines[-1] == "| 4 → 16 | ×4.00 | ×2.67 |"
    assert not any(line.startswith("| 64 ") for line in lines)
