"""The kernel-level cost model (``deepnet_jax.scale.kernels``) of the shipped configs, deviceless,
against the steps measured on an H100 and an H200 — docs/scaling.md ("The kernel model").

    python -m benchmarks.kernel_model --out=docs/records/kernel_model.json --docs=docs/scaling.md

Each case compiles the trainer's step for its target on compile-only devices (XLA:GPU through
the ``gpu-plan`` extra, XLA:TPU through ``tpu``) and keeps the plan's predicted step time, MFU,
seconds per kernel class and the whole-step roofline bound. Where docs/scaling.md reports a
measured step of the same config on the same target, the case carries it (``measured``: the
milliseconds per update and, for the profiled step, the profile's milliseconds per class) with
where it comes from: those measurements kept no JSON record (their sessions printed them), so
they are inputs copied from the docs, flagged as such, never outputs of this command. The
ratio predicted ÷ measured is what the calibration (``deepnet_jax.scale.calibration``, fitted
by ``benchmarks.kernel_calibration``) corrects; the plan's calibrated step is beside it.

The cuDNN cases need cuDNN's library (``pip install -e ".[gpu-plan,cudnn-plan]"``): jax asks it
for its version while tracing the fused attention. Without it they are recorded with that
error instead of figures.

The record is written after each case: a run that is stopped (a SIGTERM, a session's end)
keeps the cases it planned and, started again at the same clean commit, plans only the rest.

``--docs`` writes the tables between the ``kernel-model``, ``kernel-classes`` and
``kernel-targets`` (``benchmarks.kernel_targets``) markers of that file;
``tests/test_kernel_model_record.py`` regenerates them from the committed record.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from benchmarks import kernel_model_tables, kernel_targets
from benchmarks.on_device import load_config
from deepnet_jax.common import records
from deepnet_jax.scale import targets
from deepnet_jax.training import attention_auto, config_checks, memory_plan, remat_auto
from deepnet_jax.training.run_config import RunConfig

# the H100 measurements of docs/scaling.md ("Measured on one H100"), with their source
_MEASURED_SOURCE = (
    "docs/scaling.md, 'Measured on one H100' (benchmarks.on_device on one H100 80GB HBM3, "
    "jax 0.11.2; printed, no JSON record kept)"
)
_PROFILE = {  # ms per class, the reference step's xprof profile (the same section)
    "attention": 120.0,
    "projections": 32.0,
    "ffn": 24.0,
    "norms": 13.0,
    "optimizer": 4.0,
    "loss": 3.0,
    "copies": 55.0,
}
# benchmarks.on_device's records: the H200's (benchmarks/on_device_calibration.sh) and the
# H100's rerun (docs/scaling.md); a case's "record" is (file, line)
H200 = "docs/records/h200/on_device.jsonl"
H200_RUN2 = "docs/records/h200_run2/on_device.jsonl"  # the second run: the current step
H100 = "docs/records/h100/on_device.jsonl"
_CUDNN = ["model.attention_impl=cudnn", "model.attention_dropout=0.0"]
_ONE_GPU = ["data.max_tokens=8192"]
_FSDP8 = ["mesh.data=1", "mesh.fsdp=8"]
_FSDP4 = ["mesh.data=1", "mesh.fsdp=4", "data.max_tokens=32768"]
_REF = "model.attention_impl=reference"
CASES: list[dict[str, Any]] = [
    # the measured steps, as they were measured (every config names its attention and remat)
    {
        "name": "default",
        "target": "h100-1",
        "set": [_REF, "model.remat_policy=none"],
        "record": (H100, 0),
    },
    {
        "name": "bert_mlm",
        "target": "h100-1",
        "set": [_REF, "model.remat_policy=none"],
        "record": (H100, 1),
    },
    {
        "name": "magneto_lm",
        "target": "h100-1",
        "set": [_REF, "model.remat_policy=none"],
        "record": (H100, 2),
    },
    {
        "name": "wmt17_ende",
        "target": "h100-1",
        "set": [_REF, "model.remat_policy=dots"],
        "ms": 279.1,
        "classes": _PROFILE,
    },
    {
        "name": "wmt17_ende",
        "target": "h100-1",
        "set": [*_CUDNN, "model.remat_policy=none"],
        "ms": 217.5,
    },
    {
        "name": "wmt17_ende",
        "target": "h100-1",
        "set": [*_CUDNN, "model.remat_policy=dots"],
        "record": (H100, 3),
    },
    # the same steps measured on one H200, their figures read from the record
    # (benchmarks/on_device_calibration.sh's on_device.jsonl; "record": its line)
    {
        "name": "wmt17_ende",
        "target": "h200-1",
        "set": [_REF, "model.remat_policy=dots"],
        "record": (H200, 4),
    },
    {
        "name": "wmt17_ende",
        "target": "h200-1",
        "set": [*_CUDNN, "model.remat_policy=none"],
        "record": (H200, 3),
    },
    {
        "name": "wmt17_ende",
        "target": "h200-1",
        "set": [*_CUDNN, "model.remat_policy=dots"],
        "record": (H200_RUN2, 0),
    },
    {
        "name": "wmt17_ende",
        "target": "h200-1",
        "set": [*_CUDNN, "model.remat_policy=full"],
        "record": (H200, 0),
    },
    # the defaults: auto's choice changed after both runs measured it (the TIE rule), so
    # the measurement of full (H200_RUN2 line 6) is not of the step this plans
    {"name": "wmt17_ende", "target": "h200-1", "set": []},
    # what the trainer now runs by default (attention_impl and remat_policy auto: cuDNN's
    # attention on a GPU, the fastest predicted policy that fits), and the chunked loss
    {"name": "wmt17_ende", "target": "h100-1", "set": []},
    {"name": "wmt17_ende", "target": "h100-1", "set": ["model.remat_policy=dots", "loss_chunk=32"]},
    {"name": "wmt17_ende", "target": "v5p-8", "set": []},
    {"name": "wmt17_ende", "target": "v5p-8", "set": ["model.remat_policy=dots", "loss_chunk=32"]},
    # DeepNet's 3.2B model (attention auto; a fixed remat policy: auto would compile six
    # candidates of it): 8,192 tokens a GPU (the config's 65,536 over 8), the state sharded
    # over the GPUs of a node (fsdp) and over a v5p-8's 4 chips
    {"name": "deepnet_3b", "target": "h100-1", "set": [*_ONE_GPU, "model.remat_policy=full"]},
    {
        "name": "deepnet_3b",
        "target": "h200-1",
        "set": [*_ONE_GPU, "model.remat_policy=dots"],
        "record": (H200_RUN2, 1),
    },
    {"name": "deepnet_3b", "target": "h100-8", "set": [*_FSDP8, "model.remat_policy=dots"]},
    {"name": "deepnet_3b", "target": "v5p-8", "set": [*_FSDP4, "model.remat_policy=dots"]},
]


def plan_case(case: dict[str, Any]) -> dict[str, Any]:
    """One case's plan on its target's compile-only devices: the kernel model's figures."""
    measured = "ms" in case or "record" in case
    # the steps measured on devices ran their stacks scanned, before configs/wmt17_ende.py
    # unrolled its 18 layers (61bc3a1): plan them as they ran (``as_measured`` in the record)
    pinned = ["model.scan_unroll=1"] if measured else []
    config = RunConfig.from_config(load_config(case["name"], case["set"] + pinned))
    target = targets.parse(case["target"])
    head = {"config": case["name"], "target": case["target"], "set": case["set"]}
    if pinned:
        head["as_measured"] = pinned
    try:
        config, plan = _plan(config, target)
    except (RuntimeError, ValueError) as e:  # e.g. cuDNN's attention needs cuDNN to trace
        return {**head, "error": " ".join(str(e).split())[:300]} | _measured(case)
    return {
        **head,
        "chosen": {
            "attention_impl": attention_auto.resolve(config, target.platform).model.attention_impl,
            "remat_policy": config.model.remat_policy,
            "scan_group_size": config.model.scan_group_size,
        },
        "config": case["name"],
        "target": case["target"],
        "set": case["set"],
        "batch_shape": list(plan.batch_shape),
        "model_flops": plan.model_flops,
        "peak_gib": plan.peak / 2**30,
        "fits": plan.fits,
        "kernels": len(plan.kernels),
        "predicted_step_s": plan.predicted_step_s,
        "predicted_mfu": plan.predicted_mfu,
        "calibrated_step_s": plan.calibrated_step_s,
        "calibrated_mfu": plan.calibrated_mfu,
        "kernel_classes": plan.kernel_classes,
        "roofline_bound_s": plan.roofline["bound_s"],
        "roofline_mfu_bound": plan.roofline["mfu_upper_bound"],
    } | _measured(case)


