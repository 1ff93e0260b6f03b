"""``key_by(k).window(w).aggregate(...)``: vectorised aggregates per key and event-time window.

Each open window is a :class:`~job_runtime.operators.key_table.KeyTable` of its own
(a job has a few windows open at a time: those the watermark has not passed, and
those kept for allowed lateness), so a batch is folded in with one pass per window
it touches, without a Python call per record. A window fires, one row per key, when
the watermark reaches its last millisecond; it is dropped once the watermark passes
that plus the allowed lateness. A record for a window already fired but still kept
updates it and re-emits the key's row at once (a late firing); a record for a window
already dropped is counted in :attr:`WindowAggregateOperator.late_records` and
dropped.

**The watermark in the checkpoint.** Sources restart from the minimum watermark
after a restore (as Flink's do), but this operator keeps, per key group, the time up
to which it had fired its windows (``fired_through``). Without it, a record that was
too late before a failure would, replayed after it, open its fired and dropped
window again and emit a second, partial row for it: exactly-once output means the
same rows whatever failed. So after a restore a record is late when it is late for
its key group's ``fired_through`` or the current watermark, whichever is later, and
a restored window fires only the keys whose groups had not fired it. Once the
watermark passes every restored group's time, the groups no longer differ.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from job_runtime.event_time import TimeKind
from job_runtime.operators.accumulators import (
    PARTIAL_PREFIX,
    accumulator_specs,
    check_partial,
    fold,
    key_columns_of,
)
from job_runtime.operators.key_families import typed_keys
from job_runtime.operators.key_numbering import factorize_keys, factorize_numbers
from job_runtime.operators.key_table import KeyTable
from job_runtime.operators.keyed_operator import KeyedOperator
from job_runtime.records import Batch, BatchKind, key_array, key_groups_of_array
from job_runtime.watermarks import MIN_WATERMARK, event_times, time_array
from job_runtime.windows import LATE_DATA, WindowAssigner, by_start

SNAPSHOT_VERSION = 2
"""Version 2 keeps each window's keys as an Arrow array (version 1: a numpy array of
Python objects; both restore)."""
READABLE_VERSIONS = (1, SNAPSHOT_VERSION)


class _WindowSnapshot:
    def __init__(self, payload: dict[str, Any]) -> None:
        self.payload = payload

    def serialize(self) -> bytes:
        return pickle.dumps({"version": SNAPSHOT_VERSION, **self.payload},
                            protocol=pickle.HIGHEST_PROTOCOL)

    def key_count(self) -> int:
        return sum(len(t["keys"]) for t in self.payload["windows"].values())


class WindowAggregateOperator(KeyedOperator):
    """Per key and window: ``count``, ``sum``, ``min``, ``max``, ``mean``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        op = self.op
        assert isinstance(op.window, WindowAssigner) and op.event_time is not None
        assert isinstance(op.key.key, str | tuple)
        self.key: str | tuple[str, ...] = op.key.key
        self.event_time: str = op.event_time
        self.assigner: WindowAssigner = op.window
        self.lateness: int = op.allowed_lateness
        self._specs = accumulator_specs(op.aggregates)
        self._windows: dict[int, KeyTable] = {}
        self.watermark = MIN_WATERMARK
        self.time_kind: TimeKind | None = None
        self._key_type: pa.DataType | None = None
        self._fired_through: np.ndarray | None = None
        """Per key group, the time up to which restored windows were fired (see the
        module); ``None`` once the watermark passed all of it."""

    # ------------------------------------------------------------------ records

    def process(self, batch: Batch) -> Batch:
        if not len(batch):
            return Batch(rows=[])
        return self._vectorised(self._process, batch)

    def _process(self, batch: Batch) -> Batch:
        arrow = batch.arrow
        # Records, or partial rows per key and window from the combiner before the
        # exchange (which assigned the windows and counts the records of each row).
        partial = batch.kind is BatchKind.PARTIAL
        if partial:
            check_partial(arrow.schema.names, self._specs)
            windows, self.time_kind = _partial_windows(arrow)
            records = np.asarray(arrow.column(PARTIAL_PREFIX + "count").to_numpy(
                zero_copy_only=False)) if PARTIAL_PREFIX + "count" in arrow.schema.names \
                else np.ones(arrow.num_rows, dtype=np.int64)
        else:
            stamps, self.time_kind = event_times(batch, column=self.event_time,
                                                 operator=self.op.uid, subtask=self.subtask)
            windows = list(self.assigner.assign(stamps))
            records = None
        keys = key_array(arrow, self.key)
        self._key_type = keys.type
        # The batch's keys are numbered once; each window renumbers the codes it got.
        codes_of_batch, uniques_of_batch = factorize_keys(keys)
        limit = self._row_limits(keys)
        columns = _RowColumns(arrow)
        fired: list[pa.RecordBatch] = []
        # Records (not partial rows) too late for every window they belong to go to
        # the late-data side output.
        accepted = None if partial else np.zeros(arrow.num_rows, dtype=np.bool_)
        for start, rows in windows:
            last = start + self.assigner.size - 1
            on_time = last + self.lateness > (limit if isinstance(limit, int) else limit[rows])
            kept = _select(rows, on_time)
            if accepted is not None:
                accepted[kept] = True
            if len(kept) < len(rows):
                dropped = _select(rows, np.logical_not(on_time))
                self.late_records += len(dropped) if records is None \
                    else int(records[dropped].sum())
            if not len(kept):
                continue
            codes, present = factorize_numbers(codes_of_batch[kept])
            uniques = uniques_of_batch.take(pa.array(present))
            table = self._windows.get(start)
            if table is None:
                table = self._windows[start] = KeyTable(specs=self._specs,
                                                        max_parallelism=self.max_parallelism)
            slots = table.slots(uniques)
            table.merge(slots, fold(column=columns.of(kept), codes=codes,
                                    n_unique=len(uniques), specs=self._specs, partial=partial))
            # Keys whose window has fired already: a late firing, their row again.
            late = _select(slots, last <= self._slot_limits(table, slots))
            if len(late):
                fired.append(self._rows(start, table, late))
        if accepted is not None and not accepted.all():
            self.side.add_batch(LATE_DATA, batch.take(np.flatnonzero(~accepted)))
        return _concat(fired)

    # ------------------------------------------------------------------ time

    def on_watermark(self, watermark: int) -> Batch:
        """Fire the windows the watermark reached, drop those past their lateness."""
        if watermark <= self.watermark:
            return Batch(rows=[])
        previous, self.watermark = self.watermark, watermark
        fired: list[pa.RecordBatch] = []
        for start in sorted(self._windows):
            last = start + self.assigner.size - 1
            if last > watermark:
                break
            table = self._windows[start]
            if last > previous and table.size:
                slots = np.arange(table.size)
                if self._fired_through is not None:
                    # Keys whose group fired this window before the restore did.
                    slots = slots[self._fired_through[table.groups] < last]
                if len(slots):
                    fired.append(self._rows(start, table, slots))
            if last + self.lateness <= watermark:
                del self._windows[start]
        if self._fired_through is not None and watermark >= int(self._fired_through.max()):
            self._fired_through = None
        return _concat(fired)

    def _row_limits(self, keys: pa.Array) -> int | np.ndarray:
        """Per row, the time its windows count as fired through (a scalar when every
        key group agrees)."""
        if self._fired_through is None:
            return self.watermark
        groups = key_groups_of_array(keys, self.max_parallelism)
        limits: np.ndarray = np.maximum(self.watermark, self._fired_through[groups])
        return limits

    def _slot_limits(self, table: KeyTable, slots: np.ndarray) -> int | np.ndarray:
        if self._fired_through is None:
            return self.watermark
        limits: np.ndarray = np.maximum(self.watermark,
                                        self._fired_through[table.groups[slots]])
        return limits

    def _rows(self, start: int, table: KeyTable, slots: np.ndarray) -> pa.RecordBatch:
        names, arrays = table.output(self.op.aggregates, slots)
        n = len(slots)
        kind = self.time_kind or TimeKind.EPOCH_MS
        bounds = np.full(n, start, dtype=np.int64)
        key_names, key_arrays = key_columns_of(
            self.key, typed_keys(table.key_values(slots), self._key_type))
        return pa.RecordBatch.from_arrays(
            [*key_arrays, time_array(bounds, time_kind=kind),
             time_array(bounds + self.assigner.size, time_kind=kind), *arrays],
            names=[*key_names, "window_start", "window_end", *names])

    # ------------------------------------------------------------------ checkpoints

    def snapshot(self) -> _WindowSnapshot:
        """References to every open window's arrays (copy-on-write), and per key group of
        this subtask the time its windows were fired through."""
        lo, hi = self.key_groups.start, self.key_groups.stop
        fired = np.full(hi - lo, self.watermark, dtype=np.int64)
        if self._fired_through is not None:
            fired = np.maximum(fired, self._fired_through[lo:hi])
        return _WindowSnapshot({
            "key_groups": [lo, hi], "fired_through": fired,
            "time_kind": None if self.time_kind is None else self.time_kind.value,
            "key_type": self._key_type, "late_records": self.late_records,
            "windows": {start: table.snapshot() for start, table in self._windows.items()},
        })

    def restore(self, blobs: Iterable[bytes]) -> int:
        restored = 0
        through = np.full(self.max_parallelism, MIN_WATERMARK, dtype=np.int64)
        for blob in blobs:
            payload = pickle.loads(blob)
            if payload.get("version") not in READABLE_VERSIONS:
                raise ValueError(f"window state of version {payload.get('version')!r}: this "
                                 f"runtime reads versions 1 to {SNAPSHOT_VERSION}")
            lo, hi = payload["key_groups"]
            mine_lo, mine_hi = max(lo, self.key_groups.start), min(hi, self.key_groups.stop)
            if mine_lo < mine_hi:
                through[mine_lo:mine_hi] = np.maximum(
                    through[mine_lo:mine_hi], payload["fired_through"][mine_lo - lo:mine_hi - lo])
            if self.time_kind is None and payload["time_kind"] is not None:
                self.time_kind = TimeKind(payload["time_kind"])
            self._key_type = self._key_type or payload["key_type"]
            for start, table_payload in payload["windows"].items():
                table = self._windows.get(start)
                if table is None:
                    table = KeyTable(specs=self._specs, max_parallelism=self.max_parallelism)
                added = table.restore(table_payload, key_groups=self.key_groups)
                if added:
                    self._windows[start] = table
                    restored += added
        if int(through.max()) > MIN_WATERMARK:
            self._fired_through = through
        return restored

    def key_count(self) -> int:
        return sum(table.size for table in self._windows.values())

    @property
    def open_windows(self) -> list[int]:
        return sorted(self._windows)


