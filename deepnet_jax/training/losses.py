"""Token-level objectives: masked (label-smoothed) cross-entropy and accuracy, in float32."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax


def cross_entropy(
    logits_BTV: jax.Array,
    targets_BT: jax.Array,
    weights_BT: jax.Array,
    label_smoothing: float = 0.0,
) -> tuple[jax.Array, jax.Array]:
    """Summed weighted cross-entropy and the summed weight.

    The per-token loss is −Σ_v q_v·log p_v with q = (1−ε)·onehot(y) + ε/V (label smoothing,
    Szegedy et al. 2016), computed without materializing q:
    (1−ε)·(lse − z_y) + ε·(lse − mean_v z_v), with lse = logsumexp_v z_v (the same value as
    ``optax.softmax_cross_entropy(z, optax.smooth_labels(onehot(y), ε))``, without the
    [B, T, V] one-hot and its backward pass). ``weights_BT`` is 0 on padding. Returns
    ``(Σ w·loss, Σ w)``, both float32 scalars, so callers can average across micro-batches and
    devices exactly.
    """
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing={label_smoothing!r} must be in [0, 1)")
    logits = logits_BTV.astype(jnp.float32)
    loss_BT = optax.softmax_cross_entropy_with_integer_labels(logits, targets_BT)
    if label_smoothing:
        uniform_BT = jax.nn.logsumexp(logits, axis=-1) - jnp.mean(logits, axis=-1)
        loss_BT = (1.0 - label_smoothing) * loss_BT + label_smoothing * uniform_BT
    weights = weights_BT.astype(jnp.float32)
    return jnp.sum(loss_BT * weights), jnp.sum(weights)


def accuracy(logits_BTV: jax.Array, targets_BT: jax.Array, weights_BT: jax.Array) -> jax.Array:
    """Summed weighted count of argmax predictions equal to the target."""
    hits = (jnp.argmax(logits_BTV, axis=-1) == targets_BT).astype(jnp.float32)
    return jnp.sum(hits * weights_BT.astype(jnp.float32))
