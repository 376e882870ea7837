"""``dlcl_30l``: the shipped config of that name (its docstring says what it trains).

Copy this file and change what ``get_config()`` returns to make a run of your own;
``--config=dlcl_30l`` names the shipped one (in deepnet_jax/configs/) from any directory.
"""

from deepnet_jax.configs.dlcl_30l import get_config

__all__ = ["get_config"]
