"""Every configuration field, with its default and a one-line comment: see
``deepnet_jax/training/config.py``, the schema every config is checked against.

Experiment configs start from ``base.get_config()`` and change what they need. Not a run of its
own (its data is the synthetic reversal task); see the ``default`` config.
"""

import ml_collections

from deepnet_jax.training import config as train_config


def get_config() -> ml_collections.ConfigDict:
    return train_config.default_config()
