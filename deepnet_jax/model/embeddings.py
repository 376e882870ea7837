"""Token embeddings (optionally tied to the output projection) and position embeddings."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from deepnet_jax.common.tokens import PAD_ID
from deepnet_jax.model import parameterization, schemes
from deepnet_jax.model.config import TransformerConfig
from deepnet_jax.model.dropout import Dropout
from deepnet_jax.model.initializers import embedding_normal, sinusoidal_table, token_embedding_init
from deepnet_jax.model.vocab_matmul import vocab_logits


class TokenEmbedding(nn.Module):
    """Token table E [vocab, d_model] (logical axes ``vocab``, ``embed``), init N(0, d^-1/2)
    (``init="torchscale"``: with the padding row zeroed, as torchscale's embeddings;
    ``"torchscale_bert"``: N(0, 0.02²), padding row zeroed unless ``tied_output``, see
    :func:`~deepnet_jax.model.initializers.token_embedding_init`; a scheme with its own
    embedding init, DeepScaleLM's: the variance ``schemes.Scheme.embedding_variances`` gives).

    Under ``parameterization="completep"`` E ~ N(0, σ_base²) (CompleteP's "Embed Init. Var.").

    ``__call__`` maps tokens [B, T] to E[tokens]·√d_model [B, T, D] (E[tokens] without
    ``scale_embedding``); ``attend`` maps hidden states [B, T, D] to float32 logits x·Eᵀ
    [B, T, vocab] for a tied output projection (× m_N^(-1) under CompleteP).
    """

    config: TransformerConfig
    tied_output: bool = False  # this table is also the output projection (its init only)

    def setup(self) -> None:
        c = self.config
        init = token_embedding_init(c.d_model, c.init, PAD_ID, self.tied_output)
        variances = schemes.get(c.scheme).embedding_variances(c)
        if variances is not None:  # variance v of E[tokens]·√d (or E[tokens])
            v = variances[0]
            scale = c.d_model**-0.5 if c.scale_embedding else 1.0
            init = nn.initializers.normal(stddev=v**0.5 * scale)
        if parameterization.completep(c):  # N(0, σ_base²) (scale_embedding is off)
            init = nn.initializers.normal(stddev=parameterization.embedding_std(c))
        self.embedding = self.param(
            "embedding",
            nn.with_logical_partitioning(init, ("vocab", "embed")),
            (c.vocab_size, c.d_model),
            c.storage_dtype,
        )

    def __call__(self, tokens_BT: jax.Array) -> jax.Array:
        c = self.config
        x_BTD = jnp.take(self.embedding.astype(c.compute_dtype), tokens_BT, axis=0)
        if not c.scale_embedding:
            return x_BTD
        return x_BTD * jnp.asarray(c.d_model**0.5, c.compute_dtype)

    def attend(self, x_BTD: jax.Array) -> jax.Array:
        c = self.config
        x, table = x_BTD.astype(c.compute_dtype), self.embedding.astype(c.compute_dtype)
        return scaled_logits(c, vocab_logits("btd,vd->btv", x, table))


def scaled_logits(config: TransformerConfig, logits: jax.Array) -> jax.Array:
    """The output logits times ``parameterization.output_multiplier``: CompleteP's x_L·Wᵀ·m_N^(-1)
    (Table 1, "Unembed Fwd."); under ``standard`` the logits themselves."""
    m = parameterization.output_multiplier(config)
    return logits if m == 1.0 else logits * jnp.float32(m)


class OutputProjection(nn.Module):
    """Untied vocabulary projection: x [B, T, D] → float32 x·W [B, T, vocab], W ~ N(0, d^-1/2)
    (N(0, 0.02²) under ``init="torchscale_bert"``; under CompleteP N(0, σ_base²) and the
    logits × m_N^(-1), :func:`scaled_logits`)."""

    config: TransformerConfig

    @nn.compact
    def __call__(self, x_BTD: jax.Array) -> jax.Array:
        c = self.config
        init = embedding_normal(c.d_model, c.init)
        if parameterization.completep(c):
            init = nn.initializers.normal(stddev=parameterization.embedding_std(c))
        kernel = self.param(
            "kernel",
            nn.with_logical_partitioning(init, ("embed", "vocab")),
            (c.d_model, c.vocab_size),
            c.storage_dtype,
        )
        x, w = x_BTD.astype(c.compute_dtype), kernel.astype(c.compute_dtype)
        return scaled_logits(c, vocab_logits("btd,dv->btv", x, w))


class PositionEmbedding(nn.Module):
    """Position features for positions 0 … T-1 ([1, T, D]) or given positions [B, T] ([B, T, D]).

    Fixed sinusoids or a learned table of ``max_len + position_offset`` rows; position p reads
    row p + ``position_offset`` (fairseq and torchscale start their positions at 2, so their
    sinusoids are those of p + 2 and rows 0, 1 of their learned tables are never read by real
    tokens). Packed rows pass per-token positions that restart at 0 for every packed example;
    they must lie in [0, max_len).
    """

    config: TransformerConfig

    @nn.compact
    def __call__(self, length: int, positions_BT: jax.Array | None = None) -> jax.Array:
        c = self.config
        if length > c.max_len:
            raise ValueError(f"sequence length {length} exceeds model.max_len={c.max_len}")
        offset = c.position_offset
        if c.positions == "sinusoidal":
            rows = length if positions_BT is None else c.max_len
            table = sinusoidal_table(rows + offset, c.d_model)
        else:
            init = embedding_normal(c.d_model, c.init)
            variances = schemes.get(c.scheme).embedding_variances(c)
            if variances is not None:
                init = nn.initializers.normal(stddev=variances[1] ** 0.5)
            if parameterization.completep(c):  # an embedding table: N(0, σ_base²)
                init = nn.initializers.normal(stddev=parameterization.embedding_std(c))
            table = self.param(
                "embedding",
                nn.with_logical_partitioning(init, ("positions", "embed")),
                (c.max_len + offset, c.d_model),
                c.storage_dtype,
            )
        if positions_BT is None:
            return table[None, offset : offset + length].astype(c.compute_dtype)
        # Out-of-range positions (< 0 or ≥ max_len) give NaN rows, so a bad caller sees a NaN
        # loss rather than silently wrapped or clamped positions.
        table = table.astype(jnp.float32)
        index = jnp.where(positions_BT < 0, table.shape[0], positions_BT + offset)  # take() wraps
        rows = jnp.take(table, index, axis=0, mode="fill", fill_value=jnp.nan)
        return rows.astype(c.compute_dtype)


def embed(
    tokens_BT: jax.Array,
    token_embedding: TokenEmbedding,
    positions: PositionEmbedding,
    config: TransformerConfig,
    deterministic: bool,
    positions_BT: jax.Array | None = None,
) -> jax.Array:
    """E[tokens]·√d (E[tokens] without ``scale_embedding``) + P[positions] (P[0:T] by
    default; row p + ``position_offset`` of the table; nothing under ``positions="rope"``,
    whose positions rotate q and k inside self-attention), then dropout: [B, T] → [B, T, D]."""
    x_BTD = token_embedding(tokens_BT)
    if config.positions == "rope":
        if tokens_BT.shape[1] > config.max_len:
            raise ValueError(
                f"sequence length {tokens_BT.shape[1]} exceeds model.max_len={config.max_len}"
            )
    else:
        x_BTD = x_BTD + positions(tokens_BT.shape[1], positions_BT)
    return Dropout(config.dropout, config.dropout_rng)(x_BTD, deterministic)


def rotary_positions(
    config: TransformerConfig, tokens_BT: jax.Array, positions_BT: jax.Array | None
) -> jax.Array | None:
    """The positions rotary self-attention reads: ``positions_BT`` (packed rows, decoding) or
    0 … T−1 [1, T]; None when ``config.positions`` is not "rope"."""
    if config.positions != "rope":
        return None
    if positions_BT is not None:
        return positions_BT
    return jnp.arange(tokens_BT.shape[1], dtype=jnp.int32)[None]
