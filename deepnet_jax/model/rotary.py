"""Rotary position embeddings (RoPE; Su et al. 2021, "RoFormer", eq. 34).

The head dimension K is split in halves (the GPT-NeoX / Hugging Face LLaMA layout, not the
interleaved pairs of the RoFormer paper and GPT-J): feature i and feature i + K/2 form the pair
rotated by the angle p·ω_i at position p, ω_i = θ^(−2i/K), i = 0 … K/2 − 1:

    x'_i       = x_i·cos(p·ω_i) − x_{i+K/2}·sin(p·ω_i)
    x'_{i+K/2} = x_{i+K/2}·cos(p·ω_i) + x_i·sin(p·ω_i)

Applied to the queries and keys of self-attention, q'_p·k'_s depends on p and s only through
p − s. The angles are computed in float32 from integer positions, so position 10⁵ rotates as
exactly as position 1.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def angles(positions: jax.Array, head_dim: int, theta: float) -> tuple[jax.Array, jax.Array]:
    """(cos, sin) of p·ω_i, each [..., K/2] for integer positions [...] (e.g. [B, T])."""
    if head_dim % 2:
        raise ValueError(f"rotary embeddings need an even head_dim, not {head_dim}")
    half = head_dim // 2
    freqs = theta ** (-jnp.arange(half, dtype=jnp.float32) * 2.0 / head_dim)
    angle = positions.astype(jnp.float32)[..., None] * freqs
    return jnp.cos(angle), jnp.sin(angle)


def rotate(x_BTHK: jax.Array, cos_BTk: jax.Array, sin_BTk: jax.Array) -> jax.Array:
    """x [B, T, H, K] rotated pairwise (module docstring) by the angles [B|1, T, K/2], in
    float32, returned in x's dtype."""
    half = x_BTHK.shape[-1] // 2
    x = x_BTHK.astype(jnp.float32)
    x1, x2 = x[..., :half], x[..., half:]
    cos, sin = cos_BTk[:, :, None, :], sin_BTk[:, :, None, :]
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x_BTHK.dtype)
