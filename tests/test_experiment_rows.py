"""The experiments' rows that are more than a scheme (``configs.experiment_rows.ROW_FIELDS``):
Pre-LN under CompleteP in the since_deepnet settings of the depth table, model_update and
lr_tolerance, with the recipe lr_transfer's row takes and its base at each experiment's shallowest
depth; the committed results files still load beside the new rows, and their tables show those rows
as not run."""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest

from deepnet_jax.configs import depth_table_recipe as table_recipe
from deepnet_jax.configs import experiment_rows
from deepnet_jax.experiments import (
    common,
    depth_table,
    lr_tolerance,
    lr_transfer,
    model_update,
    results_file,
)
from deepnet_jax.experiments import depth_table_report as table_report
from deepnet_jax.experiments import depth_table_settings as dts
from deepnet_jax.experiments import depth_table_views as views
from deepnet_jax.model import architectures, parameterization
from deepnet_jax.training import config_checks
from deepnet_jax.training.run_config import RunConfig

REPO = pathlib.Path(__file__).resolve().parent.parent
RESULTS = REPO / "docs" / "reproduction"
ROW = experiment_rows.COMPLETEP_ROW
SINCE = "since_deepnet"
NEW_ROWS = ("hyper_connections", "mhc", ROW)  # added to the settings after their runs


def test_a_row_names_its_model_fields():
    assert experiment_rows.row_fields("deepnorm") == {"scheme": "deepnorm"}
    assert experiment_rows.row_fields("pre_ln+dyt") == {"scheme": "pre_ln", "norm": "dyt"}
    assert experiment_rows.row_fields(ROW) == {
        "scheme": "pre_ln",
        "parameterization": "completep",
        "completep_base_layers": 6,
        "completep_base_width": 64,
        "scale_embedding": False,
    }
    assert experiment_rows.row_scheme(ROW) == "pre_ln"
    with pytest.raises(ValueError, match="pre_ln\\+dyt, pre_ln\\+completep"):
        experiment_rows.row_fields("pre_ln+rmsnorm")
    # one recipe for every experiment
    assert lr_transfer.ROWS[ROW] == experiment_rows.row_fields(ROW)
    assert ROW in common.SINCE_DEEPNET_ROWS


def _depth_table(row: str) -> list:
    base = table_recipe.base_config(SINCE)
    keys = [k for k in dts.keys(SINCE, base) if k["scheme"] == ROW and k["seed"] == 0]
    return [table_recipe.make_config(base, {**k, "scheme": row}) for k in keys]


def _model_update(row: str) -> list:
    base = model_update._base_config(SINCE)
    keys = [k for k in model_update.run_keys(SINCE) if k["scheme"] == ROW and k["warmup"] == "none"]
    return [model_update.run_config(base, SINCE, {**k, "scheme": row}) for k in keys]


def _lr_tolerance(row: str) -> list:
    s = lr_tolerance.SETTINGS[SINCE]
    assert ROW in s["schemes"]
    base = lr_tolerance._base_config(SINCE)
    return [lr_tolerance.run_config(base, SINCE, {"scheme": row, "lr": max(s["lrs"])})]


def _lr_transfer(row: str) -> list:
    grid = lr_transfer.GRIDS["quick"]
    bases = lr_transfer.task_bases(lr_transfer.base_config("quick"), grid, "")
    keys = [
        k
        for n in grid["depths"]
        for k in lr_transfer.sweep_keys(grid, n)
        if k["row"] == ROW and k["lr"] == grid["tasks"][k["task"]]
    ]
    return [lr_transfer.make_config(bases, {**k, "row": row}) for k in keys]


def _per_side(c) -> int:
    return max(c.model.num_encoder_layers, c.model.num_decoder_layers)


@pytest.mark.parametrize(
    "configs", [_depth_table, _model_update, _lr_tolerance, _lr_transfer], ids=lambda f: f.__name__
)
def test_completeps_row_is_pre_ln_with_its_fields_its_base_at_the_shallowest_depth(configs):
    """Each experiment's CompleteP runs: the shared fields, the base at the shallowest depth the
    experiment runs the row at (multipliers 1 there) and at the model's width, positions that
    are not sinusoids; they differ from the same runs of Pre-LN in the row's fields and the
    positions only, validate and build."""
    mine, pre_ln = configs(ROW), configs("pre_ln")
    assert mine and len(mine) == len(pre_ln)
    shallowest = min(_per_side(c) for c in mine)
    for c, plain in zip(mine, pre_ln, strict=True):
        m = c.model
        assert {k: m[k] for k in experiment_rows.ROW_FIELDS[ROW]} == experiment_rows.ROW_FIELDS[ROW]
        assert m.completep_base_layers == shallowest and m.completep_base_width == m.d_model
        assert parameterization.depth_multiplier(m, "decoder") == _per_side(c) / shallowest
        assert parameterization.width_multiplier(m) == 1.0
        was = plain.model.positions
        assert m.positions == ("learned" if was == "sinusoidal" else was)
        differ = {k for k in m if m[k] != plain.model[k]}
        assert differ <= set(experiment_rows.ROW_FIELDS[ROW]) | {"positions"}, differ
        assert {k: v for k, v in c.items() if k != "model"} == {
            k: v for k, v in plain.items() if k != "model"
        }
        config_checks.validate(c)
        # Shakespeare's are derived from its data (a stand-in: the parameters' shapes only)
        c.model.vocab_size = c.model.vocab_size or 96
        c.model.max_len = c.model.max_len or c.data.max_len
        architectures.build(config_checks.stand_in(RunConfig.from_config(c)).model)


