"""Depth handling: scanned == unrolled, remat == no remat, layout conversion, compile once."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import built, jit_apply, model_args, random_tokens, tiny_config
from jax.extend import core as jax_core

from deepnet_jax.model import architectures, layout

DROPOUTS = dict(dropout=0.2, attention_dropout=0.1, activation_dropout=0.1)
# the default run: DeepNorm on the encoder-decoder and the decoder, Sub-LN (a pre-norm stack with
# inner and final norms) on the encoder; the scan is the same code around every layer body, so
# the encoder-decoder's other paper schemes run under -m slow
CASES = [
    pytest.param("encdec", s, marks=() if s == "deepnorm" else pytest.mark.slow)
    for s in ("post_ln", "pre_ln", "deepnorm", "subln")
] + [
    ("decoder", "deepnorm"),
    ("encoder", "subln"),
]


def loss_and_grads(model, params, arch, src, tgt, key):
    def loss(p):
        logits = model.apply(
            {"params": p}, *model_args(arch, src, tgt), deterministic=False, rngs={"dropout": key}
        )
        return optax.softmax_cross_entropy_with_integer_labels(logits, tgt).mean()

    return jax.jit(jax.value_and_grad(loss))(params)


@pytest.mark.parametrize("arch, scheme", CASES)
def test_scanned_equals_unrolled(arch, scheme):
    cfg, scanned, params = built(arch, scheme, **DROPOUTS)
    unrolled = architectures.build(tiny_config(arch, scheme, scan_layers=False, **DROPOUTS))
    per_layer = layout.unstack_layers(params)
    src = random_tokens((2, 7), cfg.vocab_size, seed=1)
    tgt = random_tokens((2, 7), cfg.vocab_size, seed=2)
    f_scan, f_loop = jit_apply(scanned), jit_apply(unrolled)
    for deterministic in (True, False):
        rngs = {"dropout": jax.random.key(5)}
        a = f_scan(
            {"params": params}, *model_args(arch, src, tgt), deterministic=deterministic, rngs=rngs
        )
        b = f_loop(
            {"params": per_layer},
            *model_args(arch, src, tgt),
            deterministic=deterministic,
            rngs=rngs,
        )
        np.testing.assert_allclose(a, b, atol=2e-5, err_msg=f"deterministic={deterministic}")


def test_layout_round_trip():
    _, _, params = built("encdec", "subln")
    per_layer = layout.unstack_layers(params)
    assert sorted(k for k in per_layer["encoder"] if k.startswith("layers")) == [
        "layers_0",
        "layers_1",
        "layers_2",
    ]
    assert "layers" not in per_layer["decoder"]
    back = layout.stack_layers(per_layer)
    assert jax.tree.structure(back) == jax.tree.structure(params)
    for x, y in zip(jax.tree.leaves(back), jax.tree.leaves(params), strict=True):
        np.testing.assert_array_equal(x, y)


def test_layout_rejects_gaps():
    with pytest.raises(ValueError, match="per-layer keys"):
        layout.stack_layers({"layers_0": {"w": np.zeros(2)}, "layers_2": {"w": np.zeros(2)}})


@pytest.mark.parametrize("scan_layers", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_remat_policies_match_no_remat(scan_layers):
    """Every remat policy gives the same loss and gradients as no remat (dropout on)."""
    arch, scheme = "encdec", "deepnorm"
    cfg, _, params = built(arch, scheme, **DROPOUTS)
    if not scan_layers:
        params = layout.unstack_layers(params)
    src = random_tokens((2, 6), cfg.vocab_size, seed=3)
    tgt = random_tokens((2, 6), cfg.vocab_size, seed=4)
    key = jax.random.key(7)
    results = {}
    # The unrolled stack shares the remat mechanism; one policy keeps its compile time short.
    policies = (
        ("none", "full", "dots", "qkv_fc1", "attention_out") if scan_layers else ("none", "full")
    )
    for policy in policies:
        model = architectures.build(
            tiny_config(arch, scheme, scan_layers=scan_layers, remat_policy=policy, **DROPOUTS)
        )
        results[policy] = loss_and_grads(model, params, arch, src, tgt, key)
    ref_loss, ref_grads = results.pop("none")
    for policy, (loss, grads) in results.items():
        np.testing.assert_allclose(loss, ref_loss, rtol=1e-6, err_msg=policy)
        for g, r in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads), strict=True):
            np.testing.assert_allclose(g, r, atol=1e-6, rtol=1e-5, err_msg=policy)


@pytest.mark.parametrize(
    "fields",
    [
        dict(scan_unroll=3),  # straight through (configs/wmt17_ende.py's setting)
        pytest.param(dict(scan_unroll=2), marks=pytest.mark.slow),  # one iteration of 2, then 1
        pytest.param(  # within each group of 2 (and the remainder's 1)
            dict(scan_unroll=2, scan_group_size=2, remat_policy="full"), marks=pytest.mark.slow
        ),
    ],
    ids=["unroll3", "unroll2", "grouped_unroll2"],
)
def test_scan_unroll_matches_scan(fields):
    """Unrolling the scan over layers (model.scan_unroll) leaves the loss and the gradients
    as the plain scan's (dropout on), over the same stacked parameters."""
    arch, scheme, depth = "decoder", "deepnorm", dict(num_decoder_layers=3)
    cfg, plain, params = built(arch, scheme, **depth, **DROPOUTS)
    tokens = random_tokens((2, 6), cfg.vocab_size, seed=3)
    key = jax.random.key(7)
    unrolled = architectures.build(tiny_config(arch, scheme, **fields, **depth, **DROPOUTS))
    ref_loss, ref_grads = loss_and_grads(plain, params, arch, tokens, tokens, key)
    loss, grads = loss_and_grads(unrolled, params, arch, tokens, tokens, key)
    outer = {1} if fields.get("scan_group_size") else set()  # the scan over groups: not unrolled
    assert _scan_unrolls(unrolled, params, tokens) == {fields["scan_unroll"]} | outer
    # the same float32 operations, fused differently: rounding-level differences only
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-6)
    for g, r in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads), strict=True):
        np.testing.assert_allclose(g, r, atol=1e-6, rtol=1e-5)


