"""The gated schemes: no norm in the residual stream, x ← x + g·G(x) with a learned gate g that
starts at (or near) 0, so the stack starts as (nearly) the identity; no final norm.

* ReZero (Bachlechner et al. 2020, eq. 1): one g = α_ℓ per layer, shared by its sublayers,
  0 at init (``rezero_alpha``; its code's one ``resweight`` per layer).
* SkipInit (De & Smith, NeurIPS 2020): one g = α per sublayer (``{sublayer}_alpha``),
  ``model.skipinit_alpha`` at init (0, or a small constant ≤ 1/√(branches)).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import jax

from deepnet_jax.common.config_schema import field
from deepnet_jax.model.schemes.base import SINCE_DEEPNET, Ops, Residual, Scheme, Sublayer

# The model config fields this family owns, each declared once (default, allowed values,
# comment): ``deepnet_jax.model.config.TransformerConfig`` names them in the config's order.
CONFIG_FIELDS = {
    "skipinit_alpha": field(
        0.0,
        "skipinit only: the initial α of x ← x + α·F(x) on every branch (De & Smith 2020: 0, "
        "or a small constant <= 1/√(branches))",
        low=0,
        before=0.0,
    ),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReZero(Scheme):
    """x ← x + α_ℓ·dropout(G(x)), α_ℓ this layer's gate (0 at init)."""

    family: ClassVar[str] = "none"

    def layer_state(
        self, ops: Ops, side: str, layer_index: Any, ratio: jax.Array | None
    ) -> Residual:
        return Residual(gate=ops.param("rezero_alpha", jax.nn.initializers.zeros, (), ()))

    def sublayer(
        self, ops: Ops, sub: Sublayer, state: Residual, x: jax.Array
    ) -> tuple[jax.Array, Residual]:
        return x + state.gate.astype(x.dtype) * sub.branch(x), state


@dataclasses.dataclass(frozen=True, kw_only=True)
class SkipInit(Scheme):
    """x ← x + α·dropout(G(x)), α this sublayer's gate (``skipinit_alpha`` at init)."""

    family: ClassVar[str] = "none"

    def sublayer(
        self, ops: Ops, sub: Sublayer, state: Residual, x: jax.Array
    ) -> tuple[jax.Array, Residual]:
        init = jax.nn.initializers.constant(ops.config.skipinit_alpha)
        alpha = ops.param(f"{sub.name}_alpha", init, (), ())
        return x + alpha.astype(x.dtype) * sub.branch(x), state


REZERO = ReZero(name="rezero", title="ReZero", origin=SINCE_DEEPNET)
SKIPINIT = SkipInit(
    name="skipinit", title="SkipInit", origin=SINCE_DEEPNET, fields=("skipinit_alpha",)
)
