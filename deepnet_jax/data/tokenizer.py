"""SentencePiece tokenizers trained on a corpus's training split and cached in ``data_dir``.

Reserved ids: :mod:`deepnet_jax.common.tokens` (0 ``<pad>``, 1 ``<s>`` BOS, 2 ``</s>`` EOS, 3
``<unk>``, 4 ``<mask>``); the trainer options below take them from there, and every loaded model is
checked against them.

Model types: ``bpe`` and ``unigram`` (byte fallback on, so any UTF-8 text round-trips), and
``char`` for character-level runs such as the labml Shakespeare replication (one piece per
character seen in training, no dummy-prefix space; byte fallback off, so the vocabulary is the
character set itself and unseen characters become ``<unk>``).

Normalization is SentencePiece's ``identity`` rule: text is not rewritten (the default NFKC rule
turns "…" into "..."), so ``decode(encode(s)) == s`` for every string a bpe/unigram model sees.

A model is cached as ``<data_dir>/tokenizers/<dataset>-<model_type>-<vocab>-<hash>.model`` where
the hash covers every training option; a missing, empty or corrupt file is retrained (and
replaced atomically), never crashed on.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import sentencepiece as spm

from deepnet_jax.common import console, tokens

MODEL_TYPES = ("bpe", "unigram", "char")


@dataclasses.dataclass(frozen=True)
class TokenizerOptions:
    """Everything that determines a trained tokenizer (and therefore its cache key).

    ``vocab_size`` is exact for bpe/unigram and an upper bound for char (the character set of
    the training text, plus the 5 reserved pieces, decides). ``max_sentences`` caps the sentences
    SentencePiece samples for training (0: all), which keeps WMT-sized corpora tractable.
    """

    model_type: str = "bpe"
    vocab_size: int = 8000
    character_coverage: float = 1.0
    max_sentences: int = 2_000_000
    seed: int = 0

    def validate(self) -> None:
        if self.model_type not in MODEL_TYPES:
            raise ValueError(
                f"data.tokenizer={self.model_type!r}; allowed values are {MODEL_TYPES}"
            )
        min_vocab = tokens.NUM_RESERVED + (1 if self.model_type == "char" else 256 + 1)
        if isinstance(self.vocab_size, bool) or not isinstance(self.vocab_size, int):
            raise ValueError(f"data.vocab_size={self.vocab_size!r} must be an integer")
        if self.vocab_size < min_vocab:
            raise ValueError(
                f"data.vocab_size={self.vocab_size} must be >= {min_vocab} for "
                f"data.tokenizer={self.model_type!r} ({tokens.NUM_RESERVED} reserved ids"
                + (" + 256 byte-fallback pieces)" if self.model_type != "char" else ")")
            )
        if not 0.9 <= self.character_coverage <= 1.0:
            raise ValueError(
                f"data.character_coverage={self.character_coverage} must be in [0.9, 1.0]"
            )

    def cache_name(self, dataset: str) -> str:
        options = json.dumps(dataclasses.asdict(self), sort_keys=True)
        digest = hashlib.sha256(f"{dataset}|{options}".encode()).hexdigest()[:10]
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", dataset)
        return f"{safe}-{self.model_type}-{self.vocab_size}-{digest}.model"


class Tokenizer:
    """A SentencePiece model with the reserved ids of :mod:`deepnet_jax.common.tokens`; picklable
    (for grain workers)."""

    def __init__(self, model_proto: bytes):
        self._proto = model_proto
        self._sp = spm.SentencePieceProcessor(model_proto=model_proto)
        if self._sp.get_piece_size() < tokens.NUM_RESERVED:
            raise ValueError("not a SentencePiece model with the reserved pieces")
        for i, piece in tokens.PIECES.items():
            if self._sp.id_to_piece(i) != piece:
                raise ValueError(f"tokenizer id {i} is {self._sp.id_to_piece(i)!r}, not {piece!r}")

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    @property
    def model_proto(self) -> bytes:
        return self._proto

    def encode(self, text: str) -> np.ndarray:
        """Text → int32 ids [n] (no BOS/EOS added)."""
        return np.asarray(self._sp.encode(text), dtype=np.int32)

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        return [np.asarray(ids, dtype=np.int32) for ids in self._sp.encode(list(texts))]

    def decode(self, ids: Iterable[int]) -> str:
        """Ids → text, stopping at the first EOS and skipping pad/BOS/mask."""
        out = []
        for i in (int(i) for i in ids):
            if i == tokens.EOS_ID:
                break
            if i not in (tokens.PAD_ID, tokens.BOS_ID, tokens.MASK_ID):
                out.append(i)
        return self._sp.decode(out)

    def id_to_piece(self, i: int) -> str:
        return self._sp.id_to_piece(int(i))

    def __getstate__(self) -> dict:
        return {"proto": self._proto}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["proto"])

    @classmethod
    def load(cls, path: str) -> Tokenizer:
        with open(path, "rb") as f:
            return cls(f.read())


def train(options: TokenizerOptions, sentences: Iterable[str]) -> Tokenizer:
    """Train a SentencePiece model on ``sentences`` (empty strings are skipped).

    An exception raised while reading ``sentences`` is re-raised as is. For ``char`` models
    every character of the training text must get its own piece: a ``vocab_size`` too small
    for the character set is an error, not a silent mapping to ``<unk>``.
    """
    options.validate()
    proto = io.BytesIO()
    reader = _SentenceReader(sentences, track_chars=options.model_type == "char")
    spm.set_random_generator_seed(options.seed)  # sentence sampling is seeded
    try:
        _train_sentencepiece(options, reader, proto)
    except RuntimeError as e:
        if reader.error is not None:
            raise reader.error from None
        detail = " ".join(str(e).split("] ")[-1].split())
        if "Vocabulary size" in detail:
            raise ValueError(f"data.vocab_size={options.vocab_size}: {detail}") from None
        raise RuntimeError(f"SentencePiece training failed: {detail}") from None
    if reader.error is not None:
        raise reader.error
    tokenizer = Tokenizer(proto.getvalue())
    if reader.chars is not None:
        needed = len(reader.chars) + tokens.NUM_RESERVED
        if options.vocab_size < needed:
            raise ValueError(
                f"data.vocab_size={options.vocab_size} is below the {len(reader.chars)} "
                f"characters of the training text + {tokens.NUM_RESERVED} reserved ids = "
                f"{needed} that data.tokenizer='char' needs"
            )
        if tokenizer.vocab_size < needed:  # character_coverage < 1 or sentence sampling
            console.warn(
                f"char tokenizer: {needed - tokenizer.vocab_size} of {len(reader.chars)} "
                "training characters have no piece and encode as <unk>"
            )
    return tokenizer


class _SentenceReader:
    """Iterates non-empty sentences for SentencePiece, keeping any exception the source raised
    (SentencePiece would otherwise wrap it in a multi-line RuntimeError) and, for char models,
    the character set (spaces count as SentencePiece's ``▁``)."""

    def __init__(self, sentences: Iterable[str], track_chars: bool):
        self._sentences = sentences
        self.error: BaseException | None = None
        self.chars: set[str] | None = set() if track_chars else None

    def __iter__(self):
        try:
            for s in self._sentences:
                if s:
                    if self.chars is not None:
                        self.chars.update(s)
                    yield s
        except Exception as e:
            self.error = e
            raise


def _train_sentencepiece(options: TokenizerOptions, sentences: Iterable[str], proto) -> None:
    is_char = options.model_type == "char"
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=proto,
        model_type=options.model_type,
        vocab_size=options.vocab_size,
        hard_vocab_limit=not is_char,
        pad_id=tokens.PAD_ID,
        bos_id=tokens.BOS_ID,
        eos_id=tokens.EOS_ID,
        unk_id=tokens.UNK_ID,
        user_defined_symbols=[tokens.MASK_PIECE],  # the next id: tokens.MASK_ID
        byte_fallback=not is_char,
        character_coverage=options.character_coverage,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=not is_char,  # char: exactly one id per character
        input_sentence_size=options.max_sentences,
        shuffle_input_sentence=True,
        num_threads=os.cpu_count() or 1,
        minloglevel=2,
    )


