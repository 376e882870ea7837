"""Our train step against torchscale's (the official PyTorch DeepNet code), same model, same CPUs.

Times one full training step (forward, backward, Adam update) of the same DeepNorm model, a
12-layer decoder and a 6L-6L encoder-decoder at d_model 256, in this library (the trainer's
jitted step) and in torchscale 0.3.0 (eager PyTorch, in a spawned child process), on the same
batches and the same pinned CPUs, in alternating rounds. Before the timed rounds it checks that
both compute the same function: our parameters loaded into a copy of torchscale's model must give
our logits to within :data:`AGREEMENT_RTOL` of their scale (``logits_max_abs_diff``, recorded),
else it stops. Prints one JSON line per row with the median step times
and ``ratio`` = ours / theirs (< 1: ours is faster), then an ``environment`` line.

Run from the repository root, after ``bash benchmarks/install_bench.sh`` (torch, fairscale and
torchscale 0.3.0)::

    python -m benchmarks.vs_torchscale [--rounds=10] [--steps_per_round=5]
    python -m benchmarks.vs_torchscale --smoke   # tiny models, 2 rounds (the test)

This module is the comparison and its command line; our side is
:mod:`benchmarks.vs_torchscale_ours`, torchscale's :mod:`benchmarks.vs_torchscale_theirs` (run
in a child process by :mod:`benchmarks.vs_torchscale_worker`), what both share
:mod:`benchmarks.vs_torchscale_setup`.

docs/benchmarks.md, "Against torchscale", has the settings matched on both sides, the
differences that remain, the output fields and the current figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.host_memory import malloc_env
from benchmarks.vs_torchscale_ours import (
    OursTrainer,
    jax_matmul_gflops,
    jax_versions,
    sinusoidal_positions,
)
from benchmarks.vs_torchscale_setup import TORCH_ADAM, Row, Setup, make_batches
from benchmarks.vs_torchscale_worker import LocalTheirs, RemoteTheirs
from deepnet_jax.common import records

# JAX is imported inside the functions of our side only: the torch child process (spawn
# re-imports this module) should load neither JAX nor XLA's thread pool.

ROWS = {"decoder": ("decoder", 0, 12), "encdec": ("encdec", 6, 6)}  # arch, N, M
# The largest logit difference allowed, relative to the largest logit: float32 sums taken in
# another order differ by ~1e-6 relative per layer (tests/test_interop_torchscale.py's fixtures:
# under 1e-5 through 5 layers); a weight in the wrong place moves logits by O(1)
AGREEMENT_RTOL = 1e-4
SMOKE_ROWS = {"decoder": ("decoder", 0, 2), "encdec": ("encdec", 1, 1)}


def log(message: str) -> None:
    """Progress on stderr (stdout carries only the JSON lines)."""
    print(message, file=sys.stderr, flush=True)


def alternate_rounds(
    ours: Callable[[int], tuple[float, float, float]],
    theirs: Callable[[int], tuple[float, float, float]],
    setup: Setup,
) -> dict[str, list[float]]:
    """Per-round mean step seconds, last losses and page faults per step of both sides: each
    round runs ``steps_per_round`` steps of one side, then of the other (torch first in even
    rounds), with ``settle_s`` idle seconds before each."""
    out: dict[str, list[float]] = {
        f"{side}_{key}": [] for side in ("ours", "theirs") for key in ("s", "loss", "faults")
    }
    sides = (("theirs", theirs), ("ours", ours))
    for r in range(setup.rounds):
        for name, run in sides if r % 2 == 0 else sides[::-1]:
            time.sleep(setup.settle_s)
            seconds, loss, faults = run(setup.steps_per_round)
            out[f"{name}_s"].append(seconds / setup.steps_per_round)
            out[f"{name}_loss"].append(loss)
            out[f"{name}_faults"].append(faults)
        log(
            f"round {r + 1}/{setup.rounds}: ours {out['ours_s'][-1]:.4f} s/step, "
            f"theirs {out['theirs_s'][-1]:.4f} s/step"
        )
    return out


def measure_row(setup: Setup, row: Row, theirs: RemoteTheirs | LocalTheirs) -> dict[str, Any]:
    """Build both models on the same batches, warm both up, check that they compute the same
    logits (:func:`logits_agreement`; SystemExit beyond :data:`AGREEMENT_RTOL`), alternate timed
    rounds."""
    batches = make_batches(setup, row)
    theirs.build(setup, row, batches, sinusoidal_positions(setup))
    theirs.start(max(setup.warmup_steps, 1))  # torch warms up while we compile
    start = time.perf_counter()
    ours = OursTrainer(setup, row, batches)
    _, ours_loss0, _ = ours.run(max(setup.warmup_steps, 1))  # includes the jit compile
    ours_warmup_s = time.perf_counter() - start
    theirs_warmup_s, theirs_loss0, _ = theirs.result()
    log(
        f"{row.name}: warmed up (ours {ours_warmup_s:.1f} s with the compile, "
        f"theirs {theirs_warmup_s:.1f} s)"
    )
    agreement = logits_agreement(ours, theirs, batches[0])
    diff, scale = agreement["logits_max_abs_diff"], agreement["logits_max_abs"]
    if diff > AGREEMENT_RTOL * scale:
        raise SystemExit(
            f"{row.name}: the two models compute different functions (logits differ by up to "
            f"{diff:.3g} of {scale:.3g}, allowed {AGREEMENT_RTOL} of it): nothing is timed"
        )
    log(f"{row.name}: logits agree within {diff:.2e}")
    times = alternate_rounds(ours.run, theirs.run, setup)
    warmup = {
        "ours_warmup_s": ours_warmup_s,
        "theirs_warmup_s": theirs_warmup_s,
        "ours_loss_first": ours_loss0,
        "theirs_loss_first": theirs_loss0,
    }
    shapes = {k: v.shape for k, v in batches[0].items()}
    return row_record(setup, row, ours, theirs.param_count, shapes, times, warmup) | agreement


def logits_agreement(
    ours: OursTrainer, theirs: RemoteTheirs | LocalTheirs, batch: dict[str, np.ndarray]
) -> dict[str, float]:
    """Do the two sides compute the same function? Our current parameters, exported with
    torchscale's names, are loaded into a copy of torchscale's model, and both give ``batch``'s
    logits with dropout off: ``logits_max_abs_diff`` (the largest difference) and
    ``logits_max_abs`` (the largest logit, its scale)."""
    mine = ours.eval_logits(batch)
    theirs_logits = theirs.logits_with(ours.torchscale_state_dict(), batch)
    return {
        "logits_max_abs_diff": float(np.max(np.abs(mine - theirs_logits))),
        "logits_max_abs": float(np.max(np.abs(mine))),
    }


def row_record(
    setup: Setup,
    row: Row,
    ours: OursTrainer,
    theirs_params: int,
    shapes: dict[str, tuple[int, ...]],
    times: dict[str, list[float]],
    warmup: dict[str, float],
) -> dict[str, Any]:
    """A row's JSON line: the medians of the timed rounds (``alternate_rounds``), their ratio,
    throughputs, parameter counts, FLOPs, page faults, the warm-up figures and the settings."""
    from deepnet_jax.scale import flops

    ours_s, theirs_s = statistics.median(times["ours_s"]), statistics.median(times["theirs_s"])
    step_flops = flops.train_flops_per_step(ours.model_config, shapes)
    tokens = setup.batch_size * setup.seq_len
    return {
        "row": row.name,
        "arch": row.arch,
        "num_encoder_layers": row.num_encoder_layers,
        "num_decoder_layers": row.num_decoder_layers,
        "d_model": setup.d_model,
        "num_heads": setup.num_heads,
        "ffn_dim": setup.ffn_dim,
        "vocab_size": setup.vocab_size,
        "batch_size": setup.batch_size,
        "seq_len": setup.seq_len,
        "ours_step_s": ours_s,
        "theirs_step_s": theirs_s,
        "ratio": ours_s / theirs_s,
        "ours_tokens_per_s": tokens / ours_s,
        "theirs_tokens_per_s": tokens / theirs_s,
        "ours_params": ours.param_count,
        "theirs_params": theirs_params,
        "params_rel_diff": abs(ours.param_count - theirs_params) / theirs_params,
        "train_flops_per_step": step_flops,
        "ours_flop_per_s": step_flops / ours_s,
        "theirs_flop_per_s": step_flops / theirs_s,
        "ours_page_faults_per_step": round(statistics.median(times["ours_faults"])),
        "theirs_page_faults_per_step": round(statistics.median(times["theirs_faults"])),
        "ours_step_s_rounds": times["ours_s"],
        "theirs_step_s_rounds": times["theirs_s"],
        "ours_warmup_s": warmup["ours_warmup_s"],
        "theirs_warmup_s": warmup["theirs_warmup_s"],
        "ours_loss_first": warmup["ours_loss_first"],
        "ours_loss_last": times["ours_loss"][-1],
        "theirs_loss_first": warmup["theirs_loss_first"],
        "theirs_loss_last": times["theirs_loss"][-1],
        "ln_vocab": math.log(setup.vocab_size),
        "rounds": setup.rounds,
        "steps_per_round": setup.steps_per_round,
        "dropout": setup.dropout,
        "activation": setup.activation,
        "remat_policy": setup.remat_policy,
        "remat_policy_used": ours.model_config.remat_policy,
        "scan_group_size_used": ours.model_config.scan_group_size,
        "fused_qkv": setup.fused_qkv,
        "dropout_rng": setup.dropout_rng,
        "scan_layers": setup.scan_layers,
        "scan_unroll": setup.scan_unroll,
        "torch_adam": setup.torch_adam,
    }


def pin_cpus(threads: int) -> list[int]:
    """Restrict this process (and the children it starts) to its first ``threads`` allowed
    CPUs, before XLA sizes its thread pool; returns the CPUs."""
    allowed = sorted(os.sched_getaffinity(0))
    cpus = allowed[:threads]
    os.sched_setaffinity(0, cpus)
    return cpus


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny models, 2 rounds (the test)")
    p.add_argument("--rows", default=",".join(ROWS), help="comma-separated: decoder, encdec")
    p.add_argument("--d_model", type=int, default=256)
    p.add_argument("--num_heads", type=int, default=4)
    p.add_argument("--ffn_dim", type=int, default=1024)
    p.add_argument("--vocab_size", type=int, default=8000)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--seq_len", type=int, default=128, help="target (and source) tokens")
    p.add_argument("--dropout", type=float, default=0.1, help="all three dropouts, both sides")
    p.add_argument("--activation", default="relu", choices=("relu", "gelu"))
    p.add_argument("--learning_rate", type=float, default=5e-4)
    p.add_argument(
        "--remat_policy", default="auto", help="ours: auto (the default), none, full, dots, qkv_fc1"
    )
    p.add_argument("--fused_qkv", action="store_true", help="ours: one q/k/v projection")
    p.add_argument("--dropout_rng", default="hash", choices=("hash", "jax"), help="ours: masks")
    p.add_argument(
        "--unrolled",
        dest="scan_layers",
        action="store_false",
        help="ours: a Python loop over layers instead of nn.scan (model.scan_layers=False)",
    )
    p.add_argument(
        "--scan_unroll", type=int, default=1, help="ours: layer bodies per scan iteration"
    )
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--steps_per_round", type=int, default=5)
    p.add_argument("--warmup_steps", type=int, default=3)
    p.add_argument("--settle_s", type=float, default=0.2, help="idle seconds before each run")
    p.add_argument("--threads", type=int, default=2, help="CPUs of both sides")
    p.add_argument("--torch_adam", default="fused", choices=TORCH_ADAM)
    p.add_argument("--num_batches", type=int, default=4, help="distinct batches, cycled")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--in_process", action="store_true", help="torch in this process")
    p.add_argument("--out", help="write the rows as a JSON record here (common.records)")
    args = p.parse_args(argv)
    if args.smoke:
        args.d_model, args.num_heads, args.ffn_dim, args.vocab_size = 32, 4, 64, 64
        args.batch_size, args.seq_len = 2, 16
        args.rounds, args.steps_per_round, args.warmup_steps, args.settle_s = 2, 2, 1, 0.0
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    setup = Setup(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Setup)})
    cpus = pin_cpus(setup.threads)
    table = SMOKE_ROWS if args.smoke else ROWS
    rows = [Row(name, *table[name]) for name in args.rows.split(",") if name]
    theirs = LocalTheirs() if args.in_process else RemoteTheirs()
    head, results = records.header(), []
    matmul = (setup.batch_size * setup.seq_len, setup.d_model, setup.ffn_dim)  # fc1's shape
    try:
        for row in rows:
            results.append(measure_row(setup, row, theirs))
            print(json.dumps(results[-1]), flush=True)
        gflops = {"ours": jax_matmul_gflops(*matmul), "theirs": theirs.matmul_gflops(*matmul)}
    finally:
        theirs.close()
    environment = {
        # each side's float32 matmul alone, the FFN's first [B·T, d] @ [d, ffn], one after the
        # other with nothing else running: how the two libraries' GEMMs compare on this CPU
        "matmul_shape": list(matmul),
        "ours_matmul_gflops_per_s": gflops["ours"],
        "theirs_matmul_gflops_per_s": gflops["theirs"],
        "row": "environment",
        **jax_versions(),
        **{k: v for k, v in theirs.info.items() if k != "param_count"},
        "python": platform.python_version(),
        "cpus": cpus,
        "threads": setup.threads,
        "torch_process": "in_process" if args.in_process else "spawned child",
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "malloc_env": malloc_env(),
    }
    print(json.dumps(environment), flush=True)
    if args.out:
        records.write(
            args.out, {"setup": dataclasses.asdict(setup), "rows": [*results, environment]}, head
        )


if __name__ == "__main__":
    main()
