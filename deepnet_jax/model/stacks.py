"""Layer stacks over depth: which kind runs a side, the side's final norm, and the two plain
kinds — scanned and rematerialized, or a Python loop.

Scanned stacks are ``nn.scan(nn.remat(TransformerLayer))`` with parameters stacked on a leading
``layers`` axis, so a 1,000-layer stack traces and compiles one layer body. With remat, the
backward pass keeps one residual [B, T, D] per layer (the scan carry) and recomputes each layer's
internals. ``scan_layers=False`` unrolls the same layers in Python (``layers_0``, ``layers_1``,
…) for comparison; ``deepnet_jax.model.layout`` converts parameters between the two layouts.
The nested (√L) scan over the same stacked parameters is ``model.grouped_stack``; DLCL and
DenseFormer, whose layers read every earlier output, are ``model.combining_stacks``.

Interface: every stack kind (:data:`KINDS`: scanned, grouped, unrolled, DLCL, DenseFormer) is
one function
``(owner, side: Side, inputs: StackInputs) -> (x [B, T, D], cache | None)``
(``model.stack_common``); :func:`stack_kind` picks one and :func:`apply_layers` runs it and the
side's final LayerNorm. The parameter paths are those of the kind (``layers`` stacked [L, …],
or ``layers_{i}``), whichever runs them.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from deepnet_jax.model import remat, schemes
from deepnet_jax.model.combining_stacks import denseformer, dlcl
from deepnet_jax.model.config import TransformerConfig
from deepnet_jax.model.grouped_stack import grouped
from deepnet_jax.model.norms import DIAGNOSTICS, normalization
from deepnet_jax.model.stack_common import (
    Side,
    StackFn,
    StackInputs,
    call_layer,
    in_loop,
    layer_class,
    stack_caches,
)
from deepnet_jax.model.sublayers import constrain
from deepnet_jax.model.transformer_layer import ADMIN_PROFILE, LayerOps


def has_final_norm(config: TransformerConfig) -> bool:
    """Pre-norm stacks (pre_ln, subln, dlcl_pre, mix_ln, peri_ln, …) end with a norm
    (``schemes.Scheme.final_norm``)."""
    return schemes.get(config.scheme).final_norm


def admin_profiling(owner: nn.Module, config: TransformerConfig) -> bool:
    """A profiled init's pass (Admin's, ``schemes.Scheme.profiled_init``) is running: its
    collection mutable outside init."""
    return (
        schemes.get(config.scheme).profiled_init
        and owner.is_mutable_collection(ADMIN_PROFILE)
        and not owner.is_initializing()
    )


def apply_layers(owner: nn.Module, side: Side, inputs: StackInputs) -> jax.Array | tuple:
    """Run one side's layers (the kind :func:`stack_kind` picks) and its final LN as
    submodules of ``owner``, the Encoder/Decoder whose compact ``__call__`` is running.

    Returns x [B, T, D], or with a decoding ``inputs.cache`` ``(x, new_cache)``: a scanned
    stack scans over the cache's layer axis together with the parameters, so one layer body is
    compiled. ``inputs.keys`` is filled here (:func:`layer_dropout_keys`). A stream scheme's
    layers carry its n streams (``Scheme.expand`` before them, ``Scheme.collapse`` after).
    """
    scheme = schemes.get(side.config.scheme)
    keys = layer_dropout_keys(owner, side.config, side.num_layers, side.deterministic)
    profiling = admin_profiling(owner, side.config)
    x0 = scheme.expand(side.config, inputs.x)
    x0 = (x0, jnp.ones((), jnp.float32)) if profiling else x0  # Admin: r₀ = 1
    inputs = dataclasses.replace(inputs, keys=keys, x=x0)
    x_BTD, new_cache = KINDS[stack_kind(owner, side, inputs)](owner, side, inputs)
    if profiling:
        x_BTD = x_BTD[0]
    x_BTD = scheme.collapse(LayerOps(owner), x_BTD)
    if has_final_norm(side.config):
        x_BTD = normalization(side.config, "layer_norm")(x_BTD)
    x_BTD = constrain(x_BTD)
    return x_BTD if inputs.cache is None else (x_BTD, new_cache)


def stack_kind(owner: nn.Module, side: Side, inputs: StackInputs) -> str:
    """The key of :data:`KINDS` that runs this side. Grouping only changes what the backward
    pass keeps, so init, cached decoding and the instruments' probe (forward only) take the
    flat scan over the same parameters. A combining scheme names its own
    (``schemes.Scheme.stack``)."""
    c = side.config
    own = schemes.get(c.scheme).stack
    if own is not None:
        return own
    forward_only = (
        inputs.cache is not None
        or owner.is_initializing()
        or owner.is_mutable_collection(DIAGNOSTICS)
        or admin_profiling(owner, c)
    )
    if remat.group_size(c, side.num_layers) and not forward_only:
        return "grouped"
    return "scanned" if c.scan_layers else "unrolled"


def _scanned(owner: nn.Module, side: Side, inputs: StackInputs) -> tuple[jax.Array, dict | None]:
    """``nn.scan`` over the layers: parameters (and a cache) stacked [L, …] under ``layers``;
    ``model.scan_unroll`` layer bodies per loop iteration."""
    scanned = nn.scan(
        layer_class(side.config, scanned=in_loop(side.num_layers, side.config.scan_unroll)),
        variable_axes={"params": 0, DIAGNOSTICS: 0, ADMIN_PROFILE: 0},  # one entry per layer
        split_rngs={"params": True, "dropout": True},
        in_axes=(nn.broadcast,) * 4 + (0, 0, nn.broadcast, 0),
        length=side.num_layers,
        unroll=side.config.scan_unroll,
        metadata_params={nn.PARTITION_NAME: "layers"},
    )
    layers = scanned(**side.layer_kwargs(), carry_output=True, name="layers")
    return layers(
        inputs.x,
        *inputs.attention_inputs(),
        inputs.keys,
        inputs.cache,
        inputs.cache_index,
        jnp.arange(side.num_layers),
    )


def _unrolled(owner: nn.Module, side: Side, inputs: StackInputs) -> tuple[jax.Array, dict | None]:
    """A Python loop over ``layers_0`` … ``layers_{L-1}`` (the cache sliced and restacked)."""
    layer_cls = layer_class(side.config, scanned=False)
    x_BTD, per_layer = inputs.x, []
    for i in range(side.num_layers):
        layer = layer_cls(**side.layer_kwargs(), name=f"layers_{i}")
        x_BTD, layer_cache = call_layer(layer, x_BTD, inputs, i)
        per_layer.append(layer_cache)
    return x_BTD, stack_caches(per_layer) if inputs.cache is not None else None


def layer_dropout_keys(
    owner: nn.Module, config: TransformerConfig, L: int, deterministic: bool
) -> jax.Array | None:
    """One dropout key per layer [L] (None when no dropout can fire).

    Keys are drawn once from the owner's "dropout" stream and handed to the layers explicitly, so
    the scanned and the unrolled stacks apply identical masks for the same parameters.
    """
    rates = (config.dropout, config.attention_dropout, config.activation_dropout)
    if deterministic or max(rates) == 0:
        return None
    return jax.random.split(owner.make_rng("dropout"), L)


KINDS: dict[str, StackFn] = {  # stack_kind(...) -> the function that runs it
    "scanned": _scanned,
    "grouped": grouped,
    "unrolled": _unrolled,
    "dlcl": dlcl,
    "dwa": denseformer,  # DenseFormer's depth-weighted averages
}
