"""The docs' tables of measured figures are their results files' (deepnet_jax.experiments.
docs_tables): each block regenerates from its committed record, and every generated block of
README.md and docs/*.md has a generator. Reads JSON and markdown only: no training, no jax
compilation."""

from __future__ import annotations

import os

import pytest

from deepnet_jax.common import records
from deepnet_jax.experiments import (
    depth_table_devices,
    depth_table_views,
    docs_tables,
    lr_tolerance,
    model_update,
)

_IDS = [f"{t.doc}:{t.name}" for t in docs_tables.TABLES]


@pytest.mark.parametrize("table", docs_tables.TABLES, ids=_IDS)
def test_each_table_is_its_records(table):
    assert docs_tables.current(table) == docs_tables.render(table), (
        f"{table.doc} block {table.name} differs from {', '.join(table.results)}: "
        "python -m deepnet_jax.experiments.docs_tables"
    )


def test_every_generated_block_has_a_generator():
    assert docs_tables.unregistered() == []
    names = [(t.doc, t.name) for t in docs_tables.TABLES]
    assert len(names) == len(set(names))
    # the kernel model's blocks are benchmarks/kernel_model.py's (tests/test_kernel_model_record.py)
    waiting = set(docs_tables.pending())  # registered, their record not committed yet
    assert set(docs_tables.ELSEWHERE) - waiting <= set(docs_tables.markers())
    assert set(docs_tables.RECORD_FILES) <= set(docs_tables.ELSEWHERE)
    assert docs_tables.elsewhere_problems() == []


_FROM_CODE = {("README.md", "run-dir")}  # made from the code's declarations: no results file


def test_every_table_reads_committed_results_files():
    for table in docs_tables.TABLES:
        assert bool(table.results) != ((table.doc, table.name) in _FROM_CODE), table.name
        for path in table.results:
            assert path.startswith("docs/reproduction/") and path.endswith(".json")
            assert os.path.isfile(os.path.join(docs_tables.ROOT, path)), path


def test_check_names_a_stale_block_and_write_restores_it(tmp_path, monkeypatch, capsys):
    doc = tmp_path / "page.md"
    doc.write_text("<!-- generated: t -->\nold\n<!-- end: t -->\n")
    table = docs_tables.Table(str(doc), "t", (), lambda: "| new |\n|---|\n")
    monkeypatch.setattr(docs_tables, "TABLES", (table,))
    monkeypatch.setattr(docs_tables, "docs", lambda: [])
    monkeypatch.setattr(docs_tables, "ELSEWHERE", {})  # (their markers are in docs() only)
    monkeypatch.setattr(docs_tables, "RECORD_FILES", {})
    assert docs_tables.main(["--check"]) == 1
    assert "stale: " in capsys.readouterr().out and records.block(str(doc), "t") == "old"
    assert docs_tables.main([]) == 0
    assert records.block(str(doc), "t") == "| new |\n|---|"
    assert docs_tables.main(["--check"]) == 0


def test_a_marker_without_a_generator_fails(tmp_path, monkeypatch, capsys):
    doc = tmp_path / "page.md"
    doc.write_text("<!-- generated: orphan -->\n| x |\n<!-- end: orphan -->\n")
    monkeypatch.setattr(docs_tables, "TABLES", ())
    monkeypatch.setattr(docs_tables, "docs", lambda: [str(doc)])
    monkeypatch.setattr(docs_tables, "ELSEWHERE", {})
    monkeypatch.setattr(docs_tables, "RECORD_FILES", {})
    assert docs_tables.unregistered() == [(str(doc), "orphan")]
    assert docs_tables.main(["--check"]) == 1
    assert "has no generator" in capsys.readouterr().out


