"""The combining schemes: each layer reads a combination of every earlier layer's output, so the
carry grows with depth and the stack is an unrolled loop of its own (``model.stacks.KINDS``).
Their layers are those of another scheme (:attr:`Combining.layer`).

* DLCL (Wang et al. 2019): x_{l+1} = Σ_k W[l, k]·LN_k(y_k) with Pre-LN layers (``dlcl_pre``,
  eq. 8; ``model.dlcl_layer_norm=False`` drops LN_k, the paper's ablation) or
  LN(Σ_k W[l, k]·y_k) with Post-LN layers (``dlcl_post``, eq. 9); W lower-triangular,
  1/(l+1) at init (``model.dlcl_weights``).
* DenseFormer (Pagliardini et al., NeurIPS 2024, eq. 1–2): Pre-LN blocks; after block i the
  depth-weighted average Y_i = Σ_{j≤i} W[i, j]·X_j feeds block i+1, W the identity at init.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from deepnet_jax.common.config_schema import field
from deepnet_jax.model.schemes.base import PAPER, SINCE_DEEPNET, Scheme, fail
from deepnet_jax.model.schemes.post_norm import POST_LN
from deepnet_jax.model.schemes.pre_norm import PRE_LN

DLCL_WEIGHTS = ("learnable", "fix_one", "fix_avg")

# The model config fields this family owns, each declared once (default, allowed values,
# comment): ``deepnet_jax.model.config.TransformerConfig`` names them in the config's order.
CONFIG_FIELDS = {
    "dlcl_weights": field(
        "learnable",
        "dlcl_* only: learnable, fix_one (all 1), fix_avg (1/(l+1))",
        choices=DLCL_WEIGHTS,
    ),
    "dlcl_layer_norm": field(
        True, "dlcl_pre: the per-layer LN_k of DLCL eq. 8 (False: the ablation)"
    ),
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Combining(Scheme):
    """A combining scheme.

    Attributes:
      layer: the scheme of each of its layers.
      history_norm: DLCL eq. 8's LN_k of each layer output before it is combined.
      combine_norm: DLCL eq. 9's LN after each combination.
    """

    layer: Scheme
    history_norm: bool = False
    combine_norm: bool = False

    @property
    def family(self) -> str:  # its layers'
        return self.layer.family

    @property
    def per_layer(self) -> Scheme:
        return self.layer

    def check(self, config: Any) -> None:
        if self.combine_norm and not config.dlcl_layer_norm:
            fail(
                "dlcl_layer_norm",
                False,
                "the per-layer LN ablation (DLCL eq. 8, Table 6) exists "
                "only for scheme='dlcl_pre'; eq. 9's LN is part of 'dlcl_post'",
            )


DLCL_PRE = Combining(
    name="dlcl_pre",
    title="DLCL (pre-norm)",
    origin=PAPER,
    stack="dlcl",
    dyt_ok=True,
    layer=PRE_LN,
    history_norm=True,
)
DLCL_POST = Combining(
    name="dlcl_post",
    title="DLCL (post-norm)",
    origin=PAPER,
    stack="dlcl",
    layer=POST_LN,
    combine_norm=True,
)
DENSEFORMER = Combining(
    name="denseformer",
    title="DenseFormer",
    origin=SINCE_DEEPNET,
    stack="dwa",
    dyt_ok=True,
    layer=PRE_LN,
)
