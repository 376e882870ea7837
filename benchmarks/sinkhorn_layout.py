"""Sinkhorn-Knopp's layout on the CPU: mHC's train step with the iterates' positions minor
against the layout they had before, the [n, n] matrices minor.

``deepnet_jax.model.schemes.hyper._sinkhorn_iterates`` runs mHC's iterations on the CPU on
[n, n, B·T] (since 00bb81f, the positions flattened since 731be5d); before, it ran them on
[B, T, n, n] as GPUs and TPUs still do (:func:`matrices_minor`). For each of ``lr_transfer``'s
tasks this builds the experiment's mHC run at ``--layers`` (its config:
:func:`deepnet_jax.experiments.lr_transfer.make_config`, the recipe's rate) on a batch of the
task's own data, and compiles the trainer's train step twice, once with each function in the
library's place while the step is traced. Both steps start from the same parameters and
optimizer state; they are timed in alternating rounds (``--steps`` steps a round, the median of
``--rounds``), and ``ratio`` is positions_minor ÷ matrices_minor. Beside the step:
Sinkhorn-Knopp alone with its gradient at one sublayer's [B, T, n, n] (the model's iterations),
timed the same way, with the largest difference between the two layouts' gradients (they sum in
another order: equal to float rounding, not bit for bit), the first step's loss of each and the
transposes in each compiled step (the positions-minor layout adds its own: the mark that each
step has its layout).

Run from the repository root::

    python -m benchmarks.sinkhorn_layout --out=docs/records/sinkhorn_layout.json
    python -m benchmarks.sinkhorn_layout --smoke   # reversal64 at 2 layers, 2 short rounds
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from deepnet_jax.common import records
from deepnet_jax.experiments import lr_transfer
from deepnet_jax.model import architectures
from deepnet_jax.model import inputs as model_inputs
from deepnet_jax.model.schemes import hyper
from deepnet_jax.training import actions as train_actions
from deepnet_jax.training import attention_auto, config_checks, optimizers, remat_auto
from deepnet_jax.training import data as train_data
from deepnet_jax.training import steps as train_steps
from deepnet_jax.training.run_config import RunConfig

TASKS = ("reversal64", "shakespeare")


@functools.partial(jax.checkpoint, static_argnums=(1, 2))
def matrices_minor(logits: jax.Array, iters: int, eps: float) -> jax.Array:
    """The iterations on [.., n, n]: the CPU's before 00bb81f, the GPUs' and TPUs' still."""
    return hyper._iterations(logits, iters, eps, columns=-2, rows=-1)


LAYOUTS: dict[str, Callable[..., jax.Array]] = {
    "positions_minor": hyper._sinkhorn_iterates,  # the library's
    "matrices_minor": matrices_minor,
}


def task_run(task: str, layers: int) -> tuple[RunConfig, dict[str, np.ndarray]]:
    """``lr_transfer``'s mHC run of ``task`` at ``layers`` (seed 0, the recipe's rate), typed
    and resolved as the trainer resolves it, and the first batch of its training data."""
    grid = lr_transfer.GRIDS["quick"]
    bases = lr_transfer.task_bases(lr_transfer.base_config("quick"), grid, "")
    key = {"task": task, "row": "mhc", "layers": layers, "seed": 0, "lr": grid["tasks"][task]}
    config = config_checks.validate(lr_transfer.make_config(bases, key))
    data = train_data.make_data(config.resolved())
    config = config.resolved(data.tokenizer_size)
    config = attention_auto.resolve(config, jax.devices()[0].platform)  # as the trainer does
    config = remat_auto.resolve(config, jax.devices()[:1], report=lambda m: None)
    return config, next(iter(data.train_iterator()))


