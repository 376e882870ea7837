"""The benchmark scripts run end to end in their --smoke setting (with -m slow)."""

import gzip
import json
import os
import subprocess
import sys

import pytest
from conftest import xla_flags

from deepnet_jax.common import records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow  # a benchmark's smoke run; CI runs the library tests
def test_decode_benchmark_smoke():
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.decode", "--smoke"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {r.get("row"): r for r in map(json.loads, proc.stdout.splitlines())}
    gen, beam = rows["generation"], rows["beam"]
    assert gen["outputs_agree"]  # cached and both uncached decoders pick the same tokens
    assert gen["cached_s"] > 0 and gen["speedup_vs_full"] > 0
    assert beam["sentences"] == 8 and beam["sentences_per_s"] > 0


@pytest.mark.slow  # a benchmark's smoke run; CI runs the library tests
def test_sharding_benchmark_smoke():
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.sharding", "--smoke"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "XLA_FLAGS": xla_flags()},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    state = [r for r in rows if r.get("row") == "state_bytes"]
    assert [r["fsdp_devices"] for r in state] == [1, 2, 4, 8]
    assert state[-1]["reduction_vs_1"] > 7  # FSDP over 8 devices: under an eighth, nearly
    plans = [r for r in rows if r.get("row") == "plan"]
    assert len(plans) == 2 and all(p["peak"] > p["params"] + p["opt_state"] for p in plans)


@pytest.mark.slow  # a benchmark's smoke run; its record's writer: tests/test_records.py
def test_step_efficiency_benchmark_smoke(tmp_path):
    record_path = tmp_path / "record.json"
    out = [f"--out={record_path}"]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.step_efficiency", "--smoke", "--variants=best", *out],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "XLA_FLAGS": xla_flags()},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    variants = {r["variant"]: r for r in rows if r["row"] == "variant"}
    assert list(variants) == ["best"]
    assert variants["best"]["fields"] == {"fused_qkv": True, "remat_policy": "none"}
    for r in variants.values():
        assert r["step_s"] > 0 and 0 < r["efficiency"] < 1.5 and len(r["rounds_step_s"]) == 2
        assert isinstance(r["page_faults_per_step"], int) and r["page_faults_per_step"] >= 0
    assert rows[-1]["row"] == "summary" and rows[-1]["matmul_tflops_per_s"] > 0
    assert isinstance(rows[-1]["malloc_env"], dict)
    record = json.loads(record_path.read_text())  # --out: the printed rows under the header
    assert record["rows"] == rows and "--out=" in record["command"] and record["commit"]


def test_loss_passes_benchmark_smoke(tmp_path):
    """A few seconds: both paths timed on the CPU, and (with the gpu-plan extra) compiled for an
    H100, where the one pass has fewer kernels reading the logits and a smaller prediction."""
    import importlib.util

    from benchmarks import loss_passes

    out = tmp_path / "record.json"
    record = loss_passes.main(["--smoke", f"--out={out}"])
    assert json.loads(out.read_text()) == record
    (row,) = record["rows"]
    assert set(row["cpu_s"]) == {*loss_passes.PATHS, loss_passes.BEFORE} and row["cpu_ratio"] > 0
    assert row["cpu_ratio_first_max"] > 0
    if importlib.util.find_spec("jax_plugins.xla_cuda12"):
        gpu = row["gpu"]
        assert gpu["one_pass"]["logit_readers"] == 2 < gpu["separate"]["logit_readers"]
        assert gpu["one_pass"]["predicted_s"] < gpu["separate"]["predicted_s"]


@pytest.mark.slow  # a benchmark's smoke run; CI runs the library tests
def test_dropout_masks_benchmark_smoke(tmp_path):
    from benchmarks import dropout_masks

    doc = tmp_path / "page.md"
    doc.write_text("<!-- generated: dropout-masks -->\n<!-- end: dropout-masks -->\n")
    out = tmp_path / "record.json"
    record = dropout_masks.main(["--smoke", f"--out={out}", f"--docs={doc}"])
    assert json.loads(out.read_text()) == record
    masks = [r for r in record["rows"] if r["row"] == "masks"]
    assert [r["generator"] for r in masks] == list(dropout_masks.GENERATORS)
    assert all(r["median_s"] > 0 for r in masks)
    steps = [r for r in record["rows"] if r["row"] == "step"]
    assert [r["variant"] for r in steps] == list(dropout_masks.STEP_VARIANTS)
    assert "| `philox4x32` |" in doc.read_text()


