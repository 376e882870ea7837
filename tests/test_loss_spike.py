"""The loss-spike experiment: ReZero's and SkipInit's runs logged every update, their gates and
largest weights read at each checkpoint (deepnet_jax.experiments.loss_spike)."""

import json
import pathlib

import numpy as np
import pytest

from deepnet_jax.experiments import loss_spike


def test_smoke_logs_every_update_and_reads_each_checkpoint(tmp_path):
    payload = loss_spike.main(["--setting=smoke", f"--out={tmp_path}"])
    lr, updates, every = loss_spike.SETTINGS["smoke"]
    assert [r["scheme"] for r in payload["runs"]] == [r[0] for r in loss_spike.RUNS["smoke"]]
    for run in payload["runs"]:
        assert run["lr"] == lr and run["verdict"] in ("trained", "diverged")
        assert [c["update"] for c in run["curve"]] == list(range(1, updates + 1))
        assert all(np.isfinite(c["loss"]) and c["grad_norm"] > 0 for c in run["curve"])
        assert [c["update"] for c in run["weights"]] == list(range(every, updates + 1, every))
        first, last = run["weights"][0], run["weights"][-1]
        # the gates start at 0 and move with training; the norms are a trained model's
        assert 0 < first["max_abs_gate"] != last["max_abs_gate"]
        assert first["output_projection_norm"] != last["output_projection_norm"] > 0
        assert last["encoder_embedding_norm"] > 0
    saved = json.loads((tmp_path / "loss_spike.json").read_text())
    assert saved["runs"] == payload["runs"] and saved["setting"] == "smoke"
    command = f"python -m deepnet_jax.experiments.loss_spike --setting=smoke --out={tmp_path}"
    assert saved["header"]["command"] == command
    table = (tmp_path / "loss_spike.md").read_text()
    assert table.strip() == loss_spike.docs_table(saved)
    assert table.count("| rezero | ") == table.count("| skipinit | ") == updates // every


@pytest.mark.parametrize("setting", ["quick", "sinkhorn"])
def test_the_runs_are_lr_tolerances_cells_with_finer_logging(setting):
    """Each run is its scheme's lr_tolerance cell but for the cadence and its own model fields
    (mhc+deepseek_v4: the variant)."""
    from deepnet_jax.experiments import lr_tolerance

    base = loss_spike.base_config(setting)
    assert base.to_dict() == lr_tolerance._base_config("since_deepnet").to_dict()
    for name, scheme, fields in loss_spike.RUNS[setting]:
        mine = loss_spike.run_config(base, setting, name)
        cell = lr_tolerance.run_config(base, "since_deepnet", {"scheme": scheme, "lr": 3.2e-2})
        cadence = ("log_every", "checkpoint_every", "max_to_keep")
        assert (mine.log_every, mine.checkpoint_every, mine.max_to_keep) == (1, 25, 6)
        for key in cadence:  # nothing else differs
            mine[key] = cell[key]
        cell.model.update(fields)
        assert mine.to_dict() == cell.to_dict()
    runs = {name: fields for name, _, fields in loss_spike.RUNS["sinkhorn"]}
    assert runs["mhc+deepseek_v4"] == {"mhc_variant": "deepseek_v4"}
    assert runs["mhc+sinkhorn_eps"] == {"mhc_sinkhorn_eps": 1e-6}


def test_weights_refuse_a_model_without_gates():
    params = {"output_projection": {"kernel": np.ones((2, 2))}}
    with pytest.raises(ValueError, match="no \\*_alpha gate"):
        loss_spike.weights(params)


def test_a_run_that_goes_non_finite_is_recorded_up_to_its_halt(tmp_path):
    """At an absurd rate the smoke ReZero's update 2 is non-finite: the trainer halts, and the
    run keeps its step, its curve up to then and the one checkpoint written before it."""
    c = loss_spike.run_config(loss_spike.base_config("smoke"), "smoke", "rezero")
    c.optimizer.learning_rate = 1e6
    c.total_steps, c.checkpoint_every, c.max_to_keep = 6, 1, 6
    run = loss_spike.one_run(c, str(tmp_path / "run"), None)
    assert run["nonfinite_step"] == 2 and run["verdict"] == "diverged"
    assert [p["update"] for p in run["curve"]] == [1]
    assert [p["update"] for p in run["weights"]] == [1]


def test_the_quick_record_repeats_to_the_last_digit():
    """docs/schemes.md calls the run deterministic: the same command, run twice at the same
    commit on the same machine, gave these two records."""
    from deepnet_jax.experiments import docs_tables

    paths = (docs_tables.LOSS_SPIKE, docs_tables.LOSS_SPIKE.replace(".json", "_repeat.json"))
    first, again = (json.loads(pathlib.Path(docs_tables.ROOT, p).read_text()) for p in paths)
    assert first["header"]["commit"] == again["header"]["commit"]
    assert first["header"]["command"] != again["header"]["command"]  # two runs, two outputs
    assert first["runs"] == again["runs"]
