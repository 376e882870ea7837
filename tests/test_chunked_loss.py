"""The chunked output head and loss (``loss_chunk``; losses.fused_mean_loss) against the
whole-batch path: the same sums and gradients, for every architecture and both output heads, no
matmul recomputed, and a run that trains with it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_training import small_config

from deepnet_jax.data import synthetic
from deepnet_jax.model import architectures
from deepnet_jax.model import inputs as model_inputs
from deepnet_jax.training import config_checks, losses, train
from deepnet_jax.training import steps as train_steps
from deepnet_jax.training.run_config import RunConfig

# float32 sums of up to B·T = 96 terms in another order, and the same logits: relative errors
# of a few ulps per term (2^-24 ≈ 6e-8 each), far below 1e-5
RTOL = 1e-5


def _model_and_batch(arch: str, tied: bool):
    c = small_config(arch, "deepnorm")
    c.model.tie_embeddings = tied
    c = config_checks.stand_in(RunConfig.from_config(c)).resolved()  # auto: one model
    model = architectures.build(c.model)
    batch = synthetic.batch(arch, 8, c.model.vocab_size, 12, np.random.default_rng(3))
    batch["weights"] = batch["weights"].copy()
    batch["weights"][:, 9:] = 0.0  # padding at the end of each row
    params = model_inputs.init_variables(model, arch, batch, 0)["params"]
    return model, params, batch


@pytest.mark.parametrize("arch", ["encdec", "decoder", "encoder"])
@pytest.mark.parametrize("tied", [True, False])
def test_chunked_loss_and_gradients_equal_the_whole_batchs(arch, tied):
    model, params, batch = _model_and_batch(arch, tied)
    rng = jax.random.key(0)
    outputs = {}
    for chunk in (0, 5):  # 5 does not divide T = 12: the last chunk is padded
        loss_fn = train_steps.make_loss_fn(model, arch, 0.1, chunk)
        (loss, sums), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, batch, rng, True)
        outputs[chunk] = (loss, sums, grads)
    whole, chunked = outputs[0], outputs[5]
    np.testing.assert_allclose(chunked[0], whole[0], rtol=RTOL)
    for key in ("loss_sum", "nll_sum", "weight", "correct"):
        np.testing.assert_allclose(chunked[1][key], whole[1][key], rtol=RTOL, err_msg=key)
    scale = max(float(jnp.max(jnp.abs(g))) for g in jax.tree.leaves(whole[2]))
    for a, b in zip(jax.tree.leaves(chunked[2]), jax.tree.leaves(whole[2]), strict=True):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=RTOL * scale)


def test_a_run_with_a_chunked_loss_trains_as_the_whole_batch_run():
    runs = {}
    for chunk in (0, 4):
        c = small_config("decoder", "deepnorm", steps=20)  # the chunks split the decoder's logits
        c.loss_chunk = chunk
        runs[chunk] = train.run(c)
    assert runs[4]["eval_loss"] < 0.85 * runs[4]["first_train_loss"]
    np.testing.assert_allclose(runs[4]["first_train_loss"], runs[0]["first_train_loss"], rtol=RTOL)
    # 20 Adam updates amplify float32 reordering (an update is ≈ lr·sign(g) where |g| ≈ ε), so
    # the end of the runs is compared loosely: the same training, not the same bits
    np.testing.assert_allclose(runs[4]["eval_loss"], runs[0]["eval_loss"], rtol=1e-2)


def _dots(fn, *args) -> int:
    """The matmuls (dot_general) in the jaxpr of ``fn(*args)``, inner jaxprs (scans) included."""

    def count(jaxpr) -> int:
        n = 0
        for eqn in jaxpr.eqns:
            n += eqn.primitive.name == "dot_general"
            for value in eqn.params.values():
                inner = getattr(value, "jaxpr", value)
                if hasattr(inner, "eqns"):
                    n += count(inner)
        return n

    return count(jax.make_jaxpr(fn)(*args).jaxpr)


@pytest.mark.parametrize("tied", [True, False])
def test_the_fused_loss_computes_each_chunks_logits_once(tied):
    """Differentiated, the chunked loss has as many matmuls as the whole-batch one: the head's
    forward matmul and its two gradients per chunk, none recomputed in the backward pass."""
    model, params, batch = _model_and_batch("decoder", tied)
    rng = jax.random.key(0)
    counts = {}
    for chunk in (0, 5):
        loss_fn = train_steps.make_loss_fn(model, "decoder", 0.1, chunk)
        grad_fn = jax.grad(lambda p, f=loss_fn: f(p, batch, rng, True)[0])
        counts[chunk] = _dots(grad_fn, params)
    assert counts[5] == counts[0], counts


@pytest.mark.parametrize("tied", [True, False])
def test_the_fused_loss_differentiates_the_heads_parameters_alone(tied):
    model, params, _ = _model_and_batch("decoder", tied)
    outputs = jnp.zeros((2, 3, model.config.d_model))

    def head(p, x):
        return model.apply({"params": p}, x, method="head")

    names = losses.head_params(head, params, outputs)
    assert names == ["embed_tokens" if tied else "output_projection"], names
