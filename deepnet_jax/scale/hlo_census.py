"""What an HLO module does per step, counted from its text: matmul FLOPs and collectives, with
every loop body counted as many times as the loop runs.

XLA's own ``Compiled.cost_analysis()`` counts the body of a ``while`` loop once, whatever its trip
count, so for a model whose layers are scanned (``nn.scan``: one ``while`` over L layers) its
``flops`` is about that of one layer plus the rest of the step, whatever L is. This module reads
the module's text instead (``Lowered.as_text(dialect="hlo")`` before optimization, or
``Compiled.as_text()`` after), builds the call graph from the entry computation (``while``
bodies, ``call``/``fusion``/``conditional``/``custom-call`` computations) and gives each
computation its execution count: a ``while`` body runs ``n`` times, where ``n`` is the one integer
constant its condition compares the loop counter with (``lax.scan`` and ``fori_loop`` loops count
from 0 with ``i < n``). Every branch of a ``conditional`` counts once (an upper bound: the step's
non-finite gate has an empty branch).

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
import math
import re
from collections import defaultdict

import numpy as np

COLLECTIVE_KINDS = (
    "all-gather",
    "reduce-scatter",
    "all-reduce",
    "all-to-all",
    "collective-permute",
)
CALLEES = re.compile(
    r"\b(body|condition|to_apply|calls|true_computation|false_computation)=%?([\w.\-]+)"
)
CALLEE_LISTS = re.compile(r"\b(branch_computations|called_computations)=\{([^}]*)\}")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.+)$")
_ARRAY = re.compile(
    r"\b(pred|s4|s8|s16|s32|s64|u4|u8|u16|u32|u64|f8\w*|bf16|f16|f32|f64|c64|c128)"
    r"\[([\d,]*)\]"
)
_HEADER = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
# XLA:TPU writes a reduce-scatter as a fusion calling a computation of this name that holds an
# all-reduce of the whole buffer and keeps this device's slice
_TPU_REDUCE_SCATTER = "all-reduce-scatter"
_CONSTANT = re.compile(r"\bs(?:32|64)\[\]\S*\s+constant\((-?\d+)\)")


@dataclasses.dataclass(frozen=True)
class Instruction:
    """One HLO instruction: its name, result type text, opcode and the text after the opcode."""

    name: str
    result: str
    opcode: str
    rest: str


@dataclasses.dataclass
class Module:
    """Computations by name (each a list of instructions) and the entry computation's name."""

    computations: dict[str, list[Instruction]]
    entry: str
    shapes: dict[str, str]  # instruction name → result type text, module-wide


@dataclasses.dataclass(frozen=True)
class CollectiveCount:
    """One collective kind in a step: ops executed and bytes one device sends (ring volumes)."""

    count: int
    bytes: int


def _split_result(text: str) -> tuple[str, str, str]:
    """(result type, opcode, rest) of the text after ``name = ``; the type may be a tuple."""
    if text.startswith("("):
        end, depth = 0, 0
        for end, ch in enumerate(text):  # noqa: B007 (the closing parenthesis' index is kept)
            depth += (ch == "(") - (ch == ")")
            if depth == 0:
                break
        result, tail = text[: end + 1], text[end + 1 :].lstrip()
    else:
        result, _, tail = text.partition(" ")
    opcode, _, rest = tail.partition("(")
    return result, opcode.strip(), rest


def parse(text: str) -> Module:
    """The computations of an HLO module's text (``HloModule …`` as XLA prints it)."""
    computations: dict[str, list[Instruction]] = {}
    shapes: dict[str, str] = {}
    entry, current = "", None
    for line in text.splitlines():
        if current is None:
            header = _HEADER.match(line)
            if header and not line.startswith("HloModule"):
                current = header.group(2)
                computations[current] = []
                entry = current if header.group(1) else entry
            continue
        if line.startswith("}"):
            current = None
            continue
        match = _INSTRUCTION.match(line)
        if match:
            result, opcode, rest = _split_result(match.group(2))
            instruction = Instruction(match.group(1), result, opcode, rest)
            computations[current].append(instruction)
            shapes[instruction.name] = result
    if not entry:
        raise ValueError("HLO text has no ENTRY computation")
    return Module(computations, entry, shapes)


def as_module(text: str | Module) -> Module:
    """``text`` parsed (:func:`parse`), or ``text`` itself when it already is a module: the
    counting functions take either, so a caller reading several figures parses once."""
    return text if isinstance(text, Module) else parse(text)


def trip_count(module: Module, condition: str) -> int | None:
    """The loop count of a ``while`` whose condition computation is ``condition``: the one
    integer constant in it or in the fusions it calls (``i < n`` with i from 0), or None when
    there is none or several."""
    constants, names = set(), [condition]
    while names:
        for ins in module.computations.get(names.pop(), []):
            found = _CONSTANT.search(f"{ins.result} {ins.opcode}({ins.rest}")
            constants |= {int(found.group(1))} if found else set()
            names += [
                name
                for key, name in CALLEES.findall(ins.rest)
                if key == "calls" or (key == "to_apply" and ins.opcode == "call")
            ]
    return constants.pop() if len(constants) == 1 else None


def _while_trips(module: Module, instruction: Instruction) -> int:
    """Trips of a ``while``: XLA's ``known_trip_count`` annotation (XLA:GPU writes it), else
    the condition's constant; 1 when neither is known."""
    known = re.search(r'"known_trip_count":\{"n":"(\d+)"\}', instruction.rest)
    if known:
        return int(known.group(1))
    cond = re.search(r"\bcondition=%?([\w.\-]+)", instruction.rest)
    return (trip_count(module, cond.group(1)) if cond else None) or 1


