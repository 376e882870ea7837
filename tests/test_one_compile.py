"""A run with ``model.remat_policy='auto'`` compiles its train step once: the chosen candidate's
planned executable is the trainer's step for the batch shape it was planned at
(:mod:`deepnet_jax.training.planned_step`); any other input takes the jitted step, never the
executable."""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from compile_count_worker import compiles
from conftest import xla_flags
from test_training import small_config

from deepnet_jax.scale import sharding
from deepnet_jax.training import config as train_config
from deepnet_jax.training import memory_plan, planned_step, preemption, train

ROOT = os.path.dirname(os.path.abspath(__file__))


def _auto(steps: int = 2):
    c = small_config("decoder", "deepnorm", steps=steps)
    c.model.remat_policy = "auto"
    c.model.dropout = 0.1  # the dropout keys are part of the executable
    c.eval_batches, c.log_every = 1, 1
    return c


def test_an_auto_run_compiles_its_train_step_once_and_resumes_with_one(tmp_path):
    """Planning (candidate 1 fits on the host) is the step's one compile; a resumed run plans
    again and again compiles once."""
    c = _auto()
    c.checkpoint_every = 2
    with compiles() as names:
        assert train.run(c, str(tmp_path))["steps"] == 2
    assert names.count("jit(train_step)") == 1, names
    c.total_steps = 4
    with compiles() as names:
        assert train.run(c, str(tmp_path))["steps"] == 4
    assert names.count("jit(train_step)") == 1, names


def test_the_planned_executable_trains_as_the_jitted_step_does():
    """auto on the host picks ``none``: the same run with ``none`` named (jitted by the trainer)
    gives the same losses, dropout included."""
    auto = train.run(_auto(3))
    named = _auto(3)
    named.model.remat_policy = "none"
    jitted = train.run(named)
    assert auto["eval_loss"] == jitted["eval_loss"]
    assert auto["train_loss"] == jitted["train_loss"]


def _planned(c):
    """The step ``auto`` plans for its first candidate on this process's one device:
    (PlannedStep, CompiledStep)."""
    c.model.remat_policy = "none"
    config = train.validate(c, 1).resolved()
    step = memory_plan.compile_step(config, jax.devices()[:1])
    reused = planned_step.reuse(lambda *a: "jitted", step, step.config, step.state)
    return reused, step


def _batch(abstract: dict, rows: int, length: int) -> dict:
    mesh = next(iter(abstract.values())).sharding.mesh
    out = {
        k: np.zeros((rows,) if k == preemption.STOP_KEY else (rows, length), v.dtype)
        for k, v in abstract.items()
    }
    return jax.device_put(out, sharding.batch_sharding(mesh))


def test_only_the_planned_batch_runs_the_executable():
    c = _auto()
    reused, step = _planned(c)
    assert isinstance(reused, planned_step.PlannedStep)
    rows, length = step.plan.batch_shape
    params, opt_state = step.state.create()
    bad = np.int32(0)
    shorter = _batch(step.batch, rows, length - 2)  # another bucket's shape: the jitted step
    assert reused(params, opt_state, shorter, 0, np.float32(1e-3), bad) == "jitted"
    with pytest.raises(TypeError, match="Argument types differ"):  # never run on it
        step.executable(params, opt_state, shorter, 0, np.float32(1e-3), bad)
    planned = _batch(step.batch, rows, length)
    params, opt_state, metrics = reused(params, opt_state, planned, 0, np.float32(1e-3), bad)
    assert np.isfinite(float(metrics["loss"]))


def test_a_state_or_config_unlike_the_plans_keeps_the_jitted_step():
    c = _auto()
    _, step = _planned(c)
    config = step.config  # as planned: the data's fields and the attention kernel resolved

    def jitted(*args):
        return "jitted"

    other = config.replace(seed=config.seed + 1)  # another dropout key: another executable
    assert planned_step.reuse(jitted, step, other, step.state) is jitted
    assert planned_step.reuse(jitted, None, config, step.state) is jitted
    wider = small_config("decoder", "deepnorm")
    wider.model.d_model, wider.model.remat_policy = 64, "auto"
    _, other_step = _planned(wider)
    assert planned_step.reuse(jitted, step, config, other_step.state) is jitted


# the default run: one device, fresh and resumed (above); auto on a mesh trains in the default
# run in test_reliability.py's two-process run
@pytest.mark.slow
def test_a_sharded_auto_run_compiles_its_train_step_once(tmp_path):
    """On 8 simulated devices (data 2, fsdp 2, tensor 2), fresh and resumed."""
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "compile_count_worker.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "XLA_FLAGS": xla_flags(8)},
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert counts == {"fresh": 1, "resumed": 1}, counts


def test_a_run_that_is_not_auto_is_unchanged():
    """A named policy plans nothing: the trainer jits the step (its one compile)."""
    c = _auto()
    c.model.remat_policy = "full"
    with compiles() as names:
        train.run(c)
    assert names.count("jit(train_step)") == 1, names
    assert train_config.default_config().model.remat_policy == "auto"
