"""The windows benchmark's job: a 1-minute tumbling count and sum per user over an
out-of-order event-time stream of Parquet files (``bench.windows_job:window_counts``).

``p.args``: ``input`` (the folder of Parquet files), ``output`` (the files sink's
folder), ``max_delay`` (the watermark's bound on disorder, default ``"5s"``),
``window`` (default ``"1m"``) and ``batch_size`` (rows per source batch, default
65,536: the runtime's batch size for vectorised pipelines; the files source's own
default is 4,096).

Each output row is ``user, window_start, window_end, n, total`` as the window
operator emits it, plus ``fired_at``: the wall clock (epoch ms) when the row left
the window operator, which the benchmark's latency is read from.
"""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa

from job_runtime import Pipeline, sinks, sources, watermarks, windows


def stamp_fired_at(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch with ``fired_at``: now, in epoch milliseconds (one column per batch)."""
    now = np.full(batch.num_rows, int(time.time() * 1000), dtype=np.int64)
    return pa.RecordBatch.from_arrays([*batch.columns, pa.array(now)],
                                      names=[*batch.schema.names, "fired_at"])


def window_counts(p: Pipeline) -> None:
    """``key_by("user").window(tumbling("1m")).aggregate(n="count", total=("sum",
    "amount"))`` into the exactly-once Parquet files sink; with ``late_output``, the
    records too late for their window into a second one (a late-data branch, which
    takes the combiner away: records, not partial rows, cross the exchange)."""
    source = sources.files(str(p.args["input"]), format="parquet",
                           batch_size=int(p.args.get("batch_size", 65536)))
    strategy = watermarks.bounded_out_of_orderness(
        "ts", max_delay=str(p.args.get("max_delay", "5s")))
    counted = (p.source(source, watermarks=strategy)
               .key_by("user")
               .window(windows.tumbling(str(p.args.get("window", "1m"))))
               .aggregate(n="count", total=("sum", "amount")))
    counted.map_batches(stamp_fired_at).sink(sinks.files(str(p.args["output"]),
                                                         format="parquet"))
    if p.args.get("late_output"):
        (counted.side_output(windows.late_data())
                .sink(sinks.files(str(p.args["late_output"]), format="parquet"), name="late"))
