"""The training loop and its parts: the run's fixed pieces (:class:`Run`), the state and its
setup or restore (:func:`initial_state`), one step (:func:`advance`) and the loop
(:func:`train_loop`); the end of a run is :mod:`deepnet_jax.training.results`.

The loop dispatches step i + 1 before it reads step i's metrics (:class:`StepReader`), so the
host never waits for the device between steps; logging, validation, the stability instruments,
checkpoints and the stop signal are the periodic actions of :mod:`deepnet_jax.training.actions`.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.experimental import multihost_utils

from deepnet_jax.model import architectures, schemes
from deepnet_jax.model import inputs as model_inputs
from deepnet_jax.runs import checkpoint
from deepnet_jax.runs import metrics as metrics_lib
from deepnet_jax.runs import workdir as workdir_lib
from deepnet_jax.runs.workdir import RunDir
from deepnet_jax.scale import flops, sharding
from deepnet_jax.training import (
    abstract_step,
    attention_auto,
    config_checks,
    fingerprint,
    optimizers,
    planned_step,
    preemption,
    remat_auto,
    results,
)
from deepnet_jax.training import data as train_data
from deepnet_jax.training import steps as train_steps
from deepnet_jax.training.actions import (
    EvalContext,
    Instruments,
    StepReader,
    StepRecord,
    Validator,
    replicated,
)
from deepnet_jax.training.progress import Progress, say
from deepnet_jax.training.run_config import RunConfig


@dataclasses.dataclass
class Run(EvalContext):
    """What stays fixed during a run: what evaluation reads (:class:`EvalContext`: the config,
    workdir, mesh, model, data and writers) plus the training stream (``batches``), the
    sharded-state plan, the compiled step, the schedule and the resume fingerprint."""

    batches: Any  # grain-like iterator: next(), get_state(), set_state()
    plan: sharding.ShardedState
    train_step: Any
    learning_rates: np.ndarray
    fingerprint: dict[str, Any]  # saved with every checkpoint (fingerprint.record)


@dataclasses.dataclass
class TrainState:
    """The state the loop advances: parameters, optimizer state, micro-batches done, and the
    non-finite gate (int32 device scalar: consecutive non-finite steps, see
    :func:`deepnet_jax.training.steps.make_train_step`)."""

    params: Any
    opt_state: Any
    step: int
    bad_in_a_row: jax.Array

    def tree(self) -> dict[str, Any]:
        return {"params": self.params, "opt_state": self.opt_state}


def build_run(config: RunConfig, workdir: str | None, mesh) -> Run:
    """The model, the data stream, the sharded-state plan, the step and the writers.

    ``config`` as the user wrote it, validated and typed: the fields derived from the data
    (``model.vocab_size``, ``model.max_len``) are filled here (``RunConfig.resolved``), the
    model vocabulary from the tokenizer the data was prepared with, and ``auto`` choices made;
    ``Run.config`` (what checkpoints keep) holds the resolved values. With
    ``model.remat_policy='auto'`` the chosen candidate's planned executable is the step
    (:mod:`deepnet_jax.training.planned_step`: one compile of it per run). A workdir's checkpoints
    are compared with the run first (:mod:`deepnet_jax.training.fingerprint`): the config
    before the data is prepared, the derived fields and the tokenizer once it is; a mismatch
    stops the run with nothing touched.
    """
    saved = fingerprint.read(workdir)
    fingerprint.check_config(saved, config, workdir)  # before the data is prepared
    data = train_data.make_data(config.resolved(), sharding.data_parallel_size(mesh))
    config = config.resolved(data.tokenizer_size)
    config = attention_auto.resolve(config, mesh.devices.flat[0].platform)
    tokenizer = fingerprint.tokenizer_sha256(data)
    for line in fingerprint.check(saved, config, tokenizer, workdir):
        say(line)
    batches = data.train_iterator()
    start_state = batches.get_state()
    example = next(batches)  # shapes for init; the stream is rewound below
    batches.set_state(start_state)
    if schemes.get(config.model.scheme).profiled_init and jax.process_count() > 1:
        # Admin profiles ω on this batch: every process must profile the same one
        example = multihost_utils.broadcast_one_to_all(example)
    optimizer = optimizers.make_optimizer(config)
    model, plan = _model_and_state(config_checks.stand_in(config), example, optimizer, mesh)
    checkpointer = _checkpointer(config, workdir, plan)  # free space: before auto compiles
    planned = None
    if config_checks.is_auto(config):  # the fastest candidate that fits, planned on the mesh
        config, planned = remat_auto.resolve_step(config, list(mesh.devices.flat))
        model, plan = _model_and_state(config, example, optimizer, mesh)
    jitted = abstract_step.train_step(config, model, optimizer, plan)
    train_step = planned_step.reuse(jitted, planned, config, plan)  # auto's compile, run
    writer = metrics_lib.MetricsWriter(workdir) if workdir else None
    return Run(
        config=config,
        workdir=workdir,
        mesh=mesh,
        model=model,
        data=data,
        checkpointer=checkpointer,
        writer=writer,
        batches=batches,
        plan=plan,
        train_step=train_step,
        learning_rates=optimizers.learning_rates(config),
        fingerprint=fingerprint.record(tokenizer),
    )


def _model_and_state(
    config: RunConfig,
    example: dict[str, np.ndarray],
    optimizer: optax.GradientTransformation,
    mesh: jax.sharding.Mesh,
) -> tuple[nn.Module, sharding.ShardedState]:
    """``config``'s model and the sharded plan of its state (abstract: nothing allocated)."""
    model, arch = architectures.build(config.model), config.model.arch
    plan = sharding.sharded_state(
        lambda: model_inputs.init_variables(model, arch, example, config.seed),
        optimizer.init,
        mesh,
        sharding.logical_axis_rules(config.mesh),
    )
    return model, plan


