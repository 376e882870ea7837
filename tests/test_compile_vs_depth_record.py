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
