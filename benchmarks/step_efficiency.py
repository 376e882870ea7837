"""CPU efficiency of the train step, and what each optimization switch does to it.

Efficiency = analytic model FLOPs per step (``deepnet_jax.scale.flops.train_flops_per_step``:
matmuls only, backward = 2 × forward, remat recomputation not counted) ÷ step time ÷ the fp32 matmul
throughput measured in the same process (a jitted 2048 × 2048 ``jnp.dot``, best of 3; measured
before and after the steps, the larger is used).

Model (the issue's): decoder-only DeepNorm, 12 layers, d_model 256, 4 heads, FFN 1024, vocab
8000, batch 8 × 128 tokens with no padding, float32, dropout 0.1 (the library default), the
trainer's real step (``train_steps.make_train_step``: forward, backward, AdamW, metrics).

Variants (each one switch away from ``baseline``: scanned layers, remat ``full``, unfused
q/k/v, reference attention, float32, hash dropout masks):

* ``remat_none`` / ``remat_dots`` / ``remat_qkv_fc1``: ``model.remat_policy`` (what the
  backward pass saves instead of recomputing);
* ``fused_qkv``: one [d, 3, h, k] self-attention projection (``model.fused_qkv``);
* ``xla_attention``: ``jax.nn.dot_product_attention`` (``model.attention_impl="xla"``);
* ``bf16``: bfloat16 compute, float32 parameters (``model.dtype``);
* ``unrolled``: a Python loop over layers instead of ``nn.scan`` (``model.scan_layers``);
* ``dropout_jax``: masks from ``jax.random.bernoulli`` (threefry) instead of the keyed hash
  (``model.dropout_rng="jax"``);
* ``best``: the combination the measurements pick (``--best``, default: fused q/k/v, no
  remat).

All variants are compiled first; then ``--rounds`` rounds each time ``--steps`` steps of every
variant in turn (so a slow spell of the machine hits all of them), and the median round is
reported. Step time is wall-clock per step with one ``block_until_ready`` per round.

Run: ``python -m benchmarks.step_efficiency``; ``--smoke`` runs a 2-layer, 64-wide model for
the tests. Prints one JSON line per variant (``row: "variant"``) and one summary line
(``row: "summary"``). Current figures: docs/benchmarks.md, "CPU efficiency, and what each
optimization switch measures". ``--out`` writes them as a record; ``--docs`` (with ``--out``)
writes the ``step-efficiency`` block of that file from it (``benchmarks.step_efficiency_tables``,
which also makes the allocator comparison from several runs' records;
``tests/test_step_efficiency_record.py`` regenerates them from the committed records)::

    python -m benchmarks.step_efficiency --out=docs/records/step_efficiency.json \\
        --docs=docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import step_efficiency_tables
from benchmarks.host_memory import malloc_env, minor_page_faults
from deepnet_jax.common import records
from deepnet_jax.model import architectures
from deepnet_jax.model import inputs as model_inputs
from deepnet_jax.scale import flops
from deepnet_jax.training import actions as train_actions
from deepnet_jax.training import config as train_config
from deepnet_jax.training import optimizers, train
from deepnet_jax.training import steps as train_steps
from deepnet_jax.training.run_config import RunConfig

VARIANTS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "remat_none": {"remat_policy": "none"},
    "remat_dots": {"remat_policy": "dots"},
    "remat_qkv_fc1": {"remat_policy": "qkv_fc1"},
    "fused_qkv": {"fused_qkv": True},
    "xla_attention": {"attention_impl": "xla"},
    "bf16": {"dtype": "bfloat16"},
    "unrolled": {"scan_layers": False},
    "dropout_jax": {"dropout_rng": "jax"},
}
BEST = "fused_qkv=True,remat_policy=none"
SIZES = {
    "full": {"layers": 12, "d_model": 256, "heads": 4, "ffn": 1024, "vocab": 8000},
    "smoke": {"layers": 2, "d_model": 64, "heads": 2, "ffn": 128, "vocab": 64},
}


def parse_overrides(text: str) -> dict[str, Any]:
    """``"a=1,b=x"`` → ``{"a": 1, "b": "x"}`` (ints, floats, True/False, else strings)."""
    out: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"--best: {part!r} is not field=value")
        lowered = {"true": True, "false": False}.get(value.lower())
        if lowered is not None:
            out[key] = lowered
            continue
        for cast in (int, float):
            try:
                out[key] = cast(value)
                break
            except ValueError:
                pass
        else:
            out[key] = value
    return out


def config(size: dict[str, int], overrides: dict[str, Any]) -> RunConfig:
    """The training config of one variant (the benchmark's model with ``overrides``), typed."""
    c = train_config.default_config()
    m = c.model
    m.attention_impl = "reference"  # what attention_impl="auto" picks on a CPU (attention_auto)
    m.arch, m.scheme = "decoder", "deepnorm"
    m.num_encoder_layers, m.num_decoder_layers = 0, size["layers"]
    m.d_model, m.num_heads, m.ffn_dim = size["d_model"], size["heads"], size["ffn"]
    m.vocab_size, m.max_len = size["vocab"], 128
    m.remat_policy = "full"  # the baseline's (a training config's auto plans none here: remat_none)
    for key, value in overrides.items():
        if key not in m:
            raise ValueError(f"variant field {key!r} is not a model field")
        m[key] = value
    c.data.dataset, c.data.max_len = "synthetic_reversal", 128
    c.optimizer.learning_rate = 1e-3
    train.validate(c)
    return RunConfig.from_config(c)


def full_batch(rows: int, length: int, vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A decoder batch with no padding: every one of rows × length positions is a target."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, vocab, size=(rows, length + 1)).astype(np.int32)
    return {
        "inputs": tokens[:, :-1],
        "targets": tokens[:, 1:],
        "weights": np.ones((rows, length), np.float32),
    }


class Variant:
    """One compiled train step with its own parameters and optimizer state."""

    def __init__(self, name: str, c: RunConfig, batch: dict[str, np.ndarray]):
        self.name = name
        model = architectures.build(c.model)
        self.params = model_inputs.init_params(model, "decoder", batch, c.seed)
        optimizer = optimizers.make_optimizer(c)
        self.opt_state = optimizer.init(self.params)
        self.batch = jax.device_put(batch)
        self.lr = np.float32(c.optimizer.learning_rate)
        loss_fn = train_steps.make_loss_fn(model, "decoder")
        step = train_steps.make_train_step(  # the trainer's step, with its non-finite gate
            loss_fn, optimizer, jax.random.key(c.seed), halt_after=train_actions.halt_after(c)
        )
        self.bad_in_a_row = jnp.zeros((), jnp.int32)
        start = time.perf_counter()
        self.step = step.lower(
            self.params, self.opt_state, self.batch, 0, self.lr, self.bad_in_a_row
        ).compile()
        self.compile_s = time.perf_counter() - start
        self.flops = flops.train_flops_per_step(c.model, {k: v.shape for k, v in batch.items()})
        self.times: list[float] = []
        self.faults: list[float] = []
        self.run(1)  # warm-up

    def run(self, steps: int) -> float:
        """Seconds per step over ``steps`` steps; appends the page faults per step."""
        faults = minor_page_faults()
        start = time.perf_counter()
        for i in range(steps):
            self.params, self.opt_state, metrics = self.step(
                self.params, self.opt_state, self.batch, i, self.lr, self.bad_in_a_row
            )
            self.bad_in_a_row = metrics["bad_in_a_row"]
        jax.block_until_ready(metrics)
        seconds = (time.perf_counter() - start) / steps
        self.faults.append((minor_page_faults() - faults) / steps)
        return seconds


def variant_row(
    v: Variant, fields: dict[str, Any], first_s: float, tokens: int, peak: float
) -> dict[str, Any]:
    """A timed variant's row: median step time (s) over its rounds, ÷ the first variant's
    (``first_s``), ``tokens`` per step ÷ step time, efficiency = model FLOPs ÷ step time ÷
    ``peak`` (matmul FLOP/s), compile time, median page faults per step (the warm-up's left out)
    and every round's step time."""
    step_s = statistics.median(v.times)
    return {
        "row": "variant",
        "variant": v.name,
        "fields": fields,
        "step_s": round(step_s, 5),
        "vs_first": round(step_s / first_s, 3),
        "tokens_per_s": round(tokens / step_s),
        "model_gflops_per_step": round(v.flops / 1e9, 3),
        "efficiency": round(v.flops / step_s / peak, 4),
        "compile_s": round(v.compile_s, 2),
        "page_faults_per_step": round(statistics.median(v.faults[1:])),
        "rounds_step_s": [round(t, 5) for t in v.times],
    }


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="tiny model, 2 rounds (for the tests)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=5, help="steps per variant per round")
    p.add_argument("--variants", default=",".join([*VARIANTS, "best"]))
    p.add_argument("--best", default=BEST, help="model fields of the 'best' variant")
    p.add_argument("--out", help="write the rows as a JSON record here (common.records)")
    p.add_argument("--docs", help="write the step-efficiency block of this file (needs --out)")
    args = p.parse_args(argv)
    if args.docs and not args.out:
        p.error("--docs: needs --out (the block is made from the committed record)")
    head = records.header()
    size = SIZES["smoke" if args.smoke else "full"]
    rounds, steps = (2, 1) if args.smoke else (args.rounds, args.steps)
    table = {**VARIANTS, "best": parse_overrides(args.best)}
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    unknown = [n for n in names if n not in table]
    if unknown:
        raise SystemExit(f"--variants: {unknown[0]!r} unknown; allowed are {', '.join(table)}")
    configs = {n: config(size, table[n]) for n in names}  # every error before compiling
    rows, length = (4, 16) if args.smoke else (8, 128)
    batch = full_batch(rows, length, size["vocab"])
    peak_before = flops.measured_matmul_flops_per_s()
    variants = [Variant(n, configs[n], batch) for n in names]
    for _ in range(rounds):
        for v in variants:
            v.times.append(v.run(steps))
    peak = max(peak_before, flops.measured_matmul_flops_per_s())
    out, base = [], statistics.median(variants[0].times)
    for v in variants:
        out.append(variant_row(v, table[v.name], base, rows * length, peak))
        print(json.dumps(out[-1]), flush=True)
    summary = {
        "row": "summary",
        "matmul_tflops_per_s": round(peak / 1e12, 4),
        "matmul_tflops_per_s_before": round(peak_before / 1e12, 4),
        "batch": [rows, length],
        "model": size,
        "jax": jax.__version__,
        "devices": f"{jax.device_count()} × {jax.devices()[0].device_kind}",
        "malloc_env": malloc_env(),
    }
    print(json.dumps(summary), flush=True)
    if args.out:
        record = records.write(args.out, {"rows": [*out, summary]}, head)
        if args.docs:  # (--docs needs --out)
            block = step_efficiency_tables.BLOCK
            records.replace_block(args.docs, block, step_efficiency_tables.table(record))
    return [*out, summary]


if __name__ == "__main__":
    main(sys.argv[1:])