def test_an_entry_awaiting_its_record_is_pending_until_the_record_is_there(
    tmp_path, monkeypatch, capsys
):
    doc, record = tmp_path / "page.md", tmp_path / "record.json"
    key = (str(doc), "b")
    monkeypatch.setattr(docs_tables, "TABLES", ())
    monkeypatch.setattr(docs_tables, "docs", lambda: [str(doc)])
    monkeypatch.setattr(docs_tables, "ELSEWHERE", {key: "python -m benchmarks.x --docs=page.md"})
    monkeypatch.setattr(docs_tables, "RECORD_FILES", {key: str(record)})
    bare, marked = "a hand table\n", "<!-- generated: b -->\n| x |\n<!-- end: b -->\n"

    def check(text: str) -> tuple[int, str]:
        doc.write_text(text)
        return docs_tables.main(["--check"]), capsys.readouterr().out

    # no record, no markers: pending, and --check passes saying so
    assert docs_tables.pending() == [key]
    rc, out = check(bare)
    assert rc == 0 and f"pending: {doc} block b, no {record} yet" in out
    rc, out = check(marked)  # markers before their record: a block with nothing behind it
    assert rc == 1 and f"{doc} block b has markers but {record} is not there" in out
    record.write_text("{}")
    assert docs_tables.pending() == []
    rc, out = check(bare)  # the record without its markers
    assert rc == 1 and f"{doc} block b has no markers" in out and "pending" not in out
    rc, out = check(marked)
    assert rc == 0 and "pending" not in out and docs_tables.elsewhere_problems() == []


def test_the_docs_number_formats():
    assert [lr_tolerance.lr_text(v) for v in (2e-3, 8e-3, 3.2e-2, 5e-4)] == [
        "2e-3",
        "8e-3",
        "3.2e-2",
        "5e-4",
    ]
    assert [model_update.delta_f_text(v) for v in (8.15e-5, 1.04e-4, 0.002, 0.37, 6.999)] == [
        "8.2e-05",
        "1.0e-04",
        "0.0020",
        "0.370",
        "7.00",
    ]


def test_lr_grid_table_cells_say_how_a_run_ended_and_where_none_ran():
    run = {"scheme": "a", "verdict": "trained", "eval_loss": 5.4444, "nonfinite_step": None}
    blew = {**run, "lr": 8e-3, "verdict": "diverged", "eval_loss": 1030.4}
    payload = {
        "settings": {"layers": 6, "steps": 150, "lrs": [2e-3, 8e-3, 3.2e-2], "schemes": ["a"]},
        "runs": [{**run, "lr": 2e-3}, {**blew, "first_train_loss": 9.13}],
    }
    table = lr_tolerance.grid_table(payload)
    assert table.startswith("6L-6L, 150 updates: verdict and validation NLL.")
    assert "| a | 2e-3 | trained (5.444) | diverged (NLL 1,030 from 9.13) | — |" in table


def test_warmups_table_has_a_row_per_scheme_and_warmup():
    def run(scheme, warmup, moved):
        steps = [{"step": s, "model_update": moved * s} for s in (0, 5, 25, 100)]
        return {"scheme": scheme, "layers": 6, "warmup": warmup, "eval_loss": 6.0,
                "diagnostics": steps}  # fmt: skip

    payload = {
        "setting": "quick",
        "settings": {"depths": [6, 18], "schemes": ["post_ln", "deepnorm"]},
        "runs": [run("post_ln", "none", 0.1), run("deepnorm", "paper", 0.001)],
    }
    rows = model_update.warmups_table(payload).splitlines()[2:]
    assert rows[0] == "| post_ln | none | 0.500 / — | 2.50 / — | 10.0 / — | 6.000 / — |"
    assert rows[1].startswith("| deepnorm | none | — |")
    assert rows[5] == "| deepnorm | paper | 0.0050 / — | 0.025 / — | 0.100 / — | 6.000 / — |"
    assert [r.split(" | ")[1] for r in rows] == ["none"] * 4 + ["paper"] * 4
    assert len(rows) == 2 * 4  # the quick setting's four schemes under each warm-up


def test_calls_list_what_is_called_what_cannot_be_and_the_rest():
    def run(scheme, layers, seed, accuracy):
        return {"task": "t", "scheme": scheme, "layers": layers, "seed": seed,
                "verdict": "trained", "eval_accuracy": accuracy}  # fmt: skip

    runs = [run("deepnorm", 6, s, 0.9 + s / 100) for s in range(2)]
    runs += [run("post_ln", 6, s, 0.5 + s / 100) for s in range(2)]
    runs += [run("pre_ln", 6, s, 0.9 + s / 10) for s in range(2)]
    runs += [run("subln", 6, 0, 0.7), run("deepnorm", 200, 0, 0.9), run("post_ln", 200, 0, 0.1)]
    levels = {"unigram_entropy": 4.0, "chance": {"accuracy": 0.06, "nll": 4.0}}
    payload = {"settings": {"levels": {"t": levels}}, "runs": runs}
    assert depth_table_views.calls(payload, "t").splitlines() == [
        "- 6L-6L: deepnorm > post_ln; post_ln < pre_ln; not called, a cell with one seed: "
        "deepnorm against subln, post_ln against subln, pre_ln against subln; every other pair ≈",
        "- 200L-200L: not called, a cell with one seed: deepnorm against post_ln",
    ]