def test_step_efficiency_rejects_bad_variants_before_compiling():
    from benchmarks import step_efficiency

    with pytest.raises(SystemExit, match="--variants: 'turbo' unknown"):
        step_efficiency.main(["--smoke", "--variants=turbo"])
    with pytest.raises(ValueError, match="variant field 'turbo' is not a model field"):
        step_efficiency.main(["--smoke", "--variants=best", "--best=turbo=1"])
    assert step_efficiency.parse_overrides("a=1,b=0.5,c=true,d=x") == {
        "a": 1,
        "b": 0.5,
        "c": True,
        "d": "x",
    }


def test_profile_step_summarize_classifies_ops_and_skips_loops():
    from benchmarks import profile_step

    hlo = "\n".join(
        [
            "  %ynn_fusion.1 = f32[8,16]{1,0} fusion(f32[8,4]{1,0} %a, f32[4,16]{1,0} %b)",
            "  %dot.2 = f32[4,16]{1,0} dot(f32[8,4]{1,0} %a, f32[8,16]{1,0} %c)",
            "  %copy_bitcast_fusion = f32[16,8]{1,0} fusion(f32[8,16]{1,0} %c)",
            "  %bitcast_dynamic-update-slice_fusion.3 = f32[2,8,16]{2,1,0} fusion(%s, %c)",
            "  %wrapped_broadcast.4 = f32[2,8,16]{2,1,0} fusion(f32[] %zero)",
            "  ROOT %add_fusion = f32[8,16]{1,0} fusion(%c, %c)",
            "  %while.5 = (s32[], f32[8,16]{1,0}) while((s32[], f32[8,16]{1,0}) %t)",
        ]
    )
    ops = profile_step.hlo_ops(hlo)
    assert ops["dot.2"] == ("f32[4,16]{1,0}", "dot") and ops["while.5"][1] == "while"
    thread = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "pool/42"}}]
    durations = {
        "ynn_fusion.1": 4000,
        "dot.2": 1000,
        "copy_bitcast_fusion": 600,
        "bitcast_dynamic-update-slice_fusion.3": 400,
        "wrapped_broadcast.4": 200,
        "add_fusion": 300,
        "while.5": 99999,  # a loop's event spans its body's ops: not counted
        "ThunkExecutor::Execute": 5000,  # not an HLO op: not counted
    }
    events = thread + [
        {"ph": "X", "name": n, "dur": us, "pid": 1, "tid": 7} for n, us in durations.items()
    ]
    rows = profile_step.summarize(events * 2, ops, steps=2, top=2)  # the same events twice
    op_rows = [r for r in rows if r["row"] == "op"]
    assert [(r["op"], r["ms_per_step"], r["calls_per_step"]) for r in op_rows] == [
        ("ynn_fusion.1", 4.0, 1.0),
        ("dot.2", 1.0, 1.0),
    ]
    classes = {r["class"]: r["ms_per_step"] for r in rows if r["row"] == "class"}
    assert classes == {
        "dot_ynnpack": 4.0,
        "dot_xla": 1.0,
        "copy_transpose": 0.6,
        "dynamic_update_slice": 0.4,
        "dynamic_slice": 0.0,
        "zero_fill": 0.2,
        "elementwise": 0.3,
    }
    summary = rows[-1]
    assert summary["ops_ms_per_step"] == 6.5
    assert summary["ms_per_step_by_thread"] == {"pool#0": 6.5}


@pytest.mark.slow  # a benchmark's smoke run; its record's writer: tests/test_records.py
def test_profile_step_benchmark_smoke(tmp_path):
    pytest.importorskip("xprof")  # the bench extra
    out = tmp_path / "record.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.profile_step", "--smoke", "--top=3", f"--out={out}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["row"] for r in rows] == ["op"] * 3 + ["class"] * 7 + ["summary"]
    classes = {r["class"]: r["ms_per_step"] for r in rows if r["row"] == "class"}
    assert classes["dot_ynnpack"] + classes["dot_xla"] > 0 and classes["elementwise"] > 0
    summary = rows[-1]
    assert abs(sum(classes.values()) - summary["ops_ms_per_step"]) < 0.01
    assert summary["wall_s_per_step"] > 0 and summary["model"]["layers"] == 2
    assert json.loads(out.read_text())["rows"] == rows  # --out


