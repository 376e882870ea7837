"""What the loss and the accuracy need from the logits, read in one pass over them.

The token loss needs, per position, lse = log Σ_v exp z_v, the mean logit (label smoothing),
the target's logit z_y; the accuracy needs whether argmax_v z_v = y. Written as separate
reductions (``jax.nn.logsumexp``'s max and then its sum of exponentials, a mean, a pick, an
argmax),
each one reads the whole float32 [B, T, V] logits from memory: on `wmt17_ende` (32,768 target
positions × 32,000 words) 4.2 GB a pass, four passes before the backward pass
(docs/scaling.md, "The loss in one pass"). Here one variadic ``lax.reduce`` carries all of it:
the running maximum m and the sum s of exp(z − m) rescaled whenever m grows (the online
softmax's pairwise merge, Milakov & Gimelshein 2018: m = max(m₁, m₂),
s = s₁·e^(m₁−m) + s₂·e^(m₂−m)), the sum of the logits, the target's logit and the first index
of the maximum. The values equal the separate reductions' up to the order of float32
operations; the backward pass is written out (:func:`_bwd`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class LogitStats(NamedTuple):
    """Per position [B, T]: ``lse`` log Σ_v exp z_v, ``mean`` mean_v z_v, ``label`` z_y (all
    float32) and ``hit`` whether the first v with z_v = max_v z_v is y (bool: argmax = y)."""

    lse: jax.Array
    mean: jax.Array
    label: jax.Array
    hit: jax.Array


def _merge(a: tuple, b: tuple) -> tuple:
    """Two partial reductions (m, s, Σz, z_y, i) → one, with one exponential: the side with the
    larger maximum keeps its s, the other's is scaled by e^(−|m₁ − m₂|). Equal maxima (−inf on
    both sides among them: nothing seen yet) scale by 1, never by exp(−inf + inf); ties keep the
    lower index, as ``jnp.argmax`` does."""
    m_a, s_a, t_a, y_a, i_a = a
    m_b, s_b, t_b, y_b, i_b = b
    scale = jnp.exp(jnp.where(m_a == m_b, 0.0, -jnp.abs(m_a - m_b)))
    s = jnp.where(m_a >= m_b, s_a + s_b * scale, s_a * scale + s_b)
    i = jnp.where(m_a > m_b, i_a, jnp.where(m_b > m_a, i_b, jnp.minimum(i_a, i_b)))
    return jnp.maximum(m_a, m_b), s, t_a + t_b, y_a + y_b, i


def _one_pass(logits_BTV: jax.Array, targets_BT: jax.Array) -> LogitStats:
    """The stats in one variadic reduction (the GPUs' and TPUs' path)."""
    z, hit, vocab = _read(logits_BTV, targets_BT)
    operands = (z, jnp.ones_like(z), z, jnp.where(hit, z, 0.0), vocab)
    f32 = np.float32
    init = (f32(-np.inf), f32(0), f32(0), f32(0), np.int32(np.iinfo(np.int32).max))
    m, s, total, label, argmax = jax.lax.reduce(operands, init, _merge, (z.ndim - 1,))
    return LogitStats(m + jnp.log(s), total / z.shape[-1], label, argmax == targets_BT)


def _separate(logits_BTV: jax.Array, targets_BT: jax.Array) -> LogitStats:
    """The stats as separate reductions, differentiated by JAX (the CPU's path: XLA:CPU, bound
    by its arithmetic here rather than by memory, runs the one pass and its written-out
    backward pass slower than these; ``benchmarks/loss_passes.py``, docs/scaling.md, "The loss
    in one pass")."""
    z, hit, vocab = _read(logits_BTV, targets_BT)
    label = jnp.sum(jnp.where(hit, z, 0.0), axis=-1)
    first_max = _label_is_first_max(z, label, vocab, targets_BT)
    return LogitStats(jax.nn.logsumexp(z, axis=-1), jnp.mean(z, axis=-1), label, first_max)


def _label_is_first_max(
    z_BTV: jax.Array, label_BT: jax.Array, vocab_BTV: jax.Array, targets_BT: jax.Array
) -> jax.Array:
    """argmax_v z_v = y without an argmax: z_y is the maximum and every earlier logit is below
    it, z_y = max_v z_v and (y = 0 or max_{v<y} z_v < z_y). Two plain max reductions, which
    XLA:CPU vectorizes and fuses with logsumexp's; its argmax is a variadic (value, index)
    reduction it runs element by element (docs/benchmarks.md, "The accuracy without an
    argmax"). Equal to ``argmax == y`` for any logits without NaN."""
    z, label = jax.lax.stop_gradient(z_BTV), jax.lax.stop_gradient(label_BT)
    targets = targets_BT.astype(jnp.int32)
    before = jnp.max(jnp.where(vocab_BTV < targets[..., None], z, -jnp.inf), axis=-1)
    return (label == jnp.max(z, axis=-1)) & ((targets == 0) | (before < label))


def _read(logits_BTV: jax.Array, targets_BT: jax.Array) -> tuple[jax.Array, ...]:
    """The float32 logits, [v = y] and the vocabulary index v, each [B, T, V]."""
    z = logits_BTV.astype(jnp.float32)
    vocab = jax.lax.broadcasted_iota(jnp.int32, z.shape, z.ndim - 1)
    return z, vocab == targets_BT[..., None].astype(jnp.int32), vocab


def logit_stats(logits_BTV: jax.Array, targets_BT: jax.Array) -> LogitStats:
    """:class:`LogitStats` of ``logits_BTV`` [B, T, V] (any float dtype, read as float32) and
    the integer ``targets_BT`` [B, T]; differentiable in the logits (d lse / dz = softmax(z),
    d mean / dz = 1/V, d label / dz = [v = y]). On GPUs and TPUs one reduction over the
    vocabulary with its backward pass written out; on the CPU separate reductions, autodiffed
    (the platform is the compile target's, chosen when the step is lowered)."""
    return jax.lax.platform_dependent(
        logits_BTV, targets_BT, cpu=_separate, default=_one_pass_differentiable
    )


@jax.custom_vjp
def _one_pass_differentiable(logits_BTV: jax.Array, targets_BT: jax.Array) -> LogitStats:
    return _one_pass(logits_BTV, targets_BT)


def _fwd(logits_BTV: jax.Array, targets_BT: jax.Array):
    stats = _one_pass(logits_BTV, targets_BT)
    return stats, (logits_BTV, targets_BT, stats.lse)


def _bwd(residuals, g: LogitStats):
    """dz = g_lse·exp(z − lse) + g_mean/V + g_label·[v = y]: elementwise, so the whole backward
    pass is one kernel over the logits (no scatter for the pick)."""
    logits_BTV, targets_BT, lse = residuals
    z, hit, _ = _read(logits_BTV, targets_BT)
    d_z = g.lse[..., None] * jnp.exp(z - lse[..., None]) + g.mean[..., None] / z.shape[-1]
    d_z = d_z + jnp.where(hit, g.label[..., None], 0.0)
    return d_z.astype(logits_BTV.dtype), np.zeros(targets_BT.shape, jax.dtypes.float0)


_one_pass_differentiable.defvjp(_fwd, _bwd)
