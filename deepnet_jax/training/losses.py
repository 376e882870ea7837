"""Token-level objectives: masked (label-smoothed) cross-entropy and accuracy, in float32."""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from deepnet_jax.training import logit_stats


def cross_entropy(
    logits_BTV: jax.Array,
    targets_BT: jax.Array,
    weights_BT: jax.Array,
    label_smoothing: float = 0.0,
) -> tuple[jax.Array, jax.Array]:
    """Summed weighted cross-entropy and the summed weight.

    The per-token loss is −Σ_v q_v·log p_v with q = (1−ε)·onehot(y) + ε/V (label smoothing,
    Szegedy et al. 2016), computed without materializing q:
    (1−ε)·(lse − z_y) + ε·(lse − mean_v z_v), with lse = logsumexp_v z_v (the value of
    ``optax.softmax_cross_entropy(z, optax.smooth_labels(onehot(y), ε))`` up to the order of
    float32 operations, without the [B, T, V] one-hot and its backward pass; lse, the mean and
    z_y from :func:`~deepnet_jax.training.logit_stats.logit_stats`, one pass over the logits).
    ``weights_BT`` is 0 on padding. Returns ``(Σ w·loss, Σ w)``, both float32 scalars, so
    callers can average across micro-batches and devices exactly.
    """
    sums = token_sums(logits_BTV, targets_BT, weights_BT, label_smoothing)
    return sums["loss_sum"], sums["weight"]


def token_sums(
    logits_BTV: jax.Array,
    targets_BT: jax.Array,
    weights_BT: jax.Array,
    label_smoothing: float = 0.0,
) -> dict[str, jax.Array]:
    """The float32 sums a step reports, from one pass over the logits: ``loss_sum`` (the
    label-smoothed loss of :func:`cross_entropy`), ``nll_sum`` (the plain cross-entropy),
    ``weight`` (Σ w) and ``correct`` (Σ w·[argmax = y], as :func:`accuracy`). Only ``loss_sum``
    is meant to be differentiated."""
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing={label_smoothing!r} must be in [0, 1)")
    stats = logit_stats.logit_stats(logits_BTV, targets_BT)
    weights = weights_BT.astype(jnp.float32)
    nll_BT = stats.lse - stats.label
    loss_BT = nll_BT
    if label_smoothing:
        loss_BT = (1.0 - label_smoothing) * nll_BT + label_smoothing * (stats.lse - stats.mean)
    hits = stats.hit.astype(jnp.float32)
    return {
        "loss_sum": jnp.sum(loss_BT * weights),
        "nll_sum": jnp.sum(nll_BT * weights),
        "weight": jnp.sum(weights),
        "correct": jnp.sum(hits * weights),
    }


def accuracy(logits_BTV: jax.Array, targets_BT: jax.Array, weights_BT: jax.Array) -> jax.Array:
    """Summed weighted count of argmax predictions equal to the target."""
    return token_sums(logits_BTV, targets_BT, weights_BT)["correct"]


def _chunks(a: jax.Array, chunk: int) -> jax.Array:
    """[B, T, …] → [n, B, chunk, …], T padded with zeros to n·chunk (weight 0 on the padding)."""
    B, T = a.shape[:2]
    pad = -T % chunk
    if pad:
        a = jnp.pad(a, ((0, 0), (0, pad)) + ((0, 0),) * (a.ndim - 2))
    return jnp.moveaxis(a.reshape(B, (T + pad) // chunk, chunk, *a.shape[2:]), 1, 0)


def _chunk_sums(head, params, x, y, w, label_smoothing):
    """One chunk's ``(loss_sum, (nll_sum, weight, correct))`` from ``head(params, x)``."""
    sums = token_sums(head(params, x), y, w, label_smoothing)
    return sums["loss_sum"], (sums["nll_sum"], sums["weight"], sums["correct"])


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
