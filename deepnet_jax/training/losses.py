"""Token-level objectives: masked (label-smoothed) cross-entropy and accuracy, in float32."""

from __future__ import annotations

from collections.abc import Callable

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


def chunked_sums(
    head: Callable[[jax.Array], jax.Array],
    x_BTD: jax.Array,
    targets_BT: jax.Array,
    weights_BT: jax.Array,
    label_smoothing: float,
    chunk: int,
) -> dict[str, jax.Array]:
    """The loss sums of ``head(x_BTD)`` (``loss_sum``, ``nll_sum``, ``weight``, ``correct``, as
    :func:`cross_entropy` and :func:`accuracy` give them over the whole logits) computed
    ``chunk`` positions at a time, so that the float32 logits [B, T, V] never exist at once:
    a scan over [B, chunk, V] slices, each rematerialized in the backward pass
    (``jax.checkpoint``). The batch axis stays whole (and sharded as it was); T is padded to a
    multiple of ``chunk`` with weight 0. Equal to the unchunked sums up to the order of float32
    additions."""
    B, T = x_BTD.shape[:2]
    pad = -T % chunk
    if pad:
        x_BTD = jnp.pad(x_BTD, ((0, 0), (0, pad), (0, 0)))
        targets_BT = jnp.pad(targets_BT, ((0, 0), (0, pad)))
        weights_BT = jnp.pad(weights_BT, ((0, 0), (0, pad)))
    n = (T + pad) // chunk

    def split(a: jax.Array) -> jax.Array:  # [B, n·chunk, …] → [n, B, chunk, …]
        return jnp.moveaxis(a.reshape(B, n, chunk, *a.shape[2:]), 1, 0)

    @jax.checkpoint
    def body(sums: dict[str, jax.Array], xs: tuple[jax.Array, ...]) -> tuple[dict, None]:
        x, y, w = xs
        logits = head(x)
        loss_sum, weight = cross_entropy(logits, y, w, label_smoothing)
        nll_sum = cross_entropy(logits, y, w)[0] if label_smoothing else loss_sum
        step = {"loss_sum": loss_sum, "nll_sum": nll_sum, "weight": weight}
        step["correct"] = accuracy(logits, y, w)
        return {k: sums[k] + step[k] for k in sums}, None

    zero = jnp.zeros((), jnp.float32)
    start = dict.fromkeys(("loss_sum", "nll_sum", "weight", "correct"), zero)
    sums, _ = jax.lax.scan(body, start, (split(x_BTD), split(targets_BT), split(weights_BT)))
    return sums
