"""The dropout-masks benchmark's committed record (benchmarks/dropout_masks.py) and the tables
of docs/benchmarks.md generated from it. Reads JSON and markdown only."""

from __future__ import annotations

import json
import math
import os

from benchmarks import dropout_masks as bench
from benchmarks import step_efficiency
from deepnet_jax.common import records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "benchmarks.md")


def _record() -> dict:
    with open(os.path.join(ROOT, "docs", "records", "dropout_masks.json")) as f:
        return json.load(f)


def test_the_docs_tables_are_the_record():
    assert records.block(DOC, "dropout-masks") == bench.table(_record())


def test_the_record_holds_every_row():
    record = _record()
    assert record["command"].startswith("python -m benchmarks.dropout_masks")
    assert all(record[k] for k in ("commit", "date", "machine", "jax"))
    assert record["setup"]["model"] == step_efficiency.SIZES["full"]
    rows = record["rows"]
    masks = [r for r in rows if r["row"] == "masks"]
    assert [r["generator"] for r in masks] == list(bench.GENERATORS)
    hash_s = masks[0]["median_s"]
    for r in masks:  # the ratios are the medians' own
        assert len(r["rounds_s"]) == record["setup"]["rounds"]
        assert r["vs_hash"] == round(r["median_s"] / hash_s, 3)
    step = [r for r in rows if r["row"] == "step"]
    assert [r["variant"] for r in step] == list(bench.STEP_VARIANTS)
    for r in step:
        assert r["dropout_s"] == round(r["median_step_s"] - step[0]["median_step_s"], 5)


def test_the_mask_count_is_the_models():
    """12 layers × (attention probabilities, FFN activation, two sublayer outputs) and the
    embeddings' mask, at batch 8 × 128: the count the docs quote."""
    shapes = bench.mask_shapes(step_efficiency.SIZES["full"], 8, 128)
    per_layer = 8 * 4 * 128 * 128 + 8 * 128 * 1024 + 2 * 8 * 128 * 256
    assert len(shapes) == 1 + 4 * 12
    assert sum(math.prod(s) for s in shapes) == 12 * per_layer + 8 * 128 * 256
    masks = _record()["masks"]
    assert masks["elements"] == 12 * per_layer + 8 * 128 * 256
    assert masks["elements_per_layer"] == per_layer and masks["count"] == len(shapes)
