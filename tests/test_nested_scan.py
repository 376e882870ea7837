"""The nested (√L) scan: same parameters, loss and gradients as the flat scan, a flat checkpoint
resumes grouped, and the backward pass keeps about 2√L residuals instead of L."""

import math
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import init_params, model_args, random_tokens, tiny_config
from test_training import small_config

from deepnet_jax.decoding import search
from deepnet_jax.model import architectures, remat, schemes
from deepnet_jax.model.config import SCHEMES, TransformerConfig
from deepnet_jax.runs import metrics
from deepnet_jax.training import train

DROPOUTS = dict(dropout=0.2, attention_dropout=0.1, activation_dropout=0.1)
SCANNED = [s for s in SCHEMES if schemes.get(s).scannable]  # DLCL, DenseFormer cannot scan
ARCHS = ("encdec", "encoder", "decoder")


def _depths(arch: str) -> dict[str, int]:
    """5 encoder layers (groups of 2: two groups and a remainder of 1), 4 decoder layers (two
    groups of 2, no remainder)."""
    return dict(
        num_encoder_layers=5 if arch != "decoder" else 0,
        num_decoder_layers=4 if arch != "encoder" else 0,
    )


def _train_and_eval(model, arch, src, tgt):
    """Jitted ((loss, grads) with dropout on, loss with dropout off): one compile per model."""

    def loss(params, deterministic):
        logits = model.apply(
            {"params": params},
            *model_args(arch, src, tgt),
            deterministic=deterministic,
            rngs={"dropout": jax.random.key(3)},
        )
        return optax.softmax_cross_entropy_with_integer_labels(logits, tgt).mean()

    return jax.jit(lambda p: (jax.value_and_grad(loss)(p, False), loss(p, True)))


# The default run: the encoder-decoder (both stacks; the encoder's 5 layers leave a remainder
# group) with a scheme that reads the layer index, which the groups slice like the keys (LayerNorm
# Scaling: on the encoder's remainder, and through cross-attention), and the n streams (a carry
# [B, T, n, D]). The grouping is the same code for every other layer body: the other pairs
# (DeepNorm, Mix-LN's index, mHC, each arch with each scheme) under -m slow.
FAST = {
    ("encdec", "ln_scaling"),
    ("decoder", "hyper_connections"),
}


@pytest.mark.parametrize(
    "arch, scheme",
    [
        pytest.param(a, s, marks=() if (a, s) in FAST else pytest.mark.slow)
        for a in ARCHS
        for s in SCANNED
    ],
)
def test_grouped_equals_flat(arch, scheme):
    flat_model = architectures.build(tiny_config(arch, scheme, **_depths(arch), **DROPOUTS))
    grouped_model = architectures.build(
        tiny_config(arch, scheme, **_depths(arch), scan_group_size=2, **DROPOUTS)
    )
    src = random_tokens((2, 7), 40, seed=1)
    tgt = random_tokens((2, 7), 40, seed=2)
    params = init_params(flat_model, arch, src, tgt)
    # the parameter tree (stacked [L, ...] under `layers`) and its values do not change
    grouped_params = init_params(grouped_model, arch, src, tgt)
    assert jax.tree.structure(grouped_params) == jax.tree.structure(params)
    for a, b in zip(jax.tree.leaves(grouped_params), jax.tree.leaves(params), strict=True):
        np.testing.assert_array_equal(a, b)
    (train_f, grads_f), eval_f = _train_and_eval(flat_model, arch, src, tgt)(params)
    (train_g, grads_g), eval_g = _train_and_eval(grouped_model, arch, src, tgt)(params)
    # The same float32 operations in the same order, fused differently by XLA: they agree to
    # float32 rounding of the largest terms, not bitwise.
    np.testing.assert_allclose(train_g, train_f, rtol=1e-6)
    np.testing.assert_allclose(eval_g, eval_f, rtol=1e-6)
    assert jax.tree.structure(grads_g) == jax.tree.structure(grads_f)
    for g, f in zip(jax.tree.leaves(grads_g), jax.tree.leaves(grads_f), strict=True):
        np.testing.assert_allclose(g, f, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "size, L, expected",
    [
        (0, 9, 0),  # one flat scan
        (2, 5, 2),  # two groups and a remainder of 1
        (8, 5, 5),  # at most L: one group
        (-1, 1024, 32),  # √L
        (-1, 500, 25),  # the smallest divisor ≥ √500 = 22.4 (20 groups, no remainder)
        (-1, 1000, 40),  # 25 groups of 40: 65 residuals ≤ 3√1000
        (-1, 499, 23),  # prime: ⌈√499⌉, 21 groups and a remainder of 16
    ],
)
def test_group_size(size, L, expected):
    c = architectures.default_config()
    c.scan_group_size = size
    assert remat.group_size(TransformerConfig.from_config(c), L) == expected


def test_decoding_and_instruments_with_groups():
    """The forward-only paths of a grouped model — cached decoding, the instruments'
    ``diagnostics`` collection — run the flat scan, with the flat model's results."""
    arch = "encdec"
    cfg = tiny_config(arch, "deepnorm", **_depths(arch))
    flat_model = architectures.build(cfg)
    cfg.scan_group_size = 2
    grouped_model = architectures.build(cfg)
    src = random_tokens((2, 6), cfg.vocab_size, seed=4)
    params = init_params(flat_model, arch, src, src)
    options = search.SearchOptions(max_len_a=0.0, max_len_b=5)
    greedy = [
        jax.jit(search.greedy_search, static_argnums=(0, 3))(m, params, src, options)
        for m in (flat_model, grouped_model)
    ]
    np.testing.assert_array_equal(greedy[1][0], greedy[0][0])  # the same tokens
    np.testing.assert_allclose(greedy[1][1], greedy[0][1], rtol=1e-6)  # encoder: grouped scan
    probes = [
        jax.jit(lambda p, m=m: m.apply({"params": p}, src, src, mutable=["diagnostics"]))(params)
        for m in (flat_model, grouped_model)
    ]
    (logits_f, state_f), (logits_g, state_g) = probes
    np.testing.assert_array_equal(logits_g, logits_f)
    shapes = {a.shape for a in jax.tree.leaves(state_g["diagnostics"]["encoder"]["layers"])}
    assert shapes == {(5,)}  # one entry per layer, stacked as the flat scan stacks them
    jax.tree.map(np.testing.assert_array_equal, state_g, state_f)


