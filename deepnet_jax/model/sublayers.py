"""Sublayer building blocks: projections, LayerNorm, dropout and the FFN (multi-head attention
is :mod:`deepnet_jax.model.attention`).

Every parameter carries logical axis names (``embed``, ``heads``, ``kv``, ``mlp``, ``norm``) via
``nn.with_logical_partitioning``; gains are part of each kernel's initializer (SPEC.md), never
applied afterwards. Parameters are stored in ``config.param_dtype`` and cast to
``config.dtype`` for compute; LayerNorm statistics and the attention softmax run in float32.
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
from deepnet_jax.model.config import DROPOUT_RNGS, TransformerConfig
from deepnet_jax.model.initializers import (
    Initializer,
    fairseq_initializers,
    sliced_xavier_normal,
    stacked_slices,
    torchscale_bert_normal,
    torchscale_uniform,
    xavier_normal,
)

# Activation layout at sublayer boundaries: [batch, length, embed].
ACTIVATION_AXES = ("batch", "length", "embed")
# A stream scheme's residual (Hyper-Connections, mHC): [batch, length, stream, embed], the few
# streams unsharded.
STREAM_AXES = ("batch", "length", None, "embed")


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


# lowbias32 (Chris Wellons' hash-prospector, public domain): a 32-bit integer hash with two
# multiplies; bias 0.17, among the lowest found for 2-multiply hashes.
_LOWBIAS32 = ((16, 0x7FEB352D), (15, 0x846CA68B), (16, None))


def _lowbias32(h: jax.Array) -> jax.Array:
    for shift, multiplier in _LOWBIAS32:
        h = h ^ (h >> shift)
        if multiplier is not None:
            h = h * jnp.uint32(multiplier)
    return h


def dropout_bits(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """uint32 ``shape`` of keyed hash bits: lowbias32(lowbias32(i ⊕ k0) + k1) for the flat
    element index i, where (k0, k1) = ``jax.random.bits(key, (2,))`` are two words of the key's
    own PRNG (any ``jax.random`` key implementation, or a raw uint32 key). For a fixed key the
    map i → bits is a bijection of uint32, so the elements of one mask are distinct draws;
    independence between masks comes from their keys, which the model derives with
    ``jax.random`` (split, fold_in)."""
    size = math.prod(shape)
    if size >= 2**32:
        raise ValueError(f"dropout over {size} elements: the hash counter is 32-bit (< 2**32)")
    k0, k1 = jax.random.bits(key, (2,), jnp.uint32)
    index = jax.lax.iota(jnp.uint32, size).reshape(shape)
    return _lowbias32(_lowbias32(index ^ k0) + k1)


def dropout(
    x: jax.Array,
    rate: float,
    key: jax.Array | None,
    deterministic: bool,
    rng: str = "hash",
) -> jax.Array:
    """Inverted dropout: ``where(m, x / (1 − rate), 0)``, m ~ Bernoulli(1 − rate) per element.

    ``rng`` picks how the mask is drawn from ``key``:

    * ``"hash"``: m = :func:`dropout_bits` ≥ ⌊rate·2³²⌋ (the rate exact to 2⁻³²). About
      ten integer operations per element, so cheap wherever XLA puts it. On XLA:CPU this matters:
      JAX lowers threefry there as a rolled loop that materializes every round, and an unrolled
      counter RNG (philox) is re-derived inside every fusion that reads the mask (the forward
      select, the backward one, and again under remat).
    * ``"jax"``: ``jax.random.bernoulli(key, 1 − rate)`` with the key's own PRNG (threefry by
      default): the same masks as ``flax.linen.Dropout`` for the same key.
    """
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"dropout rate={rate!r} must be in [0, 1)")
    if deterministic or rate == 0.0:
        return x
    if key is None:
        raise ValueError("dropout with rate > 0 outside deterministic mode needs a key")
    keep = 1.0 - rate
    if rng == "hash":
        mask = dropout_bits(key, x.shape) >= jnp.uint32(int(rate * 2**32))
    elif rng == "jax":
        mask = jax.random.bernoulli(key, keep, x.shape)
    else:
        raise ValueError(f"dropout rng={rng!r}; allowed values are {DROPOUT_RNGS}")
    return jax.lax.select(mask, x / keep, jnp.zeros_like(x))


class Dropout(nn.Module):
    """:func:`dropout` with its key from the module's ``"dropout"`` stream (where no explicit
    key is at hand, e.g. the embeddings); named like ``flax.linen.Dropout`` (``Dropout_0``), so
    with ``rng="jax"`` it draws the masks that module drew."""

    rate: float
    rng: str = "hash"

    @nn.compact
    def __call__(self, x: jax.Array, deterministic: bool) -> jax.Array:
        if deterministic or self.rate == 0.0:
            return x
        return dropout(x, self.rate, self.make_rng("dropout"), False, self.rng)


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
    ``tag`` names the output for ``checkpoint_name``-based remat policies.
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
