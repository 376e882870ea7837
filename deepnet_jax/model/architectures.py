"""Encoder-only (MLM), decoder-only (causal LM) and encoder-decoder (translation) models.

Public API::

    from deepnet_jax import build, default_config
    cfg = default_config()            # ml_collections.ConfigDict
    model = build(cfg)                       # EncoderOnly, DecoderOnly or EncoderDecoder
    logits = model.apply(variables, src_BS, tgt_in_BT, deterministic=True)   # [B, T, vocab]

Token id 0 is padding (masked as attention keys); sequences are right-padded. Logits are
float32 whatever the compute dtype.

Packed rows (several examples per row, see ``deepnet_jax.data``) pass ``segment_ids`` [B, T]
(1, 2, … per example, 0 on padding) and ``positions`` [B, T] (restarting at 0 per example);
attention then never crosses an example boundary, so each packed example gets exactly the
logits it would get alone.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections

from deepnet_jax.model import masks
from deepnet_jax.model.config import TransformerConfig, check, default_config, validate
from deepnet_jax.model.embeddings import OutputProjection, TokenEmbedding
from deepnet_jax.model.sides import Decoder, Encoder

__all__ = [
    "DecoderOnly",
    "EncoderDecoder",
    "EncoderOnly",
    "TransformerConfig",
    "build",
    "default_config",
    "init_cache",
    "validate",
]


class _TokenModel(nn.Module):
    """What the three architectures share: their config, the table the output reads
    (``target_table``), an ``output_projection`` unless the embeddings are tied, and float32
    logits."""

    config: TransformerConfig

    def _output_head(self, table: TokenEmbedding) -> None:
        """In ``setup``: logits from ``table`` (tied) or from a new ``output_projection``."""
        self.target_table = table
        c = self.config
        self.output_projection = None if c.tie_embeddings else OutputProjection(c)

    def head(self, x_BTD: jax.Array) -> jax.Array:
        """The output head alone (``model.apply(..., method="head")``): hidden states
        [B, T, D], what ``__call__(..., logits=False)`` returns, → float32 logits [B, T, V]."""
        return self._logits(x_BTD)

    def _logits(self, x_BTD: jax.Array) -> jax.Array:
        """Hidden states [B, T, D] → float32 logits [B, T, vocab]."""
        if self.config.tie_embeddings:
            return self.target_table.attend(x_BTD).astype(jnp.float32)
        return self.output_projection(x_BTD).astype(jnp.float32)


class EncoderOnly(_TokenModel):
    """BERT-like masked LM: tokens [B, T] → logits [B, T, vocab]."""

    def setup(self) -> None:
        c = self.config
        self.embed_tokens = TokenEmbedding(c, c.tie_embeddings)
        self.encoder = Encoder(c, self.embed_tokens)
        self._output_head(self.embed_tokens)

    def __call__(
        self,
        tokens_BT: jax.Array,
        deterministic: bool = True,
        *,
        segment_ids: jax.Array | None = None,
        positions: jax.Array | None = None,
        logits: bool = True,
    ) -> jax.Array:
        x = self.encoder(tokens_BT, deterministic, segment_ids, positions)
        return self._logits(x) if logits else x


class DecoderOnly(_TokenModel):
    """GPT-like causal LM: tokens [B, T] → next-token logits [B, T, vocab]."""

    def setup(self) -> None:
        c = self.config
        self.embed_tokens = TokenEmbedding(c, c.tie_embeddings)
        self.decoder = Decoder(c, self.embed_tokens)
        self._output_head(self.embed_tokens)

    def __call__(
        self,
        tokens_BT: jax.Array,
        deterministic: bool = True,
        *,
        segment_ids: jax.Array | None = None,
        positions: jax.Array | None = None,
        logits: bool = True,
    ) -> jax.Array:
        x = self.decoder(
            tokens_BT, deterministic=deterministic, segment_ids=segment_ids, positions=positions
        )
        return self._logits(x) if logits else x

    def decode_step(
        self, tokens_BT: jax.Array, cache: dict, cache_index: jax.Array
    ) -> tuple[jax.Array, dict]:
        """Incremental decoding: tokens [B, T] at positions ``cache_index`` … → logits
        [B, T, vocab] and the updated cache (``init_cache``; T = 1 per generated token)."""
        x, cache = self.decoder(tokens_BT, cache=cache, cache_index=cache_index)
        return self._logits(x), cache


class EncoderDecoder(_TokenModel):
    """Translation model: source [B, S] and shifted target [B, T] → logits [B, T, vocab].

    With ``share_embeddings`` one table ``embed_tokens`` serves source, target (and, when
    tied, the output projection); otherwise ``encoder_embed_tokens`` and
    ``decoder_embed_tokens``.
    """

    def setup(self) -> None:
        c = self.config
        if c.share_embeddings:
            self.embed_tokens = TokenEmbedding(c, c.tie_embeddings)
            src_table = tgt_table = self.embed_tokens
        else:
            self.encoder_embed_tokens = TokenEmbedding(c)
            self.decoder_embed_tokens = TokenEmbedding(c, c.tie_embeddings)
            src_table, tgt_table = self.encoder_embed_tokens, self.decoder_embed_tokens
        self.encoder = Encoder(c, src_table)
        self.decoder = Decoder(c, tgt_table, has_cross=True)
        self._output_head(tgt_table)

    def encode(
        self,
        src_BS: jax.Array,
        deterministic: bool = True,
        segment_ids: jax.Array | None = None,
        positions: jax.Array | None = None,
    ) -> jax.Array:
        """Source tokens [B, S] → encoder output [B, S, D]."""
        return self.encoder(src_BS, deterministic, segment_ids, positions)

    def decode(
        self,
        tgt_in_BT: jax.Array,
        enc_out_BSD: jax.Array,
        src_BS: jax.Array,
        deterministic: bool = True,
        *,
        segment_ids: jax.Array | None = None,
        positions: jax.Array | None = None,
        src_segment_ids: jax.Array | None = None,
        logits: bool = True,
    ) -> jax.Array:
        """Shifted target [B, T] + encoder output → logits [B, T, vocab] (``logits=False``:
        the decoder's output [B, T, D] before the output projection)."""
        enc_mask = masks.cross_attention_mask(src_BS, segment_ids, src_segment_ids)
        x = self.decoder(tgt_in_BT, enc_out_BSD, enc_mask, deterministic, segment_ids, positions)
        return self._logits(x) if logits else x

    def decode_step(
        self,
        tgt_in_BT: jax.Array,
        src_BS: jax.Array,
        cache: dict,
        cache_index: jax.Array,
        enc_out_BSD: jax.Array | None = None,
    ) -> tuple[jax.Array, dict]:
        """Incremental decoding: target tokens [B, T] at positions ``cache_index`` … →
        logits [B, T, vocab] and the updated cache (``init_cache``).

        Pass the encoder output on the first step only: each layer then computes its
        cross-attention keys/values once and keeps them in the cache; later steps pass None.
        ``src_BS`` supplies the source padding mask on every step.
        """
        x, cache = self.decoder(
            tgt_in_BT,
            enc_out_BSD,
            masks.padding_mask(src_BS),
            True,
            cache=cache,
            cache_index=cache_index,
        )
        return self._logits(x), cache

    def __call__(
        self,
        src_BS: jax.Array,
        tgt_in_BT: jax.Array,
        deterministic: bool = True,
        *,
        src_segment_ids: jax.Array | None = None,
        src_positions: jax.Array | None = None,
        segment_ids: jax.Array | None = None,
        positions: jax.Array | None = None,
        logits: bool = True,
    ) -> jax.Array:
        enc_out = self.encode(src_BS, deterministic, src_segment_ids, src_positions)
        return self.decode(
            tgt_in_BT,
            enc_out,
            src_BS,
            deterministic,
            segment_ids=segment_ids,
            positions=positions,
            src_segment_ids=src_segment_ids,
            logits=logits,
        )


def init_cache(
    config: TransformerConfig,
    batch_size: int,
    max_decode_len: int,
    src_len: int | None = None,
) -> dict[str, dict[str, jax.Array]]:
    """Zeroed decoding cache laid out like the scanned parameters (layers first).

    ``{"self": {"k", "v"}}`` each [M, B, max_decode_len, N, K] and, for an encoder-decoder,
    ``{"cross": {"k", "v"}}`` each [M, B, src_len, N, K] (M decoder layers, N = kv heads,
    compute dtype).
    """
    if config.arch == "encoder":
        raise ValueError("model.arch='encoder' has no decoder to decode with")
    if max_decode_len > config.max_len:
        raise ValueError(f"decoding length {max_decode_len} exceeds model.max_len={config.max_len}")
    M, N, K = config.num_decoder_layers, config.kv_heads, config.head_dim

    def zeros(length: int) -> dict[str, jax.Array]:
        shape = (M, batch_size, length, N, K)
        return {
            "k": jnp.zeros(shape, config.compute_dtype),
            "v": jnp.zeros(shape, config.compute_dtype),
        }

    cache = {"self": zeros(max_decode_len)}
    if config.arch == "encdec":
        if src_len is None:
            raise ValueError("an encoder-decoder cache needs src_len")
        cache["cross"] = zeros(src_len)
    return cache


_MODELS = {"encoder": EncoderOnly, "decoder": DecoderOnly, "encdec": EncoderDecoder}


def build(model_config: TransformerConfig | ml_collections.ConfigDict) -> nn.Module:
    """The model for ``model_config``'s ``arch``, checked first (no ``auto`` left): a frozen
    ``TransformerConfig`` (a run's ``RunConfig.model``) as it is (``model.config.check``), a
    ``ConfigDict`` (``deepnet_jax.default_config()``) typed once (``from_config``)."""
    if isinstance(model_config, TransformerConfig):
        check(model_config)
        return _MODELS[model_config.arch](model_config)
    config = TransformerConfig.from_config(model_config)
    return _MODELS[config.arch](config)