def _temp_bytes(L: int, group: int, rows: int, length: int, d: int) -> int:
    """Temporaries of the compiled loss gradient of a residual-dominated decoder."""
    cfg = tiny_config(
        "decoder",
        "deepnorm",
        d_model=d,
        num_heads=1,
        ffn_dim=2 * d,
        vocab_size=16,
        max_len=length,
        num_decoder_layers=L,
        scan_group_size=group,
    )
    model = architectures.build(cfg)
    tokens = jax.ShapeDtypeStruct((rows, length), jnp.int32)
    params = jax.eval_shape(
        lambda: nn.unbox(model.init(jax.random.key(0), jnp.ones((1, length), jnp.int32)))
    )["params"]

    def loss(p, t):
        logits = model.apply({"params": p}, t)
        return optax.softmax_cross_entropy_with_integer_labels(logits, t).mean()

    compiled = jax.jit(jax.value_and_grad(loss)).lower(params, tokens).compile()
    return compiled.memory_analysis().temp_size_in_bytes


def test_residual_memory_grows_as_sqrt_depth():
    """Flat: one saved residual [B, T, D] per layer, ×4 from L=256 to 1024; grouped (√L):
    about 2√L residuals, ×2 (≤ 2.5 with the fixed buffers). Compile only (memory_analysis is
    deterministic); the full-size figures: benchmarks/compile_vs_depth.py."""
    rows, length, d = 512, 16, 8  # large B·T, small d: the saved residuals dominate
    residual = rows * length * d * 4  # float32 bytes of one layer's saved input
    flat = {L: _temp_bytes(L, 0, rows, length, d) for L in (256, 1024)}
    grouped = {L: _temp_bytes(L, -1, rows, length, d) for L in (256, 1024)}
    assert (flat[1024] - flat[256]) / 768 == pytest.approx(residual, rel=0.05)
    assert flat[1024] / flat[256] > 3.5, flat
    assert grouped[1024] / grouped[256] <= 2.5, grouped
    # 2√L residuals: 32 → 64 from 256 to 1024 layers, plus what does not depend on depth
    growth = grouped[1024] - grouped[256]
    assert growth <= 1.25 * (2 * math.sqrt(1024) - 2 * math.sqrt(256)) * residual, grouped


def test_flat_checkpoint_resumes_grouped(tmp_path):
    """A run checkpointed with the flat scan resumes with groups of ⌈√L⌉ layers: the same
    parameter tree restores, and the resumed updates match the uninterrupted flat run's."""
    c = small_config("decoder", "deepnorm", steps=4)
    c.model.num_decoder_layers, c.model.dropout = 4, 0.1  # -1: two groups of 2
    c.schedule.name, c.schedule.warmup_steps = "constant", 0
    c.log_every, c.checkpoint_every = 1, 2
    whole, split = str(tmp_path / "whole"), str(tmp_path / "split")
    train.run(c, whole)
    c.total_steps = 2
    train.run(c, split)  # flat: stops after 2 updates with a checkpoint
    c.total_steps, c.model.scan_group_size = 4, -1
    train.run(c, split)  # grouped: restores the flat checkpoint and runs updates 3 and 4

    def losses(workdir):
        return {r["step"]: r["loss"] for r in metrics.read(workdir) if r["split"] == "train"}

    resumed, reference = losses(split), losses(whole)
    assert sorted(resumed) == [1, 2, 3, 4] and sorted(reference) == [1, 2, 3, 4]
    for step in (3, 4):  # after the restore: the grouped stack on the restored state
        assert resumed[step] == pytest.approx(reference[step], rel=1e-5), step
    assert os.listdir(os.path.join(split, "checkpoints"))


def test_benchmark_rows_and_summary():
    """benchmarks/compile_vs_depth.py: `group` rows run after the flat ones, and the summary
    compares the two layouts depth by depth."""
    from benchmarks import compile_vs_depth as bench
    from benchmarks import compile_vs_depth_report as report

    rows = bench.parse_rows("group:64,unroll:6,scan:64", "dots", 100)
    assert [(r.layout, r.depth, r.policy) for r in rows] == [
        ("scan", 64, "full"),
        ("group", 64, "full"),
        ("scan", 100, "dots"),
        ("unroll", 6, "full"),
    ]

    def row(layout, depth, temp, step):
        return dict(
            layout=layout,
            depth=depth,
            remat_policy="full",
            temp_bytes=temp,
            step_s_median=step,
            compile_s=1.0,
        )

    results = [
        row("scan", 64, 100, 1.0),
        row("scan", 256, 400, 4.0),
        row("group", 64, 50, 1.5),
        row("group", 256, 100, 5.0),
    ]
    summary = report.grouped_vs_flat(results)
    assert summary["temp_growth"] == {"64->256": {"flat": 4.0, "grouped": 2.0}}
    assert summary["grouped_over_flat"]["256"]["temp_bytes"] == 0.25
    assert summary["grouped_over_flat"]["64"]["step_s"] == 1.5
    assert report.grouped_vs_flat(results[:2]) == {"temp_growth": None}
