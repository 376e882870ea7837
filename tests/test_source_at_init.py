"""benchmarks.source_at_init: the arms' models, the KL it measures, its record and the table
generated from it in docs/main_job.md."""

from __future__ import annotations

import json
import os

import pytest

from benchmarks import source_at_init
from deepnet_jax.common import records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORD = os.path.join(ROOT, "docs", "records", "source_at_init.json")


def test_an_arm_is_the_main_job_with_its_overrides_at_the_small_vocabulary():
    default = source_at_init.model_of({})
    modern = source_at_init.model_of(source_at_init.ARMS["modern"])
    assert default.vocab_size == modern.vocab_size == source_at_init.VOCAB
    assert (default.positions, default.activation, default.norm) == (
        "sinusoidal",
        "relu",
        "layernorm",
    )
    assert (modern.positions, modern.activation, modern.ffn_dim, modern.norm) == (
        "rope",
        "swiglu",
        344,
        "rmsnorm",
    )
    assert modern.num_encoder_layers == default.num_encoder_layers
    assert modern.d_model == default.d_model


def _record() -> dict:
    with open(RECORD) as f:
        return json.load(f)


def test_the_docs_table_is_the_record():
    record = _record()
    assert record["commit"] and not record["commit"].endswith("+dirty")
    assert list(record["arms"]) == list(source_at_init.ARMS)
    for name, arm in record["arms"].items():
        assert arm["overrides"] == source_at_init.ARMS[name]
        assert len(arm["kl"]) == len(record["seeds"]) and min(arm["kl"]) > 0
    doc = os.path.join(ROOT, "docs", "main_job.md")
    assert records.block(doc, source_at_init.BLOCK) == source_at_init.table(record)


def test_the_recorded_kl_is_what_the_model_gives():
    """The default arm's first seed recomputed: float32 on the CPU, so it agrees to rounding
    (the record keeps 6 decimals of a figure near 3e-3: a relative 1e-3)."""
    record = _record()
    seed = record["seeds"][0]
    kl = source_at_init.source_kl(source_at_init.ARMS["default"], seed)
    assert kl == pytest.approx(record["arms"]["default"]["kl"][0], rel=1e-3)
