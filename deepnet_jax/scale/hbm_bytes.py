"""The HBM bytes one kernel of an optimized HLO module reads and writes, for the kernel-level
cost model (:mod:`deepnet_jax.scale.kernels`).

A kernel's operands are read and its result written once, as they are after fusion; an operand
the kernel only slices (``dynamic-slice``, ``slice``, ``gather``: their sliced operand, not
their indices) counts the slices, and a buffer updated in place (``dynamic-update-slice`` of a
fusion's parameter, the scanned stack's per-layer writes) counts the update written, not the
whole buffer (what the update is computed from is read as any operand; a
``dynamic-update-slice`` on its own reads its update operand and writes it). A view
(``bitcast``, ``reshape``) of a fusion's parameter is that parameter, and so is a nested
fusion's parameter (XLA:TPU nests a convolution's operand fusions, a per-layer ``dynamic-slice``
of a stacked [L, …] buffer among them, inside the convolution's fusion): what the nested fusion
does with it is what the kernel does. An asynchronous start writes what its ``-done`` gives: the
middle element of ``fusion-start``'s and ``slice-start``'s ``((operands), result, context)``,
the first of ``copy-start``'s ``(destination, source, context)`` (so a copy reads its source and
writes its destination, each where it lives).

On XLA:TPU (``tpu=True``) each array counts as laid out: its tiles' padding
(``hlo_module.padded_nbytes``), and nothing for an array in a memory space other than HBM
(``S(1)``: the on-chip memory that memory-space assignment prefetches into and evicts from with
``copy-start``; ``S(2)``, ``S(6)``: sync flags and scalars). So a prefetched operand costs its
copy's HBM read, not a second read by the kernel using it (the kernel model gives that read to
the kernel: :mod:`deepnet_jax.scale.async_copies`), and a slice into on-chip memory its read.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable

from deepnet_jax.scale import hlo_module
from deepnet_jax.scale.hlo_module import FUSIONS, Instruction, Module, fused, operand_names

_SLICES = {"dynamic-slice", "slice", "gather"}
_VIEWS = {"bitcast", "reshape"}
# asynchronous starts: ((operands), result, context); copy-start: (destination, source, context)
_STARTS = {"fusion-start", "copy-start", "slice-start"}
_CALLS = re.compile(r"\bcalls=%?([\w.\-]+)")
_LAID_OUT = re.compile(
    r"\b(?:pred|s4|s8|s16|s32|s64|u4|u8|u16|u32|u64|f8\w*|bf16|f16|f32|f64|c64|c128)"
    r"\[[\d,]*\](?:\{[^}]*\})?"
)
_SPACE = re.compile(r"S\((\d+)\)")


def hbm_nbytes(type_text: str, tpu: bool = False) -> int:
    """HBM bytes of a type's arrays: the plain bytes; on XLA:TPU (``tpu``) each array as laid out
    in its tiles, and 0 for one in another memory space (``{…S(1)}``, the module docstring)."""
    if not tpu:
        return hlo_module.nbytes(type_text)
    total = 0
    for array in _LAID_OUT.findall(type_text):
        space = _SPACE.search(array)
        if space is None or space.group(1) == "0":
            total += hlo_module.padded_nbytes(array)
    return total


def kernel_bytes(module: Module, ins: Instruction, tpu: bool = False) -> int:
    """HBM bytes one execution of a kernel reads and writes (the module docstring's rules);
    ``tpu``: the module is XLA:TPU's (tiles, memory spaces)."""

    def size(name: str) -> int:
        return hbm_nbytes(module.shapes.get(name, ""), tpu)

    result = hbm_nbytes(_started_result(ins), tpu)
    if ins.opcode in FUSIONS:
        return _fusion_bytes(module, ins, size, result)
    operands = operand_names(ins)
    if ins.opcode in _SLICES or ins.opcode == "slice-start":  # the slice read and written
        read = hbm_nbytes(_SPACE.sub("", _started_result(ins)), tpu)
        return (read if operands and size(operands[0]) else 0) + result
    sizes = [size(n) for n in operands]
    if ins.opcode == "dynamic-update-slice":
        return 2 * sizes[1] if len(sizes) > 1 else 0
    return sum(sizes) + result


def _fusion_bytes(module: Module, ins: Instruction, size: Callable[[str], int], result: int) -> int:
    """A fusion's bytes: its parameters as read (whole, sliced or updated in place) and its
    ``result`` unless it updates a parameter in place."""
    body = fused(module, ins)
    params, links = _parameters(module, ins)
    users: dict[str, list[Instruction]] = defaultdict(list)
    for inner in body:
        if inner.opcode == "parameter" and inner.name in links:
            users[links[inner.name]].append(inner)  # a nested fusion's parameter reads its operand
        elif inner.opcode not in FUSIONS:  # a nested fusion reads through its parameters
            for name in operand_names(inner):
                users[name].append(inner)

    def origin(name: str) -> str:  # what a view or a nested fusion's parameter stands for
        while name in links:
            name = links[name]
        return name

    total = 0
    in_place = set()
    for inner in body:  # an in-place update writes its update, not the buffer
        if inner.opcode == "dynamic-update-slice":
            buffer, update = [*operand_names(inner), "", ""][:2]
            if origin(buffer) in params:
                in_place.add(origin(buffer))
                total += size(update) if size(origin(buffer)) else 0
    for name in params:
        if name in in_place or not size(name):  # on-chip (XLA:TPU's S(1)): no HBM bytes
            continue
        readers = _readers(name, users)
        if readers and all(
            r.opcode in _SLICES and via == operand_names(r)[0] for r, via in readers
        ):
            total += sum(size(r.name) for r, _ in readers)  # the slices read
        else:
            total += size(name)
    return total + (0 if in_place else result)


def _parameters(module: Module, ins: Instruction) -> tuple[dict[str, Instruction], dict[str, str]]:
    """A fusion's own parameters (name → instruction: what it reads from HBM), and what each
    stand-in inside it stands for (name → name): a view (bitcast, reshape) for its operand, and
    a nested fusion's parameter for the operand that fusion passes it, which is no second read."""
    own: dict[str, Instruction] = {}
    links: dict[str, str] = {}
    stack = [ins]
    while stack:
        caller = stack.pop()
        operands = operand_names(caller)
        for callee in _CALLS.findall(caller.rest):
            for inner in module.computations.get(callee, []):
                if inner.opcode == "parameter" and caller is ins:
                    own[inner.name] = inner
                elif inner.opcode == "parameter":
                    index = int(inner.rest.split(")")[0])
                    links[inner.name] = operands[index] if index < len(operands) else ""
                elif inner.opcode in _VIEWS:
                    links[inner.name] = (operand_names(inner) or [""])[0]
                elif inner.opcode == "fusion":
                    stack.append(inner)
    return own, links


def _started_result(ins: Instruction) -> str:
    """An instruction's result type; an asynchronous start's is what its ``-done`` gives: the
    middle of ``((operands), result, context)`` (``fusion-start``, ``slice-start``), the first
    of ``copy-start``'s ``(destination, source, context)``."""
    if ins.opcode not in _STARTS:
        return ins.result
    parts = hlo_module.tuple_elements(ins.result)
    index = 0 if ins.opcode == "copy-start" else 1
    return parts[index] if len(parts) > index else ins.result


def _readers(name: str, users: dict[str, list[Instruction]]) -> list[tuple[Instruction, str]]:
    """The instructions reading ``name``, looking through views (bitcast, reshape) and into
    nested fusions (their parameters), each with the name it reads ``name`` by."""
    out, stack = [], [(user, name) for user in users.get(name, [])]
    while stack:
        inner, via = stack.pop()
        if inner.opcode in _VIEWS or inner.opcode == "parameter":
            stack += [(user, inner.name) for user in users.get(inner.name, [])]
        else:
            out.append((inner, via))
    return out
