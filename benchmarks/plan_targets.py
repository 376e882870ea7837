"""Every shipped config planned on the accelerators that matter, deviceless: the table of
docs/scaling.md ("Planned on TPU slices and GPU nodes").

    python -m benchmarks.plan_targets > /tmp/plan_targets.md          # every config × target
    python -m benchmarks.plan_targets --configs=default --targets=v5e-8,h100-8

Each cell runs ``python -m deepnet_jax.cli.plan`` (a fresh process) with the mesh rule below and
reads its JSON line. Mesh: models of 1B parameters or more are sharded over every device
(``fsdp`` = devices), smaller ones data-parallel (``data`` = devices). A config whose batch has
fewer rows than the target has devices gets its batch scaled (``data.batch_size`` and
``data.max_tokens`` × k, the smallest k with enough rows; the table says ×k): the configs are
sized for a 2-core CPU. Then the 1,000-layer model flat vs grouped (``--depth``), and the
CPU planner's temporaries beside the TPU compiler's (``--cpu_vs_tpu``). ``--out`` writes every
plan's JSON as a record (command, commit, date, machine, jax, the compilers' versions).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys

from deepnet_jax import configs
from deepnet_jax.common import records

CONFIGS = (
    "default",
    "ding_de_en",
    "iwslt14_deen",
    "wmt17_ende",
    "deepnet_1000l",
    "magneto_lm",
    "labml_shakespeare",
    "bert_mlm",
    "dlcl_30l",
)
TARGETS = ("v5e-8", "v5p-8", "v5p-64", "v6e-8", "h100-8", "h100-64")
# configs that read the user's own files name a folder (the planner reads no data)
NEEDS = {"iwslt14_deen": ["--config.data.source_dir=/tmp/fairseq-prepared"]}
GIB = 2**30
SHORT = {
    "all-gather": "AG",
    "reduce-scatter": "RS",
    "all-reduce": "AR",
    "all-to-all": "A2A",
    "collective-permute": "CP",
}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_plan(config: str, target: str, overrides: list[str]) -> tuple[dict | None, str]:
    """(the plan's JSON, or None; the planner's last stderr line)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "deepnet_jax.cli.plan",
            f"--config={config}",
            f"--target={target}",
            *NEEDS.get(config, []),
            *overrides,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=3600,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    last = (proc.stderr.strip().splitlines() or [""])[-1]
    return (json.loads(lines[-1]) if lines else None), last


def mesh_overrides(plan: dict, devices: int) -> list[str]:
    """The mesh rule of the module docstring, from a first (CPU, 1 device) plan's figures."""
    big = plan["num_params"] >= 1e9
    data, fsdp = (1, devices) if big else (devices, 1)
    rows = plan["batch_shape"][0]
    k = math.ceil(devices / rows) if rows < devices else 1
    scale = []
    if k > 1:
        scale = [f"--config.data.batch_size={k * plan['_batch_size']}"]
        if plan["_max_tokens"]:
            scale.append(f"--config.data.max_tokens={k * plan['_max_tokens']}")
    return [
        f"--config.mesh.data={data}",
        f"--config.mesh.fsdp={fsdp}",
        "--config.mesh.tensor=1",
        *scale,
    ]


def _config_batch(config: str) -> tuple[int, int]:
    data = configs.load(config).data
    return data.batch_size, data.get("max_tokens", 0) or 0


def row(config: str, target: str, plan: dict | None, error: str, scaled: int) -> str:
    if plan is None:
        return f"| {config} | {target} | | | {error} | | | | | |"
    mesh = "×".join(str(plan["mesh"][a]) for a in ("data", "fsdp", "tensor"))
    batch = f"{plan['batch_shape'][0]}×{plan['batch_shape'][1]}" + (
        f" (×{scaled})" if scaled > 1 else ""
    )
    fits = {True: "yes", False: "**no**", None: "-"}[plan["fits"]]
    ratio = plan["program_flops"] / plan["model_flops"]
    moved = plan["collectives"]
    comm = ", ".join(f"{SHORT[k]} {v['bytes'] / 2**20:.0f}" for k, v in moved.items() if v["count"])
    mfu = plan["roofline"]["mfu_upper_bound"] if plan["roofline"] else 0
    return (
        f"| {config} | {target} | {mesh} | {batch} | {plan['peak'] / GIB:.2f} GiB | {fits} | "
        f"{plan['compile_s']:.0f} s | {ratio:.2f} | {100 * mfu:.0f}% | {comm or '-'} |"
    )


HEADER = (
    "| config | target | mesh d×f×t | batch | peak/chip | fits | compile | "
    "program/model FLOPs | MFU bound | collectives MiB/device/step |\n"
    "|---|---|---|---|---|---|---|---|---|---|"
)


