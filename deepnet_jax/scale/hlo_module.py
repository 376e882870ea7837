"""An HLO module read from its text: its computations and their instructions, the sizes of
its result types, and how many times each computation runs in one execution.

The text is the module as XLA prints it (``Lowered.as_text(dialect="hlo")`` before optimization,
or ``Compiled.as_text()`` after). :func:`execution_counts` builds the call graph from the entry
computation (``while`` bodies, ``call``/``fusion``/``conditional``/``custom-call`` computations)
and gives each computation its execution count: a ``while`` body runs ``n`` times, where ``n`` is
XLA's ``known_trip_count`` annotation or else the one integer constant its condition compares the
loop counter with (``lax.scan`` and ``fori_loop`` loops count from 0 with ``i < n``). Every
branch of a ``conditional`` counts once (an upper bound: the step's non-finite gate has an empty
branch). What is counted in each computation is :mod:`deepnet_jax.scale.hlo_census`'s (matmul
FLOPs, collectives) and :mod:`deepnet_jax.scale.kernels`'s (kernels).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import defaultdict

import numpy as np

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
_CONSTANT = re.compile(r"\bs(?:32|64)\[\]\S*\s+constant\((-?\d+)\)")
_CALLS = re.compile(r"\bcalls=%?([\w.\-]+)")
# a fusion, and XLA:GPU's asynchronous form of one (``fusion-start``, waited on by a
# ``fusion-done`` that launches nothing)
FUSIONS = {"fusion", "fusion-start"}
# opcodes that launch no kernel: bookkeeping of buffers and control flow
LAUNCHES_NOTHING = frozenset(
    {
        "parameter",
        "constant",
        "get-tuple-element",
        "tuple",
        "bitcast",
        "while",
        "conditional",
        "call",
        "after-all",
        "partition-id",
        "replica-id",
        "opt-barrier",
        "add-dependency",
    }
)


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
        if line.rstrip() == "}":
            current = None
            continue
        match = _INSTRUCTION.match(line) if line[:1].isspace() else None
        if match:
            result, opcode, rest = _split_result(match.group(2))
            instruction = Instruction(match.group(1), result, opcode, rest)
            computations[current].append(instruction)
            shapes[instruction.name] = result
        elif line and computations[current]:  # an attribute printed over several lines
            last = computations[current][-1]
            computations[current][-1] = dataclasses.replace(last, rest=f"{last.rest}\n{line}")
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


def fused(module: Module, ins: Instruction) -> list[Instruction]:
    """Every instruction a fusion or custom call runs (nested fusions flattened)."""
    out, stack = [], [ins]
    while stack:
        for callee in _CALLS.findall(stack.pop().rest):
            for inner in module.computations.get(callee, []):
                out.append(inner)
                if inner.opcode == "fusion":
                    stack.append(inner)
    return out


def operand_names(ins: Instruction) -> list[str]:
    """The instructions an instruction reads (its operand list, before the attributes)."""
    depth, end = 0, len(ins.rest)
    for i, ch in enumerate(ins.rest):
        depth += (ch in "({[") - (ch in ")}]")
        if depth < 0:
            end = i
            break
    return re.findall(r"%([\w.\-]+)", ins.rest[:end])


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
