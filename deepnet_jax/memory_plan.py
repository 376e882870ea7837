"""AOT memory planner: will this config's train step fit on that many devices? (The command
line is :mod:`deepnet_jax.plan`.)

:func:`plan` lowers and compiles the real train step (``train_steps.make_train_step``: forward,
backward, AdamW, donated state) for the given (e.g. simulated CPU) devices on abstract inputs —
``jax.ShapeDtypeStruct``s carrying the mesh shardings, so nothing the size of the model is ever
allocated — and prints per device:

* ``params`` and ``opt_state``: bytes of this device's shards, from the shardings;
* ``batch``: the batch's shards (the bucket with the longest rows, ``data.max_len``);
* ``temporaries``: XLA's ``memory_analysis().temp_size_in_bytes`` of the compiled step
  (activations kept for the backward pass, rematerialized recomputation buffers, gradients
  before the update);
* ``peak`` = arguments + temporaries + outputs not aliased with donated inputs, and the
  compile time.

The figures are for the compiled CPU program: XLA's TPU and GPU compilers schedule and fuse
differently, so their temporaries differ (usually downward, from better fusion); parameter,
optimizer and batch bytes are exact for any backend.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import flax.linen as nn
import jax
import ml_collections
import numpy as np

from deepnet_jax import (
    model_inputs,
    models,
    optimizers,
    sharding,
    train_actions,
    train_config,
    train_steps,
)
from deepnet_jax.data import batching, synthetic


@dataclasses.dataclass
class Plan:
    """Per-device bytes of a compiled train step (see the module docstring)."""

    mesh: dict[str, int]
    batch_shape: tuple[int, int]
    num_params: int
    params: int
    opt_state: int
    batch: int
    temporaries: int
    outputs_not_aliased: int
    peak: int
    compile_s: float
    memory_analysis: dict[str, int]

    def report(self) -> str:

        def size(n: int) -> str:
            return f"{n / 2**30:10.3f} GiB" if n >= 2**30 else f"{n / 2**20:10.3f} MiB"

        rows = [
            ("params", self.params),
            ("opt_state", self.opt_state),
            ("batch", self.batch),
            ("temporaries", self.temporaries),
            ("outputs not aliased", self.outputs_not_aliased),
            ("peak", self.peak),
        ]
        lines = [
            f"mesh {self.mesh}, batch {self.batch_shape[0]} × {self.batch_shape[1]} tokens, "
            f"{self.num_params / 1e9:.3f}B parameters, compiled in {self.compile_s:.1f} s",
            "per device:",
        ]
        lines += [f"  {name:<20} {size(value)}" for name, value in rows]
        return "\n".join(lines)


def device_bytes(tree: Any) -> int:
    """Bytes of one device's shards of an abstract (sharded ShapeDtypeStruct) tree; every
    device holds the same amount under these meshes, so device 0 stands for all."""
    total = 0
    for leaf in jax.tree.leaves(tree):
        shape = leaf.sharding.shard_shape(leaf.shape)
        total += int(np.prod(shape, dtype=np.int64)) * leaf.dtype.itemsize
    return total


def batch_shape(config: ml_collections.ConfigDict, row_multiple: int) -> tuple[int, int]:
    """(rows, length) of the run's longest batch bucket."""
    d = config.data
    buckets = batching.make_buckets(
        d.max_len,
        d.batch_size,
        d.get("max_tokens", 0) or 0,
        d.get("bucket_boundaries", ()) or (),
        row_multiple,
    )
    longest = max(buckets, key=lambda b: (b.length, b.rows))
    return longest.rows, longest.length


def plan(config: ml_collections.ConfigDict, devices: list[jax.Device] | None = None) -> Plan:
    """Compile ``config``'s train step on abstract sharded inputs over ``devices``."""
    devices = jax.devices() if devices is None else devices
    config = train_config.resolve(config)  # model fields derived from the data
    mesh = sharding.make_mesh(config.mesh, devices)
    rules = sharding.logical_axis_rules(config.mesh)
    arch = config.model.arch
    model = models.build(config.model)
    rows, length = batch_shape(config, sharding.data_parallel_size(mesh))
    example = synthetic.batch(
        arch, 1, max(config.model.vocab_size, 8), length, np.random.default_rng(0)
    )
    rows_sharding = sharding.batch_sharding(mesh)
    abstract_batch = {
        k: jax.ShapeDtypeStruct((rows, length), v.dtype, sharding=rows_sharding)
        for k, v in example.items()
        if k in _batch_keys(arch)
    }
    optimizer = optimizers.make_optimizer(config)
    small = {k: v[:, :8] for k, v in example.items()}  # shapes for init only
    state = sharding.sharded_state(
        lambda: model_inputs.init_variables(model, arch, small),
        optimizer.init,
        mesh,
        rules,
    )
    loss_fn = train_steps.make_loss_fn(model, arch, config.label_smoothing)
    step_fn = train_steps.make_train_step(  # the trainer's step, with its non-finite gate
        loss_fn,
        optimizer,
        jax.random.key(0),
        layer_grad_norms=bool(config.diagnostics.every),
        halt_after=train_actions.halt_after(config),
    )
    step = jax.ShapeDtypeStruct((), np.int32)
    lr = jax.ShapeDtypeStruct((), np.float32)
    gate = jax.ShapeDtypeStruct((), np.int32)
    start = time.perf_counter()
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        compiled = step_fn.lower(
            state.abstract["params"], state.abstract["opt_state"], abstract_batch, step, lr, gate
        ).compile()
    compile_s = time.perf_counter() - start
    analysis = compiled.memory_analysis()
    memory = {
        name: int(getattr(analysis, name))
        for name in (
            "argument_size_in_bytes",
            "output_size_in_bytes",
            "alias_size_in_bytes",
            "temp_size_in_bytes",
            "generated_code_size_in_bytes",
        )
    }
    params_b = device_bytes(state.abstract["params"])
    opt_b = device_bytes(state.abstract["opt_state"])
    batch_b = device_bytes(abstract_batch)
    not_aliased = memory["output_size_in_bytes"] - memory["alias_size_in_bytes"]
    return Plan(
        mesh=dict(mesh.shape),
        batch_shape=(rows, length),
        num_params=sum(int(np.prod(x.shape)) for x in jax.tree.leaves(state.abstract["params"])),
        params=params_b,
        opt_state=opt_b,
        batch=batch_b,
        temporaries=memory["temp_size_in_bytes"],
        outputs_not_aliased=not_aliased,
        peak=memory["argument_size_in_bytes"] + memory["temp_size_in_bytes"] + not_aliased,
        compile_s=compile_s,
        memory_analysis=memory,
    )


def _batch_keys(arch: str) -> tuple[str, ...]:
    keys = ("inputs", "targets", "weights")
    return ("src", *keys) if arch == "encdec" else keys
