"""torchscale's side of ``benchmarks.vs_torchscale``: torchscale 0.3.0's DeepNorm model (eager
PyTorch) with our sinusoidal positions, ``F.cross_entropy`` and ``torch.optim.Adam``, and the
stand-in for the one timm function torchscale imports.

torch and torchscale are imported inside these functions only (the ``bench`` extra and
``benchmarks/install_bench.sh``).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
import time
import types
from typing import Any

import numpy as np

from benchmarks.host_memory import minor_page_faults
from benchmarks.vs_torchscale_setup import ADAM_B1, ADAM_B2, ADAM_EPS, Row, Setup


def drop_path(x: Any, drop_prob: float = 0.0, training: bool = False, scale_by_keep: bool = True):
    """timm's stochastic depth: zero whole rows (dim 0) with probability ``drop_prob``, scaling
    the kept ones by 1/(1 − drop_prob) when ``scale_by_keep``; the identity when not training."""
    if drop_prob == 0.0 or not training:
        return x
    keep = 1.0 - drop_prob
    mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
    if keep > 0.0 and scale_by_keep:
        mask.div_(keep)
    return x * mask


def install_timm_shim() -> None:
    """Register ``timm.models.layers.drop_path`` (all torchscale 0.3.0 takes from timm) as a
    stand-in module when timm is not installed: timm would pull torchvision and a CUDA torch."""
    if "timm" in sys.modules or importlib.util.find_spec("timm") is not None:
        return
    names = ("timm", "timm.models", "timm.models.layers")
    modules = {name: types.ModuleType(name) for name in names}
    modules["timm"].models = modules["timm.models"]
    modules["timm.models"].layers = modules["timm.models.layers"]
    modules["timm.models.layers"].drop_path = drop_path
    sys.modules.update(modules)


def torch_matmul_gflops(m: int, k: int, n: int, calls: int = 30) -> float:
    """torch's float32 [m, k] @ [k, n] in GFLOP/s on this process's threads: 2·m·k·n over the
    median of ``calls`` timed calls (after two untimed)."""
    import torch

    a, b = torch.randn(m, k), torch.randn(k, n)
    seconds = []
    for i in range(calls + 2):
        start = time.perf_counter()
        torch.mm(a, b)
        if i >= 2:
            seconds.append(time.perf_counter() - start)
    return 2 * m * k * n / float(np.median(seconds)) / 1e9


def torch_versions() -> dict[str, str]:
    return {p: importlib.metadata.version(p) for p in ("torch", "torchscale", "fairscale")}


def torchscale_config_args(setup: Setup, row: Row) -> dict[str, Any]:
    """The keywords of torchscale's ``DecoderConfig`` (decoder row) or ``EncoderDecoderConfig``
    (encdec row): DeepNorm post-LN at our widths, dropouts, activation and position count
    (docs/benchmarks.md, "Against torchscale", lists the settings matched)."""
    d = setup.d_model
    common = {
        "deepnorm": True,  # post-LN with DeepNorm's α and β (sets subln=False)
        "activation_fn": setup.activation,
        "dropout": setup.dropout,
        "attention_dropout": setup.dropout,
        "activation_dropout": setup.dropout,
        "drop_path_rate": 0.0,
        "no_scale_embedding": False,  # ours scales token embeddings by √d
        "layernorm_embedding": False,
        "layernorm_eps": 1e-5,
        "vocab_size": setup.vocab_size,
        "checkpoint_activations": False,
    }
    decoder_sizes = {
        "decoder_embed_dim": d,
        "decoder_attention_heads": setup.num_heads,
        "decoder_ffn_embed_dim": setup.ffn_dim,
        "decoder_layers": row.num_decoder_layers,
        "max_target_positions": setup.seq_len,
        "share_decoder_input_output_embed": False,
    }
    if row.arch == "decoder":
        return {**common, **decoder_sizes}
    return {
        **common,
        **decoder_sizes,
        "encoder_embed_dim": d,
        "encoder_attention_heads": setup.num_heads,
        "encoder_ffn_embed_dim": setup.ffn_dim,
        "encoder_layers": row.num_encoder_layers,
        "max_source_positions": setup.seq_len,
        "share_all_embeddings": False,
    }


def sinusoidal_positions_module(table: np.ndarray) -> Any:
    """A torch module serving fixed positions 0 … T-1 from ``table``: [B, T] tokens → [1, T, D]
    (torchscale's ``embed_positions`` interface)."""
    import torch

    class SinusoidalPositions(torch.nn.Module):
        """Fixed positions 0 … T-1 from a given table: [B, T] tokens → [1, T, D]."""

        def __init__(self, table: np.ndarray):
            super().__init__()
            self.register_buffer("table", torch.tensor(table), persistent=False)

        def forward(self, tokens, positions=None, incremental_state=None, **kwargs):
            del positions, incremental_state, kwargs
            return self.table[: tokens.size(1)].unsqueeze(0)

    return SinusoidalPositions(table)


def torchscale_model(setup: Setup, row: Row, positions: np.ndarray) -> Any:
    """torchscale's ``Decoder`` or ``EncoderDecoder`` for one row, with ``positions`` (our
    sinusoidal table) as its position embeddings. Needs the timm shim installed."""
    from torchscale.architecture.config import DecoderConfig, EncoderDecoderConfig
    from torchscale.architecture.decoder import Decoder
    from torchscale.architecture.encoder_decoder import EncoderDecoder
    from torchscale.component.embedding import TextEmbedding

    d, V = setup.d_model, setup.vocab_size
    args = torchscale_config_args(setup, row)
    if row.arch == "decoder":
        return Decoder(
            DecoderConfig(**args),
            embed_tokens=TextEmbedding(V, d),
            embed_positions=sinusoidal_positions_module(positions),
        )
    return EncoderDecoder(
        EncoderDecoderConfig(**args),
        encoder_embed_tokens=TextEmbedding(V, d),
        encoder_embed_positions=sinusoidal_positions_module(positions),
        decoder_embed_tokens=TextEmbedding(V, d),
        decoder_embed_positions=sinusoidal_positions_module(positions),
    )


class TheirsTrainer:
    """torchscale's model, ``F.cross_entropy`` and ``torch.optim.Adam``; ``run(n)`` times n
    steps. ``positions`` is our sinusoidal table, served as torchscale's ``embed_positions``."""

    def __init__(
        self,
        setup: Setup,
        row: Row,
        batches: list[dict[str, np.ndarray]],
        positions: np.ndarray,
    ):
        install_timm_shim()
        import torch

        torch.set_num_threads(setup.threads)
        torch.manual_seed(setup.seed)
        self._torch = torch
        self.model = torchscale_model(setup, row, positions)
        self.arch = row.arch
        self.model.train()
        self.param_count = sum(p.numel() for p in self.model.parameters())
        adam = {
            "foreach": {"foreach": True},
            "for_loop": {"foreach": False},
            "fused": {"fused": True},
        }[setup.torch_adam]
        self.optimizer = torch.optim.Adam(
            self.model.parameters(),
            lr=setup.learning_rate,
            betas=(ADAM_B1, ADAM_B2),
            eps=ADAM_EPS,
            weight_decay=0.0,
            **adam,
        )
        self.batches = [{k: torch.from_numpy(v) for k, v in b.items()} for b in batches]
        self.step = 0

    def logits(self, batch: dict[str, Any]) -> Any:
        """[B, T, vocab] logits; padding masks from the tokens (id 0), as ours computes them."""
        tgt = batch["inputs"]
        if self.arch == "decoder":
            return self.model(tgt, self_attn_padding_mask=tgt.eq(0))[0]
        encoder_out = self.model.encoder(batch["src"], encoder_padding_mask=batch["src"].eq(0))
        return self.model.decoder(tgt, self_attn_padding_mask=tgt.eq(0), encoder_out=encoder_out)[0]

    def logits_with(self, state_dict: dict[str, np.ndarray], batch: dict[str, Any]) -> np.ndarray:
        """[B, T, vocab] logits of ``batch`` in evaluation mode (dropout off) by a copy of the
        model holding ``state_dict`` (ours, exported with torchscale's names: every tensor the
        model has, nothing else); the trained model is left as it was."""
        import copy

        torch = self._torch
        twin = copy.deepcopy(self.model)
        twin.load_state_dict({k: torch.from_numpy(v) for k, v in state_dict.items()}, strict=True)
        twin.eval()
        model, self.model = self.model, twin
        try:
            with torch.no_grad():
                return self.logits({k: torch.from_numpy(v) for k, v in batch.items()}).numpy()
        finally:
            self.model = model

    def train_step(self, batch: dict[str, Any]) -> Any:
        logits = self.logits(batch)
        loss = self._torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)).float(), batch["targets"].reshape(-1).long()
        )
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return loss

    def run(self, steps: int) -> tuple[float, float, float]:
        """(wall seconds, loss of the last step, minor page faults per step) of ``steps``
        train steps."""
        faults = minor_page_faults()
        start = time.perf_counter()
        loss = None
        for _ in range(steps):
            loss = self.train_step(self.batches[self.step % len(self.batches)])
            self.step += 1
        seconds = time.perf_counter() - start
        return seconds, float(loss.detach()), (minor_page_faults() - faults) / steps
