"""Our train step against torchscale's (the official PyTorch DeepNet code), same model, same CPUs.

Times one full training step (forward, backward, Adam update) of the same DeepNorm model, a
12-layer decoder and a 6L-6L encoder-decoder at d_model 256, in this library (the trainer's
jitted step) and in torchscale 0.3.0 (eager PyTorch, in a spawned child process), on the same
batches and the same pinned CPUs, in alternating rounds. Prints one JSON line per row with the
median step times and ``ratio`` = ours / theirs (< 1: ours is faster), then an ``environment``
line.

Run from the repository root, after ``bash benchmarks/install_bench.sh`` (torch, fairscale and
torchscale 0.3.0)::

    python -m benchmarks.vs_torchscale [--rounds=10] [--steps_per_round=5]
    python -m benchmarks.vs_torchscale --smoke   # tiny models, 2 rounds (the test)

docs/benchmarks.md, "Against torchscale", has the settings matched on both sides, the
differences that remain, the output fields and the current figures.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.metadata
import importlib.util
import json
import math
import multiprocessing
import os
import platform
import statistics
import sys
import time
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.host_memory import malloc_env, minor_page_faults

# JAX is imported inside the functions of our side only: the torch child process (spawn
# re-imports this module) should load neither JAX nor XLA's thread pool.

ROWS = {"decoder": ("decoder", 0, 12), "encdec": ("encdec", 6, 6)}  # arch, N, M
SMOKE_ROWS = {"decoder": ("decoder", 0, 2), "encdec": ("encdec", 1, 1)}
ADAM_B1, ADAM_B2, ADAM_EPS = 0.9, 0.98, 1e-8
TORCH_ADAM = ("foreach", "for_loop", "fused")


@dataclasses.dataclass(frozen=True)
class Setup:
    """Model width, batch shape and timing settings shared by both rows."""

    d_model: int
    num_heads: int
    ffn_dim: int
    vocab_size: int
    batch_size: int
    seq_len: int
    dropout: float
    activation: str
    learning_rate: float
    remat_policy: str
    fused_qkv: bool
    dropout_rng: str
    scan_layers: bool
    rounds: int
    steps_per_round: int
    warmup_steps: int
    settle_s: float
    threads: int
    torch_adam: str
    num_batches: int
    seed: int


@dataclasses.dataclass(frozen=True)
class Row:
    """One model: its name, architecture and depths (N encoder, M decoder layers)."""

    name: str
    arch: str
    num_encoder_layers: int
    num_decoder_layers: int


def make_batches(setup: Setup, row: Row) -> list[dict[str, np.ndarray]]:
    """``num_batches`` batches of random non-padding tokens in [1, vocab): ``inputs`` and
    ``targets`` [B, T] (the input shifted by one), ``weights`` all 1, ``src`` [B, T] (encdec)."""
    rng = np.random.default_rng(setup.seed)
    B, T, V = setup.batch_size, setup.seq_len, setup.vocab_size
    batches = []
    for _ in range(setup.num_batches):
        seq = rng.integers(1, V, size=(B, T + 1), dtype=np.int32)
        batch = {
            "inputs": seq[:, :-1].copy(),
            "targets": seq[:, 1:].copy(),
            "weights": np.ones((B, T), np.float32),
        }
        if row.arch == "encdec":
            batch["src"] = rng.integers(1, V, size=(B, T), dtype=np.int32)
        batches.append(batch)
    return batches


# ---------------------------------------------------------------------------------------------
# Ours: the library's train step.


def run_config(setup: Setup, row: Row) -> Any:
    """The training config (``train_config.default_config()``) of one row on our side, typed
    (``RunConfig``)."""
    from deepnet_jax.training import config as train_config
    from deepnet_jax.training.run_config import RunConfig

    c = train_config.default_config()
    m = c.model
    m.attention_impl = "reference"  # what attention_impl="auto" picks on a CPU (attention_auto)
    m.arch, m.scheme = row.arch, "deepnorm"
    m.num_encoder_layers, m.num_decoder_layers = row.num_encoder_layers, row.num_decoder_layers
    m.d_model, m.num_heads, m.ffn_dim = setup.d_model, setup.num_heads, setup.ffn_dim
    m.vocab_size = setup.vocab_size
    m.max_len = max(256, setup.seq_len)
    m.dropout = m.attention_dropout = m.activation_dropout = setup.dropout
    m.activation = setup.activation
    m.positions, m.tie_embeddings, m.share_embeddings = "sinusoidal", False, False
    m.remat_policy = setup.remat_policy
    m.fused_qkv = setup.fused_qkv
    m.dropout_rng = setup.dropout_rng
    m.scan_layers = setup.scan_layers
    m.dtype = m.param_dtype = "float32"
    o = c.optimizer
    o.learning_rate, o.b1, o.b2, o.eps = setup.learning_rate, ADAM_B1, ADAM_B2, ADAM_EPS
    o.weight_decay, o.grad_clip = 0.0, 0.0
    c.label_smoothing = 0.0
    c.grad_accum_steps = 1
    c.seed = setup.seed
    c.data.batch_size, c.data.max_len = setup.batch_size, setup.seq_len  # what auto plans for
    return RunConfig.from_config(c)


class OursTrainer:
    """Our jitted train step on a fixed list of batches; ``run(n)`` times n steps."""

    def __init__(self, setup: Setup, row: Row, batches: list[dict[str, np.ndarray]]):
        import jax

        from deepnet_jax.model import architectures
        from deepnet_jax.model import inputs as model_inputs
        from deepnet_jax.training import actions as train_actions
        from deepnet_jax.training import optimizers, remat_auto
        from deepnet_jax.training import steps as train_steps

        self._jax = jax
        config = remat_auto.resolve(  # auto: the planned choice, named on stderr
            run_config(setup, row), jax.devices()[:1], report=lambda m: print(m, file=sys.stderr)
        )
        self.model_config = config.model
        model = architectures.build(config.model)
        self.params = model_inputs.init_params(model, row.arch, batches[0], config.seed)
        self.param_count = sum(int(np.prod(p.shape)) for p in jax.tree.leaves(self.params))
        optimizer = optimizers.make_optimizer(config)
        self.opt_state = optimizer.init(self.params)
        loss_fn = train_steps.make_loss_fn(model, row.arch, config.label_smoothing)
        self.step_fn = train_steps.make_train_step(  # the trainer's step, with its gate
            loss_fn,
            optimizer,
            jax.random.key(config.seed + 1),
            halt_after=train_actions.halt_after(config),
        )
        self.bad_in_a_row = jax.numpy.zeros((), jax.numpy.int32)
        self.batches = [jax.device_put(b) for b in batches]
        self.lr = np.float32(setup.learning_rate)
        self.step = 0

    def run(self, steps: int) -> tuple[float, float, float]:
        """(wall seconds, loss of the last step, minor page faults per step) of ``steps``
        train steps."""
        faults = minor_page_faults()
        start = time.perf_counter()
        metrics = None
        for _ in range(steps):
            batch = self.batches[self.step % len(self.batches)]
            self.params, self.opt_state, metrics = self.step_fn(
                self.params, self.opt_state, batch, np.int32(self.step), self.lr, self.bad_in_a_row
            )
            self.bad_in_a_row = metrics["bad_in_a_row"]
            self.step += 1
        self._jax.block_until_ready(metrics)
        seconds = time.perf_counter() - start
        return seconds, float(metrics["loss"]), (minor_page_faults() - faults) / steps


def sinusoidal_positions(setup: Setup) -> np.ndarray:
    """Our fixed position table [seq_len, d_model] (``initializers.sinusoidal_table``)."""
    from deepnet_jax.model.initializers import sinusoidal_table

    return np.asarray(sinusoidal_table(setup.seq_len, setup.d_model), np.float32)


def jax_versions() -> dict[str, Any]:
    import jax

    return {
        **{p: importlib.metadata.version(p) for p in ("jax", "jaxlib", "flax", "optax")},
        "jax_backend": jax.default_backend(),
        "jax_devices": [d.device_kind for d in jax.local_devices()],
    }


# ---------------------------------------------------------------------------------------------
# Theirs: torchscale, in this process only with --in_process, normally in a spawned child.


def drop_path(x: Any, drop_prob: float = 0.0, training: bool = False, scale_by_keep: bool = True):
    """timm's stochastic depth: zero whole rows (dim 0) with probability ``drop_prob``, scaling
    the kept ones by 1/(1 − drop_prob) when ``scale_by_keep``; the identity when not training."""
    if drop_prob == 0.0 or not training:
        return x
    keep = 1.0 - drop_prob
    mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
    if keep > 0.0 and scale_by_keep:
        mask.div_(keep)
    return x * mask


def install_timm_shim() -> None:
    """Register ``timm.models.layers.drop_path`` (all torchscale 0.3.0 takes from timm) as a
    stand-in module when timm is not installed: timm would pull torchvision and a CUDA torch."""
    if "timm" in sys.modules or importlib.util.find_spec("timm") is not None:
        return
    names = ("timm", "timm.models", "timm.models.layers")
    modules = {name: types.ModuleType(name) for name in names}
    modules["timm"].models = modules["timm.models"]
    modules["timm.models"].layers = modules["timm.models.layers"]
    modules["timm.models.layers"].drop_path = drop_path
    sys.modules.update(modules)


def torch_versions() -> dict[str, str]:
    return {p: importlib.metadata.version(p) for p in ("torch", "torchscale", "fairscale")}


class TheirsTrainer:
    """torchscale's model, ``F.cross_entropy`` and ``torch.optim.Adam``; ``run(n)`` times n
    steps. ``positions`` is our sinusoidal table, served as torchscale's ``embed_positions``."""

    def __init__(
        self,
        setup: Setup,
        row: Row,
        batches: list[dict[str, np.ndarray]],
        positions: np.ndarray,
    ):
        install_timm_shim()
        import torch
        from torchscale.architecture.config import DecoderConfig, EncoderDecoderConfig
        from torchscale.architecture.decoder import Decoder
        from torchscale.architecture.encoder_decoder import EncoderDecoder
        from torchscale.component.embedding import TextEmbedding

        torch.set_num_threads(setup.threads)
        torch.manual_seed(setup.seed)
        self._torch = torch
        d, V = setup.d_model, setup.vocab_size

        class SinusoidalPositions(torch.nn.Module):
            """Fixed positions 0 … T-1 from a given table: [B, T] tokens → [1, T, D]."""

            def __init__(self, table: np.ndarray):
                super().__init__()
                self.register_buffer("table", torch.tensor(table), persistent=False)

            def forward(self, tokens, positions=None, incremental_state=None, **kwargs):
                del positions, incremental_state, kwargs
                return self.table[: tokens.size(1)].unsqueeze(0)

        common = {
            "deepnorm": True,  # post-LN with DeepNorm's α and β (sets subln=False)
            "activation_fn": setup.activation,
            "dropout": setup.dropout,
            "attention_dropout": setup.dropout,
            "activation_dropout": setup.dropout,
            "drop_path_rate": 0.0,
            "no_scale_embedding": False,  # ours scales token embeddings by √d
            "layernorm_embedding": False,
            "layernorm_eps": 1e-5,
            "vocab_size": V,
            "checkpoint_activations": False,
        }
        decoder_sizes = {
            "decoder_embed_dim": d,
            "decoder_attention_heads": setup.num_heads,
            "decoder_ffn_embed_dim": setup.ffn_dim,
            "decoder_layers": row.num_decoder_layers,
            "max_target_positions": setup.seq_len,
            "share_decoder_input_output_embed": False,
        }
        if row.arch == "decoder":
            args = DecoderConfig(**common, **decoder_sizes)
            self.model = Decoder(
                args,
                embed_tokens=TextEmbedding(V, d),
                embed_positions=SinusoidalPositions(positions),
            )
        else:
            args = EncoderDecoderConfig(
                **common,
                **decoder_sizes,
                encoder_embed_dim=d,
                encoder_attention_heads=setup.num_heads,
                encoder_ffn_embed_dim=setup.ffn_dim,
                encoder_layers=row.num_encoder_layers,
                max_source_positions=setup.seq_len,
                share_all_embeddings=False,
            )
            self.model = EncoderDecoder(
                args,
                encoder_embed_tokens=TextEmbedding(V, d),
                encoder_embed_positions=SinusoidalPositions(positions),
                decoder_embed_tokens=TextEmbedding(V, d),
                decoder_embed_positions=SinusoidalPositions(positions),
            )
        self.arch = row.arch
        self.model.train()
        self.param_count = sum(p.numel() for p in self.model.parameters())
        adam = {
            "foreach": {"foreach": True},
            "for_loop": {"foreach": False},
            "fused": {"fused": True},
        }[setup.torch_adam]
        self.optimizer = torch.optim.Adam(
            self.model.parameters(),
            lr=setup.learning_rate,
            betas=(ADAM_B1, ADAM_B2),
            eps=ADAM_EPS,
            weight_decay=0.0,
            **adam,
        )
        self.batches = [{k: torch.from_numpy(v) for k, v in b.items()} for b in batches]
        self.step = 0

    def logits(self, batch: dict[str, Any]) -> Any:
        """[B, T, vocab] logits; padding masks from the tokens (id 0), as ours computes them."""
        tgt = batch["inputs"]
        if self.arch == "decoder":
            return self.model(tgt, self_attn_padding_mask=tgt.eq(0))[0]
        encoder_out = self.model.encoder(batch["src"], encoder_padding_mask=batch["src"].eq(0))
        return self.model.decoder(tgt, self_attn_padding_mask=tgt.eq(0), encoder_out=encoder_out)[0]

    def train_step(self, batch: dict[str, Any]) -> Any:
        logits = self.logits(batch)
        loss = self._torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)).float(), batch["targets"].reshape(-1).long()
        )
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return loss

    def run(self, steps: int) -> tuple[float, float, float]:
        """(wall seconds, loss of the last step, minor page faults per step) of ``steps``
        train steps."""
        faults = minor_page_faults()
        start = time.perf_counter()
        loss = None
        for _ in range(steps):
            loss = self.train_step(self.batches[self.step % len(self.batches)])
            self.step += 1
        seconds = time.perf_counter() - start
        return seconds, float(loss.detach()), (minor_page_faults() - faults) / steps


