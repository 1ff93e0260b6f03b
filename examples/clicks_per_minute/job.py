"""Clicks per user and minute of event time, from clicks that arrive out of order.

Reads JSON lines clicks (``{"user", "ts", "amount", ...}``, ``ts`` in milliseconds
since the epoch, up to 20 s out of order) from ``input``, and writes one row per
user and minute when the watermark passes the minute's end: ``{"user",
"window_start", "window_end", "n", "total"}``, exactly once whatever is killed.

Arguments: ``input`` and ``output`` (directories), ``size`` (the window, default
``1m``), ``max_delay`` (how far out of order clicks come, default ``30s``),
``delay_ms`` (milliseconds per click, so a kill lands mid-run), ``batch_size``, and
``late_output``: a directory for the clicks too late for their minute, which are
otherwise counted and dropped.
"""

from __future__ import annotations

import time

import pyarrow as pa

from job_runtime import Pipeline, sinks, sources, watermarks, windows


def build(p: Pipeline) -> None:
    delay = float(p.args.get("delay_ms", 0)) / 1000.0

    def slowly(batch: pa.RecordBatch) -> pa.RecordBatch:
        if delay:
            time.sleep(delay * batch.num_rows)
        return batch

    per_minute = (
        p.source(sources.files(p.args["input"], format="jsonl",
                               batch_size=int(p.args.get("batch_size", 50))),
                 watermarks=watermarks.bounded_out_of_orderness(
                     "ts", max_delay=p.args.get("max_delay", "30s")))
        .map_batches(slowly)
        .key_by("user")
        .window(windows.tumbling(p.args.get("size", "1m")))
        .aggregate(n="count", total=("sum", "amount")))
    per_minute.sink(sinks.files(p.args["output"], format="jsonl"))
    if p.args.get("late_output"):
        (per_minute.side_output(windows.late_data())
                   .sink(sinks.files(p.args["late_output"], format="jsonl"), name="late"))
