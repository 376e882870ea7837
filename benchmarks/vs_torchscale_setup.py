"""What both sides of ``benchmarks.vs_torchscale`` share: the settings (:class:`Setup`), a row's
model (:class:`Row`), Adam's constants and the batches both train on.
"""

from __future__ import annotations

import dataclasses

import numpy as np

ADAM_B1, ADAM_B2, ADAM_EPS = 0.9, 0.98, 1e-8
TORCH_ADAM = ("foreach", "for_loop", "fused")


@dataclasses.dataclass(frozen=True)
class Setup:
    """Model width, batch shape and timing settings shared by both rows."""

    d_model: int
    num_heads: int
    ffn_dim: int
    vocab_size: int
    batch_size: int
    seq_len: int
    dropout: float
    activation: str
    learning_rate: float
    remat_policy: str
    fused_qkv: bool
    dropout_rng: str
    scan_layers: bool
    scan_unroll: int
    rounds: int
    steps_per_round: int
    warmup_steps: int
    settle_s: float
    threads: int
    torch_adam: str
    num_batches: int
    seed: int


@dataclasses.dataclass(frozen=True)
class Row:
    """One model: its name, architecture and depths (N encoder, M decoder layers)."""

    name: str
    arch: str
    num_encoder_layers: int
    num_decoder_layers: int


def make_batches(setup: Setup, row: Row) -> list[dict[str, np.ndarray]]:
    """``num_batches`` batches of random non-padding tokens in [1, vocab): ``inputs`` and
    ``targets`` [B, T] (the input shifted by one), ``weights`` all 1, ``src`` [B, T] (encdec)."""
    rng = np.random.default_rng(setup.seed)
    B, T, V = setup.batch_size, setup.seq_len, setup.vocab_size
    batches = []
    for _ in range(setup.num_batches):
        seq = rng.integers(1, V, size=(B, T + 1), dtype=np.int32)
        batch = {
            "inputs": seq[:, :-1].copy(),
            "targets": seq[:, 1:].copy(),
            "weights": np.ones((B, T), np.float32),
        }
        if row.arch == "encdec":
            batch["src"] = rng.integers(1, V, size=(B, T), dtype=np.int32)
        batches.append(batch)
    return batches
