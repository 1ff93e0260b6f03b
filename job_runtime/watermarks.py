"""Event time and watermarks: how late a source's records may come, and what time it is.

``p.source(src, watermarks=watermarks.bounded_out_of_orderness("ts", max_delay="5s"))``
says that column ``ts`` holds each record's event time (an integer of milliseconds
since the epoch, or a timestamp) and that a record is at most ``max_delay`` older than
the newest one read before it. The source then tracks, per split, the newest event
time it read, and its watermark is that minus the delay minus 1 ms: the promise that
no record older than it follows. A subtask's watermark is the minimum over its
splits, a keyed task's the minimum over its input channels (see
:mod:`job_runtime.execution.subtask.watermark_tracking`); windows fire and event-time
timers run when it passes them.

A split that read nothing for ``idle_after`` (wall time) stops holding the watermark
back, until it reads again; without ``idle_after`` a quiet partition holds every
window of the job open, as in Flink.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa

from job_runtime.durations import duration_ms
from job_runtime.errors import PipelineDefinitionError, UserCodeError
from job_runtime.event_time import EventTimes, TimeKind
from job_runtime.records import Batch

MIN_WATERMARK = -(2**63)
"""Before any record: every window is still open."""
MAX_WATERMARK = 2**63 - 1
"""After the last record of a bounded input: every window fires."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class WatermarkStrategy:
    """Where event time is and how far out of order it may come."""

    column: str
    max_delay: int
    """Milliseconds a record may be older than the newest read before it."""
    idle_after: int | None = None
    """Milliseconds (wall time) without a record after which a split stops holding
    the watermark back; ``None``: never."""

    def watermark_for(self, newest: int) -> int:
        """The watermark of a split whose newest event time is ``newest``."""
        return max(MIN_WATERMARK, newest - self.max_delay - 1)


def bounded_out_of_orderness(column: str, *, max_delay: str | float,
                             idle_after: str | float | None = None) -> WatermarkStrategy:
    """Event time in ``column``; records at most ``max_delay`` out of order; a split
    quiet for ``idle_after`` does not hold time back."""
    if not isinstance(column, str) or not column:
        raise PipelineDefinitionError(
            problem="watermarks.bounded_out_of_orderness needs the event-time column's name")
    return WatermarkStrategy(
        column=column,
        max_delay=duration_ms(max_delay, what="watermarks max_delay"),
        idle_after=None if idle_after is None else duration_ms(
            idle_after, what="watermarks idle_after", allow_zero=False))


def event_times(batch: Batch, *, column: str, operator: str,
                subtask: int) -> tuple[np.ndarray, TimeKind]:
    """The batch's event times in ms (int64) and the column's :class:`TimeKind`; a
    missing, null or non-time column is a one-line error naming it. Read once per
    batch: the batch keeps them for the next step that asks."""
    kept = batch.times
    if kept is not None and kept.column == column:
        return kept.millis, kept.kind
    arrow = batch.arrow
    if column not in arrow.schema.names:
        raise _bad(operator, subtask, f"the event-time column {column!r} is not in the "
                                      f"records (they have {', '.join(arrow.schema.names)})")
    values = arrow.column(column)
    kind = values.type
    if pa.types.is_timestamp(kind):
        millis = values.cast(pa.timestamp("ms", tz=kind.tz), safe=False).cast(pa.int64())
        time_kind = TimeKind.TIMESTAMP
    elif pa.types.is_integer(kind):
        millis = values.cast(pa.int64())
        time_kind = TimeKind.EPOCH_MS
    else:
        raise _bad(operator, subtask, f"the event-time column {column!r} is {kind}; it must be "
                                      f"a timestamp or an integer of milliseconds since the "
                                      f"epoch")
    if values.null_count:
        raise _bad(operator, subtask, f"{values.null_count} records have no event time "
                                      f"(null in column {column!r})")
    stamps = millis.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    batch.times = EventTimes(column=column, millis=stamps, kind=time_kind)
    return stamps, time_kind


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def datetime_ms(value: datetime) -> int:
    """Milliseconds since the epoch, exactly; a naive datetime is UTC (as Arrow reads it)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return (value - _EPOCH) // timedelta(milliseconds=1)


def row_time_ms(value: object, *, column: str) -> int:
    """One record's event time in ms (a row-at-a-time operator's view of
    :func:`event_times`)."""
    if isinstance(value, datetime):
        return datetime_ms(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise TypeError(f"the event-time column {column!r} holds {value!r}; it must be a "
                    f"timestamp or an integer of milliseconds since the epoch")


def record_times(batch: Batch, *, column: str, operator: str,
                 subtask: int) -> tuple[list[int], TimeKind | None]:
    """Each record's event time in ms, for an operator that takes records one at a
    time, and the column's kind (``None`` for an empty batch of rows). Rows are read
    as rows, so that a batch of dicts is not converted to Arrow only for its times."""
    if batch.has_arrow:
        millis, arrow_kind = event_times(batch, column=column, operator=operator,
                                         subtask=subtask)
        stamps: list[int] = millis.tolist()
        return stamps, arrow_kind
    values = [row.get(column) for row in batch.rows]
    kind: TimeKind | None = None if not values else (
        TimeKind.TIMESTAMP if isinstance(values[0], datetime) else TimeKind.EPOCH_MS)
    return [row_time_ms(value, column=column) for value in values], kind


def time_array(millis: np.ndarray, *, time_kind: TimeKind) -> pa.Array:
    """Milliseconds as a column of the event-time column's kind."""
    array = pa.array(millis, type=pa.int64())
    if time_kind == TimeKind.TIMESTAMP:
        return array.cast(pa.timestamp("ms", tz="UTC"))
    return array


def _bad(operator: str, subtask: int, problem: str) -> UserCodeError:
    return UserCodeError(operator=operator, subtask=subtask, details=problem)