class _RowColumns:
    """The batch's columns as numpy arrays, converted once, then cut to some rows."""

    def __init__(self, arrow: pa.RecordBatch) -> None:
        self._arrow = arrow
        self._full: dict[str, np.ndarray] = {}

    def of(self, rows: np.ndarray) -> Callable[[str], np.ndarray]:
        def column(name: str) -> np.ndarray:
            full = self._full.get(name)
            if full is None:
                full = self._full[name] = np.asarray(
                    self._arrow.column(name).to_numpy(zero_copy_only=False))
            chosen: np.ndarray = full[rows]
            return chosen

        return column


def _select(items: np.ndarray, keep: bool | np.bool_ | np.ndarray) -> np.ndarray:
    """``items`` where ``keep`` holds: one flag for all of them (a scalar limit), or
    one per item."""
    if isinstance(keep, bool | np.bool_):
        return items if keep else items[:0]
    chosen: np.ndarray = items[keep]
    return chosen


def _partial_windows(arrow: pa.RecordBatch) -> tuple[list[tuple[int, np.ndarray]], TimeKind]:
    """The rows of each window of a partial batch, and the event time's kind (the
    ``window_start`` column has the event-time column's type)."""
    column = arrow.column("window_start")
    kind = TimeKind.TIMESTAMP if pa.types.is_timestamp(column.type) else TimeKind.EPOCH_MS
    if kind == TimeKind.TIMESTAMP:
        column = column.cast(pa.timestamp("ms", tz=column.type.tz)).cast(pa.int64())
    starts = np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.int64)
    return list(by_start(starts, np.arange(len(starts)))), kind


def _concat(parts: list[pa.RecordBatch]) -> Batch:
    if not parts:
        return Batch(rows=[])
    if len(parts) == 1:
        return Batch(arrow=parts[0])
    return Batch.of(pa.Table.from_batches(parts))
