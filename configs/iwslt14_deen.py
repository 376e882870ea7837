"""``iwslt14_deen``: the shipped config of that name (its docstring says what it trains).

Copy this file and change what ``get_config()`` returns to make a run of your own;
``--config=iwslt14_deen`` names the shipped one (in deepnet_jax/configs/) from any directory.
"""

from deepnet_jax.configs.iwslt14_deen import get_config

__all__ = ["get_config"]
