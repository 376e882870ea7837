"""``model.remat_policy='auto'``: the fastest candidate whose planned peak fits the budget.

Before a model is built, :func:`resolve_step` (called by ``trainer.build_run`` once the data
has fixed the vocabulary; the planner's command line calls :func:`choose`) replaces ``auto``
with a concrete ``model.remat_policy`` and ``model.scan_group_size``: it compiles the run's
train step for each candidate with the AOT planner
(:func:`deepnet_jax.training.memory_plan.compile_step`, abstract inputs, nothing allocated).
On a TPU or GPU (the run's own, or a deviceless target) every flat-scan candidate is planned
and the one with the least predicted step time (:mod:`deepnet_jax.scale.kernels`, calibrated by
:mod:`deepnet_jax.scale.calibration` where the chip's family has measured factors) among those
whose planned peak per device fits the budget is taken (of those within :data:`TIE` of it, the
one with the least recomputation): the least recomputation is not always the fastest
(docs/scaling.md, "Measured on one H200"). The nested-scan candidates are planned only when no
flat one fits: they recompute more to save memory, and each plan is a compile.
On a CPU, which has no chip figures, the candidates are planned cheapest first and the first
that fits is taken. The candidates, their order and the budget are the model's
(:mod:`deepnet_jax.model.remat`); this module is the search. It prints one line with the choice
and its planned peak, or raises one ``ValueError`` naming the smallest peak found and what to
change.

The trainer takes the chosen candidate's compiled step with its config (:func:`resolve_step`)
and runs that executable as its train step (:mod:`deepnet_jax.training.planned_step`), so the
plan's compile is the step's: a run compiles its train step once for the planned batch shape
(the longest bucket), plus once per other bucket shape it meets, as without ``auto``.

``auto`` is the training config's default (``train_config.TRAINING_DEFAULTS``): on a CPU a
model that fits trains without recomputation, and its one compile is the planning compile
(candidate 1 fits; each candidate that does not fit adds one); on a TPU or GPU every flat
candidate is compiled (the nested ones too when none fits), the chosen one's kept and the
others' extra. A model built directly (``deepnet_jax.build``) has no budget to plan against
and defaults to ``full``.
The planner's figures are those of the backend it compiles for (the run's devices in
``trainer.build_run``; simulated CPU devices in ``python -m deepnet_jax.cli.plan``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import jax

from deepnet_jax.model import remat
from deepnet_jax.model.remat import GIB
from deepnet_jax.training import attention_auto
from deepnet_jax.training.config_checks import check_budget, is_auto
from deepnet_jax.training.progress import say
from deepnet_jax.training.run_config import RunConfig

if TYPE_CHECKING:
    from deepnet_jax.scale.targets import Target
    from deepnet_jax.training.memory_plan import CompiledStep, Plan


def candidate(config: RunConfig, policy: str, group: int) -> RunConfig:
    """A copy of ``config`` with ``model.remat_policy=policy``, ``model.scan_group_size=group``."""
    return config.replace(model={"remat_policy": policy, "scan_group_size": group})


def run_budget(
    config: RunConfig,
    devices: Sequence[jax.Device],
    target: Target | None = None,
) -> tuple[int, str]:
    """:func:`deepnet_jax.model.remat.budget_bytes` for a training config planned on
    ``devices`` (a deviceless ``target``: its chip's memory)."""
    chip = target.chip if target is not None else None
    return remat.budget_bytes(
        config.memory_budget_gb,
        devices,
        chip.memory_bytes if chip else 0,
        target.platform if target is not None else "",
        chip.name if chip else "",
    )


def choose(
    config: RunConfig,
    devices: Sequence[jax.Device],
    report: Callable[[str], None] = say,
    target: Target | None = None,
    judged_on: Target | None = None,
) -> tuple[RunConfig, Plan]:
    """The candidate of ``config`` (``remat_policy='auto'``, already validated: see
    ``deepnet_jax.training.config_checks.validate``) to train with, and its plan: on a chip with
    figures (``target``, deviceless, or ``judged_on``, the run's own accelerators) the one with
    the least predicted step time (``scale.kernels``; within :data:`TIE`, the least
    recomputation) among those whose planned peak fits,
    every flat candidate planned (the nested ones when none fits); elsewhere (CPU) the first
    that fits, cheapest first."""
    chosen, step = choose_step(config, devices, report, target, judged_on)
    return chosen, step.plan


def choose_step(
    config: RunConfig,
    devices: Sequence[jax.Device],
    report: Callable[[str], None] = say,
    target: Target | None = None,
    judged_on: Target | None = None,
) -> tuple[RunConfig, CompiledStep]:
    """:func:`choose`, keeping the chosen candidate's compiled step (its executable runs on
    ``devices`` when they are the process's own: ``planned_step.reuse``). Of the candidates
    that fit, only those within :data:`TIE` of the fastest so far keep their executables."""
    from deepnet_jax.training import memory_plan as planner
    from deepnet_jax.training.abstract_step import DoesNotFitError

    check_budget(config)
    judge = judged_on or target
    platform = judge.platform if judge is not None else devices[0].platform
    kernel = attention_auto.resolve(config, platform).model  # its candidates (attention_out)
    configs = {pair: candidate(config, *pair) for pair in remat.candidates(kernel)}
    budget, source = run_budget(config, devices, target)  # its errors before any compile
    judged_on = judged_on or target
    ranked = judged_on is not None and judged_on.chip.peak_flops > 0
    tried, fit, near, predicted = [], [], [], {}
    for (policy, group), c in configs.items():
        if ranked and group and any(g == 0 for _, g, _ in fit):
            break  # a flat scan fits: its nested candidates recompute more for less memory
        try:
            step = planner.compile_step(c, list(devices), judged_on)
        except DoesNotFitError:  # XLA itself refused it: more than the chip has
            continue
        tried.append((policy, group, step.plan.peak))
        if ranked:
            predicted[(policy, group)] = _predicted(step)
        if step.plan.peak <= budget:
            fit.append((policy, group, step.plan))
            if not ranked:  # CPU: the first that fits
                near = [(policy, group, c, step)]
                break
            near = _near_fastest([*near, (policy, group, c, step)])
    if not near:
        raise _none_fits(tried, budget, source)
    policy, group, c, step = near[0]
    candidates = [
        {"remat_policy": p, "scan_group_size": k, "peak": peak,
         "predicted_step_s": predicted.get((p, k)), "fits": peak <= budget}
        for p, k, peak in tried
    ]  # fmt: skip
    plan = dataclasses.replace(step.plan, auto_candidates=candidates)
    step = dataclasses.replace(step, plan=plan)
    report(_chosen_line(policy, group, step.plan, budget, source, fit if ranked else None, tried))
    return c, step


def _chosen_line(
    policy: str,
    group: int,
    plan: Plan,
    budget: int,
    source: str,
    fit: list[tuple[str, int, Plan]] | None,
    tried: list[tuple[str, int, int]],
) -> str:
    """The line ``auto`` reports: the chosen candidate and its peak against the budget, the
    fitting candidates' predicted steps (``fit``; None on a CPU: not ranked) and the ones that
    did not fit."""
    line = (
        f"model.remat_policy='auto': {_name(policy, group)}, planned peak "
        f"{_size(plan.peak)} per device of {budget / GIB:.2f} GiB ({source})"
    )
    if fit is not None:
        line += "; predicted step " + ", ".join(
            f"{_name(p, k)} {(r.calibrated_step_s or r.predicted_step_s) * 1e3:.3g} ms"
            for p, k, r in fit
        )
        line += " (calibrated)" if plan.calibrated_step_s else " (roofline sum)"
    unfit = [t for t in tried if t[2] > budget]
    return line + (f"; did not fit: {_tried(unfit)}" if unfit else "")


def _none_fits(tried: list[tuple[str, int, int]], budget: int, source: str) -> ValueError:
    """The one-line error when no candidate fits ``budget``."""
    if not tried:
        return ValueError(
            "model.remat_policy='auto': XLA refused every candidate for lack of device "
            "memory; shard over more devices (mesh.fsdp) or shrink the batch"
        )
    policy, group, peak = min(tried, key=lambda t: t[2])
    return ValueError(
        f"model.remat_policy='auto': no candidate fits {budget / GIB:.2f} GiB per device "
        f"({source}); the smallest planned peak is {_size(peak)} "
        f"({_name(policy, group)}); raise memory_budget_gb, shard over more devices "
        "(mesh.fsdp) or shrink the batch (data.batch_size / data.max_tokens)"
    )


def resolve(
    config: RunConfig,
    devices: Sequence[jax.Device],
    report: Callable[[str], None] = say,
) -> RunConfig:
    """``config`` itself unless ``model.remat_policy='auto'``; then a copy with the chosen
    policy and group size (see :func:`choose`: on the run's own TPUs or GPUs the fastest
    predicted, judged by their chip's figures). ``config`` is validated already."""
    return resolve_step(config, devices, report)[0]


def resolve_step(
    config: RunConfig,
    devices: Sequence[jax.Device],
    report: Callable[[str], None] = say,
) -> tuple[RunConfig, CompiledStep | None]:
    """:func:`resolve` and the chosen candidate's compiled step on ``devices`` (None when
    ``config`` is not ``auto``: nothing planned)."""
    from deepnet_jax.scale import targets

    check_budget(config)
    if not is_auto(config):
        return config, None
    return choose_step(config, devices, report, judged_on=targets.of_devices(list(devices)))


# Candidates predicted within this fraction of the fastest count as equal, and the one with the
# least recomputation among them (the earliest of remat.CANDIDATES) is taken: the fraction is
# inside the calibrated model's error, and the measurements it was set from are in
# docs/scaling.md, "The kernel model, calibrated".
TIE = 0.03


def _near_fastest(kept: list[tuple]) -> list[tuple]:
    """The fitting candidates (policy, group, config, step), in the order planned, whose
    predicted step is within :data:`TIE` of the fastest among them; only these keep their
    executables."""
    fastest = min(_predicted(k[3]) for k in kept)
    return [k for k in kept if _predicted(k[3]) <= fastest * (1 + TIE)]


def _predicted(step: CompiledStep) -> float:
    """A fitting candidate's predicted step time: calibrated where its chip's family has a
    calibration (``scale.calibration``), else the kernels' roofline sum."""
    return step.plan.calibrated_step_s or step.plan.predicted_step_s


def _name(policy: str, group: int) -> str:
    return f"remat_policy={policy!r}, scan_group_size={group}"


def _tried(tried: list[tuple[str, int, int]]) -> str:
    return ", ".join(f"{_name(p, k)} {_size(peak)}" for p, k, peak in tried)


def _size(nbytes: int) -> str:
    """``nbytes`` in GiB, or in MiB below 0.1 GiB (a tiny model's peak is not "0.00 GiB")."""
    return f"{nbytes / GIB:.2f} GiB" if nbytes >= GIB / 10 else f"{nbytes / 2**20:.1f} MiB"
