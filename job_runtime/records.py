"""Batches of records, stable key hashing and key groups.

Records travel in batches. A batch is either an Arrow ``RecordBatch`` (what the
sources produce and what vectorised functions work on) or a list of dicts (what
record functions such as ``map`` produce); each form is converted to the other
only when an operator needs it.

Keys are hashed with a hash that is the same in every process (Python's own
``hash`` of a ``str`` is salted per process), then mapped to one of
``max_parallelism`` key groups. Key groups, not keys, are assigned to subtasks,
which is what lets a restore change the parallelism.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

Record = dict[str, Any]
KeySelector = Callable[[Record], Any]

_MASK64 = (1 << 64) - 1


class Batch:
    """Records in Arrow or row form, converted lazily and at most once each way."""

    __slots__ = ("_arrow", "_rows")

    def __init__(self, *, arrow: pa.RecordBatch | None = None, rows: list[Record] | None = None):
        self._arrow = arrow
        self._rows = rows

    @classmethod
    def of(cls, value: pa.RecordBatch | pa.Table | list[Record]) -> Batch:
        if isinstance(value, pa.RecordBatch):
            return cls(arrow=value)
        if isinstance(value, pa.Table):
            return cls(arrow=value.combine_chunks().to_batches()[0] if value.num_rows else
                       pa.RecordBatch.from_pylist([], schema=value.schema))
        return cls(rows=value)

    def __len__(self) -> int:
        if self._rows is not None:
            return len(self._rows)
        assert self._arrow is not None
        return int(self._arrow.num_rows)

    @property
    def has_arrow(self) -> bool:
        return self._arrow is not None

    @property
    def rows(self) -> list[Record]:
        if self._rows is None:
            assert self._arrow is not None
            self._rows = self._arrow.to_pylist()
        return self._rows

    @property
    def arrow(self) -> pa.RecordBatch:
        if self._arrow is None:
            assert self._rows is not None
            self._arrow = pa.RecordBatch.from_pylist(self._rows)
        return self._arrow

    def take(self, indices: np.ndarray) -> Batch:
        if self._arrow is not None:
            return Batch(arrow=self._arrow.take(pa.array(indices)))
        rows = self.rows
        return Batch(rows=[rows[i] for i in indices.tolist()])


def _mix64(value: int) -> int:
    """A 64-bit finaliser (splitmix64) so that nearby integers spread evenly."""
    z = (value + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def _mix64_array(values: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = values.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return np.asarray(z ^ (z >> np.uint64(31)))


def stable_hash(key: Any) -> int:
    """A non-negative 64-bit hash of ``key`` that every process computes alike."""
    if isinstance(key, bool):
        return _mix64(int(key))
    if isinstance(key, int):
        return _mix64(key & _MASK64)
    if isinstance(key, str):
        return _mix64(zlib.crc32(key.encode("utf-8")))
    if isinstance(key, bytes):
        return _mix64(zlib.crc32(key))
    if isinstance(key, float):
        if key.is_integer():
            return _mix64(int(key) & _MASK64)
        return _mix64(struct.unpack("<q", struct.pack("<d", key))[0] & _MASK64)
    if isinstance(key, tuple):
        acc = 17
        for part in key:
            acc = _mix64((acc * 31 + stable_hash(part)) & _MASK64)
        return acc
    if key is None:
        return 0
    return _mix64(zlib.crc32(repr(key).encode("utf-8")))


def key_group_of(key: Any, max_parallelism: int) -> int:
    return stable_hash(key) % max_parallelism


def key_groups_of_array(column: pa.Array | pa.ChunkedArray, max_parallelism: int) -> np.ndarray:
    """Key groups of a whole column; vectorised for integer columns."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_integer(column.type) and column.null_count == 0:
        hashed = _mix64_array(column.to_numpy(zero_copy_only=False).astype(np.int64))
        return np.asarray(hashed % np.uint64(max_parallelism), dtype=np.int64)
    return np.fromiter(
        (key_group_of(v, max_parallelism) for v in column.to_pylist()),
        dtype=np.int64,
        count=len(column),
    )


def operator_index_for_key_group(key_group: int, *, parallelism: int, max_parallelism: int) -> int:
    """Which subtask owns ``key_group`` (contiguous ranges, as Flink assigns them)."""
    return key_group * parallelism // max_parallelism


def key_group_range(subtask: int, *, parallelism: int, max_parallelism: int) -> range:
    """The contiguous key groups that ``subtask`` owns."""
    start = (subtask * max_parallelism + parallelism - 1) // parallelism
    end = ((subtask + 1) * max_parallelism + parallelism - 1) // parallelism
    return range(start, end)


def extract_keys(batch: Batch, key: str | KeySelector) -> list[Any]:
    if isinstance(key, str):
        if batch.has_arrow:
            return list(batch.arrow.column(key).to_pylist())
        return [r[key] for r in batch.rows]
    return [key(r) for r in batch.rows]


def key_groups_of_batch(batch: Batch, key: str | KeySelector, max_parallelism: int) -> np.ndarray:
    if isinstance(key, str) and batch.has_arrow:
        return key_groups_of_array(batch.arrow.column(key), max_parallelism)
    return np.fromiter(
        (key_group_of(k, max_parallelism) for k in extract_keys(batch, key)),
        dtype=np.int64,
        count=len(batch),
    )


def split_by_target(
    batch: Batch, key: str | KeySelector, *, parallelism: int, max_parallelism: int
) -> list[tuple[int, Batch]]:
    """Partition a batch into per-subtask batches by the key group of each record."""
    groups = key_groups_of_batch(batch, key, max_parallelism)
    targets = groups * parallelism // max_parallelism
    if len(targets) == 0:
        return []
    first = int(targets[0])
    if bool(np.all(targets == first)):
        return [(first, batch)]
    order = np.argsort(targets, kind="stable")
    sorted_targets = targets[order]
    bounds = np.flatnonzero(np.diff(sorted_targets)) + 1
    out: list[tuple[int, Batch]] = []
    for chunk in np.split(order, bounds):
        out.append((int(targets[chunk[0]]), batch.take(chunk)))
    return out

