"""Token-level objectives: masked (label-smoothed) cross-entropy and accuracy, in float32."""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np


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
    [B, T, V] one-hot and its backward pass; z_y from :func:`label_logits`). ``weights_BT`` is
    0 on padding. Returns ``(Σ w·loss, Σ w)``, both float32 scalars, so callers can average
    across micro-batches and devices exactly.
    """
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing={label_smoothing!r} must be in [0, 1)")
    logits = logits_BTV.astype(jnp.float32)
    loss_BT = jax.nn.logsumexp(logits, axis=-1) - label_logits(logits, targets_BT)
    if label_smoothing:
        uniform_BT = jax.nn.logsumexp(logits, axis=-1) - jnp.mean(logits, axis=-1)
        loss_BT = (1.0 - label_smoothing) * loss_BT + label_smoothing * uniform_BT
    weights = weights_BT.astype(jnp.float32)
    return jnp.sum(loss_BT * weights), jnp.sum(weights)


def label_logits(logits_BTV: jax.Array, targets_BT: jax.Array) -> jax.Array:
    """z_y [B, T]: each position's logit of its target, picked by comparing the vocabulary
    index with the target (exactly optax's ``take_along_axis`` pick: one term is kept, the
    others are 0). Its gradient, g·[v = y], is elementwise, so XLA fuses the loss's whole
    backward pass (softmax·g − g·[v = y]) into one kernel over the [B, T, V] logits, where a
    gather's gradient is a scatter into a zeroed [B, T, V] buffer and a second pass to add it
    (docs/scaling.md, "The kernel model")."""
    vocab = jax.lax.broadcasted_iota(jnp.int32, logits_BTV.shape, logits_BTV.ndim - 1)
    hit = vocab == targets_BT[..., None].astype(jnp.int32)
    return jnp.sum(jnp.where(hit, logits_BTV, 0.0), axis=-1)


def accuracy(logits_BTV: jax.Array, targets_BT: jax.Array, weights_BT: jax.Array) -> jax.Array:
    """Summed weighted count of argmax predictions equal to the target."""
    hits = (jnp.argmax(logits_BTV, axis=-1) == targets_BT).astype(jnp.float32)
    return jnp.sum(hits * weights_BT.astype(jnp.float32))


def _chunks(a: jax.Array, chunk: int) -> jax.Array:
    """[B, T, …] → [n, B, chunk, …], T padded with zeros to n·chunk (weight 0 on the padding)."""
    B, T = a.shape[:2]
    pad = -T % chunk
    if pad:
        a = jnp.pad(a, ((0, 0), (0, pad)) + ((0, 0),) * (a.ndim - 2))
    return jnp.moveaxis(a.reshape(B, (T + pad) // chunk, chunk, *a.shape[2:]), 1, 0)


def _chunk_sums(head, params, x, y, w, label_smoothing):
    """One chunk's ``(loss_sum, (nll_sum, weight, correct))`` from ``head(params, x)``."""
    logits = head(params, x)
    loss_sum, weight = cross_entropy(logits, y, w, label_smoothing)
    nll_sum = cross_entropy(logits, y, w)[0] if label_smoothing else loss_sum
    return loss_sum, (nll_sum, weight, accuracy(logits, y, w))


