"""The pre-norm schemes: the norm on the branch input, x ← α·x + β·G(N(x)), a final norm.

* Pre-LN (Xiong et al. 2020): α = β = 1.
* Sub-LN (Magneto, eq. 1–5): G with an extra N before the output projection of self-attention
  and FFN (cross-attention has only the input N); v, out, fc1, fc2 at Xavier gain γ
  (``constants.subln``: e.g. a decoder's γ = √(ln 2M)).
* Peri-LN (Kim et al., ICML 2025): x ← x + N_out(G(N_in(x))), and a norm of the embeddings.
* LayerNorm Scaling (Sun et al. 2025): x ← x + G(N(x)/√ℓ), ℓ the 1-based layer of its stack.
* DeepScaleLM (Kedia et al., ICML 2024): x ← λ·x + β·G(N(x)), β² = k/S, λ² = 1 − β²
  (``constants.deepscalelm``), with its unit-moment init of the projections and embeddings.
* Mix-LN (Li et al., ICLR 2025): the first ⌊ratio·L⌋ layers of a stack x ← N(x + G(x)), the
  rest x ← x + G(N(x)); the final norm.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from deepnet_jax.common.config_schema import field
from deepnet_jax.model import constants
from deepnet_jax.model.schemes.base import (
    PAPER,
    SINCE_DEEPNET,
    Ops,
    Residual,
    Scheme,
    SideConstants,
    Sublayer,
    TorchscaleFlags,
    fail,
    need_index,
    weighted,
)

# The model config fields this family owns, each declared once (default, allowed values,
# comment): ``deepnet_jax.model.config.TransformerConfig`` names them in the config's order.
CONFIG_FIELDS = {
    "mix_ln_ratio": field(
        0.25,
        "mix_ln only: the first ⌊ratio·L⌋ layers of each stack are Post-LN, the rest Pre-LN "
        "(Li et al. 2025: 0.25)",
        low=0,
        high=1,
        before=0.25,
    ),
    "deepscalelm_k": field(
        2.0,
        "deepscalelm only: β² = k/S of x ← λx + βF(x), λ² = 1 − β², S the stack's residual "
        "branches (2 per layer; 3 in an encoder-decoder's decoder)",
        low=0,
        low_open=True,
        before=2.0,
    ),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class PreNorm(Scheme):
    """x ← α·x + β·dropout(G(h)), h = N(x) (:meth:`branch_input` may rescale it)."""

    family: ClassVar[str] = "pre"

    def sublayer(
        self, ops: Ops, sub: Sublayer, state: Residual, x: jax.Array
    ) -> tuple[jax.Array, Residual]:
        ops.record(sub.norm, x)
        h = self.branch_input(ops.norm(sub.norm)(x), state)
        f = self.branch_output(ops, sub, h)
        return weighted(state.alpha, x) + weighted(state.beta, f), state

    def branch_input(self, h: jax.Array, state: Residual) -> jax.Array:
        """What G reads: the normed x."""
        return h

    def branch_output(self, ops: Ops, sub: Sublayer, h: jax.Array) -> jax.Array:
        """What joins the sum: dropout(G(h))."""
        return sub.branch(h)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SubLN(PreNorm):
    """Magneto's Sub-LN: Pre-LN with the inner norm and the gain γ."""

    def constants(self, config: Any, side: str) -> SideConstants:
        k = constants.subln(config.arch, config.num_encoder_layers, config.num_decoder_layers)
        return SideConstants(gain=k[side]["gamma"])


