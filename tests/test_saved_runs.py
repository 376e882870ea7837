"""Checkpoints written by an earlier version of the package (tests/fixtures/saved_runs, made by
``tests/fixtures/make_saved_runs.py``) restore with this one and continue with the losses the
uninterrupted run had: parameter paths, the saved config and the schemes' math unchanged."""

import json
import os
import shutil
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "fixtures"))
from make_saved_runs import OUT_DIR, TOTAL, case_config, train_losses

from deepnet_jax.training import train

with open(os.path.join(OUT_DIR, "cases.json")) as _f:
    RECORD = json.load(_f)


@pytest.mark.parametrize("name", sorted(RECORD["cases"]))
def test_saved_run_resumes(name, tmp_path):
    case = RECORD["cases"][name]
    workdir = tmp_path / "run"
    shutil.copytree(os.path.join(OUT_DIR, name, "checkpoints"), workdir / "checkpoints")
    train.run(case_config(case["arch"], case["scheme"], TOTAL), str(workdir))
    got = train_losses(str(workdir))
    expected = {int(step): loss for step, loss in case["losses"].items()}
    assert sorted(got) == sorted(expected)  # it resumed at the saved step, not from scratch
    got_values = np.array([got[s] for s in sorted(expected)])
    want = np.array([expected[s] for s in sorted(expected)])
    # The fixture was written on another machine, and XLA:CPU compiles for the host's instruction
    # set: another vector width or FMA contraction (or another XLA) reassociates and rounds
    # float32 sums differently, so equality is bitwise only on the writing machine (resuming on
    # one machine is bitwise: tests/test_checkpoint.py). Each sum of n ≤ 1,024 terms moves by at
    # most n·ε = 1,024 · 1.19e-7 ≈ 1.2e-4 of its magnitude; a change to the saved format or a
    # scheme's math moves the loss by far more.
    np.testing.assert_allclose(got_values, want, rtol=1.2e-4)
