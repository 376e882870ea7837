"""Compiles of the train step in a sharded ``remat_policy='auto'`` run; started by
test_one_compile.py with ``XLA_FLAGS=--xla_force_host_platform_device_count=8``, not by pytest.

argv: workdir. Trains 2 steps on mesh (data 2, fsdp 2, tensor 2) with a checkpoint, resumes to
4, and prints ``{"fresh": n, "resumed": m}``: the XLA compiles of ``jit(train_step)`` in each.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator

import jax

from deepnet_jax.configs import base
from deepnet_jax.training import train

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


def config(steps: int):
    c = base.get_config()  # synthetic reversal data
    m = c.model
    m.arch, m.scheme, m.remat_policy = "decoder", "deepnorm", "auto"
    m.d_model, m.num_heads, m.ffn_dim, m.vocab_size, m.max_len = 32, 4, 64, 12, 16
    m.num_encoder_layers, m.num_decoder_layers = 0, 2
    c.data.max_len, c.data.batch_size = 12, 16
    c.mesh.data, c.mesh.fsdp, c.mesh.tensor = 2, 2, 2
    c.total_steps, c.log_every, c.eval_batches, c.checkpoint_every = steps, 1, 1, 2
    return c


@contextlib.contextmanager
def compiles() -> Iterator[list[str]]:
    """The ``fun_name`` of every XLA compile (or persistent-cache load: jax reports both as a
    backend compile) while inside."""
    names: list[str] = []

    def listen(event: str, duration: float, **kwargs) -> None:
        if event == BACKEND_COMPILE:
            names.append(str(kwargs.get("fun_name", "")))

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield names
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)


def count(steps: int, workdir: str) -> int:
    with compiles() as names:
        train.run(config(steps), workdir)
    return names.count("jit(train_step)")


if __name__ == "__main__":
    jax.config.update("jax_platforms", "cpu")
    assert len(jax.devices()) == 8, jax.devices()
    fresh = count(2, sys.argv[1])
    print(json.dumps({"fresh": fresh, "resumed": count(4, sys.argv[1])}))