def _plan(config: RunConfig, target: targets.Target) -> tuple[RunConfig, memory_plan.Plan]:
    """The plan the trainer would make (``remat_policy='auto'``: the fastest predicted
    candidate that fits, as ``cli.plan`` plans it) and the config it plans."""
    if config_checks.is_auto(config):
        devices = targets.compile_devices(target)
        return remat_auto.choose(config, devices, lambda line: print(line), target)
    return config, memory_plan.plan(config, target=target)


def _measured(case: dict[str, Any]) -> dict[str, Any]:
    """The case's measurement: read from its record, or copied from the docs (the H100 steps
    that kept none); none where it has none."""
    if "record" in case:
        path, line = case["record"]
        with open(path) as f:
            row = [json.loads(text) for text in f if text.strip()][line]
        if (row["config"], row["target"], row["overrides"]) != (
            case["name"],
            case["target"],
            case["set"],
        ):
            raise ValueError(f"{path} line {line} is {row['config']} {row['overrides']}")
        source = f"{path}, line {line} (benchmarks.on_device, jax {row['jax']})"
        return {"measured": {"ms_per_update": row["step_s"] * 1e3, "source": source}}
    if "ms" not in case:
        return {}
    measured = {"ms_per_update": case["ms"], "source": _MEASURED_SOURCE}
    if "classes" in case:
        measured["profile_ms"] = case["classes"]
    return {"measured": measured}


