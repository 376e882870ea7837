"""deepnet-jax: DeepNet (DeepNorm) and Magneto (Sub-LN) deep Transformers in JAX/Flax Linen."""

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
