"""The interval join, vectorised: a batch of one side is paired with the other side's
waiting records by one Arrow hash join on the key and one filter on the times, not a
Python call per record or per pair.

A first-side record at ``t`` pairs with every second-side record of its key at ``s``
with ``t + lower <= s <= t + upper``. Each side's records wait (in
:class:`~job_runtime.operators.join_buffers.JoinBuffers`) until the watermark says no
record of the other side can still pair with them (``t + upper`` for the first side,
``s - lower`` for the second); a record already past that when it arrives goes to the
side output ``late`` instead. Pairs are emitted as they meet: the watermark only
forgets.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from job_runtime.operators.join_buffers import (
    TIME,
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


class IntervalJoinOperator(KeyedOperator):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        assert self.op.bounds is not None and self.op.event_time is not None
        self.lower, self.upper = self.op.bounds
        self.time_column: str = self.op.event_time
        self.buffers = JoinBuffers(operator=self.op.uid, subtask=self.subtask,
                                   max_parallelism=self.max_parallelism,
                                   key_groups=self.key_groups)
        self.next_expiry: list[int | None] = [None, None]
        """The earliest expiry in each buffer: a watermark before it forgets nothing."""
        self.watermark = MIN_WATERMARK

    def _expiries(self, side: int, times: np.ndarray) -> np.ndarray:
        """The last time a record of the other side may have and still pair."""
        return times + self.upper if side == 0 else times - self.lower

    # -- records

    def process(self, batch: Batch) -> Batch:
        return self._vectorised(self._process, batch)

    def _process(self, batch: Batch) -> Batch:
        out: list[Joined] = []
        for side, part in self.buffers.sides(batch):
            joined = self._side(side, part)
            if joined is not None:
                out.append(joined)
        return as_batch(out)

    def _side(self, side: int, part: pa.Table) -> Joined | None:
        times = side_times(part, column=self.time_column, operator=self.op.uid,
                           subtask=self.subtask)
        expiries = self._expiries(side, times)
        late = expiries < self.watermark
        if late.any():
            for record in records(part.filter(pa.array(late))):
                self.side.add(LATE, record)
            keep = ~late
            part, times, expiries = part.filter(pa.array(keep)), times[keep], expiries[keep]
            if not part.num_rows:
                return None
        joined = self._pair(side, part, times)
        self.buffers.append(side, part, times)
        earliest = int(expiries.min())
        current = self.next_expiry[side]
        self.next_expiry[side] = earliest if current is None else min(current, earliest)
        return joined

    def _pair(self, side: int, part: pa.Table, times: np.ndarray) -> Joined | None:
        """The pairs of ``part`` (of ``side``) with the other side's waiting records."""
        other = self.buffers.tables[1 - side]
        if other is None or not other.num_rows:
            return None
        i, j = self.buffers.matches(part, other)
        if not len(i):
            return None
        mine = times[i]
        theirs = other.column(TIME).to_numpy()[j]
        first, second = (mine, theirs) if side == 0 else (theirs, mine)
        within = (second >= first + self.lower) & (second <= first + self.upper)
        if not within.any():
            return None
        i, j = i[within], j[within]
        firsts, seconds = (part.take(i), other.take(j)) if side == 0 else \
            (other.take(j), part.take(i))
        fn = self.op.fn
        assert fn is not None
        try:
            return self.buffers.joined(firsts, seconds, fn)
        except Exception as exc:
            raise self._fail(exc) from exc

    # -- event time

    def on_watermark(self, watermark: int) -> Batch:
        """Forget what can no longer pair: nothing fires (pairs are emitted as they meet)."""
        self.watermark = watermark
        for side in (0, 1):
            buffer = self.buffers.tables[side]
            due = self.next_expiry[side]
            if buffer is None or due is None or due >= watermark:
                continue
            expiries = self._expiries(side, buffer.column(TIME).to_numpy())
            keep = expiries >= watermark
            self.buffers.keep(side, keep)
            self.next_expiry[side] = int(expiries[keep].min()) if keep.any() else None
        return Batch(rows=[])

    # -- state

    def snapshot(self) -> JoinSnapshot:
        return self.buffers.snapshot()

    def restore(self, blobs: Iterable[bytes]) -> int:
        self.buffers.restore(blobs)
        for side in (0, 1):
            buffer = self.buffers.tables[side]
            if buffer is not None and buffer.num_rows:
                self.next_expiry[side] = int(self._expiries(
                    side, buffer.column(TIME).to_numpy()).min())
        return self.key_count()

    def key_count(self) -> int:
        """Records waiting, both sides."""
        return self.buffers.size()
