"""Source sensitivity: NLL with another row's source minus NLL with the row's own source."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import init_params, tiny_config

from deepnet_jax.decoding import scoring
from deepnet_jax.model import architectures
from deepnet_jax.training import progress as train_progress
from deepnet_jax.training import source_sensitivity
from deepnet_jax.training import steps as train_steps


def test_every_row_with_targets_gets_another_rows_source():
    has_targets = jnp.array([True, False, True, True, False, True])
    perm = np.asarray(source_sensitivity.shift_permutation(has_targets))
    assert sorted(perm) == list(range(6))  # a permutation
    rows = np.flatnonzero(np.asarray(has_targets))
    assert all(perm[r] != r and perm[r] in rows for r in rows)  # a derangement of those rows
    assert perm[1] == 1 and perm[4] == 4  # empty rows keep their own (padding) source
    one = np.asarray(source_sensitivity.shift_permutation(jnp.array([False, True, False])))
    assert list(one) == [0, 1, 2]  # a single row cannot be shifted


def test_only_the_source_side_moves():
    batch = {
        "src": jnp.arange(12).reshape(3, 4),
        "src_positions": jnp.arange(12).reshape(3, 4) + 100,
        "inputs": jnp.ones((3, 4), jnp.int32),
        "targets": jnp.ones((3, 4), jnp.int32),
        "weights": jnp.array([[1.0] * 4, [1.0] * 4, [0.0] * 4]),
    }
    shifted = source_sensitivity.with_shifted_sources(batch)
    np.testing.assert_array_equal(shifted["src"], np.asarray(batch["src"])[[1, 0, 2]])
    np.testing.assert_array_equal(
        shifted["src_positions"], np.asarray(batch["src"])[[1, 0, 2]] + 100
    )
    for key in ("inputs", "targets", "weights"):
        assert shifted[key] is batch[key]


def _batches(seed: int):
    rng = np.random.default_rng(seed)
    for _ in range(2):
        src = rng.integers(4, 40, (4, 6)).astype(np.int32)
        tgt = rng.integers(4, 40, (4, 5)).astype(np.int32)
        yield {"src": src, "inputs": tgt, "targets": tgt, "weights": np.ones((4, 5), np.float32)}


def test_a_decoder_cut_off_from_its_source_scores_exactly_zero():
    model = architectures.build(tiny_config("encdec", "deepnorm"))
    first = next(_batches(0))
    params = init_params(model, "encdec", jnp.asarray(first["src"]), jnp.asarray(first["inputs"]))
    eval_step = train_steps.make_eval_step(model, "encdec")
    reading = train_steps.split_loss(eval_step, params, _batches(0))["source_sensitivity"]
    assert abs(reading) > 1e-4  # at initialization the output already depends on it (~1e-2)

    # no cross-attention output: the decoder's computation no longer involves the source
    cross = params["decoder"]["layers"]["cross_attn"]
    blind = jax.tree.map(lambda x: x, params)
    blind["decoder"]["layers"]["cross_attn"] = {
        **cross,
        "out_proj": jax.tree.map(jnp.zeros_like, cross["out_proj"]),
    }
    result = train_steps.split_loss(eval_step, blind, _batches(0))
    assert abs(result["source_sensitivity"]) < 1e-5  # float32 rounding of a ~3.7-nat mean
    assert result["loss"] > 0


def test_the_warning_names_the_symptom_only_after_the_warm_up():
    blind = {"source_sensitivity": 0.03}
    assert train_progress.source_blind_warning(blind, 400, 400) == ""  # still warming up
    line = train_progress.source_blind_warning(blind, 401, 400)
    assert line.startswith("warning: source sensitivity 0.030 nats at update 401")
    assert "\n" not in line
    assert train_progress.source_blind_warning({"source_sensitivity": 0.5}, 2000, 400) == ""
    assert train_progress.source_blind_warning({"loss": 3.0}, 2000, 400) == ""  # not a translation


@pytest.mark.parametrize(
    ("hypotheses", "fraction"), [(["a b", "a b", "c"], 2 / 3), (["x"] * 4, 0.25), (["p", "q"], 1)]
)
def test_distinct_hypotheses(hypotheses, fraction):
    scores = scoring.corpus_scores(hypotheses, ["a b c"] * len(hypotheses))
    assert scores["distinct_hypotheses"] == pytest.approx(fraction)
