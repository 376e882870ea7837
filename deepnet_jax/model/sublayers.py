"""Sublayer building blocks: projections, the FFN and the activations' sharding constraint
(multi-head attention is :mod:`deepnet_jax.model.attention`, the norms
:mod:`deepnet_jax.model.norms`, dropout :mod:`deepnet_jax.model.dropout`).

Every parameter carries logical axis names (``embed``, ``heads``, ``kv``, ``mlp``, ``norm``) via
``nn.with_logical_partitioning``; gains are part of each kernel's initializer
(:mod:`deepnet_jax.model.initializers`), never applied afterwards. Parameters are stored in
``config.param_dtype`` and cast to ``config.dtype`` for compute; LayerNorm statistics and the
attention softmax run in float32.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from deepnet_jax.model import parameterization
from deepnet_jax.model.config import TransformerConfig
from deepnet_jax.model.dropout import dropout
from deepnet_jax.model.initializers import (
    Initializer,
    fairseq_initializers,
    sliced_xavier_normal,
    stacked_slices,
    torchscale_bert_normal,
    torchscale_uniform,
    xavier_normal,
)
from deepnet_jax.model.norms import normalization, record_input_norm

# Activation layout at sublayer boundaries: [batch, length, embed].
ACTIVATION_AXES = ("batch", "length", "embed")
# A stream scheme's residual (Hyper-Connections, mHC): [batch, length, stream, embed], the few
# streams unsharded.
STREAM_AXES = ("batch", "length", None, "embed")


class Projection(nn.Module):
    """y = x·W + b, contracting the last ``len(in_shape)`` axes of x with W.

    The kernel has shape ``in_shape + out_shape`` and logical names ``in_names + out_names``;
    it is Xavier-normal with gain ``gain`` whose fans are the products of the in/out shapes,
    the bias zero (N(0, ``std``²) with ``std``). With ``slice_gains``, the first output axis
    stacks ``len(slice_gains)`` projections (a fused kernel): slice i has gain
    ``slice_gains[i]`` and the fans of one slice.
    Under ``config.init="torchscale"`` kernel and bias are both U(±gain/√fan_in) instead
    (:func:`~deepnet_jax.model.initializers.torchscale_uniform`, per slice); under
    ``"torchscale_bert"`` the kernel is N(0, (0.02·gain)²) per slice, the bias zero; under
    ``"fairseq"`` by ``role`` ("attn_in" for q/k/v, "attn_out", "linear" for the FFN; see
    :func:`~deepnet_jax.model.initializers.fairseq_initializers`). Under
    ``config.parameterization="completep"`` the kernel is N(0, (gain·σ_base)²/m_N) per slice
    (CompleteP's hidden init, ``parameterization.hidden_std``), the bias zero.
    ``tag`` names the output for ``checkpoint_name``-based remat policies. ``out_scales``
    multiplies the output before it is tagged: one factor, or one per index of the first output
    axis
    (attention's 1/√K on the queries, :mod:`deepnet_jax.model.attention`): the matmul's own
    output fusion scales it, and the saved output is the scaled one.
    """

    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    in_names: tuple[str, ...]
    out_names: tuple[str, ...]
    config: TransformerConfig
    gain: float = 1.0
    tag: str | None = None
    slice_gains: tuple[float, ...] | None = None
    role: str = "linear"
    std: float | jax.Array | None = None
    out_scales: tuple[float, ...] | None = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        n_in = len(self.in_shape)
        init, bias_init = self._initializers()
        kernel = self.param(
            "kernel",
            nn.with_logical_partitioning(init, self.in_names + self.out_names),
            self.in_shape + self.out_shape,
            self.config.storage_dtype,
        )
        dtype = self.config.compute_dtype
        y = jnp.tensordot(x.astype(dtype), kernel.astype(dtype), axes=n_in)
        if self.config.use_bias:
            bias = self.param(
                "bias",
                nn.with_logical_partitioning(bias_init, self.out_names),
                self.out_shape,
                self.config.storage_dtype,
            )
            y = y + bias.astype(dtype)
        if self.out_scales is not None:
            scales = jnp.asarray(self.out_scales, dtype)
            y = y * scales.reshape(scales.shape + (1,) * (len(self.out_shape) - 1))
        if self.tag is not None:
            y = checkpoint_name(y, self.tag)
        return y

    def _initializers(self) -> tuple[Initializer, Initializer]:
        """(kernel init, bias init) under ``config.init`` (or N(0, ``std``²) and a zero bias
        where ``std`` is given: a scheme's own init, e.g. DeepScaleLM's, whose std may be a
        traced per-layer value)."""
        n_in, n_out = len(self.in_shape), len(self.out_shape)
        if self.std is not None:
            std = self.std

            def normal(key: jax.Array, shape, dtype=jnp.float32) -> jax.Array:
                return (jax.random.normal(key, shape, jnp.float32) * std).astype(dtype)

            return normal, nn.initializers.zeros
        if parameterization.completep(self.config):
            gains = (self.gain,) if self.slice_gains is None else self.slice_gains
            inits = [
                nn.initializers.normal(parameterization.hidden_std(self.config, g)) for g in gains
            ]
            kernel = inits[0] if self.slice_gains is None else stacked_slices(inits, n_in)
            return kernel, nn.initializers.zeros
        if self.config.init == "fairseq":
            gains = (self.gain,) if self.slice_gains is None else self.slice_gains
            return fairseq_initializers(self.role, gains, n_in, n_out, math.prod(self.in_shape))
        if self.config.init == "torchscale":
            fan_in = math.prod(self.in_shape)
            if self.slice_gains is None:
                init = torchscale_uniform(self.gain, fan_in)
                return init, init
            inits = [torchscale_uniform(g, fan_in) for g in self.slice_gains]
            return stacked_slices(inits, n_in), stacked_slices(inits, 0)
        if self.config.init == "torchscale_bert":
            if self.slice_gains is None:
                return torchscale_bert_normal(self.gain), nn.initializers.zeros
            inits = [torchscale_bert_normal(g) for g in self.slice_gains]
            return stacked_slices(inits, n_in), nn.initializers.zeros
        if self.slice_gains is None:
            init = xavier_normal(
                self.gain, in_axis=tuple(range(n_in)), out_axis=tuple(range(n_in, n_in + n_out))
            )
        else:  # fans of one slice: its out axes are those after the slice axis
            init = sliced_xavier_normal(
                self.slice_gains,
                slice_axis=n_in,
                in_axis=tuple(range(n_in)),
                out_axis=tuple(range(n_in, n_in + n_out - 1)),
            )
        return init, nn.initializers.zeros


_ACTIVATION_FNS = {
    "relu": jax.nn.relu,
    "gelu": functools.partial(jax.nn.gelu, approximate=False),
    "swiglu": jax.nn.silu,  # Swish with β = 1 (Shazeer 2020, "GLU Variants")
    "geglu": functools.partial(jax.nn.gelu, approximate=False),
}


class FeedForward(nn.Module):
    """Position-wise FFN: x [B, T, D] → [B, T, D].

    Plain (``activation`` relu, gelu): fc2(φ(fc1(x))). Gated (swiglu, geglu; Shazeer 2020):
    fc2(φ(gate(x)) ⊙ fc1(x)), φ = SiLU or GELU, every projection [D, F] or [F, D] with F =
    ``ffn_dim``. ``gain`` is the Xavier gain of ``fc1`` and ``fc2``; a gated FFN's ``gate``
    keeps gain 1, as attention's q and k do (its input to a nonlinearity that multiplies the
    linear path: docs/blocks.md derives why β on fc1 and fc2 bounds the update as DeepNet's
    Theorem 4.2 does for the plain FFN); ``std`` replaces the Xavier init of fc1 and fc2 by
    N(0, std²) (DeepScaleLM's). ``inner_norm`` adds Sub-LN's ``ffn_layernorm`` on the
    hidden activation before ``fc2`` (Magneto eq. 4). ``dropout_key`` seeds the activation
    dropout (required unless deterministic).
    """

    config: TransformerConfig
    gain: float = 1.0
    inner_norm: bool = False
    deterministic: bool = True
    std: float | None = None  # fc1 and fc2 N(0, std²) instead (DeepScaleLM)

    @nn.compact
    def __call__(self, x_BTD: jax.Array, dropout_key: jax.Array | None = None) -> jax.Array:
        c = self.config

        def up(name: str, gain: float) -> Projection:
            std = None if name == "gate" else self.std
            return Projection(
                (c.d_model,),
                (c.ffn_dim,),
                ("embed",),
                ("mlp",),
                c,
                gain,
                tag=name,
                std=std,
                name=name,
            )

        phi = _ACTIVATION_FNS[c.activation]
        if c.gated_ffn:
            h_BTF = phi(up("gate", 1.0)(x_BTD)) * up("fc1", self.gain)(x_BTD)
        else:
            h_BTF = phi(up("fc1", self.gain)(x_BTD))
        h_BTF = dropout(h_BTF, c.activation_dropout, dropout_key, self.deterministic, c.dropout_rng)
        if self.inner_norm:
            record_input_norm(self, "ffn_layernorm", h_BTF)
            h_BTF = normalization(c, "ffn_layernorm", axis_name="mlp")(h_BTF)
        return Projection(
            (c.ffn_dim,), (c.d_model,), ("mlp",), ("embed",), c, self.gain, std=self.std, name="fc2"
        )(h_BTF)


def constrain(x: jax.Array, axes: Sequence[str | None] | None = None) -> jax.Array:
    """Sharding constraint by logical axis names (a no-op outside a mesh with rules); by default
    :data:`ACTIVATION_AXES`, or :data:`STREAM_AXES` for a residual of streams [B, T, n, D]."""
    if axes is None:
        axes = STREAM_AXES if x.ndim == len(STREAM_AXES) else ACTIVATION_AXES
    return nn.with_logical_constraint(x, tuple(axes))
