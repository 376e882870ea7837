"""Non-finite losses: nan_policy="halt" stops with a diagnostic save, "skip" drops updates."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from conftest import init_params, tiny_config
from test_training import small_config

from deepnet_jax.data import synthetic
from deepnet_jax.model import architectures
from deepnet_jax.training import actions, optimizers, train
from deepnet_jax.training import config as train_config
from deepnet_jax.training import steps as train_steps
from deepnet_jax.training.run_config import RunConfig

BAD = train_steps.BAD_IN_A_ROW
ORIGINAL_NEXT = synthetic.SyntheticIterator.__next__


def _poison(monkeypatch, bad_batches):
    """Give the synthetic batches whose index is in ``bad_batches`` NaN loss weights."""

    def poisoned_next(self):
        index = self._next
        batch = ORIGINAL_NEXT(self)
        if index in bad_batches:
            batch = {**batch, "weights": np.full_like(batch["weights"], np.nan)}
        return batch

    monkeypatch.setattr(synthetic.SyntheticIterator, "__next__", poisoned_next)


def _config(policy: str, steps: int = 6):
    c = small_config("encdec", "deepnorm")
    c.total_steps, c.checkpoint_every, c.log_every, c.eval_every = steps, 2, 1, 0
    c.nan_policy = policy
    return c


def test_halt_stops_at_the_step_with_a_diagnostic_save(monkeypatch, tmp_path):
    _poison(monkeypatch, {2})  # the third step
    with pytest.raises(actions.NonFiniteError, match=r"^step 3: non-finite loss=nan") as info:
        train.run(_config("halt"), str(tmp_path))
    assert "(nan_policy='halt'); diagnostic state saved in" in str(info.value)
    assert (tmp_path / "diagnostic" / "3").is_dir()
    steps = sorted(int(d) for d in os.listdir(tmp_path / "checkpoints") if d.isdigit())
    assert steps == [2]  # the last good checkpoint is kept, nothing after the NaN is saved


def test_diagnostic_state_is_the_state_after_the_step_it_names(monkeypatch, tmp_path):
    # Steps 4 and 5 are poisoned and skipped (no update); the second skip in a row halts. Step
    # 5's metrics are read only after step 6 (a clean batch) was dispatched, yet the state saved
    # for step 5 is the one after step 5: the same parameters as the checkpoint after step 4.
    _poison(monkeypatch, {3, 4})
    c = _config("skip")
    c.nan_max_skips, c.log_every = 2, 6  # metrics read a step late, not at each log line
    with pytest.raises(actions.NonFiniteError, match=r"^step 5: non-finite loss=nan in 2 steps"):
        train.run(c, str(tmp_path))
    saved = ocp.StandardCheckpointer().restore(tmp_path / "diagnostic" / "5")
    good = ocp.StandardCheckpointer().restore(tmp_path / "checkpoints" / "4" / "state")
    jax.tree.map(np.testing.assert_array_equal, saved["params"], good["params"])


def test_skip_drops_the_update_and_counts_it(monkeypatch, tmp_path):
    _poison(monkeypatch, {2})
    result = train.run(_config("skip"), str(tmp_path))
    assert np.isfinite(result["eval_loss"])
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train_records = [r for r in records if r["split"] == "train"]
    assert sum(r["skipped_steps"] for r in train_records) == 1
    assert all(np.isfinite(r["loss"]) for r in train_records)  # the NaN step is not averaged in


def test_skip_halts_after_too_many_in_a_row(monkeypatch, tmp_path):
    _poison(monkeypatch, set(range(1, 100)))
    c = _config("skip")
    c.nan_max_skips = 3
    with pytest.raises(actions.NonFiniteError, match=r"in 3 steps in a row \(nan_policy='skip'"):
        train.run(c, str(tmp_path))


def test_skip_leaves_parameters_unchanged_by_a_bad_batch(monkeypatch, tmp_path):
    # Two steps where the second is poisoned end where one clean step ends.
    c1, c2 = _config("skip", 1), _config("skip", 2)
    for c in (c1, c2):
        c.checkpoint_every = 1
    train.run(c1, str(tmp_path / "one"))
    _poison(monkeypatch, {1})
    train.run(c2, str(tmp_path / "two"))
    one = ocp.StandardCheckpointer().restore(tmp_path / "one" / "checkpoints" / "1" / "state")
    two = ocp.StandardCheckpointer().restore(tmp_path / "two" / "checkpoints" / "2" / "state")
    jax.tree.map(np.testing.assert_array_equal, one["params"], two["params"])


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("nan_policy", "ignore", r"nan_policy='ignore'; allowed values are \('halt', 'skip'\)"),
        ("nan_max_skips", 0, r"nan_max_skips=0 must be an integer >= 1"),
    ],
)
def test_bad_nan_fields(field, value, message):
    c = _config("halt")
    c[field] = value
    with pytest.raises(ValueError, match=message):
        train.validate(c)


def test_the_gate_selects_the_state_instead_of_branching_around_the_update():
    """The gate is an elementwise select after the update, not a ``conditional`` holding the
    forward and backward scans (inside one, XLA copied every stacked buffer the loops carry:
    docs/scaling.md, "The kernel model")."""
    from deepnet_jax.scale import targets
    from deepnet_jax.training import config as train_config
    from deepnet_jax.training import memory_plan

    config = train_config.resolve(_config("halt"))
    step = memory_plan.compile_step(config, jax.devices()[:1], targets.parse("cpu:1"))
    text = step.executable.as_text()
    assert " while(" in text and " conditional(" not in text


def _accumulating(policy: str, updates: int):
    c = _config(policy, updates)
    c.grad_accum_steps = c.log_every = 2  # log_every counts micro-batches: a line per update
    return c


@pytest.mark.parametrize("policy", train_config.NAN_POLICIES)
def test_each_policy_trains_with_accumulation(policy, tmp_path):
    """grad_accum_steps > 1 under every nan_policy, through the trainer (under "skip",
    apply_if_finite around MultiSteps once lost the learning-rate argument: a TypeError)."""
    result = train.run(_accumulating(policy, 3), str(tmp_path))
    assert np.isfinite(result["eval_loss"])
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["split"] == "train"] == [1, 2, 3]


def test_skip_with_accumulation_drops_the_bad_micro_batch(monkeypatch, tmp_path):
    _poison(monkeypatch, {2})  # the first micro-batch of the second update
    result = train.run(_accumulating("skip", 3), str(tmp_path))
    assert np.isfinite(result["eval_loss"])
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train_records = [r for r in records if r["split"] == "train"]
    assert sum(r["skipped_steps"] for r in train_records) == 1
    assert all(np.isfinite(r["loss"]) for r in train_records)


def test_halt_with_accumulation_stops_at_the_bad_micro_step(monkeypatch, tmp_path):
    _poison(monkeypatch, {2})
    with pytest.raises(actions.NonFiniteError, match=r"^step 3: non-finite loss=nan \(nan_policy"):
        train.run(_accumulating("halt", 3), str(tmp_path))
    assert (tmp_path / "diagnostic" / "3").is_dir()


def _skipping_step(k: int):
    """The jitted step of a tiny encoder-decoder under "skip" with ``grad_accum_steps`` = k, its
    optimizer, initial parameters, and a clean and a poisoned (NaN weights) micro-batch."""
    c = _config("skip")
    c.model, c.grad_accum_steps = tiny_config("encdec", "deepnorm"), k
    run = RunConfig.from_config(c)
    model, optimizer = architectures.build(run.model), optimizers.make_optimizer(run)
    loss_fn = train_steps.make_loss_fn(model, "encdec")
    halt_after = actions.halt_after(run)
    step = train_steps.make_train_step(loss_fn, optimizer, jax.random.key(0), halt_after=halt_after)
    rng = np.random.default_rng(0)
    clean = {n: rng.integers(4, 40, (4, 6)).astype(np.int32) for n in ("src", "inputs", "targets")}
    clean["weights"] = np.ones((4, 6), np.float32)
    bad = {**clean, "weights": np.full((4, 6), np.nan, np.float32)}
    params = init_params(model, "encdec", jnp.asarray(clean["src"]), jnp.asarray(clean["inputs"]))
    return step, optimizer, params, clean, bad


@pytest.mark.parametrize("k", [1, 2])
def test_skip_leaves_the_state_unchanged_with_and_without_accumulation(k):
    """A non-finite micro-batch under "skip" changes neither the parameters nor the optimizer
    state beneath apply_if_finite (Adam's moments; with k > 1 the accumulated gradient and the
    micro-step count), and advances the gate's count; the next clean micro-batch goes on as if
    the bad one never came (k clean micro-batches, not k calls, make an update)."""
    step, optimizer, params, clean, bad = _skipping_step(k)
    opt_state, lr, gate = optimizer.init(params), np.float32(1e-3), jnp.zeros((), jnp.int32)
    params, opt_state, metrics = step(params, opt_state, clean, 0, lr, gate)
    before = jax.device_get((params, opt_state.inner_state))
    params, opt_state, metrics = step(params, opt_state, bad, 1, lr, metrics[BAD])
    assert not np.isfinite(float(metrics["loss"]))
    assert int(metrics[BAD]) == 1 and int(opt_state.notfinite_count) == 1
    after = jax.device_get((params, opt_state.inner_state))
    jax.tree.map(np.testing.assert_array_equal, after, before)
    params, opt_state, metrics = step(params, opt_state, clean, 2, lr, metrics[BAD])
    assert int(metrics[BAD]) == 0
    assert int(optax.tree.get(opt_state, "ScaleByAdamState").count) == 2 // k
