"""The post-norm schemes: the norm after the residual sum, x ← N(a·x + G(x)), no final norm.

* Post-LN (Vaswani et al. 2017): a = 1.
* DeepNorm (DeepNet, Fig. 2): a = α per side and v, out, fc1, fc2 at Xavier gain β
  (``constants.deepnorm``: e.g. a decoder's α = (2M)^¼, β = (8M)^-¼; GLM-130B's variant
  α = (2N)^½, β = (2N)^-½).
* Admin (Liu et al., EMNLP 2020, Sec. 5): a = ω [D] per sublayer, trainable, its initial value
  profiled on a training batch (``model.admin``): ω_i = r, r ← √(Var(r·x) + Var(G_i(x))).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from deepnet_jax.common.config_schema import field
from deepnet_jax.model import constants
from deepnet_jax.model.initializers import TORCHSCALE_INITS, torchscale_deepnorm_encoder_gain
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
    weighted,
)

# The model config fields this family owns, each declared once (default, allowed values,
# comment): ``deepnet_jax.model.config.TransformerConfig`` names them in the config's order.
CONFIG_FIELDS = {
    "deepnorm_variant": field(
        "paper",
        "deepnorm only: paper (DeepNet's α, β) or glm (GLM-130B's α = (2N)^(1/2), "
        "β = (2N)^(-1/2); encoder or decoder only)",
        choices=constants.DEEPNORM_VARIANTS,
        before="paper",
    ),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class PostNorm(Scheme):
    """x ← N(α·x + G(x)) per sublayer, α this side's residual weight (1 for Post-LN)."""

    family: ClassVar[str] = "post"

    def sublayer(
        self, ops: Ops, sub: Sublayer, state: Residual, x: jax.Array
    ) -> tuple[jax.Array, Residual]:
        f = sub.branch(x)
        z = weighted(state.alpha, x) + f
        ops.record(sub.norm, z)
        return ops.norm(sub.norm)(z), state


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeepNorm(PostNorm):
    """DeepNet's x ← N(α·x + G(x)) with v, out, fc1, fc2 (and cross-attention's) at gain β."""

    def constants(self, config: Any, side: str) -> SideConstants:
        k = constants.deepnorm(
            config.arch,
            config.num_encoder_layers,
            config.num_decoder_layers,
            config.deepnorm_variant,
        )[side]
        return SideConstants(alpha=k["alpha"], gain=k["beta"])

    def init_gain(self, config: Any, side: str) -> float:
        """β, but torchscale's own encoder-decoder encoder gain 1.15·(N⁴M)^(-1/16) under the
        torchscale inits (the paper's β is 0.87·(N⁴M)^(-1/16))."""
        gain = self.constants(config, side).gain
        if config.init in TORCHSCALE_INITS and config.arch == "encdec" and side == "encoder":
            return torchscale_deepnorm_encoder_gain(
                config.num_encoder_layers, config.num_decoder_layers
            )
        return gain

    def check(self, config: Any) -> None:
        if config.deepnorm_variant == "glm" and config.arch == "encdec":
            fail(
                "deepnorm_variant",
                "glm",
                "GLM-130B's constants are for one stack (arch encoder or decoder); the "
                "encoder-decoder has only the paper's",
            )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Admin(PostNorm):
    """x ← N(x ⊙ ω + G(x)), ω [D] per sublayer (``{sublayer}_omega``, ones until profiled).

    In the profiling pass (``ratio`` given: x carried as (x, r), r₀ = 1) each sublayer uses
    ω = r, sows it, and hands on r ← √(Var(r·x) + Var(G(x))) (Transformer-Clinic's
    ``adaptive-profiling``).
    """

    def layer_state(
        self, ops: Ops, side: str, layer_index: Any, ratio: jax.Array | None
    ) -> Residual:
        if ratio is None:
            return super().layer_state(ops, side, layer_index, ratio)
        return Residual(ratio=jnp.asarray(ratio, jnp.float32))

    def sublayer(
        self, ops: Ops, sub: Sublayer, state: Residual, x: jax.Array
    ) -> tuple[jax.Array, Residual]:
        f = sub.branch(x)
        omega = ops.param(
            f"{sub.name}_omega", jax.nn.initializers.ones, (ops.config.d_model,), ("norm",)
        )
        if state.ratio is None:
            z = x * omega.astype(x.dtype) + f
        else:  # the profiling pass: its ω is r (the parameter, not read, is ones until set)
            r = state.ratio
            ops.sow(f"{sub.name}_omega", r)
            scaled = r.astype(x.dtype) * x
            z = scaled + f
            r = jnp.sqrt(jnp.var(scaled.astype(jnp.float32)) + jnp.var(f.astype(jnp.float32)))
            state = dataclasses.replace(state, ratio=r)
        ops.record(sub.norm, z)
        return ops.norm(sub.norm)(z), state


POST_LN = PostNorm(name="post_ln", title="Post-LN", origin=PAPER, torchscale=TorchscaleFlags())
DEEPNORM = DeepNorm(
    name="deepnorm",
    title="DeepNorm",
    origin=PAPER,
    torchscale=TorchscaleFlags(deepnorm=True),
    fields=("deepnorm_variant",),
)
ADMIN = Admin(name="admin", title="Admin", origin=SINCE_DEEPNET, profiled_init=True)
