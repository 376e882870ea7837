"""What an HLO module does per step, counted from its text: matmul FLOPs and collectives, with
every loop body counted as many times as the loop runs.

XLA's own ``Compiled.cost_analysis()`` counts the body of a ``while`` loop once, whatever its trip
count, so for a model whose layers are scanned (``nn.scan``: one ``while`` over L layers) its
``flops`` is about that of one layer plus the rest of the step, whatever L is. This module counts
over the module's text instead (:mod:`deepnet_jax.scale.hlo_module`), each computation's
instructions times the computation's execution count (``hlo_module.execution_counts``: a
``while`` body once per trip).

* :func:`matmul_flops`: 2·(result elements)·(contracted size) over every ``dot``; use it on the
  lowered (pre-optimization) module, where matmuls are ``dot`` instructions with their global
  shapes (an optimized TPU module turns many into ``convolution``s).
* :func:`collectives`: per kind (all-gather, reduce-scatter, all-reduce, all-to-all,
  collective-permute), the count per step and the bytes one device sends, with the ring
  algorithm's volumes for a group of n devices: all-gather (n-1)/n of its result, reduce-scatter
  (n-1)/n of its operand (n-1 times its result), all-reduce 2(n-1)/n of its buffer (a
  reduce-scatter then an all-gather), all-to-all (n-1)/n of its buffer, collective-permute the
  whole buffer. Use it on the compiled (partitioned) module, whose shapes are per device.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from deepnet_jax.scale.hlo_module import (
    Instruction,
    Module,
    arrays,
    as_module,
    execution_counts,
    nbytes,
    tuple_elements,
)

COLLECTIVE_KINDS = (
    "all-gather",
    "reduce-scatter",
    "all-reduce",
    "all-to-all",
    "collective-permute",
)
# XLA:TPU writes a reduce-scatter as a fusion calling a computation of this name that holds an
# all-reduce of the whole buffer and keeps this device's slice
_TPU_REDUCE_SCATTER = "all-reduce-scatter"


@dataclasses.dataclass(frozen=True)
class CollectiveCount:
    """One collective kind in a step: ops executed and bytes one device sends (ring volumes)."""

    count: int
    bytes: int


def dot_flops(module: Module, ins: Instruction) -> int:
    """FLOPs of one execution of a ``dot``: 2·(result elements)·(contracted size)."""
    out = arrays(ins.result)[0][1]
    lhs_name = ins.rest.split(",")[0].strip().lstrip("%")
    lhs = arrays(module.shapes[lhs_name])[0][1]
    found = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", ins.rest)
    contracted = [lhs[int(d)] for d in found.group(1).split(",") if d] if found else []
    return 2 * int(np.prod(out, dtype=np.int64)) * int(np.prod(contracted, dtype=np.int64))


def conv_flops(module: Module, ins: Instruction) -> int:
    """FLOPs of one execution of a ``convolution``: 2·(batch)·(output features)·(input
    features per group)·(valid window taps), the taps summed over output positions per
    spatial dimension (padding and the holes of an input dilation hold no tap). XLA:TPU writes
    batched matmuls as such convolutions: a batch dimension becomes a spatial one whose window
    meets one real element per output position."""
    labels = re.search(r"dim_labels=([0-9a-z]+)_([0-9a-z]+)->([0-9a-z]+)", ins.rest)
    operands = [o.strip().lstrip("%") for o in ins.rest.split(")")[0].split(",")[:2]]
    lhs_dims = arrays(module.shapes[operands[0]])[0][1]
    out_dims = arrays(ins.result)[0][1]
    lhs_labels, _, out_labels = labels.groups()
    groups = re.search(r"feature_group_count=(\d+)", ins.rest)
    features = lhs_dims[lhs_labels.index("f")] // (int(groups.group(1)) if groups else 1)
    flops = 2 * out_dims[out_labels.index("b")] * out_dims[out_labels.index("f")] * features
    window = _window(ins.rest, sum(c.isdigit() for c in lhs_labels))
    for d, (size, stride, pad, lhs_dilate, rhs_dilate) in enumerate(window):
        extent = (lhs_dims[lhs_labels.index(str(d))] - 1) * lhs_dilate + 1
        taps = 0
        for o in range(out_dims[out_labels.index(str(d))]):
            for k in range(size):
                pos = o * stride + k * rhs_dilate - pad
                taps += 0 <= pos < extent and pos % lhs_dilate == 0
        flops *= taps
    return flops


def _window(rest: str, rank: int) -> list[tuple[int, int, int, int, int]]:
    """Per spatial dimension of a convolution: (size, stride, low padding, lhs dilation, rhs
    dilation), XLA's defaults where its ``window`` leaves them out."""
    found = re.search(r"window=\{([^}]*)\}", rest)
    fields = dict(re.findall(r"(\w+)=(\S+)", found.group(1))) if found else {}

    def ints(name: str, default: int) -> list[int]:
        text = fields.get(name)
        return [int(v.split("_")[0]) for v in text.split("x")] if text else [default] * rank

    sizes = ints("size", 1)
    return list(
        zip(
            sizes,
            ints("stride", 1),
            ints("pad", 0),
            ints("lhs_dilate", 1),
            ints("rhs_dilate", 1),
            strict=True,
        )
    )