@pytest.mark.slow  # a benchmark's smoke run (run it before an on-device session); the planned
# step it runs: tests/test_one_compile.py
def test_on_device_benchmark_runs_the_planned_step(tmp_path):
    """The planned step runs on the process's own devices (here 2 simulated CPUs): timed,
    the allocator's figures read, and the loss falls on its fixed batch; compile-only rows have
    no timings, and several configs run one process each; ``--profile`` writes the run's HLO
    and a trace. On a GPU the same code gave
    docs/scaling.md's "Measured on one H100"."""
    out = tmp_path / "rows.jsonl"
    common = [sys.executable, "-m", "benchmarks.on_device", "--target=cpu:2", f"--json={out}"]
    for extra in (
        ["--configs=default", "--warmup=1", "--steps=2", f"--profile={tmp_path / 'p'}"],
        ["--configs", "default,labml_shakespeare", "--compile_only"],
    ):
        proc = subprocess.run(
            [*common, *extra, "--set=model.num_decoder_layers=2"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
    ran, *compiled = [json.loads(line) for line in out.read_text().splitlines()]
    assert ran["config"] == "default" and ran["target"] == "cpu:2"
    assert ran["step_s"] > 0 and ran["tokens_per_s"] > 0
    assert ran["last_loss"] < ran["first_loss"]  # three Adam updates on one batch
    assert ran["planned_peak"] > ran["planned_temporaries"] > 0
    assert "mfu" not in ran  # a simulated CPU has no datasheet peak
    files = ran["profile"]["files"]  # the HLO and the trace benchmarks.device_profile reads
    assert "step.hlo.txt.gz" in files and any(f.endswith("perfetto_trace.json.gz") for f in files)
    with gzip.open(tmp_path / "p" / "step.hlo.txt.gz", "rt") as f:
        assert "ENTRY" in f.read()
    assert [r["config"] for r in compiled] == ["default", "labml_shakespeare"]
    assert all("step_s" not in r for r in compiled)
    assert compiled[1]["overrides"] == ["model.num_decoder_layers=2"]
    assert compiled[0]["planned_peak"] == ran["planned_peak"]  # one config, one program
    assert "| labml_shakespeare |" in proc.stdout  # the table
    # each line under its run's header (common.records), one header for a run's processes
    assert ran["command"].startswith("python -m benchmarks.on_device --target=cpu:2")
    assert ran["commit"] == records.commit() and ran["date"].endswith("Z") and ran["machine"]
    assert compiled[0]["date"] == compiled[1]["date"] and "--header" not in ran["command"]
    assert compiled[0]["command"] == compiled[1]["command"]
    assert compiled[1]["command"].endswith("--compile_only --set=model.num_decoder_layers=2")


@pytest.mark.slow  # a benchmark's smoke run (two encoder-decoder steps compiled)
def test_sinkhorn_layout_benchmark_smoke(tmp_path):
    """Both layouts' steps from the same parameters: the same first loss and Sinkhorn-Knopp
    gradients equal to float rounding (the sums add in another order: a few ulps of the
    gradients' O(1) entries over the 20 iterations, far under the bounds below)."""
    from benchmarks import sinkhorn_layout

    out = tmp_path / "record.json"
    record = sinkhorn_layout.main(["--smoke", f"--out={out}"])
    assert json.loads(out.read_text()) == record
    (row,) = record["rows"]
    assert row["task"] == "reversal64" and row["arch"] == "encdec" and row["layers"] == 2
    assert set(row["step_s"]) == set(sinkhorn_layout.LAYOUTS) and row["ratio"] > 0
    transposes = row["hlo_transposes"]  # each step compiled its own layout
    assert transposes["positions_minor"] > transposes["matrices_minor"]
    first = row["first_loss"]
    assert first["positions_minor"] == pytest.approx(first["matrices_minor"], rel=1e-5)
    alone = row["sinkhorn_alone"]
    assert alone["shape"] == [32, 25, 4, 4] and 0 <= alone["grad_max_abs_diff"] < 1e-5
