"""The one entry point the input pipeline uses: prepare a dataset and open a split of it.

A :class:`~deepnet_jax.data.corpora.base.DatasetRequest` names the dataset (a corpus of
:mod:`deepnet_jax.data.registry`), its ``data_dir``, the direction and the user's files.
Parallel corpora give ``{"source", "target"}`` records in the requested direction (default: the
first stored pair as listed there, ``src_ext`` -> ``tgt_ext`` for ``local_parallel``); text
corpora give ``{"text"}`` records (one paragraph each).

Everything is stored by tfds as ``array_record`` under ``data_dir`` and read back with
``as_data_source`` — random access, no TensorFlow. The WMT datasets use tfds' own builders;
preparing them downloads the WMT corpora (network) and is only done when they are missing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

import tensorflow_datasets as tfds

from deepnet_jax.common import console
from deepnet_jax.data import registry
from deepnet_jax.data.corpora import local_files
from deepnet_jax.data.corpora.base import SPLITS, DatasetRequest
from deepnet_jax.data.fetch import DataPreparationError
from deepnet_jax.data.records import NormalizedSource

__all__ = [
    "DATASETS",
    "FILE_FORMAT",
    "SPLITS",
    "dataset_kind",
    "one_preparer",
    "open_split",
    "prepare",
]

DATASETS = registry.CORPORA  # the names this module prepares and opens
FILE_FORMAT = "array_record"


def dataset_kind(dataset: str) -> str:
    """``"parallel"`` or ``"text"``; ``ValueError`` naming ``data.dataset`` for other names."""
    return registry.corpus(dataset).kind


def _tensorflow_available() -> bool:
    return importlib.util.find_spec("tensorflow") is not None


def _builder(request: DatasetRequest) -> tfds.core.DatasetBuilder:
    """The tfds builder of the requested dataset reading/writing ``array_record`` under its
    ``data_dir`` (the languages pick ``libreoffice_help``'s config).

    A dataset already prepared there as ``tfrecord`` (tfds' default when TensorFlow is
    installed, e.g. an existing ``~/tensorflow_datasets``) is used as it is when TensorFlow is
    importable (the ``tf`` extra): :func:`open_split` then reads it with ``tfds.load``.
    """
    build = registry.corpus(request.dataset).build
    assert build is not None  # a corpus has a builder
    try:
        return build(request, {"data_dir": request.data_dir, "file_format": FILE_FORMAT})
    except ValueError as e:
        if "File format is already set" not in str(e):
            raise
        if _tensorflow_available():
            return build(request, {"data_dir": request.data_dir})
        raise DataPreparationError(
            f"{request.dataset} in {request.data_dir} was prepared in another file format ({e}); "
            f"without TensorFlow this code reads only {FILE_FORMAT}: install the tf extra "
            "(pip install -e '.[tf]'), use another data_dir, or delete that dataset"
        ) from None


def prepare(request: DatasetRequest) -> tfds.core.DatasetBuilder:
    """Build the requested dataset under its ``data_dir`` as ``array_record`` if needed; return
    its builder.

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

    ``source_lang`` and ``target_lang`` pick ``libreoffice_help``'s config (``de-en`` when both
    are empty).

    Raises:
      ValueError: unknown dataset, bad local arguments, or bad local files.
      DataPreparationError: a corpus could not be fetched, or a WMT dataset could not be
        prepared (the message is one line).
    """
    with one_preparer(request):  # another process may be preparing it: wait, then reuse it
        builder = _builder(request)
        if not builder.is_prepared():
            _download_and_prepare(builder, request)
        elif _inputs_changed(builder, request):
            _rebuild(request, builder.data_path)
        else:
            return builder
    # A fresh builder reads back the info (splits, metadata) that was just written.
    return _builder(request)


@contextlib.contextmanager
def one_preparer(request: DatasetRequest) -> Iterator[None]:
    """Hold this machine's lock on preparing ``request``'s dataset (an exclusive ``flock``,
    released when the process ends, however it ends), waiting (with a line saying so) while
    another process holds it. Without it, two processes sharing a ``data_dir`` (an
    experiment's shards) that both find a dataset missing both generate it, and the second
    one's rename into ``<version>/`` fails on the first one's. Not re-entrant: a process
    holding it must not ask for it again. Processes on other hosts sharing a ``data_dir``
    (e.g. a bucket) are not serialized: prepare once first (``python -m
    deepnet_jax.cli.prepare``)."""
    with open(_lock_path(request), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            console.say(
                f"{request.dataset}: another process is preparing it in {request.data_dir}; "
                "waiting for it"
            )
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _lock_path(request: DatasetRequest) -> str:
    """``<data_dir>/.<dataset>.prepare.lock`` for a local ``data_dir`` (the real path: every
    spelling of the folder gets the one lock); for tfds' default folder (``""``) and a remote
    one (``gs://…``) a file of this user's in the temporary folder, named by the dataset and
    the folder's hash."""
    data_dir, dataset = request.data_dir, request.dataset.replace("/", "_")  # wmt14_translate/de-en
    if data_dir and "://" not in data_dir:
        data_dir = os.path.realpath(os.path.expanduser(data_dir))
        os.makedirs(data_dir, exist_ok=True)
        return os.path.join(data_dir, f".{dataset}.prepare.lock")
    digest = hashlib.sha256(data_dir.encode()).hexdigest()[:16]
    name = f"deepnet_jax-{os.getuid()}-prepare-{dataset}-{digest}.lock"
    return os.path.join(tempfile.gettempdir(), name)


def _inputs_changed(builder: tfds.core.DatasetBuilder, request: DatasetRequest) -> bool:
    """Whether a prepared local dataset's input files changed since (warning which); False for
    the other corpora, and when the source folder is not there to compare with."""
    if not registry.corpus(request.dataset).reads_local_files:
        return False
    config_dir = builder.builder_config.source_dir
    if not os.path.isdir(config_dir):
        console.warn(
            f"{request.dataset}: {config_dir} does not exist; using the dataset prepared in "
            f"{builder.data_path} without checking it"
        )
        return False
    changed = local_files.changed_inputs(builder)
    if changed:
        console.warn(
            f"{request.dataset}: input files changed since the dataset was prepared "
            f"({', '.join(changed)}); rebuilding {builder.data_path}"
        )
    return bool(changed)


def _download_and_prepare(builder: tfds.core.DatasetBuilder, request: DatasetRequest) -> None:
    console.say(f"Preparing {request.dataset} in {builder.data_path}")
    try:
        builder.download_and_prepare()
    except (DataPreparationError, ValueError):
        raise
    except Exception as e:
        if not registry.corpus(request.dataset).tfds_module:
            raise
        first = (str(e).strip().splitlines() or [""])[0]
        raise DataPreparationError(
            f"could not prepare {request.dataset} in {request.data_dir} (tfds downloads the WMT "
            f"corpora; this needs network access): {type(e).__name__}: {first}"
        ) from e


def _rebuild(request: DatasetRequest, version_dir: Any) -> None:
    """Regenerate a prepared local dataset; the old one is restored if that fails."""
    version_dir = os.fspath(version_dir)
    backup = tempfile.mkdtemp(
        prefix=f".stale.{os.path.basename(version_dir)}.", dir=os.path.dirname(version_dir)
    )
    os.rmdir(backup)
    os.rename(version_dir, backup)
    try:
        _download_and_prepare(_builder(request), request)
    except BaseException:
        if not os.path.exists(version_dir):
            os.rename(backup, version_dir)
        raise
    shutil.rmtree(backup, ignore_errors=True)


def open_split(
    request: DatasetRequest, split: str, builder: tfds.core.DatasetBuilder | None = None
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
    entry = registry.corpus(request.dataset)
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is not one of: {', '.join(SPLITS)}")
    fields = entry.fields(request)
    if builder is None:
        builder = prepare(request)
    available = list(builder.info.splits.keys())
    if available and split not in available:
        raise ValueError(
            f"{request.dataset} in {builder.data_path} has no {split!r} split "
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
