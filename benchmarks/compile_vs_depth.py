"""Compile time, HLO size, temporary memory and step time of the full train step vs depth.

Run from the repository root (the package is imported from the working tree)::

    python -m benchmarks.compile_vs_depth

Quick run::

    python -m benchmarks.compile_vs_depth --rows=scan:6,scan:100,unroll:6 --policies=

Nested (√L) scan against the flat one, on a model whose saved residuals dominate (large B·T,
small d): the committed record and docs/scaling.md's table (block ``grouped-vs-flat``,
rendered by ``compile_vs_depth_report.grouped_table``; ``tests/test_compile_vs_depth_record.py``
regenerates it)::

    python -m benchmarks.compile_vs_depth --rows=scan:64,scan:256,scan:1024,group:64,\
group:256,group:1024 --policies= --d_model=8 --num_heads=1 --ffn_dim=16 --vocab_size=16 \
--batch_size=512 --seq_len=16 --steps=3 --out=docs/records/compile_vs_depth_grouped.json \
--docs=docs/scaling.md --block=grouped-vs-flat

Summary of a saved, possibly partial, run::

    python -m benchmarks.compile_vs_depth --summarize=results.jsonl

The committed record and the docs' tables (block ``compile-vs-depth`` of docs/benchmarks.md,
rendered by ``compile_vs_depth_report.table``; ``tests/test_compile_vs_depth_record.py``
regenerates it from the record)::

    python -m benchmarks.compile_vs_depth --rows=scan:6,scan:100,scan:1000,unroll:6,unroll:12 \
--out=docs/records/compile_vs_depth.json --docs=docs/benchmarks.md

Each row (``compile_vs_depth_measure.measure_row``) builds a tiny-width decoder-only model, jits
one train step (``value_and_grad`` of ``deepnet_jax.training.steps.make_loss_fn`` followed by an
Adam update taking the learning rate as an argument), lowers it on abstract inputs
(``jax.eval_shape`` of the init, ``jax.ShapeDtypeStruct`` batch), times ``.lower()`` and
``.compile()`` separately, reads ``compiled.memory_analysis().temp_size_in_bytes`` and the HLO
text size, then runs the compiled step on real arrays (one warm-up, then ``--steps`` timed
runs). An unreported 1-layer row is compiled first so that the first row does not pay JAX's
one-time start-up costs (``--no_warmup`` skips it).

Output: one JSON line per row (``depth``, ``layout``, ``remat_policy``, ``lower_s``,
``compile_s``, ``compile_cpu_s`` — the process's CPU seconds while compiling —,
``hlo_chars``, ``temp_bytes``, ``step_s_median``, ``params``, ``group_size``),
then one summary JSON line: the compile-time ratio scanned 1000 / scanned 6 (target ≤ 1.5; wall
clock, and the same ratio of compile CPU time), the
temp-bytes slope per layer of the scanned "full" policy between depths 100 and 1000 against the
limit of one layer's float32 gradient bytes + 2·B·T·d_model·4 bytes and, where both layouts
have rows at two or more depths, how temp bytes grow from each depth to the next (flat: ~the
depth ratio; grouped: ~its square root) and grouped ÷ flat temp bytes, step and compile time;
for the unrolled rows, how compile time, HLO size, temp bytes and step time grow from each
depth to the next and unrolled ÷ scanned at equal depth (``compile_vs_depth_report``).
``--out`` writes a record: the header (command, commit, date, machine, jax), the setup, every
row and the summary.

``--rows`` is a comma-separated list of ``layout:depth[:policy]`` (layout ``scan``, ``group``
— the nested scan, ``model.scan_group_size=-1``: groups of ⌈√depth⌉ layers — or ``unroll``,
policy default ``full``); ``--policies`` adds scanned rows at ``--policy_depth`` for each listed
remat policy (empty: none). Rows run scanned first, then grouped, then the policy rows, then the
unrolled rows.

XLA:CPU's compile time and memory for the *unrolled* step grow faster than quadratically with
depth, so the default unrolled rows stop at 24 layers; ``--rows=...,unroll:50,unroll:100`` asks
for deeper ones on a bigger machine. Measured costs and current figures: docs/benchmarks.md,
"Compile time and memory vs depth".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from benchmarks import compile_vs_depth_report as report
from benchmarks.compile_vs_depth_measure import (
    F32_BYTES,
    Row,
    Setup,
    measure_row,
    one_layer_param_bytes,
)
from deepnet_jax.common import records

DEFAULT_ROWS = "scan:6,scan:100,scan:1000,unroll:6,unroll:12,unroll:24"
DEFAULT_POLICIES = "none,dots,qkv_fc1"
LAYOUTS = ("scan", "group", "unroll")


def parse_row(item: str) -> Row:
    """One ``layout:depth[:policy]`` item."""
    parts = item.split(":")
    if len(parts) not in (2, 3) or parts[0] not in LAYOUTS or not parts[1].isdigit():
        raise ValueError(f"row {item!r} is not layout:depth[:policy] with layout in {LAYOUTS}")
    return Row(parts[0], int(parts[1]), parts[2] if len(parts) == 3 else "full")


def parse_rows(rows: str, policies: str, policy_depth: int) -> list[Row]:
    """Scanned, then grouped ``--rows``, then one scanned row per extra policy, then unrolled
    ``--rows``.

    Unrolled rows go last because their compile time grows fastest with depth.
    """
    listed = [parse_row(s.strip()) for s in rows.split(",") if s.strip()]
    extra = [Row("scan", policy_depth, p.strip()) for p in policies.split(",") if p.strip()]
    scanned = [r for r in listed if r.layout != "unroll"]
    scanned.sort(key=lambda r: r.layout != "scan")  # stable: flat rows, then grouped rows
    return scanned + extra + [r for r in listed if r.layout == "unroll"]


def summary(results: list[dict], setup: Setup) -> dict[str, Any]:
    """The summary line (``compile_vs_depth_report.summary``) with this setup's per-layer
    limit: one layer's float32 gradient + 2·B·T·d_model·4 bytes."""
    activation_bytes = 2 * setup.batch_size * setup.seq_len * setup.d_model * F32_BYTES
    return report.summary(results, one_layer_param_bytes(setup), activation_bytes)


