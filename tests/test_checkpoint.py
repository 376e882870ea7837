"""Orbax checkpoints: N steps, stop, resume, N more == 2N uninterrupted (bitwise on CPU)."""

import os

import numpy as np
import orbax.checkpoint as ocp
import pytest
from test_data_pipeline import _train_config, corpus  # noqa: F401 (fixture)
from test_training import small_config

from deepnet_jax.training import optimizers, train


def _final_params(workdir):
    directory = os.path.join(workdir, "checkpoints")
    step = max(int(d) for d in os.listdir(directory) if d.isdigit())
    state = ocp.StandardCheckpointer().restore(os.path.join(directory, str(step), "state"))
    return step, state["params"]


def _assert_identical(a, b):
    flat_a = {"/".join(map(str, k)): v for k, v in _flatten(a)}
    flat_b = {"/".join(map(str, k)): v for k, v in _flatten(b)}
    assert flat_a.keys() == flat_b.keys()
    for k in flat_a:
        np.testing.assert_array_equal(np.asarray(flat_a[k]), np.asarray(flat_b[k]), err_msg=k)


def _flatten(tree, prefix=()):
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _flatten(v, (*prefix, k))
    else:
        yield prefix, tree


def _resume_equals_uninterrupted(config, tmp_path, steps):
    config.checkpoint_every = 2
    whole, split = str(tmp_path / "whole"), str(tmp_path / "split")
    config.total_steps = 2 * steps
    train.run(config, whole)
    config.total_steps = steps
    train.run(config, split)  # stops after `steps` updates, with a checkpoint
    config.total_steps = 2 * steps
    train.run(config, split)  # resumes: state, data position and dropout keys
    (step_a, a), (step_b, b) = _final_params(whole), _final_params(split)
    assert step_a == step_b == 2 * steps * config.grad_accum_steps
    _assert_identical(a, b)
    return a


@pytest.mark.slow  # in CI: test_reliability's kill -9 and SIGTERM resumes (dropout 0.1)
def test_resume_synthetic_with_dropout(tmp_path):
    c = small_config("encdec", "deepnorm")
    c.model.dropout = 0.1  # dropout keys must be restored too
    c.total_steps = 6
    _resume_equals_uninterrupted(c, tmp_path, 3)


# -m slow: corpus iterator restore is tested in test_data_pipeline, exact resume end to end
# in test_reliability (kill -9 and SIGTERM) and accumulation in test_train_config
@pytest.mark.slow
@pytest.mark.parametrize("accum", [1, 2])
def test_resume_corpus_pipeline(corpus, tmp_path, accum):  # noqa: F811
    c = _train_config(corpus, max_tokens=192)
    c.model.dropout = 0.1
    c.grad_accum_steps = accum
    _resume_equals_uninterrupted(c, tmp_path, 3)


def test_checkpoint_items_and_retention(tmp_path):
    c = small_config("decoder", "subln")
    c.total_steps, c.checkpoint_every, c.max_to_keep = 6, 2, 2
    train.run(c, str(tmp_path))
    directory = tmp_path / "checkpoints"
    steps = sorted(int(d) for d in os.listdir(directory) if d.isdigit())
    assert steps == [4, 6]  # every 2 updates, newest 2 kept
    assert {"state", "data", "config"} <= set(os.listdir(directory / "6"))


def test_bad_checkpoint_fields():
    c = small_config("decoder", "subln")
    c.max_to_keep = 0
    with pytest.raises(ValueError, match=r"max_to_keep=0 must be an integer >= 1"):
        train.run(c)


def test_metrics_file_and_periodic_validation(tmp_path):
    from deepnet_jax.runs import metrics

    c = small_config("encdec", "pre_ln")
    c.total_steps, c.log_every, c.eval_every, c.checkpoint_every = 4, 2, 2, 0
    result = train.run(c, str(tmp_path))
    records = metrics.read(str(tmp_path))
    train_records = [r for r in records if r["split"] == "train"]
    eval_records = [r for r in records if r["split"] == "eval"]
    assert [r["step"] for r in train_records] == [2, 4]
    assert [r["step"] for r in eval_records] == [2, 4]  # every 2 updates, then the final one
    for r in train_records:
        assert r["loss"] > 0 and r["tokens_per_s"] > 0 and r["step_time_s"] > 0
    assert train_records[0]["lr"] == pytest.approx(float(optimizers.learning_rate_schedule(c)(1)))
    assert eval_records[-1]["loss"] == pytest.approx(result["eval_loss"])
    assert eval_records[-1]["perplexity"] == pytest.approx(np.exp(result["eval_loss"]))
    assert not (tmp_path / "checkpoints").exists()  # checkpoint_every=0 disables checkpoints


def test_a_best_kept_at_a_step_is_replaced_when_a_resumed_run_reaches_it_again(tmp_path):
    """A run resumed from step 2 whose best parameters were kept at step 4 (its step-4
    checkpoint lost, or the run moved to another mesh) saves its new best at step 4."""
    from deepnet_jax.runs.checkpoint import Checkpointer

    first = Checkpointer(str(tmp_path), every=2, max_to_keep=2)
    first.save_best(4, {"w": np.zeros(3, np.float32)}, score=-2.0)
    first.close()
    resumed = Checkpointer(str(tmp_path), every=2, max_to_keep=2)
    resumed.save_best(4, {"w": np.ones(3, np.float32)}, score=-1.5)
    assert resumed.best_score() == -1.5
    kept = resumed.best_manager.restore(
        4, args=ocp.args.Composite(params=ocp.args.StandardRestore())
    )
    np.testing.assert_array_equal(kept["params"]["w"], np.ones(3, np.float32))
    resumed.close()
