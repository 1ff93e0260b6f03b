"""``sequence``: the records ``{"seq": 0}`` .. ``{"seq": count - 1}``, optionally rate-limited."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pyarrow as pa

from job_runtime.records import Batch
from job_runtime.sources.source_contract import Source, SourceContext, Split, SplitReader

_PAUSE_SLICE = 0.005


class _SequenceReader(SplitReader):
    def __init__(self, *, start: int, end: int, position: int | None, batch_size: int,
                 rate_per_reader: float | None) -> None:
        self._next = start if position is None else int(position)
        self._end = end
        self._batch_size = batch_size
        self._rate = rate_per_reader
        self._started = time.monotonic()
        self._emitted = 0

    def read_batch(self) -> Batch | None:
        if self._next >= self._end:
            return None
        size = min(self._batch_size, self._end - self._next)
        if self._rate:
            due = self._started + self._emitted / self._rate
            delay = due - time.monotonic()
            if delay > 0:
                # Pause in short slices: the source task handles checkpoint triggers
                # between reads, so a long pause would hold back its barriers.
                time.sleep(min(delay, _PAUSE_SLICE))
                if delay > _PAUSE_SLICE:
                    return Batch(rows=[])
        values = np.arange(self._next, self._next + size, dtype=np.int64)
        self._next += size
        self._emitted += size
        return Batch(arrow=pa.RecordBatch.from_arrays([pa.array(values)], names=["seq"]))

    def position(self) -> int:
        return self._next


class SequenceSource(Source):
    """A deterministic, finite sequence cut into ``split_count`` contiguous ranges."""

    name = "sequence"

    def __init__(self, *, count: int, rate: float | None = None, split_count: int = 8,
                 batch_size: int | None = None) -> None:
        self.count = count
        self.rate = rate
        self.split_count = max(1, split_count)
        self.batch_size = batch_size

    def splits(self, *, context: SourceContext) -> list[Split]:
        n = self.split_count
        bounds = [self.count * i // n for i in range(n + 1)]
        return [Split(index=i, description=(bounds[i], bounds[i + 1])) for i in range(n)]

    def open(self, split: Split, position: Any, *, context: SourceContext) -> SplitReader:
        start, end = split.description
        readers = max(1, min(context.parallelism, self.split_count))
        rate = self.rate / readers if self.rate else None
        batch_size = self.batch_size or context.batch_size
        if rate:
            batch_size = max(1, min(batch_size, int(rate / 20) or 1))
        return _SequenceReader(start=start, end=end, position=position, batch_size=batch_size,
                               rate_per_reader=rate)


def sequence(count: int, rate: float | None = None, *, splits: int = 8,
             batch_size: int | None = None) -> SequenceSource:
    """Records ``{"seq": i}`` for ``i`` in ``range(count)``; ``rate`` in records/s overall.

    ``batch_size`` rows per batch; by default the pipeline's choice (larger when no
    Python function sees single records).
    """
    return SequenceSource(count=count, rate=rate, split_count=splits, batch_size=batch_size)
