"""The trainer's train step on abstract sharded inputs, lowered and compiled for a target's
devices: what the memory planner (:mod:`deepnet_jax.training.memory_plan`) measures, and on the
run's own devices what ``model.remat_policy='auto'`` hands the trainer to run
(:mod:`deepnet_jax.training.planned_step`).

:func:`train_step` is the run's jitted step, the one function both the trainer and the planner
compile (``train_steps.make_train_step``: forward, backward, AdamW, donated state, its
non-finite gate, the dropout keys' base ``seed + 2``). :class:`AbstractStep` holds it and its
arguments as ``jax.ShapeDtypeStruct``s carrying the mesh shardings: the state, and the batch
the trainer feeds at the run's longest bucket (:func:`batch_shape`; the model's keys, the
packing keys when packed, the stop flags of :mod:`deepnet_jax.training.preemption`), so nothing
the size of the model is allocated; :func:`lower_and_compile` lowers and compiles it, and turns
XLA's RESOURCE_EXHAUSTED into one line (:class:`DoesNotFitError`).
"""

from __future__ import annotations

import dataclasses
import re
import time
import warnings
from typing import Any

import flax.linen as nn
import jax
import numpy as np
import optax

from deepnet_jax.common import jax_compat
from deepnet_jax.data import batching, synthetic
from deepnet_jax.data.options import DataOptions
from deepnet_jax.model import architectures
from deepnet_jax.model import inputs as model_inputs
from deepnet_jax.scale import sharding, targets
from deepnet_jax.training import actions as train_actions
from deepnet_jax.training import optimizers, preemption
from deepnet_jax.training import steps as train_steps
from deepnet_jax.training.run_config import RunConfig

GIB = 2**30


class DoesNotFitError(ValueError):
    """XLA refused to compile the step: it needs more memory per device than the target has."""


def batch_shape(data: DataOptions, row_multiple: int) -> tuple[int, int]:
    """(rows, length) of the run's longest batch bucket."""
    buckets = batching.make_buckets(
        data.max_len, data.batch_size, data.max_tokens, data.bucket_boundaries, row_multiple
    )
    longest = max(buckets, key=lambda b: (b.length, b.rows))
    return longest.rows, longest.length


def train_step(
    config: RunConfig,
    model: nn.Module,
    optimizer: optax.GradientTransformation,
    state: sharding.ShardedState,
) -> Any:
    """The run's jitted ``(params, opt_state, batch, step, learning_rate, bad_in_a_row) ->
    (params, opt_state, metrics)`` (``train_steps.make_train_step``) for ``config``'s model and
    optimizer, writing the new state with ``state``'s shardings; dropout keys
    ``fold_in(key(seed + 2), step)``. Everything it closes over comes from ``config`` and
    ``state``'s shardings, so two calls with equal ones compile to the same executable."""
    return train_steps.make_train_step(
        train_steps.make_loss_fn(
            model, config.model.arch, config.label_smoothing, config.loss_chunk
        ),
        optimizer,
        jax.random.key(config.seed + 2),  # the dropout keys' base
        layer_grad_norms=bool(config.diagnostics.every),
        halt_after=train_actions.halt_after(config),
        state_shardings=sharding.state_shardings(state),
    )


def abstract_batch(config: RunConfig, mesh: jax.sharding.Mesh) -> dict[str, jax.ShapeDtypeStruct]:
    """The global batch the trainer feeds at the longest bucket, rows split over the mesh's
    data-parallel devices (``sharding.batch_sharding``): each [rows, length] key of the model's
    data (``inputs``, ``targets``, ``weights``, ``src`` for an encoder-decoder; the packing
    keys with ``data.packing``), then ``preemption.STOP_KEY`` int32 [rows]."""
    arch = config.model.arch
    rows, length = batch_shape(config.data, sharding.data_parallel_size(mesh))
    example = synthetic.batch(
        arch, 1, max(config.model.vocab_size, 8), length, np.random.default_rng(0)
    )
    dtypes = {k: v.dtype for k, v in example.items() if k in _batch_keys(arch)}
    if config.data.packing:  # data.batching.pack's int32 keys, the source's with a source
        packing = model_inputs.PACKING_KEYS if arch == "encdec" else model_inputs.PACKING_KEYS[:2]
        dtypes |= dict.fromkeys(packing, np.dtype(np.int32))
    rows_sharding = sharding.batch_sharding(mesh)
    batch = {
        k: jax.ShapeDtypeStruct((rows, length), dtype, sharding=rows_sharding)
        for k, dtype in dtypes.items()
    }
    stop = jax.ShapeDtypeStruct((rows,), np.int32, sharding=rows_sharding)
    return {**batch, preemption.STOP_KEY: stop}


