"""A small synthetic-reversal run for the subprocess tests (train.py --config=<this file>)."""

import ml_collections

from deepnet_jax.training import config as train_config


def get_config() -> ml_collections.ConfigDict:
    c = train_config.default_config()
    m = c.model
    # the decoder: stopping and resuming act on the state, whatever the architecture, and a
    # single stack compiles faster than an encoder-decoder (the measurement: commit 735c782)
    m.arch, m.scheme = "decoder", "deepnorm"
    m.d_model, m.num_heads, m.ffn_dim, m.vocab_size, m.max_len = 32, 4, 64, 12, 16
    m.num_encoder_layers, m.num_decoder_layers = 0, 3
    m.dropout = 0.1  # dropout keys must be restored too
    # What these runs test is stopping and resuming, not the remat choice: full spares each run
    # auto's planning compile. auto is run by test_remat_auto.py and the two-process test.
    m.remat_policy = "full"
    c.data.max_len, c.data.batch_size = 12, 16
    c.optimizer.learning_rate = 3e-3
    c.optimizer.grad_clip = 1.0
    c.schedule.warmup_steps = 10
    c.total_steps, c.log_every, c.eval_batches = 60, 1, 2
    c.checkpoint_every, c.max_to_keep = 1000, 2
    # MFU against a fixed peak (two CPU cores' order of magnitude): spares each subprocess run
    # the matmul measurement (~1.5 s at the tests' optimization level 0), which test_flops.py
    # and the in-process runs cover.
    c.peak_flops = 1e11
    return c
