"""Boolean attention masks, broadcastable to [B, H, T, S] (True = may attend): key padding
(token id 0), causal order, and packed examples kept apart (``segment_ids``); and
:class:`AttentionMask`, a mask that also says, where it can, what it is in the terms fused
attention takes natively (causal order, each row's number of keys).

Padding is right padding: every batch the model sees has its tokens first and ``PAD_ID`` after
them (``data.batching.collate``, the synthetic task, the sources and prompts of decoding), so a
row's keys 0 … n−1 are its n non-padding tokens. Packed rows (``segment_ids``) are not
described natively: their masks are dense only.
"""

from __future__ import annotations

import flax.struct
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


@flax.struct.dataclass
class AttentionMask:
    """An attention mask in two forms that select the same keys for every query of a row that
    has at least one token.

    ``dense``: the boolean mask [B|1, 1, T|1, S] (True = may attend), what the reference
    attention and the bias form of fused attention read. ``kv_lengths`` [B] int32 and ``causal``
    (static): the same mask natively, query t of row b attends to keys s < kv_lengths[b] (and
    s ≤ t where causal), for ``jax.nn.dot_product_attention(key_value_seq_lengths=...,
    is_causal=...)``; ``kv_lengths`` None where the mask has no such form (packed rows).

    A row of padding only (an empty row of a batch: ``data.batching.EMPTY_ROW``) has no key to
    attend to: the dense mask spreads its queries' weight uniformly over every key, the native
    form (``kv_lengths`` ≥ 1) puts it on key 0 — both finite, and such a row has weight 0 in every
    loss. (cuDNN before 9.25 answers a zero key length with NaN rows, NVIDIA/cudnn-frontend
    issue 943, which 0 · NaN would carry into the loss.)
    """

    dense: jax.Array
    kv_lengths: jax.Array | None = None
    causal: bool = flax.struct.field(pytree_node=False, default=False)


def key_lengths(tokens_BS: jax.Array) -> jax.Array:
    """Each row's number of keys [B] int32 under right padding: max(Σ_s [token ≠ PAD], 1)."""
    return jnp.maximum(jnp.sum(tokens_BS != PAD_ID, axis=1), 1).astype(jnp.int32)


def self_attention_mask(
    tokens_BT: jax.Array, segments_BT: jax.Array | None, causal: bool
) -> AttentionMask:
    """:func:`self_mask` as an :class:`AttentionMask`; native where the rows are not packed."""
    dense = self_mask(tokens_BT, segments_BT, causal)
    if segments_BT is not None:
        return AttentionMask(dense)
    return AttentionMask(dense, key_lengths(tokens_BT), causal)


def cross_attention_mask(
    src_BS: jax.Array,
    tgt_segments_BT: jax.Array | None = None,
    src_segments_BS: jax.Array | None = None,
) -> AttentionMask:
    """:func:`cross_mask` as an :class:`AttentionMask`; native where the rows are not packed."""
    dense = cross_mask(src_BS, tgt_segments_BT, src_segments_BS)
    if src_segments_BS is not None:
        return AttentionMask(dense)
    return AttentionMask(dense, key_lengths(src_BS))


def dense(mask: AttentionMask | jax.Array | None) -> jax.Array | None:
    """The boolean mask [B|1, 1, T|1, S] of ``mask`` (an array is one already)."""
    return mask.dense if isinstance(mask, AttentionMask) else mask
