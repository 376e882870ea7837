"""docs/scaling.md's tables of every shipped config planned on TPU slices and GPU nodes are
their committed record (benchmarks/plan_targets.py, docs/records/plan_targets.json). Reads
JSON and markdown only; the renderers are checked on a made-up record."""

from __future__ import annotations

import itertools
import json
import os

import pytest

from benchmarks import plan_targets
from deepnet_jax.common import records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORD = os.path.join(ROOT, "docs", "records", "plan_targets.json")
needs_record = pytest.mark.skipif(
    not os.path.exists(RECORD), reason="docs/records/plan_targets.json is not committed yet"
)
GIB, MIB = 2**30, 2**20


def _record() -> dict:
    with open(RECORD) as f:
        return json.load(f)


@needs_record
def test_the_tables_are_the_record():
    doc, record = os.path.join(ROOT, "docs", "scaling.md"), _record()
    for name, render in plan_targets.BLOCKS.items():
        assert records.block(doc, name) == render(record), name


@needs_record
def test_the_record_has_every_row_from_a_clean_commit():
    record = _record()
    assert record["command"].startswith("python -m benchmarks.plan_targets")
    assert all(record[k] for k in ("commit", "date", "machine", "jax"))
    assert "+dirty" not in record["commit"]
    assert all(record["versions"][k] for k in ("jax", "libtpu", "jax-cuda12-plugin"))
    rows = {t: [r for r in record["rows"] if r["table"] == t] for t in ("targets", "depth")}
    wanted = list(itertools.product(plan_targets.CONFIGS, plan_targets.TARGETS))
    assert [(r["config"], r["target"]) for r in rows["targets"]] == wanted
    wanted = list(itertools.product(plan_targets.DEPTH_TARGETS, plan_targets.DEPTH_SHAPES))
    assert [(r["target"], (r["layers"], r["group"])) for r in rows["depth"]] == wanted
    pairs = [(r["config"], r["target"]) for r in record["rows"] if r["table"] == "cpu_vs_tpu"]
    assert pairs == [(c, plan_targets.CPU_VS_TPU) for c in plan_targets.CPU_VS_TPU_CONFIGS]
    for r in rows["targets"] + rows["depth"]:  # every plan is there, of the row's target
        assert r["error"] is None and r["plan"]["target"] == r["target"]


@needs_record
def test_the_thousand_layers_flops_ratio_is_the_rule_less_the_hidden_attention():
    """docs/scaling.md: at `full` the program's matmul FLOPs ÷ the model's are the remat rule's
    ratio less the fused attention's four passes (forward, recomputed forward, backward's two),
    which its custom call hides from the census."""
    from deepnet_jax.configs import deepnet_1000l
    from deepnet_jax.scale import flops
    from deepnet_jax.training.run_config import RunConfig

    rows = [r for r in _record()["rows"] if r["table"] == "targets"]
    rows = [r for r in rows if r["config"] == "deepnet_1000l"]
    assert len(rows) == len(plan_targets.TARGETS)
    model = RunConfig.from_config(deepnet_1000l.get_config()).model
    for row in rows:
        plan = row["plan"]
        batch, length = plan["batch_shape"]
        shapes = {k: (batch, length) for k in ("src", "inputs", "targets")}
        hidden = 4 * flops.attention_flops(model, shapes) / plan["model_flops"]
        assert hidden == pytest.approx(0.128, abs=5e-4)
        ratio = plan["program_flops"] / plan["model_flops"]
        assert ratio == pytest.approx(plan["expected_recompute"] - hidden, abs=1e-4), row["target"]


