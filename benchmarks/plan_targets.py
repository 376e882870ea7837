"""Every shipped config planned on the accelerators that matter, deviceless: the three tables of
docs/scaling.md ("Every shipped config on the targets that matter" and the two after it).

    python -m benchmarks.plan_targets --out=docs/records/plan_targets.json --docs=docs/scaling.md
    python -m benchmarks.plan_targets --configs=default --targets=v5e-8,h100-8 --depth= \
        --cpu_vs_tpu=
    python -m benchmarks.plan_targets --record=docs/records/plan_targets.json \
        --docs=docs/scaling.md                          # the blocks from a record, no planning

Each plan runs ``python -m deepnet_jax.cli.plan`` (a fresh process) and keeps its JSON line.
Three sets of rows, each a ``table`` of the record's ``rows``:

* ``targets``: every config × target. Mesh: models of 1B parameters or more are sharded over
  every device (``fsdp`` = devices), smaller ones data-parallel (``data`` = devices). A config
  whose batch has fewer rows than the target has devices gets its batch scaled
  (``data.batch_size`` and ``data.max_tokens`` × k, the smallest k with enough rows; the table
  says ×k): the configs are sized for a 2-core CPU. The mesh and batch come from a first plan
  on ``cpu:1``; where it fails every target of the config keeps its error.
* ``depth``: ``configs/deepnet_1000l.py`` flat and grouped (``scan_group_size`` 0 and -1) and
  its 3L-3L sibling flat, fsdp over every chip, on each ``--depth`` target.
* ``cpu_vs_tpu``: the same step, mesh and batch planned on ``cpu:<devices>`` and on the
  ``--cpu_vs_tpu`` target (temporaries per device).

``--out`` writes the record (command, commit, date, machine, jax: ``common.records``; the
compilers' versions under ``versions``) after every row, so that a killed run keeps what it
planned (``--resume`` plans only the rows it lacks or whose plan failed, at the same clean
commit); ``--docs`` writes blocks ``plan-targets``, ``plan-targets-depth`` and
``plan-targets-cpu-vs-tpu`` of that file from the record (:func:`targets_table`,
:func:`depth_table`, :func:`cpu_vs_tpu_table`; ``tests/test_plan_targets_record.py``
regenerates them). Byte, FLOP and collective figures are
deterministic for a commit and the compilers' versions; compile times are wall-clock.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from typing import Any

from deepnet_jax import configs
from deepnet_jax.common import records

CONFIGS = ("default", "ding_de_en", "iwslt14_deen", "wmt17_ende", "deepnet_1000l", "magneto_lm",
           "labml_shakespeare", "bert_mlm", "dlcl_30l")  # fmt: skip
TARGETS = ("v5e-8", "v5p-8", "v5p-64", "v6e-8", "h100-8", "h100-64")
DEPTH_TARGETS = ("v5p-8", "v5e-8")
DEPTH_SHAPES = ((500, 0), (500, -1), (3, 0))  # (layers per stack, scan_group_size)
CPU_VS_TPU = "v5p-8"
CPU_VS_TPU_CONFIGS = ("default", "wmt17_ende", "magneto_lm", "deepnet_1000l")
# configs that read the user's own files name a folder (the planner reads no data)
NEEDS = {"iwslt14_deen": ["--config.data.source_dir=/tmp/fairseq-prepared"]}
GIB = 2**30
MIB = 2**20
SHORT = {"all-gather": "AG", "reduce-scatter": "RS", "all-reduce": "AR", "all-to-all": "A2A",
         "collective-permute": "CP"}  # fmt: skip
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_plan(config: str, target: str, overrides: list[str]) -> tuple[dict | None, str]:
    """(the plan's JSON, or None; the planner's last stderr line, or its exit status where it
    printed none: a plan killed by a signal or the OOM killer is an error too)."""
    command = [sys.executable, "-m", "deepnet_jax.cli.plan", f"--config={config}"]
    command += [f"--target={target}", *NEEDS.get(config, []), *overrides]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=3600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    silent = f"the planner exited with status {proc.returncode} and no message"
    last = (proc.stderr.strip().splitlines() or [silent])[-1]
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


def _devices(target: str) -> int:
    from deepnet_jax.scale import targets as target_table

    return target_table.parse(target).num_devices


def first_plan(config: str, firsts: dict[str, tuple[dict | None, str]]) -> tuple[dict | None, str]:
    """The config's plan on ``cpu:1`` with its ``data.batch_size`` and ``data.max_tokens``
    (``_batch_size``, ``_max_tokens``), planned once per run (kept in ``firsts``)."""
    if config not in firsts:
        plan, error = run_plan(config, "cpu:1", [])
        if plan is not None:
            data = configs.load(config).data
            plan["_batch_size"], plan["_max_tokens"] = data.batch_size, data.get("max_tokens") or 0
        firsts[config] = plan, error
    return firsts[config]


class Recorder:
    """The record being made: every row written to ``path`` as soon as it is planned (a killed
    run keeps what it planned). With ``resume`` the rows without error of the record already at
    ``path`` are kept instead of planned again, and its header (it must be of this commit,
    clean: the figures are deterministic for a commit, the compile times not)."""

    def __init__(self, path: str | None, resume: bool = False):
        self.path, self.head, self.rows, self.done = path, records.header(), [], {}
        if resume and path and os.path.exists(path):
            with open(path) as f:
                old = json.load(f)
            if old["commit"] != self.head["commit"] or "+dirty" in (old["commit"] or "+dirty"):
                raise SystemExit(f"--resume: {path} is of commit {old['commit']}, not this one")
            self.head = {k: old[k] for k in self.head}
            # a row with any error, "" included (a plan killed before this rule), is planned again
            self.done = {_key(r): r for r in old["rows"] if r["error"] is None}
        self.versions = _versions()

    def reuse(self, row: dict) -> bool:
        """Keep the earlier record's row of ``row``'s key, if it has one."""
        if _key(row) in self.done:
            self.keep(self.done[_key(row)])
        return _key(row) in self.done

    def keep(self, row: dict) -> None:
        self.rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k not in ("plan", "cpu", "tpu")}))
        sys.stdout.flush()
        if self.path:
            records.write(self.path, {"versions": self.versions, "rows": self.rows}, self.head)

    def record(self) -> dict[str, Any]:
        return {**self.head, "versions": self.versions, "rows": self.rows}


def _key(row: dict) -> tuple:
    return tuple(row.get(k) for k in ("table", "config", "target", "layers", "group"))


def measure_targets(configs_: list[str], targets: list[str], firsts: dict, rec: Recorder) -> None:
    """Rows ``targets``: per config × target, the mesh rule's plan (or the error of the plan
    that failed, the first one's where that failed)."""
    for config, target in ((c, t) for c in configs_ for t in targets):
        row = {"table": "targets", "config": config, "target": target}
        if rec.reuse(row):
            continue
        first, error = first_plan(config, firsts)
        devices, plan, scaled = _devices(target), None, None
        if first is not None:
            scaled = math.ceil(devices / first["batch_shape"][0])
            plan, error = run_plan(config, target, mesh_overrides(first, devices))
        rec.keep({**row, "scaled": scaled, "error": error if plan is None else None, "plan": plan})