class Step:
    """The trainer's train step of ``config`` compiled with ``layout`` as Sinkhorn-Knopp."""

    def __init__(self, config: RunConfig, batch: dict[str, np.ndarray], layout: Callable):
        arch = config.model.arch
        model = architectures.build(config.model)
        self.params = model_inputs.init_params(model, arch, batch, config.seed)
        optimizer = optimizers.make_optimizer(config)
        self.opt_state = optimizer.init(self.params)
        loss_fn = train_steps.make_loss_fn(model, arch, config.label_smoothing)
        step = train_steps.make_train_step(
            loss_fn, optimizer, jax.random.key(config.seed + 1),
            halt_after=train_actions.halt_after(config),
        )  # fmt: skip
        self.batch, self.lr = jax.device_put(batch), np.float32(config.optimizer.learning_rate)
        self.bad = jnp.zeros((), jnp.int32)
        library = hyper._sinkhorn_iterates
        hyper._sinkhorn_iterates = layout  # read when sinkhorn() is traced
        try:
            args = (self.params, self.opt_state, self.batch, 0, self.lr, self.bad)
            self.compiled = step.lower(*args).compile()
            self.transposes = self.compiled.as_text().count(" transpose(")  # the layout's mark
        finally:
            hyper._sinkhorn_iterates = library
        self.step = 0
        self.first_loss = float(self.run(1)[1])

    def run(self, steps: int) -> tuple[float, Any]:
        """(seconds per step, the last step's loss) over ``steps`` steps."""
        start = time.perf_counter()
        for _ in range(steps):
            self.params, self.opt_state, metrics = self.compiled(
                self.params, self.opt_state, self.batch, self.step, self.lr, self.bad
            )
            self.bad, self.step = metrics["bad_in_a_row"], self.step + 1
        jax.block_until_ready(metrics)
        return (time.perf_counter() - start) / steps, metrics["loss"]


def alternating(runs: dict[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """The median seconds of each callable over ``rounds`` rounds in which all run in turn."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            times[name].append(run())
    return {name: statistics.median(t) for name, t in times.items()}


def sinkhorn_alone(shape: tuple[int, ...], iters: int, rounds: int) -> dict[str, Any]:
    """Sinkhorn-Knopp with its gradient at ``shape`` [B, T, n, n] in each layout: median
    seconds, and the largest difference between the two gradients."""
    logits = jax.random.normal(jax.random.key(0), shape)
    weights = jax.random.normal(jax.random.key(1), shape)
    grads = {
        name: jax.jit(jax.grad(lambda z, f=f: jnp.sum(f(z, iters, 0.0) * weights)))
        for name, f in LAYOUTS.items()
    }
    values = {name: np.asarray(g(logits)) for name, g in grads.items()}

    def timed(g: Callable) -> float:
        start = time.perf_counter()
        for _ in range(20):
            out = g(logits)
        jax.block_until_ready(out)
        return (time.perf_counter() - start) / 20

    seconds = alternating({n: functools.partial(timed, g) for n, g in grads.items()}, rounds)
    diff = float(np.max(np.abs(values["positions_minor"] - values["matrices_minor"])))
    return {"shape": list(shape), "seconds": seconds, "grad_max_abs_diff": diff,
            "ratio": seconds["positions_minor"] / seconds["matrices_minor"]}  # fmt: skip


def task_row(task: str, layers: int, rounds: int, steps: int) -> dict[str, Any]:
    """One task's row: the step in each layout and Sinkhorn-Knopp alone."""
    config, batch = task_run(task, layers)
    built = {name: Step(config, batch, layout) for name, layout in LAYOUTS.items()}
    seconds = alternating({n: lambda s=s: s.run(steps)[0] for n, s in built.items()}, rounds)
    rows, length = batch["inputs"].shape
    n = config.model.hc_rate
    return {
        "task": task, "layers": layers, "arch": config.model.arch,
        "batch": [rows, length], "remat_policy": config.model.remat_policy,
        "step_s": seconds, "ratio": seconds["positions_minor"] / seconds["matrices_minor"],
        "first_loss": {name: s.first_loss for name, s in built.items()},
        "hlo_transposes": {name: s.transposes for name, s in built.items()},
        "sinkhorn_alone": sinkhorn_alone(
            (rows, length, n, n), config.model.mhc_sinkhorn_iters, rounds
        ),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the record (JSON) here")
    parser.add_argument("--layers", type=int, default=18, help="N of the N-layer runs")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=5, help="steps per timed round")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--smoke", action="store_true", help="reversal64, 2 layers, 2 rounds")
    args = parser.parse_args(argv)
    head = records.header()
    if args.smoke:
        args.tasks, args.layers, args.rounds, args.steps = "reversal64", 2, 2, 1
    rows = []
    for task in args.tasks.split(","):
        if task not in TASKS:
            raise SystemExit(f"--tasks: {task!r} is not one of {', '.join(TASKS)}")
        rows.append(task_row(task, args.layers, args.rounds, args.steps))
        print(json.dumps(rows[-1]), flush=True)
    payload = {"rounds": args.rounds, "steps": args.steps, "rows": rows}
    if args.out:
        records.write(args.out, payload, head)
    return {**head, **payload}


if __name__ == "__main__":
    main()
