"""Encoder-only (BERT-like) masked language model with DeepNorm on the Shakespeare plays.

Run: python -m deepnet_jax.cli.train --config=bert_mlm --workdir=/tmp/bert_mlm

15% of tokens are predicted (80% replaced by <mask>, 10% by a random piece, 10% kept);
DeepNorm's encoder-only constants α = (2N)^(1/4), β = (8N)^(-1/4).
"""

import ml_collections

from deepnet_jax.configs import base


def get_config() -> ml_collections.ConfigDict:
    c = base.get_config()
    m = c.model
    m.arch, m.scheme = "encoder", "deepnorm"
    m.num_encoder_layers, m.num_decoder_layers = 12, 0
    m.d_model, m.num_heads, m.ffn_dim = 256, 4, 1024
    m.activation = "gelu"
    m.positions = "learned"
    m.tie_embeddings = True

    c.data.dataset = "shakespeare"
    c.data.vocab_size = 8000
    c.data.max_len = 128
    c.data.batch_size = 32
    c.data.lm_chunking = "stream"
    c.data.mask_rate = 0.15

    c.optimizer.learning_rate = 5e-4
    c.optimizer.weight_decay = 0.01
    c.schedule.name = "linear"
    c.schedule.warmup_steps = 1000
    c.label_smoothing = 0.0
    c.total_steps = 20000
    c.eval_every = 2000  # validation (loss; greedy BLEU for translation)
    c.final_split = "test"  # loss (and beam BLEU) on the test split at the end
    c.log_every = 50
    return c
