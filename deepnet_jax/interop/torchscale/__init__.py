"""torchscale (microsoft/torchscale 0.3.0, the official DeepNet/Magneto code) interop.

Public API (numpy only; reading or writing a ``.pt`` file needs torch, the ``interop`` extra)::

    from deepnet_jax.interop import torchscale
    config = torchscale.model_config_from_torchscale(vars(ts_config))   # ml_collections
    params = torchscale.params_from_torchscale(state_dict, config)      # name → np.ndarray
    state_dict = torchscale.params_to_torchscale(params, config)

The command line (``python -m deepnet_jax.cli.torchscale import|export``) turns a ``.pt``
checkpoint into a run workdir and back (:mod:`.runs`). The mapping of names and layouts is in
:mod:`.state_dict`, the config conventions in :mod:`.configs` (each torchscale field's fate in
:mod:`.config_fields`).
"""

from deepnet_jax.interop.torchscale.configs import (
    model_config_from_torchscale,
    torchscale_args_from_config,
)
from deepnet_jax.interop.torchscale.params import params_from_torchscale, params_to_torchscale

__all__ = [
    "model_config_from_torchscale",
    "params_from_torchscale",
    "params_to_torchscale",
    "torchscale_args_from_config",
]