def refresh_measured(path: str) -> dict[str, Any]:
    """The record at ``path`` with every case's measurement read again (:func:`_measured`):
    its plans as they were, its header saying this command refreshed them."""
    with open(path) as f:
        record = json.load(f)
    for planned in record["cases"]:
        key = (planned["config"], planned["target"], planned["set"])
        case = next(c for c in CASES if (c["name"], c["target"], c["set"]) == key)
        planned.pop("measured", None)
        planned.update(_measured(case))
    record["measured_refreshed_by"] = records.header()
    return record


def plan_cases(chosen: list[dict[str, Any]], out: str) -> dict[str, Any]:
    """The record of ``chosen``'s plans, written to ``out`` after each case (``incomplete``
    until the last is planned): started again at the same clean commit, it keeps the cases an
    interrupted run planned there (a planned case is a function of the commit and the case)."""
    record = {**records.header(), "incomplete": True, "cases": []}
    earlier = {_key(c): c for c in _interrupted_cases(out, record["commit"])}
    for case in chosen:
        key = (case["name"], case["target"], tuple(case["set"]))
        if key in earlier:
            print(f"kept from the interrupted run: {case['name']} on {case['target']}", flush=True)
            record["cases"].append(earlier[key])
            continue
        print(f"planning {case['name']} on {case['target']} {case['set']}", flush=True)
        record["cases"].append(plan_case(case))
        _write(out, record)
    del record["incomplete"]
    _write(out, record)
    return record


def _key(planned: dict[str, Any]) -> tuple[str, str, tuple[str, ...]]:
    return (planned["config"], planned["target"], tuple(planned["set"]))


def _interrupted_cases(out: str, commit: str | None) -> list[dict[str, Any]]:
    """The cases an interrupted run wrote to ``out`` at ``commit``; none where there is no
    such run or the work tree has changes (its plans could not be told from this one's)."""
    if not commit or commit.endswith("+dirty") or not os.path.exists(out):
        return []
    with open(out) as f:
        record = json.load(f)
    if not record.get("incomplete") or record.get("commit") != commit:
        return []
    return record["cases"]


def _write(path: str, record: dict[str, Any]) -> None:
    """Write ``record`` whole or not at all (a run killed while writing keeps the last one)."""
    with open(path + ".part", "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    os.replace(path + ".part", path)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the record (JSON) to write")
    parser.add_argument("--docs", help="a markdown file whose generated tables to rewrite")
    parser.add_argument("--only", type=int, nargs="*", help="case indices (default: all)")
    parser.add_argument(
        "--refresh_measured",
        action="store_true",
        help="keep --out's plans, read each case's measurement again (a new device record)",
    )
    args = parser.parse_args(argv)
    if args.refresh_measured:
        record = refresh_measured(args.out)
        _write(args.out, record)
    else:  # plan_cases writes the record as it goes
        chosen = [CASES[i] for i in args.only] if args.only else CASES
        record = plan_cases(chosen, args.out)
    if args.docs:
        records.replace_block(args.docs, "kernel-model", kernel_model_tables.summary_table(record))
        records.replace_block(args.docs, "kernel-classes", kernel_model_tables.class_table(record))
        records.replace_block(args.docs, "kernel-targets", kernel_targets.table(record))
    print(kernel_model_tables.summary_table(record))
    return record


if __name__ == "__main__":
    main(sys.argv[1:])
