"""How much a freshly initialized main-job model's predictions depend on its source, for the
default block and the modern arms of docs/main_job.md ("The main job on a modern block"), as a
record.

    python -m benchmarks.source_at_init --out=docs/records/source_at_init.json \\
        --docs=docs/main_job.md

For each arm (:data:`ARMS`: the main job's model, ``configs/default.py``, with the arm's model
overrides) and each initialization seed, the encoder-decoder is initialized at a vocabulary of
:data:`VOCAB` tokens and run (deterministic) on :data:`SOURCES` random sources of
:data:`LENGTH` tokens and on :data:`SOURCES` other random sources, with the same random target
prefix. The figure is the mean over sentences and target positions of
KL(p(· | source) ‖ p(· | other source)) in nats: 0 for a decoder that ignores its source. A
model whose source path is broken at initialization would show 0 here before any training.
Everything is deterministic for the seeds (threefry keys, CPU, float32).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import jax
import jax.numpy as jnp

from deepnet_jax.cli import log_setup
from deepnet_jax.common import records
from deepnet_jax.configs import default
from deepnet_jax.model.architectures import build
from deepnet_jax.model.config import TransformerConfig
from deepnet_jax.training import attention_auto
from deepnet_jax.training import config as train_config
from deepnet_jax.training.run_config import RunConfig

# the arms of docs/main_job.md: the model overrides of benchmarks.main_job's --arm runs
ARMS: dict[str, dict[str, Any]] = {
    "default": {},
    "modern": {"positions": "rope", "activation": "swiglu", "ffn_dim": 344, "norm": "rmsnorm"},
    "modern-sinusoidal": {"activation": "swiglu", "ffn_dim": 344, "norm": "rmsnorm"},
}
VOCAB = 100  # token ids 4..99 are drawn (0-3: the special tokens)
SOURCES = 4
LENGTH = 12
BLOCK = "source-at-init"


def model_of(overrides: dict[str, Any]) -> TransformerConfig:
    """The main job's model config with ``overrides`` and a :data:`VOCAB`-token vocabulary, its
    attention kernel the one the trainer picks on the CPU."""
    config = default.get_config()
    config.model.update({**overrides, "vocab_size": VOCAB})
    run = RunConfig.from_config(train_config.resolve(config))
    return attention_auto.resolve(run, "cpu").model


def source_kl(overrides: dict[str, Any], seed: int) -> float:
    """Mean KL (nats) between the next-token distributions for two sets of sources."""
    cfg = model_of(overrides)
    model = build(cfg)
    key = jax.random.key(seed, impl="threefry2x32")  # a typed key: jax's default, whatever is set
    src_key, other_key, tgt_key, init_key = jax.random.split(key, 4)
    draw = lambda key: jax.random.randint(key, (SOURCES, LENGTH), 4, VOCAB)  # noqa: E731
    src, other, tgt = draw(src_key), draw(other_key), draw(tgt_key)
    params = model.init(init_key, src, tgt)
    logp = jax.nn.log_softmax(model.apply(params, src, tgt), axis=-1)
    logq = jax.nn.log_softmax(model.apply(params, other, tgt), axis=-1)
    return float(jnp.mean(jnp.sum(jnp.exp(logp) * (logp - logq), axis=-1)))


def table(record: dict[str, Any]) -> str:
    """docs/main_job.md's table: each arm's mean KL over the seeds and its range."""
    rows = [
        f"| arm (model overrides) | mean KL over {len(record['seeds'])} seeds (nats) | range |",
        "|---|---|---|",
    ]
    for name, arm in record["arms"].items():
        changed = ", ".join(f"{k}={v}" for k, v in arm["overrides"].items()) or "none"
        kl = arm["kl"]
        rows.append(
            f"| {name} ({changed}) | {sum(kl) / len(kl):.4f} | {min(kl):.4f}–{max(kl):.4f} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated init seeds")
    parser.add_argument("--out", required=True, help="the record's path")
    parser.add_argument("--docs", action="append", default=[], help=f"write {BLOCK} here")
    args = parser.parse_args(argv)
    log_setup.configure()  # the planning extras' start-up lines stay quiet
    seeds = [int(s) for s in args.seeds.split(",")]
    record = {
        **records.header(),
        "vocab_size": VOCAB,
        "sources": SOURCES,
        "length": LENGTH,
        "seeds": seeds,
        "arms": {
            name: {"overrides": o, "kl": [round(source_kl(o, s), 6) for s in seeds]}
            for name, o in ARMS.items()
        },
    }
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    for doc in args.docs:
        records.replace_block(doc, BLOCK, table(record))
    print(table(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
