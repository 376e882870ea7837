"""The train step on this process's own accelerator: planned by its compiler (autotuning on),
run and timed, beside the deviceless plan of the same target — docs/scaling.md ("Measured on
one H100").

    python -m benchmarks.on_device --target=h100-1 --json=/tmp/on_device.json
    python -m benchmarks.on_device --target=h100-1 --configs=deepnet_1000l --compile_only \\
        --set=model.scan_group_size=-1 --set=data.max_tokens=8192

Per config: ``memory_plan.compile_step`` on ``jax.devices()`` (the plan's memory, FLOPs and
roofline bound, from the real compile), then the compiled step run on a fixed synthetic batch:
``--warmup`` updates, then ``--steps`` timed ones ended by ``block_until_ready``. Reported:
milliseconds per update, tokens per second, the measured MFU (flops.py's model FLOPs ÷ (time ×
the chip's datasheet peak)) beside the roofline's MFU upper bound, the device allocator's peak
(``memory_stats()["peak_bytes_in_use"]``) beside the plan's, and the first and last losses (the
batch is fixed, so the loss must fall). ``--deviceless`` plans the same step again on the
target's compile-only devices (the path CI takes without the accelerator) for the memory
comparison. Of several configs, each runs in its own process (the allocator's peak is a
process's). On a CPU host (``--target=cpu:N``) the same code runs on simulated devices: that
is what the tests check. ``--profile=DIR`` also writes the executable's optimized HLO and a
``jax.profiler`` trace of ``--profile_steps`` more updates into DIR, for
:mod:`benchmarks.device_profile`; ``benchmarks/on_device_calibration.sh`` runs the rows of
docs/scaling.md's "Measured on one H200" this way.

Each JSON line begins with the run's :func:`deepnet_jax.common.records.header` (command,
commit, date, machine, jax), taken as the run starts, one for all its configs, and says the
environment's ``XLA_FLAGS`` (``xla_flags``); the lines written before it did (those under
docs/records/h100 and h200*) have ``device_kind`` and ``jax`` alone.
"""

from __future__ import annotations

import argparse
import ast
import glob
import gzip
import json
import os
import subprocess
import sys
import time

import jax
import ml_collections
import numpy as np

from deepnet_jax import configs
from deepnet_jax.common import records
from deepnet_jax.data import synthetic
from deepnet_jax.scale import targets
from deepnet_jax.training import config_checks, memory_plan, remat_auto, train
from deepnet_jax.training.run_config import RunConfig

CONFIGS = ("default", "wmt17_ende", "magneto_lm", "bert_mlm")
GIB = 2**30


def load_config(name: str, overrides: list[str]) -> ml_collections.ConfigDict:
    """The shipped config ``name``'s (:mod:`deepnet_jax.configs`) with ``path.to.field=value``
    overrides (Python literals; anything else is taken as a string)."""
    config = configs.load(name)
    for item in overrides:
        path, _, text = item.partition("=")
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = text
        *parents, leaf = path.split(".")
        node = config
        for part in parents:
            node = node[part]
        node[leaf] = value
    return config


def _concrete_batch(abstract: dict[str, jax.ShapeDtypeStruct], arch: str, vocab: int) -> dict:
    """Random tokens shaped and sharded like the planned batch (every row full length); zeros
    for the keys the task has no values for (the stop flags: no stop requested)."""
    rows, length = abstract["inputs"].shape
    example = synthetic.batch(arch, rows, max(vocab, 8), length, np.random.default_rng(0))
    values = {k: example[k] if k in example else np.zeros(v.shape) for k, v in abstract.items()}
    return {k: jax.device_put(values[k].astype(v.dtype), v.sharding) for k, v in abstract.items()}


def _run(step: memory_plan.CompiledStep, batch: dict, warmup: int, steps: int) -> dict:
    """Run the compiled step ``warmup`` + ``steps`` times; the timed loop's seconds per update
    and the losses."""
    params, opt_state = step.state.create()
    learning_rate = np.float32(1e-4)
    bad = np.int32(0)
    losses = []
    start = 0.0
    for i in range(warmup + steps):
        if i == warmup:
            jax.block_until_ready((params, opt_state))
            start = time.perf_counter()
        params, opt_state, metrics = step.executable(
            params, opt_state, batch, np.int32(i), learning_rate, bad
        )
        losses.append(metrics["loss"])
    jax.block_until_ready((params, opt_state, metrics))
    seconds = (time.perf_counter() - start) / steps
    losses = [float(x) for x in losses]
    return {"step_s": seconds, "first_loss": losses[0], "last_loss": losses[-1]}


