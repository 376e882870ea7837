"""Prepare a dataset once, before training: ``python -m deepnet_jax.cli.prepare``.

    python -m deepnet_jax.cli.prepare --dataset=ding_de_en --data_dir=/tmp/deepnet_data
    python -m deepnet_jax.cli.prepare --dataset=libreoffice_help --source_lang=fr \\
        --data_dir=/tmp/deepnet_data           # the fr-en pairs (default de-en)
    python -m deepnet_jax.cli.prepare --dataset=local_parallel --data_dir=/tmp/deepnet_data \\
        --source_dir=/path/to/fairseq/prepared --src_ext=de --tgt_ext=en
    python -m deepnet_jax.cli.prepare --dataset=ding_de_en --data_dir=/tmp/deepnet_data \\
        --tokenizer=bpe --vocab_size=8000      # also train and cache the tokenizer

Prints one line per split: ``<dataset> <split>: <n> examples`` (and the tokenizer's path and
size when ``--tokenizer`` is given; a training run with the same data fields reuses it). Errors
a user can fix (a corpus that cannot be fetched, bad local files or flags) print one
``error: ...`` line on stderr and exit with status 1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys

from absl import flags

from deepnet_jax.cli import command
from deepnet_jax.cli import flags as cli_flags
from deepnet_jax.data import DatasetRequest, registry, sources
from deepnet_jax.data import prepared as data_prepared
from deepnet_jax.data.options import DataOptions

_DATASET = flags.DEFINE_string("dataset", None, f"One of: {', '.join(registry.CORPORA)}.")
_SOURCE_DIR = flags.DEFINE_string(
    "source_dir", None, "local_parallel / local_text: folder with train/valid/test files."
)
_SRC_EXT = flags.DEFINE_string(
    "src_ext",
    "",
    "local_parallel: source file extension (e.g. de); local_text: extension "
    "of the text files (default txt).",
)
_TGT_EXT = flags.DEFINE_string("tgt_ext", "", "local_parallel: target file extension (e.g. en).")
_SOURCE_LANG = flags.DEFINE_string(
    "source_lang", "", "Source language; libreoffice_help: de or fr (with en) picks the pair."
)
_TARGET_LANG = flags.DEFINE_string("target_lang", "", "Target language (see --source_lang).")
_TOKENIZER = flags.DEFINE_string(
    "tokenizer", "", "Also train the tokenizer: bpe, unigram or char (empty: dataset only)."
)
_VOCAB_SIZE = flags.DEFINE_integer("vocab_size", 8000, "Tokenizer pieces (with --tokenizer).")
flags.mark_flags_as_required(["dataset", "data_dir"])
for _shared in (cli_flags.DATA_DIR,):
    flags.declare_key_flag(_shared.name)  # listed by --help


def split_lines(dataset: str, builder) -> list[str]:
    """``"<dataset> <split>: <n> examples"`` for each split the prepared builder has."""
    splits = builder.info.splits
    return [
        f"{dataset} {split}: {splits[split].num_examples} examples"
        for split in sources.SPLITS
        if split in splits
    ]


def execute(arguments: list[str]) -> None:
    """Prepare ``--dataset`` (and with ``--tokenizer`` its tokenizer); one line per split."""
    del arguments  # none
    request = DatasetRequest(
        dataset=_DATASET.value,
        data_dir=cli_flags.DATA_DIR.value,
        source_lang=_SOURCE_LANG.value,
        target_lang=_TARGET_LANG.value,
        source_dir=_SOURCE_DIR.value or "",
        src_ext=_SRC_EXT.value,
        tgt_ext=_TGT_EXT.value,
    )
    registry.check(request)
    options = _tokenizer_options(request) if _TOKENIZER.value else None
    # tfds prints progress to stdout; keep stdout for the per-split lines.
    with contextlib.redirect_stdout(sys.stderr):
        builder = sources.prepare(request)
        corpus = data_prepared.prepare_corpus(options) if options else None
    for line in split_lines(_DATASET.value, builder):
        print(line)
    print(f"prepared in {builder.data_path}")
    if corpus:
        print(f"tokenizer: {corpus.tokenizer_path} ({corpus.tokenizer.vocab_size} pieces)")


def _tokenizer_options(request: DatasetRequest) -> DataOptions:
    """The data options that key the tokenizer cache (checked before anything is prepared)."""
    options = DataOptions(
        **dataclasses.asdict(request),
        tokenizer=_TOKENIZER.value,
        vocab_size=_VOCAB_SIZE.value,
    )
    options.tokenizer_options().validate()
    return options


def main(argv: list[str]) -> None:
    """The command (absl's ``argv``, flags parsed): :func:`execute` with the shared checks
    and the one-line error (:mod:`deepnet_jax.cli.command`)."""
    command.main(execute, argv)


if __name__ == "__main__":
    command.run(main)