def head_params(head: Callable, params: dict, x_BTD: jax.Array) -> list[str]:
    """The top-level entries of ``params`` that ``head(params, x)`` reads (found by tracing it
    once): the output projection, or the tied token table. The fused loss differentiates those
    alone, so its per-chunk gradient sums hold only the head's parameters."""
    names = sorted(params)
    jaxpr = jax.make_jaxpr(lambda *ps: head(dict(zip(names, ps, strict=True)), x_BTD))(
        *(params[n] for n in names)
    ).jaxpr
    read = {id(v) for e in jaxpr.eqns for v in e.invars} | {id(v) for v in jaxpr.outvars}
    flat = [(n, leaf) for n in names for leaf in jax.tree.leaves(params[n])]
    return sorted({n for (n, _), v in zip(flat, jaxpr.invars, strict=True) if id(v) in read})


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 5, 6))
def fused_mean_loss(
    head: Callable,
    params: dict,
    x_BTD: jax.Array,
    targets_BT: jax.Array,
    weights_BT: jax.Array,
    label_smoothing: float,
    chunk: int,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The mean (label-smoothed) loss of ``head(params, x_BTD)`` over weighted target tokens and
    its sums (``loss_sum``, ``nll_sum``, ``weight``, ``correct``, as :func:`cross_entropy` and
    :func:`accuracy` give them over the whole logits), ``chunk`` positions at a time: the
    float32 logits [B, T, V] never exist at once. Differentiated, each chunk's gradients
    (d mean / d params, d mean / d x: the cotangent 1 / Σw known before the first chunk) are
    computed in the forward scan beside its loss, so the backward pass only scales them by the
    mean's cotangent (exactly 1 in training) instead of recomputing the chunk's logits. The sums
    carry no gradient. Equal to the unchunked loss and gradients up to the order of float32
    additions."""
    sums = _scan(head, params, x_BTD, targets_BT, weights_BT, label_smoothing, chunk, False)[0]
    return sums["loss_sum"] / jnp.maximum(sums["weight"], 1.0), sums


def _scan(head, params, x_BTD, targets_BT, weights_BT, label_smoothing, chunk, grads):
    """The chunk loop: the sums, and with ``grads`` the head parameters' gradient sum and the
    per-chunk gradients of x ([n, B, chunk, D]) of mean = loss_sum / max(Σw, 1)."""
    scale = 1.0 / jnp.maximum(jnp.sum(weights_BT.astype(jnp.float32)), 1.0)

    def body(carry, xs):
        sums, g_params = carry
        x, y, w = xs
        chunk_fn = functools.partial(_chunk_sums, head, y=y, w=w, label_smoothing=label_smoothing)
        if grads:
            loss_sum, vjp, (nll_sum, weight, correct) = jax.vjp(chunk_fn, params, x, has_aux=True)
            d_params, d_x = vjp(scale)
            g_params = jax.tree.map(jnp.add, g_params, d_params)
        else:
            loss_sum, (nll_sum, weight, correct) = chunk_fn(params, x)
            d_x = None
        step = {"loss_sum": loss_sum, "nll_sum": nll_sum, "weight": weight, "correct": correct}
        return ({k: sums[k] + step[k] for k in sums}, g_params), d_x

    zero = jnp.zeros((), jnp.float32)
    start = dict.fromkeys(("loss_sum", "nll_sum", "weight", "correct"), zero)
    g_start = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params) if grads else None
    xs = (_chunks(x_BTD, chunk), _chunks(targets_BT, chunk), _chunks(weights_BT, chunk))
    (sums, g_params), d_x = jax.lax.scan(body, (start, g_start), xs)
    return sums, g_params, d_x


def _fused_fwd(head, params, x_BTD, targets_BT, weights_BT, label_smoothing, chunk):
    sums, g_params, d_x = _scan(
        head, params, x_BTD, targets_BT, weights_BT, label_smoothing, chunk, True
    )
    B, T = x_BTD.shape[:2]
    d_x = jnp.moveaxis(d_x, 0, 1).reshape(B, -1, x_BTD.shape[-1])[:, :T]  # drop the padding
    mean = sums["loss_sum"] / jnp.maximum(sums["weight"], 1.0)
    g_params = jax.tree.map(lambda g, p: g.astype(p.dtype), g_params, params)
    return (mean, sums), (g_params, d_x.astype(x_BTD.dtype), targets_BT, weights_BT)


def _fused_bwd(head, label_smoothing, chunk, residuals, cotangents):
    g_params, d_x, targets_BT, weights_BT = residuals
    g = cotangents[0]  # the sums' cotangents are zero: they carry no gradient
    return (
        jax.tree.map(lambda a: a * g.astype(a.dtype), g_params),
        d_x * g.astype(d_x.dtype),
        np.zeros(targets_BT.shape, jax.dtypes.float0),
        jnp.zeros_like(weights_BT),
    )


fused_mean_loss.defvjp(_fused_fwd, _fused_bwd)
