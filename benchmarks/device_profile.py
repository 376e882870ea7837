"""A GPU profile of the train step against the kernel model, kernel by kernel — docs/scaling.md
("Measured on one H200").

    python -m benchmarks.device_profile --profile=PROFILE.tgz --record=on_device.jsonl \\
        --row=N --out=docs/records/h200_profile_<name>.json

``benchmarks.on_device --profile=DIR`` writes the executable's optimized HLO
(``step.hlo.txt.gz``) and a ``jax.profiler`` trace of a few updates (its Perfetto JSON) into
DIR; ``benchmarks/on_device_calibration.sh`` packs DIR as a ``.tgz``. This reads them on any
machine: every GPU kernel of the trace is matched to the HLO instruction that launched it, and
the instruction's class and predicted roofline time come from :mod:`deepnet_jax.scale.kernels`
run on that same HLO (the device's own compile, autotuned), so predicted ÷ measured is per
kernel and per class with no second compile in between.

Matching: XLA names a fusion's kernel after the fusion (``loop_add_fusion.6`` launches
``loop_add_fusion_6``). Library kernels carry their library's names (cuBLAS ``nvjet_*`` and
``sm90_xmma_gemm_*``, cuDNN's ``cudnn_*`` attention): each run of them between two named
kernels is given, in order, to the custom calls of the schedule between those two instructions
(cuDNN's kernels to cuDNN's calls, the rest to cuBLAS's). Copies the runtime makes itself
(``memcpy*``, memsets) have no instruction: they are counted as ``copies``, unpredicted.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import sys
import tarfile
from typing import Any

from deepnet_jax.common import records
from deepnet_jax.scale import kernels, targets
from deepnet_jax.scale.hlo_module import Module, as_module

_RUNTIME = ("memcpy", "memset", "Memset", "Memcpy")
_CUDNN = ("cudnn", "sdpa")


def read_profile(path: str) -> tuple[str, list[dict]]:
    """The HLO text and the device's kernel events (``name``, ``ts``, ``dur`` in µs, in launch
    order) of a profile folder packed as ``.tgz``."""
    hlo, trace = "", None
    with tarfile.open(path) as tar:
        for member in tar.getmembers():
            if member.name.endswith("step.hlo.txt.gz"):
                hlo = gzip.decompress(tar.extractfile(member).read()).decode()
            elif member.name.endswith("perfetto_trace.json.gz"):
                trace = json.loads(gzip.decompress(tar.extractfile(member).read()))
    if not hlo or trace is None:
        raise SystemExit(f"--profile: {path} holds no step.hlo.txt.gz or perfetto_trace.json.gz")
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    devices = {
        e["pid"]
        for e in events
        if e.get("ph") == "M" and "/device:" in str(e.get("args", {}).get("name", ""))
    }
    found = [e for e in events if e.get("ph") == "X" and e.get("pid") in devices]
    return hlo, sorted(found, key=lambda e: e["ts"])


def schedule(module: Module) -> tuple[dict[str, tuple[str, int]], dict[str, list[str]]]:
    """Kernel name → (computation, position) for every instruction of a parsed module, and
    each computation's custom calls in schedule order (the printed order of a scheduled
    module)."""
    where, calls = {}, {}
    for comp, instructions in module.computations.items():
        calls[comp] = []
        for i, ins in enumerate(instructions):
            where[ins.name.replace(".", "_").replace("-", "_")] = (comp, i)
            if ins.opcode == "custom-call":
                calls[comp].append(ins.name)
    return where, calls


def match(events: list[dict], hlo: str) -> list[str | None]:
    """Per event, the HLO instruction that launched it (None for the runtime's own copies and
    for library kernels with no custom call between their named neighbours)."""
    module = as_module(hlo)
    where, calls = schedule(module)
    position = {ins.name: i for c in module.computations.values() for i, ins in enumerate(c)}
    cudnn_calls = {n for names in calls.values() for n in names if _is_cudnn(module, n)}
    named = [where.get(e["name"]) for e in events]
    out: list[str | None] = [None] * len(events)
    for i, found in enumerate(named):
        if found:
            out[i] = module.computations[found[0]][found[1]].name
    i = 0
    while i < len(events):
        if named[i] or events[i]["name"].startswith(_RUNTIME):
            i += 1
            continue
        j = i
        while j < len(events) and not named[j]:
            j += 1
        before = named[i - 1] if i else None
        after = named[j] if j < len(events) else None
        between = _calls_between(before, after, calls, position)
        _assign(
            [k for k in range(i, j) if not events[k]["name"].startswith(_RUNTIME)],
            events,
            between,
            out,
            cudnn_calls,
        )
        i = j
    return out


def _calls_between(before, after, calls, position) -> list[str]:
    """The custom calls scheduled after ``before`` and before ``after`` ((computation,
    position) pairs; either may be None, or in different computations)."""
    if before and after and before[0] == after[0]:
        return [c for c in calls[before[0]] if before[1] < position[c] < after[1]]
    out = []
    if before:
        out += [c for c in calls[before[0]] if position[c] > before[1]]
    if after:
        out += [c for c in calls[after[0]] if position[c] < after[1]]
    return out


def _is_cudnn(module: Module, name: str) -> bool:
    """Whether custom call ``name`` is cuDNN's."""
    ins = next(i for c in module.computations.values() for i in c if i.name == name)
    return 'custom_call_target="__cudnn' in ins.rest


