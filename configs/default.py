"""Default run: a 6L-6L DeepNorm encoder-decoder learning to reverse sequences.

Run: python train.py --config=configs/default.py --workdir=/tmp/deepnet_default
"""

import os

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
    c.data.dataset = "synthetic_reversal"  # or a corpus: ding_de_en, shakespeare, local_parallel,
    # local_text, wmt14_translate/de-en, wmt17_translate/de-en (deepnet_jax.data.sources)
    c.data.data_dir = os.environ.get("DEEPNET_JAX_DATA", os.path.expanduser("~/deepnet_jax_data"))
    c.data.source_dir = ""  # local_parallel / local_text: folder with {train,valid,test}.<ext>
    c.data.src_ext = ""  # local_parallel: source file extension (e.g. "de"); local_text: file ext
    c.data.tgt_ext = ""  # local_parallel: target file extension (e.g. "en")
    c.data.source_lang = ""  # translation direction; "" = the dataset's default (de->en)
    c.data.target_lang = ""
    c.data.tokenizer = "bpe"  # SentencePiece model type: bpe, unigram or char
    c.data.vocab_size = 8000  # SentencePiece pieces (upper bound for char); <= model.vocab_size
    c.data.character_coverage = 1.0  # SentencePiece character coverage
    c.data.batch_size = 32  # global rows per step (fixed batching and packing)
    c.data.max_tokens = 0  # > 0: global token budget per step, length-bucketed batches
    c.data.bucket_boundaries = ()  # bucket lengths for max_tokens; () = 8, 16, 32, ..., max_len
    c.data.max_len = 16  # longest example in tokens (longer ones are dropped and counted)
    c.data.packing = False  # pack several examples per row (segment ids + positions)
    c.data.lm_chunking = "stream"  # LM/MLM: "stream" windows over the text, or one "document" each
    c.data.mask_rate = 0.15  # MLM: fraction of tokens predicted (80% MASK, 10% random, 10% kept)

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
