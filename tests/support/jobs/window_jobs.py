"""An event-time window job for the runtime tests: clicks per user and window, read from
the JSON lines files of the clicks-per-minute example's format
(``examples/clicks_per_minute/clicks.py`` writes them, its ``verify.py`` checks the
output), with knobs the example does not need: a pause per batch, and a subtask that
kills itself once at a given click.
"""

from __future__ import annotations

import time

import pyarrow as pa
from crashing_jobs import _crash_once

from job_runtime import Pipeline, sinks, sources, watermarks, windows


def per_window(p: Pipeline) -> None:
    """Clicks per user in tumbling windows of ``size`` (default 10s)."""
    pause = float(p.args.get("pause", 0.0))
    crash_at = int(p.args.get("crash_at", -1))
    maybe_crash = _crash_once(p)

    def slow_or_crash(batch: pa.RecordBatch) -> pa.RecordBatch:
        if crash_at in batch.column("seq").to_pylist():
            maybe_crash({"seq": crash_at})
        if pause:
            time.sleep(pause)
        return batch

    strategy = watermarks.bounded_out_of_orderness(
        "ts", max_delay=p.args.get("max_delay", "5s"), idle_after=p.args.get("idle_after"))
    (p.source(sources.files(p.args["input"], format="jsonl",
                            batch_size=int(p.args.get("batch_size", 500))),
              watermarks=strategy)
      .map_batches(slow_or_crash)
      .key_by("user")
      .window(windows.tumbling(p.args.get("size", "10s")),
              allowed_lateness=p.args.get("allowed_lateness", 0))
      .aggregate(n="count", total=("sum", "amount"))
      .sink(sinks.files(p.args["output"], format="jsonl")))