@dataclasses.dataclass(frozen=True, kw_only=True)
class PeriLN(PreNorm):
    """x ← x + dropout(N_out(G(N_in(x)))), N_out the sublayer's ``{name}_output_layer_norm``."""

    def branch_output(self, ops: Ops, sub: Sublayer, h: jax.Array) -> jax.Array:
        out_norm = ops.norm(f"{sub.name}_output_layer_norm")
        return sub.dropout(out_norm(sub.g(h)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class LNScaling(PreNorm):
    """x ← x + G(N(x)/√ℓ), ℓ = layer_index + 1 (``constants.ln_scaling``)."""

    def layer_state(
        self, ops: Ops, side: str, layer_index: Any, ratio: jax.Array | None
    ) -> Residual:
        ell = jnp.asarray(need_index(self.name, layer_index), jnp.float32) + 1.0
        beta = self.weights(ops.config, side).branch  # CompleteP's m_L^(-α), else 1
        return Residual(beta=beta, norm_scale=jax.lax.rsqrt(ell))

    def branch_input(self, h: jax.Array, state: Residual) -> jax.Array:
        return h * state.norm_scale.astype(h.dtype)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeepScaleLM(PreNorm):
    """x ← λ·x + β·G(N(x)) with its unit-moment init: q, k N(0, 1/D), v and out N(0, σ_ℓ²)
    (``constants.deepscalelm_value_stds``), fc1, fc2 ``constants.deepscalelm_ffn_std``, the
    embeddings summing to variance 1 − p (``constants.deepscalelm_embedding_variances``)."""

    def constants(self, config: Any, side: str) -> SideConstants:
        k = constants.deepscalelm(
            config.arch, config.num_encoder_layers, config.num_decoder_layers, config.deepscalelm_k
        )[side]
        return SideConstants(alpha=k["lambda"], branch=k["beta"])

    def init_stds(self, config: Any, side: str, layer_index: Any) -> tuple:
        if layer_index is None:
            raise ValueError("scheme='deepscalelm' initializes each layer apart: pass layer_index")
        k = self.constants(config, side)
        table = constants.deepscalelm_value_stds(
            config.num_layers(side), config.d_model, config.dropout, k.alpha**2, k.branch**2
        )
        sigma_vo = jnp.asarray(table, jnp.float32)[layer_index]
        ffn_std = constants.deepscalelm_ffn_std(config.d_model, config.ffn_dim, config.dropout)
        return (config.d_model**-0.5, sigma_vo, ffn_std)

    def embedding_variances(self, config: Any) -> tuple[float, float]:
        return constants.deepscalelm_embedding_variances(config.positions, config.dropout)

    def check(self, config: Any) -> None:
        if config.activation != "relu":
            fail(
                "activation",
                config.activation,
                "DeepScaleLM's unit-moment init is derived for ReLU FFNs (its code swaps GeLU "
                "for ReLU); set it to 'relu'",
            )
        if config.init != "paper":
            fail("init", config.init, "scheme='deepscalelm' has its own init; set it to 'paper'")
        if config.fused_qkv:
            fail("fused_qkv", True, "DeepScaleLM sets q, k and v apart; set it to False")
        if config.positions == "sinusoidal" and config.dropout >= 0.5:
            fail(
                "dropout",
                config.dropout,
                "DeepScaleLM gives the embedding sum variance 1 − dropout; the sinusoidal table "
                "alone has 1/2, so dropout must be < 0.5",
            )
        for side in config.sides:
            branches = constants.residual_branches(config.arch, side, config.num_layers(side))
            if config.deepscalelm_k >= branches:
                fail(
                    "deepscalelm_k",
                    config.deepscalelm_k,
                    f"β² = k/{branches} (the {side}'s residual branches) must be < 1",
                )


@dataclasses.dataclass(frozen=True, kw_only=True)
class MixLN(Scheme):
    """Post-LN in layers ℓ < ⌊ratio·L⌋ (``constants.mix_ln_post_layers``), Pre-LN after; both
    kinds read the same norm, so one traced layer body serves the whole scanned stack."""

    family: ClassVar[str] = "mixed"

    def layer_state(
        self, ops: Ops, side: str, layer_index: Any, ratio: jax.Array | None
    ) -> Residual:
        c = ops.config
        switch = constants.mix_ln_post_layers(c.num_layers(side), c.mix_ln_ratio)
        return Residual(post=jnp.asarray(need_index(self.name, layer_index)) < switch)

    def sublayer(
        self, ops: Ops, sub: Sublayer, state: Residual, x: jax.Array
    ) -> tuple[jax.Array, Residual]:
        ln = ops.norm(sub.norm)
        z = x + sub.branch(jnp.where(state.post, x, ln(x)))
        ops.record(sub.norm, jnp.where(state.post, z, x))  # what N reads
        return jnp.where(state.post, ln(z), z), state


PRE_LN = PreNorm(
    name="pre_ln",
    title="Pre-LN",
    origin=PAPER,
    dyt_ok=True,
    branch_output_kept=True,
    torchscale=TorchscaleFlags(normalize_before=True),
)
SUBLN = SubLN(
    name="subln",
    title="Sub-LN",
    origin=PAPER,
    dyt_ok=True,
    branch_output_kept=True,
    torchscale=TorchscaleFlags(subln=True, normalize_before=True),
    inner_norm=True,
    cross_gain=False,
)
MIX_LN = MixLN(name="mix_ln", title="Mix-LN", origin=SINCE_DEEPNET, fields=("mix_ln_ratio",))
PERI_LN = PeriLN(
    name="peri_ln", title="Peri-LN", origin=SINCE_DEEPNET, dyt_ok=True, embedding_norm=True
)
LN_SCALING = LNScaling(
    name="ln_scaling",
    title="LayerNorm Scaling",
    origin=SINCE_DEEPNET,
    dyt_ok=True,
    branch_output_kept=True,
)
DEEPSCALELM = DeepScaleLM(
    name="deepscalelm",
    title="DeepScaleLM",
    origin=SINCE_DEEPNET,
    dyt_ok=True,
    branch_output_kept=True,
    fields=("deepscalelm_k",),
)
