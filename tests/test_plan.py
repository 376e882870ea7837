"""The AOT memory planner on the 1,000-layer config with 8 simulated devices."""

import json
import os
import subprocess
import sys

import pytest
from conftest import xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _plan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "deepnet_jax.cli.plan", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "XLA_FLAGS": xla_flags()},
        timeout=600,
    )


def test_planner_on_the_1000_layer_model():
    proc = _plan(
        "--config=configs/deepnet_1000l.py",
        "--num_devices=8",
        "--config.mesh.data=1",
        "--config.mesh.fsdp=8",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    plan = json.loads(proc.stdout.strip().splitlines()[-1])
    assert plan["mesh"] == {"data": 1, "fsdp": 8, "tensor": 1}
    assert 3.6e9 < plan["num_params"] < 3.9e9  # DeepNet Table 2's 1,000-layer model: 3.8B
    full = plan["num_params"] * 4  # float32
    assert plan["params"] == pytest.approx(full / 8, rel=0.02)  # fsdp 8: an eighth each
    assert plan["opt_state"] == pytest.approx(2 * plan["params"], rel=1e-3)  # Adam's μ and ν
    # the planner's figures are the compiled program's: arguments = params + opt + batch + the
    # step index, the learning rate and the non-finite gate (4 bytes each)
    memory = plan["memory_analysis"]
    assert memory["argument_size_in_bytes"] == (
        plan["params"] + plan["opt_state"] + plan["batch"] + 4 + 4 + 4
    )
    assert plan["temporaries"] == memory["temp_size_in_bytes"] > 0
    assert "per device:" in proc.stdout and "compiled in" in proc.stdout
    # 500 decoder layers × (target + source positions) × k, v × 8 heads × 64 × 2 bytes (bf16)
    assert plan["decode_cache"] == 500 * (2 * 256) * 2 * 8 * 64 * 2
    assert "decoding cache (keys and values), one sequence of 256 tokens" in proc.stdout


def test_planner_rejects_a_mesh_that_does_not_match():
    proc = _plan("--config=configs/default.py", "--num_devices=8", "--config.mesh.data=3")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith("error: mesh=")
    assert "Traceback" not in proc.stderr


def test_planner_refuses_a_record_it_cannot_write_before_planning(tmp_path):
    blocked = tmp_path / "a_file"
    blocked.write_text("")  # a file where --record needs a folder
    proc = _plan("--config=configs/default.py", f"--record={blocked}/plan.json")
    assert proc.returncode == 1, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert (
        last == f"error: --record={blocked}/plan.json: {blocked} is not a folder this can write to"
    )
    assert "Traceback" not in proc.stderr and "compiled in" not in proc.stdout
