"""DeepNorm and Sub-LN constants as pure functions of the architecture and depth.

N is the number of encoder layers and M the number of decoder layers; the tables are
the papers' (DeepNet Figure 2b and Section 4.3; Magneto Figure 2 and Section 3.2):

=========================  ======================  =======================  ====================
architecture               DeepNorm α              DeepNorm β               Sub-LN γ
=========================  ======================  =======================  ====================
encoder-only               (2N)^(1/4)              (8N)^(-1/4)              √(ln 2N)
decoder-only               (2M)^(1/4)              (8M)^(-1/4)              √(ln 2M)
encoder-decoder, encoder   0.81·(N⁴·M)^(1/16)      0.87·(N⁴·M)^(-1/16)      √((1/3)·ln(3M)·ln(2N))
encoder-decoder, decoder   (3M)^(1/4)              (12M)^(-1/4)             √(ln 3M)
=========================  ======================  =======================  ====================

α multiplies the residual in x ← LN(α·x + G(x)); β and γ are Xavier-normal gains of the FFN's
fc1 and fc2 (a gated FFN's gate keeps gain 1: docs/blocks.md), value and output projections.
Post-LN is DeepNorm with α = β = 1.

GLM-130B (Zeng et al. 2023, its code's DeepNorm) uses α = (2N)^(1/2) and β = (2N)^(-1/2) for its
one stack of N layers instead of DeepNet's (2N)^(1/4) and (8N)^(-1/4) (``variant="glm"``): the
residual is weighted more and the branches start smaller; it has no encoder-decoder form.
"""

from __future__ import annotations

import math
import numbers

ARCHS = ("encoder", "decoder", "encdec")
DEEPNORM_VARIANTS = ("paper", "glm")


def _is_depth(n: object) -> bool:
    return isinstance(n, numbers.Integral) and not isinstance(n, bool) and n >= 1


def _check_depths(arch: str, num_encoder_layers: int, num_decoder_layers: int) -> None:
    if arch not in ARCHS:
        raise ValueError(f"arch={arch!r} is not one of {', '.join(map(repr, ARCHS))}")
    if arch in ("encoder", "encdec") and not _is_depth(num_encoder_layers):
        raise ValueError(
            f"num_encoder_layers={num_encoder_layers!r} must be an integer >= 1 for arch={arch!r}"
        )
    if arch in ("decoder", "encdec") and not _is_depth(num_decoder_layers):
        raise ValueError(
            f"num_decoder_layers={num_decoder_layers!r} must be an integer >= 1 for arch={arch!r}"
        )


def deepnorm(
    arch: str, num_encoder_layers: int = 0, num_decoder_layers: int = 0, variant: str = "paper"
) -> dict[str, dict[str, float]]:
    """DeepNorm residual weight α and init gain β for each side of ``arch`` (``variant``
    "paper": DeepNet's table above; "glm": GLM-130B's, one stack only).

    Returns e.g. ``{"encoder": {"alpha": a, "beta": b}, "decoder": {"alpha": a, "beta": b}}``
    with only the sides the architecture has.
    """
    _check_depths(arch, num_encoder_layers, num_decoder_layers)
    N, M = num_encoder_layers, num_decoder_layers
    if variant not in DEEPNORM_VARIANTS:
        raise ValueError(f"variant={variant!r} is not one of {', '.join(DEEPNORM_VARIANTS)}")
    if variant == "glm":
        if arch == "encdec":
            raise ValueError("the glm variant has no encoder-decoder constants (one stack only)")
        L = N if arch == "encoder" else M
        return {arch: {"alpha": (2 * L) ** 0.5, "beta": (2 * L) ** -0.5}}
    if arch == "encoder":
        return {"encoder": {"alpha": (2 * N) ** 0.25, "beta": (8 * N) ** -0.25}}
    if arch == "decoder":
        return {"decoder": {"alpha": (2 * M) ** 0.25, "beta": (8 * M) ** -0.25}}
    return {
        "encoder": {
            "alpha": 0.81 * (N**4 * M) ** (1 / 16),
            "beta": 0.87 * (N**4 * M) ** (-1 / 16),
        },
        "decoder": {"alpha": (3 * M) ** 0.25, "beta": (12 * M) ** -0.25},
    }


