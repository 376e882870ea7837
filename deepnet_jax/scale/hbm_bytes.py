"""The HBM bytes one kernel of an optimized HLO module reads and writes, for the kernel-level
cost model (:mod:`deepnet_jax.scale.kernels`).

A kernel's operands are read and its result written once, as they are after fusion; an
operand the kernel only slices (``dynamic-slice``, ``slice``, ``gather``) counts the slices,
and a buffer updated in place (``dynamic-update-slice`` of a fusion's parameter, the scanned
stack's per-layer writes) counts the update read and written, not the whole buffer. A view
(``bitcast``, ``reshape``) of a fusion's parameter is that parameter.
"""

from __future__ import annotations

from collections import defaultdict

from deepnet_jax.scale import hlo_module
from deepnet_jax.scale.hlo_module import FUSIONS, Instruction, Module, fused, operand_names

_SLICES = {"dynamic-slice", "slice", "gather"}
_VIEWS = {"bitcast", "reshape"}


def kernel_bytes(module: Module, ins: Instruction) -> int:
    """HBM bytes one execution of a kernel reads and writes (the module docstring's rules)."""
    operands = operand_names(ins)
    if ins.opcode not in FUSIONS:
        sizes = [hlo_module.nbytes(module.shapes.get(n, "")) for n in operands]
        if ins.opcode in _SLICES:
            return 2 * hlo_module.nbytes(ins.result)
        if ins.opcode == "dynamic-update-slice":
            update = sizes[1] if len(sizes) > 1 else 0
            return 2 * update
        return sum(sizes) + hlo_module.nbytes(ins.result)
    body = fused(module, ins)
    params = {i.name: i for i in body if i.opcode == "parameter"}
    users: dict[str, list[Instruction]] = defaultdict(list)
    for inner in body:
        for name in operand_names(inner):
            users[name].append(inner)
    origin = {}  # what each view (bitcast, reshape) of a parameter is a view of
    for inner in body:
        if inner.opcode in _VIEWS:
            source = (operand_names(inner) or [""])[0]
            origin[inner.name] = origin.get(source, source)
    total = 0
    in_place = set()
    for inner in body:  # an in-place update writes its update, not the buffer
        if inner.opcode == "dynamic-update-slice":
            buffer, update = [*operand_names(inner), "", ""][:2]
            buffer = origin.get(buffer, buffer)
            if buffer in params:
                in_place.add(buffer)
                total += 2 * hlo_module.nbytes(module.shapes.get(update, ""))
    for name, param in params.items():
        if name in in_place:
            continue
        readers = _readers(name, users)
        if readers and all(r.opcode in _SLICES for r in readers):
            total += sum(hlo_module.nbytes(r.result) for r in readers)
        else:
            total += hlo_module.nbytes(param.result)
    if not in_place:
        total += hlo_module.nbytes(_fusion_result(ins))
    return total


def _fusion_result(ins: Instruction) -> str:
    """A fusion's result type; an async ``fusion-start``'s is the middle element of its
    ``((operands), result, context)`` tuple (the ``fusion-done``'s value)."""
    if ins.opcode != "fusion-start":
        return ins.result
    depth, parts, start = 0, [], 1
    for i, ch in enumerate(ins.result):
        depth += (ch in "({[") - (ch in ")}]")
        if ch == "," and depth == 1:
            parts.append(ins.result[start:i].strip())
            start = i + 1
    return parts[1] if len(parts) > 1 else ins.result


def _readers(name: str, users: dict[str, list[Instruction]]) -> list[Instruction]:
    """The instructions reading ``name``, looking through views (bitcast, reshape)."""
    out, stack = [], list(users.get(name, []))
    while stack:
        inner = stack.pop()
        if inner.opcode in _VIEWS:
            stack += users.get(inner.name, [])
        else:
            out.append(inner)
    return out
