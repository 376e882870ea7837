"""Batch plans with fixed shapes: fixed-size batches, token-budget buckets, and packing.

Every batch the trainer sees has one of a few static shapes, so a jitted step compiles once per
shape, never per batch:

* **fixed size** — one bucket: ``batch_size`` rows × ``max_len`` tokens.
* **token budget** (fairseq's ``max_tokens``) — examples go to the smallest bucket boundary
  ``L_b`` ≥ their length; bucket b's batches have ``rows_b = max_tokens // L_b`` rows (rounded
  down to a multiple of ``row_multiple``, the number of data-parallel row shards), so a batch
  holds at most ``rows_b · L_b ≤ max_tokens`` tokens including padding.
* **packing** (:func:`pack`) — several examples per row via grain's first-fit packer, with
  ``*segment_ids`` (1, 2, … per example, 0 on padding) and ``*positions`` (restarting at 0).

A :class:`BatchPlan` assigns every example of a split to exactly one batch per epoch: within a
bucket the examples are permuted by a generator seeded with ``(seed, epoch)`` and cut into
batches; the last batch of a bucket is completed with empty rows (index -1, all padding, zero
weight), so no example is dropped and shapes stay static. The order of batches within an epoch
is shuffled by grain (see ``pipeline``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import numpy as np

from deepnet_jax.common.tokens import PAD_ID

EMPTY_ROW = -1


def bucket_boundaries(max_len: int, requested: Sequence[int] = ()) -> tuple[int, ...]:
    """Sorted bucket lengths ending at ``max_len``; default 8, 16, 32, … (doubling), max_len."""
    if requested:
        bounds = list(requested)
        if (
            any(isinstance(b, bool) or not isinstance(b, int) for b in bounds)
            or any(b < 1 or b > max_len for b in bounds)
            or bounds != sorted(set(bounds))
        ):
            raise ValueError(
                f"data.bucket_boundaries={tuple(requested)} must be strictly increasing "
                f"integers in [1, data.max_len={max_len}]"
            )
    else:
        bounds, b = [], 8
        while b < max_len:
            bounds.append(b)
            b *= 2
    if not bounds or bounds[-1] != max_len:
        bounds.append(max_len)
    return tuple(bounds)


@dataclasses.dataclass(frozen=True)
class Bucket:
    """A static batch shape: ``rows`` × ``length`` tokens."""

    rows: int
    length: int


def make_buckets(
    max_len: int,
    batch_size: int,
    max_tokens: int,
    boundaries: Sequence[int] = (),
    row_multiple: int = 1,
) -> tuple[Bucket, ...]:
    """The batch shapes: one fixed bucket when ``max_tokens`` is 0, else token-budget buckets."""
    if max_tokens == 0:
        if batch_size % row_multiple:
            raise ValueError(
                f"data.batch_size={batch_size} must be a multiple of {row_multiple} "
                "(the number of data-parallel row shards)"
            )
        return (Bucket(batch_size, max_len),)
    if max_tokens < max_len * row_multiple:
        raise ValueError(
            f"data.max_tokens={max_tokens} must be at least data.max_len × row shards = "
            f"{max_len} × {row_multiple} = {max_len * row_multiple}"
        )
    return tuple(
        Bucket((max_tokens // length) // row_multiple * row_multiple, length)
        for length in bucket_boundaries(max_len, boundaries)
    )


class BatchPlan:
    """Per-epoch assignment of examples (by ``lengths``) to fixed-shape batches.

    ``batch(epoch, k)`` returns (bucket index, example indices [rows] with -1 for empty rows).
    ``shuffle=False`` gives the evaluation order: examples by length, batches by bucket.
    """

    def __init__(
        self,
        lengths: np.ndarray,
        buckets: Sequence[Bucket],
        seed: int = 0,
        shuffle: bool = True,
    ):
        self.buckets = tuple(buckets)
        self.seed = seed
        self.shuffle = shuffle
        lengths = np.asarray(lengths)
        if len(lengths) and lengths.max() > self.buckets[-1].length:
            raise ValueError(
                f"an example of length {lengths.max()} exceeds the longest bucket "
                f"{self.buckets[-1].length}"
            )
        bounds = np.array([b.length for b in self.buckets])
        which = np.searchsorted(bounds, lengths, side="left")
        self._members = [np.flatnonzero(which == b) for b in range(len(self.buckets))]
        if not shuffle:  # evaluation order: by length, ties by index
            self._members = [m[np.argsort(lengths[m], kind="stable")] for m in self._members]
        self._counts = [
            -(-len(m) // b.rows) for m, b in zip(self._members, self.buckets, strict=True)
        ]
        self.batches_per_epoch = int(sum(self._counts))
        if self.batches_per_epoch == 0:
            raise ValueError("the split has no examples left after length filtering")

    @functools.lru_cache(maxsize=4)  # noqa: B019 (a plan lives as long as its pipeline)
    def epoch(self, epoch: int) -> tuple[tuple[int, np.ndarray], ...]:
        """All batches of ``epoch`` in bucket order."""
        rng = np.random.default_rng([self.seed, epoch])
        out = []
        for b, (members, bucket) in enumerate(zip(self._members, self.buckets, strict=True)):
            order = rng.permutation(members) if self.shuffle else members
            padded = np.full(-(-len(order) // bucket.rows) * bucket.rows, EMPTY_ROW, np.int64)
            padded[: len(order)] = order
            out.extend((b, chunk) for chunk in padded.reshape(-1, bucket.rows))
        return tuple(out)

    def batch(self, epoch: int, k: int) -> tuple[int, np.ndarray]:
        return self.epoch(epoch)[k]


def local_rows(indices: np.ndarray, process_index: int, process_count: int) -> np.ndarray:
    """This process's contiguous share of a global batch's rows."""
    rows = len(indices)
    if rows % process_count:
        raise ValueError(f"{rows} rows do not split over {process_count} processes")
    share = rows // process_count
    return indices[process_index * share : (process_index + 1) * share]


def collate(
    rows: Sequence[dict[str, np.ndarray] | None], length: int, features: Sequence[str]
) -> dict[str, np.ndarray]:
    """Right-pad each row's features to ``length``: dict of int32/float32 [rows, length].

    ``None`` rows are all padding. ``weights`` (float32) is taken from the example when present
    (MLM), else 1 on every non-pad target.
    """
    out = {f: np.full((len(rows), length), PAD_ID, np.int32) for f in features}
    weights = np.zeros((len(rows), length), np.float32)
    for r, ex in enumerate(rows):
        if ex is None:
            continue
        for f in features:
            out[f][r, : len(ex[f])] = ex[f]
        if "weights" in ex:
            weights[r, : len(ex["weights"])] = ex["weights"]
        else:
            weights[r, : len(ex["targets"])] = ex["targets"] != PAD_ID
    out["weights"] = weights
    return out


def pack(parent, length: int, rows: int, features: Sequence[str], seed: int):
    """Pack an iterable grain dataset of examples into batches [rows, length] (first fit).

    Adds ``segment_ids``/``positions`` for the target side (and ``src_segment_ids``/
    ``src_positions`` for translation); ``weights`` is packed when the examples carry it (MLM),
    else 1 on non-pad targets.
    """
    import grain.experimental as grain_exp  # local import: only packing needs it

    packed_features = [*features, "weights"]

    def with_weights(ex: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {f: ex[f] for f in features}
        out["weights"] = ex.get("weights", (ex["targets"] != PAD_ID).astype(np.float32))
        return out

    packed = grain_exp.FirstFitPackIterDataset(
        parent.map(with_weights),
        length_struct={f: length for f in packed_features},
        num_packing_bins=rows,
        seed=seed,
        shuffle_bins=True,
    ).batch(rows, drop_remainder=True)

    def rename(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {f: batch[f].astype(np.int32) for f in features}
        out["segment_ids"] = batch["targets_segment_ids"].astype(np.int32)
        out["positions"] = batch["targets_positions"].astype(np.int32)
        if "src" in features:
            out["src_segment_ids"] = batch["src_segment_ids"].astype(np.int32)
            out["src_positions"] = batch["src_positions"].astype(np.int32)
        out["weights"] = batch["weights"].astype(np.float32)
        return out

    return packed.map(rename)