def _checkpointer(
    config: RunConfig, workdir: str | None, plan: sharding.ShardedState
) -> checkpoint.Checkpointer | None:
    """The run's checkpointer (None without a workdir or checkpoints), once the workdir's
    disk has room for ``max_to_keep`` checkpoints of ``plan``'s state."""
    if not (workdir and config.checkpoint_every):
        return None
    needed = workdir_lib.checkpoint_bytes_needed(
        train_steps.nbytes(plan.abstract),
        train_steps.nbytes(plan.abstract["params"]),
        config.max_to_keep,
    )
    RunDir(workdir).check_free_space(needed)
    return checkpoint.Checkpointer(workdir, config.checkpoint_every, config.max_to_keep)


def initial_state(run: Run) -> tuple[TrainState, float | None]:
    """The newest restorable checkpoint's state (the data stream set to its position) and the
    best validation score so far; a fresh state and None without one."""
    params = opt_state = best = None
    start = 0
    if run.checkpointer:
        target = {**run.plan.abstract, "step": np.asarray(0, np.int64)}  # nothing allocated
        restored = run.checkpointer.restore_newest(target, warn=lambda m: say(f"warning: {m}"))
        if restored is not None:
            latest, state, data_state = restored
            params, opt_state, start = state["params"], state["opt_state"], int(state["step"])
            run.batches.set_state(data_state)
            best = run.checkpointer.best_score()
            say(f"resuming from {run.checkpointer.directory}/{latest} (step {start})")
    if params is None:  # a step-0 checkpoint holds imported parameters (interop.torchscale)
        params, opt_state = run.plan.create()
    if run.writer:  # what a crashed run logged after this checkpoint (all of it, if none) is redone
        k, total = run.config.grad_accum_steps, run.config.total_steps
        run.writer.rewind(start // k, keep_final=0 < start < total * k)
    if run.workdir and isinstance(run.data, train_data.CorpusData) and jax.process_index() == 0:
        run_dir = RunDir(run.workdir)  # the tokenizer travels with the run
        os.makedirs(run_dir.root, exist_ok=True)
        shutil.copyfile(run.data.pipeline.tokenizer_path, run_dir.tokenizer)
    gate = jax.jit(lambda: jnp.zeros((), jnp.int32), out_shardings=replicated(run.mesh))()
    return TrainState(params, opt_state, start, gate), best


def next_batch(run: Run, signals: preemption.StopSignals) -> tuple[dict, float]:
    """The next host batch with this process's stop flags, and the global batch's FLOPs."""
    batch = next(run.batches)
    global_shapes = {n: (v.shape[0] * jax.process_count(), *v.shape[1:]) for n, v in batch.items()}
    step_flops = flops.train_flops_per_step(run.config.model, global_shapes)
    rows = next(iter(batch.values())).shape[0]
    return {**batch, preemption.STOP_KEY: signals.flags(rows)}, step_flops


def advance(run: Run, state: TrainState, batch: dict) -> tuple[TrainState, dict[str, Any]]:
    """Dispatch one micro-step (asynchronously): the next state and the step's device metrics."""
    lr = run.learning_rates[state.step // run.config.grad_accum_steps]
    params, opt_state, metrics = run.train_step(
        state.params, state.opt_state, run.place(batch), state.step, lr, state.bad_in_a_row
    )
    return TrainState(params, opt_state, state.step + 1, metrics[train_steps.BAD_IN_A_ROW]), metrics


def save(run: Run, state: TrainState) -> None:
    """Start the checkpoint of ``state`` (its steps' metrics already read and checked)."""
    tree = {**state.tree(), "step": np.asarray(state.step, np.int64)}
    run.checkpointer.save(
        state.step, tree, run.batches.get_state(), run.config.to_dict(), run.fingerprint
    )


def train_loop(
    run: Run,
    state: TrainState,
    progress: Progress,
    validator: Validator,
    instruments: Instruments | None,
    signals: preemption.StopSignals,
) -> tuple[TrainState, bool]:
    """Train to ``total_steps`` updates or an agreed stop signal; returns the state and
    whether a signal stopped it (its checkpoint then written)."""
    c, k = run.config, run.config.grad_accum_steps
    micro_steps = c.total_steps * k
    reader = StepReader(c, run.workdir, run.checkpointer)
    fresh = state.step == 0  # else the first loss is the one the run logged before
    if not fresh:
        logged = logged_records(run.workdir)
        reader.first_loss, reader.track_first = first_loss(logged), False
        progress.take_over(logged, state.step)  # an interval a stop signal split
    for step in progress.steps(state.step, micro_steps):
        batch, step_flops = next_batch(run, signals)
        state, metrics = advance(run, state, batch)
        updates, boundary = (step + 1) // k, (step + 1) % k == 0
        last = step + 1 == micro_steps
        record = StepRecord(metrics, step, boundary, step_flops)
        reader.push(record, progress.interval, state.tree())
        if progress.due(step, last):
            reader.drain(progress.interval, state.tree())
            progress.log(updates, reader.first_loss if fresh else None)
            fresh = False
        if boundary and c.eval_every and updates % c.eval_every == 0 and not last:
            with progress.paused():
                validator(state.params, updates)
        if instruments and boundary and instruments.due(updates):
            reader.drain(progress.interval, state.tree())  # this step's layer gradient norms
            with progress.paused():
                instruments.measure(state.params, updates, reader.layer_grads)
        saved = run.checkpointer and boundary and (updates % c.checkpoint_every == 0 or last)
        if saved or (run.checkpointer and reader.stop_agreed):
            reader.drain(progress.interval, state.tree())  # never save an unchecked state
            save(run, state)
        if reader.stop_agreed:  # every process sees it after the same step
            reader.drain(progress.interval, state.tree())
            progress.carry(state.step)
            break
    progress.first_loss = reader.first_loss
    return state, reader.stop_agreed


def logged_records(workdir: str | None) -> list[dict[str, Any]]:
    """What a resumed run logged before it stopped (none without a workdir or metrics)."""
    return metrics_lib.read_if_any(workdir)


def first_loss(records: list[dict[str, Any]]) -> float | None:
    """The run's first training loss: its first ``train`` record's ``first_loss`` (None if it
    logged none)."""
    train_records = [r for r in records if r["split"] == "train"]
    return train_records[0].get("first_loss") if train_records else None


def train(run: Run) -> dict[str, Any]:
    """Set up or restore the state, train, and evaluate (or end on a stop signal)."""
    state, best = initial_state(run)
    validator = Validator(run, best)
    instruments = None
    if run.config.diagnostics.every:
        instruments = Instruments(run, state.params, state.step == 0, run.plan.create_params)
    peak, peak_source = flops.peak_flops_per_device(run.config.peak_flops)
    say(f"MFU is measured against {peak / 1e12:.3g} TFLOP/s per device ({peak_source})")
    progress = Progress(run.config, run.writer, run.learning_rates, peak * run.mesh.size)
    with preemption.StopSignals() as signals:  # the handlers are given back on leaving
        try:
            state, stop = train_loop(run, state, progress, validator, instruments, signals)
        finally:  # a halt (NonFiniteError) too: the bar and the compile listener end here
            progress.close()
    if stop:
        return results.stopped(run, signals.received, state.step)
    final = results.final_evaluation(run, validator, state.params, progress)
    results.finish(run, final)
    return final
