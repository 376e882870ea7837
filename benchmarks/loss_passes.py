"""The loss read from the logits in one pass or in separate reductions: which is faster where.

``deepnet_jax.training.logit_stats`` reads what the loss and the accuracy need from the
float32 logits [B, T, V] either in one variadic reduction with a written-out backward pass
(``one_pass``, what GPUs and TPUs lower) or as separate reductions that JAX differentiates
(``separate``, what the CPU lowers). For each shape this measures, on this machine's CPU, the
time of the label-smoothed loss, its sums and its gradient along each path (jitted; the median
over ``--rounds`` rounds in which all run in turn, reported as the ratio one_pass ÷ separate),
and beside them ``separate_argmax``, the CPU path as it was before its accuracy was read
without an argmax (``cpu_ratio_first_max``: separate ÷ separate_argmax),
and, compiled deviceless for ``--gpu`` (needs the ``gpu-plan`` extra), each path's kernels that
read the logits and the kernel model's seconds for the program (deterministic).

Run from the repository root::

    python -m benchmarks.loss_passes --out=docs/records/loss_passes.json
    python -m benchmarks.loss_passes --smoke   # one small shape, two rounds (the tests)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from deepnet_jax.common import records
from deepnet_jax.scale import kernels, targets
from deepnet_jax.training import logit_stats

PATHS = {"one_pass": "_one_pass_differentiable", "separate": "_separate"}
BEFORE = "separate_argmax"  # the CPU path with the accuracy read by jnp.argmax (until 2026-12-01)
SHAPES = ((16, 64, 8000), (8, 256, 32000))
SMOKE_SHAPES = ((2, 8, 512),)
SMOOTHING = 0.1


def _separate_argmax(logits_BTV: jax.Array, targets_BT: jax.Array) -> logit_stats.LogitStats:
    """The CPU path's statistics with the hit read as ``jnp.argmax(z) == y`` (XLA:CPU: a
    variadic (value, index) reduction), as it was before ``logit_stats._label_is_first_max``."""
    stats = logit_stats._separate(logits_BTV, targets_BT)
    argmax = jnp.argmax(logits_BTV.astype(jnp.float32), axis=-1)
    return stats._replace(hit=argmax == targets_BT)


def loss_fn(path: str) -> Callable:
    """``(logits, targets, weights) -> (loss_sum, (nll_sum, correct))`` along one path."""
    stats_fn = _separate_argmax if path == BEFORE else getattr(logit_stats, PATHS[path])

    def loss(z, y, w):
        s = stats_fn(z, y)
        nll = s.lse - s.label
        smoothed = (1 - SMOOTHING) * nll + SMOOTHING * (s.lse - s.mean)
        correct = jnp.sum(s.hit * w)
        return jnp.sum(smoothed * w), (jnp.sum(nll * w), correct)

    return jax.value_and_grad(loss, has_aux=True)


def cpu_times(shape: tuple[int, int, int], rounds: int) -> dict[str, float]:
    """Median seconds of one call per path on this CPU, the paths run in turn each round."""
    b, t, v = shape
    k1, k2 = jax.random.split(jax.random.key(0))
    args = (
        jax.random.normal(k1, shape) * 4.0,
        jax.random.randint(k2, (b, t), 0, v),
        jnp.ones((b, t), jnp.float32),
    )
    fns = {p: jax.jit(loss_fn(p)) for p in (*PATHS, BEFORE)}
    for fn in fns.values():
        jax.block_until_ready(fn(*args))
    seconds: dict[str, list[float]] = {p: [] for p in fns}
    for _ in range(rounds):
        for p, fn in fns.items():
            start = time.perf_counter()
            jax.block_until_ready(fn(*args))
            seconds[p].append(time.perf_counter() - start)
    return {p: statistics.median(s) for p, s in seconds.items()}


def gpu_kernels(shape: tuple[int, int, int], gpu: str) -> dict[str, dict[str, Any]]:
    """Per path, compiled deviceless for ``gpu``: the kernels reading the logits (the entry's
    instructions taking them as an operand) and the kernel model's predicted seconds."""
    target = targets.parse(gpu)
    on = jax.sharding.SingleDeviceSharding(targets.compile_devices(target)[0])
    b, t, v = shape
    specs = [((b, t, v), jnp.float32), ((b, t), jnp.int32), ((b, t), jnp.float32)]
    args = [jax.ShapeDtypeStruct(s, dtype, sharding=on) for s, dtype in specs]
    out = {}
    for p in PATHS:
        hlo = jax.jit(loss_fn(p)).lower(*args).compile().as_text()
        entry = hlo[hlo.index("\nENTRY") :].splitlines()
        name = re.search(rf"%(\S+) = f32\[{b},{t},{v}\]\S* parameter\(0\)", "\n".join(entry))
        operand = re.compile(rf"[(,] ?%{re.escape(name.group(1))}[,)]")
        found = kernels.kernels(hlo, target.chip)
        out[p] = {
            "logit_readers": sum(1 for line in entry if operand.search(line)),
            "predicted_s": sum(k.seconds for k in found),
        }
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the record (JSON) here")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--gpu", default="h100-1", help="deviceless GPU target ('' skips)")
    parser.add_argument("--smoke", action="store_true", help="one small shape, two rounds")
    args = parser.parse_args(argv)
    head = records.header()
    gpu = args.gpu if importlib.util.find_spec("jax_plugins.xla_cuda12") else ""
    rows, rounds = [], 2 if args.smoke else args.rounds
    for shape in SMOKE_SHAPES if args.smoke else SHAPES:
        times = cpu_times(shape, rounds)
        row = {"shape": list(shape), "cpu_s": times}
        row["cpu_ratio"] = times["one_pass"] / times["separate"]
        row["cpu_ratio_first_max"] = times["separate"] / times[BEFORE]
        if gpu:
            row["gpu"] = {"target": gpu, **gpu_kernels(shape, gpu)}
        rows.append(row)
        print(json.dumps(row))
    payload = {"smoothing": SMOOTHING, "rounds": rounds, "rows": rows}
    if args.out:
        records.write(args.out, payload, head)
    return {**head, **payload}


if __name__ == "__main__":
    main()