_H100 = "NVIDIA H100 80GB HBM3"


def test_device_label_is_the_kind_jax_reported_in_short():
    label = depth_table_devices.device_label
    assert label({"device": "cpu"}) == "CPU"
    assert label({"device": _H100}) == "H100"
    assert label({"device": "TPU v5p"}) == "TPU v5p"  # any other kind as reported
    assert label({"device": None, "device_note": {"device": "cpu", "how": "typed in"}}) == "CPU"
    assert label({"device": None}) is None and label({}) is None
    cell = depth_table_devices.cell_device
    assert cell([{"device": _H100}, {"device": "cpu"}, {}]) == "CPU+H100"
    assert cell([{}]) is None


def _device_payload(devices: dict[tuple[str, int], str | None]) -> dict:
    """Two seeds per (scheme, depth) cell of ``devices``, each on its cell's device."""
    accuracy = {"post_ln": 0.5, "deepnorm": 0.9, "dlcl_pre": 0.7}
    runs = [
        {
            "task": "t",
            "scheme": s,
            "layers": n,
            "seed": seed,
            "verdict": "trained",
            "eval_accuracy": accuracy[s] + seed / 100,
            "device": device,
        }
        for (s, n), device in devices.items()
        for seed in range(2)
    ]
    levels = {"unigram_entropy": 4.0, "chance": {"accuracy": 0.06, "nll": 4.0}}
    settings = {"levels": {"t": levels}, "grid": {"tasks": []}}
    return {"setting": "quick", "settings": settings, "runs": runs}


def test_a_table_on_two_devices_names_each_columns_and_marks_the_cells_off_it():
    cells = {("post_ln", 6): _H100, ("deepnorm", 6): _H100, ("dlcl_pre", 6): "cpu"}
    cells |= {("post_ln", 50): "cpu", ("deepnorm", 50): "cpu"}
    payload = _device_payload(cells)
    lines = depth_table_views.verdicts(payload, "t").splitlines()
    assert lines[0] == "| scheme | 6L-6L (H100) | 50L-50L (CPU) |"
    assert lines[2] == "| post_ln | trained ×2; 0.505 (0.5–0.51) | trained ×2; 0.505 (0.5–0.51) |"
    assert lines[4] == "| dlcl_pre | trained ×2; 0.705 (0.7–0.71) · CPU |  |"
    onsets = depth_table_views.onsets(payload, "t").splitlines()
    assert onsets[0] == lines[0] and onsets[4] == "| dlcl_pre | —/—/—; —/—/— · CPU |  |"
    assert depth_table_views.calls(payload, "t").splitlines() == [
        "- 6L-6L (H100): post_ln < deepnorm; post_ln < dlcl_pre (H100 against CPU); "
        "deepnorm > dlcl_pre (H100 against CPU)",
        "- 50L-50L (CPU): post_ln < deepnorm",
    ]
    # a column split evenly names no device; each of its cells says its own
    even = _device_payload({("post_ln", 6): _H100, ("deepnorm", 6): "cpu"})
    lines = depth_table_views.verdicts(even, "t").splitlines()
    assert lines[0] == "| scheme | 6L-6L |"
    assert lines[2].endswith("· H100 |") and lines[3].endswith("· CPU |")


@pytest.mark.parametrize("device", ["cpu", None])
def test_a_table_on_one_device_or_none_recorded_is_unmarked(device):
    cells = {("post_ln", 6): device, ("deepnorm", 6): device, ("post_ln", 50): device}
    payload = _device_payload(cells)
    bare = {**payload, "runs": [{**r, "device": None} for r in payload["runs"]]}
    for render in (depth_table_views.verdicts, depth_table_views.onsets, depth_table_views.calls):
        assert render(payload, "t") == render(bare, "t")
    assert depth_table_views.verdicts(payload, "t").startswith("| scheme | 6L-6L | 50L-50L |")
    assert depth_table_views.calls(payload, "t").startswith("- 6L-6L: post_ln < deepnorm")
