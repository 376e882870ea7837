"""What dropout masks cost: drawing one train step's masks alone, per mask generator, and
dropout's share of the train step per ``model.dropout_rng``.

Model: ``step_efficiency``'s (decoder-only DeepNorm, 12 layers, d_model 256, 4 heads, FFN 1024,
vocab 8000, batch 8 × 128, float32, remat ``full``) with dropout 0.1 everywhere, as in
``vs_torchscale``: the embeddings, each sublayer's output, the attention probabilities and
the FFN activation.

* ``masks`` rows: one jitted function draws every mask of one step (one key per mask, by
  ``fold_in``) and returns them as booleans. Generators: ``hash`` (``model.dropout_rng="hash"``,
  ``model.dropout.dropout_bits``, the default) and ``jax.random.bernoulli`` with keys of each of
  JAX's implementations: ``threefry2x32`` (JAX's default, ``dropout_rng="jax"``),
  ``philox4x32``, ``rbg`` and ``unsafe_rbg``. The time of a call is the median over
  ``--rounds`` rounds in which every generator runs once in turn, reported as a ratio to
  ``hash``'s and ``threefry2x32``'s. The masks' count and element count are deterministic.
* ``step`` rows (``--no_step`` skips them): ``step_efficiency.Variant`` train steps with
  dropout 0 (``none``), ``hash``, ``jax`` (threefry) and ``jax`` with philox4x32 keys, run in
  turn for ``--rounds`` rounds of ``--steps`` steps; dropout's share of a step is its median
  step time less ``none``'s.

Run from the repository root::

    python -m benchmarks.dropout_masks --out=docs/records/dropout_masks.json \\
        --docs=docs/benchmarks.md
    python -m benchmarks.dropout_masks --smoke     # 2 layers, d 64 (the tests)

``--out`` writes the record (command, commit, machine, date, setup, every row); ``--docs``
writes the ``dropout-masks`` block of that file from it (``tests/test_dropout_masks_record.py``
regenerates it from the committed record).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from benchmarks import step_efficiency
from deepnet_jax.common import records
from deepnet_jax.model.dropout import dropout_bits

RATE = 0.1
GENERATORS = ("hash", "threefry2x32", "philox4x32", "rbg", "unsafe_rbg")
STEP_VARIANTS = {  # name: (dropout rate, model.dropout_rng, key implementation)
    "none": (0.0, "hash", "threefry2x32"),
    "hash": (RATE, "hash", "threefry2x32"),
    "jax (threefry2x32)": (RATE, "jax", "threefry2x32"),
    "jax (philox4x32)": (RATE, "jax", "philox4x32"),
}


def mask_shapes(size: dict[str, int], rows: int, length: int) -> list[tuple[int, ...]]:
    """The shapes of one step's masks: the embeddings', then per layer the attention
    probabilities [B, H, T, T], the FFN activation [B, T, F] and the two sublayer outputs
    [B, T, D]."""
    b, t, d = rows, length, size["d_model"]
    layer = [(b, size["heads"], t, t), (b, t, size["ffn"]), (b, t, d), (b, t, d)]
    return [(b, t, d), *layer * size["layers"]]


def generator(name: str) -> tuple[Callable[[jax.Array, tuple[int, ...]], jax.Array], str]:
    """``(mask(key, shape) -> bool keep-mask, key implementation)`` of one generator."""
    if name == "hash":
        threshold = jnp.uint32(int(RATE * 2**32))
        return (lambda key, shape: dropout_bits(key, shape) >= threshold), "threefry2x32"
    return (lambda key, shape: jax.random.bernoulli(key, 1.0 - RATE, shape)), name


def compiled_masks(name: str, shapes: list[tuple[int, ...]]) -> tuple[Callable, jax.Array]:
    """The compiled function drawing every mask, and its key."""
    mask, impl = generator(name)

    def draw(key):
        return tuple(mask(jax.random.fold_in(key, i), s) for i, s in enumerate(shapes))

    key = jax.random.key(0, impl=impl)
    return jax.jit(draw).lower(key).compile(), key


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - start


def mask_rows(shapes: list[tuple[int, ...]], rounds: int) -> list[dict[str, Any]]:
    compiled = {n: compiled_masks(n, shapes) for n in GENERATORS}
    for fn, key in compiled.values():
        timed(lambda fn=fn, key=key: fn(key))  # warm-up
    times: dict[str, list[float]] = {n: [] for n in GENERATORS}
    for _ in range(rounds):
        for n, (fn, key) in compiled.items():
            times[n].append(timed(lambda fn=fn, key=key: fn(key)))
    median = {n: round(statistics.median(t), 5) for n, t in times.items()}  # ratios of these
    return [
        {
            "row": "masks",
            "generator": n,
            "median_s": median[n],
            "vs_hash": round(median[n] / median["hash"], 3),
            "vs_threefry": round(median[n] / median["threefry2x32"], 3),
            "rounds_s": [round(t, 5) for t in times[n]],
        }
        for n in GENERATORS
    ]


def step_rows(size: dict[str, int], rows: int, length: int, rounds: int, steps: int) -> list:
    batch = step_efficiency.full_batch(rows, length, size["vocab"])
    variants = []
    for name, (rate, rng, impl) in STEP_VARIANTS.items():
        fields = {"attention_dropout": rate, "activation_dropout": rate, "dropout_rng": rng}
        c = step_efficiency.config(size, {"dropout": rate, **fields})
        previous = jax.config.jax_default_prng_impl
        jax.config.update("jax_default_prng_impl", impl)  # the step's key (and so every mask's)
        try:
            variants.append(step_efficiency.Variant(name, c, batch))
        finally:
            jax.config.update("jax_default_prng_impl", previous)
    for _ in range(rounds):
        for v in variants:
            v.times.append(v.run(steps))
    median = {v.name: round(statistics.median(v.times), 5) for v in variants}
    share = {n: s - median["none"] for n, s in median.items()}
    return [
        {
            "row": "step",
            "variant": v.name,
            "median_step_s": median[v.name],
            "vs_none": round(median[v.name] / median["none"], 3),
            "dropout_s": round(share[v.name], 5),
            "dropout_share": round(share[v.name] / median[v.name], 3),
            "rounds_step_s": [round(t, 5) for t in v.times],
        }
        for v in variants
    ]


def table(record: dict) -> str:
    """The ``dropout-masks`` block of docs/benchmarks.md: the masks' table, then the step's."""
    m = record["masks"]
    lines = [
        f"One step's masks: {m['count']} masks, {m['elements']:,} elements "
        f"({m['elements_per_layer']:,} per layer).",
        "",
        "| generator | time ÷ `hash` | time ÷ `threefry2x32` | median (s) |",
        "|---|---:|---:|---:|",
    ]
    for r in (r for r in record["rows"] if r["row"] == "masks"):
        lines.append(
            f"| `{r['generator']}` | {r['vs_hash']:.2f} | {r['vs_threefry']:.2f} "
            f"| {r['median_s']:.3f} |"
        )
    step = [r for r in record["rows"] if r["row"] == "step"]
    if step:
        hash_s = next(r["median_step_s"] for r in step if r["variant"] == "hash")
        lines += [
            "",
            "| train step | step ÷ no dropout | step ÷ `hash` "
            "| dropout's share (step − no dropout) | median step (s) |",
            "|---|---:|---:|---:|---:|",
        ]
        for r in step:
            share = "—" if r["variant"] == "none" else f"{r['dropout_s']:+.3f} s"
            lines.append(
                f"| {r['variant']} | {r['vs_none']:.2f} | {r['median_step_s'] / hash_s:.2f} "
                f"| {share} | {r['median_step_s']:.3f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="2 layers, d 64, 2 rounds (the tests)")
    p.add_argument("--rounds", type=int, default=7, help="rounds of every generator / variant")
    p.add_argument("--steps", type=int, default=2, help="train steps per variant per round")
    p.add_argument("--no_step", action="store_true", help="masks only, no train steps")
    p.add_argument("--out", help="write the record here")
    p.add_argument("--docs", help="write the dropout-masks block of this file from the record")
    args = p.parse_args(argv)
    header = records.header()  # the commit as the run starts
    size = step_efficiency.SIZES["smoke" if args.smoke else "full"]
    rows, length = (4, 16) if args.smoke else (8, 128)
    rounds, steps = (2, 1) if args.smoke else (args.rounds, args.steps)
    shapes = mask_shapes(size, rows, length)
    masks = {
        "count": len(shapes),
        "elements": sum(math.prod(s) for s in shapes),
        "elements_per_layer": sum(math.prod(s) for s in shapes[1:5]),
        "shapes": [list(s) for s in shapes[:5]],  # the embeddings', then one layer's
    }
    print(json.dumps({"masks": masks}), flush=True)
    out = mask_rows(shapes, rounds)
    if not args.no_step:
        out += step_rows(size, rows, length, rounds, steps)
    for r in out:
        print(json.dumps(r), flush=True)
    setup = {"model": size, "batch": [rows, length], "rate": RATE, "rounds": rounds}
    record = {**header, "setup": {**setup, "steps": steps}, "masks": masks, "rows": out}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(record, f, indent=1)
            f.write("\n")
    if args.docs:
        records.replace_block(args.docs, "dropout-masks", table(record))
    return record


if __name__ == "__main__":
    main()
