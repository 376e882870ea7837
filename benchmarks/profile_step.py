"""Where the train step's time goes on CPU: XLA's per-op (thunk) times, summed and classified.

Runs the trainer's step of ``benchmarks.step_efficiency``'s model (the d_model-256 decoder, or
its ``--smoke`` size) with the model fields given by ``--fields`` (``field=value,...``, as
``step_efficiency --best``), traces ``--steps`` steps with ``jax.profiler.trace`` (XLA:CPU
emits one trace event per executed op when started with ``--xla_cpu_enable_xprof_traceme``,
which this script adds to ``XLA_FLAGS`` before JAX starts), converts the trace with ``xprof``
(the ``bench`` extra) and sums each op's time. Ops are matched to the compiled HLO by name and
put in one of these classes:

* ``dot_ynnpack``: matmuls XLA hands to YNNPACK (``ynn_fusion*``);
* ``dot_xla``: matmuls XLA runs itself (``dot*``);
* ``copy_transpose``: copies and transposes (e.g. operands laid out for a dot);
* ``dynamic_update_slice`` / ``dynamic_slice``: writing and reading the scan's stacked
  per-layer residuals (and the stacked parameters);
* ``zero_fill``: broadcasts of a constant (the scan's output buffers are zero-filled);
* ``elementwise``: every other fusion (LayerNorm, softmax, dropout, residuals, Adam, …).

Run: ``python -m benchmarks.profile_step [--fields=remat_policy=none,scan_layers=False]``.
Prints JSON lines: ``row: "op"`` for the ``--top`` slowest ops (milliseconds per step, calls per
step, HLO opcode and shape, class), ``row: "class"`` per class, and one ``row: "summary"``
(wall seconds per step while tracing, summed op milliseconds per step, per XLA worker
thread the milliseconds per step it spent inside ops, and the allocator settings the process
started with, ``malloc_env``). ``--out`` writes them as a record;
``benchmarks.profile_step_tables`` makes docs/benchmarks.md's table from several. Op times
are per thread: when XLA runs two ops at once, their sum exceeds the wall time. Times are from
a noisy machine; compare classes within one run.
"""

from __future__ import annotations

import os

# XLA reads its flags once, when the backend starts: add the per-op trace events first.
_TRACE_FLAG = "--xla_cpu_enable_xprof_traceme=true"
if _TRACE_FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_TRACE_FLAG}".strip()

import argparse  # noqa: E402
import collections  # noqa: E402
import glob  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

import jax  # noqa: E402

from benchmarks import host_memory, step_efficiency  # noqa: E402
from deepnet_jax.common import records  # noqa: E402

CLASSES = (
    "dot_ynnpack",
    "dot_xla",
    "copy_transpose",
    "dynamic_update_slice",
    "dynamic_slice",
    "zero_fill",
    "elementwise",
)
# Ops that contain other ops (their events would count their bodies twice).
CONTAINERS = ("while", "call", "conditional")
# "name = shape opcode(": the shape is one token, or a tuple "(…)" that may contain spaces.
_HLO_DEF = re.compile(r"\s*(?:ROOT )?%?([\w.\-]+) = (\(.*?\)|\S+) ([a-z][\w\-]*)\(")


def hlo_ops(hlo_text: str) -> dict[str, tuple[str, str]]:
    """Instruction name → (shape, opcode) for every instruction of a compiled HLO module."""
    ops: dict[str, tuple[str, str]] = {}
    for line in hlo_text.splitlines():
        m = _HLO_DEF.match(line)
        if m:
            ops.setdefault(m.group(1), (m.group(2), m.group(3)))
    return ops


def classify(name: str, opcode: str) -> str:
    """The class (``CLASSES``) of one executed op, from its HLO name and opcode."""
    if name.startswith("ynn_fusion"):
        return "dot_ynnpack"
    if opcode == "dot" or name.startswith("dot"):
        return "dot_xla"
    if "dynamic-update-slice" in name or opcode == "dynamic-update-slice":
        return "dynamic_update_slice"
    if "dynamic-slice" in name or opcode == "dynamic-slice":
        return "dynamic_slice"
    if "transpose" in name or "copy" in name or opcode in ("copy", "transpose"):
        return "copy_transpose"
    if name.startswith("wrapped_broadcast") or opcode == "broadcast":
        return "zero_fill"
    return "elementwise"