def _payload(name: str) -> dict:
    return json.loads((RESULTS / f"{name}_{SINCE}.json").read_text())


def _load(tmp_path, name: str, settings: dict, grid: list[str]) -> results_file.Results:
    """The committed results file under the settings the experiment records now (SystemExit if
    they differ outside ``grid``)."""
    shutil.copy(RESULTS / f"{name}_{SINCE}.json", tmp_path / f"{name}.json")
    return results_file.Results(str(tmp_path), name, SINCE, settings, grid=grid)


def _keys_and_results(tmp_path) -> list[tuple[list[dict], results_file.Results]]:
    base = table_recipe.base_config(SINCE)
    grid = dts.GRIDS[SINCE]
    levels = _payload("depth_table")["settings"]["levels"]  # from the data: not recomputed
    table = {"grid": grid, "levels": levels, **depth_table.run_recipe(base)}
    mu = model_update.SETTINGS[SINCE] | {"lr": common.PAPER_LR}
    mu["schemes"] = list(common.SINCE_DEEPNET_ROWS)
    lt = lr_tolerance.SETTINGS[SINCE]
    lt_settings = lt | {"unigram_entropy": _payload("lr_tolerance")["settings"]["unigram_entropy"]}
    return [
        (
            dts.keys(SINCE, base),
            _load(tmp_path / "dt", "depth_table", table, ["grid"]),
        ),
        (
            model_update.run_keys(SINCE),
            _load(tmp_path / "mu", "model_update", mu, ["schemes", "depths"]),
        ),
        (
            [{"scheme": s, "lr": lr} for s in lt["schemes"] for lr in lt["lrs"]],
            _load(tmp_path / "lt", "lr_tolerance", lt_settings, ["schemes", "lrs"]),
        ),
    ]


# the new rows still to run in each committed results file: none (model_update and lr_tolerance
# ran theirs, then the depth table, each added to the file it was loaded beside: 2026-11-30)
PENDING: dict[str, tuple[str, ...]] = {"dt": (), "mu": (), "lt": ()}


def test_committed_results_load_beside_the_new_rows_and_only_those_would_run(tmp_path):
    for sub in PENDING:
        (tmp_path / sub).mkdir()
    for sub, (keys, results) in zip(PENDING, _keys_and_results(tmp_path), strict=True):
        assert any(k["scheme"] in NEW_ROWS for k in keys)  # the setting has the new rows
        pending = [k for k in keys if k["scheme"] in PENDING[sub]]
        assert all(results.find(k) is None for k in pending), sub
        done = [k for k in keys if k["scheme"] not in PENDING[sub]]
        assert len(done) == len(results.runs), sub
        assert all(results.find(k) is not None for k in done), sub  # nothing runs again


def test_the_tables_show_the_new_rows_as_run_or_not_run():
    mu, lt = _payload("model_update"), _payload("lr_tolerance")
    since, quick = (
        _payload("depth_table"),
        json.loads((RESULTS / "depth_table_quick.json").read_text()),
    )
    tables = {
        "mu": (model_update.warmup_table(mu), 4),
        "lt": (lr_tolerance.largest_lr_table(lt), 2),
        "dt": (views.since_deepnet_verdicts(since, quick), 2),
    }
    for name, (text, columns) in tables.items():
        for row in NEW_ROWS:
            not_run = f"| {row} |{' — |' * columns}" in text
            assert f"| {row} | " in text and not_run == (row in PENDING[name]), (name, row)
    # the experiment's own report, with the setting's grid now
    settings = since["settings"] | {"grid": dts.GRIDS[SINCE]}
    report = table_report.table(since["runs"], settings)
    assert (f"| {ROW} | — | — |" in report) == (ROW in PENDING["dt"])
    assert f"| {ROW} | trained" in report
