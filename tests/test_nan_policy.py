"""Non-finite losses: nan_policy="halt" stops with a diagnostic save, "skip" drops updates."""

import importlib.util
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

from deepnet_jax.configs import base as base_config
from deepnet_jax.data import synthetic
from deepnet_jax.model import architectures
from deepnet_jax.scale import hlo_module
from deepnet_jax.training import actions, memory_plan, optimizers, train
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
    # the decoder: the policies act on the loss and the update, whatever the architecture, and
    # its step compiles in about half the encoder-decoder's time
    c = small_config("decoder", "deepnorm")
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


# the default run halts after nan_max_skips in a row in
# test_diagnostic_state_is_the_state_after_the_step_it_names (2 in a row there)
@pytest.mark.slow
def test_skip_halts_after_too_many_in_a_row(monkeypatch, tmp_path):
    _poison(monkeypatch, set(range(1, 100)))
    c = _config("skip")
    c.nan_max_skips = 3
    with pytest.raises(actions.NonFiniteError, match=r"in 3 steps in a row \(nan_policy='skip'"):
        train.run(c, str(tmp_path))


# the default run checks the skipped step's state on the step function itself
# (test_skip_leaves_the_state_unchanged_with_and_without_accumulation)
@pytest.mark.slow
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


def _compiled_step(config):
    from deepnet_jax.scale import targets

    config = train_config.resolve(config)
    return memory_plan.compile_step(config, jax.devices()[:1], targets.parse("cpu:1"))


def _called(ins: hlo_module.Instruction) -> list[str]:
    """The computations ``ins`` names (loop bodies, branches, fused computations …)."""
    names = [name for _, name in hlo_module.CALLEES.findall(ins.rest)]
    for _, listed in hlo_module.CALLEE_LISTS.findall(ins.rest):
        names += [n.strip().lstrip("%") for n in listed.split(",") if n.strip()]
    return names


def _whiles_under(module: hlo_module.Module, name: str) -> int:
    """``while`` instructions in computation ``name`` and in every computation it calls."""
    return sum(
        (ins.opcode == "while") + sum(_whiles_under(module, c) for c in _called(ins))
        for ins in module.computations[name]
    )


def test_the_gate_branches_around_the_optimizer_only():
    """The gate's ``conditional`` holds the optimizer's update, not the forward and backward
    scans (inside it, XLA copied every stacked buffer the loops carry: docs/scaling.md, "The
    kernel model")."""
    step = _compiled_step(_config("halt"))
    module = hlo_module.parse(step.executable.as_text())
    entry = module.computations[module.entry]
    gates = [ins for ins in entry if ins.opcode == "conditional"]
    assert any(ins.opcode == "while" for ins in entry) and len(gates) == 1
    branches = _called(gates[0])
    assert len(branches) == 2 and sum(_whiles_under(module, b) for b in branches) == 0


def _gate_config(layers: int):
    """A decoder-only model, float32, full remat: d 64, 2 heads, FFN 128, 16 rows of 64
    tokens, vocabulary 4096, ``layers`` layers; nan_policy "halt" (gated)."""
    c = base_config.get_config()
    c.data.batch_size, c.data.max_len, c.data.vocab_size = 16, 64, 4096
    m = c.model
    m.arch, m.num_encoder_layers, m.num_decoder_layers = "decoder", 0, layers
    m.d_model, m.num_heads, m.ffn_dim, m.dropout, m.remat_policy = 64, 2, 128, 0.0, "full"
    c.nan_policy = "halt"
    return c


def _gate_plan(layers: int):
    """The planned step of :func:`_gate_config`'s model."""
    return _compiled_step(_gate_config(layers)).plan


def test_the_gate_adds_no_per_layer_temporaries():
    """Full remat over a scan keeps, per layer, one float32 residual [B, T, D] and the layer's
    float32 gradient; the planner's temporaries grow by exactly that (16 → 32 layers). The
    allowance, a quarter of a layer's gradient, is for XLA's scheduling. A select after an
    always-applied update (commit 2a2373c) made XLA:CPU copy the optimizer's moments at the
    step's start: +149,760 B per layer here (docs/scaling.md, "Nested (√L) scan")."""
    low, high = _gate_plan(16), _gate_plan(32)
    rows, length = high.batch_shape
    residual = rows * length * 64 * 4
    layer_grad = (high.params - low.params) // 16  # float32: a layer's gradient bytes
    slope = (high.temporaries - low.temporaries) / 16
    assert layer_grad == 33_472 * 4  # 4·d² + 4d attention, 2·d·f + f + d FFN, 4d norms
    assert slope <= residual + layer_grad + layer_grad / 4, (slope, residual, layer_grad)


