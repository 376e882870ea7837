"""deepnet-jax: DeepNet (DeepNorm) and Magneto (Sub-LN) deep Transformers in JAX/Flax Linen."""

import os

from deepnet_jax import native_stderr

if not native_stderr.has_accelerator():
    # on a host with no GPU, jax's CUDA plugin (the gpu-plan extra) registers for deviceless
    # compiles only if it skips its check of a CUDA installation that cannot be there
    os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
with native_stderr.filtered():  # jax's CUDA plugin announces a missing driver on CPU hosts
    import jax  # noqa: F401

from deepnet_jax import constants
from deepnet_jax.model_config import TransformerConfig, default_config
from deepnet_jax.models import DecoderOnly, EncoderDecoder, EncoderOnly, build

__all__ = [
    "DecoderOnly",
    "EncoderDecoder",
    "EncoderOnly",
    "TransformerConfig",
    "build",
    "constants",
    "default_config",
]
__version__ = "0.1.0"