def _assign(indices: list[int], events, between: list[str], out, cudnn_calls: set) -> None:
    """Give the library kernels at ``indices`` to the custom calls ``between``, in order:
    cuDNN's kernels to cuDNN's calls, the others to the rest (one kernel each, the last call
    taking any extra kernels: cuBLAS's split-K reductions, say)."""
    cudnn = [c for c in between if c in cudnn_calls]
    other = [c for c in between if c not in cudnn_calls]
    n_cudnn = n_other = 0
    for k in indices:
        if any(s in events[k]["name"] for s in _CUDNN):
            pool, n = cudnn, n_cudnn
            n_cudnn += 1
        else:
            pool, n = other, n_other
            n_other += 1
        out[k] = pool[min(n, len(pool) - 1)] if pool else None


def compare(hlo: str, events: list[dict], steps: int, chip, model_flops: float) -> dict:
    """Measured and predicted milliseconds per step, per class and for the slowest kernels."""
    predicted = {k.name: k for k in kernels.kernels(hlo, chip, 1, model_flops)}
    owner = match(events, hlo)
    measured_class: dict[str, float] = collections.defaultdict(float)
    per_kernel: dict[str, float] = collections.defaultdict(float)
    unmatched = collections.defaultdict(float)
    for event, name in zip(events, owner, strict=True):
        ms = event["dur"] / 1e3 / steps
        kernel = predicted.get(name) if name else None
        if kernel is None:
            kind = "copies" if event["name"].startswith(_RUNTIME) else "unmatched"
            unmatched[event["name"][:60]] += ms
        else:
            kind = kernel.kind
            per_kernel[name] += ms
        measured_class[kind] += ms
    predicted_class = {k: v * 1e3 for k, v in kernels.by_class(list(predicted.values())).items()}
    classes = sorted(
        set(predicted_class) | set(measured_class), key=lambda c: -measured_class.get(c, 0.0)
    )
    return {
        "measured_kernel_ms": sum(e["dur"] for e in events) / 1e3 / steps,
        "predicted_ms": sum(predicted_class.values()),
        "classes": {
            c: {"measured_ms": measured_class.get(c, 0.0), "predicted_ms": predicted_class.get(c)}
            for c in classes
        },
        "slowest": _slowest(per_kernel, predicted),
        "unpredicted": dict(sorted(unmatched.items(), key=lambda kv: -kv[1])[:15]),
    }


def _slowest(per_kernel: dict[str, float], predicted: dict, top: int = 25) -> list[dict]:
    """The ``top`` kernels by measured time, with their prediction and class."""
    rows = []
    for name, ms in sorted(per_kernel.items(), key=lambda kv: -kv[1])[:top]:
        k = predicted[name]
        rows.append(
            {
                "kernel": name,
                "class": k.kind,
                "opcode": k.opcode,
                "runs": k.count,
                "measured_ms": ms,
                "predicted_ms": k.seconds * 1e3,
                "gflop": k.flops / 1e9,
                "mbytes": k.bytes / 1e6,
                "op_name": k.op_name[-90:],
            }
        )
    return rows


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", required=True, help="a .tgz of on_device --profile's folder")
    parser.add_argument("--record", required=True, help="on_device's JSON lines")
    parser.add_argument("--row", type=int, required=True, help="the profiled row's line (0-based)")
    parser.add_argument("--out", default="", help="write the record (JSON) here")
    args = parser.parse_args(argv)
    head = records.header()  # before --out is rewritten: the commit the figures come from
    with open(args.record) as f:
        row = [json.loads(line) for line in f if line.strip()][args.row]
    if "profile" not in row:
        raise SystemExit(f"--row: line {args.row} of {args.record} was not profiled")
    hlo, events = read_profile(args.profile)
    chip = targets.parse(row["target"]).chip
    result: dict[str, Any] = {
        "config": row["config"],
        "overrides": row["overrides"],
        "target": row["target"],
        "device_kind": row["device_kind"],
        "device_jax": row["jax"],
        "measured_step_ms": row["step_s"] * 1e3,
        **compare(hlo, events, row["profile"]["steps"], chip, row["model_flops"]),
    }
    print(json.dumps(result, indent=1))
    if args.out:
        records.write(args.out, result, head)


if __name__ == "__main__":
    main(sys.argv[1:])
