"""Dropout: the keyed hash of its masks (:func:`dropout_bits`), :func:`dropout` with a key at
hand and :class:`Dropout`, which draws its key from the module's ``"dropout"`` stream.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from deepnet_jax.model.config import DROPOUT_RNGS

# lowbias32 (Chris Wellons' hash-prospector, public domain): a 32-bit integer hash with two
# multiplies; bias 0.17, among the lowest found for 2-multiply hashes.
_LOWBIAS32 = ((16, 0x7FEB352D), (15, 0x846CA68B), (16, None))


def _lowbias32(h: jax.Array) -> jax.Array:
    for shift, multiplier in _LOWBIAS32:
        h = h ^ (h >> shift)
        if multiplier is not None:
            h = h * jnp.uint32(multiplier)
    return h


def dropout_bits(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """uint32 ``shape`` of keyed hash bits: lowbias32(lowbias32(i ⊕ k0) + k1) for the flat
    element index i, where (k0, k1) = ``jax.random.bits(key, (2,))`` are two words of the key's
    own PRNG (any ``jax.random`` key implementation, or a raw uint32 key). For a fixed key the
    map i → bits is a bijection of uint32, so the elements of one mask are distinct draws;
    independence between masks comes from their keys, which the model derives with
    ``jax.random`` (split, fold_in)."""
    size = math.prod(shape)
    if size >= 2**32:
        raise ValueError(f"dropout over {size} elements: the hash counter is 32-bit (< 2**32)")
    k0, k1 = jax.random.bits(key, (2,), jnp.uint32)
    return _lowbias32(_lowbias32(_flat_index(shape, k0) ^ k0) + k1)


def _flat_index(shape: tuple[int, ...], k0: jax.Array) -> jax.Array:
    """uint32 ``shape``: each element's row-major flat index i, as a column of row offsets
    [..., 1] plus a row of column indices [D], the offsets first given ``k0 − k0`` (zero).

    The same values as ``iota(size).reshape(shape)``. Written so that no full-size array is a
    function of the shape alone: inside a scanned layer JAX hoists such an array out of the
    loop (a loop-invariant residual), and XLA then reads it, 4 bytes an element, in every
    fusion that draws a mask instead of counting in registers (measured by the kernel model:
    docs/scaling.md, "What it changed"). Depending on the key, the sum stays in the loop."""
    if not shape:
        return jnp.zeros((), jnp.uint32) + (k0 - k0)
    cols = shape[-1]
    rows = math.prod(shape[:-1])
    offsets = jax.lax.iota(jnp.uint32, rows).reshape(*shape[:-1], 1) * jnp.uint32(cols)
    return (offsets + (k0 - k0)) + jax.lax.iota(jnp.uint32, cols)


def dropout(
    x: jax.Array,
    rate: float,
    key: jax.Array | None,
    deterministic: bool,
    rng: str = "hash",
) -> jax.Array:
    """Inverted dropout: ``where(m, x / (1 − rate), 0)``, m ~ Bernoulli(1 − rate) per element.

    ``rng`` picks how the mask is drawn from ``key``:

    * ``"hash"``: m = :func:`dropout_bits` ≥ ⌊rate·2³²⌋ (the rate exact to 2⁻³²). About
      ten integer operations per element, so cheap wherever XLA puts it. On XLA:CPU this matters:
      JAX lowers threefry there as a rolled loop that materializes every round, and an unrolled
      counter RNG (philox) is re-derived inside every fusion that reads the mask (the forward
      select, the backward one, and again under remat).
    * ``"jax"``: ``jax.random.bernoulli(key, 1 − rate)`` with the key's own PRNG (threefry by
      default): the same masks as ``flax.linen.Dropout`` for the same key.
    """
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"dropout rate={rate!r} must be in [0, 1)")
    if deterministic or rate == 0.0:
        return x
    if key is None:
        raise ValueError("dropout with rate > 0 outside deterministic mode needs a key")
    keep = 1.0 - rate
    if rng == "hash":
        mask = dropout_bits(key, x.shape) >= jnp.uint32(int(rate * 2**32))
    elif rng == "jax":
        mask = jax.random.bernoulli(key, keep, x.shape)
    else:
        raise ValueError(f"dropout rng={rng!r}; allowed values are {DROPOUT_RNGS}")
    return jax.lax.select(mask, x / keep, jnp.zeros_like(x))


class Dropout(nn.Module):
    """:func:`dropout` with its key from the module's ``"dropout"`` stream (where no explicit
    key is at hand, e.g. the embeddings); named like ``flax.linen.Dropout`` (``Dropout_0``), so
    with ``rng="jax"`` it draws the masks that module drew."""

    rate: float
    rng: str = "hash"

    @nn.compact
    def __call__(self, x: jax.Array, deterministic: bool) -> jax.Array:
        if deterministic or self.rate == 0.0:
            return x
        return dropout(x, self.rate, self.make_rng("dropout"), False, self.rng)
