"""The window join, vectorised: each side's records wait once per window they fall in,
and when the watermark passes a window's end, that window's records of both sides are
paired by one Arrow hash join on the key and the window, then forgotten.

A record whose every window has already fired when it arrives is late: it goes to the
side output ``late``. Tumbling and sliding windows alike (a record of a sliding window
waits once per window it is in).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from job_runtime.operators.join_buffers import (
    WINDOW,
    JoinBuffers,
    Joined,
    JoinSnapshot,
    as_batch,
    records,
    side_times,
)
from job_runtime.operators.keyed_operator import KeyedOperator
from job_runtime.pipeline.connect import LATE
from job_runtime.records import Batch
from job_runtime.watermarks import MIN_WATERMARK
from job_runtime.windows import WindowAssigner


class WindowJoinOperator(KeyedOperator):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        assert isinstance(self.op.window, WindowAssigner) and self.op.event_time is not None
        self.assigner: WindowAssigner = self.op.window
        self.time_column: str = self.op.event_time
        self.buffers = JoinBuffers(operator=self.op.uid, subtask=self.subtask,
                                   max_parallelism=self.max_parallelism,
                                   key_groups=self.key_groups)
        self.next_end: list[int | None] = [None, None]
        """The earliest window end waiting on each side: a watermark before it fires
        nothing."""
        self.watermark = MIN_WATERMARK

    # -- records

    def process(self, batch: Batch) -> Batch:
        return self._vectorised(self._process, batch)

    def _process(self, batch: Batch) -> Batch:
        for side, part in self.buffers.sides(batch):
            self._side(side, part)
        return Batch(rows=[])

    def _side(self, side: int, part: pa.Table) -> None:
        times = side_times(part, column=self.time_column, operator=self.op.uid,
                           subtask=self.subtask)
        size, slide = self.assigner.size, self.assigner.slide
        last = self.assigner.last_start(times)
        rows_parts: list[np.ndarray] = []
        starts_parts: list[np.ndarray] = []
        for back in range(-(-size // slide)):
            starts = last - back * slide
            open_ = (starts + size > times) & (starts + size > self.watermark)
            rows_parts.append(np.flatnonzero(open_))
            starts_parts.append(starts[open_])
        rows = np.concatenate(rows_parts)
        starts = np.concatenate(starts_parts)
        late = np.ones(part.num_rows, dtype=bool)
        late[rows] = False
        if late.any():
            for record in records(part.filter(pa.array(late))):
                self.side.add(LATE, record)
        if not len(rows):
            return
        self.buffers.append(side, part.take(rows), times[rows],
                            extra={WINDOW: pa.array(starts, type=pa.int64())})
        end = int(starts.min()) + size
        current = self.next_end[side]
        self.next_end[side] = end if current is None else min(current, end)

    # -- event time

    def on_watermark(self, watermark: int) -> Batch:
        """Pair and forget every window that ended by ``watermark``."""
        self.watermark = watermark
        dues = [n is not None and n <= watermark for n in self.next_end]
        if not any(dues):
            return Batch(rows=[])
        size = self.assigner.size
        due: list[pa.Table | None] = [None, None]
        for side in (0, 1):
            buffer = self.buffers.tables[side]
            if buffer is None or not dues[side]:
                continue
            ends = buffer.column(WINDOW).to_numpy() + size
            fired = ends <= watermark
            due[side] = buffer.filter(pa.array(fired))
            self.buffers.keep(side, ~fired)
            rest = ends[~fired]
            self.next_end[side] = int(rest.min()) if len(rest) else None
        first, second = due
        if first is None or second is None or not first.num_rows or not second.num_rows:
            return Batch(rows=[])
        i, j = self.buffers.matches(first, second, on=(WINDOW, WINDOW))
        if not len(i):
            return Batch(rows=[])
        fn = self.op.fn
        assert fn is not None
        try:
            joined: Joined = self.buffers.joined(first.take(i), second.take(j), fn)
        except Exception as exc:
            raise self._fail(exc) from exc
        return as_batch([joined])

    # -- state

    def snapshot(self) -> JoinSnapshot:
        return self.buffers.snapshot()

    def restore(self, blobs: Iterable[bytes]) -> int:
        self.buffers.restore(blobs)
        for side in (0, 1):
            buffer = self.buffers.tables[side]
            if buffer is not None and buffer.num_rows:
                self.next_end[side] = int(buffer.column(WINDOW).to_numpy().min()) \
                    + self.assigner.size
        return self.key_count()

    def key_count(self) -> int:
        """Records waiting (once per window), both sides."""
        return self.buffers.size()
