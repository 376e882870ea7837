"""The CPU-efficiency benchmark's tables (benchmarks/step_efficiency.py and
benchmarks/step_efficiency_tables.py): rendered from records, written by ``--docs``, and
docs/benchmarks.md's blocks regenerated from the committed records once there are some (until
then the entries are pending in experiments.docs_tables). Reads JSON and markdown only: the
timed steps are replaced by stand-ins."""

from __future__ import annotations

import json
import os

import pytest

from benchmarks import decode, input_pipeline
from benchmarks import step_efficiency as bench
from benchmarks import step_efficiency_tables as tables
from deepnet_jax.common import records
from deepnet_jax.experiments import docs_tables

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "benchmarks.md")
HEAD = {
    "command": "python -m benchmarks.step_efficiency --out=r.json",
    "commit": "0123456789abcdef0123456789abcdef01234567",
    "date": "2026-11-28T14:03:51Z",
    "machine": "Linux x86_64, 2 CPUs",
    "jax": "0.10.2",
}


def _variant(name: str, fields: dict, step_s: float, efficiency: float, **kw) -> dict:
    """A row as ``variant_row`` writes it."""
    return {
        "row": "variant",
        "variant": name,
        "fields": fields,
        "step_s": step_s,
        "vs_first": kw.get("vs_first", 1.0),
        "tokens_per_s": round(1024 / step_s),
        "model_gflops_per_step": 75.4,
        "efficiency": efficiency,
        "compile_s": kw.get("compile_s", 3.6),
        "page_faults_per_step": kw.get("faults", 32960),
        "rounds_step_s": kw.get("rounds", [step_s, 1.24, 1.57]),
    }


def _summary(env: dict) -> dict:
    return {
        "row": "summary",
        "matmul_tflops_per_s": 0.1503,
        "matmul_tflops_per_s_before": 0.1481,
        "batch": [8, 128],
        "model": bench.SIZES["full"],
        "jax": "0.10.2",
        "devices": "1 × cpu",
        "malloc_env": env,
    }


def _record(rows: list[dict], env: dict | None = None, **head) -> dict:
    return {**HEAD, **head, "rows": [*rows, _summary(env or {})]}


BEST = {"fused_qkv": True, "remat_policy": "none"}


def test_the_table_has_a_line_per_variant_and_the_run_in_its_first_line():
    rows = [
        _variant("baseline", {}, 1.3391, 0.375),
        _variant("remat_none", {"remat_policy": "none"}, 1.244, 0.404, vs_first=0.929),
        _variant("best", BEST, 1.155, 0.435, vs_first=0.863, compile_s=4.34, rounds=[1.07, 1.19]),
    ]
    lines = tables.table(_record(rows)).splitlines()
    assert lines[0] == (
        "Matmul throughput measured in the run: 0.150 TFLOP/s (0.148 before the steps); model "
        "FLOPs per step: 75.4 GFLOP; batch 8 × 128; 1 × cpu; allocator settings: none. Measured "
        "at commit `0123456` (2026-11-28T14:03:51Z; Linux x86_64, 2 CPUs; jax 0.10.2)."
    )
    assert lines[2] == (
        "| variant | switch | median s/step | vs baseline | tokens/s | efficiency | compile s "
        "| rounds min–max |"
    )
    assert lines[4:] == [
        "| baseline | — | 1.339 | 1.000 | 765 | 37.5% | 3.6 | 1.24–1.57 |",
        "| remat_none | `remat_policy=none` | 1.244 | 0.929 | 823 | 40.4% | 3.6 | 1.24–1.57 |",
        "| best | `fused_qkv=True`, `remat_policy=none` | 1.155 | 0.863 | 887 | **43.5%** | 4.3 "
        "| 1.07–1.19 |",
    ]
    hugetlb = tables.table(_record(rows[2:], {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}))
    assert "allocator settings: `GLIBC_TUNABLES=glibc.malloc.hugetlb=1`." in hugetlb
    assert "| vs best |" in hugetlb


HUGETLB = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}


def _runs() -> list[dict]:
    def run(env, date, steps, faults, efficiency):
        rows = [
            _variant("baseline", {}, steps[0], efficiency[0], faults=faults[0]),
            _variant("best", BEST, steps[1], efficiency[1], faults=faults[1], compile_s=7.7),
        ]
        return _record(rows, env, date=date)

    return [
        run(HUGETLB, "2026-11-28T02:00:00Z", (0.914, 0.751), (396, 732), (0.31, 0.43)),
        run({}, "2026-11-28T01:00:00Z", (0.968, 0.845), (32960, 114630), (0.27, 0.39)),
        run({}, "2026-11-28T03:00:00Z", (0.945, 0.804), (32000, 114000), (0.28, 0.44)),
    ]


def test_the_allocator_table_puts_each_environments_runs_side_by_side():
    lines = tables.allocator_table(_runs()).splitlines()
    assert lines[0] == (
        "3 runs, 2026-11-28T01:00:00Z to 2026-11-28T03:00:00Z, at commit `0123456`; Linux "
        "x86_64, 2 CPUs; matmul throughput measured in the runs: 0.150 TFLOP/s."
    )
    env = "`GLIBC_TUNABLES=glibc.malloc.hugetlb=1`"
    assert lines[2] == (
        f"| variant | switches | median s/step, plain (2 runs) | median s/step, {env} (1 run) "
        f"| page faults/step, plain → {env} | efficiency, all 3 runs | compile s |"
    )
    assert lines[3] == "|---|---|---:|---:|---|---|---|"
    assert lines[4:] == [  # plain first; the faults: each environment's median
        "| baseline | — | 0.968, 0.945 | 0.914 | 32,480 → 396 | 27.0–31.0% | 3.6 |",
        "| best | `fused_qkv=True`, `remat_policy=none` | 0.845, 0.804 | 0.751 "
        "| 114,315 → 732 | 39.0–44.0% | 7.7 |",
    ]


