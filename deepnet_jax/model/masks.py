"""Boolean attention masks, broadcastable to [B, H, T, S] (True = may attend): key padding
(token id 0), causal order, and packed examples kept apart (``segment_ids``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from deepnet_jax.common.tokens import PAD_ID


def padding_mask(tokens_BT: jax.Array) -> jax.Array:
    """Key-padding mask [B, 1, 1, T]: True where the token is not padding (``tokens.PAD_ID``)."""
    return (tokens_BT != PAD_ID)[:, None, None, :]


def causal_mask(length: int) -> jax.Array:
    """Causal mask [1, 1, T, T]: query t may attend to keys 0 … t."""
    return jnp.tril(jnp.ones((length, length), dtype=bool))[None, None]


def segment_mask(q_segments_BT: jax.Array, k_segments_BS: jax.Array) -> jax.Array:
    """Packed-example mask [B, 1, T, S]: True where query and key belong to the same example."""
    return q_segments_BT[:, None, :, None] == k_segments_BS[:, None, None, :]


def self_mask(tokens_BT: jax.Array, segments_BT: jax.Array | None, causal: bool) -> jax.Array:
    """Self-attention mask: padding, causal when asked, and packed examples apart."""
    mask = padding_mask(tokens_BT)
    if causal:
        mask = mask & causal_mask(tokens_BT.shape[1])
    if segments_BT is not None:
        mask = mask & segment_mask(segments_BT, segments_BT)
    return mask


def cross_mask(
    src_BS: jax.Array,
    tgt_segments_BT: jax.Array | None = None,
    src_segments_BS: jax.Array | None = None,
) -> jax.Array:
    """Cross-attention mask: source padding [B, 1, 1, S], or [B, 1, T, S] for packed rows."""
    mask = padding_mask(src_BS)
    if (tgt_segments_BT is None) != (src_segments_BS is None):
        raise ValueError("packed rows need both source and target segment ids")
    if tgt_segments_BT is not None:
        mask = mask & segment_mask(tgt_segments_BT, src_segments_BS)
    return mask
