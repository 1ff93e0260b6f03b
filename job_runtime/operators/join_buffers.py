"""What the vectorised joins share: each side's waiting records as an Arrow table, how a
batch from the exchange becomes one side's rows, how pairs become joined records, and
the snapshot and restore of the waiting records.

A buffer holds a record's own columns, its key (``__cjob_key``), its key group and its
event time in ms. Tables are immutable, so a snapshot holds the buffers by reference
(a barrier copies nothing) and its background part writes them as Arrow IPC; a restore
at any parallelism keeps the rows of its own key groups. The buffers are in memory
whatever the state backend: a join's state is what its interval or window holds, not
the history of its keys.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable, Iterable, Iterator
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from job_runtime.errors import UserCodeError
from job_runtime.key_hashing import key_groups_of_array
from job_runtime.pipeline.connect import INPUT, KEY, RECORD, Merged
from job_runtime.records import Batch, Record, key_group_of, rows_to_arrow
from job_runtime.watermarks import event_times

JOIN_SNAPSHOT_VERSION = 1
GROUP = "__cjob_key_group"
TIME = "__cjob_time"
WINDOW = "__cjob_window"
INTERNAL = frozenset({INPUT, KEY, GROUP, TIME, RECORD, WINDOW})
"""Columns the joins or the wrapping add: never part of a joined record."""
COMPACT_CHUNKS = 64
"""A buffer of more chunks than this is made contiguous again (appends add one each)."""

Joined: TypeAlias = pa.Table | list[Record]
"""Pairs made into records: columns (the default record) or the user's function's rows."""


def _ipc(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


class JoinSnapshot:
    def __init__(self, buffers: list[pa.Table | None]) -> None:
        self.buffers = buffers

    def serialize(self) -> bytes:
        return pickle.dumps({"version": JOIN_SNAPSHOT_VERSION,
                             "buffers": [None if b is None else _ipc(b) for b in self.buffers]},
                            protocol=pickle.HIGHEST_PROTOCOL)


class JoinBuffers:
    """The two sides' waiting records of one subtask's join."""

    def __init__(self, *, operator: str, subtask: int, max_parallelism: int,
                 key_groups: range) -> None:
        self.operator = operator
        self.subtask = subtask
        self.max_parallelism = max_parallelism
        self.key_groups = key_groups
        self.tables: list[pa.Table | None] = [None, None]

    # -- from the exchange

    def sides(self, batch: Batch) -> Iterator[tuple[int, pa.Table]]:
        """The batch's rows per side, as columns (records wrapped whole unwrapped)."""
        if not len(batch):
            return
        if batch.has_arrow:
            arrow = pa.Table.from_batches([batch.arrow])
            if RECORD in arrow.column_names:
                arrow = self._unpickled(arrow.to_pylist())
        elif RECORD in batch.rows[0]:
            arrow = self._unpickled(batch.rows)
        else:
            arrow = pa.Table.from_batches([batch.arrow])
        sides = arrow.column(INPUT).to_numpy()
        for side in (0, 1):
            mask = sides == side
            if mask.all():
                yield side, arrow
            elif mask.any():
                yield side, arrow.filter(pa.array(mask))

    def _unpickled(self, wrapped: list[Record]) -> pa.Table:
        """Records wrapped whole (a key of several columns or a function) as columns:
        the key, which Arrow may not hold as it is (a tuple of mixed types), as its
        pickle, and its key group computed from the key itself."""
        return pa.Table.from_batches([rows_to_arrow([
            {**pickle.loads(row[RECORD]), INPUT: row[INPUT],
             KEY: pickle.dumps(row[KEY], protocol=pickle.HIGHEST_PROTOCOL),
             GROUP: key_group_of(row[KEY], self.max_parallelism)}
            for row in wrapped])])

    # -- the buffers

    def append(self, side: int, part: pa.Table, times: np.ndarray,
               extra: dict[str, pa.Array] | None = None) -> None:
        """``part``'s rows wait, with their event times (and ``extra`` columns)."""
        rows = part.drop_columns([n for n in (INPUT, RECORD, GROUP) if n in part.column_names])
        groups = (part.column(GROUP).cast(pa.int32()) if GROUP in part.column_names else
                  pa.array(key_groups_of_array(part.column(KEY), self.max_parallelism),
                           type=pa.int32()))
        rows = rows.append_column(GROUP, groups).append_column(
            TIME, pa.array(times, type=pa.int64()))
        for name, column in (extra or {}).items():
            rows = rows.append_column(name, column)
        buffer = self.tables[side]
        if buffer is None or not buffer.num_rows:
            buffer = rows
        else:
            try:
                buffer = pa.concat_tables([buffer, rows], promote_options="permissive")
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise UserCodeError(operator=self.operator, subtask=self.subtask, details=(
                    f"the records of stream {side + 1} changed a column's type while "
                    f"others wait to be joined: {exc}")) from None
        if buffer.column(0).num_chunks > COMPACT_CHUNKS:
            buffer = buffer.combine_chunks()
        self.tables[side] = buffer

    def keep(self, side: int, mask: np.ndarray) -> None:
        """Only the rows of ``side`` where ``mask`` holds still wait."""
        buffer = self.tables[side]
        if buffer is not None and not mask.all():
            self.tables[side] = buffer.filter(pa.array(mask))

    def size(self) -> int:
        return sum(0 if b is None else b.num_rows for b in self.tables)

    # -- pairs

    def matches(self, part: pa.Table, other: pa.Table, *, on: tuple[str, str] | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
        """The candidate pairs of ``part``'s rows and ``other``'s with the same key (and
        the same value of ``on``: a column of each), as the rows' indexes in ``part``
        and in ``other``."""
        key, other_key = part.column(KEY), other.column(KEY)
        if key.type != other_key.type:
            try:
                key = key.cast(other_key.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise UserCodeError(operator=self.operator, subtask=self.subtask, details=(
                    f"the two streams' keys are {part.column(KEY).type} and "
                    f"{other_key.type}, which cannot be compared: {exc}")) from None
        probe = {KEY: key, "__i": np.arange(part.num_rows)}
        build = {KEY: other_key, "__j": np.arange(other.num_rows)}
        keys: list[str] = [KEY]
        if on is not None:
            probe["__on"], build["__on"] = part.column(on[0]), other.column(on[1])
            keys.append("__on")
        candidates = pa.table(probe).join(pa.table(build), keys=keys, join_type="inner")
        return candidates.column("__i").to_numpy(), candidates.column("__j").to_numpy()

    def joined(self, firsts: pa.Table, seconds: pa.Table,
               fn: Callable[[Record, Record], Record | None]) -> Joined:
        """Each pair (row ``n`` of ``firsts`` with row ``n`` of ``seconds``) as its
        joined record: the default as columns, a function of the user's per pair."""
        if isinstance(fn, Merged):
            names = [n for n in firsts.column_names if n not in INTERNAL]
            extra = [n for n in seconds.column_names if n not in INTERNAL and n not in names]
            return pa.table([*(firsts.column(n) for n in names),
                             *(seconds.column(n) for n in extra)], names=[*names, *extra])
        out: list[Record] = []
        for first, second in zip(records(firsts), records(seconds), strict=True):
            made = fn(first, second)
            if made is not None:
                out.append(made)
        return out

    # -- state

    def snapshot(self) -> JoinSnapshot:
        return JoinSnapshot(list(self.tables))

    def restore(self, blobs: Iterable[bytes]) -> None:
        parts: list[list[pa.Table]] = [[], []]
        start, stop = self.key_groups.start, self.key_groups.stop
        for blob in blobs:
            payload = pickle.loads(blob)
            if not isinstance(payload, dict) or "buffers" not in payload:
                raise ValueError("a join's state file that holds no join buffers")
            if payload.get("version") != JOIN_SNAPSHOT_VERSION:
                raise ValueError(f"join state of version {payload.get('version')!r}: this "
                                 f"runtime reads version {JOIN_SNAPSHOT_VERSION}")
            for side, data in enumerate(payload["buffers"]):
                if data is None:
                    continue
                table = pa.ipc.open_stream(data).read_all()
                groups = table.column(GROUP)
                table = table.filter(pc.and_(pc.greater_equal(groups, start),
                                             pc.less(groups, stop)))
                if table.num_rows:
                    parts[side].append(table)
        for side in (0, 1):
            if parts[side]:
                self.tables[side] = pa.concat_tables(
                    parts[side], promote_options="permissive").combine_chunks()


def records(table: pa.Table) -> list[Record]:
    """The records as their streams gave them (without the columns the joins add)."""
    names = [n for n in table.column_names if n not in INTERNAL]
    found: list[Record] = table.select(names).to_pylist()
    return found


def as_batch(parts: list[Joined]) -> Batch:
    """The pairs of one call as one batch: columns when all of them are columns."""
    rows: list[Record] = []
    tables: list[pa.Table] = []
    for part in parts:
        if isinstance(part, list):
            rows.extend(part)
        else:
            tables.append(part)
    if tables and not rows:
        table = tables[0] if len(tables) == 1 else \
            pa.concat_tables(tables, promote_options="permissive")
        if table.num_rows:
            return Batch(arrow=table.combine_chunks().to_batches()[0])
        return Batch(rows=[])
    for table in tables:
        rows.extend(table.to_pylist())
    return Batch(rows=rows)


def side_times(part: pa.Table, *, column: str, operator: str, subtask: int) -> np.ndarray:
    """The event times of one side's rows, in ms."""
    times, _ = event_times(Batch(arrow=part.combine_chunks().to_batches()[0]), column=column,
                           operator=operator, subtask=subtask)
    return times

