"""The benchmark scripts run end to end in their --smoke setting (with -m slow)."""

import json
import os
import subprocess
import sys

import pytest
from conftest import xla_flags

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


def test_step_efficiency_benchmark_smoke():
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.step_efficiency", "--smoke", "--variants=best"],
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


def test_step_efficiency_rejects_bad_variants_before_compiling():
    sys.path.insert(0, ROOT)
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
