"""``config.data``: the data fields, each declared once with its default, allowed values and
comment (:class:`DataOptions`), and the features each task's batches hold."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import ml_collections

from deepnet_jax.common import config_schema
from deepnet_jax.data import batching, examples, registry
from deepnet_jax.data.corpora.base import DatasetRequest
from deepnet_jax.data.tokenizer import MODEL_TYPES, TokenizerOptions

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
    min_len: int = config_schema.field(
        2,
        "synthetic task only: shortest content sequence in tokens (the longest is what "
        "data.max_len holds)",
        low=1,
        before=2,
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
    def from_config(cls, data: Mapping[str, Any], seed: int) -> DataOptions:
        """A config's data group (a ``ConfigDict`` or, saved, a dict) and the run's ``seed``,
        typed (``RunConfig`` does it once per run); a field added since a run was saved reads
        as its default, an undeclared one is an error."""
        fields = list(config_schema.specs(cls))
        config_schema.check_names(data, fields, "data.", missing_ok=True)  # saved runs: defaults
        values = {k: data[k] for k in data}
        if isinstance(values.get("bucket_boundaries"), list):
            values["bucket_boundaries"] = tuple(values["bucket_boundaries"])
        return cls(**values, seed=seed)

    def validate(self) -> None:
        """One-line ValueError for the first bad field (before anything is prepared): each
        field against its declaration, then the relations between them."""
        registry.corpus(self.dataset)
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
        registry.check(self.request())

    def tokenizer_options(self) -> TokenizerOptions:
        return TokenizerOptions(
            model_type=self.tokenizer,
            vocab_size=self.vocab_size,
            character_coverage=self.character_coverage,
        )

    def request(self) -> DatasetRequest:
        """The dataset these fields ask for."""
        return DatasetRequest(
            dataset=self.dataset,
            data_dir=self.data_dir,
            source_lang=self.source_lang,
            target_lang=self.target_lang,
            source_dir=self.source_dir,
            src_ext=self.src_ext,
            tgt_ext=self.tgt_ext,
        )