GEMM_CALL = re.compile(r'custom_call_target="__cublas\$[^"]*"')  # XLA:GPU's cuBLAS gemms


def gemm_call_flops(module: Module, ins: Instruction) -> int:
    """FLOPs of one execution of a cuBLAS gemm custom call (``__cublas$gemm``,
    ``__cublas$lt$matmul``: a ``dot`` XLA:GPU hands to cuBLAS itself; jax 0.12's XLA does so
    for a dot on a dynamic slice of a scanned weight): 2·(result elements)·(contracted size),
    the contracting dimensions from its ``gemm_backend_config``, the result the first element
    of its tuple (the second is cuBLAS's workspace)."""
    out = arrays(ins.result)[0][1]
    lhs_name = ins.rest.split(")")[0].split(",")[0].strip().lstrip("%")
    lhs = arrays(module.shapes[lhs_name])[0][1]
    found = re.search(r'"lhs_contracting_dimensions":\[([^\]]*)\]', ins.rest)
    dims = [int(d.strip().strip('"')) for d in found.group(1).split(",") if d.strip()]
    return 2 * int(np.prod(out, dtype=np.int64)) * int(np.prod([lhs[d] for d in dims]))


FMHA_CALL = re.compile(r'custom_call_target="__cudnn\$fmha(\w*)"')  # cuDNN's fused attention
# XLA writes its backend config with a space after each colon; jax's own without
FMHA_CAUSAL = re.compile(r'"mask_type":\s*"(PADDING_)?CAUSAL"')


def fmha_call_flops(module: Module, ins: Instruction) -> int:
    """FLOPs of one execution of cuDNN's fused attention (``__cudnn$fmha…``): its matmuls,
    read off the shapes of q [B, T, H, K] and k [B, S, H, K] (its first two operands). The
    forward pass is q·kᵀ and p·v, 4·B·H·T·S·K; the backward pass (``…Backward``) recomputes
    q·kᵀ and takes the gradients of q, k, v and p, 10·B·H·T·S·K (FlashAttention-2's count, Dao
    2023, §3.2). A causal mask (``mask_type`` CAUSAL, or PADDING_CAUSAL with key lengths) halves
    both: cuDNN skips the blocks above the diagonal."""
    names = [n.strip().lstrip("%") for n in ins.rest.split(")")[0].split(",")[:2]]
    (_, q), (_, k) = (arrays(module.shapes[n])[0] for n in names)
    batch, length, heads, size = q
    flops = 4 * batch * heads * length * k[1] * size
    if FMHA_CALL.search(ins.rest).group(1).endswith("Backward"):
        flops = flops * 10 // 4
    return flops // 2 if FMHA_CAUSAL.search(ins.rest) else flops


