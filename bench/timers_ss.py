"""The timers benchmark's Structured Streaming side: ``transformWithStateInPandas`` with
event-time timers, one process (its own JVM) per step.

The query, as its best users would write it with Spark 4's stateful processor API:

* ``spark.readStream.format("parquet")`` on the folder of Parquet files (hard links to
  the files ours reads, plus the windows benchmark's end-of-input record:
  :func:`bench.windows_data.write_end_marker`), ``maxFilesPerTrigger`` as the batch
  size;
* ``ts`` (epoch ms) as a timestamp, ``withWatermark`` on it with the same delay as
  ours, ``groupBy("user").transformWithStateInPandas(InactivityProcessor(),
  "user STRING, alert_at LONG, n LONG, total LONG", outputMode="Append",
  timeMode="EventTime")``;
* :class:`InactivityProcessor` keeps a user's open runs (see :mod:`bench.timers_job`
  for what a run and an alert are) in a ``ListState``; ``handleInputRows`` merges all of
  the key's new rows of the micro-batch at once with numpy (sorted by event time, a
  new run where the gap to the newest event time so far reaches the gap), then deletes
  the timers of runs whose newest event time moved and registers the new ones
  (``handle.deleteTimer``/``registerTimer``); ``handleExpiredTimer`` emits the run
  whose timer is due and drops it from the state;
* the Parquet file sink (exactly-once), the RocksDB state store with changelog
  checkpointing (which ``transformWithState`` requires: the provider of
  :func:`bench.windows_ss.session`), ``spark.sql.shuffle.partitions`` equal to the
  parallelism, ``local[<parallelism>]``.

Why the end-of-input record and not ``Trigger.AvailableNow``: a file stream has no end
for the watermark either way. ``AvailableNow`` stops once the files are read, and its
last no-data batch fires only timers the watermark of the last data passed: the last
``gap + delay`` of event time of alerts would never come. The end record, an hour of
event time past the input, moves the watermark past every run's alert time, as our
bounded source's final watermark does; its own user's alert lies beyond it, so it
adds no output row.

The steps are the windows benchmark's (:mod:`bench.windows_ss`): ``tune`` searches
``maxFilesPerTrigger`` for the fastest batch that fits 1 s (or, when none does, the
fastest within the noise of the shortest batch), ``run`` warms the JVM with eight
batches of a throw-away query and then runs the measured one until the end record's
watermark has fired the last timers. The windows side's steps build their query with
its module's ``start``; :func:`main` points that at :func:`start` here, so the same
steps run this query, in this process only.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from bench import windows_ss
from bench.timers_job import GAP_MS

OUTPUT_SCHEMA = "user STRING, alert_at LONG, n LONG, total LONG"
RUN_SCHEMA = "lo LONG, hi LONG, n LONG, total LONG"
"""A run in the list state: oldest and newest event time, count and sum."""


def merge_runs(runs: list[tuple[int, int, int, int]], ts: np.ndarray, amount: np.ndarray,
               *, gap: int) -> list[tuple[int, int, int, int]]:
    """``runs`` with the records ``ts``/``amount`` added, merged into runs again: in order
    of ``lo``, a run starts where its ``lo`` is ``gap`` or more past the newest event
    time of everything before it."""
    lo = np.concatenate([np.array([r[0] for r in runs], dtype=np.int64), ts])
    hi = np.concatenate([np.array([r[1] for r in runs], dtype=np.int64), ts])
    n = np.concatenate([np.array([r[2] for r in runs], dtype=np.int64),
                        np.ones(len(ts), dtype=np.int64)])
    total = np.concatenate([np.array([r[3] for r in runs], dtype=np.int64), amount])
    order = np.argsort(lo, kind="stable")
    lo, hi, n, total = lo[order], hi[order], n[order], total[order]
    starts = np.ones(len(lo), dtype=bool)
    starts[1:] = lo[1:] - np.maximum.accumulate(hi)[:-1] >= gap
    at = np.flatnonzero(starts)
    return list(zip(lo[at].tolist(), np.maximum.reduceat(hi, at).tolist(),
                    np.add.reduceat(n, at).tolist(), np.add.reduceat(total, at).tolist(),
                    strict=True))


class InactivityProcessor(StatefulProcessor):
    """The inactivity alert per user, with one event-time timer per open run."""

    def __init__(self, gap_ms: int = GAP_MS) -> None:
        self.gap = gap_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.runs = handle.getListState("runs", RUN_SCHEMA)

    def _current(self) -> list[tuple[int, int, int, int]]:
        # An empty list state reads as no rows: no exists() round trip first.
        return [(int(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in self.runs.get()]

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        frame = pd.concat(list(rows), ignore_index=True)
        before = self._current()
        after = merge_runs(before, frame["ts"].to_numpy(dtype=np.int64),
                           frame["amount"].to_numpy(dtype=np.int64), gap=self.gap)
        old = {r[1] + self.gap for r in before}
        new = {r[1] + self.gap for r in after}
        for expiry in sorted(old - new):
            self.handle.deleteTimer(expiry)
        for expiry in sorted(new - old):
            self.handle.registerTimer(expiry)
        self.runs.put(after)
        return iter(())

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[pd.DataFrame]:
        expiry = expiredTimerInfo.getExpiryTimeInMs()
        runs = self._current()
        due = [r for r in runs if r[1] + self.gap == expiry]
        rest = [r for r in runs if r[1] + self.gap != expiry]
        if rest:
            self.runs.put(rest)
        else:
            self.runs.clear()
        if due:
            yield pd.DataFrame({"user": [key[0]] * len(due), "alert_at": [expiry] * len(due),
                                "n": [r[2] for r in due], "total": [r[3] for r in due]})

    def close(self) -> None:
        pass


def start(spark: Any, *, source: str, output: str, checkpoint: str, max_files: int,
          delay_seconds: float) -> Any:
    """The query, started (the signature of :func:`bench.windows_ss.start`)."""
    events = windows_ss.watermarked_events(spark, source=source, max_files=max_files,
                                           delay_seconds=delay_seconds)
    alerts = (events.groupBy("user")
              .transformWithStateInPandas(InactivityProcessor(), OUTPUT_SCHEMA,
                                          outputMode="Append", timeMode="EventTime"))
    return (alerts.writeStream.format("parquet")
            .option("path", output)
            .option("checkpointLocation", checkpoint)
            .outputMode("append")
            .start())


def main() -> int:
    """:func:`bench.windows_ss.main`, its steps running this query."""
    return windows_ss.main(start=start)


if __name__ == "__main__":
    sys.exit(main())
