"""One Transformer layer under its residual scheme (docs/schemes.md; the schemes' forms are
``model.schemes``).

A layer is 2 sublayers (self-attention, FFN), or 3 (self-attention, cross-attention, FFN) in
the decoder of an encoder-decoder model. The layer builds the sublayers' functions G (with the
scheme's init gain, inner norm and init stds) and hands each one to the scheme
(``Scheme.sublayer``), which joins it to the residual stream: e.g. Post-LN x ← N(x + G(x)),
Pre-LN x ← x + G(N(x)), DeepNorm x ← N(α·x + G(x)). A combining scheme's layers are those of its
``per_layer`` scheme (DLCL's Pre-/Post-LN, DenseFormer's Pre-LN); its cross-layer combinations
live in ``combining_stacks.py``.

Dropout (``config.dropout``) is applied to G's output before it is weighted and summed.

Admin's profiling pass (:mod:`deepnet_jax.model.admin`) runs the layers with the
``admin_profile`` collection mutable and x carried as ``(x, r)``: each sublayer then uses
ω = r, sows it, and hands on r ← √(Var(r·x) + Var(G(x))) (Transformer-Clinic's profiling).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from deepnet_jax.model import schemes
from deepnet_jax.model.attention import MultiHeadAttention
from deepnet_jax.model.config import TransformerConfig
from deepnet_jax.model.dropout import dropout
from deepnet_jax.model.masks import AttentionMask
from deepnet_jax.model.norms import normalization, record_input_norm
from deepnet_jax.model.schemes.base import Residual, Scheme, Sublayer
from deepnet_jax.model.sublayers import FeedForward, constrain

ADMIN_PROFILE = "admin_profile"  # the collection Admin's profiling pass sows ω into


class TransformerLayer(nn.Module):
    """One encoder or decoder layer: x [B, T, D] → [B, T, D] (a stream scheme's n streams
    [B, T, n, D] → [B, T, n, D]).

    Attributes:
      config: model hyper-parameters.
      side: "encoder" or "decoder"; selects the scheme's constants for that side (DeepNorm's
        (α, β), Sub-LN's γ, DeepScaleLM's (λ, β); ``Scheme.constants``, ``Scheme.init_gain``).
      has_cross: add cross-attention over ``enc_out`` (decoder of an encoder-decoder).
      deterministic: disable dropout.
      carry_output: return ``(x, None)`` instead of ``x`` (the ``nn.scan`` convention).

    Call: ``layer(x [B,T,D], self_mask [B|1,1,T|1,T], enc_out [B,S,D] | None,
    enc_mask [B,1,1|T,S] | None, positions [B|1,T] | None, dropout_key, cache=None,
    cache_index=None, layer_index=None)``; ``positions`` (of x's tokens) are read by rotary
    self-attention (``positions="rope"``) only, which needs them; ``layer_index`` (0-based,
    an int or a traced scalar) by the schemes that depend on the layer (mix_ln, ln_scaling,
    and deepscalelm's init), which need it. A mask is a boolean array of those shapes or a
    ``masks.AttentionMask`` holding one (and its native form).

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
        x_BTD: jax.Array | tuple[jax.Array, jax.Array],
        self_mask: AttentionMask | jax.Array | None,
        enc_out_BSD: jax.Array | None = None,
        enc_mask: AttentionMask | jax.Array | None = None,
        positions: jax.Array | None = None,
        dropout_key: jax.Array | None = None,
        cache: dict[str, dict[str, jax.Array]] | None = None,
        cache_index: jax.Array | None = None,
        layer_index: int | jax.Array | None = None,
    ):
        scheme = schemes.get(self.config.scheme).per_layer
        ratio = None
        if isinstance(x_BTD, tuple):  # Admin's profiling pass: (x, r)
            x_BTD, ratio = x_BTD
        call = _Call(LayerOps(self), scheme, dropout_key, positions, cache)
        residual = scheme.layer_state(call.ops, self.side, layer_index, ratio)
        self_attn, cross_attn, ffn = self._sublayers(scheme, layer_index)
        x_BTD, residual = call.sublayer(
            constrain(x_BTD),
            residual,
            "self_attn",
            lambda h: call.attend(self_attn, "self_attn", h, h, self_mask, cache_index),
        )
        if cross_attn is not None:
            if enc_out_BSD is None and cache is None:
                raise ValueError("a layer with cross-attention needs the encoder output")
            x_BTD, residual = call.sublayer(
                x_BTD,
                residual,
                "cross_attn",
                lambda h: call.attend(cross_attn, "cross_attn", h, enc_out_BSD, enc_mask, None),
            )
        x_BTD, residual = call.sublayer(
            x_BTD, residual, "ffn", lambda h: ffn(h, call.key(DROPOUT_KEYS["ffn"][1]))
        )
        if residual.ratio is not None:
            x_BTD = (x_BTD, residual.ratio)
        if self.carry_output:
            return x_BTD, (call.new_cache if cache is not None else None)
        return x_BTD if cache is None else (x_BTD, call.new_cache)

    def _sublayers(
        self, scheme: Scheme, layer_index: int | jax.Array | None
    ) -> tuple[MultiHeadAttention, MultiHeadAttention | None, FeedForward]:
        """The sublayers' functions G (self-attention, cross-attention when ``has_cross``, FFN)
        as submodules ``self_attn``, ``cross_attn``, ``ffn``, with the scheme's init gain, inner
        norm and (at init) init stds for this side and layer."""
        c = self.config
        gain = scheme.init_gain(c, self.side)
        stds = scheme.init_stds(c, self.side, layer_index) if self.is_initializing() else None
        self_attn = MultiHeadAttention(
            c,
            gain,
            scheme.inner_norm,
            self.deterministic,
            fuse_qkv=c.fused_qkv,
            rotary=c.positions == "rope",
            stds=stds and stds[:2],
            name="self_attn",
        )
        cross_attn = None
        if self.has_cross:
            cross_attn = MultiHeadAttention(
                c,
                gain if scheme.cross_gain else 1.0,
                False,
                self.deterministic,
                stds=stds and stds[:2],
                name="cross_attn",
            )
        ffn = FeedForward(
            c, gain, scheme.inner_norm, self.deterministic, std=stds and stds[2], name="ffn"
        )
        return self_attn, cross_attn, ffn


@dataclasses.dataclass(frozen=True)
class _Call:
    """One call of a :class:`TransformerLayer`, what its sublayers share: the layer's ``ops``,
    its ``scheme`` (the per-layer one), the call's ``dropout_key``, ``positions`` and ``cache``,
    and ``new_cache``, the cache slots its attention writes."""

    ops: LayerOps
    scheme: Scheme
    dropout_key: jax.Array | None
    positions: jax.Array | None
    cache: dict[str, dict[str, jax.Array]] | None
    new_cache: dict[str, dict[str, jax.Array]] = dataclasses.field(default_factory=dict)

    def key(self, i: int) -> jax.Array | None:
        """The dropout key folded with ``i`` (:data:`DROPOUT_KEYS`), None without one."""
        return None if self.dropout_key is None else jax.random.fold_in(self.dropout_key, i)

    def sublayer(
        self, x: jax.Array, residual: Residual, name: str, g: Callable
    ) -> tuple[jax.Array, Residual]:
        """Sublayer ``name`` (function g) under the scheme's residual form: the new x and the
        residual state (Admin's ratio moves on)."""
        branch_dropout = _drop(self.ops.layer, self.key(DROPOUT_KEYS[name][0]))
        sub = Sublayer(name, NORM_NAMES[name], g, branch_dropout)
        x, residual = self.scheme.sublayer(self.ops, sub, residual, x)
        return constrain(x), residual

    def attend(
        self,
        module: MultiHeadAttention,
        name: str,
        h: jax.Array,
        kv: jax.Array | None,
        mask: jax.Array | None,
        index: jax.Array | None,
    ) -> jax.Array:
        """Attention sublayer ``name``'s G(h): queries h, keys and values from ``kv``; with a
        cache, its slot (:data:`CACHE_SLOTS`) read at ``index`` and the new one kept."""
        key = self.key(DROPOUT_KEYS[name][1])
        if self.cache is None:
            return module(h, kv, mask, key, positions=self.positions)
        slot = CACHE_SLOTS[name]
        out, self.new_cache[slot] = module(
            h, kv, mask, key, cache=self.cache[slot], cache_index=index, positions=self.positions
        )
        return out


def _drop(layer: TransformerLayer, key: jax.Array | None) -> Callable[[jax.Array], jax.Array]:
    """The branch dropout of one sublayer (``config.dropout`` with ``key``)."""
    c = layer.config
    return lambda y: dropout(y, c.dropout, key, layer.deterministic, c.dropout_rng)


@dataclasses.dataclass(frozen=True)
class LayerOps:
    """``schemes.base.Ops`` inside one call of ``layer`` (or of any module with a ``config``
    whose compact call is running, e.g. the Encoder for ``Scheme.collapse``): its parameters,
    norms, diagnostics and Admin's profiling collection."""

    layer: nn.Module

    @property
    def config(self) -> TransformerConfig:
        return self.layer.config

    def param(self, name: str, init: Callable, shape: tuple[int, ...], axes: tuple) -> jax.Array:
        return self.layer.param(name, nn.with_logical_partitioning(init, axes), shape, jnp.float32)

    def norm(self, name: str) -> Callable[[jax.Array], jax.Array]:
        return normalization(self.layer.config, name)

    def record(self, name: str, x: jax.Array) -> None:
        record_input_norm(self.layer, name, x)

    def sow(self, name: str, value: jax.Array) -> None:
        self.layer.sow(ADMIN_PROFILE, name, value, reduce_fn=lambda _, v: v, init_fn=float)


# sublayer → the name of its (input or post) norm, as fairseq/torchscale name them
NORM_NAMES = {
    "self_attn": "self_attn_layer_norm",
    "cross_attn": "cross_attn_layer_norm",
    "ffn": "final_layer_norm",
}
# sublayer → the fold_in indices of its dropout keys: its branch's, and its own inside G's
# (attention probabilities, the FFN's hidden activation)
DROPOUT_KEYS = {"self_attn": (0, 10), "cross_attn": (1, 11), "ffn": (2, 12)}
# attention sublayer → its slot of the decoding cache
CACHE_SLOTS = {"self_attn": "self", "cross_attn": "cross"}
