"""The late-collapse experiment: CompleteP's reversal64 cell over seeds, with one change per arm,
and the fall of each run's training accuracy after it fitted (deepnet_jax.experiments
.late_collapse)."""

import json
import pathlib

import pytest

from deepnet_jax.experiments import collapse, late_collapse, lr_transfer


def _records(*accuracies):
    return [{"step": 25 * (i + 1), "accuracy": a} for i, a in enumerate(accuracies)]


def test_collapse_is_the_largest_fall_after_fitting():
    # fitted at 75; fell from 1.0 to 0.06 at 125, then recovered: the deepest drop counts
    run = collapse.collapse(_records(0.3, 0.8, 0.99, 1.0, 0.06, 0.9, 1.0), final=1.0)
    assert run["fitted_at"] == 75 and run["collapsed"]
    assert run["fall"] == pytest.approx(0.94) and (run["fell_to"], run["fell_at"]) == (0.06, 125)


def test_a_drop_before_fitting_and_a_small_one_after_are_not_collapses():
    run = collapse.collapse(_records(0.9, 0.1, 0.995, 0.7, 1.0), final=0.99)
    assert run["fitted_at"] == 75 and not run["collapsed"]
    assert run["fall"] == pytest.approx(0.295) and run["fell_at"] == 100
    never = collapse.collapse(_records(0.5, 0.98, 0.2), final=0.1)
    assert never == {"fitted_at": None, "fall": 0.0, "fell_to": None, "fell_at": None,
                     "collapsed": False}  # fmt: skip


def test_a_fall_in_the_last_interval_shows_in_the_validation_after_it():
    """The records average their interval: a run that falls at its last updates is caught by
    its validation accuracy, the last point, at the last record's update."""
    run = collapse.collapse(_records(0.5, 1.0, 1.0, 0.98), final=0.39)
    assert run["collapsed"] and (run["fell_to"], run["fell_at"]) == (0.39, 100)
    assert run["fall"] == pytest.approx(0.61)


def test_each_arm_is_lr_transfers_completep_cell_with_its_fields():
    grid = late_collapse.GRIDS["quick"]
    base = late_collapse.base_config("quick")
    bases = lr_transfer.task_bases(lr_transfer.base_config("quick"), lr_transfer.GRIDS["quick"], "")
    for seed in (0, 5):
        key = {"task": "reversal64", "row": "pre_ln+completep", "layers": 6, "seed": seed,
               "lr": 2e-3}  # fmt: skip
        cell = lr_transfer.make_config(bases, key)
        assert cell.optimizer.eps == 1e-8 and cell.model.completep_init_std == 0.02
        for arm, fields in late_collapse.ARMS.items():
            mine = late_collapse.run_config(base, grid, {"arm": arm, "seed": seed})
            expected = cell.copy_and_resolve_references()
            for path, value in fields.items():
                section, name = path.split(".")
                expected[section][name] = value
            assert mine.to_dict() == expected.to_dict(), arm
    assert late_collapse.ARMS["eps_1e-4"] == {"optimizer.eps": 1e-4}
    assert late_collapse.ARMS["init_std_0.125"] == {"model.completep_init_std": 0.125}
    assert late_collapse.ARMS["grad_clip_1"] == {"optimizer.grad_clip": 1.0}


def test_smoke_records_each_runs_curve_and_fall(tmp_path):
    payload = late_collapse.main(["--setting=smoke", f"--out={tmp_path}"])
    grid = late_collapse.GRIDS["smoke"]
    keys = {(r["arm"], r["seed"]) for r in payload["runs"]}
    assert keys == {(a, s) for a in grid["arms"] for s in grid["seeds"]}
    for run in payload["runs"]:
        assert [r["step"] for r in run["records"]] == [2, 4]
        assert set(run["records"][0]) == {"split", "step", "accuracy", "nll", "grad_norm"}
        assert not collapse.collapse(run["records"], run["eval_accuracy"])["collapsed"]
        assert run["commit"] and run["cpu_seconds"] > 0 and "diagnostics" not in run
    saved = json.loads((tmp_path / "late_collapse.json").read_text())
    assert saved["runs"] == payload["runs"]
    table = (tmp_path / "late_collapse.md").read_text()
    assert table.strip() == late_collapse.docs_table(saved)
    assert "| recipe | 2 | 0 | 0 (–) |" in table and table.count("| eps_1e-4 | ") == 3