def trace_events(trace_dir: str) -> list[dict[str, Any]]:
    """The trace viewer's events of the newest profile under ``trace_dir`` (a kept
    ``--trace_dir`` may hold the profiles of earlier runs too)."""
    from xprof.convert import raw_to_tool_data

    path = max(glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True), key=os.path.getmtime)
    data, _ = raw_to_tool_data.xspace_to_tool_data([path], "trace_viewer@", {})
    payload = json.loads(data)
    return payload["traceEvents"] if isinstance(payload, dict) else payload


def summarize(
    events: list[dict[str, Any]], ops: dict[str, tuple[str, str]], steps: int, top: int
) -> list[dict[str, Any]]:
    """Per-op, per-class and per-thread rows (milliseconds per step) from trace events."""
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    total_us: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    per_thread: collections.Counter[str] = collections.Counter()
    for e in events:
        name = e.get("name", "")
        if e.get("ph") != "X" or name not in ops or ops[name][1] in CONTAINERS:
            continue
        total_us[name] += e.get("dur", 0)
        calls[name] += 1
        per_thread[threads.get((e["pid"], e["tid"]), str(e["tid"]))] += e.get("dur", 0)
    rows: list[dict[str, Any]] = []
    for name, us in total_us.most_common(top):
        shape, opcode = ops[name]
        rows.append(
            {
                "row": "op",
                "op": name,
                "class": classify(name, opcode),
                "ms_per_step": round(us / 1e3 / steps, 3),
                "calls_per_step": calls[name] / steps,
                "opcode": opcode,
                "shape": shape,
            }
        )
    by_class = collections.Counter({c: 0.0 for c in CLASSES})
    for name, us in total_us.items():
        by_class[classify(name, ops[name][1])] += us
    for cls in CLASSES:
        rows.append(
            {"row": "class", "class": cls, "ms_per_step": round(by_class[cls] / 1e3 / steps, 3)}
        )
    rows.append(
        {
            "row": "summary",
            "ops_ms_per_step": round(sum(total_us.values()) / 1e3 / steps, 3),
            "ms_per_step_by_thread": thread_rows(per_thread, steps),
        }
    )
    return rows


def thread_rows(per_thread: dict[str, float], steps: int) -> dict[str, float]:
    """Milliseconds per step per thread, the threads named by pool (``tf_XLAEigen#0``, …; the
    numeric suffix of a thread's name differs from run to run)."""
    out: dict[str, float] = {}
    counts: collections.Counter[str] = collections.Counter()
    for name, us in sorted(per_thread.items(), key=lambda kv: -kv[1]):
        pool = name.split("/")[0]
        out[f"{pool}#{counts[pool]}"] = round(us / 1e3 / steps, 3)
        counts[pool] += 1
    return out


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="tiny model (for the tests)")
    p.add_argument("--fields", default="", help="model fields, e.g. remat_policy=none")
    p.add_argument("--steps", type=int, default=3, help="traced steps")
    p.add_argument("--top", type=int, default=20, help="slowest ops to list")
    p.add_argument("--trace_dir", default="", help="keep the trace here (default: a temp dir)")
    p.add_argument("--out", help="write the rows as a JSON record here (common.records)")
    args = p.parse_args(argv)
    head = records.header()
    if args.steps < 1 or args.top < 0:
        raise SystemExit(f"--steps={args.steps} must be ≥ 1 and --top={args.top} ≥ 0")
    size = step_efficiency.SIZES["smoke" if args.smoke else "full"]
    fields = step_efficiency.parse_overrides(args.fields)
    c = step_efficiency.config(size, fields)  # a bad field fails here, before compiling
    rows_, length = (4, 16) if args.smoke else (8, 128)
    batch = step_efficiency.full_batch(rows_, length, size["vocab"])
    variant = step_efficiency.Variant("profiled", c, batch)  # compiled and warmed up
    variant.run(2)
    with tempfile.TemporaryDirectory() as tmp:
        trace_dir = args.trace_dir or tmp
        with jax.profiler.trace(trace_dir):
            start = time.perf_counter()
            variant.run(args.steps)
            wall_s = (time.perf_counter() - start) / args.steps
        events = trace_events(trace_dir)
    rows = summarize(events, hlo_ops(variant.step.as_text()), args.steps, args.top)
    rows[-1].update({"wall_s_per_step": round(wall_s, 5), "fields": fields, "model": size})
    rows[-1]["malloc_env"] = host_memory.malloc_env()  # e.g. GLIBC_TUNABLES=glibc.malloc.hugetlb=1
    for row in rows:
        print(json.dumps(row), flush=True)
    if args.out:
        records.write(args.out, {"rows": rows}, head)
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
