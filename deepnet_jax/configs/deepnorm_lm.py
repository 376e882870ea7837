"""A modern decoder-only language model under DeepNorm: rotary positions, a SwiGLU FFN,
grouped-query attention and RMSNorm (docs/blocks.md), character-level Shakespeare.

Run: python -m deepnet_jax.cli.train --config=deepnorm_lm --workdir=/tmp/deepnorm_lm

DeepNorm's x ← RMSNorm(α·x + G(x)) with α = (2N)^(1/4) and β = (8N)^(-1/4) on v, out, fc1 and
fc2 (the gate at gain 1: docs/blocks.md derives why). The FFN's hidden width is ⅔ of a plain
4d FFN's, rounded to a multiple of 8 (⅔·512 → 344), so the block has a plain FFN's parameters.
Validation NLL per character (divide by ln 2 for bits per character). ``subln_lm.py`` is its
Sub-LN twin.
"""

import ml_collections

from deepnet_jax.configs import base


def get_config() -> ml_collections.ConfigDict:
    c = base.get_config()
    m = c.model
    m.arch, m.scheme = "decoder", "deepnorm"
    m.num_encoder_layers, m.num_decoder_layers = 0, 12
    m.d_model, m.num_heads, m.num_kv_heads, m.ffn_dim = 128, 4, 2, 344
    m.positions, m.rope_theta = "rope", 10000.0
    m.activation = "swiglu"
    m.norm = "rmsnorm"
    m.use_bias = False
    m.dropout = 0.1
    # untied: with the output tied to the input table, a post-norm stack whose branches start
    # small (DeepNorm's β) returns its input token's own embedding at init and predicts the
    # input again, an initial NLL of 7.8 nats against ln 85 = 4.4 (measured at 6 layers)
    m.tie_embeddings = False

    c.data.dataset = "shakespeare"
    c.data.tokenizer = "char"
    c.data.max_len = 256
    c.data.batch_size = 16
    c.data.lm_chunking = "stream"

    c.optimizer.learning_rate = 1e-3
    c.optimizer.weight_decay = 0.01
    c.schedule.name = "polynomial"
    c.schedule.warmup_steps = 500
    c.label_smoothing = 0.0
    c.total_steps = 5000
    c.eval_every = 500  # validation loss
    c.final_split = "test"
    c.log_every = 50
    return c