def _profile(step: memory_plan.CompiledStep, batch: dict, folder: str, steps: int) -> dict:
    """Trace ``steps`` updates with ``jax.profiler`` (its Perfetto JSON beside the XPlane) into
    ``folder`` and write the executable's optimized HLO there (``step.hlo.txt.gz``): what
    :mod:`benchmarks.device_profile` matches kernel by kernel. The files written."""
    os.makedirs(folder, exist_ok=True)
    hlo = os.path.join(folder, "step.hlo.txt.gz")
    with gzip.open(hlo, "wt") as f:
        f.write(step.executable.as_text())
    params, opt_state = step.state.create()
    args = (np.float32(1e-4), np.int32(0))
    params, opt_state, _ = step.executable(params, opt_state, batch, np.int32(0), *args)
    jax.block_until_ready((params, opt_state))
    with jax.profiler.trace(folder, create_perfetto_trace=True):
        for i in range(steps):
            params, opt_state, _ = step.executable(params, opt_state, batch, np.int32(i), *args)
        jax.block_until_ready((params, opt_state))
    traces = glob.glob(os.path.join(folder, "**", "*.*"), recursive=True)
    return {"steps": steps, "files": sorted(os.path.relpath(t, folder) for t in traces)}


def _resolve(config: RunConfig, devices: list, target: targets.Target) -> RunConfig:
    """The config with ``remat_policy='auto'`` replaced by the candidate the planner picks on
    these devices (the trainer's choice)."""
    if config_checks.is_auto(config):
        config, _ = remat_auto.choose(config, devices, lambda line: print(line), target)
    return config


def measure(
    name: str,
    target: targets.Target,
    overrides: list[str],
    warmup: int = 3,
    steps: int = 20,
    deviceless: bool = False,
    compile_only: bool = False,
    profile: str = "",
    profile_steps: int = 3,
) -> dict:
    """One config's figures on this process's devices (see the module docstring); with
    ``compile_only`` the step is compiled, not run; with ``profile`` (a folder) the run's
    compiled HLO and a trace of ``profile_steps`` more updates are written there."""
    devices = jax.devices()
    config = load_config(name, overrides)
    train.validate(config, len(devices))
    config = _resolve(RunConfig.from_config(config), devices, target).resolved()
    step = memory_plan.compile_step(config, devices, target)
    plan = step.plan
    ran = {}
    if not compile_only:  # (a compile alone leaves only the autotuner's scratch allocated)
        batch = _concrete_batch(step.batch, config.model.arch, config.model.vocab_size)
        ran = _run(step, batch, warmup, steps)
        stats = devices[0].memory_stats() or {}
        ran["allocator_peak"] = int(stats.get("peak_bytes_in_use", 0))
        if profile:
            ran["profile"] = _profile(step, batch, profile, profile_steps)
    n = len(devices)
    chip = target.chip
    rows, length = plan.batch_shape
    result = {
        "config": name,
        "overrides": overrides,
        "target": target.name,
        "device_kind": devices[0].device_kind,
        "jax": jax.__version__,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),  # (the command line does not show them)
        "remat_policy": config.model.remat_policy,
        "scan_group_size": config.model.scan_group_size,
        "num_params": plan.num_params,
        "batch_shape": [rows, length],
        "compile_s": plan.compile_s,
        "planned_peak": plan.peak,
        "planned_temporaries": plan.temporaries,
        "model_flops": plan.model_flops,
        "program_flops": plan.program_flops,
        "mfu_upper_bound": (plan.roofline or {}).get("mfu_upper_bound"),
        **ran,
    }
    if ran:
        result["tokens_per_s"] = rows * length / ran["step_s"]
    if ran and chip.peak_flops:
        result["mfu"] = plan.model_flops / n / (ran["step_s"] * chip.peak_flops)
        result["program_flops_utilization"] = (
            plan.program_flops / n / (ran["step_s"] * chip.peak_flops)
        )
    if deviceless:
        result["deviceless"] = _deviceless(config, target)
    return result


