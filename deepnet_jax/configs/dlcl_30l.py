"""DLCL baseline (Wang et al. 2019): a 30-layer pre-norm DLCL encoder with a 6-layer decoder.

Run: python -m deepnet_jax.cli.train --config=dlcl_30l --workdir=/tmp/dlcl_30l

Each layer's input is a learned combination of the LayerNorm'd outputs of all earlier layers
(DLCL eq. 8); DLCL stacks run unrolled (``model.scan_layers=False``). The paper trained on
WMT; here it runs on the main job's corpus and recipe (``default.py``: ``libreoffice_help``).
"""

import ml_collections

from deepnet_jax.configs import default


def get_config() -> ml_collections.ConfigDict:
    c = default.get_config()
    m = c.model
    m.scheme = "dlcl_pre"
    m.num_encoder_layers, m.num_decoder_layers = 30, 6
    m.scan_layers = False
    m.dlcl_weights = "learnable"
    return c
