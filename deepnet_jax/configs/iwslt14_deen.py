"""DeepNet's IWSLT-14 De→En setting (DeepNet Table 4) on fairseq-prepared files.

Run (after fairseq's ``prepare-iwslt14.sh``, which leaves train/valid/test.{de,en}):

    python -m deepnet_jax.cli.train --config=iwslt14_deen --workdir=/tmp/iwslt14 \\
        --config.data.source_dir=/path/to/iwslt14.tokenized.de-en

Depth is the experiment's variable: ``--config.model.num_encoder_layers=100
--config.model.num_decoder_layers=100`` gives the paper's deepest IWSLT model.
"""

import ml_collections

from deepnet_jax.configs import base


def get_config() -> ml_collections.ConfigDict:
    c = base.get_config()
    m = c.model
    m.arch, m.scheme = "encdec", "deepnorm"
    m.num_encoder_layers = m.num_decoder_layers = 6
    m.d_model, m.num_heads, m.ffn_dim = 512, 8, 2048
    m.dropout = 0.4
    m.share_embeddings = True  # one joint BPE table for German and English
    m.tie_embeddings = True

    c.data.dataset = "local_parallel"
    c.data.source_dir = ""  # required: the folder with train/valid/test.{de,en}
    c.data.src_ext, c.data.tgt_ext = "de", "en"
    c.data.vocab_size = 10000
    c.data.max_len = 256
    c.data.max_tokens = 4096

    c.optimizer.learning_rate = 5e-4
    c.optimizer.b1, c.optimizer.b2, c.optimizer.eps = 0.9, 0.98, 1e-8
    c.optimizer.weight_decay = 1e-4
    c.schedule.name = "inverse_sqrt"
    c.schedule.warmup_steps = 4000
    c.schedule.warmup_init_lr = 1e-7
    c.label_smoothing = 0.1
    c.total_steps = 50000
    c.eval_every = 2000  # validation (loss; greedy BLEU for translation)
    c.final_split = "test"  # loss (and beam BLEU) on the test split at the end
    c.log_every = 100
    return c
