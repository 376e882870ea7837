"""The one entry point the input pipeline uses: prepare a dataset and open a split of it.

Datasets (``data.dataset``) are the corpora of :mod:`deepnet_jax.data.registry`, which holds
each one's kind, languages, allowed arguments and builder. Parallel corpora give
``{"source", "target"}`` records in the requested direction (default: the first stored pair as
listed there, ``src_ext`` -> ``tgt_ext`` for ``local_parallel``); text corpora give ``{"text"}``
records (one paragraph each).

Everything is stored by tfds as ``array_record`` under ``data_dir`` and read back with
``as_data_source`` — random access, no TensorFlow. The WMT datasets use tfds' own builders;
preparing them downloads the WMT corpora (network) and is only done when they are missing.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Sequence
from typing import Any

import tensorflow_datasets as tfds

from deepnet_jax.common import console
from deepnet_jax.data import local_builders, registry
from deepnet_jax.data.fetch import DataPreparationError
from deepnet_jax.data.records import NormalizedSource

DATASETS = registry.CORPORA  # the names this module prepares and opens
SPLITS = ("train", "validation", "test")
FILE_FORMAT = "array_record"


def dataset_kind(dataset: str) -> str:
    """``"parallel"`` or ``"text"``; ``ValueError`` naming ``data.dataset`` for other names."""
    return registry.corpus(dataset).kind


def _is_local(dataset: str) -> bool:
    return registry.corpus(dataset).reads_local_files


def _tensorflow_available() -> bool:
    return importlib.util.find_spec("tensorflow") is not None


def libreoffice_config(source_lang: str = "", target_lang: str = "") -> str:
    """The ``libreoffice_help`` config (``de-en`` or ``fr-en``) holding both languages.

    Either language may be empty: ``{}`` and ``{en}`` give ``de-en``, ``{de}`` or ``{de, en}``
    give ``de-en``, ``{fr}`` or ``{fr, en}`` give ``fr-en``. Any other pair (``de`` and
    ``fr``, ``it`` …) is a one-line ``ValueError`` naming both fields and the pairs there are.
    """
    return "-".join(registry.get("libreoffice_help").pair(source_lang, target_lang))


def _make_builder(
    dataset: str,
    data_dir: str,
    source_dir: str | None,
    src_ext: str,
    tgt_ext: str,
    languages: tuple[str, str] = ("", ""),
) -> tfds.core.DatasetBuilder:
    """The tfds builder of ``dataset`` reading/writing ``array_record`` under ``data_dir``.

    ``languages`` (source, target) select the config of ``libreoffice_help`` (ignored otherwise).

    A dataset already prepared there as ``tfrecord`` (tfds' default when TensorFlow is
    installed, e.g. an existing ``~/tensorflow_datasets``) is used as it is when TensorFlow is
    importable (the ``tf`` extra): :func:`open_split` then reads it with ``tfds.load``.
    """
    try:
        return _construct_builder(
            dataset, data_dir, source_dir, src_ext, tgt_ext, languages, FILE_FORMAT
        )
    except ValueError as e:
        if "File format is already set" not in str(e):
            raise
        if _tensorflow_available():
            return _construct_builder(
                dataset, data_dir, source_dir, src_ext, tgt_ext, languages, None
            )
        raise DataPreparationError(
            f"{dataset} in {data_dir} was prepared in another file format ({e}); without "
            f"TensorFlow this code reads only {FILE_FORMAT}: install the tf extra "
            "(pip install -e '.[tf]'), use another data_dir, or delete that dataset"
        ) from None


def _construct_builder(
    dataset: str,
    data_dir: str,
    source_dir: str | None,
    src_ext: str,
    tgt_ext: str,
    languages: tuple[str, str],
    file_format: str | None,
) -> tfds.core.DatasetBuilder:
    entry = registry.corpus(dataset)
    kwargs: dict[str, Any] = {"data_dir": data_dir}
    if file_format:
        kwargs["file_format"] = file_format
    request = registry.BuildRequest(
        dataset,
        kwargs,
        source_dir=source_dir or "",
        src_ext=src_ext,
        tgt_ext=tgt_ext,
        pair=entry.pair(*languages) if entry.languages else ("", ""),
    )
    return entry.build(request)


def _stale_inputs(builder: tfds.core.DatasetBuilder) -> list[str]:
    """Input files of a prepared local dataset that were added, removed or changed since."""
    stored = (builder.info.metadata or {}).get("input_fingerprint") or {}
    current = local_builders.input_fingerprint(builder.builder_config.input_files())
    return sorted(n for n in set(stored) | set(current) if stored.get(n) != current.get(n))


def prepare(
    dataset: str,
    data_dir: str,
    *,
    source_dir: str | None = None,
    src_ext: str = "",
    tgt_ext: str = "",
    source_lang: str = "",
    target_lang: str = "",
) -> tfds.core.DatasetBuilder:
    """Build ``dataset`` under ``data_dir`` as ``array_record`` if needed; return its builder.

    Idempotent: a prepared dataset is reused as is (nothing is rewritten). tfds generates into
    ``<data_dir>/<name>/[<config>/]incomplete.XXXXXX_<version>/`` and renames that folder to
    ``<version>/`` only after all splits and metadata are written, so an exception (or a kill)
    mid-generation never leaves a dataset that looks prepared.

    ``source_dir``, ``src_ext`` and ``tgt_ext`` are read by the local datasets only:
    ``local_parallel`` reads ``{source_dir}/{train,valid,test}.{src_ext,tgt_ext}``;
    ``local_text`` reads ``{source_dir}/{train,valid,test}.{src_ext or "txt"}``. For those two,
    the size and sha256 of every input file are stored with the dataset, and when the files on
    disk no longer match (changed, added or removed) the dataset is REBUILT, with a warning in
    the log. The old version is moved aside and only deleted once the new one is complete (it
    is put back if the rebuild fails). When ``source_dir`` does not exist at all (e.g. a
    machine that shares ``data_dir`` but not the source files) the prepared dataset is used.

    ``source_lang`` and ``target_lang`` are read by ``libreoffice_help`` only: they pick its
    config (:func:`libreoffice_config`; ``de-en`` when both are empty).

    Raises:
      ValueError: unknown dataset, bad local arguments, or bad local files (see
        :mod:`deepnet_jax.data.corpora`).
      DataPreparationError: a corpus could not be fetched, or a WMT dataset could not be
        prepared (the message is one line).
    """
    languages = (source_lang, target_lang)
    builder = _make_builder(dataset, data_dir, source_dir, src_ext, tgt_ext, languages)
    if not builder.is_prepared():
        _download_and_prepare(builder, dataset, data_dir)
    elif _is_local(dataset):
        config_dir = builder.builder_config.source_dir
        if not os.path.isdir(config_dir):
            console.warn(
                f"{dataset}: {config_dir} does not exist; using the dataset prepared in "
                f"{builder.data_path} without checking it"
            )
            return builder
        stale = _stale_inputs(builder)
        if not stale:
            return builder
        console.warn(
            f"{dataset}: input files changed since the dataset was prepared "
            f"({', '.join(stale)}); rebuilding {builder.data_path}"
        )
        _rebuild(dataset, data_dir, source_dir, src_ext, tgt_ext, builder.data_path)
    else:
        return builder
    # A fresh builder reads back the info (splits, metadata) that was just written.
    return _make_builder(dataset, data_dir, source_dir, src_ext, tgt_ext, languages)


def _download_and_prepare(builder: tfds.core.DatasetBuilder, dataset: str, data_dir: str) -> None:
    console.say(f"Preparing {dataset} in {builder.data_path}")
    try:
        builder.download_and_prepare()
    except (DataPreparationError, ValueError):
        raise
    except Exception as e:
        if not registry.corpus(dataset).tfds_module:
            raise
        first = (str(e).strip().splitlines() or [""])[0]
        raise DataPreparationError(
            f"could not prepare {dataset} in {data_dir} (tfds downloads the WMT corpora; this "
            f"needs network access): {type(e).__name__}: {first}"
        ) from e


def _rebuild(
    dataset: str,
    data_dir: str,
    source_dir: str | None,
    src_ext: str,
    tgt_ext: str,
    version_dir: Any,
) -> None:
    """Regenerate a prepared local dataset; the old one is restored if that fails."""
    version_dir = os.fspath(version_dir)
    backup = tempfile.mkdtemp(
        prefix=f".stale.{os.path.basename(version_dir)}.", dir=os.path.dirname(version_dir)
    )
    os.rmdir(backup)
    os.rename(version_dir, backup)
    try:
        builder = _make_builder(dataset, data_dir, source_dir, src_ext, tgt_ext)
        _download_and_prepare(builder, dataset, data_dir)
    except BaseException:
        if not os.path.exists(version_dir):
            os.rename(backup, version_dir)
        raise
    shutil.rmtree(backup, ignore_errors=True)


def _parallel_fields(
    dataset: str, source_lang: str, target_lang: str, src_ext: str, tgt_ext: str
) -> tuple[tuple[str, str], ...]:
    """``(("source", stored_key), ("target", stored_key))`` for the requested direction."""
    entry = registry.corpus(dataset)
    if entry.languages:
        langs = entry.pair(source_lang, target_lang)
        keys = {lang: lang for lang in langs}
    else:  # the user's files: the languages are the extensions
        langs, keys = (src_ext, tgt_ext), {src_ext: "source", tgt_ext: "target"}
    for flag, lang in (("source_lang", source_lang), ("target_lang", target_lang)):
        if lang and lang not in langs:
            raise ValueError(
                f"data.{flag}={lang!r} is not a language of {dataset} (one of: {', '.join(langs)})"
            )
    if source_lang and not target_lang:
        target_lang = langs[1] if source_lang == langs[0] else langs[0]
    elif target_lang and not source_lang:
        source_lang = langs[1] if target_lang == langs[0] else langs[0]
    elif not source_lang:
        source_lang, target_lang = langs
    if source_lang == target_lang:
        raise ValueError(f"data.source_lang and data.target_lang are both {source_lang!r}")
    return (("source", keys[source_lang]), ("target", keys[target_lang]))


def check_arguments(
    dataset: str,
    *,
    source_lang: str = "",
    target_lang: str = "",
    source_dir: str | None = None,
    src_ext: str = "",
    tgt_ext: str = "",
) -> None:
    """One-line ValueError for arguments ``dataset`` would ignore or reject (before preparing).

    Languages are checked against the dataset's; ``source_dir``/``src_ext``/``tgt_ext`` only
    where the registry lists them (the local datasets), and those it needs must be given;
    languages only for parallel data.
    """
    entry = registry.corpus(dataset)
    kind = entry.kind
    given = {"source_dir": source_dir, "src_ext": src_ext, "tgt_ext": tgt_ext}
    for name, value in given.items():
        if value and name not in entry.arguments:
            raise ValueError(f"data.{name}={value!r} is not used by data.dataset={dataset!r}")
    for needs in entry.needs:
        if not all(given[name] for name in needs.fields):
            fields = " and ".join(f"data.{name}" for name in needs.fields)
            raise ValueError(f"{dataset} needs {fields} ({needs.hint})")
    if kind == "parallel":
        _parallel_fields(dataset, source_lang, target_lang, src_ext, tgt_ext)
    else:
        for name, value in (("source_lang", source_lang), ("target_lang", target_lang)):
            if value:
                raise ValueError(f"data.{name}={value!r} is not used by text data ({dataset})")


def open_split(
    dataset: str,
    data_dir: str,
    split: str,
    *,
    source_lang: str = "",
    target_lang: str = "",
    source_dir: str | None = None,
    src_ext: str = "",
    tgt_ext: str = "",
    builder: tfds.core.DatasetBuilder | None = None,
) -> Sequence[dict[str, str]]:
    """Random-access records of one split, preparing the dataset first if it is missing.

    Parallel datasets give ``{"source": str, "target": str}``: the direction is
    ``source_lang`` -> ``target_lang`` (either may be left empty and is then the other
    language; both empty: de->en for Ding, LibreOffice help and WMT, ``src_ext`` -> ``tgt_ext``
    for ``local_parallel``; for ``libreoffice_help`` the two languages also pick the config).
    Text datasets give ``{"text": str}``. The result supports ``len``, indexing,
    ``__getitems__`` and pickling (see :class:`NormalizedSource`). Pass the ``builder`` that
    :func:`prepare` returned to open a split without preparing (and, for a local dataset,
    re-hashing its files) again.

    Raises:
      ValueError: unknown dataset or split, a split the dataset does not have (a local
        dataset without ``test.*``), or a language that is not one of the dataset's.
    """
    kind = dataset_kind(dataset)
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is not one of: {', '.join(SPLITS)}")
    if kind == "parallel":
        fields = _parallel_fields(dataset, source_lang, target_lang, src_ext, tgt_ext)
    else:
        fields = (("text", "text"),)
    if builder is None:
        builder = prepare(
            dataset,
            data_dir,
            source_dir=source_dir,
            src_ext=src_ext,
            tgt_ext=tgt_ext,
            source_lang=source_lang,
            target_lang=target_lang,
        )
    available = list(builder.info.splits.keys())
    if available and split not in available:
        raise ValueError(
            f"{dataset} in {builder.data_path} has no {split!r} split "
            f"(it has: {', '.join(available)})"
        )
    if builder.info.file_format != tfds.core.FileFormat.ARRAY_RECORD:
        return NormalizedSource(_load_with_tensorflow(builder, split), fields)
    return NormalizedSource(builder.as_data_source(split), fields)


def _load_with_tensorflow(builder: tfds.core.DatasetBuilder, split: str) -> list[dict[str, Any]]:
    """Every record of a ``tfrecord`` split, read once with ``tfds.load`` into host memory.

    Needs TensorFlow (the ``tf`` extra). Memory: the whole split as Python bytes (WMT-14 de-en
    train, 4.5M pairs: roughly 1-2 GB per process).
    """
    dataset = builder.as_dataset(split=split)  # what tfds.load returns for a prepared builder
    return list(tfds.as_numpy(dataset))
