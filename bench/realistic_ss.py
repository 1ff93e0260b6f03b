"""The realistic benchmark's Structured Streaming side, one process (its own JVM) per step.

The query, as its best users would write and tune it:

* ``spark.readStream.format("parquet")`` or ``format("json")`` with the input's schema
  (no inference) on a folder of hard links to the files ours reads,
  ``maxFilesPerTrigger`` as the batch size;
* ``groupBy("user").agg(count(*) as n, sum(amount) as total, avg(amount) as avg)``,
  output mode ``update`` (each batch emits the keys it changed);
* ``foreachBatch`` writing each batch's rows as Parquet to ``<output>/batch=<id>`` with
  mode ``overwrite``: a replayed batch rewrites the same folder, the documented way to
  make an update-mode query's file output exactly-once (the built-in file sink takes
  append mode only);
* the RocksDB state store with changelog checkpointing, ``local[<parallelism>]``,
  ``spark.sql.shuffle.partitions`` equal to the parallelism, checkpoint on local disk,
  a 4 GiB driver;
  ``spark.sql.files.openCostInBytes`` lowered to 1 MiB so that a batch of one or two
  files is split across both cores instead of read by one task; the default trigger
  (the next batch starts as soon as the previous one ends: no idle time between).

``tune``: a batch-size search over ``maxFilesPerTrigger`` (two passes in one JVM, the
second decides), ``--search throughput`` for its fastest size
(:class:`bench.batch_size_search.ThroughputSearch`) or ``--search interval`` for the
fastest whose batches fit 1 s, the interval of our checkpoints
(:class:`bench.batch_size_search.BatchSizeSearch`); prints ``TUNED <json>``.
``run``: a warm-up query (up to eight batches, its own checkpoint and output), then the
measured query until it has read every record of the input; prints ``RESULT <json>``
with every batch (the format of :mod:`bench.windows_ss`).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from typing import Any

from bench.realistic_data import SPARK_FORMATS, spark_schema
from bench.windows_ss import (
    Batch,
    QueryRun,
    QueryStart,
    batch_of,
    process_arguments,
    serve,
    session,
    tune,
    warm_up,
)

OPEN_COST_BYTES = 1 << 20
DRIVER_MEMORY = "4g"
"""The driver's heap (the executors live in it, ``local[2]``): batches of millions of
rows over a million keys of RocksDB state want more than the 2 GiB the other
benchmarks give their smaller inputs."""


class BatchFiles:
    """``foreachBatch`` target: each batch's rows to its own folder, rewritten on replay."""

    def __init__(self, output: str) -> None:
        self.output = output

    def __call__(self, frame: Any, batch_id: int) -> None:
        frame.write.mode("overwrite").parquet(os.path.join(self.output, f"batch={batch_id}"))


def start(spark: Any, *, source: str, fmt: str, schema: str, output: str, checkpoint: str,
          max_files: int) -> Any:
    from pyspark.sql import functions as F

    events = (spark.readStream.schema(schema)
              .format(SPARK_FORMATS[fmt])
              .option("maxFilesPerTrigger", str(max_files))
              .load(source))
    totals = events.groupBy("user").agg(F.count(F.lit(1)).alias("n"),
                                        F.sum("amount").alias("total"),
                                        F.avg("amount").alias("avg"))
    return (totals.writeStream.outputMode("update")
            .option("checkpointLocation", checkpoint)
            .foreachBatch(BatchFiles(output))
            .start())


def _progress(query: Any) -> list[Batch]:
    return [batch_of(p) for p in query.recentProgress]


def until_read(query: Any, *, records: int, deadline: float) -> list[Batch]:
    """Wait until the query's batches read ``records`` rows (the batch holding the last
    has written its output and committed when its progress is reported); every batch,
    in order."""
    while True:
        batches = _progress(query)
        read = sum(b.rows for b in batches)
        if read >= records:
            return batches
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        if time.monotonic() > deadline:
            raise TimeoutError(f"{read:,} of {records:,} rows read before the deadline")
        time.sleep(0.1)


def run(*, start_query: QueryStart, ns: argparse.Namespace, work: str,
        spark_ready_at: float) -> QueryRun:
    deadline = time.monotonic() + ns.timeout
    warm_up(start_query=start_query, ns=ns, work=work, deadline=deadline)
    query = start_query(output=ns.output, checkpoint=ns.checkpoint, max_files=ns.max_files)
    try:
        batches = until_read(query, records=ns.records, deadline=deadline)
    finally:
        query.stop()
    return QueryRun(max_files=ns.max_files, file_records=ns.file_records,
                    batches=tuple(batches), spark_ready_at=spark_ready_at,
                    launched_at=ns.launched_at)


def main() -> int:
    parser = process_arguments(
        description=__doc__.splitlines()[0] if __doc__ else None,
        input_help="the folder of input files", records_help="records of the input",
        output_help="run: the foreachBatch output folder", timeout=1800.0)
    parser.add_argument("--format", choices=sorted(SPARK_FORMATS), required=True)
    parser.add_argument("--float-amounts", action="store_true",
                        help="the input's amounts are floats (the orders dataset)")
    ns = parser.parse_args()
    spark = session(parallelism=ns.parallelism, app="bench-realistic-structured-streaming",
                    conf={"spark.sql.files.openCostInBytes": str(OPEN_COST_BYTES),
                          "spark.driver.memory": DRIVER_MEMORY})
    start_query = functools.partial(start, spark, source=ns.input, fmt=ns.format,
                                    schema=spark_schema(float_amounts=ns.float_amounts))
    return serve(ns, spark=spark,
                 tune_step=lambda work: tune(start_query=start_query, ns=ns, work=work,
                                             label=f"{ns.format}, "),
                 run_step=lambda work, ready: run(start_query=start_query, ns=ns, work=work,
                                                  spark_ready_at=ready))


if __name__ == "__main__":
    sys.exit(main())
