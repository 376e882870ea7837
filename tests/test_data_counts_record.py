"""The corpora's counts (benchmarks/data_counts.py, docs/records/data_counts.json):
docs/main_job.md's table of which set each figure is on is the record, and README's split
sizes are its counts. Reads JSON and markdown only; the record is made on the prepared corpora."""

from __future__ import annotations

import json
import os
import re

import pytest

from benchmarks import data_counts
from deepnet_jax.common import records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORD = os.path.join(ROOT, "docs", "records", "data_counts.json")
needs_record = pytest.mark.skipif(
    not os.path.exists(RECORD), reason="docs/records/data_counts.json is not committed yet"
)


def _record() -> dict:
    with open(RECORD) as f:
        return json.load(f)


@needs_record
def test_the_main_job_sets_table_and_its_prose_are_the_record():
    record = _record()
    doc = os.path.join(ROOT, "docs", "main_job.md")
    assert records.block(doc, data_counts.BLOCK) == data_counts.table(record)
    test = record["main_job"]["test"]
    with open(doc) as f:
        prose = " ".join(f.read().split())
    assert f"{test['seen_short']} of the {test['seen_sources']} test sources" in prose


@needs_record
def test_readme_split_sizes_are_the_record_from_a_clean_commit():
    record = _record()
    assert record["command"].startswith("python -m benchmarks.data_counts")
    assert record["commit"] and "+dirty" not in record["commit"]
    assert set(record["splits"]) == set(data_counts.DATASETS)
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    for dataset, sizes in record["splits"].items():
        name, _, pair = dataset.partition(":")
        row = next(line for line in readme.splitlines() if line.startswith(f"| `{name}` |"))
        counts = " / ".join(f"{sizes[s]:,}" for s in data_counts.SPLITS)
        wanted = rf"{pair}\s+{re.escape(counts)}" if pair else re.escape(counts)
        assert re.search(wanted, row), (dataset, counts)
    plays = next(line for line in readme.splitlines() if line.startswith("| `shakespeare` |"))
    assert f"the {record['shakespeare_plays']} plays of" in plays


def test_the_table_follows_the_counts():
    """Rendered from made-up counts: every figure is the record's, shares to 0.1%."""
    side = {"pairs": 1000, "truncated_sources": 7, "seen_sources": 25, "seen_short": 20}
    record = {
        "main_job": {
            "max_len": 32,
            "test": {**side, "loss_truncated": 9},
            "validation": {**side, "pairs": 2000, "seen_sources": 50, "loss_truncated": 11},
            "validation_bleu": {**side, "pairs": 300, "seen_sources": 4},
        }
    }
    text = data_counts.table(record)
    assert text.splitlines()[:2] == ["| figure | set |", "|---|---|"]
    for figure in ("all 1,000 test pairs; the 9 pairs", "longer than 32 tokens", "first 31"):
        assert figure in text
    assert "the 975 test sentences" in text and "(25 test sources, 2.5%, do" in text
    assert "all 2,000 validation pairs, the 11 long ones" in text
    assert "on the 296 of them" in text and "50 validation sources, 2.5%, occur" in text
