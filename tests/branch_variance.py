"""The FFN branch's output variance at initialization: the value docs/blocks.md derives for the
plain and the gated FFN under DeepNorm's β and Sub-LN's γ, which tests/test_modern_blocks.py
checks against the model's FFN.

For inputs x ∈ R^d with i.i.d. zero-mean unit-variance entries (a LayerNorm's output at init)
and Xavier-normal kernels W [n_in, n_out] with gain g (Var W_ij = g²·2/(n_in + n_out)), biases
zero (``model.init="paper"``), each output of the FFN has variance, over weights and inputs,

    plain  fc2(φ(fc1 x)):          Var = g² · 2F/(d+F) · E[φ(u)²],   u ~ N(0, g²·2d/(d+F))
    gated  fc2(φ(gate x) ⊙ fc1 x): Var = g² · 2F/(d+F) · E[φ(a)²] · g²·2d/(d+F),
                                   a ~ N(0, 2d/(d+F))   (the gate at gain 1)
    Sub-LN (LN before fc2):        Var = g² · 2F/(d+F)              (the LN makes E[h²] = 1)

with g the scheme's gain on fc1 and fc2 (β, γ; 1 for Post-LN and Pre-LN). For ReLU,
E[φ(u)²] = Var(u)/2, so the plain FFN's variance is g⁴·2dF/(d+F)²; the gated FFN's is g⁴ times
a constant too — the branch starts at the scale β² of the plain FFN, not β³ (which β on the gate
as well would give).
"""

from __future__ import annotations

import math

import numpy as np

from deepnet_jax.model.config import GATED_ACTIVATIONS

_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(80)  # ∫ f(z) e^(-z²/2) dz, exact to deg 159
_PHI = {
    "relu": lambda z: np.maximum(z, 0.0),
    "gelu": lambda z: 0.5 * z * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0))),
    "swiglu": lambda z: z / (1.0 + np.exp(-z)),
    "geglu": lambda z: 0.5 * z * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0))),
}


def activation_second_moment(activation: str, variance: float) -> float:
    """E[φ(a)²] for a ~ N(0, ``variance``), φ the activation's nonlinearity (SiLU for swiglu,
    GELU for geglu), by 80-point Gauss–Hermite quadrature."""
    z = _NODES * math.sqrt(variance)
    return float(np.sum(_WEIGHTS * _PHI[activation](z) ** 2) / math.sqrt(2.0 * math.pi))


def ffn_output_variance(
    activation: str, d_model: int, ffn_dim: int, gain: float, inner_norm: bool = False
) -> float:
    """Var of one FFN output at init (module docstring): ``gain`` on fc1 and fc2, the gate (a
    gated ``activation``) at gain 1, ``inner_norm`` for Sub-LN's LN before fc2."""
    d, F = d_model, ffn_dim
    out = gain**2 * 2.0 * F / (d + F)  # fc2 on unit-variance hidden units
    if inner_norm:
        return out
    fan = 2.0 * d / (d + F)  # Var of x·W for a gain-1 Xavier kernel W [d, F]
    if activation in GATED_ACTIVATIONS:
        return out * activation_second_moment(activation, fan) * gain**2 * fan
    return out * activation_second_moment(activation, gain**2 * fan)