def test_lr_transfer_runs_retrains_the_runs_lr_transfer_recorded():
    """The setting's runs are lr_transfer's CompleteP runs of the docs (the committed results
    file holds each), each with lr_transfer's own config."""
    grid = late_collapse.GRIDS["lr_transfer_runs"]
    base = late_collapse.base_config("lr_transfer_runs")
    bases = lr_transfer.task_bases(lr_transfer.base_config("quick"), lr_transfer.GRIDS["quick"], "")
    with open(
        pathlib.Path(__file__).parent.parent / "docs/reproduction/lr_transfer_quick.json"
    ) as f:
        theirs = json.load(f)["runs"]
    keys = late_collapse.run_keys(grid)
    assert [k["arm"] for k in keys] == ["recipe"] * 5
    for key in keys:
        cell = {"task": "reversal64", "row": "pre_ln+completep"} | {
            k: key[k] for k in ("layers", "seed", "lr")
        }
        assert sum(all(r.get(k) == v for k, v in cell.items()) for r in theirs) == 1, cell
        mine = late_collapse.run_config(base, grid, key)
        assert mine.to_dict() == lr_transfer.make_config(bases, cell).to_dict()
        assert (
            mine.model.num_encoder_layers == key["layers"]
            and mine.optimizer.learning_rate == key["lr"]
        )


def test_listed_runs_are_named_by_depth_rate_and_seed():
    grid = {**late_collapse.GRIDS["lr_transfer_runs"], "runs": late_collapse.LR_TRANSFER_RUNS[:3]}
    curves = {  # fitted at 50, fell to 0.1 at 75; never fitted
        1e-3: [_records(0.5, 1.0, 0.1), 0.1],
        2e-3: [_records(0.5, 0.6, 0.7), 0.7],
    }
    runs = [
        {"arm": "recipe", **run, "records": [{"split": "train", **r} for r in curves[run["lr"]][0]],
         "eval_accuracy": curves[run["lr"]][1], "eval_loss": 1.0 + run["layers"] / 100}
        for run in grid["runs"]
    ]  # fmt: skip
    table = late_collapse.docs_table({"settings": {"grid": grid}, "runs": runs})
    assert (
        "| recipe | 3 | 2 | 2 (6L at 1e-3, seed 0, 50L at 1e-3, seed 0) | 1.500 (1.060–1.500) |"
        in table
    )
    assert "| arm | run | fitted at |" in table
    assert "| recipe | 50L at 2e-3, seed 1 | – | – | 0.700 | 0.700 | 1.500 |" in table


def test_the_retrained_runs_sit_beside_lr_transfers_record_of_them():
    grid = {**late_collapse.GRIDS["lr_transfer_runs"], "runs": late_collapse.LR_TRANSFER_RUNS[:3]}
    mine = [
        {"arm": "recipe", **run, "eval_accuracy": 0.09, "eval_loss": 3.9 + run["layers"] / 100,
         "records": [{"split": "train", **r} for r in _records(0.5, 1.0, 0.1)]}
        for run in grid["runs"]
    ]  # fmt: skip
    key = {"task": "reversal64", "row": "pre_ln+completep"}
    theirs = {"runs": [{**key, **r, "eval_loss": r["eval_loss"]} for r in mine[:2]]}
    theirs["runs"][1]["eval_loss"] += 0.0123
    table = late_collapse.retrained_table({"settings": {"grid": grid}, "runs": mine}, theirs)
    assert "| 6L at 1e-3, seed 0 | 50 | 0.91 (0.09, 75) | 0.090 | 3.960 | 3.960 | yes |" in table
    assert (
        "| 50L at 1e-3, seed 0 | 50 | 0.91 (0.09, 75) | 0.090 | 4.400 | 4.412 | no (-0.012) |"
        in table
    )
    assert "| 50L at 2e-3, seed 1 | 50 | 0.91 (0.09, 75) | 0.090 | 4.400 | — | — |" in table
