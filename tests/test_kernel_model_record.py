"""The kernel model's committed record and the docs' tables generated from it
(benchmarks/kernel_model.py; deepnet_jax.common.records)."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from benchmarks import kernel_model, kernel_model_tables, kernel_targets
from deepnet_jax.common import records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORD = os.path.join(ROOT, "docs", "records", "kernel_model.json")
DOCS = os.path.join(ROOT, "docs", "scaling.md")


def test_the_docs_tables_are_the_records():
    with open(RECORD) as f:
        record = json.load(f)
    assert records.block(DOCS, "kernel-model") == kernel_model_tables.summary_table(record)
    assert records.block(DOCS, "kernel-classes") == kernel_model_tables.class_table(record)
    assert records.block(DOCS, "kernel-targets") == kernel_targets.table(record)


def test_a_measured_mfu_scales_the_predicted_one_by_the_step_times():
    """Same model FLOPs on the same devices: MFU is inversely proportional to the step time."""
    case = {"predicted_mfu": 0.3, "predicted_step_s": 0.1, "measured": {"ms_per_update": 150.0}}
    assert kernel_targets.measured_mfu(case) == pytest.approx(0.2)
    assert kernel_targets.measured_mfu({"predicted_mfu": 0.3, "predicted_step_s": 0.1}) is None
    with pytest.raises(ValueError, match="no case"):
        kernel_targets.table({"cases": []})


def test_the_record_says_where_it_and_its_measurements_come_from():
    with open(RECORD) as f:
        record = json.load(f)
    assert record["command"].startswith("python -m benchmarks.kernel_model")
    assert record["commit"] and record["date"] and record["jax"]
    assert "incomplete" not in record  # every case planned
    for case in record["cases"]:
        assert ("error" in case) != ("predicted_step_s" in case)
        if "measured" in case:  # read from a committed record, or copied from the docs
            _check_source(case)
        if "predicted_step_s" in case:
            classes = case["kernel_classes"]
            assert abs(sum(classes.values()) - case["predicted_step_s"]) < 1e-12


class _StoppedError(Exception):
    """A run stopped between cases (a SIGTERM, the session's end)."""


def test_an_interrupted_run_resumes_at_the_same_clean_commit(tmp_path, monkeypatch):
    """Planning writes the record after each case; started again at the same clean commit it
    keeps what was planned and plans the rest; at another commit, or dirty, it plans all."""
    out, planned, stop = str(tmp_path / "km.json"), [], {"at": "b"}
    cases = [{"name": n, "target": "h100-1", "set": []} for n in ("a", "b", "c")]

    def plan(case):
        if case["name"] == stop["at"]:
            raise _StoppedError
        planned.append(case["name"])
        return {"config": case["name"], "target": case["target"], "set": case["set"]}

    def run(commit):
        monkeypatch.setattr(records, "commit", lambda: commit)
        return kernel_model.plan_cases(cases, out)

    monkeypatch.setattr(kernel_model, "plan_case", plan)
    with pytest.raises(_StoppedError):
        run("1" * 40)
    with open(out) as f:
        assert json.load(f)["incomplete"] and planned == ["a"]
    stop["at"] = None
    record = run("1" * 40)
    assert planned == ["a", "b", "c"] and "incomplete" not in record
    assert [c["config"] for c in record["cases"]] == ["a", "b", "c"]
    for commit in ("2" * 40, "1" * 40 + "+dirty"):
        planned.clear()
        with pytest.raises(_StoppedError):
            stop["at"] = "c"
            run("1" * 40)  # an interrupted run at commit 1 ...
        planned.clear()
        stop["at"] = None
        run(commit)  # ... is not resumed at another commit or from a changed tree
        assert planned == ["a", "b", "c"]


def _check_source(case: dict) -> None:
    """A measurement is a committed record's line (its figure equal to that line's) or marked
    as copied from the docs (the H100 steps that kept no record)."""
    measured = case["measured"]
    source = measured["source"]
    if "no JSON record" in source:
        return
    path, line = source.split(",")[0], int(source.split("line ")[1].split()[0])
    with open(os.path.join(ROOT, path)) as f:
        row = [json.loads(text) for text in f if text.strip()][line]
    assert (row["config"], row["target"], row["overrides"]) == (
        case["config"],
        case["target"],
        case["set"],
    )
    assert measured["ms_per_update"] == row["step_s"] * 1e3


def test_blocks_are_replaced_between_their_markers(tmp_path):
    path = tmp_path / "page.md"
    path.write_text("intro\n<!-- generated: t -->\nold\n<!-- end: t -->\nafter\n")
    records.replace_block(str(path), "t", "| a |\n|---|")
    assert (
        path.read_text() == "intro\n<!-- generated: t -->\n| a |\n|---|\n<!-- end: t -->\nafter\n"
    )
    assert records.block(str(path), "t") == "| a |\n|---|"
    with pytest.raises(ValueError, match="needs one"):
        records.block(str(path), "missing")


def test_a_header_names_the_command_commit_and_machine():
    head = records.header(["/elsewhere/run.py", "--out=x.json"])
    assert head["command"] == "python /elsewhere/run.py --out=x.json"
    module = os.path.join(ROOT, "benchmarks", "kernel_model.py")
    assert records.header([module, "--out=x"])["command"] == (
        "python -m benchmarks.kernel_model --out=x"
    )
    assert head["commit"] is None or len(head["commit"].removesuffix("+dirty")) == 40
    assert "CPUs" in head["machine"] and head["date"].endswith("Z")


@pytest.mark.skipif(
    importlib.util.find_spec("jax_plugins.xla_cuda12") is None,
    reason='jax-cuda12-plugin is not installed (pip install -e ".[gpu-plan]")',
)
def test_a_measured_case_is_planned_with_its_stacks_scanned_as_it_ran():
    """The device measurements ran scanned stacks, so their cases plan with
    model.scan_unroll=1 whatever the config now sets (and say so); the others plan the config."""
    measured = dict(kernel_model.CASES[0])  # the default config on an H100, measured
    planned = kernel_model.plan_case(measured)
    assert planned["as_measured"] == ["model.scan_unroll=1"] and "error" not in planned
    assert planned["set"] == measured["set"]
