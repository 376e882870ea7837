"""The torchscale comparison benchmark runs end to end in its --smoke setting.

Needs the ``bench`` extra and torchscale (``benchmarks/install_bench.sh``); skipped without them,
as in CI, which installs only the library and its test extra.
"""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("fairscale")
pytest.importorskip("torchscale")  # the package only: its modules need the benchmark's timm shim

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow  # a benchmark's smoke run (33 s in the default run)
def test_vs_torchscale_smoke():
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.vs_torchscale", "--smoke"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {r["row"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert set(rows) == {"decoder", "encdec", "environment"}
    for name in ("decoder", "encdec"):
        row = rows[name]
        assert row["ratio"] > 0 and row["ours_step_s"] > 0 and row["theirs_step_s"] > 0
        assert row["ours_tokens_per_s"] > 0 and row["theirs_tokens_per_s"] > 0
        assert abs(row["ours_params"] - row["theirs_params"]) <= 0.05 * row["theirs_params"]
        assert row["train_flops_per_step"] > 0
        assert row["ours_page_faults_per_step"] >= 0 and row["theirs_page_faults_per_step"] >= 0
        # the same function: our parameters in torchscale's model give our logits (float32
        # logits of O(1) through ≤ 2 layers round differently by ~1e-6, as in
        # test_interop_torchscale's fixtures)
        assert 0.1 < row["logits_max_abs"] < 100
        assert row["logits_max_abs_diff"] < 1e-5
        for side in ("ours", "theirs"):  # both train: finite losses near ln(vocab)
            assert abs(row[f"{side}_loss_last"] - row["ln_vocab"]) < 2.0
    env = rows["environment"]
    assert env["torchscale"] == "0.3.0" and env["jax"] and env["torch"]
    assert isinstance(env["malloc_env"], dict)
    assert env["matmul_shape"] == [2 * 16, 32, 64]  # the smoke setting's B·T, d, ffn
    assert env["ours_matmul_gflops_per_s"] > 0 and env["theirs_matmul_gflops_per_s"] > 0