def torch_worker(conn: Any) -> None:
    """The child process: builds a ``TheirsTrainer`` per ("build", …) message and answers
    ("run", steps) with ``run``'s result, until ("close",)."""
    trainer = None
    while True:
        message = conn.recv()
        if message[0] == "close":
            conn.close()
            return
        try:
            if message[0] == "build":
                trainer = TheirsTrainer(*message[1:])
                conn.send(("ok", {"param_count": trainer.param_count, **torch_versions()}))
            else:
                conn.send(("ok", trainer.run(message[1])))
        except Exception as error:  # report it in the parent rather than hang it
            conn.send(("error", f"{type(error).__name__}: {error}"))


class RemoteTheirs:
    """``TheirsTrainer``'s interface over a pipe to a spawned ``torch_worker`` process.

    ``start(steps)`` sends a run without waiting for it (``result()`` collects it): the
    warm-up overlaps our compile.
    """

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=torch_worker, args=(child,), daemon=True)
        self._process.start()
        child.close()
        self.info: dict[str, Any] = {}

    def _reply(self) -> Any:
        status, payload = self._conn.recv()
        if status == "error":
            raise RuntimeError(f"torch worker: {payload}")
        return payload

    def build(self, *args: Any) -> None:
        self._conn.send(("build", *args))
        self.info = self._reply()

    @property
    def param_count(self) -> int:
        return self.info["param_count"]

    def start(self, steps: int) -> None:
        self._conn.send(("run", steps))

    def result(self) -> tuple[float, float, float]:
        return self._reply()

    def run(self, steps: int) -> tuple[float, float, float]:
        self.start(steps)
        return self.result()

    def close(self) -> None:
        with contextlib.suppress(OSError):  # the child may be gone already
            self._conn.send(("close",))
        self._process.join(timeout=30)
        if self._process.is_alive():
            self._process.terminate()


