"""Partial aggregation per key and window before the exchange of a windowed ``aggregate``.

The records of a window meet in one keyed subtask, so, like the plain aggregate's
combiner (:mod:`job_runtime.operators.combiner`), the stage in front of it sends one
partial row per key and window instead of every record: it assigns each record its
windows (by its event time, before the exchange), and keeps one
:class:`~job_runtime.operators.combiner.Combiner` per window start. A partial row
carries ``window_start`` (in the event-time column's type) and a count of the
records it stands for, which the window operator needs to count late records.

The buffer obeys the same rules as the plain combiner's, and one more: it is
flushed before the task sends a watermark, or its rows would reach the window
operator after the watermark that fires their window, as late rows.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

from job_runtime.event_time import TimeKind
from job_runtime.operators.combiner import DEFAULT_MAX_DELAY, DEFAULT_MAX_RECORDS, Combiner
from job_runtime.pipeline import KeyedOp
from job_runtime.records import Batch, BatchKind
from job_runtime.watermarks import event_times, time_array
from job_runtime.windows import WindowAssigner

RECORDS_OUTPUT = "__cjob_records"
"""A count every windowed partial row carries, whatever the job aggregates."""


class WindowCombiner:
    """Buffers a windowed ``aggregate``'s columns per window and sends partial rows."""

    def __init__(self, *, op: KeyedOp, subtask: int, max_records: int = DEFAULT_MAX_RECORDS,
                 max_delay: float = DEFAULT_MAX_DELAY) -> None:
        assert op.window is not None and op.event_time is not None
        self._op = dataclasses.replace(
            op, aggregates=(*op.aggregates, (RECORDS_OUTPUT, "count", None)))
        self._subtask = subtask
        self._max_records = max_records
        self._max_delay = max_delay
        self._windows: dict[int, Combiner] = {}
        self._time_kind: TimeKind | None = None
        self.records_in = 0

    def __len__(self) -> int:
        return sum(len(combiner) for combiner in self._windows.values())

    def add(self, batch: Batch) -> None:
        if not len(batch):
            return
        op = self._op
        assert isinstance(op.window, WindowAssigner) and op.event_time is not None
        stamps, self._time_kind = event_times(batch, column=op.event_time, operator=op.uid,
                                              subtask=self._subtask)
        arrow = batch.arrow
        self.records_in += arrow.num_rows
        for start, rows in op.window.assign(stamps):
            part = arrow if len(rows) == arrow.num_rows else arrow.take(pa.array(rows))
            combiner = self._windows.get(start)
            if combiner is None:
                combiner = self._windows[start] = Combiner(
                    op=op, max_records=self._max_records, max_delay=self._max_delay)
            combiner.add(Batch(arrow=part))

    def due(self) -> bool:
        return any(combiner.due() for combiner in self._windows.values())

    def flush(self) -> Batch | None:
        """One partial row per key and window held, with its ``window_start``."""
        parts: list[pa.RecordBatch] = []
        for start in sorted(self._windows):
            flushed = self._windows[start].flush()
            if flushed is None:
                continue
            arrow = flushed.arrow
            starts = time_array(np.full(arrow.num_rows, start, dtype=np.int64),
                                time_kind=self._time_kind or TimeKind.EPOCH_MS)
            parts.append(arrow.append_column("window_start", starts))
        self._windows = {}
        if not parts:
            return None
        if len(parts) == 1:
            return Batch(arrow=parts[0], kind=BatchKind.PARTIAL)
        return Batch.of(pa.Table.from_batches(parts), kind=BatchKind.PARTIAL)
