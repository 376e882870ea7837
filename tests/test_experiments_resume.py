"""An experiment's run stopped mid-way resumes from its checkpoint when the experiment is
started again, and ends bitwise where an uninterrupted run ends
(deepnet_jax.experiments.resumable)."""

from __future__ import annotations

import json
import signal

import ml_collections
import pytest

from deepnet_jax.common import records
from deepnet_jax.configs import depth_table_recipe as table_recipe
from deepnet_jax.experiments import common, depth_table, results_file, resumable
from deepnet_jax.experiments import depth_table_settings as dts
from deepnet_jax.runs.workdir import RunDir
from deepnet_jax.training import trainer

# one smoke run (post_ln 2L-2L, seed 0: the first of six), a checkpoint after each of its 4 updates
ARGS = ["--setting=smoke", "--shard=0/6", "--checkpoint_every=1"]
COMPARED = ("eval_loss", "eval_accuracy", "train_loss", "first_train_loss", "verdict")


def _curves(run: dict) -> list[dict]:
    """The run's logged curves without what depends on the clock."""
    clocked = ("tokens_per_s", "step_time_s", "mfu", "compile_s", "elapsed_s")
    return [{k: v for k, v in r.items() if k not in clocked} for r in run["records"]]


def test_a_run_stopped_mid_way_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch):
    whole = depth_table.main([*ARGS, f"--out={tmp_path / 'whole'}"])["runs"]
    assert len(whole) == 1 and whole[0]["segments"] == 1

    saved = trainer.save

    def save_then_stop(run, state):  # SIGTERM after the checkpoint at update 2: it stops at 3
        saved(run, state)
        if state.step == 2:
            signal.raise_signal(signal.SIGTERM)

    monkeypatch.setattr(trainer, "save", save_then_stop)
    stopped_out = tmp_path / "stopped"
    with pytest.raises(SystemExit, match="start the experiment again to resume it"):
        depth_table.main([*ARGS, f"--out={stopped_out}"])
    monkeypatch.undo()
    workdir = (
        stopped_out
        / "runs"
        / resumable.workdir_name(dts.keys("smoke", table_recipe.base_config("smoke"))[0])
    )
    assert RunDir(workdir).has_checkpoints()  # the stop kept its checkpoint
    partial = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    assert [r["split"] for r in partial] == ["train", "train_partial"]  # stopped inside 3-4
    ledger = json.loads((workdir / "experiment_cost.json").read_text())
    assert len(ledger["segments"]) == 1 and ledger["segments"][0]["cpu_seconds"] > 0
    made = {k: ledger["segments"][0][k] for k in ("commit", "cpu")}
    assert made == {"commit": records.commit(), "cpu": records.cpu_model()}

    resumed = depth_table.main([*ARGS, f"--out={stopped_out}"])["runs"]
    assert len(resumed) == 1 and resumed[0]["segments"] == 2
    # each process that trained it names its commit and machine (both this one's here)
    assert resumed[0]["segment_commits"] == [made["commit"]] * 2
    assert resumed[0]["segment_cpus"] == [made["cpu"]] * 2
    assert "segment_commits" not in whole[0]  # one segment: the run's own commit and cpu
    assert not RunDir(workdir).has_checkpoints()  # recorded: its checkpoints are dropped
    assert (workdir / "metrics.jsonl").exists()
    for field in COMPARED:
        assert resumed[0][field] == whole[0][field], field
    # the interval the stop split (updates 3-4) is logged as the uninterrupted run logs it
    assert _curves(resumed[0]) == _curves(whole[0])
    assert resumed[0]["cpu_seconds"] >= ledger["segments"][0]["cpu_seconds"]


def test_workdir_names_are_the_run_and_safe_as_paths():
    key = {"task": "reversal64", "scheme": "pre_ln+dyt", "layers": 500, "seed": 0, "lr": 0.002}
    assert resumable.workdir_name(key) == (
        "task=reversal64,scheme=pre_ln+dyt,layers=500,seed=0,lr=0.002"
    )
    assert resumable.workdir_name({"init": "a/b c"}) == "init=a_b_c"


def test_a_claimed_run_is_held_until_its_claim_ends(tmp_path):
    workdir = str(tmp_path / "runs" / "task=reversal,seed=0")
    # the second is another open of the lock file, as another process's would be
    with resumable.claim(workdir) as first, resumable.claim(workdir) as second:
        assert (first, second) == (True, False)
    with resumable.claim(workdir) as again:
        assert again


def test_a_run_another_process_is_training_is_left_to_it(tmp_path, capsys):
    # shard 0/3 of the smoke grid: its runs 0 and 3; run 0's workdir is held as if a process
    # started with another --shard were training it into the same folder
    out = tmp_path / "out"
    first = dts.keys("smoke", table_recipe.base_config("smoke"))[0]
    with resumable.claim(str(out / "runs" / resumable.workdir_name(first))):
        runs = depth_table.main(["--setting=smoke", "--shard=0/3", f"--out={out}"])["runs"]
    assert first not in [{k: r[k] for k in first} for r in runs]
    assert len(runs) == 1  # run 3, trained
    assert "another process is training it; left to it" in capsys.readouterr().out


def test_runs_without_checkpoints_have_workdirs_of_their_own_across_shards(tmp_path, monkeypatch):
    """``checkpoint_every=0``: two shards sharing one ``work_root`` train their first runs in
    different workdirs (named by the run, not by its index in the shard), each claimed."""
    trained = []

    def fake_train_once(config, workdir, resume=False):
        trained.append((workdir, resume))
        return {"eval_loss": 1.0, "eval_accuracy": 0.5, "cpu_seconds": 0.0}

    monkeypatch.setattr(resumable, "train_once", fake_train_once)
    keys = [{"scheme": "deepnorm", "seed": 0}, {"scheme": "subln", "seed": 0}]
    root, blank = str(tmp_path / "runs"), lambda key: ml_collections.ConfigDict()
    for shard in ([keys[0]], [keys[1]]):  # the first run of shard 0/2, then of shard 1/2
        results = results_file.Results(str(tmp_path), "grid", "smoke", {"steps": 4})
        common.run_grid(results, shard, blank, None, root, judged=False)
    assert trained == [(f"{root}/{resumable.workdir_name(k)}", False) for k in keys]
    held = f"{root}/{resumable.workdir_name({'scheme': 'pre_ln', 'seed': 0})}"
    with resumable.claim(held):  # another process trains it: left to it
        results = results_file.Results(str(tmp_path), "grid", "smoke", {"steps": 4})
        assert common.run_grid(results, [{"scheme": "pre_ln", "seed": 0}], blank, None, root) == []
    assert len(trained) == 2