def _callees(module: Module, instruction: Instruction) -> list[tuple[str, int]]:
    """(computation, times it runs per execution of ``instruction``). The ``-done`` and
    ``-update`` halves of an asynchronous op name the start's computation again: not followed."""
    if instruction.opcode.endswith(("-done", "-update")):
        return []
    called = []
    for key, name in CALLEES.findall(instruction.rest):
        times = _while_trips(module, instruction) if instruction.opcode == "while" else 1
        called.append((name, times if key == "body" else 1))
    for _, names in CALLEE_LISTS.findall(instruction.rest):
        called += [(n.strip().lstrip("%"), 1) for n in names.split(",") if n.strip()]
    return called


def execution_counts(module: Module) -> dict[str, int]:
    """How many times each computation reachable from the entry runs in one execution, as far as
    matmuls and collectives go: a ``to_apply`` reducer (of a reduce, an all-reduce, a sort) runs
    per element, not once, but holds neither. A ``while`` whose trips are unknown counts once
    (:func:`unknown_loops` says how many there are)."""
    counts: dict[str, int] = defaultdict(int)
    stack = [(module.entry, 1)]
    while stack:
        name, times = stack.pop()
        if name not in module.computations:
            continue
        counts[name] += times
        for ins in module.computations[name]:
            stack += [(callee, times * n) for callee, n in _callees(module, ins)]
    return dict(counts)


def tuple_elements(type_text: str) -> list[str]:
    """The top-level elements of a tuple type (``(a, (b, c))`` → ``["a", "(b, c)"]``); a
    non-tuple type is its own one element."""
    text = type_text.strip()
    if not text.startswith("("):
        return [text]
    elements, depth, start = [], 0, 1
    for i, ch in enumerate(text):
        depth += (ch in "({[") - (ch in ")}]")
        if (ch == "," and depth == 1) or (ch == ")" and depth == 0):
            elements.append(re.sub(r"/\*index=\d+\*/", "", text[start:i]).strip())
            start = i + 1
    return [e for e in elements if e]


def unknown_loops(text: str | Module) -> int:
    """``while`` loops reachable from the entry whose trip count is neither annotated by XLA nor
    one constant of their condition (each counted once in the figures)."""
    module = as_module(text)
    unknown = 0
    for name in execution_counts(module):
        for ins in module.computations[name]:
            if ins.opcode != "while" or '"known_trip_count"' in ins.rest:
                continue
            cond = re.search(r"\bcondition=%?([\w.\-]+)", ins.rest)
            unknown += not (cond and trip_count(module, cond.group(1)))
    return unknown


def arrays(type_text: str) -> list[tuple[str, tuple[int, ...]]]:
    """(dtype, dims) of every array in a result type (a tuple type lists several)."""
    return [
        (dtype, tuple(int(d) for d in dims.split(",") if d))
        for dtype, dims in _ARRAY.findall(type_text)
    ]


def nbytes(type_text: str) -> int:
    """Bytes of every array in a result type (sub-byte types rounded up per array)."""
    total = 0
    for dtype, dims in arrays(type_text):
        total += math.ceil(int(np.prod(dims, dtype=np.int64)) * _bits(dtype) / 8)
    return total


def _bits(dtype: str) -> int:
    return 8 if dtype == "pred" or dtype.startswith("f8") else int(re.sub(r"\D", "", dtype))


def padded_nbytes(type_text: str) -> int:
    """Bytes of one array as laid out in memory: its dims in the layout's major-to-minor order,
    the minor ones padded to the layout's first tile (``{1,0:T(8,128)}``: rows to multiples
    of 8, columns of 128, as XLA:TPU stores arrays; a scalar with ``T(128)`` takes 128
    elements). Without a tile, the plain size."""
    match = re.match(r"(\w+)\[([\d,]*)\](?:\{([\d,]*)(?::T\(([\d,]+)\))?[^}]*\})?", type_text)
    if not match:
        raise ValueError(f"not an array type: {type_text!r}")
    dtype, dims_text, order, tile = match.groups()
    dims = [int(d) for d in dims_text.split(",") if d]
    if order:
        dims = [dims[int(i)] for i in reversed(order.split(","))]  # major to minor
    if tile:
        sizes = [int(t) for t in tile.split(",")]
        dims = [1] * max(0, len(sizes) - len(dims)) + dims
        head, tail = dims[: len(dims) - len(sizes)], dims[len(dims) - len(sizes) :]
        dims = head + [math.ceil(d / t) * t for d, t in zip(tail, sizes, strict=True)]
    return math.ceil(int(np.prod(dims, dtype=np.int64)) * _bits(dtype) / 8)


def entry_parameters(text: str | Module) -> list[str]:
    """The result types of the entry computation's parameters, in the module's order."""
    module = as_module(text)
    return [i.result for i in module.computations[module.entry] if i.opcode == "parameter"]


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


def is_matmul(ins: Instruction) -> bool:
    """A ``dot``, a ``convolution`` or a cuBLAS gemm custom call."""
    return ins.opcode in ("dot", "convolution") or (
        ins.opcode == "custom-call" and GEMM_CALL.search(ins.rest) is not None
    )


def instruction_flops(module: Module, ins: Instruction) -> int:
    """Matmul FLOPs of one execution of ``ins`` (0 unless :func:`is_matmul`)."""
    if ins.opcode == "dot":
        return dot_flops(module, ins)
    if ins.opcode == "convolution":
        return conv_flops(module, ins)
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
