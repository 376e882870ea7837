"""deepnet-jax: DeepNet (DeepNorm) and Magneto (Sub-LN) deep Transformers in JAX/Flax Linen.

This module is the model's surface and imports nothing of data, checkpoints or training:
training is :mod:`deepnet_jax.training` (``training.train.run``), decoding
:mod:`deepnet_jax.decoding`, torchscale interop :mod:`deepnet_jax.interop.torchscale`, the
commands :mod:`deepnet_jax.cli` (docs/architecture.md).
"""

import os

# process_exit puts its atexit handler before jax's (on import; inert unless a command runs)
from deepnet_jax.common import native_stderr, process_exit  # noqa: F401

if not native_stderr.has_accelerator():
    # on a host with no GPU, jax's CUDA plugin (the gpu-plan extra) registers for deviceless
    # compiles only if it skips its check of a CUDA installation that cannot be there
    os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
with native_stderr.filtered():  # jax's CUDA plugin announces a missing driver on CPU hosts
    import jax  # noqa: F401

from deepnet_jax.model import constants
from deepnet_jax.model.architectures import DecoderOnly, EncoderDecoder, EncoderOnly, build
from deepnet_jax.model.config import TransformerConfig, default_config
from deepnet_jax.model.constants import deepnorm, subln
from deepnet_jax.model.transformer_layer import TransformerLayer

__all__ = [
    "DecoderOnly",
    "EncoderDecoder",
    "EncoderOnly",
    "TransformerConfig",
    "TransformerLayer",
    "build",
    "constants",
    "deepnorm",
    "default_config",
    "subln",
]
__version__ = "0.1.0"