def subln(
    arch: str, num_encoder_layers: int = 0, num_decoder_layers: int = 0
) -> dict[str, dict[str, float]]:
    """Sub-LN (Magneto) init gain γ for each side of ``arch``.

    Returns e.g. ``{"encoder": {"gamma": g}, "decoder": {"gamma": g}}`` with only the sides the
    architecture has.
    """
    _check_depths(arch, num_encoder_layers, num_decoder_layers)
    N, M = num_encoder_layers, num_decoder_layers
    if arch == "encoder":
        return {"encoder": {"gamma": math.sqrt(math.log(2 * N))}}
    if arch == "decoder":
        return {"decoder": {"gamma": math.sqrt(math.log(2 * M))}}
    return {
        "encoder": {"gamma": math.sqrt(math.log(3 * M) * math.log(2 * N) / 3)},
        "decoder": {"gamma": math.sqrt(math.log(3 * M))},
    }


def mix_ln_post_layers(num_layers: int, ratio: float) -> int:
    """Mix-LN (Li et al., ICLR 2025, Sec. 3): the first ⌊ratio·L⌋ layers of a stack of L are
    Post-LN, the rest Pre-LN (the official code's ``layer_index < POST_NUM``, with POST_NUM =
    ⌊αL⌋: 3 of 12 and 6 of 24 layers at the paper's α = 0.25)."""
    if not _is_depth(num_layers):
        raise ValueError(f"num_layers={num_layers!r} must be an integer >= 1")
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"mix_ln_ratio={ratio!r} must be in [0, 1]")
    return math.floor(ratio * num_layers + 1e-9)  # ⌊αL⌋, robust to 0.25·12 = 2.9999…


def ln_scaling(layer: int) -> float:
    """LayerNorm Scaling (Sun et al. 2025, "The Curse of Depth in Large Language Models"): the
    pre-norms of layer ℓ (1-based) are scaled by 1/√ℓ."""
    if not _is_depth(layer):
        raise ValueError(f"layer={layer!r} must be an integer >= 1 (1-based)")
    return 1.0 / math.sqrt(layer)


def residual_branches(arch: str, side: str, num_layers: int) -> int:
    """The residual branches of one side's stack: 2 per layer (self-attention, FFN), 3 in the
    decoder of an encoder-decoder (+ cross-attention)."""
    per_layer = 3 if (arch == "encdec" and side == "decoder") else 2
    return per_layer * num_layers


def deepscalelm(
    arch: str, num_encoder_layers: int = 0, num_decoder_layers: int = 0, k: float = 2.0
) -> dict[str, dict[str, float]]:
    """DeepScaleLM (Kedia et al., ICML 2024) residual weights per side: x ← λ·x + β·F(x) with
    β² = k/S and λ² = 1 − β², S the side's residual branches (:func:`residual_branches`).

    k = 2 makes β² = 1/L for a stack of L two-branch layers: the official code's 192-layer
    run sets λ² = 0.995, β² = 0.005 ≈ 2/384. Returns ``{side: {"lambda": λ, "beta": β}}``.
    """
    _check_depths(arch, num_encoder_layers, num_decoder_layers)
    if not k > 0:
        raise ValueError(f"deepscalelm_k={k!r} must be > 0")
    depths = {"encoder": num_encoder_layers, "decoder": num_decoder_layers}
    sides = {"encoder": ["encoder"], "decoder": ["decoder"], "encdec": ["encoder", "decoder"]}
    out = {}
    for side in sides[arch]:
        beta_sq = k / residual_branches(arch, side, depths[side])
        if beta_sq >= 1:
            raise ValueError(
                f"deepscalelm_k={k!r} gives β² = {beta_sq:.3g} >= 1 for the {side}'s "
                f"{residual_branches(arch, side, depths[side])} branches: λ² = 1 − β² must be > 0"
            )
        out[side] = {"lambda": math.sqrt(1 - beta_sq), "beta": math.sqrt(beta_sq)}
    return out


