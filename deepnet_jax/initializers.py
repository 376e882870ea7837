"""Initializers with the papers' gains built in (SPEC.md, "Initialization").

Xavier-normal with gain g draws from N(0, g²·2/(fan_in + fan_out)). ``variance_scaling``'s scale
is a *variance*, so the gain enters squared. For multi-dimensional kernels (e.g. a query kernel
[d_model, heads, head_dim]) ``in_axis``/``out_axis`` name the fan-in and fan-out axes so the fans
are those of the equivalent 2-D matrix [d_model, heads·head_dim].
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

Initializer = jax.nn.initializers.Initializer


def xavier_normal(
    gain: float = 1.0,
    in_axis: int | Sequence[int] = -2,
    out_axis: int | Sequence[int] = -1,
) -> Initializer:
    """Xavier-normal initializer with gain ``gain``: std = gain·√(2 / (fan_in + fan_out))."""
    if not gain > 0:
        raise ValueError(f"gain={gain!r} must be > 0")
    return jax.nn.initializers.variance_scaling(
        gain**2, "fan_avg", "normal", in_axis=in_axis, out_axis=out_axis
    )


def sliced_xavier_normal(
    gains: Sequence[float],
    slice_axis: int,
    in_axis: int | Sequence[int],
    out_axis: int | Sequence[int],
) -> Initializer:
    """A fused kernel of ``len(gains)`` stacked projections along ``slice_axis`` (e.g. a fused
    QKV kernel [d_model, 3, heads, head_dim]): slice i is Xavier-normal with gain ``gains[i]``
    and the fans of one slice (SPEC.md: "fan-in/fan-out per slice, not on the fused matrix").
    ``in_axis``/``out_axis`` index the shape *without* the slice axis."""
    inits = [xavier_normal(g, in_axis, out_axis) for g in gains]

    def init(key: jax.Array, shape: Sequence[int], dtype=jnp.float32) -> jax.Array:
        shape = tuple(shape)
        axis = slice_axis % len(shape)
        if shape[axis] != len(gains):
            raise ValueError(f"axis {slice_axis} of {shape} must have {len(gains)} slices")
        one = shape[:axis] + shape[axis + 1 :]  # the shape of one slice
        keys = jax.random.split(key, len(gains))
        parts = [f(k, one, dtype) for f, k in zip(inits, keys, strict=True)]
        return jnp.stack(parts, axis=axis)

    return init


def embedding_normal(d_model: int) -> Initializer:
    """N(0, d_model^-1/2) for token embeddings and output projections (fairseq's choice)."""
    return jax.nn.initializers.normal(stddev=d_model**-0.5)


def sinusoidal_table(num_positions: int, d_model: int) -> jnp.ndarray:
    """Fixed sinusoidal position table [num_positions, d_model] (fairseq layout).

    The first half of the features is sin(p·ω_i), the second half cos(p·ω_i), with
    ω_i = 10000^(-i/(d/2 - 1)), i = 0 … d/2-1; positions p start at 0.
    """
    half = d_model // 2
    step = jnp.log(10000.0) / max(half - 1, 1)
    freqs = jnp.exp(jnp.arange(half, dtype=jnp.float32) * -step)
    angles = jnp.arange(num_positions, dtype=jnp.float32)[:, None] * freqs[None, :]
    return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)
