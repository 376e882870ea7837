"""Stability instruments: model update, per-layer gradient norms, LayerNorm inputs."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from conftest import built, random_tokens
from test_training import small_config

from deepnet_jax.common.tokens import PAD_ID
from deepnet_jax.model import layout
from deepnet_jax.model.norms import DIAGNOSTICS
from deepnet_jax.runs import metrics
from deepnet_jax.training import diagnostics, train
from deepnet_jax.training import steps as train_steps


def _batch(arch: str, vocab: int = 40, rows: int = 2, length: int = 6) -> dict:
    tokens = np.array(random_tokens((rows, length), vocab))
    tokens[0, -2:] = PAD_ID  # one padded row
    return {"src": tokens, "inputs": tokens, "targets": tokens, "weights": (tokens > 0) * 1.0}


@pytest.mark.parametrize("arch", ["encoder", "encdec"])  # decoder-only: the test below
def test_model_update_is_zero_at_start_and_positive_after_one_step(arch):
    cfg, model, params = built(arch, "deepnorm")
    batch = _batch(arch)
    probe = diagnostics.make_probe(model, arch)
    f0, _ = probe(params, batch)
    assert f0.shape == (2, 6, cfg.d_model)
    assert float(diagnostics.model_update(f0, f0, batch["inputs"])) == 0.0
    loss_fn = train_steps.make_loss_fn(model, arch)
    grads = jax.grad(lambda p: loss_fn(p, batch, jax.random.key(0), True)[0])(params)
    stepped = jax.tree.map(lambda p, g: p - 1e-2 * g, params, grads)
    f1, _ = probe(stepped, batch)
    delta = float(diagnostics.model_update(f1, f0, batch["inputs"]))
    assert delta > 0
    # the definition: mean over non-padding positions of the L2 norm over the hidden axis
    mask = batch["inputs"] != PAD_ID
    expected = np.linalg.norm(np.asarray(f1 - f0), axis=-1)[mask].mean()
    np.testing.assert_allclose(delta, expected, rtol=1e-5)


def test_features_are_the_stack_output_before_the_vocabulary_projection():
    cfg, model, params = built("decoder", "deepnorm")
    batch = _batch("decoder")
    features, _ = diagnostics.make_probe(model, "decoder")(params, batch)
    table = params["embed_tokens"]["embedding"]
    logits = model.apply({"params": params}, batch["inputs"])
    if cfg.tie_embeddings:
        np.testing.assert_allclose(features @ table.T, logits, rtol=1e-4, atol=1e-4)
    else:
        head = params["output_projection"]["kernel"]
        np.testing.assert_allclose(features @ head, logits, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("scheme", ["post_ln", "subln"])  # without and with inner LNs
def test_layer_grad_norms_equal_norms_of_each_layers_gradient(scheme):
    cfg, model, params = built("encdec", scheme)
    batch = _batch("encdec")
    loss_fn = train_steps.make_loss_fn(model, "encdec")
    grads = jax.grad(lambda p: loss_fn(p, batch, jax.random.key(0), True)[0])(params)
    norms = jax.device_get(diagnostics.layer_grad_norms(grads))
    sublayers = {"self_attn", "ffn", "self_attn_layer_norm", "final_layer_norm", "all"}
    assert {k for k in norms if k.startswith("encoder/")} == {f"encoder/{s}" for s in sublayers}
    assert "decoder/cross_attn" in norms and "decoder/cross_attn_layer_norm" in norms
    # against gradients cut per layer (the unrolled layout) and normed one by one
    unrolled = layout.unstack_layers(jax.device_get(grads))
    for side, layers in (("encoder", cfg.num_encoder_layers), ("decoder", cfg.num_decoder_layers)):
        assert norms[f"{side}/all"].shape == (layers,)
        for i in range(layers):
            layer = unrolled[side][f"layers_{i}"]
            for sub, tree in layer.items():
                expected = np.sqrt(sum(np.sum(np.square(x)) for x in jax.tree.leaves(tree)))
                np.testing.assert_allclose(norms[f"{side}/{sub}"][i], expected, rtol=1e-5)
            everything = np.sqrt(sum(np.sum(np.square(x)) for x in jax.tree.leaves(layer)))
            np.testing.assert_allclose(norms[f"{side}/all"][i], everything, rtol=1e-5)
    # The unrolled layout gives the same vectors. It sums the same squares in another order
    # (each layer's own leaves, not the trailing axes of [L, …] leaves), so on real gradients
    # the two agree only to float32 rounding, which grows with the number n of squares summed
    # (up to (n − 1)·2⁻²⁴ relative): no fixed rtol holds for every size and machine. On integer
    # "gradients" in [−8, 8] every square is at most 64 and every partial sum an integer below
    # 64·n < 2²⁴, exact in float32 in any order, so the layouts must agree bit for bit.
    rng = np.random.default_rng(0)
    ints = jax.tree.map(
        lambda g: rng.integers(-8, 9, g.shape).astype(np.float32), jax.device_get(grads)
    )
    assert 64 * sum(x.size for x in jax.tree.leaves(ints)) < 2**24
    stacked = jax.device_get(diagnostics.layer_grad_norms(ints))
    from_unrolled = jax.device_get(diagnostics.layer_grad_norms(layout.unstack_layers(ints)))
    assert from_unrolled.keys() == stacked.keys() == norms.keys()
    for name, value in stacked.items():
        assert np.all(value > 0), name
        np.testing.assert_array_equal(from_unrolled[name], value, err_msg=name)


@pytest.mark.parametrize(
    "scheme, names",
    [
        ("post_ln", {"self_attn_layer_norm", "final_layer_norm"}),
        ("deepnorm", {"self_attn_layer_norm", "final_layer_norm"}),
        ("pre_ln", {"self_attn_layer_norm", "final_layer_norm"}),
        (
            "subln",
            {
                "self_attn_layer_norm",
                "final_layer_norm",
                "self_attn/inner_attn_ln",
                "ffn/ffn_layernorm",
            },
        ),
    ],
)
def test_ln_inputs_have_one_entry_per_layernorm_per_layer(scheme, names):
    cfg, model, params = built("encdec", scheme)
    batch = _batch("encdec")
    _, ln = diagnostics.make_probe(model, "encdec")(params, batch)
    assert {k.split("/", 1)[1] for k in ln if k.startswith("encoder/")} == names
    decoder_names = names | {"cross_attn_layer_norm"}
    assert {k.split("/", 1)[1] for k in ln if k.startswith("decoder/")} == decoder_names
    for key, value in ln.items():
        side = key.split("/")[0]
        layers = cfg.num_encoder_layers if side == "encoder" else cfg.num_decoder_layers
        assert value.shape == (layers,) and np.all(np.asarray(value) > 0), key


def test_unrolled_stack_reports_the_same_ln_inputs():
    _, scanned_model, params = built("encdec", "deepnorm")
    _, unrolled_model, _ = built("encdec", "deepnorm", scan_layers=False)
    batch = _batch("encdec")
    _, a = diagnostics.make_probe(scanned_model, "encdec")(params, batch)
    _, b = diagnostics.make_probe(unrolled_model, "encdec")(layout.unstack_layers(params), batch)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-5)


def test_instruments_off_leave_no_collection():
    _, model, params = built("decoder", "deepnorm")
    tokens = random_tokens((1, 5), 40)
    _, state = model.apply({"params": params}, tokens, mutable=["intermediates"])
    assert DIAGNOSTICS not in state
    variables = jax.eval_shape(model.init, jax.random.key(0), tokens)
    assert set(variables) == {"params"}


def test_training_run_logs_and_plots_the_instruments(tmp_path):
    c = small_config("encdec", "post_ln", steps=6)
    c.diagnostics.every, c.log_every = 2, 2
    train.run(c, str(tmp_path))
    records = [r for r in metrics.read(str(tmp_path)) if r["split"] == "diagnostics"]
    assert [r["step"] for r in records] == [0, 2, 4, 6]
    assert records[0]["model_update"] == 0.0 and records[1]["model_update"] > 0
    assert len(records[1]["ln_input/decoder/cross_attn_layer_norm"]) == 2
    assert len(records[1]["grad_norm/encoder/all"]) == 3
    assert "grad_norm/encoder/all" not in records[0]  # no gradient before the first step
    for name in ("model_update", "ln_inputs", "grad_norms"):
        assert (tmp_path / f"diagnostics_{name}.png").stat().st_size > 1000


def test_resumed_run_reads_theta0_features_instead_of_building_theta0(monkeypatch, tmp_path):
    """A run stopped by a signal and resumed writes the same ΔF records as one uninterrupted
    run, and the resumed run never initializes θ₀ (or any state) again."""
    import os
    import signal

    from deepnet_jax.data import synthetic
    from deepnet_jax.scale import sharding

    c = small_config("decoder", "deepnorm", steps=6)
    c.diagnostics.every, c.log_every, c.checkpoint_every = 2, 2, 100
    train.run(c, str(tmp_path / "whole"))
    original_next = synthetic.SyntheticIterator.__next__

    def next_with_signal(self):
        if self._next == 3:
            os.kill(os.getpid(), signal.SIGINT)  # stop while batch 4 is prepared
        return original_next(self)

    with monkeypatch.context() as patch:
        patch.setattr(synthetic.SyntheticIterator, "__next__", next_with_signal)
        assert train.run(c, str(tmp_path / "resumed"))["stopped"]
    original_plan = sharding.sharded_state

    def plan_without_init(*args, **kwargs):
        def refuse():
            raise AssertionError("a resumed run initialized its state again")

        plan = original_plan(*args, **kwargs)
        return sharding.ShardedState(plan.abstract, refuse, refuse)

    monkeypatch.setattr(sharding, "sharded_state", plan_without_init)
    train.run(c, str(tmp_path / "resumed"))

    def updates(run: str) -> dict[int, float]:
        records = metrics.read(str(tmp_path / run))
        return {r["step"]: r["model_update"] for r in records if r["split"] == "diagnostics"}

    whole, resumed = updates("whole"), updates("resumed")
    assert sorted(resumed) == sorted(whole) == [0, 2, 4, 6]
    np.testing.assert_allclose([resumed[s] for s in (2, 4, 6)], [whole[s] for s in (2, 4, 6)])


def test_bad_diagnostics_field():
    c = small_config("encdec", "deepnorm")
    c.diagnostics.every = -1
    with pytest.raises(ValueError, match=r"diagnostics\.every=-1 must be an integer >= 0"):
        train.validate(c)