def test_the_allocator_command_writes_its_block(tmp_path, capsys):
    paths = []
    for i, run in enumerate(_runs()):
        paths.append(tmp_path / f"run{i}.json")
        paths[-1].write_text(json.dumps(run))
    doc = tmp_path / "page.md"
    block = tables.ALLOCATOR_BLOCK
    doc.write_text(f"<!-- generated: {block} -->\n<!-- end: {block} -->\n")
    text = tables.main([f"--runs={','.join(map(str, paths))}", f"--docs={doc}"])
    assert records.block(str(doc), block) == text == tables.allocator_table(_runs())
    with pytest.raises(SystemExit):
        tables.main([f"--runs={tmp_path / 'absent.json'}", f"--docs={doc}"])
    assert "--runs: " in capsys.readouterr().err


class _Timed:
    """A stand-in for ``step_efficiency.Variant``: 2 GFLOP a step, in 1 s (0.8 s for best)."""

    def __init__(self, name, c, batch):
        self.name, self.flops, self.compile_s = name, 2e9, 1.5
        self.times, self.faults = [], [5.0]

    def run(self, steps):
        self.faults.append(100.0)
        return 0.8 if self.name == "best" else 1.0


def _stub(monkeypatch) -> None:
    monkeypatch.setattr(bench, "config", lambda size, fields: None)
    monkeypatch.setattr(bench, "Variant", _Timed)
    monkeypatch.setattr(bench.flops, "measured_matmul_flops_per_s", lambda: 1e10)
    monkeypatch.setattr(bench, "malloc_env", lambda: {})
    monkeypatch.setattr("sys.argv", ["benchmarks/step_efficiency.py"])


def test_docs_writes_the_block_from_the_record(tmp_path, monkeypatch):
    _stub(monkeypatch)
    doc, out = tmp_path / "page.md", tmp_path / "r.json"
    doc.write_text(f"<!-- generated: {tables.BLOCK} -->\n<!-- end: {tables.BLOCK} -->\n")
    rows = bench.main(["--smoke", "--variants=baseline,best", f"--out={out}", f"--docs={doc}"])
    record = json.loads(out.read_text())
    assert record["rows"] == json.loads(json.dumps(rows))
    assert records.block(str(doc), tables.BLOCK) == tables.table(record)
    # smoke: batch 4 × 16 = 64 tokens a step; efficiency = 2 GFLOP ÷ step s ÷ 10 GFLOP/s
    assert "| baseline | — | 1.000 | 1.000 | 64 | 20.0% | 1.5 | 1.00–1.00 |" in doc.read_text()
    best = "| best | `fused_qkv=True`, `remat_policy=none` | 0.800 | 0.800 | 80 | **25.0%** |"
    assert best in doc.read_text()


def test_docs_needs_out(monkeypatch, capsys):
    _stub(monkeypatch)
    with pytest.raises(SystemExit):
        bench.main(["--smoke", "--docs=docs/benchmarks.md"])
    assert "--docs: needs --out" in capsys.readouterr().err


def _committed(path: str) -> dict:
    if not os.path.isfile(os.path.join(ROOT, path)):
        pytest.skip(f"{path} is not committed yet (docs_tables.pending)")
    with open(os.path.join(ROOT, path)) as f:
        return json.load(f)


def test_the_docs_block_is_the_committed_record():
    record = _committed("docs/records/step_efficiency.json")
    assert record["command"].startswith("python -m benchmarks.step_efficiency")
    assert all(record[k] for k in ("commit", "date", "machine", "jax"))
    assert records.block(DOC, tables.BLOCK) == tables.table(record)


def test_the_allocator_block_is_the_committed_records():
    runs = [_committed(path) for path in tables.ALLOCATOR_RUNS]
    assert all(r["command"].startswith("python -m benchmarks.step_efficiency") for r in runs)
    assert records.block(DOC, tables.ALLOCATOR_BLOCK) == tables.allocator_table(runs)


def test_docs_tables_awaits_the_records_these_commands_write():
    doc = "docs/benchmarks.md"
    awaited = {
        input_pipeline.BLOCK: "docs/records/input_pipeline.json",
        decode.BLOCK: "docs/records/decode.json",
        tables.BLOCK: "docs/records/step_efficiency.json",
        tables.ALLOCATOR_BLOCK: tables.ALLOCATOR_RUNS[0],
    }
    mine = {(doc, name): path for name, path in awaited.items()}
    assert mine.items() <= docs_tables.RECORD_FILES.items()  # the other pages' entries aside
    for name, path in awaited.items():
        assert f"--docs={doc}" in docs_tables.ELSEWHERE[(doc, name)]
        if name != tables.ALLOCATOR_BLOCK:  # (its runs' records are written before it)
            assert f"--out={path}" in docs_tables.ELSEWHERE[(doc, name)]