def _accumulating(policy: str, updates: int):
    c = _config(policy, updates)
    c.grad_accum_steps = c.log_every = 2  # log_every counts micro-batches: a line per update
    return c


# in the default run, each policy trains with accumulation in the two tests below (skip to the
# run's end, halt until its bad micro-batch)
@pytest.mark.slow
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
    """The jitted step of a tiny decoder under "skip" with ``grad_accum_steps`` = k, its
    optimizer, initial parameters, and a clean and a poisoned (NaN weights) micro-batch."""
    c = _config("skip")
    c.model, c.grad_accum_steps = tiny_config("decoder", "deepnorm"), k
    run = RunConfig.from_config(c)
    model, optimizer = architectures.build(run.model), optimizers.make_optimizer(run)
    loss_fn = train_steps.make_loss_fn(model, "decoder")
    halt_after = actions.halt_after(run)
    step = train_steps.make_train_step(loss_fn, optimizer, jax.random.key(0), halt_after=halt_after)
    rng = np.random.default_rng(0)
    clean = {n: rng.integers(4, 40, (4, 6)).astype(np.int32) for n in ("inputs", "targets")}
    clean["weights"] = np.ones((4, 6), np.float32)
    bad = {**clean, "weights": np.full((4, 6), np.nan, np.float32)}
    params = init_params(model, "decoder", jnp.asarray(clean["inputs"]))
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


def _compiled_for(name: str):
    """:func:`_gate_config`'s 2-layer step compiled deviceless for target ``name``."""
    from deepnet_jax.scale import targets

    target = targets.parse(name)
    config = train_config.resolve(_gate_config(2))
    return memory_plan.compile_step(config, targets.compile_devices(target), target), target


@pytest.mark.skipif(
    importlib.util.find_spec("jax_plugins.xla_cuda12") is None,
    reason='jax-cuda12-plugin is not installed (pip install -e ".[gpu-plan]")',
)
def test_on_a_gpu_the_gate_copies_no_state():
    """Compiled for an H100 (deviceless), the gated step's plain copies move less than a
    tenth of the parameters' bytes: the gate is a select fused into the update, where a
    conditional's output made XLA:GPU copy the whole updated state into it (docs/scaling.md,
    "The optimizer's gate")."""
    from deepnet_jax.scale import kernels

    step, target = _compiled_for("h100-1")
    found = kernels.kernels(step.executable.as_text(), target.chip)
    copied = sum(k.bytes for k in found if k.opcode == "copy")
    assert step.plan.params > 0 and copied < step.plan.params / 10, (copied, step.plan.params)


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="libtpu not installed")
def test_on_a_tpu_the_gate_is_a_conditional():
    """Compiled for a v5p-8 (deviceless) the gate stays a ``conditional``: with the select
    XLA:TPU planned the 1,000-layer model 5 GiB higher (docs/scaling.md, "The optimizer's
    gate")."""
    step, _ = _compiled_for("v5p-8")
    module = hlo_module.parse(step.executable.as_text())
    entry = module.computations[module.entry]
    assert sum(ins.opcode == "conditional" for ins in entry) == 1


@pytest.mark.parametrize("proceed", [True, False])
def test_the_gpus_select_equals_the_branch(proceed):
    """The GPUs' select and the CPUs' and TPUs' branch give the same state and norms, bit for
    bit, also when the gradient is NaN (the select's discarded update must not leak into the
    kept state)."""
    params = {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.ones(3)}
    optimizer = optax.adamw(1e-2)
    opt_state = optimizer.init(params)

    def apply(params, opt_state, grads, learning_rate):
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return params, opt_state, optax.tree.norm(updates), optax.tree.norm(params)

    for fill in (0.5, jnp.nan):
        grads = jax.tree.map(lambda p, f=fill: jnp.full_like(p, f), params)
        args = (params, opt_state, grads, 1e-2)
        held = train_steps._hold(jax.eval_shape(apply, *args))
        gate = jnp.asarray(proceed)
        branch = jax.jit(train_steps._branch, static_argnums=(0, 1))(apply, held, gate, *args)
        select = jax.jit(train_steps._select, static_argnums=(0, 1))(apply, held, gate, *args)
        assert jax.tree.structure(branch) == jax.tree.structure(select)
        for a, b in zip(jax.tree.leaves(branch), jax.tree.leaves(select), strict=True):
            np.testing.assert_array_equal(a, b)
        if not proceed:
            np.testing.assert_array_equal(select[0]["w"], params["w"])
