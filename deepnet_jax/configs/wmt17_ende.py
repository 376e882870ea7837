"""WMT-17 English→German through tfds' ``wmt17_translate/de-en`` (transformer-base widths).

Run (the first run downloads and prepares WMT-17 into data_dir; needs network):

    python -m deepnet_jax.cli.train --config=wmt17_ende --workdir=/tmp/wmt17 \\
        --config.data.data_dir=/path/to/tensorflow_datasets

DeepNet's WMT-17 depth sweep changes ``model.num_encoder_layers``/``num_decoder_layers``
(18L-18L … 100L-100L) with everything else as here, and ``model.scan_unroll`` back to 1 (a
deeper stack is scanned: its layers compile once).
"""

import ml_collections

from deepnet_jax.configs import base


def get_config() -> ml_collections.ConfigDict:
    c = base.get_config()
    m = c.model
    m.arch, m.scheme = "encdec", "deepnorm"
    m.num_encoder_layers = m.num_decoder_layers = 18
    m.d_model, m.num_heads, m.ffn_dim = 512, 8, 2048
    m.dropout = 0.1
    m.share_embeddings = True
    m.tie_embeddings = True
    m.dtype = "bfloat16"  # fp32 parameters, LN statistics, softmax and loss
    # each stack's 18 layers straight through, not in a loop: no stacked residuals for the
    # backward pass to fill and copy layer by layer, for a longer compile and a higher peak
    # (predicted on an H100 and a v5p-8: docs/scaling.md, "What it changed")
    m.scan_unroll = 18

    c.data.dataset = "wmt17_translate/de-en"
    c.data.source_lang, c.data.target_lang = "en", "de"
    c.data.vocab_size = 32000
    c.data.max_len = 256
    c.data.max_tokens = 32768  # global; fairseq's 4096 per GPU × 8 GPUs

    # ZeRO-3 over all devices (parameters, gradients and optimizer state sharded; the batch
    # too), as MaxText's default: each device updates 1/N of the optimizer state (the v5p-8
    # step's kernel model against data parallelism: docs/scaling.md). One device: the same
    # program either way.
    c.mesh.data, c.mesh.fsdp = 1, -1

    c.optimizer.learning_rate = 5e-4
    c.optimizer.weight_decay = 0.0
    c.schedule.warmup_steps = 4000
    c.label_smoothing = 0.1
    c.total_steps = 300000
    c.eval_every = 5000  # validation (loss; greedy BLEU for translation)
    c.final_split = "test"  # loss (and beam BLEU) on the test split at the end
    c.log_every = 100
    return c