def warm_up(setup: Setup) -> None:
    """Compile one 1-layer step first, so the first row does not pay JAX's one-time costs."""
    measure_row(dataclasses.replace(setup, steps=1), Row("scan", 1))


def emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


def read_results(path: str) -> list[dict[str, Any]]:
    """The row records of a saved run (its JSON lines other than summaries)."""
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.startswith("{")]
    return [r for r in lines if not r.get("summary")]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scheme", default="deepnorm")
    p.add_argument("--d_model", type=int, default=32)
    p.add_argument("--num_heads", type=int, default=2)
    p.add_argument("--ffn_dim", type=int, default=64)
    p.add_argument("--vocab_size", type=int, default=64)
    p.add_argument("--batch_size", type=int, default=4)
    p.add_argument("--seq_len", type=int, default=16)
    p.add_argument("--learning_rate", type=float, default=1e-3)
    p.add_argument("--steps", type=int, default=5, help="timed steps per row, after 1 warm-up")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rows", default=DEFAULT_ROWS, help="layout:depth[:policy],…")
    p.add_argument("--policies", default=DEFAULT_POLICIES, help="extra scanned remat policies")
    p.add_argument("--policy_depth", type=int, default=100, help="depth of the --policies rows")
    p.add_argument("--no_warmup", action="store_true", help="skip the unreported warm-up row")
    p.add_argument(
        "--summarize", metavar="FILE", help="print only the summary of a saved (partial) run"
    )
    p.add_argument("--out", help="write the rows and the summary as a JSON record here")
    p.add_argument("--docs", help="write the --block block of this file from the record")
    p.add_argument(
        "--block",
        default="compile-vs-depth",
        choices=tuple(report.BLOCKS),
        help="which block --docs writes: compile-vs-depth (docs/benchmarks.md) or "
        "grouped-vs-flat (docs/scaling.md)",
    )
    return p.parse_args()


def setup_from(args: argparse.Namespace) -> Setup:
    return Setup(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Setup)})


def main() -> None:
    args = parse_args()
    setup = setup_from(args)
    if args.summarize:
        emit(summary(read_results(args.summarize), setup))
        return
    header = records.header()  # the commit as the run starts
    rows = parse_rows(args.rows, args.policies, args.policy_depth)
    if not args.no_warmup:
        warm_up(setup)
    results = []
    for row in rows:
        results.append(measure_row(setup, row))
        emit(results[-1])
    record = {
        **header,
        "setup": dataclasses.asdict(setup),
        "warmup_row": not args.no_warmup,
        "rows": results,
        "summary": summary(results, setup),
    }
    emit(record["summary"])
    if args.out:
        with open(args.out, "w") as f:
            json.dump(record, f, indent=1)
            f.write("\n")
    if args.docs:
        records.replace_block(args.docs, args.block, report.BLOCKS[args.block](record))


if __name__ == "__main__":
    main()
