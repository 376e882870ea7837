"""A lower bound on a compiled train step's time on a target chip, and the MFU it caps.

The step cannot run faster than any one of the chip's resources allows (the roofline model,
Williams et al. 2009), per device:

    t ≥ max(FLOPs ÷ peak FLOP/s,  HBM bytes ÷ HBM bandwidth,  collective bytes ÷ link bandwidth)

* FLOPs: the program's matmul FLOPs per device (``hlo_census.matmul_flops`` of the lowered step
  ÷ devices, loop trips counted, rematerialized recomputation included), or the model's where
  those are more: the census cannot see inside a custom call (cuDNN's fused attention), and
  the step cannot do less work than the model needs;
* HBM bytes: at least every argument read and every output written once (the state: params,
  optimizer moments, batch), and at least XLA's ``bytes accessed``, which counts each loop body
  once (so it too is a lower bound);
* collective bytes: what one device sends per step (``hlo_census.collectives``, ring volumes),
  against the chip's whole interconnect bandwidth in one direction — as if every link carried
  traffic all the time, which only a perfectly spread torus collective does.

The MFU bound is (model FLOPs per device ÷ peak) ÷ that time, model FLOPs being ``flops.py``'s
(no recomputation): the best a real run could report. It is an estimate from the compiled
program and the datasheet, never a measurement; real steps add kernel launch and pipeline
bubbles, imperfect overlap of communication with compute, and data loading.
"""

from __future__ import annotations

import dataclasses

from deepnet_jax.scale.targets import Chip


@dataclasses.dataclass(frozen=True)
class Roofline:
    """Per-device time bounds of one step, in seconds, and the MFU they allow."""

    compute_s: float
    memory_s: float
    collective_s: float
    bound_s: float
    limited_by: str  # "compute", "memory" or "collectives"
    mfu_upper_bound: float


def bound(
    chip: Chip,
    program_flops: float,
    model_flops: float,
    hbm_bytes: float,
    collective_bytes: float,
) -> Roofline:
    """The roofline bound of a step on ``chip`` (all figures per device, see the module
    docstring)."""
    times = {
        "compute": max(program_flops, model_flops) / chip.peak_flops,
        "memory": hbm_bytes / chip.memory_bytes_per_s,
        "collectives": collective_bytes / chip.link_bytes_per_s if collective_bytes else 0.0,
    }
    limited_by = max(times, key=times.__getitem__)
    t = times[limited_by]
    return Roofline(
        compute_s=times["compute"],
        memory_s=times["memory"],
        collective_s=times["collectives"],
        bound_s=t,
        limited_by=limited_by,
        mfu_upper_bound=(model_flops / chip.peak_flops) / t if t > 0 else 0.0,
    )
