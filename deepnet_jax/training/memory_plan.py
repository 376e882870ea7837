"""AOT memory planner: will this config's train step fit on that target, and what does it
compute and communicate? (The command line is :mod:`deepnet_jax.cli.plan`.)

:func:`plan` lowers and compiles the real train step (``train_steps.make_train_step``: forward,
backward, AdamW, donated state) for a target's devices — a TPU slice or GPU node through the
accelerator's own compiler, deviceless (:mod:`deepnet_jax.scale.targets`), or simulated CPU
devices — on abstract inputs: ``jax.ShapeDtypeStruct``s carrying the mesh shardings, so nothing the
size of the model is ever allocated (the step and its compile:
:mod:`deepnet_jax.training.abstract_step`). Per device it gives:

* ``params`` and ``opt_state``: bytes of this device's shards, from the shardings;
* ``batch``: the batch's shards (the bucket with the longest rows, ``data.max_len``);
* ``layout_padding``: what the compiled program's arguments take beyond their elements
  (XLA:TPU pads arrays to its tiles; 0 on CPU);
* ``temporaries``: XLA's ``memory_analysis().temp_size_in_bytes`` of the compiled step
  (activations kept for the backward pass, rematerialized recomputation buffers, gradients
  before the update);
* ``peak`` = arguments + temporaries + outputs not aliased with donated inputs, ``fits``
  against the target chip's memory, and the compile time;
* FLOPs (flops.py's, the program's matmuls with loop trips, XLA's cost analysis), collectives
  (:mod:`deepnet_jax.scale.hlo_census`) and a roofline bound (:mod:`deepnet_jax.scale.roofline`).

Temporaries are the target compiler's own: the CPU compiler's for ``cpu:N``, whose scheduling
and fusion differ from a TPU's or GPU's (docs/scaling.md compares them).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import ml_collections
import numpy as np

from deepnet_jax.model.config import TransformerConfig
from deepnet_jax.scale import (
    calibration,
    flops,
    hlo_census,
    hlo_module,
    kernels,
    roofline,
    sharding,
    targets,
)
from deepnet_jax.training import abstract_step, attention_auto, run_config
from deepnet_jax.training.abstract_step import GIB, AbstractStep
from deepnet_jax.training.run_config import RunConfig

# Outputs of the step that do not reuse a donated input's buffer are its metrics (scalars and
# per-layer norms: kilobytes); more than this means the new state is not written in place.
NOT_ALIASED_LIMIT = 2**20


@dataclasses.dataclass
class Plan:
    """Per-device bytes of a compiled train step (see the module docstring), and on a TPU or
    GPU target its fit, FLOPs, collectives and roofline bound."""

    target: str
    device_kind: str
    mesh: dict[str, int]
    batch_shape: tuple[int, int]
    num_params: int
    params: int
    opt_state: int
    batch: int
    layout_padding: int  # the arguments' tile padding (hlo_module.padded_nbytes; XLA:TPU)
    temporaries: int
    outputs_not_aliased: int
    peak: int
    compile_s: float
    memory_analysis: dict[str, int]
    device_memory: int  # bytes a device gives a run (targets.usable_bytes; 0: unknown, CPU)
    fits: bool | None
    model_flops: float  # flops.train_flops_per_step, global
    program_flops: float  # matmul FLOPs of the lowered step, loop trips counted, global
    xla_flops: float  # Compiled.cost_analysis()["flops"], per device, loop bodies once
    xla_bytes_accessed: float  # the same for "bytes accessed"
    expected_recompute: float | None  # program/model FLOPs the remat policy implies
    decode_cache: int  # bytes of one sequence's decoding cache at the batch's length (0: none)
    collectives: dict[str, dict[str, int]]
    roofline: dict[str, Any] | None
    warnings: list[str]
    # the kernel-level cost model (scale.kernels) on a TPU or GPU target, per device: the sum of
    # every kernel's roofline time, the MFU it predicts, seconds per kernel class; None on a CPU
    predicted_step_s: float | None = None
    predicted_mfu: float | None = None
    kernel_classes: dict[str, float] | None = None
    # the same classes times their chip family's measured factors (scale.calibration); None
    # where the family has no calibration (TPUs, A100, B200) or on a CPU
    calibrated_step_s: float | None = None
    calibrated_mfu: float | None = None
    # model.remat_policy='auto': every candidate it compiled, in order (remat_auto.choose_step:
    # policy, scan_group_size, peak, predicted_step_s (calibrated where there is one; None on a
    # CPU), fits); None for a plan of a named policy
    auto_candidates: list[dict[str, Any]] | None = None
    kernels: list[Any] = dataclasses.field(default_factory=list, repr=False)  # scale.kernels.Kernel


def device_bytes(tree: Any) -> int:
    """Bytes of one device's shards of an abstract (sharded ShapeDtypeStruct) tree; every
    device holds the same amount under these meshes, so device 0 stands for all."""
    total = 0
    for leaf in jax.tree.leaves(tree):
        shape = leaf.sharding.shard_shape(leaf.shape)
        total += int(np.prod(shape, dtype=np.int64)) * leaf.dtype.itemsize
    return total


def decode_cache_bytes(m: TransformerConfig, length: int) -> int:
    """Bytes of one sequence's decoding cache (``architectures.init_cache``'s layout): keys and
    values of every decoder layer's kv heads (``num_kv_heads``, 0 meaning ``num_heads``) at
    ``length`` target positions and, for an encoder-decoder, ``length`` source positions, in
    the compute dtype; 0 for an encoder."""
    if m.arch == "encoder":
        return 0
    positions = length * (2 if m.arch == "encdec" else 1)
    itemsize = np.dtype(m.compute_dtype).itemsize
    return m.num_decoder_layers * positions * 2 * m.kv_heads * m.head_dim * itemsize


def plan(
    config: RunConfig | ml_collections.ConfigDict,
    devices: list[jax.Device] | None = None,
    target: targets.Target | None = None,
) -> Plan:
    """Compile ``config``'s train step on abstract sharded inputs over ``devices`` — by default
    ``target``'s compile-only devices (TPU, GPU) or the process's own (``cpu:N``, no target).
    ``config``: a run's, or a validated ``ConfigDict`` (typed once here).

    Raises :class:`~deepnet_jax.training.abstract_step.DoesNotFitError` (one line) when XLA
    refuses to compile it for lack of memory."""
    return compile_step(config, devices, target).plan


@dataclasses.dataclass
class CompiledStep:
    """A planned train step that can also run: ``executable(params, opt_state, batch, step,
    learning_rate, bad_in_a_row)`` on arrays with the shardings of ``state.abstract`` and
    ``batch`` (``state.create()`` makes the state); ``config``: the run config it compiled
    (the data's fields and ``model.attention_impl`` resolved)."""

    plan: Plan
    executable: Any  # jax.stages.Compiled
    state: sharding.ShardedState
    batch: dict[str, jax.ShapeDtypeStruct]
    config: RunConfig


def compile_step(
    config: RunConfig | ml_collections.ConfigDict,
    devices: list[jax.Device] | None = None,
    target: targets.Target | None = None,
) -> CompiledStep:
    """:func:`plan`'s compile (the same defaults for ``devices`` and ``target``), keeping the
    executable: on the process's own devices, one the trainer can run.

    Raises :class:`~deepnet_jax.training.abstract_step.DoesNotFitError` (one line) when XLA
    refuses to compile it for lack of memory."""
    if devices is None:
        on_chip = target is not None and target.platform != "cpu"
        devices = targets.compile_devices(target) if on_chip else jax.devices()
    if target is None and devices[0].platform != "cpu":
        raise ValueError(
            f"plan() on {devices[0].platform} devices needs their target "
            "(target=targets.parse('v5p-8'), say): its chip's memory and peak judge the plan"
        )
    target = target or targets.parse(f"cpu:{len(devices)}")
    config = run_config.typed(config).resolved()  # model fields derived from the data
    config = attention_auto.resolve(config, target.platform)  # the target's kernel
    step = AbstractStep.build(config, devices)
    lowered, compiled, compile_s = abstract_step.lower_and_compile(step, target)
    figures = _plan(config, target, devices[0], step, lowered, compiled, compile_s)
    return CompiledStep(figures, compiled, step.state, step.batch, config)


def does_not_fit_line(plan: Plan) -> str:
    """The one line for a plan that compiled but whose peak exceeds the chip's memory."""
    return (
        f"does not fit on {plan.target}: the train step needs {plan.peak / GIB:.2f} GiB per "
        f"device at its peak, a {plan.device_kind} gives a run {plan.device_memory / GIB:.1f} GiB"
    )


def _memory(compiled: Any) -> dict[str, int]:
    analysis = compiled.memory_analysis()
    names = (
        "argument_size_in_bytes",
        "output_size_in_bytes",
        "alias_size_in_bytes",
        "temp_size_in_bytes",
        "generated_code_size_in_bytes",
    )
    return {name: int(getattr(analysis, name)) for name in names}


def _plan(
    config: RunConfig,
    target: targets.Target,
    device: jax.Device,
    step: AbstractStep,
    lowered: Any,
    compiled: Any,
    compile_s: float,
) -> Plan:
    memory = _memory(compiled)
    not_aliased = memory["output_size_in_bytes"] - memory["alias_size_in_bytes"]
    peak = memory["argument_size_in_bytes"] + memory["temp_size_in_bytes"] + not_aliased
    n = step.mesh.size
    program_flops = float(hlo_census.matmul_flops(lowered.as_text(dialect="hlo")))
    shapes = {k: v.shape for k, v in step.batch.items()}
    model_flops = flops.train_flops_per_step(config.model, shapes)
    cost = compiled.cost_analysis() or {}
    compiled_hlo = hlo_module.parse(compiled.as_text())  # parsed once for the figures below
    moved = hlo_census.collectives(compiled_hlo, n)
    usable = targets.usable_bytes(target)
    hbm = max(
        float(cost.get("bytes accessed", 0.0)),
        memory["argument_size_in_bytes"] + memory["output_size_in_bytes"],
    )
    chip = target.chip
    roof, found = None, []
    if chip.peak_flops:
        sent = sum(c.bytes for c in moved.values())
        roof = roofline.bound(chip, program_flops / n, model_flops / n, hbm, sent)
        found = kernels.kernels(compiled_hlo, chip, n, model_flops / n)
    abstract = step.state.abstract
    return Plan(
        target=target.name,
        device_kind=device.device_kind,
        mesh=dict(step.mesh.shape),
        batch_shape=next(iter(shapes.values())),
        num_params=sum(int(np.prod(x.shape)) for x in jax.tree.leaves(abstract["params"])),
        params=device_bytes(abstract["params"]),
        opt_state=device_bytes(abstract["opt_state"]),
        batch=device_bytes(step.batch),
        layout_padding=_layout_padding(compiled_hlo),
        temporaries=memory["temp_size_in_bytes"],
        outputs_not_aliased=not_aliased,
        peak=peak,
        compile_s=compile_s,
        memory_analysis=memory,
        device_memory=usable,
        fits=peak <= usable if usable else None,
        model_flops=model_flops,
        program_flops=program_flops,
        xla_flops=float(cost.get("flops", 0.0)),
        xla_bytes_accessed=float(cost.get("bytes accessed", 0.0)),
        expected_recompute=flops.remat_flops_ratio(config.model, shapes),
        decode_cache=decode_cache_bytes(config.model, next(iter(shapes.values()))[1]),
        collectives={k: dataclasses.asdict(v) for k, v in moved.items()},
        roofline=dataclasses.asdict(roof) if roof else None,
        warnings=_warnings(not_aliased, hlo_module.unknown_loops(compiled_hlo), target),
        **_kernel_figures(found, model_flops / n, chip),
    )


def _layout_padding(compiled_hlo: hlo_module.Module) -> int:
    """What the compiled program's arguments take beyond their elements (XLA:TPU's tiles)."""
    parameters = hlo_module.entry_parameters(compiled_hlo)
    return sum(hlo_module.padded_nbytes(t) - hlo_module.nbytes(t) for t in parameters)


def _kernel_figures(
    found: list[kernels.Kernel], model_flops: float, chip: targets.Chip
) -> dict[str, Any]:
    """The plan's fields from the kernel-level cost model (``found``, none on a CPU):
    predicted step seconds, the MFU they imply for ``model_flops`` per device, seconds per
    kernel class, the calibrated step and MFU (``scale.calibration``), the kernels."""
    predicted = sum(k.seconds for k in found) if found else None
    classes = kernels.by_class(found) if found else None
    cal = calibration.for_chip(chip.name) if classes else None
    calibrated = cal.seconds(classes) if cal else None
    ideal = model_flops / chip.peak_flops if chip.peak_flops else 0.0
    return {
        "predicted_step_s": predicted,
        "predicted_mfu": ideal / predicted if predicted else None,
        "kernel_classes": classes,
        "calibrated_step_s": calibrated,
        "calibrated_mfu": ideal / calibrated if calibrated else None,
        "kernels": found,
    }


def _warnings(not_aliased: int, unknown_loops: int, target: targets.Target) -> list[str]:
    """What makes a plan's figures doubtful, one sentence each."""
    warnings = []
    if not_aliased > NOT_ALIASED_LIMIT:
        warnings.append(
            f"{not_aliased / 2**20:.1f} MiB of the step's outputs are not written over its "
            "donated inputs: the new state is a second copy (its output shardings differ from "
            "the state's)"
        )
    if unknown_loops:
        warnings.append(
            f"{unknown_loops} loop(s) of the compiled step have no known trip count: their "
            "FLOPs and collectives are counted once"
        )
    if target.platform == "cuda" and target.num_hosts > 1:
        warnings.append(
            "the roofline charges all collectives to NVLink; between the hosts of a GPU cluster "
            "the network is several times slower, so the bound is optimistic"
        )
    return warnings
