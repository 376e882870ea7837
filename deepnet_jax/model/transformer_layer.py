"""One Transformer layer under each residual/normalization scheme (SPEC.md table).

A layer is 2 sublayers (self-attention, FFN), or 3 (self-attention, cross-attention, FFN) in
the decoder of an encoder-decoder model. Per sublayer with function G:

* ``post_ln``:  x ← LN(x + G(x))
* ``pre_ln``:   x ← x + G(LN(x))
* ``deepnorm``: x ← LN(α·x + G(x))    (DeepNet eq. in Fig. 2a; α scales the residual x)
* ``subln``:    x ← x + G(LN(x)), G with an extra LN before its output projection
                (Magneto eq. 1–5; cross-attention has only the input LN)

Dropout (``config.dropout``) is applied to G's output before the residual sum. DLCL layers are
``pre_ln`` (``dlcl_pre``) or ``post_ln`` (``dlcl_post``) layers; the cross-layer combination
lives in ``stacks.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import flax.linen as nn
import jax

from deepnet_jax.model.attention import MultiHeadAttention
from deepnet_jax.model.config import TransformerConfig
from deepnet_jax.model.initializers import TORCHSCALE_INITS, torchscale_gain
from deepnet_jax.model.sublayers import (
    FeedForward,
    constrain,
    dropout,
    normalization,
    record_input_norm,
)

SIDES = ("encoder", "decoder")


def residual_scheme(scheme: str) -> str:
    """The per-layer residual form of a scheme (DLCL layers are vanilla pre/post-LN)."""
    return {"dlcl_pre": "pre_ln", "dlcl_post": "post_ln"}.get(scheme, scheme)


class TransformerLayer(nn.Module):
    """One encoder or decoder layer: x [B, T, D] → [B, T, D].

    Attributes:
      config: model hyper-parameters.
      side: "encoder" or "decoder"; selects DeepNorm's (α, β) or Sub-LN's γ for that side
        (β of an encoder-decoder's encoder is torchscale's under the torchscale inits).
      has_cross: add cross-attention over ``enc_out`` (decoder of an encoder-decoder).
      deterministic: disable dropout.
      carry_output: return ``(x, None)`` instead of ``x`` (the ``nn.scan`` convention).

    Call: ``layer(x [B,T,D], self_mask [B|1,1,T|1,T], enc_out [B,S,D] | None,
    enc_mask [B,1,1|T,S] | None, positions [B|1,T] | None, dropout_key, cache=None,
    cache_index=None)``; ``positions`` (of x's tokens) are read by rotary self-attention
    (``positions="rope"``) only, which needs them.

    With a ``cache`` ({"self": {"k", "v"}, "cross": {"k", "v"}}, see
    ``MultiHeadAttention``) the layer decodes incrementally: this call's self-attention keys and
    values are written at ``cache_index``, cross-attention keys/values are computed from
    ``enc_out`` when it is given (once per source) and read from the cache when it is None; the
    call then returns ``(x, new_cache)`` (also as the ``nn.scan`` carry/output pair).

    Every dropout mask in the layer is derived from ``dropout_key`` (by ``fold_in``), so
    scanned, unrolled and rematerialized stacks given the same per-layer keys draw the same
    masks.
    """

    config: TransformerConfig
    side: str = "encoder"
    has_cross: bool = False
    deterministic: bool = True
    carry_output: bool = False

    @nn.compact
    def __call__(
        self,
        x_BTD: jax.Array,
        self_mask: jax.Array | None,
        enc_out_BSD: jax.Array | None = None,
        enc_mask: jax.Array | None = None,
        positions: jax.Array | None = None,
        dropout_key: jax.Array | None = None,
        cache: dict[str, dict[str, jax.Array]] | None = None,
        cache_index: jax.Array | None = None,
    ):
        c = self.config
        scheme = residual_scheme(c.scheme)
        alpha, gain = c.side_constants(self.side)
        if c.init in TORCHSCALE_INITS:  # torchscale's own DeepNorm encoder-decoder encoder gain
            ts_gain = torchscale_gain(
                c.scheme, c.arch, self.side, c.num_encoder_layers, c.num_decoder_layers
            )
            gain = gain if ts_gain is None else ts_gain
        cross_gain = gain if scheme == "deepnorm" else 1.0  # Sub-LN leaves cross-attn unscaled
        inner = scheme == "subln"
        new_cache: dict[str, dict[str, jax.Array]] = {}

        def key(i: int) -> jax.Array | None:
            return None if dropout_key is None else jax.random.fold_in(dropout_key, i)

        def sublayer(
            x: jax.Array, g: Callable[[jax.Array], jax.Array], norm: str, i: int
        ) -> jax.Array:
            def branch(h: jax.Array) -> jax.Array:
                return dropout(g(h), c.dropout, key(i), self.deterministic, c.dropout_rng)

            if scheme in ("pre_ln", "subln"):
                record_input_norm(self, norm, x)
                y = x + branch(normalization(c, norm)(x))
            else:  # post_ln (α = 1) and deepnorm: α scales the residual, not G(x)
                z = alpha * x + branch(x)
                record_input_norm(self, norm, z)
                y = normalization(c, norm)(z)
            return constrain(y)

        def attend(module: MultiHeadAttention, h, kv, mask, i: int, slot: str, index):
            if cache is None:
                return module(h, kv, mask, key(i), positions=positions)
            out, new_cache[slot] = module(
                h, kv, mask, key(i), cache=cache[slot], cache_index=index, positions=positions
            )
            return out

        x_BTD = constrain(x_BTD)
        self_attn = MultiHeadAttention(
            c,
            gain,
            inner,
            self.deterministic,
            fuse_qkv=c.fused_qkv,
            rotary=c.positions == "rope",
            name="self_attn",
        )
        x_BTD = sublayer(
            x_BTD,
            lambda h: attend(self_attn, h, h, self_mask, 10, "self", cache_index),
            "self_attn_layer_norm",
            0,
        )
        if self.has_cross:
            if enc_out_BSD is None and cache is None:
                raise ValueError("a layer with cross-attention needs the encoder output")
            cross_attn = MultiHeadAttention(
                c, cross_gain, False, self.deterministic, name="cross_attn"
            )
            x_BTD = sublayer(
                x_BTD,
                lambda h: attend(cross_attn, h, enc_out_BSD, enc_mask, 11, "cross", None),
                "cross_attn_layer_norm",
                1,
            )
        ffn = FeedForward(c, gain, inner, self.deterministic, name="ffn")
        x_BTD = sublayer(x_BTD, lambda h: ffn(h, key(12)), "final_layer_norm", 2)
        if self.carry_output:
            return x_BTD, (new_cache if cache is not None else None)
        return x_BTD if cache is None else (x_BTD, new_cache)
