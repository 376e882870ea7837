"""Our side of ``benchmarks.vs_torchscale``: the library's train step (the trainer's jitted step)
on a row's model and batches.

JAX is imported inside these functions only: the torch child process (spawn re-imports the
benchmark's modules) should load neither JAX nor XLA's thread pool.
"""

from __future__ import annotations

import importlib.metadata
import sys
import time
from typing import Any

import numpy as np

from benchmarks.host_memory import minor_page_faults
from benchmarks.vs_torchscale_setup import ADAM_B1, ADAM_B2, ADAM_EPS, Row, Setup


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
    m.scan_layers, m.scan_unroll = setup.scan_layers, setup.scan_unroll
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
        config = self.config = remat_auto.resolve(  # auto: the planned choice, named on stderr
            run_config(setup, row), jax.devices()[:1], report=lambda m: print(m, file=sys.stderr)
        )
        self.model_config = config.model
        model = self.model = architectures.build(config.model)
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

    def torchscale_state_dict(self) -> dict[str, np.ndarray]:
        """The current parameters as torchscale names them (the library's torchscale export,
        ``params_to_torchscale``)."""
        from deepnet_jax.interop.torchscale.params import params_to_torchscale

        return params_to_torchscale(self.params, self.config.to_config().model)

    def eval_logits(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        """[B, T, vocab] float32 logits of ``batch`` with dropout off (evaluation mode)."""
        args = (batch["src"], batch["inputs"]) if "src" in batch else (batch["inputs"],)
        apply = self._jax.jit(self.model.apply, static_argnames=("deterministic",))
        return np.asarray(apply({"params": self.params}, *args, deterministic=True))

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


def jax_matmul_gflops(m: int, k: int, n: int, calls: int = 30) -> float:
    """XLA's float32 [m, k] @ [k, n] (jitted) in GFLOP/s on this process's CPUs: 2·m·k·n over
    the median of ``calls`` timed calls (after two untimed), as ``torch_matmul_gflops``."""
    import jax

    a = jax.random.normal(jax.random.key(0), (m, k))
    b = jax.random.normal(jax.random.key(1), (k, n))
    mm = jax.jit(lambda x, y: x @ y)
    seconds = []
    for i in range(calls + 2):
        start = time.perf_counter()
        jax.block_until_ready(mm(a, b))
        if i >= 2:
            seconds.append(time.perf_counter() - start)
    return 2 * m * k * n / float(np.median(seconds)) / 1e9


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