def _scan_unrolls(model, params, tokens) -> set[int]:
    """The ``unroll`` of every scan in the model's forward pass (its jaxpr, nested ones too)."""
    jaxpr = jax.make_jaxpr(lambda p: model.apply({"params": p}, tokens))(params)
    found, stack = set(), [jaxpr.jaxpr]
    while stack:
        for eqn in stack.pop().eqns:
            if eqn.primitive.name == "scan":
                found.add(eqn.params["unroll"])
            stack.extend(jax_core.jaxprs_in_params(eqn.params))
    return found


def _lowered_train_step(depth: int):
    cfg = tiny_config(
        "decoder", "deepnorm", d_model=16, num_heads=2, ffn_dim=32, num_decoder_layers=depth
    )
    model = architectures.build(cfg)
    tokens = jax.ShapeDtypeStruct((2, 8), jnp.int32)
    params = jax.eval_shape(
        lambda: nn.unbox(model.init(jax.random.key(0), jnp.ones((2, 8), jnp.int32))["params"])
    )
    opt = optax.adam(1e-3)
    opt_state = jax.eval_shape(opt.init, params)

    def step(params, opt_state, tokens):
        def loss(p):
            logits = model.apply({"params": p}, tokens)
            return optax.softmax_cross_entropy_with_integer_labels(logits, tokens).mean()

        value, grads = jax.value_and_grad(loss)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    return jax.jit(step).lower(params, opt_state, tokens)


def test_thousand_layers_compile_once():
    """A scanned 1,000-layer train step lowers to an HLO the size of a 6-layer one, and compiles."""
    small = _lowered_train_step(6).as_text()
    lowered = _lowered_train_step(1000)
    big = lowered.as_text()
    assert len(big) < 1.05 * len(small), (len(big), len(small))
    compiled = lowered.compile()
    assert compiled.memory_analysis().temp_size_in_bytes > 0


def test_a_scan_unrolled_whole_still_recomputes_under_remat():
    """Unrolled whole (model.scan_unroll >= L) the layers are straight-line code, where XLA
    would merge the backward pass's recomputation with the forward pass unless remat prevents
    it (stack_common.in_loop): the compiled gradient has the scanned one's matmul FLOPs, the
    recomputation included."""
    from deepnet_jax.scale import hlo_census

    arch, depth = "decoder", dict(num_decoder_layers=3, remat_policy="full")
    cfg, _, params = built(arch, "deepnorm", **depth)
    tokens = random_tokens((2, 6), cfg.vocab_size, seed=3)
    flops = {}
    for unroll in (1, 3):
        model = architectures.build(tiny_config(arch, "deepnorm", scan_unroll=unroll, **depth))

        def loss(p, model=model):
            logits = model.apply({"params": p}, *model_args(arch, tokens, tokens))
            return optax.softmax_cross_entropy_with_integer_labels(logits, tokens).mean()

        text = jax.jit(jax.grad(loss)).lower(params).compile().as_text()
        flops[unroll] = hlo_census.matmul_flops(text)
    assert flops[3] == flops[1] > 0, flops
