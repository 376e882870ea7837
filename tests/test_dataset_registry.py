"""The dataset registry: each row's kind and languages are what its builder produces, every name
is a valid ``data.dataset``, and an unknown name is one line listing the registry's names.

Corpora are checked without network or real data: tfds builders are constructed (their features
are in the code), tfds' mock data stands in for the fetched corpora, and the local datasets are
prepared from two-line fixture files.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow_datasets as tfds
from test_training import small_config

from deepnet_jax.common import tokens
from deepnet_jax.data import DatasetRequest, examples, pipeline, registry, sources
from deepnet_jax.data.synthetic import SyntheticData
from deepnet_jax.training import train
from deepnet_jax.training.run_config import RunConfig

ARCH_OF_TASK = {task: arch for arch, task in examples.ARCH_TASK.items()}
LOCAL_FILES = {
    "de": "Das Haus.\nDer Baum.\n",
    "en": "The house.\nThe tree.\n",
    "txt": "The house.\n\nThe tree.\n",  # one example per paragraph
}


def _local_files(folder) -> str:
    """``{train,valid,test}.{de,en,txt}`` in ``folder`` (the local datasets' fixture)."""
    os.makedirs(folder, exist_ok=True)
    for prefix in ("train", "valid", "test"):
        for ext, text in LOCAL_FILES.items():
            with open(os.path.join(folder, f"{prefix}.{ext}"), "w", encoding="utf-8") as f:
                f.write(text)
    return str(folder)


def _local_arguments(entry: registry.Dataset, folder: str) -> dict[str, str]:
    """The arguments a local dataset reads, on the fixture files (text: the default .txt)."""
    if "tgt_ext" not in entry.arguments:
        return {"source_dir": folder} if entry.reads_local_files else {}
    return {"source_dir": folder, "src_ext": "de", "tgt_ext": "en"}


def _corpus_pairs() -> list[tuple[str, tuple[str, str]]]:
    """(corpus, language pair) for every pair of every corpus; ("", "") for no fixed pair."""
    return [
        (name, pair)
        for name in registry.CORPORA
        for pair in registry.get(name).languages or [("", "")]
    ]


def test_the_table_is_consistent():
    assert registry.NAMES[0] == registry.SYNTHETIC
    assert sources.DATASETS == registry.CORPORA == registry.NAMES[1:]
    for entry in registry.REGISTRY.values():
        assert entry.kind in registry.KIND_TASKS
        assert set(entry.arguments) <= set(registry.SOURCE_ARGUMENTS)
        assert all(set(n.fields) <= set(entry.arguments) for n in entry.needs)
        assert (entry.build is None) == (entry.kind == "synthetic")
        if entry.kind != "parallel":
            assert entry.languages == ()
        assert all(len(pair) == 2 and pair[0] != pair[1] for pair in entry.languages)


@pytest.mark.parametrize("name, pair", _corpus_pairs())
def test_builder_features_hold_the_registered_kind_and_languages(name, pair, tmp_path):
    entry = registry.get(name)
    args = _local_arguments(entry, _local_files(tmp_path / "src"))
    data_dir = str(tmp_path / "data")
    request = DatasetRequest(name, data_dir, source_lang=pair[0], target_lang=pair[1], **args)
    features = set(entry.build(request, {"data_dir": data_dir}).info.features.keys())
    if entry.kind == "text":
        assert "text" in features and not features & {"source", "target", "de", "en", "fr"}
    elif entry.languages:  # stored under the language codes
        assert set(pair) <= features and "text" not in features
    else:  # the user's files: stored as source/target, languages are the extensions
        assert {"source", "target"} <= features


@pytest.mark.parametrize(
    "name, pair",
    [(n, p) for n, p in _corpus_pairs() if not registry.get(n).reads_local_files],
)
def test_fetched_corpora_open_in_each_registered_direction(name, pair, tmp_path):
    """Under tfds' mock data: records of the registered kind, in both directions of a pair."""
    kind = registry.get(name).kind
    with tfds.testing.mock_data(num_examples=3):
        if kind == "text":
            records = sources.open_split(DatasetRequest(name, str(tmp_path)), "train")
            assert set(records[0]) == {"text"}
            return
        forward = sources.open_split(
            DatasetRequest(name, str(tmp_path), source_lang=pair[0]), "train"
        )
        backward = sources.open_split(
            DatasetRequest(name, str(tmp_path), target_lang=pair[0]), "train"
        )
        assert set(forward[0]) == {"source", "target"}
        assert backward[1] == {"source": forward[1]["target"], "target": forward[1]["source"]}


@pytest.mark.parametrize("name", [n for n in registry.CORPORA if registry.get(n).reads_local_files])
def test_local_corpora_give_records_of_their_kind(name, tmp_path):
    entry = registry.get(name)
    args = _local_arguments(entry, _local_files(tmp_path / "src"))
    records = list(
        sources.open_split(DatasetRequest(name, str(tmp_path / "data"), **args), "train")
    )
    if entry.kind == "text":
        assert records == [{"text": "The house."}, {"text": "The tree."}]
    else:
        assert records[0] == {"source": "Das Haus.", "target": "The house."}


@pytest.mark.parametrize("arch", sorted(examples.ARCH_TASK))
def test_synthetic_entry_serves_every_task_with_the_shared_ids(arch):
    entry = registry.get(registry.SYNTHETIC)
    assert examples.ARCH_TASK[arch] in entry.tasks
    run = RunConfig.from_config(small_config(arch, "deepnorm"))
    data = SyntheticData(run.data, arch, run.model.vocab_size, run.eval_batches)
    batch = next(data.train_iterator())
    assert set(batch) == {*pipeline.FEATURES[examples.ARCH_TASK[arch]], "weights"}
    ids = np.concatenate([v.ravel() for k, v in batch.items() if k != "weights"])
    assert tokens.UNK_ID not in ids  # content starts after every reserved id
    if arch == "encoder":
        assert (batch["inputs"] == tokens.MASK_ID).any()  # the MLM pipeline's mask id


@pytest.mark.parametrize("name", registry.NAMES)
def test_every_registered_name_is_a_valid_dataset(name, tmp_path):
    entry = registry.get(name)
    c = small_config(ARCH_OF_TASK[entry.tasks[0]], "deepnorm")
    c.data.dataset = name
    if entry.kind != "synthetic":
        c.data.data_dir = str(tmp_path)
        c.data.vocab_size = c.model.vocab_size = 300
        for key, value in _local_arguments(entry, str(tmp_path)).items():
            c.data[key] = value
    train.validate(c)


def test_an_unknown_name_is_one_line_listing_the_registry():
    c = small_config("encdec", "deepnorm")
    c.data.dataset = "wmt99"
    with pytest.raises(ValueError) as error:
        train.validate(c)
    message = str(error.value)
    assert "\n" not in message and message.startswith("data.dataset='wmt99'")
    assert all(repr(name) in message for name in registry.NAMES)
    with pytest.raises(ValueError, match=r"data\.dataset='wmt99'; allowed values are"):
        registry.get("wmt99")