def _deviceless(config: RunConfig, target: targets.Target) -> dict:
    """The same step planned on the target's compile-only devices (or the error, one line)."""
    try:
        plan = memory_plan.plan(config, target=target)
    except Exception as e:  # the figure is optional: say why it is missing
        return {"error": " ".join(str(e).split())[:300]}
    return {"peak": plan.peak, "temporaries": plan.temporaries, "compile_s": plan.compile_s}


def table(results: list[dict]) -> str:
    """The results as a Markdown table."""
    lines = [
        "| config | remat | batch | ms/update | tokens/s | MFU | MFU bound | planned peak | "
        "allocator peak | deviceless peak | compile | loss first → last |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        d = r.get("deviceless", {})
        group = f", group {r['scan_group_size']}" if r["scan_group_size"] else ""
        loss = f"{r['first_loss']:.3f} → {r['last_loss']:.3f}" if "step_s" in r else "–"
        lines.append(
            f"| {r['config']} | {r['remat_policy']}{group} | {r['batch_shape'][0]}×"
            f"{r['batch_shape'][1]} | {_cell(r.get('step_s'), 1e3, '.1f')} | "
            f"{_cell(r.get('tokens_per_s'), 1, ',.0f')} | {_cell(r.get('mfu'), 1, '.1%')} | "
            f"{_cell(r.get('mfu_upper_bound'), 1, '.0%')} | "
            f"{_cell(r['planned_peak'], 1 / GIB, '.2f', ' GiB')} | "
            f"{_cell(r.get('allocator_peak'), 1 / GIB, '.2f', ' GiB')} | "
            f"{_cell(d.get('peak'), 1 / GIB, '.2f', ' GiB')} | {r['compile_s']:.0f} s | {loss} |"
        )
    return "\n".join(lines)


def _cell(value: float | None, scale: float, spec: str, unit: str = "") -> str:
    """``value × scale`` formatted, with its unit, or "–" where the figure is missing (a
    compile-only row, no deviceless plan)."""
    return "–" if value is None else format(value * scale, spec) + unit


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, help="the chip this process has, e.g. h100-1")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--set", action="append", default=[], help="path.to.field=value")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--deviceless", action="store_true")
    parser.add_argument("--compile_only", action="store_true", help="plan, do not run")
    parser.add_argument("--json", default="", help="append each result as a JSON line here")
    parser.add_argument("--profile", default="", help="a folder: the HLO and a trace go there")
    parser.add_argument("--profile_steps", type=int, default=3)
    parser.add_argument("--header", default="", help=argparse.SUPPRESS)  # a parent's, as JSON
    args = parser.parse_args(argv)
    # the record's header as the run starts (before --json grows): the commit it started from
    head = json.loads(args.header) if args.header else records.header()
    names = [n for n in args.configs.split(",") if n]
    if len(names) > 1:  # the allocator's peak is a process's: one process per config
        results = [_in_own_process(name, argv, head) for name in names]
    else:
        results = [_measure_here(names[0], args, head)]
    print(table(results))


def _measure_here(name: str, args: argparse.Namespace, head: dict) -> dict:
    """Measure one config in this process; print and (``--json``) append its JSON line: the
    record ``{**head, **result}``, ``head`` the run's :func:`records.header` (command, commit,
    date, machine, jax)."""
    target = targets.parse(args.target)
    if target.platform == "cpu":
        jax.config.update("jax_num_cpu_devices", target.num_devices)
    result = measure(
        name,
        target,
        args.set,
        args.warmup,
        args.steps,
        args.deviceless,
        args.compile_only,
        args.profile,
        args.profile_steps,
    )
    result = {**head, **result}  # (both say the same jax)
    print(json.dumps(result), flush=True)
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(result) + "\n")
    return result


def _in_own_process(name: str, argv: list[str], head: dict) -> dict:
    """Run this script for config ``name`` alone in a fresh process, its lines under this
    run's header ``head``; its result."""
    rest, skip = [], False
    for a in argv:  # every argument but --configs and --header (=value or its own value)
        if not skip and not a.startswith(("--configs", "--header")):
            rest.append(a)
        skip = a in ("--configs", "--header")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.on_device",
            f"--configs={name}",
            f"--header={json.dumps(head)}",
            *rest,
        ],
        capture_output=True,
        text=True,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        raise SystemExit(f"{name}: exit {proc.returncode}: {proc.stderr.strip()[-1500:]}")
    print(lines[-1], flush=True)
    return json.loads(lines[-1])


if __name__ == "__main__":
    main(sys.argv[1:])
