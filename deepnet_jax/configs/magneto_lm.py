"""Magneto (Sub-LN) decoder-only language model on the Shakespeare plays.

Run: python -m deepnet_jax.cli.train --config=magneto_lm --workdir=/tmp/magneto_lm

Sub-LN's γ-scaled init and extra LayerNorms (Magneto eq. 1–5) with GELU FFNs, BPE pieces over
the 38 plays, stream windows of 256 tokens.
"""

import ml_collections

from deepnet_jax.configs import base


def get_config() -> ml_collections.ConfigDict:
    c = base.get_config()
    m = c.model
    m.arch, m.scheme = "decoder", "subln"
    m.num_encoder_layers, m.num_decoder_layers = 0, 24
    m.d_model, m.num_heads, m.ffn_dim = 256, 4, 1024
    m.activation = "gelu"
    m.dropout = 0.1
    m.tie_embeddings = True

    c.data.dataset = "shakespeare"
    c.data.vocab_size = 8000
    c.data.max_len = 256
    c.data.batch_size = 16
    c.data.lm_chunking = "stream"

    c.optimizer.learning_rate = 1e-3
    c.optimizer.weight_decay = 0.01
    c.schedule.name = "polynomial"
    c.schedule.warmup_steps = 500
    c.label_smoothing = 0.0
    c.total_steps = 10000
    c.eval_every = 1000  # validation (loss; greedy BLEU for translation)
    c.final_split = "test"  # loss (and beam BLEU) on the test split at the end
    c.log_every = 50
    return c
