"""Records as the pipeline reads them: a tfds data source's fields renamed and decoded to
``str``, with random access and batched reads (grain's ``__getitems__``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any


def _as_str(value: Any) -> str:
    """tfds returns ``bytes`` from array_record and ``str`` under ``mock_data``: both -> str."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if hasattr(value, "item"):  # numpy scalar / 0-d array
        return _as_str(value.item())
    return str(value)


class NormalizedSource(Sequence[dict[str, str]]):
    """A random-access view of a tfds data source with renamed, str-decoded fields.

    ``fields`` is ``((output_key, stored_key), ...)``. Supports ``len``, integer and slice
    indexing, ``__getitems__`` (batched reads, as grain uses) and pickling (the tfds
    ``ArrayRecordDataSource`` it wraps pickles), so it can be handed to
    ``grain.MapDataset.source`` directly.
    """

    def __init__(self, source: Sequence[Any], fields: tuple[tuple[str, str], ...]):
        self._source = source
        self._fields = fields

    def _normalize(self, record: dict[str, Any]) -> dict[str, str]:
        return {out: _as_str(record[key]) for out, key in self._fields}

    def __len__(self) -> int:
        return len(self._source)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return self.__getitems__(range(*index.indices(len(self))))
        n = len(self)
        i = int(index)
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for a source of {n} records")
        return self._normalize(self._source[i % n])

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, str]]:
        indices = [int(i) for i in indices]
        getitems = getattr(self._source, "__getitems__", None)
        records = getitems(indices) if getitems else [self._source[i] for i in indices]
        return [self._normalize(r) for r in records]

    def __iter__(self) -> Iterator[dict[str, str]]:
        for i in range(len(self)):
            yield self[i]

    def __repr__(self) -> str:
        mapping = ", ".join(f"{out}<-{key}" for out, key in self._fields)
        return f"NormalizedSource({len(self)} records, {mapping})"