class LocalTheirs:
    """``RemoteTheirs``'s interface on a ``TheirsTrainer`` in this process (``--in_process``)."""

    def __init__(self) -> None:
        self.trainer: TheirsTrainer | None = None
        self.info: dict[str, Any] = {}
        self._pending = 0

    def build(self, *args: Any) -> None:
        self.trainer = TheirsTrainer(*args)
        self.info = {"param_count": self.trainer.param_count, **torch_versions()}

    @property
    def param_count(self) -> int:
        return self.info["param_count"]

    def start(self, steps: int) -> None:
        self._pending = steps

    def result(self) -> tuple[float, float, float]:
        return self.trainer.run(self._pending)

    def run(self, steps: int) -> tuple[float, float, float]:
        return self.trainer.run(steps)

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------------------------
# The comparison.


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
    """Build both models on the same batches, warm both up, alternate timed rounds."""
    from deepnet_jax.scale import flops

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
    times = alternate_rounds(ours.run, theirs.run, setup)
    ours_s, theirs_s = statistics.median(times["ours_s"]), statistics.median(times["theirs_s"])
    shapes = {k: v.shape for k, v in batches[0].items()}
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
        "theirs_params": theirs.param_count,
        "params_rel_diff": abs(ours.param_count - theirs.param_count) / theirs.param_count,
        "train_flops_per_step": step_flops,
        "ours_flop_per_s": step_flops / ours_s,
        "theirs_flop_per_s": step_flops / theirs_s,
        "ours_page_faults_per_step": round(statistics.median(times["ours_faults"])),
        "theirs_page_faults_per_step": round(statistics.median(times["theirs_faults"])),
        "ours_step_s_rounds": times["ours_s"],
        "theirs_step_s_rounds": times["theirs_s"],
        "ours_warmup_s": ours_warmup_s,
        "theirs_warmup_s": theirs_warmup_s,
        "ours_loss_first": ours_loss0,
        "ours_loss_last": times["ours_loss"][-1],
        "theirs_loss_first": theirs_loss0,
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
        "torch_adam": setup.torch_adam,
    }


