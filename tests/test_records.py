"""common.records: a record's header, writing one, and the blocks between markers; and the
benchmarks' ``--out`` records, their measurements replaced by stand-ins (no timing, no compile)."""

from __future__ import annotations

import json
import os
import platform

import pytest

from deepnet_jax.common import records

HEADER_KEYS = {"command", "commit", "date", "machine", "jax"}


def test_header_names_the_module_and_the_commit():
    head = records.header([records.__file__.replace("records.py", "console.py"), "--x=1"])
    assert set(head) == HEADER_KEYS | {"cpu"}  # "cpu" since records began naming the processor
    assert head["command"] == "python -m deepnet_jax.common.console --x=1"
    assert head["commit"] is None or len(head["commit"].removesuffix("+dirty")) == 40


def test_cpu_model_is_cpuinfos_model_name(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n")
    assert records.cpu_model(str(info)) == "AMD EPYC 7B13"
    block = "processor\t: {}\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\n\n"
    info.write_text(block.format(0) + block.format(1).replace("26", "25"))
    assert records.cpu_model(str(info)) == "AMD EPYC (family 26, model 2)"
    assert records.cpu_model(str(tmp_path / "absent")) == (platform.processor() or None)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity on this OS")
def test_cores_are_the_affinitys_and_a_pinned_process_records_one():
    mine = os.sched_getaffinity(0)
    assert records.cores() == len(mine)
    try:
        os.sched_setaffinity(0, {min(mine)})  # as taskset -c pins a run
        assert records.cores() == 1
    finally:
        os.sched_setaffinity(0, mine)


def test_write_puts_the_payload_under_the_given_header(tmp_path):
    head = {k: f"<{k}>" for k in HEADER_KEYS}
    path = tmp_path / "r.json"
    record = records.write(str(path), {"rows": [{"a": 1}]}, head)
    assert json.loads(path.read_text()) == record == {**head, "rows": [{"a": 1}]}
    with pytest.raises(ValueError, match="'commit' is a header key"):
        records.write(str(path), {"commit": "typed by hand"}, head)


def test_blocks_are_read_and_replaced_between_their_markers(tmp_path):
    doc = tmp_path / "d.md"
    doc.write_text("a\n<!-- generated: t -->\nold\n<!-- end: t -->\nb\n")
    records.replace_block(str(doc), "t", "new\n")
    assert doc.read_text() == "a\n<!-- generated: t -->\nnew\n<!-- end: t -->\nb\n"
    assert records.block(str(doc), "t") == "new"
    with pytest.raises(ValueError, match="needs one"):
        records.block(str(doc), "u")


def _load(path) -> dict:
    record = json.loads(path.read_text())
    assert set(record) >= HEADER_KEYS and record["command"].startswith("python -m benchmarks.")
    return record


def test_input_pipeline_out(tmp_path, monkeypatch):
    from benchmarks import input_pipeline as bench

    monkeypatch.setattr(bench, "_config", lambda dataset, data_dir, **kw: dataset)
    monkeypatch.setattr(bench, "measure", lambda config, batches, steps: {"ratio": 2.0})
    monkeypatch.setattr("sys.argv", ["benchmarks/input_pipeline.py"])
    out = tmp_path / "r.json"
    bench.main(["--rows=ding_de_en/fixed,shakespeare/bpe_stream", "--batches=7", f"--out={out}"])
    record = _load(out)
    assert record["rows"] == [
        {"row": "ding_de_en/fixed", "ratio": 2.0},
        {"row": "shakespeare/bpe_stream", "ratio": 2.0},
    ]
    assert record["settings"]["batches"] == 7


def test_decode_out(tmp_path, monkeypatch):
    from benchmarks import decode as bench

    monkeypatch.setattr(bench, "_model_config", lambda smoke: None)
    monkeypatch.setattr(bench, "generation_row", lambda *a: {"row": "generation", "a": a[1:]})
    monkeypatch.setattr(bench, "beam_row", lambda *a: {"row": "beam"})
    monkeypatch.setattr("sys.argv", ["benchmarks/decode.py"])
    out = tmp_path / "r.json"
    rows = bench.main(["--batch=3", f"--out={out}"])
    assert [r.get("row") for r in rows] == [None, "generation", "beam"]
    assert _load(out)["rows"] == json.loads(json.dumps(rows))
    assert rows[1]["a"] == (3, 32, 64, 3)


def test_vs_torchscale_out(tmp_path, monkeypatch):
    from benchmarks import vs_torchscale as bench

    class Theirs:
        def __init__(self):
            self.info = {"torch": "x", "param_count": 1}

        def matmul_gflops(self, m, k, n):
            return 2.0

        def close(self):
            pass

    monkeypatch.setattr(bench, "RemoteTheirs", Theirs)
    monkeypatch.setattr(bench, "jax_matmul_gflops", lambda m, k, n: 1.0)
    monkeypatch.setattr(bench, "pin_cpus", lambda threads: [0])
    monkeypatch.setattr(bench, "measure_row", lambda setup, row, theirs: {"row": row.name})
    monkeypatch.setattr("sys.argv", ["benchmarks/vs_torchscale.py"])
    out = tmp_path / "r.json"
    bench.main(["--rows=decoder", "--rounds=3", f"--out={out}"])
    record = _load(out)
    assert [r["row"] for r in record["rows"]] == ["decoder", "environment"]
    assert record["setup"]["rounds"] == 3 and record["rows"][1]["torch"] == "x"
    assert record["rows"][1]["ours_matmul_gflops_per_s"] == 1.0
    assert record["rows"][1]["theirs_matmul_gflops_per_s"] == 2.0


def test_plan_targets_out(tmp_path, monkeypatch):
    from benchmarks import plan_targets as bench

    first = {"num_params": 10, "batch_shape": [16, 64]}

    def run_plan(config, target, overrides):
        return (dict(first), "") if target == "cpu:1" else (None, "error: refused")

    monkeypatch.setattr(bench, "run_plan", run_plan)
    monkeypatch.setattr("sys.argv", ["benchmarks/plan_targets.py"])
    out = tmp_path / "r.json"
    bench.main(
        ["--configs=default", "--targets=v5e-8", "--depth=", "--cpu_vs_tpu=", f"--out={out}"]
    )
    record = _load(out)
    assert record["rows"] == [
        {"table": "targets", "config": "default", "target": "v5e-8", "scaled": 1,
         "error": "error: refused", "plan": None}
    ]  # fmt: skip
    assert set(record["versions"]) == {"jax", "libtpu", "jax-cuda12-plugin"}


def test_made_line_names_the_short_commit_date_machine_and_jax():
    head = {"date": "2026-11-28T14:03:51Z", "machine": "Linux x86_64, 2 CPUs", "jax": "0.10.2"}
    tail = "(2026-11-28T14:03:51Z; Linux x86_64, 2 CPUs; jax 0.10.2)."
    clean = {**head, "commit": "ab" * 20}
    assert records.made_line(clean) == f"Measured at commit `abababa` {tail}"
    dirty = {**head, "commit": "ab" * 20 + "+dirty"}
    assert records.made_line(dirty) == f"Measured at commit `abababa+dirty` {tail}"
    assert records.made_line({**head, "commit": None}) == f"Measured at an unknown commit {tail}"


def test_made_line_of_runs_names_every_commit_and_the_dates_span():
    head = {"date": "2026-11-28T14:03:51Z", "machine": "Linux x86_64, 2 CPUs", "jax": "0.10.2"}
    one = {**head, "commit": "ab" * 20}
    assert records.made_line_of_runs([one]) == records.made_line(one)
    later = {**head, "date": "2026-11-29T09:00:00Z", "commit": "cd" * 20 + "+dirty"}
    assert records.made_line_of_runs([later, one, one]) == (
        "Measured in 3 runs, 2026-11-28T14:03:51Z to 2026-11-29T09:00:00Z, at commits `abababa`, "
        "`cdcdcdc+dirty` (Linux x86_64, 2 CPUs; jax 0.10.2)."
    )


def test_commits_text_says_commit_or_commits_and_names_records_without_one():
    clean, dirty, none = {"commit": "ab" * 20}, {"commit": "cd" * 20 + "+dirty"}, {"commit": None}
    assert records.commits_text([clean, clean]) == "commit `abababa`"
    assert records.commits_text([dirty, clean]) == "commits `abababa`, `cdcdcdc+dirty`"
    assert records.commits_text([none, {}]) == "an unknown commit"
    assert records.commits_text([none, clean]) == "commit `abababa` and an unknown commit"
