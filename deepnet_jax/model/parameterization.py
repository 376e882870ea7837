"""How the model's multipliers, its init and its optimizer's hyper-parameters scale with depth
and width: ``model.parameterization``.

* ``standard``: none of them scale; the model and the optimizer are as configured.
* ``completep``: CompleteP (Dey et al., "Don't be lazy: CompleteP enables compute-efficient deep
  transformers", NeurIPS 2025, arXiv 2505.01618), Table 1's column α ∈ {0.5, 1} at α = 1, for a
  pre-norm Transformer. With the depth multiplier m_L = L/L_base (L the layers of the stack,
  L_base ``completep_base_layers``) and the width multiplier m_N = N/N_base (N ``d_model``,
  N_base ``completep_base_width``):

  - each residual branch x ← x + m_L^(-α)·G(N(x)) (Table 1, "MHA/MLP Residual");
  - the output logits x_L·Wᵀ·m_N^(-1) ("Unembed Fwd.");
  - init: embeddings and the output head N(0, σ²_base), hidden weights (every linear layer of
    the blocks) N(0, σ²_base·m_N^(-1)), σ_base ``completep_init_std`` ("Init. Var." rows);
  - per parameter group, the AdamW learning rate η, ε and weight decay λ of
    :func:`group_scales` ("LR (AdamW)", "WD (AdamW)", "AdamW ε (residual blocks)" rows).

This module holds the formulas and the parameter groups (:func:`labels`, read from the
parameter tree's layout); the layer (``schemes.base.Scheme.weights``), the projections, the
embeddings and the output head read the multipliers and init stds from it, and
``deepnet_jax.training.parameterization`` builds the grouped optimizer.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from deepnet_jax.common.config_schema import field

STANDARD = "standard"
COMPLETEP = "completep"
PARAMETERIZATIONS = (STANDARD, COMPLETEP)
ALPHA = 1.0  # CompleteP: depth-µP with α = 1 (Table 1's α column)
COMPLETEP_FIELDS = ("completep_base_layers", "completep_base_width", "completep_init_std")

# The model config fields the parameterization owns, each declared once (default, allowed values,
# comment): ``deepnet_jax.model.config.TransformerConfig`` names them in the config's order.
CONFIG_FIELDS = {
    "parameterization": field(
        "standard",
        "how multipliers, init and AdamW scale with depth and width (docs/schemes.md, "
        "'Parameterization'): standard (none scale) or completep (Dey et al. 2025, Table 1 at "
        "α = 1: residual branches × (L/L_base)^-1, logits × N_base/d_model, its init, and per "
        "parameter group AdamW η, ε and λ; pre-norm schemes)",
        choices=PARAMETERIZATIONS,
        before="standard",
    ),
    "completep_base_layers": field(
        2,
        "completep only: L_base, the base model's layers per stack (the authors' 2)",
        low=1,
        before=2,
    ),
    "completep_base_width": field(
        256,
        "completep only: N_base, the base model's d_model (the authors' 256)",
        low=1,
        before=256,
    ),
    "completep_init_std": field(
        0.02,
        "completep only: σ_base; embeddings and head N(0, σ²), hidden weights N(0, σ²·N_base/N)",
        low=0,
        low_open=True,
        before=0.02,
    ),
}


# The parameter groups of Table 1 (one AdamW rule each)
EMBEDDING = "embedding"  # token tables and learned position tables ("Embed")
HIDDEN_WEIGHT = "hidden_weight"  # the kernels of the blocks' linear layers ("Hidden")
HIDDEN_BIAS = "hidden_bias"  # their biases ("Hidden Bias")
HIDDEN_NORM = "hidden_norm"  # every norm inside the blocks ("Pre-LN")
OUTER_NORM = "outer_norm"  # the norms outside the blocks: the final norm ("Final-LN")
UNEMBEDDING = "unembedding"  # an untied output projection ("Unembed")
HIDDEN_GROUPS = (HIDDEN_WEIGHT, HIDDEN_BIAS, HIDDEN_NORM)  # per side: they scale with its m_L
GROUPS = (EMBEDDING, *HIDDEN_GROUPS, OUTER_NORM, UNEMBEDDING)
_LAYERS = re.compile(r"^layers(_\d+)?$")  # a stack's scanned "layers" or unrolled "layers_<i>"


def completep(config: Any) -> bool:
    """Whether ``config`` (a model config) asks for CompleteP."""
    return config.parameterization == COMPLETEP


def depth_multiplier(config: Any, side: str) -> float:
    """m_L = L/L_base: the layers of ``side``'s stack over ``completep_base_layers``."""
    return getattr(config, f"num_{side}_layers") / config.completep_base_layers


def width_multiplier(config: Any) -> float:
    """m_N = N/N_base: ``d_model`` over ``completep_base_width``."""
    return config.d_model / config.completep_base_width


def branch_multiplier(config: Any, side: str) -> float:
    """The weight of every residual branch of ``side``: m_L^(-α) under CompleteP
    (x ← x + m_L^(-α)·G(N(x)), Table 1), exactly 1.0 under ``standard``."""
    return depth_multiplier(config, side) ** -ALPHA if completep(config) else 1.0


def output_multiplier(config: Any) -> float:
    """The output logits' multiplier: m_N^(-1) under CompleteP (x_L·Wᵀ·m_N^(-1), Table 1's
    "Unembed Fwd."), exactly 1.0 under ``standard``."""
    return 1.0 / width_multiplier(config) if completep(config) else 1.0


