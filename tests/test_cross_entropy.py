"""The token loss (deepnet_jax.training.losses) and what it reads from the logits
(deepnet_jax.training.logit_stats): optax's loss and gradient up to float32 rounding, the
target's logit picked by comparison (no scatter in the backward pass), and on a GPU one pass
over the logits before the backward pass."""

from __future__ import annotations

import importlib.util
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from deepnet_jax.scale import targets as compile_targets
from deepnet_jax.training import logit_stats, losses

U32 = float(np.finfo(np.float32).eps) / 2  # float32's unit roundoff


def _batch(vocab: int = 50):
    k1, k2 = jax.random.split(jax.random.key(1))
    logits = jax.random.normal(k1, (3, 7, vocab)) * 4.0
    targets = jax.random.randint(k2, (3, 7), 0, vocab)
    weights = (jnp.arange(7) < 5).astype(jnp.float32)[None].repeat(3, 0)
    return logits, targets, weights


def _lse_bound(vocab: int, lse: jax.Array) -> np.ndarray:
    """|Δ lse| between two float32 evaluations of log Σ_v exp z_v: each sums V positive terms
    (relative error ≤ V·u each, the standard bound), each term's exponential and rescaling
    within 2u, the log and the final add a rounding of |lse| each."""
    return 2 * (vocab + 2) * U32 + 4 * U32 * np.abs(np.asarray(lse))


def _optax_loss(logits, targets, weights, eps):
    """The loss as optax writes it: integer-label cross-entropy and the smoothing term."""
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    if eps:
        uniform = jax.nn.logsumexp(logits, axis=-1) - jnp.mean(logits, axis=-1)
        loss = (1.0 - eps) * loss + eps * uniform
    return jnp.sum(loss * weights), jnp.sum(weights)


@pytest.mark.parametrize("path", ["one_pass", "separate"])
def test_both_paths_give_the_separate_reductions_values(path):
    logits, targets, _ = _batch(1000)
    top = logits[0, 0].max() + 1.0
    logits = logits.at[0, 0, 7].set(top).at[0, 0, 3].set(top)  # a tie at the max: the lower wins
    logits = logits.at[0, 1].set(logits[0, 0])  # the same tie, its target the higher index
    logits = logits.at[1, 2].set(-jnp.inf).at[1, 2, 5].set(1.0)  # one finite logit in a row
    targets = targets.at[0, 0].set(3).at[0, 1].set(7).at[1, 2].set(5)
    stats = jax.jit(getattr(logit_stats, f"_{path}"))(logits, targets)
    lse = jax.nn.logsumexp(logits, axis=-1)
    assert np.all(np.abs(stats.lse - lse) <= _lse_bound(1000, lse))
    assert np.array_equal(stats.hit, jnp.argmax(logits, axis=-1) == targets)
    assert stats.hit[0, 0] and not stats.hit[0, 1] and stats.hit[1, 2]
    assert np.array_equal(stats.label, jnp.take_along_axis(logits, targets[..., None], -1)[..., 0])
    finite = np.isfinite(logits).all(-1)  # the row of −inf means −inf either way
    scale = np.abs(np.where(np.isfinite(logits), logits, 0)).max(-1)
    mean_gap = np.abs(np.where(finite, stats.mean - jnp.mean(logits, -1), 0))
    assert np.all(mean_gap <= 1000 * U32 * scale) and np.isneginf(stats.mean[1, 2])


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("path", ["one_pass_differentiable", "separate"])
def test_the_loss_and_its_gradient_are_optaxs_to_rounding(eps, path, monkeypatch):
    """Either path (the CPU lowers ``separate``; the one pass is forced here) gives optax's
    loss and gradient: the gradient g·softmax(z) − g·[v = y] + ε·g/V differs by its terms'
    rounding and softmax's factor e^(−Δlse)."""
    pick = getattr(logit_stats, f"_{path}")
    monkeypatch.setattr(logit_stats, "logit_stats", pick)
    logits, targets, weights = _batch()
    ours = jax.jit(losses.cross_entropy, static_argnums=3)(logits, targets, weights, eps)
    theirs = _optax_loss(logits, targets, weights, eps)
    bound = _lse_bound(50, jax.nn.logsumexp(logits, -1)).max() * float(jnp.sum(weights))
    assert abs(float(ours[0] - theirs[0])) <= bound + 4 * U32 * abs(float(theirs[0]))
    assert np.array_equal(ours[1], theirs[1])
    g_ours = jax.grad(lambda z: losses.cross_entropy(z, targets, weights, eps)[0])(logits)
    g_theirs = jax.grad(lambda z: _optax_loss(z, targets, weights, eps)[0])(logits)
    np.testing.assert_allclose(g_ours, g_theirs, rtol=0, atol=2 * _lse_bound(50, 20.0) + 8 * U32)


