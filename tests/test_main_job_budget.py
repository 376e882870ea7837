"""The main job's budget arms (benchmarks/main_job_budget.py): their committed records and the
table of docs/main_job.md generated from them."""

from __future__ import annotations

import json
import os

import pytest

from benchmarks import main_job_budget as budget
from deepnet_jax.common import records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPORT = (
    "BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.5.1 = 18.99 "
    "52.1/25.0/13.5/7.6 (BP = 0.890 ratio = 0.896 hyp_len = 30000 ref_len = 33480)"
)


def test_the_brevity_penalty_is_read_from_sacrebleus_line():
    assert budget.brevity_penalty(REPORT) == 0.890
    with pytest.raises(ValueError, match="no brevity penalty"):
        budget.brevity_penalty("BLEU = 18.99")


def test_a_row_per_arm_with_its_overrides():
    run = {
        "test_bleu": 18.99,
        "test_chrf": 40.126,
        "test_bleu_report": REPORT,
        "test_distinct_hypotheses": 0.981,
        "test_source_sensitivity": 2.554,
        "wall_seconds": 923.4,
        "median_step_s": 0.3214,
    }
    record = {"overrides": ["--config.total_steps=2000", "--config.eval_every=500"], "runs": [run]}
    lines = budget.table({"budget-2000": record}).splitlines()
    assert len(lines) == 3
    assert lines[2] == (
        "| budget-2000 | `total_steps=2000`, `eval_every=500` | 18.99 | 40.13 | 0.890 | 98% "
        "| 2.55 nats | 923 s | 0.321 |"
    )


def test_each_arm_is_a_change_of_the_shipped_job():
    """Every override names a field of the default config, set to a value it does not have."""
    from deepnet_jax.configs.default import get_config

    config = get_config()
    for arm, overrides in budget.ARMS.items():
        for override in overrides:
            path, _, value = override.removeprefix("--config.").partition("=")
            node = config
            for part in path.split("."):
                node = node[part]
            assert str(node).replace(" ", "") != value, (arm, override)


def _committed() -> dict[str, dict]:
    out = {}
    for arm in budget.ARMS:
        path = os.path.join(ROOT, budget.record_path(arm))
        if os.path.exists(path):
            with open(path) as f:
                out[arm] = json.load(f)
    return out


def test_the_committed_records_are_their_arms_and_the_docs_table_is_them():
    arms = _committed()
    assert list(arms) == list(budget.ARMS)  # every arm has its record
    for arm, record in arms.items():
        overrides = budget.ARMS[arm]
        assert record["arm"] == (arm if overrides else None) and record["overrides"] == overrides
        assert record["commit"] and not record["commit"].endswith("+dirty")
        assert record["concurrent_runs"] == 1  # alone: the wall-clock is the job's own
        (run,) = record["runs"]
        steps = int(overrides[0].partition("=")[2]) if overrides else 1800  # total_steps
        assert run["seed"] == 0 and run["steps"] == steps and run["test_sentences"] == 1763
        assert run["test_bleu"] > 10 and run["test_source_sensitivity"] > 1  # it translates
    doc = os.path.join(ROOT, "docs", "main_job.md")
    assert records.block(doc, budget.BLOCK) == budget.table(arms)
