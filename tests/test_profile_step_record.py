"""The CPU profile's table (benchmarks/profile_step_tables.py): rendered from profile_step
records, written by ``--docs``, and docs/benchmarks.md's block regenerated from the committed
records once they are there (until then the entry is pending in experiments.docs_tables).
Reads JSON and markdown only."""

from __future__ import annotations

import json
import os

import pytest

from benchmarks import profile_step
from benchmarks import profile_step_tables as tables
from deepnet_jax.common import records
from deepnet_jax.experiments import docs_tables

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = "docs/benchmarks.md"


def _record(fields: dict, ms: list[float], env: dict) -> dict:
    """A record as ``profile_step --out`` writes it (one op row, the class rows, the summary)."""
    rows = [{"row": "op", "op": "ynn_fusion.1", "class": "dot_ynnpack", "ms_per_step": ms[0]}]
    rows += [
        {"row": "class", "class": c, "ms_per_step": m}
        for c, m in zip(profile_step.CLASSES, ms, strict=True)
    ]
    rows.append(
        {
            "row": "summary",
            "ops_ms_per_step": sum(ms),
            "ms_per_step_by_thread": {"tf_XLAEigen#0": sum(ms) / 2},
            "wall_s_per_step": 0.9571,
            "fields": fields,
            "model": {"layers": 12},
            "malloc_env": env,
        }
    )
    head = {
        "command": "python -m benchmarks.profile_step --out=r.json",
        "commit": "0123456789abcdef0123456789abcdef01234567",
        "date": "2026-11-29T12:00:00Z",
        "machine": "Linux x86_64, 2 CPUs",
        "jax": "0.10.2",
    }
    return {**head, "rows": rows}


def test_one_row_per_record_with_its_classes_in_order():
    hugetlb = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
    runs = [
        _record({}, [600.4, 67, 105, 11, 23, 17, 146], hugetlb),
        _record({"remat_policy": "none"}, [417, 57, 85, 54, 28, 38, 114.6], {}),
    ]
    text = tables.table(runs)
    assert "in 2 runs" in text and "commit `0123456`" in text and "One run per row." in text
    lines = text.splitlines()
    assert lines[2].count("|") == len(profile_step.CLASSES) + 5  # fields, allocator, …, wall
    assert lines[4] == (
        "| (the model's defaults: scan, remat `full`) | `GLIBC_TUNABLES=glibc.malloc.hugetlb=1` "
        "| 600 | 67 | 105 | 11 | 23 | 17 | 146 | 969 | 957 |"
    )
    assert lines[5].startswith("| `remat_policy=none` | plain | 417 | 57 |")
    assert lines[5].endswith("| 115 | 794 | 957 |")  # 114.6 and 793.6 ms, rounded


def test_docs_writes_the_block_and_names_a_missing_record(tmp_path, capsys):
    doc = tmp_path / "page.md"
    doc.write_text(f"a\n<!-- generated: {tables.BLOCK} -->\nold\n<!-- end: {tables.BLOCK} -->\n")
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_record({}, [1, 2, 3, 4, 5, 6, 7], {})))
    text = tables.main([f"--runs={path}", f"--docs={doc}"])
    assert records.block(str(doc), tables.BLOCK) == text and "| 28 | 957 |" in text
    with pytest.raises(SystemExit):
        tables.main([f"--runs={tmp_path / 'absent.json'}", f"--docs={doc}"])
    assert "--runs: " in capsys.readouterr().err


def test_the_docs_block_is_the_committed_records():
    paths = [os.path.join(ROOT, p) for p in tables.RUNS]
    if not all(os.path.isfile(p) for p in paths):
        pytest.skip("the profile_step records are not committed yet (docs_tables.pending)")
    runs = []
    for path in paths:
        with open(path) as f:
            runs.append(json.load(f))
    assert all(r["command"].startswith("python -m benchmarks.profile_step") for r in runs)
    assert records.block(os.path.join(ROOT, DOC), tables.BLOCK) == tables.table(runs)


def test_docs_tables_awaits_the_first_record():
    key = (DOC, tables.BLOCK)
    assert docs_tables.RECORD_FILES[key] == tables.RUNS[0]
    assert f"--docs={DOC}" in docs_tables.ELSEWHERE[key]
