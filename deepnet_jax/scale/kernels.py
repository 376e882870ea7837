"""A kernel-level cost model of a compiled step: every kernel of the optimized HLO with its
FLOPs, the HBM bytes it moves and its roofline time on a chip, grouped by what it does.

The whole-step roofline (:mod:`deepnet_jax.scale.roofline`) sets all the step's FLOPs against
all its bytes; a real step runs kernel after kernel, each bound by its own resource. Here a
kernel is an instruction of a computation that runs in sequence — the entry, a ``while`` body
or condition, a ``conditional``'s branch, a ``call`` — that launches work: a fusion (XLA:GPU's
``kCustom`` gemm fusions included), a custom call (cuDNN's attention, a Pallas kernel), a copy,
a transpose, a collective or any other unfused op. Its figures, per execution, times the times
its computation runs (``hlo_module.execution_counts``: loop bodies per trip):

* **FLOPs**: ``2·(result elements)·(contracted size)`` of every ``dot`` it holds (inside its
  fused computation too), the valid taps of every ``convolution`` (XLA:TPU's form of
  batched matmuls), and cuDNN's fused attention's matmuls from its q and k shapes
  (``hlo_census.fmha_call_flops``) — the census's rules, so the kernels' FLOPs add up to
  ``hlo_census.matmul_flops`` of the same module; elementwise arithmetic is not counted. Any
  other custom call's matmuls are invisible (a Pallas kernel): where the model's FLOPs
  (``flops.py``) exceed the visible ones, the difference is spread over those custom calls
  (:func:`kernels`' ``model_flops``), as the roofline takes the model's.
* **Bytes**: its operands read and its result written once, as they are after fusion; an
  operand the kernel only slices (``dynamic-slice``, ``slice``, ``gather``) counts the slices,
  also where a nested fusion slices it (XLA:TPU's convolution fusions), and a buffer updated in
  place (``dynamic-update-slice`` of a fusion's parameter, the scanned stack's per-layer
  writes) counts the update read and written, not the whole buffer; on a TPU, arrays as laid
  out in their tiles, and none in on-chip memory (``S(1)``)
  (:func:`deepnet_jax.scale.hbm_bytes.kernel_bytes`). An asynchronous copy between HBM and
  on-chip memory (XLA:TPU's prefetches and evictions) adds its HBM bytes to the kernel that
  reads or produced the array and is no kernel itself (:mod:`deepnet_jax.scale.async_copies`).
* **Time**: ``max(FLOPs ÷ peak, bytes ÷ HBM bandwidth)``; a collective: the bytes one device
  sends (``hlo_census``'s ring volumes) ÷ the interconnect bandwidth. An fp32 matmul runs at
  :data:`FP32_MATMUL_RATE` of the bf16 peak (TF32 on NVIDIA GPUs; one bf16 pass on TPUs, jax's
  default precision).

The sum over kernels is the predicted step time: no overlap of kernels, no launch gaps.
docs/scaling.md calibrates it against measured H100 steps.

Classes (:data:`CLASSES`) come from the kernel's opcode and the name stack JAX writes into the
HLO's ``op_name`` (:func:`classify`).
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict

from deepnet_jax.scale import async_copies, hlo_census, hlo_module
from deepnet_jax.scale.hbm_bytes import kernel_bytes
from deepnet_jax.scale.hlo_module import Instruction, Module
from deepnet_jax.scale.targets import Chip

CLASSES = (
    "attention",
    "projections",
    "ffn",
    "norms",
    "elementwise",
    "copies",
    "loss",
    "optimizer",
    "collectives",
    "unclassified",
)
# fraction of the dense bf16 peak an fp32 matmul runs at, by platform: NVIDIA's TF32 tensor
# cores (H100 SXM datasheet: 494.7 dense TF32 against 989.4 bf16 TFLOP/s), XLA:TPU's default
# precision (one bf16 pass)
FP32_MATMUL_RATE = {"cuda": 0.5, "tpu": 1.0, "cpu": 1.0}
_FREE = hlo_module.LAUNCHES_NOTHING
_MOVES = {
    "copy",
    "transpose",
    "bitcast",
    "reshape",
    "parameter",
    "copy-start",
    "copy-done",
    "slice-start",  # XLA:TPU's asynchronous slice into on-chip memory
}
_SEQUENTIAL = re.compile(r"\b(body|condition|true_computation|false_computation)=%?([\w.\-]+)")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_TARGET = re.compile(r'custom_call_target="([^"]+)"')
# op_name keywords → class, first match wins (norms before attention: "self_attn_layer_norm")
_NAME_RULES = (
    (("_logits", "btd,vd->btv", "attend"), "loss"),
    (("_proj", "qkv"), "projections"),
    (("layer_norm", "norm", "LayerNorm", "RMSNorm", "dyt"), "norms"),
    (("Dropout", "dropout", "threefry"), "elementwise"),
    (("ffn", "fc1", "fc2", "mlp", "glu"), "ffn"),
    (("attn", "attention"), "attention"),
    (("dynamic_update_index_in_dim", "dynamic_index_in_dim"), "copies"),
)


@dataclasses.dataclass(frozen=True)
class Kernel:
    """One kernel of a step: its instruction, class, how often it runs per step and its figures
    per step (all executions together)."""

    name: str
    opcode: str
    kind: str  # the class (:data:`CLASSES`)
    count: int
    flops: float
    bytes: float
    seconds: float
    op_name: str


def sequential_computations(module: Module) -> dict[str, int]:
    """Computations that run instruction by instruction (entry, loop bodies and conditions,
    conditional branches, calls) → executions per step."""
    counts = hlo_module.execution_counts(module)
    found, stack = {module.entry}, [module.entry]
    while stack:
        for ins in module.computations[stack.pop()]:
            names = [n for _, n in _SEQUENTIAL.findall(ins.rest)]
            if ins.opcode == "call":
                called = hlo_module.CALLEES.findall(ins.rest)
                names += [n for key, n in called if key == "to_apply"]
            for _, listed in hlo_module.CALLEE_LISTS.findall(ins.rest):
                if ins.opcode == "conditional":
                    names += [n.strip().lstrip("%") for n in listed.split(",") if n.strip()]
            for name in names:
                if name in module.computations and name not in found:
                    found.add(name)
                    stack.append(name)
    return {name: counts.get(name, 0) for name in found}


def kernel_flops(module: Module, ins: Instruction) -> int:
    """Matmul FLOPs of one execution of a kernel: its own matmul (a ``dot``, a ``convolution``:
    XLA:TPU's form of many matmuls, a cuBLAS gemm call, cuDNN's fused attention) or the fused
    ones."""
    own = hlo_census.is_matmul(ins) or hlo_census.FMHA_CALL.search(ins.rest)
    body = [ins] if own else hlo_module.fused(module, ins)
    return sum(hlo_census.instruction_flops(module, i) for i in body)


def classify(module: Module, ins: Instruction) -> str:
    """A kernel's class: collectives and data movement by opcode, the rest by its ``op_name``
    (the model's module path; the loss outside the model; the optimizer: the rest of the
    trainer's ``train_step``)."""
    if hlo_census.collective_kind(ins.opcode):
        return "collectives"
    if ins.opcode in _MOVES or ins.opcode == "convert":
        return "copies"
    if ins.opcode in ("broadcast", "iota"):
        return "elementwise"  # a buffer filled
    if ins.opcode in hlo_module.FUSIONS:
        inner = {i.opcode for i in hlo_module.fused(module, ins)}
        if inner <= {"broadcast", "constant", "parameter", "bitcast", "tuple"}:
            return "elementwise"  # buffers filled with a constant (zeros for the gradients)
        if inner <= _MOVES | {"convert", "broadcast", "constant", "tuple"}:
            return "copies"  # data movement (with fills: a scan's stacked outputs, say)
    name = op_name(module, ins)
    if not name:
        return "unclassified"
    for keywords, kind in _NAME_RULES:
        if any(k in name for k in keywords):
            return kind
    if "jvp(" in name:
        model = re.search(r"jvp\((\w+)\)", name)
        return "elementwise" if model else "loss"
    # the train step's work after the gradient: AdamW, the gradient norm, the non-finite gate
    return "optimizer" if "train_step" in name else "unclassified"


def op_name(module: Module, ins: Instruction) -> str:
    """The kernel's ``op_name`` (where in the program it comes from); for a kernel that has
    none (XLA:GPU's custom fusions: a cuBLAS call on a dynamic slice), its fused matmul's, else
    the first fused instruction's that has one; "" when nothing names it."""
    found = _OP_NAME.search(ins.rest)
    if found:
        return found.group(1)
    body = hlo_module.fused(module, ins)
    for inner in sorted(body, key=lambda i: not hlo_census.is_matmul(i)):
        found = _OP_NAME.search(inner.rest)
        if found:
            return found.group(1)
    return ""


def kernels(
    text: str | Module, chip: Chip, num_devices: int = 1, model_flops: float = 0.0
) -> list[Kernel]:
    """Every kernel of a compiled module (per device) with its figures per step on ``chip``.
    ``model_flops``: the model's FLOPs per device; what exceeds the visible matmuls is given to
    the custom calls (their FLOPs are hidden), in proportion to their bytes."""
    module = hlo_module.as_module(text)
    tpu = chip.platform == "tpu"
    out = []
    for comp, times in sequential_computations(module).items():
        body = module.computations[comp]
        served = async_copies.owners(body) if tpu else {}  # copy-start → the kernel it serves
        extra: dict[str, int] = defaultdict(int)
        for ins in body:
            if ins.name in served:
                extra[served[ins.name]] += kernel_bytes(module, ins, tpu)
        for ins in body:
            if ins.opcode in _FREE or ins.opcode.endswith(("-done", "-update")) or not times:
                continue
            if ins.name in served:
                continue  # its bytes are the served kernel's
            flops = times * kernel_flops(module, ins)
            moved = times * (kernel_bytes(module, ins, tpu) + extra[ins.name])
            out.append(_kernel(module, ins, times, flops, moved, chip, num_devices))
    return _with_hidden_flops(out, model_flops, chip)


def _kernel(
    module: Module,
    ins: Instruction,
    times: int,
    flops: float,
    moved: float,
    chip: Chip,
    num_devices: int,
) -> Kernel:
    kind = classify(module, ins)
    if kind == "collectives":
        n = hlo_census.group_size(ins, num_devices)
        sent = (
            times * hlo_census.sent_bytes(hlo_census.collective_kind(ins.opcode), ins, n)
            if n > 1
            else 0
        )
        seconds = sent / chip.link_bytes_per_s if chip.link_bytes_per_s else 0.0
        moved = float(sent)
    else:
        seconds = roofline_seconds(flops, moved, chip, _fp32_dot(module, ins))
    target = _TARGET.search(ins.rest)
    opcode = f"custom-call {target.group(1)}" if target else ins.opcode
    return Kernel(ins.name, opcode, kind, times, flops, moved, seconds, op_name(module, ins))


def _fp32_dot(module: Module, ins: Instruction) -> bool:
    """Whether the kernel's matmul takes fp32 operands (slower on NVIDIA's tensor cores)."""
    body = [ins] if hlo_census.is_matmul(ins) else hlo_module.fused(module, ins)
    for inner in body:
        if hlo_census.is_matmul(inner):
            lhs = hlo_module.operand_names(inner)[:1]
            return bool(lhs) and module.shapes.get(lhs[0], "").startswith("f32")
    return False


def roofline_seconds(flops: float, moved: float, chip: Chip, fp32: bool = False) -> float:
    """``max(FLOPs ÷ peak, bytes ÷ bandwidth)`` for one kernel on ``chip``."""
    peak = chip.peak_flops * (FP32_MATMUL_RATE.get(chip.platform, 1.0) if fp32 else 1.0)
    compute = flops / peak if peak else 0.0
    memory = moved / chip.memory_bytes_per_s if chip.memory_bytes_per_s else 0.0
    return max(compute, memory)


def _with_hidden_flops(found: list[Kernel], model_flops: float, chip: Chip) -> list[Kernel]:
    """``found`` with the model FLOPs no visible matmul accounts for given to the custom calls
    (by their share of the custom calls' bytes)."""
    hidden = model_flops - sum(k.flops for k in found)
    calls = [
        k
        for k in found
        if k.opcode.startswith("custom-call")
        and not k.opcode.startswith(("custom-call __cublas$", "custom-call __cudnn$fmha"))
        and k.kind != "collectives"
    ]
    moved = sum(k.bytes for k in calls)
    if hidden <= 0 or not moved:
        return found
    out = []
    for k in found:
        if k in calls:
            flops = k.flops + hidden * k.bytes / moved
            k = dataclasses.replace(k, flops=flops, seconds=roofline_seconds(flops, k.bytes, chip))
        out.append(k)
    return out


def by_class(found: list[Kernel]) -> dict[str, float]:
    """Seconds per class (every class of :data:`CLASSES`, zero where none ran)."""
    out = dict.fromkeys(CLASSES, 0.0)
    for k in found:
        out[k.kind] += k.seconds
    return out
