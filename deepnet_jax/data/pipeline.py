"""Input pipelines: corpus → SentencePiece → examples → grain datasets of fixed-shape batches.

Public API::

    from deepnet_jax.data import pipeline
    data = pipeline.DataPipeline(run_config.data, "encdec")   # a RunConfig's DataOptions
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
from collections.abc import Iterator

import grain
import jax
import numpy as np

from deepnet_jax.common import console
from deepnet_jax.data import batching, examples, registry, sources
from deepnet_jax.data.options import FEATURES, DataOptions
from deepnet_jax.data.prepared import (
    PreparedCorpus,
    dataset_key,
    iter_records,
    prepare_on_all_processes,
    source_ids,
)
from deepnet_jax.data.tokenizer import Tokenizer


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
            builder = sources.prepare(options.request())
            tokenizer = Tokenizer.load(tokenizer_path)
            corpus = PreparedCorpus(
                builder, dataset_key(builder, options.dataset), tokenizer, tokenizer_path
            )
        self.builder = corpus.builder
        self.dataset_key = corpus.key
        self.tokenizer = corpus.tokenizer
        self.tokenizer_path = corpus.tokenizer_path

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def _records(self, split: str):
        return sources.open_split(self.options.request(), split, self.builder)

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
