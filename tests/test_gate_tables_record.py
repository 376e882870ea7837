"""The optimizer's gate table (benchmarks/gate_tables.py): rendered from plan records, two rows
a case, and docs/scaling.md's block regenerated from the committed records. Reads JSON and
markdown only."""

from __future__ import annotations

import json
import os

import pytest

from benchmarks import gate_tables as tables
from deepnet_jax.common import records
from deepnet_jax.experiments import docs_tables

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = "docs/scaling.md"


def _record(step_s: float, copies_s: float, peak: int, opcodes: bool) -> dict:
    plan = {
        "predicted_step_s": step_s,
        "predicted_mfu": 0.25,
        "kernel_classes": {"copies": copies_s, "optimizer": 0.002},
        "peak": peak,
    }
    if opcodes:
        plan["kernel_opcodes"] = {"copies": {"fusion": copies_s - 0.001, "copy": 0.001}}
    head = {
        "command": "python -m deepnet_jax.cli.plan --record=r.json",
        "commit": "0123456789abcdef0123456789abcdef01234567",
        "date": "2026-12-01T00:00:00Z",
        "machine": "Linux x86_64, 2 CPUs",
        "jax": "0.10.2",
    }
    return {**head, "plan": plan}


def test_two_rows_a_case_with_the_plain_copies_where_the_plan_kept_them():
    pairs = [
        ("a", _record(0.4, 0.02, 3 * 2**30, True), _record(0.38, 0.01, 3 * 2**30, True)),
        ("b", _record(0.9, 0.02, 2**30, False), _record(0.9, 0.02, 2**31, False)),
    ]
    lines = tables.table(pairs).splitlines()
    assert "commit `0123456`" in lines[0] and len(lines) == 4 + 4
    assert lines[4] == "| a | `lax.cond` | 400.00 | 25.00% | 20.00 (1.00) | 5.00% | 2.00 | 3.00 |"
    assert lines[5].startswith("| | select | 380.00 |") and "| 10.00 (1.00) | 2.63% |" in lines[5]
    assert lines[7] == "| | select | 900.00 | 25.00% | 20.00 | 2.22% | 2.00 | 2.00 |"


def test_a_missing_record_is_named(tmp_path, capsys):
    doc = tmp_path / "page.md"
    doc.write_text(f"<!-- generated: {tables.BLOCK} -->\n<!-- end: {tables.BLOCK} -->\n")
    with pytest.raises(SystemExit):
        tables.main([f"--docs={doc}", f"--records={tmp_path}"])
    assert "--records: " in capsys.readouterr().err


def test_the_docs_block_is_the_committed_records():
    pairs = []
    for case, *names in tables.CASES:
        loaded = []
        for name in names:
            with open(os.path.join(ROOT, tables.RECORDS, f"{name}.json")) as f:
                loaded.append(json.load(f))
        pairs.append((case, *loaded))
    assert all(
        r["command"].startswith("python -m deepnet_jax.cli.plan") for _, *p in pairs for r in p
    )
    assert records.block(os.path.join(ROOT, DOC), tables.BLOCK) == tables.table(pairs)
    assert f"--docs={DOC}" in docs_tables.ELSEWHERE[(DOC, tables.BLOCK)]
