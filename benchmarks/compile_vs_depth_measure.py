"""One row of ``benchmarks.compile_vs_depth`` measured: its model (a tiny-width decoder-only
model at the row's depth, layout and remat policy), the trainer's jitted train step lowered and
compiled on abstract inputs (lower and compile times, the compile's CPU time, HLO size,
temporary bytes), then run on real arrays (median step time).
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from deepnet_jax.data import synthetic
from deepnet_jax.model import architectures, remat
from deepnet_jax.model import inputs as model_inputs
from deepnet_jax.model.config import TransformerConfig
from deepnet_jax.training import optimizers
from deepnet_jax.training import steps as train_steps

ARCH = "decoder"
SIDE = "decoder"  # the layer stack of a decoder-only model
F32_BYTES = 4


@dataclasses.dataclass(frozen=True)
class Row:
    """One measurement: a layer layout, a depth and a remat policy."""

    layout: str
    depth: int
    policy: str = "full"


@dataclasses.dataclass(frozen=True)
class Setup:
    """Model width, batch shape and timing settings shared by every row."""

    scheme: str
    d_model: int
    num_heads: int
    ffn_dim: int
    vocab_size: int
    batch_size: int
    seq_len: int
    learning_rate: float
    steps: int
    seed: int


def model_config(setup: Setup, row: Row) -> Any:
    """The ``ml_collections`` model config of one row."""
    c = architectures.default_config()
    c.arch = ARCH
    c.scheme = setup.scheme
    c.num_encoder_layers = 0
    c.num_decoder_layers = row.depth
    c.d_model = setup.d_model
    c.num_heads = setup.num_heads
    c.ffn_dim = setup.ffn_dim
    c.vocab_size = setup.vocab_size
    c.max_len = max(c.max_len, setup.seq_len)
    c.scan_layers = row.layout != "unroll"
    c.scan_group_size = -1 if row.layout == "group" else 0
    c.remat_policy = row.policy
    return c


def example_batch(setup: Setup) -> dict[str, np.ndarray]:
    """A real synthetic-reversal batch [batch_size, seq_len]."""
    rng = np.random.default_rng(setup.seed)
    return synthetic.batch(ARCH, setup.batch_size, setup.vocab_size, setup.seq_len, rng)


def abstract(tree: Any) -> Any:
    """``jax.ShapeDtypeStruct`` leaves with the shapes and dtypes of ``tree``."""
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(np.shape(a), a.dtype), tree)


def make_train_step(model: nn.Module, optimizer: optax.GradientTransformation) -> Callable:
    """The trainer's jitted step (``deepnet_jax.training.steps.make_train_step``) for ``model``."""
    return train_steps.make_train_step(
        train_steps.make_loss_fn(model, ARCH), optimizer, jax.random.key(0)
    )


def abstract_state(
    model: nn.Module, optimizer: optax.GradientTransformation, batch: dict, seed: int
) -> tuple[Any, Any]:
    """Shapes of the params and the optimizer state, without allocating either."""
    params = jax.eval_shape(functools.partial(model_inputs.init_params, model, ARCH, batch, seed))
    return params, jax.eval_shape(optimizer.init, params)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()`` and its wall-clock seconds."""
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def lower_and_compile(step: Callable, abstract_args: tuple) -> dict[str, Any]:
    """Lower and compile ``step`` on abstract args; times, HLO size and temp bytes."""
    lowered, lower_s = timed(lambda: step.lower(*abstract_args))
    cpu = time.process_time()
    compiled, compile_s = timed(lowered.compile)
    return {
        "compiled": compiled,
        "lower_s": round(lower_s, 3),
        "compile_s": round(compile_s, 3),
        # the process's CPU seconds (all threads) while compiling: less sensitive than the
        # wall-clock time to other processes sharing the cores
        "compile_cpu_s": round(time.process_time() - cpu, 3),
        "hlo_chars": len(lowered.as_text()),
        "temp_bytes": int(compiled.memory_analysis().temp_size_in_bytes),
    }


def median_step_seconds(
    compiled: Callable,
    params: Any,
    opt_state: Any,
    batch: dict,
    steps: int,
    learning_rate: float,
) -> float:
    """Median wall-clock seconds of ``steps`` compiled train steps after one warm-up step."""
    times = []
    for i in range(steps + 1):
        start = time.perf_counter()
        params, opt_state, loss = compiled(
            params, opt_state, batch, jnp.int32(i), jnp.float32(learning_rate)
        )
        jax.block_until_ready((params, opt_state, loss))
        if i:  # step 0 is the warm-up
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def param_count(params: Any) -> int:
    return sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(params))


def measure_row(setup: Setup, row: Row) -> dict[str, Any]:
    """All measurements of one row, as the JSON-ready dict printed for it."""
    config = model_config(setup, row)
    model = architectures.build(config)
    # Adam taking its learning rate as the step's argument, as the trainer's optimizer does
    optimizer = optax.chain(optax.scale_by_adam(), optimizers.scale_by_learning_rate_argument())
    batch = example_batch(setup)
    params_abs, opt_abs = abstract_state(model, optimizer, batch, setup.seed)
    step_abs = jax.ShapeDtypeStruct((), jnp.int32)
    lr_abs = jax.ShapeDtypeStruct((), jnp.float32)
    step = make_train_step(model, optimizer)
    stats = lower_and_compile(step, (params_abs, opt_abs, abstract(batch), step_abs, lr_abs))
    params = model_inputs.init_params(model, ARCH, batch, setup.seed)
    step_s = median_step_seconds(
        stats.pop("compiled"),
        params,
        optimizer.init(params),
        batch,
        setup.steps,
        setup.learning_rate,
    )
    return {
        "depth": row.depth,
        "layout": row.layout,
        "remat_policy": row.policy,
        **stats,
        "step_s_median": round(step_s, 5),
        "params": param_count(params_abs),
        "group_size": remat.group_size(TransformerConfig.from_config(config), row.depth),
    }


def one_layer_param_bytes(setup: Setup) -> int:
    """float32 bytes of one layer's parameters (= its gradient), from a 1-layer scanned model."""
    model = architectures.build(model_config(setup, Row("scan", 1)))
    params = jax.eval_shape(
        functools.partial(model_inputs.init_params, model, ARCH, example_batch(setup), setup.seed)
    )
    return F32_BYTES * param_count(params[SIDE]["layers"])
