"""DeepNorm and Sub-LN constants as pure functions of the architecture and depth.

N is the number of encoder layers and M the number of decoder layers; the tables are
``../shared/SPEC.md`` (DeepNet Figure 2b and Section 4.3; Magneto Figure 2 and Section 3.2):

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
