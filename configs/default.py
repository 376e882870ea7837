"""Default run: a 6L-6L DeepNorm encoder-decoder learning to reverse sequences.

Run: python train.py --config=configs/default.py --workdir=/tmp/deepnet_default
"""

import ml_collections

from deepnet_jax.models import default_config as model_default


def get_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.model = model_default()
    c.model.d_model = 128  # small enough for a CPU run of a few minutes
    c.model.num_heads = 4
    c.model.ffn_dim = 512
    c.model.vocab_size = 64
    c.model.max_len = 32
    c.model.dropout = 0.0

    c.data = ml_collections.ConfigDict()
    c.data.dataset = "synthetic_reversal"  # the only dataset until the data pipeline lands
    c.data.batch_size = 32  # sequences per step
    c.data.max_len = 16  # padded length of every batch

    c.optimizer = ml_collections.ConfigDict()
    c.optimizer.name = "adamw"
    c.optimizer.learning_rate = 1e-3  # peak learning rate
    c.optimizer.b1 = 0.9
    c.optimizer.b2 = 0.98
    c.optimizer.eps = 1e-8
    c.optimizer.weight_decay = 0.0
    c.optimizer.grad_clip = 1.0  # global-norm clip; 0 disables

    c.schedule = ml_collections.ConfigDict()
    c.schedule.name = "inverse_sqrt"  # inverse_sqrt or constant
    c.schedule.warmup_steps = 100
    c.schedule.warmup_init_lr = 1e-7

    c.label_smoothing = 0.0
    c.total_steps = 400  # optimizer updates
    c.log_every = 20  # progress-bar refresh interval (steps)
    c.eval_batches = 8  # held-out batches for the final evaluation
    c.seed = 0
    return c
