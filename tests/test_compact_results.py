"""Results files kept compact (deepnet_jax.experiments.compact_results): what is dropped of a
run's curves is what no reader takes (every docs table and the depth table's report render the
same from a results file and from its compaction), the sizes, the files an experiment writes
and the command. Reads JSON only: no training, no jax compilation."""

from __future__ import annotations

import functools
import json
import os

import pytest

from deepnet_jax.experiments import compact_results as cr
from deepnet_jax.experiments import depth_table_costs as costs
from deepnet_jax.experiments import depth_table_report as table_report
from deepnet_jax.experiments import docs_tables, results_file


def _compacted(path: str) -> bool:
    """Whether ``path`` is a results file of an experiment :data:`cr.CURVES` compacts (not
    thousand_layers', which keeps its curves whole, nor dropout_gap's, which has no runs)."""
    try:
        return bool(cr.experiment_of(path))
    except ValueError:
        return False


_FILES = sorted(
    {path for table in docs_tables.TABLES for path in table.results if _compacted(path)}
)
# the largest a compact run of each experiment is (bytes, its JSON line): the committed files'
# runs are 0.4-1.3 KB (lr_tolerance, model_update), 2.4-3.0 KB (a synthetic depth_table run:
# 32 training records) and 7.7 KB (a corpus run: 36 training records, 19 diagnostics)
# lr_transfer's: 0.7 KB without curves (a run recorded before 2026-12-01), 2.8-3.0 KB with
# (32 training records of 4 fields)
_RUN_BYTES = {
    "depth_table": 8_000,
    "model_update": 1_600,  # 1.4 KB once a run records its device, commit and date
    "lr_tolerance": 700,  # 0.6 KB once a run records its device, commit and date
    "lr_transfer": 3_500,
    "late_collapse": 4_500,  # 32 training records of 5 fields: 3.6-3.7 KB
    # a 500-update probe: 7.5-7.7 KB (6 diagnostics of 18 layers' vectors, 5 validations); a
    # --setting=full run keeps 19 diagnostics: 23.2 KB (docs/reproduction/
    # deepnorm18_corpus_full.json)
    "deepnorm18_corpus": 24_000,
    # a probe: 1.2-1.3 KB (4 validations, no curve; docs/reproduction/main_job_probes.json)
    "main_job_probes": 1_500,
}


@functools.cache
def _payload(path: str) -> dict:
    with open(os.path.join(docs_tables.ROOT, path)) as f:
        return json.load(f)


def _inflated(run: dict, experiment: str) -> dict:
    """A compact run with what a training run records beside it put back: per-interval losses,
    rates and timings, a final validation record, per-layer vectors, and float64 digits beyond
    the 9 kept (compacting it gives the run again)."""

    def noisy(record: dict) -> dict:
        return {k: v * (1 + 1e-13) if isinstance(v, float) else v for k, v in record.items()}

    out = dict(run)
    per_layer = {
        "ln_input/encoder/final_layer_norm": [16.52, 16.45],
        "grad_norm/decoder/all": [1.0],
    }
    if "records" in run:
        extra = {"loss": 4.57, "lr": 1.2e-4, "grad_norm": 2.9, "step_time_s": 0.5, "mfu": 0.005}
        # a field the experiment keeps (late_collapse: the gradient norm) keeps its own value
        out["records"] = [
            noisy(r) | {k: v for k, v in extra.items() if k not in r} for r in run["records"]
        ]
        out["records"].append({"split": "eval", "step": 800, "loss": 0.45, "chrf": 4.1})
    if experiment == "model_update":  # depth_table's are slimmed as they are recorded
        out["diagnostics"] = [
            {"split": "diagnostics", **noisy(r), **per_layer} for r in run["diagnostics"]
        ]
    elif "diagnostics" in run or experiment == "lr_tolerance":
        out["diagnostics"] = [noisy(r) for r in run.get("diagnostics", [])]
    return out


def _rendered(payloads: dict) -> dict:
    """Every docs table, and the depth table's report of each depth_table file (its tables,
    onsets, costs and what the onset figure draws), from ``payloads`` (path → payload)."""
    out = {
        t.name: t.render(*(payloads[p] for p in t.results))
        for t in docs_tables.TABLES
        if set(t.results) <= set(payloads)
    }
    for path, p in payloads.items():
        if cr.experiment_of(path) == "depth_table":
            s, runs = p["settings"], p["runs"]
            out[path] = table_report.table(runs, s) + costs.cost_table(runs, s)
            out[path + " onsets"] = [table_report.onsets(r, s["levels"][r["task"]]) for r in runs]
    return out