def measure_depth(targets: list[str], rec: Recorder) -> None:
    """Rows ``depth``: the 1,000-layer model flat vs grouped scan, and its 6-layer sibling,
    fsdp over every chip of each target."""
    for target, (layers, group) in ((t, s) for t in targets for s in DEPTH_SHAPES):
        row = {"table": "depth", "target": target, "layers": layers, "group": group}
        if rec.reuse(row):
            continue
        flags = ["--config.mesh.data=1", f"--config.mesh.fsdp={_devices(target)}"]
        flags += [f"--config.model.num_{s}_layers={layers}" for s in ("encoder", "decoder")]
        flags += [f"--config.model.scan_group_size={group}"]
        plan, error = run_plan("deepnet_1000l", target, flags)
        rec.keep({**row, "error": error if plan is None else None, "plan": plan})


def measure_cpu_vs_tpu(configs_: list[str], target: str, firsts: dict, rec: Recorder) -> None:
    """Rows ``cpu_vs_tpu``: each config with the mesh rule's mesh and batch for ``target``,
    planned on as many simulated CPU devices and on ``target``."""
    devices = _devices(target)
    for config in configs_:
        row = {"table": "cpu_vs_tpu", "config": config, "target": target}
        if rec.reuse(row):
            continue
        first, error = first_plan(config, firsts)
        cpu = tpu = None
        if first is not None:
            overrides = mesh_overrides(first, devices)
            cpu, error = run_plan(config, f"cpu:{devices}", overrides)
            if cpu is not None:
                tpu, error = run_plan(config, target, overrides)
        rec.keep({**row, "cpu": cpu, "tpu": tpu, "error": None if tpu else error})


def _rows(record: dict, table: str) -> list[dict]:
    return [r for r in record["rows"] if r["table"] == table]


def _target_row(r: dict) -> str:
    """One row of :func:`targets_table`."""
    plan, config, target = r["plan"], r["config"], r["target"]
    if plan is None:
        return f"| {config} | {target} | | | {r['error']} | | | | | |"
    mesh = "×".join(str(plan["mesh"][a]) for a in ("data", "fsdp", "tensor"))
    batch = f"{plan['batch_shape'][0]}×{plan['batch_shape'][1]}" + (
        f" (×{r['scaled']})" if r["scaled"] > 1 else ""
    )
    fits = {True: "yes", False: "**no**", None: "-"}[plan["fits"]]
    ratio = plan["program_flops"] / plan["model_flops"]
    moved = plan["collectives"]
    comm = ", ".join(f"{SHORT[k]} {v['bytes'] / MIB:.0f}" for k, v in moved.items() if v["count"])
    mfu = plan["roofline"]["mfu_upper_bound"] if plan["roofline"] else 0
    return (
        f"| {config} | {target} | {mesh} | {batch} | {plan['peak'] / GIB:.2f} GiB | {fits} | "
        f"{plan['compile_s']:.0f} s | {ratio:.2f} | {100 * mfu:.0f}% | {comm or '-'} |"
    )


