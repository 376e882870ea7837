"""One Transformer layer under each residual/normalization scheme (SPEC.md table,
docs/schemes.md).

A layer is 2 sublayers (self-attention, FFN), or 3 (self-attention, cross-attention, FFN) in
the decoder of an encoder-decoder model. Per sublayer with function G (N the config's norm):

* ``post_ln``:  x ← N(x + G(x))
* ``pre_ln``:   x ← x + G(N(x))
* ``deepnorm``: x ← N(α·x + G(x))    (DeepNet eq. in Fig. 2a; α scales the residual x)
* ``subln``:    x ← x + G(N(x)), G with an extra N before its output projection
                (Magneto eq. 1–5; cross-attention has only the input N)
* ``mix_ln``:   ``post_ln`` in the first ⌊ratio·L⌋ layers, ``pre_ln`` after (Mix-LN)
* ``peri_ln``:  x ← x + N_out(G(N_in(x)))                  (Peri-LN)
* ``ln_scaling``: x ← x + G(N(x)/√ℓ), ℓ the 1-based layer  (LayerNorm Scaling)
* ``deepscalelm``: x ← λ·x + β·G(N(x)), λ² + β² = 1       (DeepScaleLM)
* ``rezero``:   x ← x + α_l·G(x), one α_l per layer, 0 at init, no norm   (ReZero eq. 1)
* ``skipinit``: x ← x + α·G(x), one α per sublayer, no norm               (SkipInit)
* ``admin``:    x ← N(x ⊙ ω + G(x)), ω [D] per sublayer, profiled at init (Admin)

Dropout (``config.dropout``) is applied to G's output before it is weighted and summed. DLCL
layers are ``pre_ln`` (``dlcl_pre``) or ``post_ln`` (``dlcl_post``) layers and DenseFormer's
``pre_ln`` layers; their cross-layer combinations live in ``stacks.py``.

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

from deepnet_jax.model import constants
from deepnet_jax.model.attention import MultiHeadAttention
from deepnet_jax.model.config import TransformerConfig
from deepnet_jax.model.initializers import TORCHSCALE_INITS, torchscale_gain
from deepnet_jax.model.schemes import residual_scheme
from deepnet_jax.model.sublayers import (
    FeedForward,
    constrain,
    dropout,
    normalization,
    record_input_norm,
)

ADMIN_PROFILE = "admin_profile"  # the collection Admin's profiling pass sows ω into
SIDES = ("encoder", "decoder")


@dataclasses.dataclass(frozen=True)
class Residual:
    """How one layer's sublayers join the stream, fixed per layer (traced values included).

    Attributes:
      scheme: the per-layer residual form (``schemes.residual_scheme``).
      alpha: the residual's weight (DeepNorm's α, DeepScaleLM's λ; 1 otherwise).
      beta: the branch's constant weight (DeepScaleLM's β; 1 otherwise).
      post: Mix-LN: whether this layer is a Post-LN layer (a traced bool; None otherwise).
      norm_scale: LayerNorm Scaling's 1/√ℓ (a traced scalar; None otherwise).
      admin_ratio: Admin's running ratio r in its profiling pass (None otherwise).
    """

    scheme: str
    alpha: float = 1.0
    beta: float = 1.0
    post: jax.Array | None = None
    norm_scale: jax.Array | None = None
    admin_ratio: jax.Array | None = None


class TransformerLayer(nn.Module):
    """One encoder or decoder layer: x [B, T, D] → [B, T, D].

    Attributes:
      config: model hyper-parameters.
      side: "encoder" or "decoder"; selects DeepNorm's (α, β), Sub-LN's γ or DeepScaleLM's
        (λ, β) for that side (β of an encoder-decoder's encoder is torchscale's under the
        torchscale inits).
      has_cross: add cross-attention over ``enc_out`` (decoder of an encoder-decoder).
      deterministic: disable dropout.
      carry_output: return ``(x, None)`` instead of ``x`` (the ``nn.scan`` convention).

    Call: ``layer(x [B,T,D], self_mask [B|1,1,T|1,T], enc_out [B,S,D] | None,
    enc_mask [B,1,1|T,S] | None, positions [B|1,T] | None, dropout_key, cache=None,
    cache_index=None, layer_index=None)``; ``positions`` (of x's tokens) are read by rotary
    self-attention (``positions="rope"``) only, which needs them; ``layer_index`` (0-based,
    an int or a traced scalar) by the schemes that depend on the layer (mix_ln, ln_scaling,
    and deepscalelm's init), which need it.

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
        self_mask: jax.Array | None,
        enc_out_BSD: jax.Array | None = None,
        enc_mask: jax.Array | None = None,
        positions: jax.Array | None = None,
        dropout_key: jax.Array | None = None,
        cache: dict[str, dict[str, jax.Array]] | None = None,
        cache_index: jax.Array | None = None,
        layer_index: int | jax.Array | None = None,
    ):
        c = self.config
        admin_ratio = None
        if isinstance(x_BTD, tuple):  # Admin's profiling pass: (x, r)
            x_BTD, admin_ratio = x_BTD
        residual = self._residual(layer_index, admin_ratio)
        gain = self._gain()
        inner = residual.scheme == "subln"
        stds = self._deepscalelm_stds(layer_index)
        new_cache: dict[str, dict[str, jax.Array]] = {}

        def key(i: int) -> jax.Array | None:
            return None if dropout_key is None else jax.random.fold_in(dropout_key, i)

        def attend(module: MultiHeadAttention, h, kv, mask, i: int, slot: str, index):
            if cache is None:
                return module(h, kv, mask, key(i), positions=positions)
            out, new_cache[slot] = module(
                h, kv, mask, key(i), cache=cache[slot], cache_index=index, positions=positions
            )
            return out

        rezero = self._rezero_alpha(residual.scheme)
        x_BTD = constrain(x_BTD)
        self_attn = MultiHeadAttention(
            c,
            gain,
            inner,
            self.deterministic,
            fuse_qkv=c.fused_qkv,
            rotary=c.positions == "rope",
            stds=stds and stds[:2],
            name="self_attn",
        )
        x_BTD, residual = self._sublayer(
            residual,
            x_BTD,
            lambda h: attend(self_attn, h, h, self_mask, 10, "self", cache_index),
            "self_attn",
            key(0),
            rezero,
        )
        if self.has_cross:
            if enc_out_BSD is None and cache is None:
                raise ValueError("a layer with cross-attention needs the encoder output")
            cross_gain = gain if residual.scheme == "deepnorm" else 1.0  # Sub-LN: unscaled
            cross_attn = MultiHeadAttention(
                c, cross_gain, False, self.deterministic, stds=stds and stds[:2], name="cross_attn"
            )
            x_BTD, residual = self._sublayer(
                residual,
                x_BTD,
                lambda h: attend(cross_attn, h, enc_out_BSD, enc_mask, 11, "cross", None),
                "cross_attn",
                key(1),
                rezero,
            )
        ffn = FeedForward(c, gain, inner, self.deterministic, std=stds and stds[2], name="ffn")
        x_BTD, residual = self._sublayer(
            residual, x_BTD, lambda h: ffn(h, key(12)), "ffn", key(2), rezero
        )
        if residual.admin_ratio is not None:
            x_BTD = (x_BTD, residual.admin_ratio)
        if self.carry_output:
            return x_BTD, (new_cache if cache is not None else None)
        return x_BTD if cache is None else (x_BTD, new_cache)

    def _gain(self) -> float:
        """The Xavier gain of v, out, fc1 and fc2 on this side (torchscale's own DeepNorm
        encoder-decoder encoder gain under the torchscale inits)."""
        c = self.config
        gain = c.side_constants(self.side)[1]
        if c.init in TORCHSCALE_INITS:
            ts_gain = torchscale_gain(
                c.scheme, c.arch, self.side, c.num_encoder_layers, c.num_decoder_layers
            )
            gain = gain if ts_gain is None else ts_gain
        return gain

    def _residual(self, layer_index, admin_ratio) -> Residual:
        c = self.config
        scheme = residual_scheme(c.scheme)
        needs_index = scheme in ("mix_ln", "ln_scaling")
        if needs_index and layer_index is None:
            raise ValueError(f"scheme={scheme!r} depends on the layer: pass layer_index")
        if scheme == "mix_ln":
            L = c.num_encoder_layers if self.side == "encoder" else c.num_decoder_layers
            post = jnp.asarray(layer_index) < constants.mix_ln_post_layers(L, c.mix_ln_ratio)
            return Residual(scheme, post=post)
        if scheme == "ln_scaling":
            ell = jnp.asarray(layer_index, jnp.float32) + 1.0
            return Residual(scheme, norm_scale=jax.lax.rsqrt(ell))
        if scheme == "deepscalelm":
            lam, beta = c.deepscalelm_weights(self.side)
            return Residual(scheme, alpha=lam, beta=beta)
        if scheme == "admin" and admin_ratio is not None:
            return Residual(scheme, admin_ratio=jnp.asarray(admin_ratio, jnp.float32))
        return Residual(scheme, alpha=c.side_constants(self.side)[0])

    def _deepscalelm_stds(self, layer_index) -> tuple | None:
        """DeepScaleLM's init stds (σ_qk, σ_vo of this layer, σ_ffn) while initializing
        (``constants.deepscalelm_value_stds``/``deepscalelm_ffn_std``); None otherwise."""
        c = self.config
        if c.scheme != "deepscalelm" or not self.is_initializing():
            return None
        if layer_index is None:
            raise ValueError("scheme='deepscalelm' initializes each layer apart: pass layer_index")
        lam, beta = c.deepscalelm_weights(self.side)
        L = c.num_encoder_layers if self.side == "encoder" else c.num_decoder_layers
        table = constants.deepscalelm_value_stds(L, c.d_model, c.dropout, lam**2, beta**2)
        sigma_vo = jnp.asarray(table, jnp.float32)[layer_index]
        ffn_std = constants.deepscalelm_ffn_std(c.d_model, c.ffn_dim, c.dropout)
        return (c.d_model**-0.5, sigma_vo, ffn_std)

    def _rezero_alpha(self, scheme: str) -> jax.Array | None:
        """ReZero's one α of this layer, shared by its sublayers (0 at init)."""
        if scheme != "rezero":
            return None
        return self.param(
            "rezero_alpha", nn.with_logical_partitioning(nn.initializers.zeros, ()), (), jnp.float32
        )

    def _sublayer(
        self,
        residual: Residual,
        x: jax.Array,
        g: Callable[[jax.Array], jax.Array],
        name: str,
        dropout_key: jax.Array | None,
        rezero: jax.Array | None,
    ) -> tuple[jax.Array, Residual]:
        """One sublayer ``name`` (self_attn, cross_attn or ffn) with function g under the
        layer's residual form: the new x and the residual state (Admin's ratio moves on)."""
        c = self.config
        norm = NORM_NAMES[name]

        def branch(h: jax.Array) -> jax.Array:
            return dropout(g(h), c.dropout, dropout_key, self.deterministic, c.dropout_rng)

        scheme = residual.scheme
        if scheme in ("rezero", "skipinit"):
            alpha = rezero if scheme == "rezero" else self._skipinit_alpha(name)
            return constrain(x + alpha.astype(x.dtype) * branch(x)), residual
        if scheme == "mix_ln":
            ln = normalization(c, norm)
            z = x + branch(jnp.where(residual.post, x, ln(x)))
            record_input_norm(self, norm, jnp.where(residual.post, z, x))  # what N reads
            return constrain(jnp.where(residual.post, ln(z), z)), residual
        if scheme in ("post_ln", "deepnorm", "admin"):
            return self._post_sublayer(residual, x, branch, name)
        record_input_norm(self, norm, x)
        h = normalization(c, norm)(x)
        if residual.norm_scale is not None:
            h = h * residual.norm_scale.astype(h.dtype)
        if scheme == "peri_ln":
            out_norm = normalization(c, f"{name}_output_layer_norm")
            f = dropout(out_norm(g(h)), c.dropout, dropout_key, self.deterministic, c.dropout_rng)
        else:
            f = branch(h)
        return constrain(_weighted(residual.alpha, x) + _weighted(residual.beta, f)), residual

    def _post_sublayer(
        self, residual: Residual, x: jax.Array, branch: Callable, name: str
    ) -> tuple[jax.Array, Residual]:
        """N(a·x + G(x)): a = α (DeepNorm), 1 (Post-LN) or Admin's ω [D] (its profiling
        pass: ω = r, sown, and r moved on)."""
        c, norm = self.config, NORM_NAMES[name]
        f = branch(x)
        if residual.scheme != "admin":
            z = _weighted(residual.alpha, x) + f
        elif residual.admin_ratio is None:
            z = x * self._admin_omega(name).astype(x.dtype) + f
        else:  # the profiling pass: its ω is r (the parameter, not read, is ones until set)
            self._admin_omega(name)
            r = residual.admin_ratio
            self.sow(ADMIN_PROFILE, f"{name}_omega", r, reduce_fn=lambda _, v: v, init_fn=float)
            scaled = r.astype(x.dtype) * x
            z = scaled + f
            r = jnp.sqrt(jnp.var(scaled.astype(jnp.float32)) + jnp.var(f.astype(jnp.float32)))
            residual = dataclasses.replace(residual, admin_ratio=r)
        record_input_norm(self, norm, z)
        return constrain(normalization(c, norm)(z)), residual

    def _admin_omega(self, name: str) -> jax.Array:
        """Admin's ω [D] of sublayer ``name`` (ones until ``admin.profile`` sets it)."""
        return self.param(
            f"{name}_omega",
            nn.with_logical_partitioning(nn.initializers.ones, ("norm",)),
            (self.config.d_model,),
            jnp.float32,
        )

    def _skipinit_alpha(self, name: str) -> jax.Array:
        """SkipInit's α of sublayer ``name`` (``skipinit_alpha`` at init)."""
        return self.param(
            f"{name}_alpha",
            nn.with_logical_partitioning(nn.initializers.constant(self.config.skipinit_alpha), ()),
            (),
            jnp.float32,
        )


def _weighted(weight: float, x: jax.Array) -> jax.Array:
    """weight·x, with no multiply for a weight of 1 (the program of the unweighted schemes)."""
    return x if weight == 1.0 else weight * x


# sublayer → the name of its (input or post) norm, as fairseq/torchscale name them
NORM_NAMES = {
    "self_attn": "self_attn_layer_norm",
    "cross_attn": "cross_attn_layer_norm",
    "ffn": "final_layer_norm",
}
