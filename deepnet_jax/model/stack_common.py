"""What every layer stack kind shares: the side it runs (:class:`Side`), what its layers read
(:class:`StackInputs`), its signature (:data:`StackFn`), the layer class it builds
(rematerialized or not) and one layer's call with its slice of a decoding cache.

The kinds themselves are ``model.stacks`` (scanned, unrolled, and the table ``KINDS`` that
picks one), ``model.grouped_stack`` (the nested scan) and ``model.combining_stacks`` (DLCL,
DenseFormer).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from deepnet_jax.model import remat
from deepnet_jax.model.config import TransformerConfig
from deepnet_jax.model.masks import AttentionMask
from deepnet_jax.model.transformer_layer import TransformerLayer


@dataclasses.dataclass(frozen=True)
class Side:
    """One side's stack, fixed at trace time: the model ``config``, the side's ``name``
    ("encoder" or "decoder"), whether its layers cross-attend to an encoder (``has_cross``) and
    whether dropout is off (``deterministic``)."""

    config: TransformerConfig
    name: str
    has_cross: bool
    deterministic: bool

    @property
    def num_layers(self) -> int:
        return self.config.num_layers(self.name)

    def layer_kwargs(self) -> dict:
        """The attributes every :class:`TransformerLayer` of this side takes."""
        return dict(
            config=self.config,
            side=self.name,
            has_cross=self.has_cross,
            deterministic=self.deterministic,
        )


@dataclasses.dataclass(frozen=True)
class StackInputs:
    """What one side's layers read.

    Attributes:
      x: the embedded input [B, T, D].
      self_mask: self-attention mask, a ``masks.AttentionMask`` or a boolean [B|1, 1, T|1, T]
        (None: none).
      enc_out, enc_mask: the encoder output [B, S, D] and its mask (an ``AttentionMask`` or a
        boolean [B, 1, 1|T, S]), for cross-attention (None: none, or read from the cache while
        decoding).
      positions: the positions of x's tokens [B|1, T], for rotary self-attention (None: the
        model has no rotary positions).
      keys: one dropout key per layer [L, …] (None: no dropout fires).
      cache, cache_index: a decoding cache stacked over layers ([L, B, …] leaves, see
        ``architectures.init_cache``) and the position this call writes (None: no decoding).
    """

    x: jax.Array
    self_mask: AttentionMask | jax.Array | None
    enc_out: jax.Array | None = None
    enc_mask: AttentionMask | jax.Array | None = None
    positions: jax.Array | None = None
    keys: jax.Array | None = None
    cache: dict | None = None
    cache_index: jax.Array | None = None

    def attention_inputs(self) -> tuple:
        """``(self_mask, enc_out, enc_mask, positions)``: what every layer reads besides x
        (the same for every layer)."""
        return self.self_mask, self.enc_out, self.enc_mask, self.positions

    def key(self, i: int) -> jax.Array | None:
        return None if self.keys is None else self.keys[i]


StackFn = Callable[[nn.Module, Side, StackInputs], tuple[jax.Array, dict | None]]


def layer_class(config: TransformerConfig, scanned: bool):
    """:class:`TransformerLayer`, rematerialized under ``config.remat_policy`` unless it is
    "none". ``scanned``: every call runs inside a loop (:func:`in_loop`)."""
    if config.remat_policy == "none":
        return TransformerLayer
    # prevent_cse=False is safe (and faster) only inside a loop, as jax.checkpoint documents:
    # in straight-line code XLA merges the backward pass's recomputation with the forward pass
    return nn.remat(
        TransformerLayer, policy=remat.policy(config.remat_policy), prevent_cse=not scanned
    )


def in_loop(length: int, unroll: int) -> bool:
    """Whether a scan of ``length`` steps, ``unroll`` bodies an iteration, runs every step in a
    loop of two or more trips. JAX runs a scan unrolled whole (``unroll`` >= ``length``) and the
    remainder of ``length`` mod ``unroll`` steps as straight-line code, and XLA inlines a loop
    of one trip."""
    return length // unroll >= 2 and length % unroll == 0


def call_layer(
    layer: nn.Module, x_BTD: jax.Array, inputs: StackInputs, i: int
) -> tuple[jax.Array, dict | None]:
    """Layer ``i`` on ``x_BTD``: ``(y, its cache | None)``."""
    if inputs.cache is None:
        return layer(x_BTD, *inputs.attention_inputs(), inputs.key(i), layer_index=i), None
    return layer(
        x_BTD,
        *inputs.attention_inputs(),
        inputs.key(i),
        _layer_slice(inputs.cache, i),
        inputs.cache_index,
        i,
    )


def _layer_slice(cache: dict, i: int) -> dict:
    """Layer ``i``'s entries of a cache stacked over layers."""
    return jax.tree.map(lambda a: a[i], cache)


def stack_caches(caches: list[dict]) -> dict:
    """Per-layer caches → one cache stacked over layers (the scanned layout)."""
    return jax.tree.map(lambda *a: jnp.stack(a), *caches)