def test_token_sums_count_the_argmax_hits_and_the_plain_nll():
    logits, targets, weights = _batch()
    sums = losses.token_sums(logits, targets, weights, 0.1)
    hits = (jnp.argmax(logits, -1) == targets) * weights
    assert float(sums["correct"]) == float(jnp.sum(hits))
    assert float(sums["correct"]) == float(losses.accuracy(logits, targets, weights))
    np.testing.assert_allclose(
        sums["nll_sum"], _optax_loss(logits, targets, weights, 0.0)[0], rtol=1e-5
    )
    with pytest.raises(ValueError, match="label_smoothing"):
        losses.token_sums(logits, targets, weights, 1.0)


@pytest.mark.parametrize("path", ["one_pass", "separate"])
def test_the_hit_is_argmax_equal_to_the_target_where_logits_tie(path):
    """Rows of equal logits (the lowest index is argmax's), all −inf, and a row where the
    maximum sits before, at and after the target: ``hit`` is ``argmax == y`` in each."""
    vocab = 6
    rows = jnp.stack(
        [
            jnp.zeros(vocab),
            jnp.full(vocab, -jnp.inf),
            jnp.array([0.0, 2.0, 1.0, 2.0, -1.0, 2.0]),
            jnp.array([jnp.finfo(jnp.float32).max, 0.0, 0.0, 0.0, 0.0, 0.0]),
        ]
    )
    logits = jnp.repeat(rows[:, None], vocab, axis=1)  # [4 rows, every target, V]
    targets = jnp.broadcast_to(jnp.arange(vocab), (4, vocab))
    hit = jax.jit(getattr(logit_stats, f"_{path}"))(logits, targets).hit
    assert np.array_equal(hit, jnp.argmax(logits, axis=-1) == targets)
    assert hit[:, 0].tolist() == [True, True, False, True] and hit[2].sum() == 1


def test_the_backward_pass_has_no_scatter():
    logits, targets, weights = _batch()
    grad = jax.jit(jax.grad(lambda z: losses.cross_entropy(z, targets, weights, 0.1)[0]))
    text = grad.lower(logits).compile().as_text()
    assert not re.search(r"\bscatter\(", text)  # the opcode (the test's name is in the metadata)


def test_the_cpus_accuracy_has_no_value_index_reduction():
    """On the CPU the hit is read with plain max reductions, not argmax's (value, index) pair,
    which XLA:CPU runs element by element (docs/benchmarks.md, "The accuracy without an
    argmax")."""
    logits, targets, weights = _batch()
    sums = jax.jit(losses.token_sums, static_argnums=3)
    text = sums.lower(logits, targets, weights, 0.1).compile().as_text()
    assert "s32[3,7]" in jax.jit(jnp.argmax, static_argnums=1).lower(logits, -1).compile().as_text()
    assert not re.search(r"\(f32\[3,7\][^)]*, s32\[3,7\]", text)


@pytest.mark.skipif(
    importlib.util.find_spec("jax_plugins.xla_cuda12") is None,
    reason='jax-cuda12-plugin is not installed (pip install -e ".[gpu-plan]")',
)
def test_on_a_gpu_the_loss_reads_the_logits_once_before_its_backward_pass():
    """Compiled for an H100 (deviceless), the loss, its sums and its gradient read the float32
    logits in two kernels: the one reduction and the backward pass (the separate reductions
    take more: 3 at this size)."""
    b, t, v = 8, 16, 4096
    device = compile_targets.compile_devices(compile_targets.parse("h100-1"))[0]
    on = jax.sharding.SingleDeviceSharding(device)
    shapes = [((b, t, v), jnp.float32), ((b, t), jnp.int32), ((b, t), jnp.float32)]
    args = [jax.ShapeDtypeStruct(s, dtype, sharding=on) for s, dtype in shapes]

    def loss(z, y, w):
        sums = losses.token_sums(z, y, w, 0.1)
        return sums["loss_sum"], sums

    hlo = jax.jit(jax.grad(loss, has_aux=True)).lower(*args).compile().as_text()
    entry = hlo[hlo.index("\nENTRY") :].splitlines()
    logits = re.search(rf"%(\S+) = f32\[{b},{t},{v}\]\S* parameter\(0\)", "\n".join(entry))
    operand = re.compile(rf"[(,] ?%{re.escape(logits.group(1))}[,)]")
    readers = [ln.split("=")[0].strip() for ln in entry if operand.search(ln)]
    assert len(readers) == 2, readers  # the reduction and the backward pass's fusion