def pin_cpus(threads: int) -> list[int]:
    """Restrict this process (and the children it starts) to its first ``threads`` allowed
    CPUs, before XLA sizes its thread pool; returns the CPUs."""
    allowed = sorted(os.sched_getaffinity(0))
    cpus = allowed[:threads]
    os.sched_setaffinity(0, cpus)
    return cpus


def parse_args() -> argparse.Namespace:
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
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--steps_per_round", type=int, default=5)
    p.add_argument("--warmup_steps", type=int, default=3)
    p.add_argument("--settle_s", type=float, default=0.2, help="idle seconds before each run")
    p.add_argument("--threads", type=int, default=2, help="CPUs of both sides")
    p.add_argument("--torch_adam", default="fused", choices=TORCH_ADAM)
    p.add_argument("--num_batches", type=int, default=4, help="distinct batches, cycled")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--in_process", action="store_true", help="torch in this process")
    args = p.parse_args()
    if args.smoke:
        args.d_model, args.num_heads, args.ffn_dim, args.vocab_size = 32, 4, 64, 64
        args.batch_size, args.seq_len = 2, 16
        args.rounds, args.steps_per_round, args.warmup_steps, args.settle_s = 2, 2, 1, 0.0
    return args


def main() -> None:
    args = parse_args()
    setup = Setup(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Setup)})
    cpus = pin_cpus(setup.threads)
    table = SMOKE_ROWS if args.smoke else ROWS
    rows = [Row(name, *table[name]) for name in args.rows.split(",") if name]
    theirs = LocalTheirs() if args.in_process else RemoteTheirs()
    try:
        for row in rows:
            print(json.dumps(measure_row(setup, row, theirs)), flush=True)
    finally:
        theirs.close()
    environment = {
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


if __name__ == "__main__":
    main()
