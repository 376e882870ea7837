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

Determinism: batch i of the endless training stream depends only on (seed, i) — its epoch
is i // batches_per_epoch, the batch order within an epoch is grain's seeded per-epoch shuffle,
bucket membership and MLM masks are drawn from ``numpy.random.default_rng([seed, epoch, …])``.
So restoring an iterator state (a step count) replays exactly the batches an uninterrupted run
would have seen.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Callable, Iterator
from typing import Any

import grain
import jax
import ml_collections
import numpy as np
from absl import logging
from jax.experimental import multihost_utils

from deepnet_jax.data import batching, examples, sources
from deepnet_jax.data.tokenizer import Tokenizer, TokenizerOptions, load_or_train

FEATURES = {
    "translation": ("src", "inputs", "targets"),
    "lm": ("inputs", "targets"),
    "mlm": ("inputs", "targets"),
}


@dataclasses.dataclass(frozen=True)
class DataOptions:
    """The ``config.data`` fields the pipeline reads (see ``configs/base.py`` for each)."""

    dataset: str
    data_dir: str
    source_dir: str = ""
    src_ext: str = ""
    tgt_ext: str = ""
    source_lang: str = ""
    target_lang: str = ""
    tokenizer: str = "bpe"
    vocab_size: int = 8000
    character_coverage: float = 1.0
    max_len: int = 128
    batch_size: int = 32
    max_tokens: int = 0
    bucket_boundaries: tuple[int, ...] = ()
    packing: bool = False
    lm_chunking: str = "stream"
    mask_rate: float = 0.15
    seed: int = 0

    @classmethod
    def from_config(cls, data: ml_collections.ConfigDict, seed: int) -> DataOptions:
        names = {f.name for f in dataclasses.fields(cls)} - {"seed"}
        unknown = sorted(set(data.keys()) - names)
        if unknown:
            raise ValueError(f"unknown data field(s) {unknown}; allowed fields are {sorted(names)}")
        values = {k: data[k] for k in data}
        if "bucket_boundaries" in values:
            values["bucket_boundaries"] = tuple(values["bucket_boundaries"])
        return cls(**values, seed=seed)

    def validate(self) -> None:
        """One-line ValueError for the first bad field (before anything is prepared)."""
        sources.dataset_kind(self.dataset)
        for name in ("max_len", "batch_size"):
            _check_int(name, getattr(self, name), 1)
        _check_int("max_tokens", self.max_tokens, 0)
        if not 0.0 < self.mask_rate < 1.0:
            raise ValueError(f"data.mask_rate={self.mask_rate} must be in (0, 1)")
        if self.lm_chunking not in examples.LM_CHUNKING:
            raise ValueError(
                f"data.lm_chunking={self.lm_chunking!r}; allowed values are {examples.LM_CHUNKING}"
            )
        if not isinstance(self.packing, bool):
            raise ValueError(f"data.packing={self.packing!r} must be True or False")
        if self.packing and self.max_tokens:
            raise ValueError(
                "data.packing=True needs data.max_tokens=0 (packed rows are "
                "data.batch_size × data.max_len tokens)"
            )
        if not self.data_dir:
            raise ValueError("data.data_dir is empty; give a folder for prepared data")
        batching.bucket_boundaries(self.max_len, self.bucket_boundaries)
        self.tokenizer_options().validate()

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


def open_records(options: DataOptions, split: str):
    """Random-access ``{"source", "target"}`` / ``{"text"}`` records of ``split``."""
    return sources.open_split(
        options.dataset,
        options.data_dir,
        split,
        source_lang=options.source_lang,
        target_lang=options.target_lang,
        **options.source_kwargs(),
    )


def prepare_corpus(options: DataOptions) -> tuple[str, Tokenizer, str]:
    """Prepare the dataset if missing and load (or train and cache) its tokenizer.

    The tokenizer is trained on the training split only — both sides for parallel data (one
    joint source+target model). Returns (dataset key, tokenizer, tokenizer path).
    """
    builder = sources.prepare(options.dataset, options.data_dir, **options.source_kwargs())
    key = _dataset_key(builder, options.dataset)
    fields = (
        ("source", "target") if sources.dataset_kind(options.dataset) == "parallel" else ("text",)
    )

    def sentences() -> Iterator[str]:
        records = open_records(options, "train")
        for i in range(len(records)):
            record = records[i]
            for field in fields:
                yield record[field]

    tokenizer, path = load_or_train(options.tokenizer_options(), key, options.data_dir, sentences)
    return key, tokenizer, path


def _first_process_then_others(prepare: Callable[[], Any]) -> Any:
    """Run ``prepare`` on process 0 first, then (after a barrier) on the other processes.

    With a shared ``data_dir`` the others then find the dataset and tokenizer ready instead of
    racing to build them; with per-host disks (TPU VMs) each host builds its own copy.
    """
    if jax.process_count() == 1:
        return prepare()
    result = prepare() if jax.process_index() == 0 else None
    multihost_utils.sync_global_devices("deepnet_jax.data.prepare")
    return result if jax.process_index() == 0 else prepare()


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


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"data.{name}={value!r} must be an integer >= {minimum}")


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
    ):
        options.validate()
        if arch not in examples.ARCH_TASK:
            raise ValueError(f"model.arch={arch!r}; allowed values are {tuple(examples.ARCH_TASK)}")
        self.options = options
        self.task = examples.ARCH_TASK[arch]
        self.kind = sources.dataset_kind(options.dataset)
        if (self.kind == "parallel") != (self.task == "translation"):
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
        self.dataset_key, self.tokenizer, self.tokenizer_path = _first_process_then_others(
            functools.partial(prepare_corpus, options)
        )

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def _records(self, split: str):
        return open_records(self.options, split)

    @functools.lru_cache(maxsize=3)  # noqa: B019 (one pipeline per run; splits are few)
    def examples(self, split: str) -> examples.TokenizedExamples:
        """The tokenized, length-filtered examples of ``split`` (cached)."""
        records = self._records(split)
        records = [records[i] for i in range(len(records))]
        result = examples.tokenize(
            records, self.tokenizer, self.task, self.options.max_len, self.options.lm_chunking
        )
        logging.info(
            "%s/%s: %d records -> %d examples; dropped %s",
            self.options.dataset,
            split,
            len(records),
            len(result),
            result.dropped,
        )
        return result

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
                .seed(o.seed)
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
            .seed(o.seed)
            .shuffle()
            .repeat(None)
            .map_with_index(lambda i, k: self._collate(train, plan, i // n, k))
            .to_iter_dataset(read_options)
        )

    def eval_batches(self, split: str = "validation") -> Iterator[dict[str, np.ndarray]]:
        """One ordered pass over ``split`` (every example exactly once, no packing)."""
        split_examples = self.examples(split)
        plan = batching.BatchPlan(split_examples.lengths, self.buckets, shuffle=False)
        for k in range(plan.batches_per_epoch):
            yield self._collate(split_examples, plan, 0, k)


def global_batch(
    local: dict[str, np.ndarray], sharding: jax.sharding.Sharding
) -> dict[str, jax.Array]:
    """Assemble every process's rows into global arrays sharded by ``sharding`` (rows first)."""
    return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local.items()}


def model_kwargs(batch: dict[str, Any]) -> dict[str, Any]:
    """Packing keywords of a batch for ``model.apply`` (empty for unpacked batches)."""
    names = ("segment_ids", "positions", "src_segment_ids", "src_positions")
    return {k: batch[k] for k in names if k in batch}