def hidden_std(config: Any, gain: float = 1.0) -> float:
    """CompleteP's std of a hidden weight: σ_base·m_N^(-1/2) (variance σ²_base·m_N^(-1)),
    times the scheme's init gain ``gain`` (Sub-LN's γ; 1 for Pre-LN, the paper's setting)."""
    return gain * config.completep_init_std * width_multiplier(config) ** -0.5


def embedding_std(config: Any) -> float:
    """CompleteP's std of the embeddings and the output head: σ_base, whatever the width."""
    return config.completep_init_std


@dataclasses.dataclass(frozen=True)
class GroupScale:
    """One group's factors on the optimizer's base values: its learning rate is ``lr``·η, its
    AdamW ε ``eps``·ε and its decoupled weight decay ``weight_decay``·λ (applied, as in
    PyTorch's AdamW, to the group's learning rate: p ← p − lr·η·(adam + weight_decay·λ·p))."""

    lr: float = 1.0
    eps: float = 1.0
    weight_decay: float = 1.0


def group_scales(config: Any, group: str, side: str | None = None) -> GroupScale:
    """CompleteP's AdamW rule for parameter ``group`` (of ``side``'s blocks for the hidden
    groups), Table 1 with α = 1, m_L of ``side`` and m_N:

    * embeddings, the output head: η, ε·m_N^(-1), λ;
    * hidden weights: η·m_N^(-1)·m_L^(α-1), ε·m_N^(-1)·m_L^(-α), λ·m_N;
    * hidden biases: η·m_L^(α-1), ε·m_N^(-1)·m_L^(-α), no decay;
    * norms in the blocks ("Pre-LN"): η·m_L^(α-1), ε·m_N^(-1)·m_L^(-α), no decay;
    * norms outside the blocks ("Final-LN"): η, ε·m_N^(-1), no decay.

    ε of the embeddings, the head and the final norm scales with width only (the paper's
    Eq. 40; the authors' code, EleutherAI/nanoGPT-mup, branch completep, ``model.py``
    ``configure_optimizers``, whose ``emb_unemb_adam_eps`` fixed its earlier single ε). Table 1
    gives weight decay for the hidden weights only; the gains and biases are not decayed and the
    embeddings and the head keep λ, as in the authors' code.
    """
    if group not in GROUPS:
        raise ValueError(f"group={group!r} is not one of {', '.join(GROUPS)}")
    m_n = width_multiplier(config)
    if group in (EMBEDDING, UNEMBEDDING):
        return GroupScale(eps=1 / m_n)
    if group == OUTER_NORM:
        return GroupScale(eps=1 / m_n, weight_decay=0.0)
    if side is None:
        raise ValueError(f"group={group!r} scales with its stack's depth: pass side")
    m_l = depth_multiplier(config, side)
    eps = m_l**-ALPHA / m_n
    if group == HIDDEN_WEIGHT:
        return GroupScale(lr=m_l ** (ALPHA - 1) / m_n, eps=eps, weight_decay=m_n)
    return GroupScale(lr=m_l ** (ALPHA - 1), eps=eps, weight_decay=0.0)


def label(group: str, side: str | None = None) -> str:
    """The optimizer's label of ``group``: ``"<side>/<group>"`` for the hidden groups (each side
    has its own m_L), else the group."""
    return f"{side}/{group}" if group in HIDDEN_GROUPS else group


def scales(config: Any) -> dict[str, GroupScale]:
    """Every label a model of ``config`` may have (:func:`label`) → its :class:`GroupScale`."""
    sides = [s for s in ("encoder", "decoder") if getattr(config, f"num_{s}_layers") > 0]
    out = {g: group_scales(config, g) for g in (EMBEDDING, OUTER_NORM, UNEMBEDDING)}
    for side in sides:
        out.update({label(g, side): group_scales(config, g, side) for g in HIDDEN_GROUPS})
    return out


def labels(params: Mapping[str, Any]) -> dict[str, Any]:
    """The tree of ``params`` (a model's parameters, with or without the ``"params"`` level;
    or its gradients) with each leaf replaced by its group's label (:func:`label`), read from
    the layout: under ``<side>/layers`` (scanned) or ``<side>/layers_<i>`` (unrolled) a module
    holding a ``kernel`` is a linear layer (its ``kernel`` a hidden weight, its ``bias`` a hidden
    bias) and any other module a norm; outside the blocks ``output_projection`` is the head, a
    module holding ``embedding`` an embedding table and any other a norm (the final norm,
    Peri-LN's embedding norm)."""
    return _label_tree(params, ())


def _label_tree(node: Mapping[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        here = (*path, str(key))
        if isinstance(value, Mapping):
            out[key] = _label_tree(value, here)
        else:
            out[key] = _leaf_label(here, node)
    return out


def _leaf_label(path: tuple[str, ...], module: Mapping[str, Any]) -> str:
    """The label of the leaf at ``path`` whose module (its parent) holds ``module``."""
    names = path[1:] if path[0] == "params" else path
    blocks = [i for i, name in enumerate(names) if _LAYERS.match(name)]
    if blocks:
        side = names[blocks[0] - 1] if blocks[0] else ""
        if "kernel" in module:
            group = HIDDEN_WEIGHT if names[-1] == "kernel" else HIDDEN_BIAS
        else:
            group = HIDDEN_NORM
        return label(group, side)
    if names[0] == "output_projection":
        return UNEMBEDDING
    return EMBEDDING if "embedding" in module else OUTER_NORM
