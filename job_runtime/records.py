"""Batches of records, and how their keys map to key groups and subtasks.

Records travel in batches. A batch is either an Arrow ``RecordBatch`` (what the
sources produce and what vectorised functions work on) or a list of dicts (what
record functions such as ``map`` produce); each form is converted to the other
only when an operator needs it.

A batch also says what its rows are (:class:`BatchKind`): records, or the partial
aggregates a combiner sends over the exchange. The kind is set where a batch is
made and travels with it (in the frame's kind on the wire), so no operator has to
guess it from the columns. Likewise the event times a step read from a batch stay
with it (:mod:`job_runtime.event_time`), for the next step that needs them.

Keys are hashed by :mod:`job_runtime.key_hashing` into one of
``max_parallelism`` key groups. Key groups, not keys, are assigned to subtasks,
which is what lets a restore change the parallelism.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from job_runtime.event_time import EventTimes
from job_runtime.key_hashing import key_group_of, key_groups_of_array, stable_hash

Record = dict[str, Any]
KeySelector = Callable[[Record], Any]
KeySpec = str | tuple[str, ...] | Callable[[Record], Any]
"""What ``key_by`` keys by: a column, several columns (a composite key: a tuple of
their values), or a function of the record."""

__all__ = [
    "Batch",
    "BatchKind",
    "KeySelector",
    "KeySpec",
    "Record",
    "extract_keys",
    "key_array",
    "key_group_of",
    "key_group_range",
    "key_groups_of_array",
    "key_groups_of_batch",
    "key_of",
    "operator_index_for_key_group",
    "rows_to_arrow",
    "split_by_target",
    "stable_hash",
]


class BatchKind(enum.Enum):
    """What the rows of a batch are."""

    RECORDS = "records"
    """Records, as the pipeline's steps and the user's functions see them."""
    PARTIAL = "partial"
    """Partial aggregates: one row per key (and window) with its accumulators, from a
    combiner to the keyed operator of its ``aggregate``; never seen by user code (see
    :mod:`job_runtime.operators.accumulators`)."""


class Batch:
    """Records in Arrow or row form, converted lazily and at most once each way."""

    __slots__ = ("_arrow", "_rows", "kind", "times")

    def __init__(self, *, arrow: pa.RecordBatch | None = None, rows: list[Record] | None = None,
                 kind: BatchKind = BatchKind.RECORDS):
        self._arrow = arrow
        self._rows = rows
        self.kind = kind
        self.times: EventTimes | None = None
        """The event times of the rows, once a step has read them."""

    @classmethod
    def of(cls, value: pa.RecordBatch | pa.Table | list[Record], *,
           kind: BatchKind = BatchKind.RECORDS) -> Batch:
        if isinstance(value, pa.RecordBatch):
            return cls(arrow=value, kind=kind)
        if isinstance(value, pa.Table):
            return cls(arrow=value.combine_chunks().to_batches()[0] if value.num_rows else
                       pa.RecordBatch.from_pylist([], schema=value.schema), kind=kind)
        return cls(rows=value, kind=kind)

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
            self._arrow = rows_to_arrow(self._rows)
        return self._arrow

    def take(self, indices: np.ndarray) -> Batch:
        if self._arrow is not None:
            part = Batch(arrow=self._arrow.take(pa.array(indices)), kind=self.kind)
        else:
            rows = self.rows
            part = Batch(rows=[rows[i] for i in indices.tolist()], kind=self.kind)
        if self.times is not None:
            part.times = self.times.take(indices)
        return part


def rows_to_arrow(rows: list[Record]) -> pa.RecordBatch:
    """Rows as one batch whose columns are every field any row has, in the order the
    rows name them; a row without a field has a null there.

    Arrow's ``from_pylist`` takes the columns of the first row only, and would drop a
    field that only later rows have without a word.
    """
    if not rows:
        return pa.RecordBatch.from_pylist([])
    first = rows[0].keys()
    if all(row.keys() == first for row in rows):
        return pa.RecordBatch.from_pylist(rows)
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row))
    return pa.RecordBatch.from_pydict({name: [row.get(name) for row in rows]
                                       for name in names})


def operator_index_for_key_group(key_group: int, *, parallelism: int, max_parallelism: int) -> int:
    """Which subtask owns ``key_group`` (contiguous ranges, as Flink assigns them)."""
    return key_group * parallelism // max_parallelism


def key_group_range(subtask: int, *, parallelism: int, max_parallelism: int) -> range:
    """The contiguous key groups that ``subtask`` owns."""
    start = (subtask * max_parallelism + parallelism - 1) // parallelism
    end = ((subtask + 1) * max_parallelism + parallelism - 1) // parallelism
    return range(start, end)


def key_of(record: Record, key: KeySpec) -> Any:
    """The key of one record."""
    if isinstance(key, str):
        return record[key]
    if isinstance(key, tuple):
        return tuple(record[column] for column in key)
    return key(record)


def key_array(arrow: pa.RecordBatch, key: str | tuple[str, ...]) -> pa.Array:
    """The key column of a batch; a composite key's columns as one struct column (which
    hashes as the tuple of their values)."""
    if isinstance(key, str):
        column = arrow.column(key)
        return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return pa.StructArray.from_arrays([arrow.column(column) for column in key],
                                      names=list(key))


def extract_keys(batch: Batch, key: KeySpec) -> list[Any]:
    if isinstance(key, str | tuple):
        if batch.has_arrow:
            columns = [batch.arrow.column(c).to_pylist()
                       for c in ((key,) if isinstance(key, str) else key)]
            return columns[0] if isinstance(key, str) else list(zip(*columns, strict=True))
        return [key_of(r, key) for r in batch.rows]
    return [key(r) for r in batch.rows]


def key_groups_of_batch(batch: Batch, key: KeySpec, max_parallelism: int) -> np.ndarray:
    if not callable(key) and batch.has_arrow:
        return key_groups_of_array(key_array(batch.arrow, key), max_parallelism)
    return np.fromiter(
        (key_group_of(k, max_parallelism) for k in extract_keys(batch, key)),
        dtype=np.int64,
        count=len(batch),
    )


def split_by_target(
    batch: Batch, key: KeySpec, *, parallelism: int, max_parallelism: int,
    groups: np.ndarray | None = None,
) -> list[tuple[int, Batch]]:
    """Partition a batch into per-subtask batches by the key group of each record
    (``groups``, when the caller knows them already)."""
    if groups is None:
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

