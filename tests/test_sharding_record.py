"""The sharding benchmark's committed records (benchmarks/sharding.py) and the table of
docs/benchmarks.md generated from the 1,000-layer one."""

from __future__ import annotations

import json
import os

import pytest

from benchmarks import sharding
from deepnet_jax.common import records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _record(name: str) -> dict:
    with open(os.path.join(ROOT, "docs", "records", name)) as f:
        return json.load(f)


def test_the_docs_table_is_the_record():
    doc = os.path.join(ROOT, "docs", "benchmarks.md")
    assert records.block(doc, "sharding-state") == sharding.table(_record("sharding.json"))


@pytest.mark.parametrize(
    "name, config, plans",
    [("sharding.json", "deepnet_1000l", 4), ("sharding_smoke.json", "default", 2)],
)
def test_each_record_holds_every_row(name, config, plans):
    record = _record(name)
    assert record["command"].startswith("python -m benchmarks.sharding")
    assert record["config"] == config and record["commit"] and record["date"]
    state = [r for r in record["rows"] if r["row"] == "state_bytes"]
    assert [r["fsdp_devices"] for r in state] == [1, 2, 4, 8]
    for r in state:  # the ratio is the bytes' own
        assert r["state_bytes"] == r["params_bytes"] + r["opt_state_bytes"]
        assert r["reduction_vs_1"] == round(state[0]["state_bytes"] / r["state_bytes"], 3)
    assert state[-1]["reduction_vs_1"] >= 7  # the benchmark's target at 8 devices
    assert sum(r["row"] == "plan" for r in record["rows"]) == plans
