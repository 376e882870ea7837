"""The two sides of a Transformer: :class:`Encoder` (embedding + bidirectional layers) and
:class:`Decoder` (embedding + causal layers, with cross-attention in an encoder-decoder, and
its decoding cache); the architectures (:mod:`deepnet_jax.model.architectures`) join them.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from deepnet_jax.common.tokens import PAD_ID
from deepnet_jax.model import masks, schemes
from deepnet_jax.model.config import TransformerConfig
from deepnet_jax.model.embeddings import PositionEmbedding, TokenEmbedding, embed, rotary_positions
from deepnet_jax.model.norms import normalization
from deepnet_jax.model.stack_common import Side, StackInputs
from deepnet_jax.model.stacks import apply_layers


def embedding_norm(config: TransformerConfig, x_BTD: jax.Array) -> jax.Array:
    """The norm of the embedded input (``embed_layer_norm``) of a scheme that has one
    (``schemes.Scheme.embedding_norm``: Peri-LN, Kim et al. 2025); x unchanged otherwise.
    Call inside the Encoder's/Decoder's compact call."""
    if not schemes.get(config.scheme).embedding_norm:
        return x_BTD
    return normalization(config, "embed_layer_norm")(x_BTD)


class Encoder(nn.Module):
    """Embedding + N bidirectional layers: tokens [B, S] → hidden states [B, S, D].

    With ``zero_padding_embeddings`` the embedded input is zeroed at padding tokens (after
    dropout), as torchscale's encoder does; outputs at real tokens do not depend on it.
    """

    config: TransformerConfig
    token_embedding: TokenEmbedding

    @nn.compact
    def __call__(
        self,
        tokens_BS: jax.Array,
        deterministic: bool = True,
        segment_ids: jax.Array | None = None,
        positions: jax.Array | None = None,
    ) -> jax.Array:
        c = self.config
        x = embed(
            tokens_BS,
            self.token_embedding,
            PositionEmbedding(c, name="embed_positions"),
            c,
            deterministic,
            positions,
        )
        x = embedding_norm(c, x)
        if c.zero_padding_embeddings:
            x = x * (tokens_BS != PAD_ID)[:, :, None].astype(x.dtype)
        side = Side(c, "encoder", has_cross=False, deterministic=deterministic)
        self_mask = masks.self_attention_mask(tokens_BS, segment_ids, causal=False)
        rope = rotary_positions(c, tokens_BS, positions)
        return apply_layers(self, side, StackInputs(x, self_mask, positions=rope))


class Decoder(nn.Module):
    """Embedding + M causal layers (with cross-attention when ``has_cross``).

    tokens [B, T] (and encoder output [B, S, D] with its mask: ``masks.AttentionMask`` or a
    boolean [B, 1, 1|T, S]) → [B, T, D]. The causal self-attention mask is an
    ``AttentionMask`` with its native form, but with a cache (positions offset by
    ``cache_index``: no native form) a boolean array.
    """

    config: TransformerConfig
    token_embedding: TokenEmbedding
    has_cross: bool = False

    @nn.compact
    def __call__(
        self,
        tokens_BT: jax.Array,
        enc_out_BSD: jax.Array | None = None,
        enc_mask: masks.AttentionMask | jax.Array | None = None,
        deterministic: bool = True,
        segment_ids: jax.Array | None = None,
        positions: jax.Array | None = None,
        cache: dict | None = None,
        cache_index: jax.Array | None = None,
    ) -> jax.Array | tuple[jax.Array, dict]:
        """With a ``cache`` (``architectures.init_cache``), ``tokens_BT`` sit at positions
        ``cache_index`` … ``cache_index + T − 1``, attend to every earlier cached position and
        the call returns ``(x, new_cache)``."""
        c = self.config
        if cache is None:
            self_mask = masks.self_attention_mask(tokens_BT, segment_ids, causal=True)
        else:
            T, slots = tokens_BT.shape[1], cache["self"]["k"].shape[2]
            query_pos = cache_index + jnp.arange(T)
            self_mask = (jnp.arange(slots)[None, :] <= query_pos[:, None])[None, None]
            if positions is None:
                positions = jnp.broadcast_to(query_pos, tokens_BT.shape)
        x = embed(
            tokens_BT,
            self.token_embedding,
            PositionEmbedding(c, name="embed_positions"),
            c,
            deterministic,
            positions,
        )
        x = embedding_norm(c, x)
        side = Side(c, "decoder", has_cross=self.has_cross, deterministic=deterministic)
        inputs = StackInputs(
            x,
            self_mask,
            enc_out_BSD,
            enc_mask,
            positions=rotary_positions(c, tokens_BT, positions),
            cache=cache,
            cache_index=cache_index,
        )
        return apply_layers(self, side, inputs)