def cache_path(options: TokenizerOptions, dataset: str, data_dir: str) -> str:
    """Where the tokenizer for (dataset, options) is cached under ``data_dir``."""
    return os.path.join(data_dir, "tokenizers", options.cache_name(dataset))


def save(tokenizer: Tokenizer, path: str) -> None:
    """Write the model atomically (temporary file + rename): readers never see half a file."""
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(tokenizer.model_proto)
    os.replace(tmp, path)


def load_or_train(
    options: TokenizerOptions,
    dataset: str,
    data_dir: str,
    sentences: Callable[[], Iterable[str]],
) -> tuple[Tokenizer, str]:
    """The cached tokenizer for (dataset, options), training and caching it when needed.

    ``sentences`` is called only when training is needed. Returns (tokenizer, path).
    """
    options.validate()
    path = cache_path(options, dataset, data_dir)
    if os.path.exists(path):
        try:
            return Tokenizer.load(path), path
        except (OSError, RuntimeError, ValueError) as e:
            console.warn(f"cached tokenizer {path} is unreadable ({e}); retraining it")
    tokenizer = train(options, sentences())
    save(tokenizer, path)
    console.say(f"trained {dataset} tokenizer ({tokenizer.vocab_size} pieces) -> {path}")
    return tokenizer, path
