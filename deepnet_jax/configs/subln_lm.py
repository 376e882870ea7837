"""``deepnorm_lm.py``'s Sub-LN (Magneto) twin: the same modern decoder (rotary positions, SwiGLU,
grouped-query attention, RMSNorm, char-level Shakespeare) with Sub-LN's inner norms and γ-scaled
init instead of DeepNorm.

Run: python -m deepnet_jax.cli.train --config=subln_lm --workdir=/tmp/subln_lm

x ← x + G(RMSNorm(x)) with an RMSNorm before each sublayer's output projection (Magneto eq. 1–5;
for the gated FFN, on φ(gate(x)) ⊙ fc1(x) before fc2) and γ = √(ln 2N) on v, out, fc1 and fc2.
"""

import ml_collections

from deepnet_jax.configs import deepnorm_lm


def get_config() -> ml_collections.ConfigDict:
    c = deepnorm_lm.get_config()
    c.model.scheme = "subln"
    return c
