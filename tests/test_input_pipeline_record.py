"""The input-pipeline benchmark's table (benchmarks/input_pipeline.py): rendered from a record,
written by ``--docs``, and docs/benchmarks.md's block regenerated from the committed record once
there is one (until then the entry is pending in experiments.docs_tables). Reads JSON and
markdown only: the measurement is replaced by stand-ins."""

from __future__ import annotations

import json
import os

import record_blocks

from benchmarks import input_pipeline as bench
from deepnet_jax.common import records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORD = os.path.join(ROOT, "docs", "records", "input_pipeline.json")
HEAD = {
    "command": "python -m benchmarks.input_pipeline --out=r.json",
    "commit": "0123456789abcdef0123456789abcdef01234567",
    "date": "2026-11-28T14:03:51Z",
    "machine": "Linux x86_64, 2 CPUs",
    "jax": "0.10.2",
}


def _row(name: str, ratio: float, shapes: list[list[int]], tokens: float) -> dict:
    """A row as ``main`` writes it: ``{"row": name, **measure(...)}``."""
    return {
        "row": name,
        "pipeline_tokens_per_s": 3922464,
        "train_tokens_per_s": 2081,
        "ratio": ratio,
        "batch_shapes": shapes,
        "tokens_per_batch": tokens,
    }


ROWS = [
    _row("ding_de_en/fixed", 1884.9, [[32, 64]], 992.0),
    _row("ding_de_en/max_tokens", 602.2, [[16, 64], [32, 32], [64, 16], [128, 8]], 1319.4),
    _row("shakespeare/bpe_stream", 7.3, [[32, 64]], 2048.0),
]
SETTINGS = {"batches": 200, "steps": 30, "jax_devices": "1 × cpu"}


def test_the_table_has_a_line_per_row_with_its_figures():
    lines = bench.table({**HEAD, "settings": SETTINGS, "rows": ROWS}).splitlines()
    assert lines[0] == (
        "`--batches=200 --steps=30`, jax devices: 1 × cpu. Measured at commit `0123456` "
        "(2026-11-28T14:03:51Z; Linux x86_64, 2 CPUs; jax 0.10.2)."
    )
    assert lines[2] == (
        "| row | batch shapes | tokens / batch | pipeline tokens/s | train tokens/s | ratio |"
    )
    assert lines[4:] == [
        "| `ding_de_en/fixed` | 1: 32 × 64 | 992 | 3,922,464 | 2,081 | 1,885 |",
        "| `ding_de_en/max_tokens` | 4: 16 × 64, 32 × 32, 64 × 16, 128 × 8 | 1,319 | 3,922,464 "
        "| 2,081 | 602 |",
        "| `shakespeare/bpe_stream` | 1: 32 × 64 | 2,048 | 3,922,464 | 2,081 | 7.3 |",
    ]


def _stub(monkeypatch) -> None:
    results = iter([{k: v for k, v in r.items() if k != "row"} for r in ROWS])
    monkeypatch.setattr(bench, "_config", lambda dataset, data_dir, **kw: dataset)
    monkeypatch.setattr(bench, "measure", lambda config, batches, steps: next(results))
    monkeypatch.setattr(bench, "_devices", lambda: "1 × cpu")
    monkeypatch.setattr("sys.argv", ["benchmarks/input_pipeline.py"])


def test_docs_writes_the_block_from_the_record(tmp_path, monkeypatch):
    _stub(monkeypatch)
    doc, out = tmp_path / "page.md", tmp_path / "r.json"
    doc.write_text(f"a\n<!-- generated: {bench.BLOCK} -->\nold\n<!-- end: {bench.BLOCK} -->\nb\n")
    names = ",".join(r["row"] for r in ROWS)
    record = bench.main([f"--rows={names}", "--batches=200", f"--out={out}", f"--docs={doc}"])
    assert json.loads(out.read_text()) == json.loads(json.dumps(record))
    assert [r["row"] for r in record["rows"]] == [r["row"] for r in ROWS]
    assert records.block(str(doc), bench.BLOCK) == bench.table(json.loads(out.read_text()))
    assert "| `ding_de_en/fixed` | 1: 32 × 64 | 992 |" in doc.read_text()
    assert doc.read_text().startswith("a\n") and doc.read_text().endswith("\nb\n")


def test_docs_needs_out(monkeypatch, capsys):
    _stub(monkeypatch)
    record_blocks.assert_docs_needs_out(bench.main, capsys)


def test_the_docs_block_is_the_committed_record():
    record_blocks.assert_block_is_committed_record(
        "docs/records/input_pipeline.json",
        "benchmarks.input_pipeline",
        "docs/benchmarks.md",
        bench.BLOCK,
        bench.table,
    )
