"""Does the decoder read its source? The NLL a translation model loses when sources are swapped.

``source sensitivity`` = NLL(targets | another row's source) − NLL(targets | own source), in nats
per target token, over a validation split. A decoder that has become a target-side language model
(it predicts the next word from the target prefix alone) scores ≈ 0; one that translates scores
several nats. The second measurement runs the same model on the same batch with the source rows
(and, for packed rows, their segment ids and positions) cyclically shifted among the rows that
hold target tokens, so every such row gets a different row's source and the target side,
padding and token counts stay exactly as they were.

A batch with a single non-empty row cannot be shifted: its rows keep their own sources and add
nothing to the difference (validation batches hold ≥ ``max_tokens / max_len`` rows).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

SOURCE_KEYS = ("src", "src_segment_ids", "src_positions")


def shift_permutation(has_targets_B: jax.Array) -> jax.Array:
    """Row permutation [B]: row ``order[p]`` takes the source of ``order[(p + 1) % n]``.

    ``order`` lists the ``n`` rows with targets first, in their order; rows without targets
    keep their own source. With n ≥ 2 no row with targets keeps its own source.
    """
    B = has_targets_B.shape[0]
    order = jnp.argsort(~has_targets_B, stable=True)  # rows with targets first
    n = jnp.maximum(jnp.sum(has_targets_B), 1)
    rank = jnp.argsort(order)  # position of each row in ``order``
    donor = order[(rank + 1) % n]
    return jnp.where(has_targets_B, donor, jnp.arange(B))


def with_shifted_sources(batch: dict[str, Any]) -> dict[str, Any]:
    """``batch`` with its source-side arrays permuted by :func:`shift_permutation`."""
    permutation = shift_permutation(jnp.sum(batch["weights"], axis=1) > 0)
    return {k: (v[permutation] if k in SOURCE_KEYS else v) for k, v in batch.items()}


def per_token(nll_sum: float, shifted_nll_sum: float, weight: float) -> float:
    """(Σ NLL with shifted sources − Σ NLL with true sources) / target tokens, in nats."""
    return (shifted_nll_sum - nll_sum) / weight
