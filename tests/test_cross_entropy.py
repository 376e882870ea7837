"""The token loss (deepnet_jax.training.losses.cross_entropy) picks each target's logit by
comparison, not by a gather: the same loss as optax's, bit for bit, the same gradient up to
float32 rounding, and a backward pass without a scatter into a [B, T, V] buffer."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from deepnet_jax.training import losses

EPS32 = float(np.finfo(np.float32).eps)


def _batch():
    k1, k2 = jax.random.split(jax.random.key(1))
    logits = jax.random.normal(k1, (3, 7, 50)) * 4.0
    targets = jax.random.randint(k2, (3, 7), 0, 50)
    weights = (jnp.arange(7) < 5).astype(jnp.float32)[None].repeat(3, 0)
    return logits, targets, weights


def _optax_loss(logits, targets, weights, eps):
    """The loss as optax writes it: integer-label cross-entropy and the smoothing term."""
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    if eps:
        uniform = jax.nn.logsumexp(logits, axis=-1) - jnp.mean(logits, axis=-1)
        loss = (1.0 - eps) * loss + eps * uniform
    return jnp.sum(loss * weights), jnp.sum(weights)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_the_loss_is_optaxs_bit_for_bit_and_its_gradient_to_rounding(eps):
    logits, targets, weights = _batch()
    ours = losses.cross_entropy(logits, targets, weights, eps)
    theirs = _optax_loss(logits, targets, weights, eps)
    assert np.array_equal(ours[0], theirs[0]) and np.array_equal(ours[1], theirs[1])
    g_ours = jax.grad(lambda z: losses.cross_entropy(z, targets, weights, eps)[0])(logits)
    g_theirs = jax.grad(lambda z: _optax_loss(z, targets, weights, eps)[0])(logits)
    # softmax·w − w·[v = y] either way: the two terms added in another order, a few ulps of the
    # largest term (|softmax| ≤ 1, w ≤ 1)
    np.testing.assert_allclose(g_ours, g_theirs, rtol=0, atol=4 * EPS32)


def test_label_logits_picks_the_targets():
    logits, targets, _ = _batch()
    picked = losses.label_logits(logits, targets)
    assert np.array_equal(picked, jnp.take_along_axis(logits, targets[..., None], -1)[..., 0])


def test_the_backward_pass_has_no_scatter():
    logits, targets, weights = _batch()
    grad = jax.jit(jax.grad(lambda z: losses.cross_entropy(z, targets, weights, 0.1)[0]))
    text = grad.lower(logits).compile().as_text()
    assert not re.search(r"\bscatter\(", text)  # the opcode (the test's name is in the metadata)
