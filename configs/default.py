"""Default run: a 6L-6L DeepNorm encoder-decoder on the Ding German→English sentences.

Run: python train.py --config=configs/default.py --workdir=/tmp/deepnet_default

Prepares ``ding_de_en`` on first use (Debian's trans-de-en via apt-get), trains a 4,000-piece
joint BPE tokenizer on its training split, then trains for 2,000 updates of about 1,000 tokens
(token-budget batches) on 2 CPU cores and evaluates on the validation split.
"""

import ml_collections

from configs import base


def get_config() -> ml_collections.ConfigDict:
    c = base.get_config()
    m = c.model
    m.arch, m.scheme = "encdec", "deepnorm"
    m.num_encoder_layers = m.num_decoder_layers = 6
    m.d_model, m.num_heads, m.ffn_dim = 128, 4, 512  # small enough for a CPU run
    m.vocab_size = 4000
    m.max_len = 64
    m.dropout = 0.1

    c.data.dataset = "ding_de_en"
    c.data.vocab_size = 4000  # joint source+target BPE
    c.data.max_len = 64
    c.data.max_tokens = 1024  # global token budget per update (buckets 8/16/32/64)

    c.optimizer.learning_rate = 1e-3
    c.optimizer.grad_clip = 1.0
    c.schedule.warmup_steps = 400
    c.label_smoothing = 0.1
    c.total_steps = 2000
    c.eval_every = 500  # validation (loss; greedy BLEU for translation)
    c.final_split = "test"  # loss (and beam BLEU) on the test split at the end
    c.log_every = 50
    return c
