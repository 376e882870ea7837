"""Per-device train-state bytes under FSDP, and the memory planner on the 1,000-layer model.

Run from the repository root (simulates 8 CPU devices itself)::

    python -m benchmarks.sharding            # the 1,000-layer config (500L-500L, d 512)
    python -m benchmarks.sharding --smoke    # the default config, fewer meshes (CI runs this)
    python -m benchmarks.sharding --out=docs/records/sharding.json --docs=docs/benchmarks.md

Rows (one JSON line each):

* ``state_bytes`` — for 1, 2, 4 and 8 devices on the ``fsdp`` axis (mesh (1, n, 1)): bytes of
  device 0's shards of the parameters and of the AdamW state, from the shardings of the
  abstract state (``sharding.sharded_state``; nothing allocated), and
  ``reduction_vs_1`` = bytes at 1 device ÷ bytes at n (target: ≥ 7× at 8).
* ``plan`` — ``deepnet_jax.training.memory_plan`` (the compiled train step on abstract inputs) on
  a few 8-device meshes: per-device params, optimizer state, temporaries, peak and compile time.

``--out`` writes the rows as a record (command, commit, machine, date); ``--docs`` writes the
``sharding-state`` table of that file from it (``tests/test_sharding_record.py`` regenerates it
from the committed record). The byte counts come from the shardings alone: they do not depend
on the machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import jax
import numpy as np

from deepnet_jax.common import records

MESHES = ((1, 8, 1), (2, 4, 1), (1, 4, 2), (8, 1, 1))


def _config(smoke: bool, mesh: tuple[int, int, int]):
    from deepnet_jax.configs import deepnet_1000l, default
    from deepnet_jax.training import config as train_config

    c = train_config.resolve((default if smoke else deepnet_1000l).get_config())
    c.mesh.data, c.mesh.fsdp, c.mesh.tensor = mesh
    c.model.attention_impl = (
        "reference"  # what attention_impl="auto" picks on a CPU (attention_auto)
    )
    return c


def state_row(smoke: bool, n: int, base: float | None) -> dict:
    from deepnet_jax.data import synthetic
    from deepnet_jax.model import architectures
    from deepnet_jax.model import inputs as model_inputs
    from deepnet_jax.scale import sharding
    from deepnet_jax.training import memory_plan, optimizers
    from deepnet_jax.training.run_config import RunConfig

    c = RunConfig.from_config(_config(smoke, (1, n, 1)))
    model = architectures.build(c.model)
    mesh = sharding.make_mesh(c.mesh, jax.devices()[:n])
    arch = c.model.arch
    example = synthetic.batch(arch, 1, c.model.vocab_size, 16, np.random.default_rng(0))
    state = sharding.sharded_state(
        lambda: model_inputs.init_variables(model, arch, example),
        optimizers.make_optimizer(c).init,
        mesh,
        sharding.logical_axis_rules(c.mesh),
    )
    params = memory_plan.device_bytes(state.abstract["params"])
    opt = memory_plan.device_bytes(state.abstract["opt_state"])
    total = params + opt
    return {
        "row": "state_bytes",
        "fsdp_devices": n,
        "params_bytes": params,
        "opt_state_bytes": opt,
        "state_bytes": total,
        "reduction_vs_1": round((base or total) / total, 3),
    }


def plan_row(smoke: bool, mesh: tuple[int, int, int]) -> dict:
    from deepnet_jax.training import memory_plan

    result = dataclasses.asdict(memory_plan.plan(_config(smoke, mesh)))
    result.pop("memory_analysis")
    return {"row": "plan", **result, "compile_s": round(result["compile_s"], 2)}


def table(record: dict) -> str:
    """The per-device state table of docs/benchmarks.md from a record's ``state_bytes`` rows."""
    lines = [
        "| fsdp devices | params | optimizer state | state per device | 1 device ÷ n devices |",
        "|---|---|---|---|---|",
    ]
    for r in (r for r in record["rows"] if r["row"] == "state_bytes"):
        ratio = "1" if r["fsdp_devices"] == 1 else f"{r['reduction_vs_1']:.2f}×"
        gb = [f"{r[k] / 1e9:.2f} GB" for k in ("params_bytes", "opt_state_bytes", "state_bytes")]
        lines.append(f"| {r['fsdp_devices']} | {' | '.join(gb)} | {ratio} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="default config, two meshes")
    parser.add_argument("--out", help="write the rows as a JSON record here")
    parser.add_argument("--docs", help="write the sharding-state table of this file")
    args = parser.parse_args()
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", 8)
    print(json.dumps({"devices": jax.device_count(), "backend": jax.default_backend()}))
    record = {**records.header(), "config": "default" if args.smoke else "deepnet_1000l"}
    rows, base = [], None
    for n in (1, 2, 4, 8):
        rows.append(state_row(args.smoke, n, base))
        base = base or rows[-1]["state_bytes"]
        print(json.dumps(rows[-1]), flush=True)
    for mesh in MESHES[:2] if args.smoke else MESHES:
        rows.append(plan_row(args.smoke, mesh))
        print(json.dumps(rows[-1]), flush=True)
    record["rows"] = rows
    if args.out:
        with open(args.out, "w") as f:
            json.dump(record, f, indent=1)
            f.write("\n")
    if args.docs:
        records.replace_block(args.docs, "sharding-state", table(record))


if __name__ == "__main__":
    main()