def test_every_reader_shows_the_same_from_a_compacted_file():
    files = {path: _payload(path) for path in _FILES}
    compacted = {path: cr.compact(p, cr.experiment_of(path)) for path, p in files.items()}
    assert _rendered(compacted) == _rendered(files)


def test_compaction_drops_exactly_what_a_run_records_beyond_what_is_read():
    files = {p: cr.compact(_payload(p), cr.experiment_of(p)) for p in _FILES}
    for path in _FILES:
        experiment = cr.experiment_of(path)
        compact = cr.compact(_payload(path), experiment)
        inflated = {**compact, "runs": [_inflated(r, experiment) for r in compact["runs"]]}
        assert cr.compact(inflated, experiment) == compact, path
        assert cr.compact(compact, experiment) == compact, path  # compacting again: unchanged
        assert _rendered({**files, path: inflated}) == _rendered(files), path


def test_compact_sizes():
    for path in _FILES:
        experiment = cr.experiment_of(path)
        compact = cr.compact(_payload(path), experiment)
        text = cr.dumps(compact)
        lines = text.splitlines()
        assert len(lines) == len(compact) + len(compact["runs"]) + 1, path  # a run a line
        first = lines.index('"runs":[') + 1
        runs = lines[first : first + len(compact["runs"])]
        assert [json.loads(line.rstrip(",")) for line in runs] == compact["runs"], path
        assert max(len(line.encode()) for line in runs) <= _RUN_BYTES[experiment], path
    # model_update's gated setting, 8.2 MB with every diagnostics vector of its 20 runs: 18 KB
    gated = cr.dumps(cr.compact(_payload(docs_tables.GATED), "model_update"))
    assert len(gated.encode()) < 20_000


def test_values_kept_to_nine_significant_digits():
    assert cr.rounded(10.524552345275879) == 10.5245523
    assert cr.rounded(4.6757463678659406e-08) == 4.67574637e-08
    assert cr.rounded(cr.rounded(0.015226922621163645)) == cr.rounded(0.015226922621163645)
    run = {"layers": 6, "eval_loss": 6.254340048338891, "diagnostics": []}
    kept = cr.compact_run({**run, "records": [{"split": "train", "step": 25, "nll": 1 / 3}]}, "x")
    assert kept["records"][0]["nll"] == 1 / 3  # an experiment without a rule keeps its curves
    assert cr.compact_run(run, "lr_tolerance") == {"layers": 6, "eval_loss": 6.254340048338891}
    with pytest.raises(ValueError, match="not a results file"):
        cr.experiment_of("docs/records/kernel_model.json")


def test_an_experiment_writes_its_results_compact(tmp_path):
    settings = {"steps": 10, "every": 5}
    results = results_file.Results(str(tmp_path), "model_update", "gated", settings)
    diagnostics = [
        {"split": "diagnostics", "step": s, "model_update": s / 3, "grad_norm/encoder/all": [1.0]}
        for s in (0, 5, 10)
    ]
    run = results.add({"scheme": "subln", "layers": 6}, {"diagnostics": diagnostics})
    text = (tmp_path / "model_update.json").read_text()
    assert json.loads(text)["runs"] == [run]  # what the experiment goes on with is what is kept
    assert run["diagnostics"][1] == {"step": 5, "model_update": 1.66666667}
    assert cr.dumps(cr.compact(json.loads(text), "model_update")) == text


def test_the_command_compacts_in_place_and_checks(tmp_path, capsys):
    path = tmp_path / "model_update_gated.json"
    full = {**_payload(docs_tables.GATED), "runs": []}
    full["runs"] = [_inflated(r, "model_update") for r in _payload(docs_tables.GATED)["runs"]]
    path.write_text(json.dumps(full, indent=1))
    assert cr.main(["--check", str(path)]) == 1
    assert "not compact" in capsys.readouterr().out
    assert cr.main([str(path)]) == 0
    assert " → " in capsys.readouterr().out
    assert cr.main(["--check", str(path)]) == 0
    assert json.loads(path.read_text()) == cr.compact(full, "model_update")
