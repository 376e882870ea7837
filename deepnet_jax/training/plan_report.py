"""A plan (:class:`deepnet_jax.training.memory_plan.Plan`) as text for people: memory per device and
its fit, FLOPs, collectives and the roofline estimate."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from deepnet_jax.training.memory_plan import Plan


def size(n: float) -> str:
    """Bytes as GiB or MiB, right-aligned in 10 characters plus the unit."""
    return f"{n / 2**30:10.3f} GiB" if n >= 2**30 else f"{n / 2**20:10.3f} MiB"


def _memory_lines(plan: Plan) -> list[str]:
    rows = [
        ("params", plan.params),
        ("opt_state", plan.opt_state),
        ("batch", plan.batch),
        *([("layout padding", plan.layout_padding)] if plan.layout_padding else []),
        ("temporaries", plan.temporaries),
        ("outputs not aliased", plan.outputs_not_aliased),
        ("peak", plan.peak),
    ]
    lines = [f"  {name:<20} {size(value)}" for name, value in rows]
    if plan.fits is not None:
        verdict = "fits" if plan.fits else "does not fit"
        usable = " usable" if "NVIDIA" in plan.device_kind else ""  # targets.usable_bytes
        lines[-1] += (
            f"  of {plan.device_memory / 2**30:.1f} GiB{usable}: {verdict} "
            f"({plan.peak / plan.device_memory:.1%})"
        )
    return lines


def _flops_lines(plan: Plan) -> list[str]:
    n = max(1, _devices(plan))
    ratio = plan.program_flops / plan.model_flops if plan.model_flops else 0.0
    expected = (
        f"; remat {plan.expected_recompute:.3f} expected"
        if plan.expected_recompute is not None
        else ""
    )
    return [
        "FLOPs per step, all devices:",
        f"  model (flops.py, no recompute)   {plan.model_flops / 1e9:14.2f} GFLOP",
        f"  program (matmuls, remat, loops)  {plan.program_flops / 1e9:14.2f} GFLOP "
        f"(× {ratio:.3f} the model's{expected})",
        f"  XLA cost_analysis × {n:<5}        {plan.xla_flops * n / 1e9:14.2f} GFLOP "
        "(counts each loop body once)",
    ]


def _collective_lines(plan: Plan) -> list[str]:
    used = {k: v for k, v in plan.collectives.items() if v["count"]}
    if not used:
        return ["collectives per step: none"]
    lines = ["collectives per step (bytes one device sends, ring algorithms):"]
    lines += [f"  {kind:<20} {c['count']:7d} ops {size(c['bytes'])}" for kind, c in used.items()]
    return lines


def _roofline_lines(plan: Plan) -> list[str]:
    r = plan.roofline
    if not r:
        return []
    return [
        "roofline estimate (a lower bound on the step time, not a measurement):",
        f"  step >= {r['bound_s'] * 1e3:.3f} ms ({r['limited_by']}-bound: compute "
        f"{r['compute_s'] * 1e3:.3f} ms, HBM {r['memory_s'] * 1e3:.3f} ms, collectives "
        f"{r['collective_s'] * 1e3:.3f} ms); MFU <= {100 * r['mfu_upper_bound']:.0f}%",
    ]


def _kernel_lines(plan: Plan) -> list[str]:
    """The kernel-level prediction: step time, MFU and each class's share."""
    if plan.predicted_step_s is None:
        return []
    total = plan.predicted_step_s
    lines = [
        f"kernel model (every kernel's roofline time, summed): step {total * 1e3:.2f} ms, "
        f"MFU {100 * plan.predicted_mfu:.1f}%",
    ]
    if plan.calibrated_step_s:
        lines.append(
            f"calibrated (each class × its measured factor, scale.calibration): step "
            f"{plan.calibrated_step_s * 1e3:.2f} ms, MFU {100 * plan.calibrated_mfu:.1f}%"
        )
    for kind, seconds in sorted(plan.kernel_classes.items(), key=lambda item: -item[1]):
        if seconds:
            lines.append(f"  {kind:<14} {seconds * 1e3:9.2f} ms {100 * seconds / total:5.1f}%")
    return lines


def kernel_table(plan: Plan) -> str:
    """Every kernel of the step, slowest first: class, opcode, executions per step, FLOPs, HBM
    bytes, predicted time and share, and its ``op_name`` (the model's module path)."""
    header = "| class | kernel | opcode | × | GFLOP | GB | ms | share | op_name |"
    rows = [header, "|---|---|---|---|---|---|---|---|---|"]
    total = plan.predicted_step_s or 1.0
    for k in sorted(plan.kernels, key=lambda k: -k.seconds):
        name = k.op_name.removeprefix("jit(train_step)/")
        rows.append(
            f"| {k.kind} | {k.name} | {k.opcode} | {k.count} | {k.flops / 1e9:.1f} | "
            f"{k.bytes / 1e9:.3f} | {k.seconds * 1e3:.3f} | {100 * k.seconds / total:.2f}% | "
            f"{name} |"
        )
    return "\n".join(rows)


def _devices(plan: Plan) -> int:
    count = 1
    for axis in plan.mesh.values():
        count *= axis
    return count


def text(plan: Plan) -> str:
    """The whole report (the JSON of the plan holds the same figures)."""
    lines = [
        f"target {plan.target} ({_devices(plan)} × {plan.device_kind}), mesh {plan.mesh}, "
        f"batch {plan.batch_shape[0]} × {plan.batch_shape[1]} tokens, "
        f"{plan.num_params / 1e9:.3f}B parameters, compiled in {plan.compile_s:.1f} s",
        "per device:",
        *_memory_lines(plan),
        *_flops_lines(plan),
        *_collective_lines(plan),
        *_roofline_lines(plan),
        *_kernel_lines(plan),
    ]
    if plan.decode_cache:
        lines.append(
            f"decoding cache (keys and values), one sequence of {plan.batch_shape[1]} tokens:"
            f" {size(plan.decode_cache).strip()}"
        )
    lines += [f"warning: {w}" for w in plan.warnings]
    return "\n".join(lines)