def is_matmul(ins: Instruction) -> bool:
    """A ``dot``, a ``convolution`` or a cuBLAS gemm custom call."""
    return ins.opcode in ("dot", "convolution") or (
        ins.opcode == "custom-call" and GEMM_CALL.search(ins.rest) is not None
    )


def instruction_flops(module: Module, ins: Instruction) -> int:
    """Matmul FLOPs of one execution of ``ins``: a matmul's (:func:`is_matmul`), or cuDNN's
    fused attention's (:func:`fmha_call_flops`); 0 for anything else."""
    if ins.opcode == "dot":
        return dot_flops(module, ins)
    if ins.opcode == "convolution":
        return conv_flops(module, ins)
    if ins.opcode == "custom-call" and FMHA_CALL.search(ins.rest):
        return fmha_call_flops(module, ins)
    return gemm_call_flops(module, ins) if is_matmul(ins) else 0


def matmul_flops(text: str | Module) -> int:
    """FLOPs of every matmul (:func:`is_matmul`) in one execution of the module, loop bodies
    counted per trip."""
    module = as_module(text)
    total = 0
    for name, times in execution_counts(module).items():
        for ins in module.computations[name]:
            total += times * instruction_flops(module, ins)
    return total


def group_size(ins: Instruction, num_devices: int) -> int:
    """Devices in each replica group of a collective (all devices when it names none)."""
    rest = ins.rest
    listed = re.search(r"replica_groups=\{\{([\d,]*)\}", rest)
    if listed:
        return len([d for d in listed.group(1).split(",") if d])
    iota = re.search(r"replica_groups=\[(\d+),(\d+)\]<=", rest)
    if iota:
        return int(iota.group(2))
    mesh = re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", rest)
    if mesh:
        sizes = dict(re.findall(r"'(\w+)'=(\d+)", mesh.group(1)))
        axes = re.findall(r"'(\w+)'", mesh.group(2))
        return int(np.prod([int(sizes[a]) for a in axes], dtype=np.int64))
    pairs = re.search(r"source_target_pairs=\{(.*?)\}\s*(,|$)", rest)
    return 2 if pairs else num_devices


def collective_kind(opcode: str) -> str | None:
    """The collective an opcode runs (``all-reduce-start`` → ``all-reduce``), or None."""
    base = opcode.removesuffix("-start")
    return base if base in COLLECTIVE_KINDS else None


def sent_bytes(kind: str, ins: Instruction, n: int) -> int:
    """Bytes one device sends for this collective under the ring algorithm (module docstring)."""
    result = ins.result
    parts = tuple_elements(result)
    paired = kind != "all-reduce" or parts[0].startswith("(")
    if ins.opcode.endswith("-start") and paired and len(parts) >= 2:
        result = parts[1]  # ((operands…), (results…)[, context]): the results
    size = nbytes(result)
    if kind == "collective-permute":
        return size
    if kind == "reduce-scatter":
        return size * (n - 1)
    factor = 2 if kind == "all-reduce" else 1
    return factor * size * (n - 1) // max(n, 1)


def collectives(text: str | Module, num_devices: int) -> dict[str, CollectiveCount]:
    """Per collective kind: ops per step and bytes one device sends (loop bodies per trip)."""
    module = as_module(text)
    count = dict.fromkeys(COLLECTIVE_KINDS, 0)
    sent = dict.fromkeys(COLLECTIVE_KINDS, 0)
    for name, times in execution_counts(module).items():
        for ins in module.computations[name]:
            kind = collective_kind(ins.opcode)
            if kind is None:
                continue
            n = group_size(ins, num_devices)
            if n <= 1 and kind != "collective-permute":
                continue  # a group of one moves nothing
            volume = sent_bytes(kind, ins, n)
            if kind == "all-reduce" and name.startswith(_TPU_REDUCE_SCATTER):
                kind, volume = "reduce-scatter", volume // 2  # the all-reduce's first half
            count[kind] += times
            sent[kind] += times * volume
    return {k: CollectiveCount(count[k], sent[k]) for k in COLLECTIVE_KINDS}
