"""Which kernel an asynchronous copy between HBM and on-chip memory serves, for the kernel-level
cost model (:mod:`deepnet_jax.scale.kernels`).

XLA:TPU's memory-space assignment moves arrays between HBM and the on-chip memory (``S(1)``)
with ``copy-start``/``copy-done`` pairs that run beside the kernels:

* a **prefetch** (destination in ``S(1)``) reads its source from HBM so that a later kernel reads
  it on chip: the HBM read is that kernel's operand read, done early;
* an **eviction** (source in ``S(1)``) writes to HBM what a kernel produced on chip: the HBM
  write is that kernel's result write, done late.

The model counts each array's HBM bytes once, at the kernel that reads or writes it, and does
not overlap kernels; so a copy's bytes go to the kernel it serves — the first kernel (in program
order, through views) that reads a prefetched array, the kernel that produced an evicted one —
in the same computation, and the copy is no kernel of its own. A copy that serves no kernel
there (its array passes through a ``tuple`` to a loop, comes from a loop's result, or goes to a
collective, whose time is its link bytes) stays a copy kernel with its own bytes.

``copy-start``'s result is ``(destination, source, context)``; ``copy-done`` gives the first.
"""

from __future__ import annotations

from collections import defaultdict

from deepnet_jax.scale import hlo_census, hlo_module
from deepnet_jax.scale.hlo_module import Instruction, operand_names

_VIEWS = {"bitcast", "reshape"}
# opcodes that launch no kernel of their own (views aside: a copy is followed through them) or
# whose time is not their HBM bytes: a copy feeding one of these serves no kernel
_NOT_KERNELS = (hlo_module.LAUNCHES_NOTHING - _VIEWS) | {"copy-start"}


def on_chip(type_text: str) -> bool:
    """Whether an array type lives in the on-chip memory (``{…S(1)}``)."""
    return "S(1)}" in type_text


def owners(body: list[Instruction]) -> dict[str, str]:
    """The ``copy-start`` instructions of one computation (in program order) that serve a
    kernel there → that kernel's name (the module docstring's rule)."""
    by_name = {ins.name: ins for ins in body}
    position = {ins.name: i for i, ins in enumerate(body)}
    users: dict[str, list[Instruction]] = defaultdict(list)
    for ins in body:
        for name in operand_names(ins):
            users[name].append(ins)
    out = {}
    for ins in body:
        if ins.opcode != "copy-start":
            continue
        destination, source = [*hlo_module.tuple_elements(ins.result), "", ""][:2]
        if on_chip(destination):
            done = [u for u in users[ins.name] if u.opcode == "copy-done"]
            owner = _first_reader([d.name for d in done], users, position)
        elif on_chip(source):
            owner = _producer((operand_names(ins) or [""])[0], by_name)
        else:
            owner = None
        if owner is not None:
            out[ins.name] = owner
    return out


def _serves(ins: Instruction) -> bool:
    return ins.opcode not in _NOT_KERNELS and not hlo_census.collective_kind(ins.opcode)


def _first_reader(
    names: list[str], users: dict[str, list[Instruction]], position: dict[str, int]
) -> str | None:
    """The first instruction reading any of ``names`` (through views) if it is a kernel whose
    time is its bytes, else None."""
    readers, stack = [], list(names)
    while stack:
        for user in users.get(stack.pop(), []):
            if user.opcode in _VIEWS:
                stack.append(user.name)
            else:
                readers.append(user)
    if not readers:
        return None
    first = min(readers, key=lambda u: position[u.name])
    return first.name if _serves(first) else None


def _producer(name: str, by_name: dict[str, Instruction]) -> str | None:
    """The kernel that produced ``name`` (through views) in this computation, else None."""
    ins = by_name.get(name)
    while ins is not None and ins.opcode in _VIEWS:
        ins = by_name.get((operand_names(ins) or [""])[0])
    return ins.name if ins is not None and _serves(ins) else None
