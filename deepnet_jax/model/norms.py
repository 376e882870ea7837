"""The config's norm over the last axis (LayerNorm, RMSNorm or Dynamic Tanh), and the record of
what a norm reads for the stability instruments (the ``diagnostics`` collection).

Scale (and bias) carry the logical axis they are given (``norm``, ``kv``, ``mlp``); parameters
are stored in ``config.param_dtype``, statistics run in float32.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from deepnet_jax.model.config import TransformerConfig

DIAGNOSTICS = "diagnostics"  # the flax collection the stability instruments sow into
LN_INPUT_SUFFIX = "_input"  # sown name = LayerNorm name + this (names are shared with modules)


def record_input_norm(module: nn.Module, name: str, x: jax.Array) -> None:
    """Sow ``<name>_input`` = mean over positions of ‖x[..., :]‖₂ (x [B, T, F], padding
    included) into the ``diagnostics`` collection for the LayerNorm ``name`` about to read x,
    only when that collection is mutable outside ``init`` (the stability instruments of
    ``deepnet_jax.training.diagnostics``); otherwise nothing is computed."""
    if module.is_mutable_collection(DIAGNOSTICS) and not module.is_initializing():
        norms = jnp.sqrt(jnp.sum(jnp.square(x.astype(jnp.float32)), axis=-1))
        module.sow(
            DIAGNOSTICS,
            f"{name}{LN_INPUT_SUFFIX}",
            jnp.mean(norms),
            reduce_fn=lambda _, v: v,
            init_fn=float,
        )


class DynamicTanh(nn.Module):
    """Dynamic Tanh (Zhu, Chen, He, LeCun, Liu, CVPR 2025, eq. 1): DyT(x) = g ⊙ tanh(a·x) + b
    over the last axis [..., F] → [..., F], a one learned scalar (``alpha``, initially
    ``alpha_init``: the paper's α₀ = 0.5), g (``scale``) ones and b (``bias``, only with
    ``use_bias``) zeros [F] on logical axis ``axis_name``; tanh in float32."""

    alpha_init: float
    use_bias: bool
    dtype: jnp.dtype
    param_dtype: jnp.dtype
    axis_name: str = "norm"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        F = x.shape[-1]
        alpha = self.param(
            "alpha",
            nn.with_logical_partitioning(nn.initializers.constant(self.alpha_init), ()),
            (),
            jnp.float32,
        )
        scale = self.param(
            "scale",
            nn.with_logical_partitioning(nn.initializers.ones, (self.axis_name,)),
            (F,),
            self.param_dtype,
        )
        y = jnp.tanh(alpha * x.astype(jnp.float32)) * scale.astype(jnp.float32)
        if self.use_bias:
            bias = self.param(
                "bias",
                nn.with_logical_partitioning(nn.initializers.zeros, (self.axis_name,)),
                (F,),
                self.param_dtype,
            )
            y = y + bias.astype(jnp.float32)
        return y.astype(self.dtype)


def normalization(
    config: TransformerConfig, name: str, axis_name: str = "norm"
) -> nn.LayerNorm | nn.RMSNorm | DynamicTanh:
    """The config's norm over the last axis, float32 statistics, its scale (and bias) on logical
    axis ``axis_name``: ``model.norm="layernorm"`` (x − mean)/√(var + ε)·g + b (b only with
    ``use_bias``), ``"rmsnorm"`` x/√(mean(x²) + ε)·g (Zhang & Sennrich 2019), ε =
    ``layernorm_eps``; ``"dyt"`` :class:`DynamicTanh` (a = ``dyt_alpha``)."""
    if config.norm == "dyt":
        return DynamicTanh(
            config.dyt_alpha,
            config.use_bias,
            config.compute_dtype,
            config.storage_dtype,
            axis_name,
            name=name,
        )
    scale_init = nn.with_logical_partitioning(nn.initializers.ones, (axis_name,))
    if config.norm == "rmsnorm":
        return nn.RMSNorm(
            epsilon=config.layernorm_eps,
            dtype=config.compute_dtype,
            param_dtype=config.storage_dtype,
            scale_init=scale_init,
            name=name,
        )
    return nn.LayerNorm(
        epsilon=config.layernorm_eps,
        dtype=config.compute_dtype,
        param_dtype=config.storage_dtype,
        use_bias=config.use_bias,
        use_fast_variance=False,
        scale_init=scale_init,
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, (axis_name,)),
        name=name,
    )