def targets_table(record: dict) -> str:
    """Block ``plan-targets``: where the record was made, then per config × target the mesh
    (data × fsdp × tensor), the batch (rows × tokens, ×k where scaled), the peak per chip
    (GiB = 2^30 bytes), whether it fits, the compile time, program/model FLOPs, the roofline's
    MFU bound and the MiB (2^20 bytes) each collective moves per device per step."""
    versions = record.get("versions", {})
    compilers = ", ".join(f"{k} {versions.get(k)}" for k in ("libtpu", "jax-cuda12-plugin"))
    lines = [
        f"{records.made_line(record)} Compilers: {compilers}.",
        "",
        "| config | target | mesh d×f×t | batch | peak/chip | fits | compile | "
        "program/model FLOPs | MFU bound | collectives MiB/device/step |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    return "\n".join(lines + [_target_row(r) for r in _rows(record, "targets")])


def depth_table(record: dict) -> str:
    """Block ``plan-targets-depth``: per target and shape, the peak and temporaries per chip
    (GiB), whether it fits, program/model FLOPs and the compile time."""
    lines = [
        "| target | model | scan | peak/chip | fits | temporaries | program/model FLOPs "
        "| compile |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in _rows(record, "depth"):
        head = f"| {r['target']} | {r['layers']}L-{r['layers']}L | "
        head += "grouped (√L)" if r["group"] else "flat"
        plan = r["plan"]
        if plan is None:
            lines.append(f"{head} | {r['error']} | | | | |")
            continue
        fits = {True: "yes", False: "**no**", None: "-"}[plan["fits"]]
        ratio = plan["program_flops"] / plan["model_flops"]
        lines.append(
            f"{head} | {plan['peak'] / GIB:.2f} GiB | {fits} | {plan['temporaries'] / GIB:.2f} GiB"
            f" | {ratio:.2f} | {plan['compile_s']:.0f} s |"
        )
    return "\n".join(lines)


def cpu_vs_tpu_table(record: dict) -> str:
    """Block ``plan-targets-cpu-vs-tpu``: temporaries per device (MiB), XLA:CPU's beside the
    target's compiler's, and their ratio."""
    rows = _rows(record, "cpu_vs_tpu")
    target = rows[0]["target"] if rows else "-"
    lines = [
        f"| config | XLA:CPU | XLA:TPU ({target}) | TPU/CPU |",
        "|---|---|---|---|",
    ]
    for r in rows:
        if r["cpu"] is None or r["tpu"] is None:
            lines.append(f"| {r['config']} | {r['error']} | | |")
            continue
        a, b = r["cpu"]["temporaries"], r["tpu"]["temporaries"]
        lines.append(f"| {r['config']} | {a / MIB:,.1f} MiB | {b / MIB:,.1f} MiB | {b / a:.2f} |")
    return "\n".join(lines)


BLOCKS = {
    "plan-targets": targets_table,
    "plan-targets-depth": depth_table,
    "plan-targets-cpu-vs-tpu": cpu_vs_tpu_table,
}


def _list(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Plan every row the arguments name; the record (header taken before the first plan)."""
    rec, firsts = Recorder(args.out, args.resume), {}
    measure_targets(_list(args.configs), _list(args.targets), firsts, rec)
    measure_depth(_list(args.depth), rec)
    if args.cpu_vs_tpu:
        measure_cpu_vs_tpu(_list(args.cpu_vs_tpu_configs), args.cpu_vs_tpu, firsts, rec)
    return rec.record()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument(
        "--depth", default=",".join(DEPTH_TARGETS), help="targets of the depth rows ('' skips)"
    )
    parser.add_argument("--cpu_vs_tpu", default=CPU_VS_TPU, help="TPU target of those ('' skips)")
    parser.add_argument("--cpu_vs_tpu_configs", default=",".join(CPU_VS_TPU_CONFIGS))
    parser.add_argument("--out", help="write every plan as a JSON record here (common.records)")
    parser.add_argument("--resume", action="store_true", help="keep --out's rows (same commit)")
    parser.add_argument("--docs", help=f"write blocks {', '.join(BLOCKS)} of this file")
    parser.add_argument("--record", help="render --docs from this record instead of planning")
    args = parser.parse_args(argv)
    if args.record:
        with open(args.record) as f:
            record = json.load(f)
    else:
        record = measure(args)
    if args.docs:
        for name, render in BLOCKS.items():
            records.replace_block(args.docs, name, render(record))
    else:
        print("\n\n".join(render(record) for render in BLOCKS.values()))
    return record


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
    main(sys.argv[1:])
