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

    The per-token loss is −Σ_v q_v·log p_v with q = (1−ε)·onehot + ε/V (``optax.smooth_labels``);
    ``weights_BT`` is 0 on padding. Returns ``(Σ w·loss, Σ w)``, both float32 scalars, so callers
    can average across micro-batches and devices exactly.
    """
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing={label_smoothing!r} must be in [0, 1)")
    logits = logits_BTV.astype(jnp.float32)
    labels = jax.nn.one_hot(targets_BT, logits.shape[-1], dtype=jnp.float32)
    if label_smoothing:
        labels = optax.smooth_labels(labels, label_smoothing)
    loss_BT = optax.softmax_cross_entropy(logits, labels)
    weights = weights_BT.astype(jnp.float32)
    return jnp.sum(loss_BT * weights), jnp.sum(weights)


def accuracy(logits_BTV: jax.Array, targets_BT: jax.Array, weights_BT: jax.Array) -> jax.Array:
    """Summed weighted count of argmax predictions equal to the target."""
    hits = (jnp.argmax(logits_BTV, axis=-1) == targets_BT).astype(jnp.float32)
    return jnp.sum(hits * weights_BT.astype(jnp.float32))