@dataclasses.dataclass
class AbstractStep:
    """The trainer's jitted step and its abstract arguments on a mesh."""

    mesh: jax.sharding.Mesh
    rules: Any
    state: sharding.ShardedState
    batch: dict[str, jax.ShapeDtypeStruct]
    fn: Any

    @classmethod
    def build(cls, config: RunConfig, devices: list[jax.Device]) -> AbstractStep:
        mesh = sharding.make_mesh(config.mesh, devices)
        rules = sharding.logical_axis_rules(config.mesh)
        arch = config.model.arch
        model = architectures.build(config.model)
        batch = abstract_batch(config, mesh)
        length = batch["inputs"].shape[1]
        example = synthetic.batch(
            arch, 1, max(config.model.vocab_size, 8), length, np.random.default_rng(0)
        )
        small = {k: v[:, :8] for k, v in example.items()}  # shapes for init only
        optimizer = optimizers.make_optimizer(config)
        state = sharding.sharded_state(
            lambda: model_inputs.init_variables(model, arch, small), optimizer.init, mesh, rules
        )
        return cls(mesh, rules, state, batch, train_step(config, model, optimizer, state))

    def args(self) -> tuple[Any, ...]:
        scalar = jax.ShapeDtypeStruct((), np.int32)
        lr = jax.ShapeDtypeStruct((), np.float32)
        abstract = self.state.abstract
        return abstract["params"], abstract["opt_state"], self.batch, scalar, lr, scalar


def lower_and_compile(step: AbstractStep, target: targets.Target) -> tuple[Any, Any, float]:
    """(lowered, compiled, seconds to lower and compile); :class:`DoesNotFitError` when XLA runs out
    of memory."""
    start = time.perf_counter()
    # a compile-only (deviceless) compiler cannot load an executable from jax's persistent
    # compilation cache (it has no client): leave the cache out of it, and where the process
    # has already decided to use one (jax decides once), drop the warning of the failed read
    cache = jax_compat.compilation_cache(target.platform == "cpu")
    quiet = warnings.catch_warnings()
    with jax.set_mesh(step.mesh), nn.logical_axis_rules(step.rules), cache, quiet:
        warnings.filterwarnings("ignore", "Error reading persistent compilation cache")
        lowered = step.fn.lower(*step.args())
        try:
            compiled = lowered.compile()
        except Exception as e:  # XLA's runtime error type is not public
            message = " ".join(str(e).split())
            if "RESOURCE_EXHAUSTED" not in message:
                raise
            raise DoesNotFitError(_does_not_fit(message, target)) from None
    return lowered, compiled, time.perf_counter() - start


def _does_not_fit(message: str, target: targets.Target) -> str:
    """One line from XLA's RESOURCE_EXHAUSTED message ("… required for HLO temporaries (291.12G)
    exceeds available HBM (15.75G)"): what the step needs and what a device has."""
    sizes = re.findall(r"\(([\d.]+\s*[KMGT]i?B?)\)", message)
    if len(sizes) >= 2:
        return (
            f"does not fit on {target.name}: the train step needs {sizes[0]} per device, "
            f"a {target.chip.name} has {sizes[1]} available to it (XLA: RESOURCE_EXHAUSTED)"
        )
    return (
        f"does not fit on {target.name}: a {target.chip.name} has "
        f"{target.chip.memory_bytes / GIB:.1f} GiB (XLA: {message[:200]})"
    )


def _batch_keys(arch: str) -> tuple[str, ...]:
    keys = ("inputs", "targets", "weights")
    return ("src", *keys) if arch == "encdec" else keys
