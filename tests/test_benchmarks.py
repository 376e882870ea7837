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
