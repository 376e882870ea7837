"""The 1,000-layer DeepNet (Table 2): 500-layer encoder, 500-layer decoder, d 512, 8 heads,
FFN 2048 — 3.71B parameters (3,710,976,000: 3,678,208,000 in the layers and one 64,000 × 512
token table, shared and tied; the paper's 3.8B has its own multilingual vocabulary), scanned
over depth and rematerialized.

Run (on a pod slice; see the planner in the scale work for what fits where):

    python -m deepnet_jax.cli.train --config=deepnet_1000l --workdir=/tmp/deepnet_1000l

The paper trained it on OPUS-100 (multilingual); this config uses WMT-17 En→De through tfds, the
corpus this project reads — the architecture and constants are the paper's.
"""

import ml_collections

from deepnet_jax.configs import wmt17_ende


def get_config() -> ml_collections.ConfigDict:
    c = wmt17_ende.get_config()
    m = c.model
    m.num_encoder_layers = m.num_decoder_layers = 500
    m.scan_unroll = 1  # scanned: each stack's layer compiles once
    m.d_model, m.num_heads, m.ffn_dim = 512, 8, 2048
    c.data.vocab_size = 64000
    m.remat_policy = "full"  # one saved residual per layer
    c.total_steps = 300000
    return c
