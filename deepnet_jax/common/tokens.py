"""The special token ids, defined once for every corpus, the synthetic task and the models.

====  =========  ==========================================================================
id    piece      use
====  =========  ==========================================================================
0     ``<pad>``  padding: masked as an attention key and given weight 0 in every loss
1     ``<s>``    BOS: first decoder input (translation), start of an LM document
2     ``</s>``   EOS: ends every source, target and LM document; stops generation
3     ``<unk>``  unknown piece (SentencePiece; rare with byte fallback, on for bpe/unigram)
4     ``<mask>`` the MLM mask token (SentencePiece's first user-defined piece)
5 …   —          ordinary (content) ids: tokenizer pieces, the synthetic task's symbols
====  =========  ==========================================================================

Every corpus's SentencePiece tokenizer is trained with these ids
(:mod:`deepnet_jax.data.tokenizer` passes ``pad_id``/``bos_id``/``eos_id``/``unk_id`` and
``<mask>`` as the one user-defined symbol, which SentencePiece puts right after them, and
checks every loaded model against :data:`PIECES`), so saved tokenizers and runs keep them.
The synthetic reversal task (:mod:`deepnet_jax.data.synthetic`) uses the same PAD, BOS, EOS and
MASK and draws its content from ``FIRST_CONTENT_ID`` up; it never emits UNK.
"""

from __future__ import annotations

PAD_ID = 0
BOS_ID = 1
EOS_ID = 2
UNK_ID = 3
MASK_ID = 4
NUM_RESERVED = 5  # ids 0 … 4 above
FIRST_CONTENT_ID = NUM_RESERVED  # the first ordinary id (maskable, a random MLM replacement)

MASK_PIECE = "<mask>"
PIECES = {PAD_ID: "<pad>", BOS_ID: "<s>", EOS_ID: "</s>", UNK_ID: "<unk>", MASK_ID: MASK_PIECE}