DSLM_INPUT_CORRELATION = 0.221  # DeepScaleLM's code: r₀, the token correlation of its data


def deepscalelm_value_stds(
    num_layers: int, d_model: int, dropout: float, lambda_sq: float, beta_sq: float
) -> list[float]:
    """DeepScaleLM's per-layer std of the value and output projections (its code's
    ``sigma_attn_v_out``): σ_l² = √((1 − p)/r_l)/d, so that attention over inputs of
    token correlation r_l has unit output variance; r and the stream's variance σ² follow
    each branch: r ← (λ²rσ² + β²r_out)/(λ²σ² + β²), σ² ← λ²σ² + β², with r_out = 1 − p after
    attention and (1 − p)(r + (√(1 − r²) − r·acos r)/π) after the ReLU FFN; r₀ =
    0.221·(1 − p) (:data:`DSLM_INPUT_CORRELATION`)."""
    p, d = dropout, d_model
    r, var, stds = DSLM_INPUT_CORRELATION * (1 - p), 1.0, []
    for _ in range(num_layers):
        stds.append(math.sqrt(math.sqrt((1 - p) / r) / d))
        for r_out in (1 - p, None):
            if r_out is None:
                r_out = (1 - p) * (r + (math.sqrt(1 - r**2) - r * math.acos(r)) / math.pi)
            r = (lambda_sq * r * var + beta_sq * r_out) / (lambda_sq * var + beta_sq)
            var = lambda_sq * var + beta_sq
    return stds


def deepscalelm_ffn_std(d_model: int, ffn_dim: int, dropout: float) -> float:
    """DeepScaleLM's std of fc1 and fc2 (ReLU): σ² = √(2(1 − p)/(d·d_F)), so that
    σ₁²σ₂²·d·d_F/2 = 1 − p (unit output variance); at d_F = 4d the code's √((1 − p)/2)/d."""
    return (2 * (1 - dropout) / (d_model * ffn_dim)) ** 0.25


def deepscalelm_embedding_variances(positions: str, dropout: float) -> tuple[float, float]:
    """(token, position) per-element variances of DeepScaleLM's embeddings: their sum has
    variance 1 − p before dropout, 1 after its 1/(1 − p) rescaling (its code draws each of its
    three BERT tables with σ² = (1 − p)/3). Here: learned positions share it equally with the
    tokens; the fixed sinusoidal table has variance 1/2, the tokens the rest; under rope the
    tokens have it all."""
    total = 1.0 - dropout
    if positions == "learned":
        return total / 2, total / 2
    if positions == "sinusoidal":
        return total - 0.5, 0.5
    return total, 0.0


# Hyper-Connections (Zhu et al., ICLR 2025): the expansion rate of their best runs (DHC×4), and
# the initial learnable scales s_α, s_β of the dynamic weights (Appendix J, Algorithm 2:
# ``torch.ones(1) * 0.01``).
HC_RATE = 4
HC_SCALE_INIT = 0.01
# mHC (Xie et al. 2025): the gating factors' init α (Table 5: "Gating Factor Init α 0.01") and
# Sinkhorn-Knopp's iterations t_max (Section 4.2 and Table 5: 20).
MHC_ALPHA_INIT = 0.01
MHC_SINKHORN_ITERS = 20
# the ε of mHC's RMSNorm of vec(x) (Table 5: "RMSNorm ε 1e-20"; eq. 15 writes none)
MHC_RMS_EPS = 1e-20
# Hugging Face's DeepSeek-V4 (transformers 5.24.0, ``DeepseekV4Config.hc_eps``): the ε it adds
# to H_pre, to the softmax that starts Sinkhorn-Knopp and to each normalization's denominator.
MHC_DEEPSEEK_V4_EPS = 1e-6