def _plan(target: str, peak: int, **extra) -> dict:
    plan = {"target": target, "mesh": {"data": 8, "fsdp": 1, "tensor": 1}, "batch_shape": [16, 64]}
    plan.update(peak=peak, temporaries=peak // 2, fits=True, compile_s=11.4, roofline=None)
    plan.update(program_flops=4.0, model_flops=3.0)
    moved = {"all-reduce": {"count": 2, "bytes": 29 * MIB}, "all-gather": {"count": 0, "bytes": 0}}
    return {**plan, "collectives": moved, **extra}


def test_the_tables_render_a_made_up_record():
    head = {"commit": "ab" * 20, "date": "2026-11-29T10:00:00Z", "machine": "M", "jax": "0.1"}
    rows = [
        {"table": "targets", "config": "default", "target": "v5e-8", "scaled": 1, "error": None,
         "plan": _plan("v5e-8", GIB, roofline={"mfu_upper_bound": 0.754})},
        {"table": "targets", "config": "default", "target": "v5p-64", "scaled": 2,
         "error": None, "plan": _plan("v5p-64", 3 * GIB, fits=False)},
        {"table": "targets", "config": "x", "target": "h100-8", "scaled": None,
         "error": "ValueError: no", "plan": None},
        {"table": "depth", "target": "v5p-8", "layers": 500, "group": -1, "error": None,
         "plan": _plan("v5p-8", 4 * GIB, fits=None)},
        {"table": "depth", "target": "v5p-8", "layers": 3, "group": 0, "error": "E", "plan": None},
        {"table": "cpu_vs_tpu", "config": "default", "target": "v5p-8", "error": None,
         "cpu": {"temporaries": 4000 * MIB}, "tpu": {"temporaries": 2000 * MIB}},
        {"table": "cpu_vs_tpu", "config": "y", "target": "v5p-8", "cpu": None, "tpu": None,
         "error": "boom"},
    ]  # fmt: skip
    record = {**head, "versions": {"libtpu": "1", "jax-cuda12-plugin": "2"}, "rows": rows}
    lines = plan_targets.targets_table(record).splitlines()
    assert lines[0] == (
        "Measured at commit `abababa` (2026-11-29T10:00:00Z; M; jax 0.1). "
        "Compilers: libtpu 1, jax-cuda12-plugin 2."
    )
    assert lines[4:] == [
        "| default | v5e-8 | 8×1×1 | 16×64 | 1.00 GiB | yes | 11 s | 1.33 | 75% | AR 29 |",
        "| default | v5p-64 | 8×1×1 | 16×64 (×2) | 3.00 GiB | **no** | 11 s | 1.33 | 0% | AR 29 |",
        "| x | h100-8 | | | ValueError: no | | | | | |",
    ]
    assert plan_targets.depth_table(record).splitlines()[2:] == [
        "| v5p-8 | 500L-500L | grouped (√L) | 4.00 GiB | - | 2.00 GiB | 1.33 | 11 s |",
        "| v5p-8 | 3L-3L | flat | E | | | | |",
    ]
    assert plan_targets.cpu_vs_tpu_table(record).splitlines() == [
        "| config | XLA:CPU | XLA:TPU (v5p-8) | TPU/CPU |",
        "|---|---|---|---|",
        "| default | 4,000.0 MiB | 2,000.0 MiB | 0.50 |",
        "| y | boom | | |",
    ]


def test_docs_from_a_record_writes_the_three_blocks(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text("".join(f"<!-- generated: {n} -->\nold\n<!-- end: {n} -->\n"
                           for n in plan_targets.BLOCKS))  # fmt: skip
    record = {"commit": None, "date": "D", "machine": "M", "jax": "J", "versions": {}, "rows": []}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(record))
    plan_targets.main([f"--record={path}", f"--docs={doc}"])
    for name, render in plan_targets.BLOCKS.items():
        assert records.block(str(doc), name) == render(record)
    assert "old" not in doc.read_text()


def test_out_is_written_after_every_row_and_resume_plans_only_the_rest(tmp_path, monkeypatch):
    head = {"command": "c", "commit": "ab" * 20, "date": "d", "machine": "m", "jax": "j"}
    monkeypatch.setattr(plan_targets.records, "header", lambda: dict(head))
    planned, out = [], tmp_path / "r.json"

    def run_plan(config, target, overrides):
        planned.append(target)
        if target == "v5p-8" and len(planned) < 4:  # the first run is killed at its third plan
            raise KeyboardInterrupt
        return {**_plan(target, GIB), "num_params": 10}, ""

    monkeypatch.setattr(plan_targets, "run_plan", run_plan)
    args = ["--configs=default", "--targets=v5e-8,v5p-8", "--depth=", "--cpu_vs_tpu="]
    args.append(f"--out={out}")
    with pytest.raises(KeyboardInterrupt):
        plan_targets.main(args)
    assert [r["target"] for r in json.loads(out.read_text())["rows"]] == ["v5e-8"]
    assert planned == ["cpu:1", "v5e-8", "v5p-8"]
    record = plan_targets.main([*args, "--resume"])
    assert planned[3:] == ["cpu:1", "v5p-8"]  # v5e-8 kept from the first run
    assert [r["target"] for r in record["rows"]] == ["v5e-8", "v5p-8"]
    assert json.loads(out.read_text()) == record
    # a row whose plan failed, even without a message (a planner killed before run_plan named
    # its exit status), is planned again on resume
    failed = json.loads(out.read_text())
    failed["rows"][1].update(plan=None, error="")
    out.write_text(json.dumps(failed))
    record = plan_targets.main([*args, "--resume"])
    assert planned[5:] == ["cpu:1", "v5p-8"] and record["rows"][1]["error"] is None
    head["commit"] = "cd" * 20
    with pytest.raises(SystemExit, match="--resume"):
        plan_targets.main([*args, "--resume"])


def test_a_planner_that_dies_silently_is_an_error(monkeypatch):
    """A plan process killed (SIGKILL, the OOM killer) prints nothing: its row says so."""

    class Killed:
        stdout, stderr, returncode = "", "", -9

    monkeypatch.setattr(plan_targets.subprocess, "run", lambda *a, **k: Killed())
    plan, error = plan_targets.run_plan("default", "v5e-8", [])
    assert plan is None and error == "the planner exited with status -9 and no message"
