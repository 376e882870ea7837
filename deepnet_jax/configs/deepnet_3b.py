"""DeepNet's large multilingual model (§6, "Massively multilingual NMT"; Table 3): a 100-layer
encoder and a 100-layer decoder, d 1024, 16 heads, FFN 4096, DeepNorm — 3.2B parameters with
its vocabulary. Here: 2,939,289,600 in the layers (final LayerNorms included) and 2 × 128,000 ×
1,024 in the embeddings (the source and target share one table; the output projection is its
own), 3,201,433,600 in all. The paper's text gives the model's shape and size, not its
vocabulary; 128,000 pieces (M2M-100's dictionary, the baseline it is compared with, has
128,112) with an untied output projection is the choice that gives its 3.2B.

Its training data (12B sentence pairs in 102 languages) is not something this project reads;
like ``deepnet_1000l`` it reads WMT-17 En→De through tfds with the paper's architecture
and constants. It is the project's config large enough to fill an accelerator: planned, with
its kernel model, in docs/scaling.md:

    python -m deepnet_jax.cli.plan --config=deepnet_3b --target=h100-8 --kernels
"""

import ml_collections

from deepnet_jax.configs import wmt17_ende


def get_config() -> ml_collections.ConfigDict:
    c = wmt17_ende.get_config()
    m = c.model
    m.num_encoder_layers = m.num_decoder_layers = 100
    m.scan_unroll = 1  # scanned: each stack's layer compiles once
    m.d_model, m.num_heads, m.ffn_dim = 1024, 16, 4096
    m.share_embeddings = True  # one table for source and target pieces
    m.tie_embeddings = False  # the output projection is its own: 3.2B with the vocabulary
    c.data.vocab_size = 128000
    c.data.max_tokens = 65536  # global: 8 GPUs × 8,192
    return c
