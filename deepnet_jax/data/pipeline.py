"""Input pipelines: corpus → SentencePiece → examples → grain datasets of fixed-shape batches.

Public API::

    from deepnet_jax.data import pipeline
    data = pipeline.DataPipeline(pipeline.DataOptions.from_config(config.data, seed), "encdec")
    it = iter(data.train_dataset())        # endless, checkpointable: it.get_state()/set_state()
    batch = next(it)                        # this process's rows, dict of numpy arrays
    batch = pipeline.global_batch(batch, sharding)   # jax.Arrays over the whole mesh
    for batch in data.eval_batches("validation"): ...

A batch is a dict of ``[rows, length]`` arrays: ``inputs``, ``targets`` (int32), ``weights``
(float32, 0 on padding and on unmasked MLM positions), ``src`` for translation, and with
packing ``segment_ids``/``positions`` (+ ``src_segment_ids``/``src_positions``). Rows are
this process's contiguous share of the global batch; every process computes the same plan,
so shares are disjoint and together cover each global batch.

Determinism: without packing, global batch i of the endless training stream depends only on
(seed, i): its epoch is i // batches_per_epoch, the batch order within an epoch is grain's
seeded per-epoch shuffle, which examples of a length bucket share a batch and the MLM masks come
from ``numpy.random.default_rng([seed, epoch, …])``. With packing each process packs its own
stride of the shuffled example stream, so batches depend on (seed, process count, i). Either
way the grain iterator's ``get_state()`` (the position in the stream, plus the packer's state)
restores exactly the batches an uninterrupted run would have seen.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from typing import Any

import grain
import jax
import ml_collections
import numpy as np
from jax.experimental import multihost_utils

from deepnet_jax.common import config_schema, console
from deepnet_jax.common.tokens import EOS_ID
from deepnet_jax.data import batching, examples, registry, sources
from deepnet_jax.data.fetch import DataPreparationError
from deepnet_jax.data.tokenizer import (
    MODEL_TYPES,
    Tokenizer,
    TokenizerOptions,
    cache_path,
    load_or_train,
    save,
)

FEATURES = {
    "translation": ("src", "inputs", "targets"),
    "lm": ("inputs", "targets"),
    "mlm": ("inputs", "targets"),
}


def default_data_dir() -> str:
    """Where prepared corpora and tokenizers live: ``$DEEPNET_JAX_DATA``, else
    ``~/deepnet_jax_data`` (read when a config is made)."""
    return os.environ.get("DEEPNET_JAX_DATA", os.path.expanduser("~/deepnet_jax_data"))


def default_config() -> ml_collections.ConfigDict:
    """The ``config.data`` fields with their defaults (declared by :class:`DataOptions`)."""
    c = config_schema.config_dict(DataOptions)
    c.data_dir = default_data_dir()
    return c


@dataclasses.dataclass(frozen=True)
class DataOptions:
    """The ``config.data`` fields, each declared once with its default, allowed values and
    comment, plus the run's ``seed`` (``config.seed``, not a data field).

    ``batch_size`` and ``max_tokens`` are global: summed over all processes and devices
    (fairseq's ``--max-tokens`` is per GPU).
    """

    dataset: str = config_schema.field(
        registry.SYNTHETIC, "a dataset of deepnet_jax/data/registry.py", choices=registry.NAMES
    )
    data_dir: str = config_schema.field(
        "",
        "prepared corpora and tokenizers (default: $DEEPNET_JAX_DATA, else ~/deepnet_jax_data)",
        resumable=True,
    )
    source_dir: str = config_schema.field(
        "", "local_parallel / local_text: folder with {train,valid,test}.<ext>", resumable=True
    )
    src_ext: str = config_schema.field(
        "", "local_parallel: source file extension (e.g. de); local_text: the files' extension"
    )
    tgt_ext: str = config_schema.field("", "local_parallel: target file extension (e.g. en)")
    source_lang: str = config_schema.field(
        "", "translation direction; empty: the dataset's default"
    )
    target_lang: str = config_schema.field("", "(see source_lang)")
    tokenizer: str = config_schema.field("bpe", "SentencePiece model type", choices=MODEL_TYPES)
    vocab_size: int = config_schema.field(
        8000,
        "SentencePiece pieces (an upper bound for char; at least 262 for bpe/unigram, 6 "
        "for char); <= model.vocab_size",
        low=1,
    )
    character_coverage: float = config_schema.field(
        1.0, "SentencePiece character coverage", low=0.9, high=1
    )
    max_len: int = config_schema.field(
        128,
        "longest example in tokens (longer ones: dropped from training, cut in evaluation)",
        low=1,
    )
    batch_size: int = config_schema.field(
        32, "global rows per step (fixed batching and packing)", low=1
    )
    max_tokens: int = config_schema.field(
        0, "> 0: global token budget per step, length-bucketed batches", low=0
    )
    bucket_boundaries: tuple[int, ...] = config_schema.field(
        (), "bucket lengths for max_tokens; empty: 8, 16, 32, ..., max_len", kind="increasing_ints"
    )
    packing: bool = config_schema.field(
        False, "pack several examples per row (segment ids + positions)"
    )
    lm_chunking: str = config_schema.field(
        "stream",
        "LM/MLM: stream windows over the text, or one document each",
        choices=examples.LM_CHUNKING,
    )
    mask_rate: float = config_schema.field(
        0.15,
        "MLM: fraction of tokens predicted (80% MASK, 10% random, 10% kept)",
        low=0,
        high=1,
        low_open=True,
        high_open=True,
    )
    seed: int = 0  # the run's seed (data order), not a data field

    @classmethod
    def from_config(cls, data: ml_collections.ConfigDict, seed: int) -> DataOptions:
        fields = list(config_schema.specs(cls))
        config_schema.check_names(data, fields, "data.", missing_ok=True)  # saved runs: defaults
        values = {k: data[k] for k in data}
        if isinstance(values.get("bucket_boundaries"), list):
            values["bucket_boundaries"] = tuple(values["bucket_boundaries"])
        return cls(**values, seed=seed)

    def validate(self) -> None:
        """One-line ValueError for the first bad field (before anything is prepared): each
        field against its declaration, then the relations between them."""
        sources.dataset_kind(self.dataset)
        config_schema.check_values(dataclasses.asdict(self), DataOptions, "data.")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed={self.seed!r} must be an integer >= 0")
        if self.packing and self.max_tokens:
            raise ValueError(
                "data.packing=True needs data.max_tokens=0 (packed rows are "
                "data.batch_size × data.max_len tokens)"
            )
        if not self.data_dir:
            raise ValueError("data.data_dir is empty; give a folder for prepared data")
        if self.bucket_boundaries and not self.max_tokens:
            raise ValueError(
                f"data.bucket_boundaries={self.bucket_boundaries} needs data.max_tokens > 0 "
                "(fixed-size batches have one shape: data.batch_size × data.max_len)"
            )
        batching.bucket_boundaries(self.max_len, self.bucket_boundaries)
        self.tokenizer_options().validate()
        sources.check_arguments(
            self.dataset,
            source_lang=self.source_lang,
            target_lang=self.target_lang,
            **self.source_kwargs(),
        )

    def tokenizer_options(self) -> TokenizerOptions:
        return TokenizerOptions(
            model_type=self.tokenizer,
            vocab_size=self.vocab_size,
            character_coverage=self.character_coverage,
        )

    def source_kwargs(self) -> dict[str, Any]:
        return {
            "source_dir": self.source_dir or None,
            "src_ext": self.src_ext,
            "tgt_ext": self.tgt_ext,
        }

    def prepare_kwargs(self) -> dict[str, Any]:
        """:meth:`source_kwargs` plus the languages (they pick ``libreoffice_help``'s config)."""
        return {
            **self.source_kwargs(),
            "source_lang": self.source_lang,
            "target_lang": self.target_lang,
        }


@dataclasses.dataclass(frozen=True)
class PreparedCorpus:
    """A prepared dataset (its tfds builder and cache key) with its tokenizer."""

    builder: Any
    key: str
    tokenizer: Tokenizer
    tokenizer_path: str


def open_records(options: DataOptions, split: str, builder: Any = None):
    """Random-access ``{"source", "target"}`` / ``{"text"}`` records of ``split``."""
    return sources.open_split(
        options.dataset,
        options.data_dir,
        split,
        source_lang=options.source_lang,
        target_lang=options.target_lang,
        builder=builder,
        **options.source_kwargs(),
    )


def iter_records(records, chunk: int = 10_000) -> Iterator[dict[str, str]]:
    """Every record of a random-access source in order, read in slices (batched reads)."""
    for start in range(0, len(records), chunk):
        yield from records[start : start + chunk]


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def prepare_corpus(options: DataOptions, tokenizer_proto: bytes | None = None) -> PreparedCorpus:
    """Prepare the dataset if missing and load (or train and cache) its tokenizer.

    The tokenizer is trained on the training split only — both sides for parallel data (one
    joint source+target model). ``tokenizer_proto`` (another process's trained model) is
    installed in the cache instead of training.
    """
    builder = sources.prepare(options.dataset, options.data_dir, **options.prepare_kwargs())
    key = _dataset_key(builder, options.dataset)
    if tokenizer_proto is not None:
        tokenizer = Tokenizer(tokenizer_proto)
        path = cache_path(options.tokenizer_options(), key, options.data_dir)
        if not os.path.exists(path) or _read_bytes(path) != tokenizer_proto:
            save(tokenizer, path)
        return PreparedCorpus(builder, key, tokenizer, path)
    fields = (
        ("source", "target") if sources.dataset_kind(options.dataset) == "parallel" else ("text",)
    )

    def sentences() -> Iterator[str]:
        for record in iter_records(open_records(options, "train", builder)):
            for field in fields:
                yield record[field]

    tokenizer, path = load_or_train(options.tokenizer_options(), key, options.data_dir, sentences)
    return PreparedCorpus(builder, key, tokenizer, path)


def prepare_on_all_processes(options: DataOptions) -> PreparedCorpus:
    """:func:`prepare_corpus` on process 0 first, then on the others with process 0's tokenizer.

    Process 0 prepares the dataset and trains (or loads) the tokenizer; its success flag and
    tokenizer bytes are broadcast, so every process gets a byte-identical tokenizer (hence
    identical examples and batch plans) whether ``data_dir`` is shared or per host. The others
    then prepare their dataset (found ready on a shared disk, built from the same packages on a
    per-host disk). A failure on process 0 is raised there and as one line on the others; no
    process is left waiting at a barrier.
    """
    if jax.process_count() == 1:
        return prepare_corpus(options)
    corpus, error = None, None
    if jax.process_index() == 0:
        try:
            corpus = prepare_corpus(options)
        except Exception as e:
            error = e
    ok = int(multihost_utils.broadcast_one_to_all(np.int32(error is None)))
    if not ok:
        if error is not None:
            raise error
        raise DataPreparationError("process 0 could not prepare the data; its log has the error")
    proto = corpus.tokenizer.model_proto if corpus is not None else b""
    size = int(multihost_utils.broadcast_one_to_all(np.int64(len(proto))))
    buffer = np.frombuffer(proto, np.uint8) if corpus is not None else np.zeros(size, np.uint8)
    proto = np.asarray(multihost_utils.broadcast_one_to_all(buffer), np.uint8).tobytes()
    return corpus if corpus is not None else prepare_corpus(options, tokenizer_proto=proto)


def _dataset_key(builder: Any, dataset: str) -> str:
    """Name + version of the prepared data, plus a digest of a local corpus's input files.

    The tokenizer cache is keyed on it, so editing a local corpus retrains the tokenizer.
    """
    info = getattr(builder, "info", None)
    key = getattr(info, "full_name", dataset)
    fingerprint = (getattr(info, "metadata", None) or {}).get("input_fingerprint")
    if fingerprint:
        digest = json.dumps(fingerprint, sort_keys=True, default=str).encode()
        key += "@" + hashlib.sha256(digest).hexdigest()[:10]
    return key


def source_ids(
    tokenizer: Tokenizer, texts: Sequence[str], max_len: int
) -> tuple[list[np.ndarray], list[bool]]:
    """Source sentences as encoder input: encode(text) + EOS, as in training. A sentence of
    more than ``max_len − 1`` pieces is cut to its first ``max_len − 1`` (+ EOS) and flagged."""
    ids, truncated = [], []
    for body in tokenizer.encode_batch(list(texts)):
        truncated.append(len(body) > max_len - 1)
        ids.append(np.append(body[: max_len - 1], EOS_ID).astype(np.int32))
    return ids, truncated


@dataclasses.dataclass(frozen=True)
class TranslationSet:
    """A parallel split for decoding: model-ready source ids and the raw texts, in order."""

    source_ids: list[np.ndarray]
    sources: list[str]
    references: list[str]
    truncated: list[bool]
    seen: list[bool]  # the source occurs verbatim among the training split's sources


class DataPipeline:
    """A prepared corpus with its tokenizer, serving training and evaluation batches.

    Construction prepares the dataset if missing (``sources.prepare``) and loads or trains the
    tokenizer on the training split. ``row_multiple`` is the number of data-parallel row shards
    every batch's row count must divide into (at least the process count).
    """

    def __init__(
        self,
        options: DataOptions,
        arch: str,
        *,
        process_index: int | None = None,
        process_count: int | None = None,
        row_multiple: int = 1,
        tokenizer_path: str | None = None,
    ):
        options.validate()
        if arch not in examples.ARCH_TASK:
            raise ValueError(f"model.arch={arch!r}; allowed values are {tuple(examples.ARCH_TASK)}")
        self.options = options
        self.task = examples.ARCH_TASK[arch]
        entry = registry.corpus(options.dataset)
        self.kind = entry.kind
        if self.task not in entry.tasks:
            raise ValueError(
                f"data.dataset={options.dataset!r} is {self.kind} data but model.arch={arch!r} "
                f"trains {self.task}; use an encdec model for parallel data, encoder/decoder "
                "for text"
            )
        self.process_index = jax.process_index() if process_index is None else process_index
        self.process_count = jax.process_count() if process_count is None else process_count
        if not 0 <= self.process_index < self.process_count:
            raise ValueError(
                f"process_index={self.process_index} outside [0, {self.process_count})"
            )
        self.row_multiple = int(np.lcm(row_multiple, self.process_count))
        self.features = FEATURES[self.task]
        self.buckets = batching.make_buckets(
            options.max_len,
            options.batch_size,
            options.max_tokens,
            options.bucket_boundaries,
            self.row_multiple,
        )
        if tokenizer_path is None:
            corpus = prepare_on_all_processes(options)
        else:  # a run's own tokenizer (evaluation): the tokenizer cache is not touched
            builder = sources.prepare(options.dataset, options.data_dir, **options.prepare_kwargs())
            tokenizer = Tokenizer.load(tokenizer_path)
            corpus = PreparedCorpus(
                builder, _dataset_key(builder, options.dataset), tokenizer, tokenizer_path
            )
        self.builder = corpus.builder
        self.dataset_key = corpus.key
        self.tokenizer = corpus.tokenizer
        self.tokenizer_path = corpus.tokenizer_path

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def _records(self, split: str):
        return open_records(self.options, split, self.builder)

    @functools.lru_cache(maxsize=3)  # noqa: B019 (one pipeline per run; splits are few)
    def examples(self, split: str) -> examples.TokenizedExamples:
        """The tokenized training examples of ``split``: longer than ``data.max_len``
        dropped (cached)."""
        result = self._tokenize(split, truncate=False)
        dropped = ", ".join(f"{k}={v:,}" for k, v in result.dropped.items() if v)
        console.say(
            f"{self.options.dataset}/{split}: {result.num_records:,} records -> "
            f"{len(result):,} training examples" + (f" (dropped: {dropped})" if dropped else "")
        )
        return result

    @functools.lru_cache(maxsize=3)  # noqa: B019
    def eval_examples(self, split: str) -> examples.TokenizedExamples:
        """The examples of ``split`` that evaluation scores: every pair (every document),
        the long ones cut to ``data.max_len`` (see :mod:`deepnet_jax.data.examples`; LM
        stream windows as in training) (cached)."""
        return self._tokenize(split, truncate=True)

    def _tokenize(self, split: str, truncate: bool) -> examples.TokenizedExamples:
        o = self.options
        records = list(iter_records(self._records(split)))
        result = examples.tokenize(
            records, self.tokenizer, self.task, o.max_len, o.lm_chunking, truncate
        )
        if len(result) == 0:
            raise ValueError(
                f"{o.dataset} {split} split: no example of at most data.max_len={o.max_len} "
                f"tokens ({len(records)} records; dropped {result.dropped})"
            )
        return result

    def eval_counts(self, split: str) -> dict[str, int]:
        """What :meth:`eval_batches` covers: ``loss_truncated`` examples cut to
        ``data.max_len`` and ``loss_dropped`` records not scored (empty texts)."""
        split_examples = self.eval_examples(split)
        return {
            "loss_truncated": split_examples.truncated,
            "loss_dropped": split_examples.dropped["too_long"] + split_examples.dropped["empty"],
        }

    @functools.lru_cache(maxsize=3)  # noqa: B019
    def translation_set(self, split: str) -> TranslationSet:
        """Every pair of a parallel ``split``, in order, for BLEU: the source as model input
        (ids + EOS, as in training) with the raw source and reference texts (cached).

        Unlike training examples nothing is dropped: a source longer than ``data.max_len``
        tokens is cut to its first ``max_len − 1`` pieces + EOS and flagged in ``truncated``.
        ``seen`` flags the sources that occur verbatim in the training split (short strings
        repeated across documents): BLEU on the others is translation, not recall.
        """
        if self.task != "translation":
            raise ValueError(f"data.dataset={self.options.dataset!r} is not parallel data")
        records = list(iter_records(self._records(split)))
        texts = [r["source"] for r in records]
        ids, truncated = source_ids(self.tokenizer, texts, self.options.max_len)
        if not records:
            raise ValueError(f"{self.options.dataset} {split} split is empty")
        training = self.training_sources()
        seen = [text in training for text in texts]
        return TranslationSet(ids, texts, [r["target"] for r in records], truncated, seen)

    @functools.lru_cache(maxsize=1)  # noqa: B019
    def training_sources(self) -> frozenset[str]:
        """The raw source sentences of the training split (cached)."""
        return frozenset(r["source"] for r in iter_records(self._records("train")))

    def check_split(self, split: str) -> None:
        """Tokenize and plan ``split`` now, so a missing or empty split fails before training."""
        batching.BatchPlan(self.eval_examples(split).lengths, self.buckets, shuffle=False)

    def _example(self, split_examples, j: int, epoch: int) -> dict[str, np.ndarray]:
        ex = split_examples.examples[j]
        if self.task != "mlm":
            return ex
        rng = np.random.default_rng([self.options.seed, epoch, j])
        inputs, weights = examples.mask_tokens(
            ex["targets"], rng, self.vocab_size, self.options.mask_rate
        )
        return {"inputs": inputs, "targets": ex["targets"], "weights": weights}

    def _collate(self, split_examples, plan, epoch: int, k: int) -> dict[str, np.ndarray]:
        b, indices = plan.batch(epoch, k)
        indices = batching.local_rows(indices, self.process_index, self.process_count)
        rows = [None if j < 0 else self._example(split_examples, j, epoch) for j in indices]
        return batching.collate(rows, self.buckets[b].length, self.features)

    @property
    def _grain_seed(self) -> int:
        # grain reshuffles epoch e with seed + e; a hashed seed keeps runs with nearby seeds
        # from sharing shuffles one epoch apart.
        return int(np.random.SeedSequence([self.options.seed, 1]).generate_state(1)[0])

    def train_plan(self) -> batching.BatchPlan:
        return batching.BatchPlan(
            self.examples("train").lengths, self.buckets, self.options.seed, shuffle=True
        )

    def train_dataset(self, read_options: grain.ReadOptions | None = None) -> grain.IterDataset:
        """Endless training batches (this process's rows), reshuffled every epoch."""
        o = self.options
        train = self.examples("train")
        read_options = read_options or grain.ReadOptions(num_threads=2, prefetch_buffer_size=8)
        if o.packing:
            n = len(train)
            if n == 0:
                raise ValueError("the training split has no examples left after length filtering")
            stream = (
                grain.MapDataset.range(n)
                .seed(self._grain_seed)
                .shuffle()
                .repeat(None)
                .map_with_index(lambda i, j: self._example(train, j, i // n))
            )
            local = stream[self.process_index :: self.process_count]
            rows = o.batch_size // self.process_count
            return batching.pack(
                local.to_iter_dataset(read_options), o.max_len, rows, self.features, o.seed
            )
        plan = self.train_plan()
        n = plan.batches_per_epoch
        return (
            grain.MapDataset.range(n)
            .seed(self._grain_seed)
            .shuffle()
            .repeat(None)
            .map_with_index(lambda i, k: self._collate(train, plan, i // n, k))
            .to_iter_dataset(read_options)
        )

    def eval_batches(self, split: str = "validation") -> Iterator[dict[str, np.ndarray]]:
        """One ordered pass over ``split``'s :meth:`eval_examples` (each exactly once, no
        packing)."""
        split_examples = self.eval_examples(split)
        plan = batching.BatchPlan(split_examples.lengths, self.buckets, shuffle=False)
        for k in range(plan.batches_per_epoch):
            yield self._collate(split_examples, plan, 0, k)


def global_batch(
    local: dict[str, np.ndarray], sharding: jax.sharding.Sharding
) -> dict[str, jax.Array]:
    """Assemble every process's rows into global arrays sharded by ``sharding`` (rows first);
    with one process, a plain ``device_put`` of the batch."""
    if jax.process_count() == 1:
        return jax.device_put(local, sharding)
    return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local.items()}
