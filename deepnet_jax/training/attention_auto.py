"""``model.attention_impl='auto'``: a fused attention kernel where one applies, else the reference.

A training config's default (``train_config.TRAINING_DEFAULTS``). Before a model is built, the
trainer (on its devices' platform) and the planner (on its target's) call :func:`resolve`,
which picks ``cudnn`` — ``jax.nn.dot_product_attention`` on cuDNN's flash attention, the same
softmax(q·kᵀ/√d + mask)·v in one kernel — when all of these hold:

* the devices are NVIDIA GPUs (``cuda``);
* the compute dtype is bfloat16 or float16 (cuDNN's kernels take no float32);
* ``model.attention_dropout`` is 0 (the fused kernel has no dropout on the probabilities);
* every batch length is even (cuDNN's masked training kernels refuse odd ones:
  ``train_config`` names them);
* cuDNN's library answers on this host (jax asks it for its version while tracing the fused
  attention): a GPU run has it; a deviceless plan for a GPU target has it with the
  ``cudnn-plan`` extra and plans the reference without it.

On TPUs it picks ``splash`` (Pallas' flash attention, :mod:`deepnet_jax.model.splash_attention`)
when ``model.attention_dropout`` is 0 and ``model.attention_masks`` is ``native``; everywhere
else ``reference`` (einsum and a float32 softmax).

cuDNN's attention is the faster of the two on the GPUs measured (docs/scaling.md, "Measured on
one H100" and "Measured on one H200"). Both paths compute the same function: logits and every
gradient agree within twice the bfloat16 reference's own distance from float32
(``tests/test_attention_paths.py``, on a GPU). The choice is recorded in the run's
checkpointed config (the field is resumable).
"""

from __future__ import annotations

from deepnet_jax.common import jax_compat
from deepnet_jax.data import batching
from deepnet_jax.data.options import DataOptions
from deepnet_jax.model.remat import AUTO
from deepnet_jax.training.run_config import RunConfig

HALF = ("bfloat16", "float16")


def is_auto(config: RunConfig) -> bool:
    """Whether ``config`` asks for ``model.attention_impl='auto'``."""
    return config.model.attention_impl == AUTO


def choice(config: RunConfig, platform: str) -> str:
    """The kernel ``auto`` stands for on ``platform`` (``cuda``, ``tpu``, ``cpu``)."""
    m = config.model
    fused = (
        platform in ("cuda", "gpu")
        and m.dtype in HALF
        and not m.attention_dropout
        and not odd_lengths(config.data)
        and cudnn_answers()
    )
    if fused:
        return "cudnn"
    splash = platform == "tpu" and not m.attention_dropout and m.attention_masks == "native"
    return "splash" if splash else "reference"


def odd_lengths(data: DataOptions) -> list[int]:
    """The batch lengths (each bucket's, ``data.max_len`` the last) cuDNN's masked training
    kernels refuse: the odd ones."""
    lengths = batching.bucket_boundaries(data.max_len, data.bucket_boundaries)
    return [n for n in lengths if n % 2]


def cudnn_answers() -> bool:
    """Whether cuDNN's library gives jax its version on this host (what tracing cuDNN's fused
    attention asks first)."""
    return jax_compat.cudnn_library_answers()


def resolve(config: RunConfig, platform: str) -> RunConfig:
    """``config`` itself unless ``model.attention_impl='auto'``; then a copy naming the kernel
    :func:`choice` picks for ``platform``."""
    if not is_auto(config):
        return config
    return config.replace(model={"attention_impl": choice(config, platform)})
