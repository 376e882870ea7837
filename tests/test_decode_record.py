"""The decoding benchmark's block (benchmarks/decode.py): rendered from a record, written by
``--docs``, and docs/benchmarks.md's block regenerated from the committed record once there is
one (until then the entry is pending in experiments.docs_tables). Reads JSON and markdown only:
the measurements are replaced by stand-ins."""

from __future__ import annotations

import json
import os

import record_blocks

from benchmarks import decode as bench
from deepnet_jax.common import records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORD = os.path.join(ROOT, "docs", "records", "decode.json")
HEAD = {
    "command": "python -m benchmarks.decode --out=r.json",
    "commit": "0123456789abcdef0123456789abcdef01234567+dirty",
    "date": "2026-11-28T14:03:51Z",
    "machine": "Linux x86_64, 2 CPUs",
    "jax": "0.10.2",
}
# the three rows as main writes them: the device, generation_row's, beam_row's
GENERATION = {
    "row": "generation",
    "layers": "18L-18L",
    "d_model": 64,
    "batch": 32,
    "src_len": 32,
    "length": 64,
    "outputs_agree": True,
    "cached_s": 0.4961,
    "uncached_full_s": 2.5104,
    "uncached_prefix_s": 1.7012,
    "speedup_vs_full": 5.06,
    "speedup_vs_prefix": 3.43,
}
BEAM = {
    "row": "beam",
    "beam_size": 5,
    "sentences": 256,
    "batch": 32,
    "inputs": "validation sources of /tmp/run",
    "mean_output_tokens": 12.21,
    "seconds": 6.503,
    "sentences_per_s": 39.37,
}
ROWS = [{"device": "TFRT_CPU_0", "backend": "cpu"}, GENERATION, BEAM]


def test_the_block_has_each_decoder_and_the_beam_row():
    lines = bench.table({**HEAD, "rows": ROWS}).splitlines()
    assert lines[0] == (
        "Model 18L-18L, d 64, random parameters; device `TFRT_CPU_0` (cpu). Measured at commit "
        "`0123456+dirty` (2026-11-28T14:03:51Z; Linux x86_64, 2 CPUs; jax 0.10.2)."
    )
    assert lines[2:7] == [
        "| decoder | s per batch (32 × 64 tokens) | uncached / cached |",
        "|---|---:|---:|",
        "| cached | 0.496 | 1 |",
        "| uncached_full | 2.510 | **5.06×** |",
        "| uncached_prefix | 1.701 | 3.43× |",
    ]
    assert lines[8] == "`outputs_agree: true`."
    assert lines[10] == (
        "**Beam search** (beam 5, batch 32, 256 sentences: validation sources of /tmp/run): "
        "**39.4 sentences/s** (6.50 s; 12.2 output tokens per sentence on average, EOS included)."
    )
    disagree = {**GENERATION, "outputs_agree": False}
    assert "`outputs_agree: false`." in bench.table({**HEAD, "rows": [ROWS[0], disagree, BEAM]})


def _stub(monkeypatch) -> None:
    monkeypatch.setattr(bench, "_model_config", lambda smoke: None)
    monkeypatch.setattr(bench, "generation_row", lambda *a: dict(GENERATION))
    monkeypatch.setattr(bench, "beam_row", lambda *a: dict(BEAM))
    monkeypatch.setattr("sys.argv", ["benchmarks/decode.py"])


def test_docs_writes_the_block_from_the_record(tmp_path, monkeypatch):
    _stub(monkeypatch)
    doc, out = tmp_path / "page.md", tmp_path / "r.json"
    doc.write_text(f"<!-- generated: {bench.BLOCK} -->\n<!-- end: {bench.BLOCK} -->\n")
    rows = bench.main([f"--out={out}", f"--docs={doc}"])
    record = json.loads(out.read_text())
    assert record["rows"] == json.loads(json.dumps(rows))
    assert records.block(str(doc), bench.BLOCK) == bench.table(record)
    assert "| uncached_full | 2.510 | **5.06×** |" in doc.read_text()


def test_docs_needs_out(monkeypatch, capsys):
    _stub(monkeypatch)
    record_blocks.assert_docs_needs_out(bench.main, capsys)


def test_the_docs_block_is_the_committed_record():
    record_blocks.assert_block_is_committed_record(
        "docs/records/decode.json",
        "benchmarks.decode",
        "docs/benchmarks.md",
        bench.BLOCK,
        bench.table,
    )