def table(configs: list[str], targets: list[str], kept: list[dict]) -> None:
    """Print the config × target table; append each plan to ``kept``."""
    from deepnet_jax.scale import targets as target_table

    print(HEADER, flush=True)
    for config in configs:
        first, error = run_plan(config, "cpu:1", [])
        if first is None:
            print(f"| {config} | (all) | | | {error} | | | | | |", flush=True)
            continue
        first["_batch_size"], first["_max_tokens"] = _config_batch(config)
        for target in targets:
            devices = target_table.parse(target).num_devices
            overrides = mesh_overrides(first, devices)
            scaled = math.ceil(devices / first["batch_shape"][0])
            plan, error = run_plan(config, target, overrides)
            kept.append({"table": "targets", "config": config, "target": target, "scaled": scaled,
                         "error": error if plan is None else None, "plan": plan})  # fmt: skip
            print(row(config, target, plan, error, scaled), flush=True)


def depth(target: str, kept: list[dict]) -> None:
    """The 1,000-layer model flat vs grouped scan, and its 6-layer sibling, on one target."""
    print(f"\n1,000-layer model on {target} (fsdp over every chip):\n")
    print("| model | scan | peak/chip | temporaries | compile |\n|---|---|---|---|---|")
    devices = __import__("deepnet_jax.scale.targets", fromlist=["parse"]).parse(target).num_devices
    mesh = ["--config.mesh.data=1", f"--config.mesh.fsdp={devices}"]
    for layers, group in ((500, 0), (500, -1), (3, 0)):
        shape = [
            f"--config.model.num_encoder_layers={layers}",
            f"--config.model.num_decoder_layers={layers}",
            f"--config.model.scan_group_size={group}",
        ]
        plan, error = run_plan("deepnet_1000l", target, mesh + shape)
        kept.append({"table": "depth", "target": target, "layers": layers, "group": group,
                     "error": error if plan is None else None, "plan": plan})  # fmt: skip
        name = f"{layers}L-{layers}L"
        scan = "grouped (√L)" if group else "flat"
        if plan is None:
            print(f"| {name} | {scan} | {error} | | |")
            continue
        print(
            f"| {name} | {scan} | {plan['peak'] / GIB:.2f} GiB | "
            f"{plan['temporaries'] / GIB:.2f} GiB | {plan['compile_s']:.0f} s |",
            flush=True,
        )


def cpu_vs_tpu(configs: list[str], target: str, kept: list[dict]) -> None:
    """Temporaries per device: the CPU planner's (simulated devices) beside the TPU compiler's."""
    from deepnet_jax.scale import targets as target_table

    devices = target_table.parse(target).num_devices
    print(f"\nTemporaries per device, XLA:CPU ({devices} simulated devices) vs {target}:\n")
    print("| config | CPU | TPU | TPU/CPU |\n|---|---|---|---|")
    for config in configs:
        first, _ = run_plan(config, "cpu:1", [])
        if first is None:
            continue
        first["_batch_size"], first["_max_tokens"] = _config_batch(config)
        overrides = mesh_overrides(first, devices)
        cpu, _ = run_plan(config, f"cpu:{devices}", overrides)
        tpu, _ = run_plan(config, target, overrides)
        kept.append({"table": "cpu_vs_tpu", "config": config, "target": target, "cpu": cpu,
                     "tpu": tpu})  # fmt: skip
        if cpu and tpu:
            a, b = cpu["temporaries"], tpu["temporaries"]
            print(
                f"| {config} | {a / 2**20:.1f} MiB | {b / 2**20:.1f} MiB | {b / a:.2f} |",
                flush=True,
            )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument(
        "--depth", default="v5p-8", help="target of the 1,000-layer rows ('' skips)"
    )
    parser.add_argument("--cpu_vs_tpu", default="v5e-8", help="TPU target of that table ('' skips)")
    parser.add_argument("--out", help="write every plan as a JSON record here (common.records)")
    args = parser.parse_args(argv)
    head, kept = records.header(), []
    configs = [c for c in args.configs.split(",") if c]
    table(configs, [t for t in args.targets.split(",") if t], kept)
    if args.depth:
        depth(args.depth, kept)
    if args.cpu_vs_tpu:
        cpu_vs_tpu(configs, args.cpu_vs_tpu, kept)
    if args.out:
        records.write(args.out, {"versions": _versions(), "rows": kept}, head)


def _versions() -> dict[str, str | None]:
    """The compilers' package versions (None where one is not installed)."""
    from importlib import metadata

    out: dict[str, str | None] = {}
    for name in ("jax", "libtpu", "jax-cuda12-plugin"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


if __name__ == "__main__":
    main()
