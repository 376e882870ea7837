"""The kernel model calibrated against measured GPU profiles: seconds per class × a factor.

:mod:`deepnet_jax.scale.kernels` sums every kernel's roofline time, max(FLOPs ÷ peak, bytes ÷
bandwidth): a lower bound that real kernels miss by a factor that depends on what they do
(docs/scaling.md, "Measured on one H200", has the measured factors). A calibration holds one
factor per kernel class for a chip family, fitted on profiled steps
(``benchmarks/kernel_calibration.py``, which writes the family's JSON beside this module from
the committed profile records it names)::

    η_c = Σ_fit measured_c ÷ Σ_fit predicted_c          (per class c, over the fitted profiles)
    u   = Σ_fit unmatched ÷ Σ_fit (measured − unmatched) (kernels the profile could not match)
    calibrated step = (1 + u) · Σ_c η_c · predicted_c

A class the fitted profiles never predicted keeps η = 1. Families without a calibration (TPUs,
A100, B200 today) have none: their plans carry the roofline sum alone.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from deepnet_jax.scale import kernels

_FOLDER = os.path.join(os.path.dirname(__file__), "calibrations")
# chip name (targets.Chip.name) -> the family whose calibration applies; the H100 and H200 share
# their SMs, clocks and dense bf16 peak (989 TFLOP/s) and differ in memory size and bandwidth,
# which the roofline itself carries
FAMILIES = {"H100 SXM": "hopper", "H200 SXM": "hopper"}


@dataclasses.dataclass(frozen=True)
class Calibration:
    """A chip family's factors: ``class_factors`` {kernel class: η}, ``unmatched`` u, and
    where they came from (``source``: the fitting command's record header and inputs)."""

    family: str
    class_factors: dict[str, float]
    unmatched: float
    source: dict[str, Any]

    def seconds(self, classes: dict[str, float]) -> float:
        """The calibrated step time for a plan's seconds per kernel class."""
        scaled = sum(s * self.class_factors.get(kind, 1.0) for kind, s in classes.items())
        return (1.0 + self.unmatched) * scaled


def fit(profiles: list[dict[str, dict[str, float]]]) -> tuple[dict[str, float], float]:
    """η per class and u from profiles' ``{class: {"measured_ms", "predicted_ms"}}`` (the
    records of ``benchmarks.device_profile``; class ``"unmatched"`` has no prediction)."""
    measured: dict[str, float] = {}
    predicted: dict[str, float] = {}
    unmatched = matched = 0.0
    for classes in profiles:
        for kind, c in classes.items():
            if kind == "unmatched":
                unmatched += c["measured_ms"]
                continue
            matched += c["measured_ms"]
            measured[kind] = measured.get(kind, 0.0) + c["measured_ms"]
            predicted[kind] = predicted.get(kind, 0.0) + (c["predicted_ms"] or 0.0)
    factors = {k: measured[k] / predicted[k] for k in kernels.CLASSES if predicted.get(k)}
    return factors, (unmatched / matched if matched else 0.0)


def path(family: str) -> str:
    """The JSON file of ``family``'s calibration."""
    return os.path.join(_FOLDER, f"{family}.json")


def save(cal: Calibration) -> str:
    """Write ``cal`` as its family's JSON; returns the path."""
    os.makedirs(_FOLDER, exist_ok=True)
    with open(path(cal.family), "w") as f:
        json.dump(dataclasses.asdict(cal), f, indent=1, sort_keys=True)
        f.write("\n")
    return path(cal.family)


def for_chip(chip_name: str) -> Calibration | None:
    """The calibration of the family ``chip_name`` belongs to, or None where there is none."""
    family = FAMILIES.get(chip_name)
    if family is None or not os.path.exists(path(family)):
        return None
    with open(path(family)) as f:
        return Calibration(**json.load(f))
