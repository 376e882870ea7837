"""A GPU profile against the kernel model (benchmarks.device_profile): kernels matched to the
HLO instructions that launched them, library kernels to their custom calls in schedule order;
the committed H200 records (docs/records/h200, docs/records/h200_run2) regenerate from their
committed profiles, and docs/scaling.md's tables from the records."""

from __future__ import annotations

import json
import math
import os

import pytest

from benchmarks import device_profile, device_tables
from deepnet_jax.common import records
from deepnet_jax.scale import targets

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_HLO = """HloModule m, is_scheduled=true

%fused_add (p0: f32[64,64]) -> f32[64,64] {
  %p0 = f32[64,64]{1,0} parameter(0)
  ROOT %a = f32[64,64]{1,0} add(%p0, %p0)
}

ENTRY %main (x: f32[64,64], q: bf16[2,64,4,16]) -> f32[64,64] {
  %x = f32[64,64]{1,0} parameter(0)
  %q = bf16[2,64,4,16]{3,2,1,0} parameter(1)
  %loop_add_fusion.1 = f32[64,64]{1,0} fusion(%x), kind=kLoop, calls=%fused_add
  %custom-call.3 = (f32[64,64]{1,0}, s8[16]{0}) custom-call(%loop_add_fusion.1, %x), GEMM
  %att = (bf16[2,4,64,16]{3,1,2,0}, u8[8]{0}) custom-call(%q, %q, %q), FMHA
  %custom-call.4 = (f32[64,64]{1,0}, s8[16]{0}) custom-call(%loop_add_fusion.1, %x), GEMM
  %g = f32[64,64]{1,0} get-tuple-element(%custom-call.4), index=0
  ROOT %loop_add_fusion.2 = f32[64,64]{1,0} fusion(%g), kind=kLoop, calls=%fused_add
}
""".replace("GEMM", 'custom_call_target="__cublas$lt$matmul"').replace(
    "FMHA", 'custom_call_target="__cudnn$fmhaSoftmax"'
)


def _event(name: str, ts: float) -> dict:
    return {"name": name, "ts": ts, "dur": 1.0}


def test_library_kernels_go_to_their_custom_calls_in_schedule_order():
    """Between two named fusions, cuBLAS's kernels take the gemm calls in order and cuDNN's the
    attention call; the runtime's own copies belong to no instruction."""
    names = [
        "loop_add_fusion_1",
        "nvjet_sm90_tst_128x128",  # custom-call.3
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop",  # att
        "memcpy128",
        "sm90_xmma_gemm_f32f32",  # custom-call.4
        "loop_add_fusion_2",
    ]
    owner = device_profile.match([_event(n, i) for i, n in enumerate(names)], _HLO)
    assert owner == [
        "loop_add_fusion.1",
        "custom-call.3",
        "att",
        None,
        "custom-call.4",
        "loop_add_fusion.2",
    ]


def _close(a, b) -> bool:
    """Equal, floats to a relative 1e-9: sums of a few thousand terms in another order differ
    in the last few of float64's 16 digits."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    return a == b


_FIRST, _SECOND = device_tables.RUNS


@pytest.mark.parametrize(
    "run, name, row",
    [(_FIRST, "wmt_cudnn_dots", 1), (_SECOND, "wmt_cudnn_dots", 0)],
    ids=["first", "second"],
)
def test_the_committed_profile_record_regenerates(run, name, row):
    """The record's figures are what device_profile computes from the committed profile (the
    H200's compiled HLO and trace) with the kernel model as it is now."""
    folder = os.path.join(ROOT, run.folder)
    with open(os.path.join(folder, f"{name}.profile.json")) as f:
        record = json.load(f)
    with open(os.path.join(folder, "on_device.jsonl")) as f:
        measured = [json.loads(line) for line in f][row]
    hlo, events = device_profile.read_profile(os.path.join(folder, f"{name}.profile.tgz"))
    chip = targets.parse(measured["target"]).chip
    found = device_profile.compare(
        hlo, events, measured["profile"]["steps"], chip, measured["model_flops"]
    )
    # equal up to the order of float sums (the kernel model walks a set of computations)
    assert _close(found, {k: record[k] for k in found})
    assert (
        abs(found["measured_kernel_ms"] - measured["step_s"] * 1e3)
        < 0.05 * found["measured_kernel_ms"]
    )  # the GPU was busy: kernel time is the step's
    matched = found["measured_kernel_ms"] - found["classes"]["unmatched"]["measured_ms"]
    assert matched > 0.95 * found["measured_kernel_ms"]


def test_the_docs_tables_are_the_records():
    """Every block device_tables writes is docs/scaling.md's, as the committed records give it."""
    tables = device_tables.blocks(ROOT)
    assert set(tables) == {
        *(f"{run.prefix}-{kind}" for run in device_tables.RUNS for kind in ("steps", "classes")),
        device_tables.COMPARED,
        "h100-steps",
    }
    docs = os.path.join(ROOT, "docs", "scaling.md")
    for name, text in tables.items():
        assert records.block(docs, name) == text, f"{name}: python -m benchmarks.device_tables"


def test_the_runs_compared_are_the_steps_both_measured():
    """The second run measured three of the first run's steps again: cuDNN at dots, deepnet_3b
    at dots and the defaults; each row's times are its own records' (first and second run)."""
    first, _ = device_tables.load_run(_FIRST, ROOT)
    second, _ = device_tables.load_run(_SECOND, ROOT)
    table = device_tables.compared_table(first, second).splitlines()[2:]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in table]
    pairs = [(1, 0), (2, 1), (5, 6)]  # (first run's row, second run's row)
    assert [c[0] for c in cells] == ["wmt17_ende", "deepnet_3b", "wmt17_ende"]
    assert cells[2][1] == "(defaults: attention and remat auto)"
    for c, (i, j) in zip(cells, pairs, strict=True):
        assert first[i]["overrides"] == second[j]["overrides"]
        a, b = first[i]["step_s"] * 1e3, second[j]["step_s"] * 1e3
        assert c[3:6] == [f"{a:.1f}", f"{b:.1f}", f"{b / a:.3f}"]
