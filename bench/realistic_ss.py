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
  ``spark.sql.shuffle.partitions`` equal to the parallelism, checkpoint on local disk;
  ``spark.sql.files.openCostInBytes`` lowered to 1 MiB so that a batch of one or two
  files is split across both cores instead of read by one task; the default trigger
  (the next batch starts as soon as the previous one ends: no idle time between).

``tune``: the batch-size search of the ``throughput`` benchmark
(:class:`bench.batch_size_search.BatchSizeSearch`, two passes in one JVM, the second
decides) over ``maxFilesPerTrigger``: the fastest size whose batches fit 1 s, the
interval of our checkpoints; prints ``TUNED <json>``.
``run``: a warm-up query (up to eight batches, its own checkpoint and output), then the
measured query until it has read every record of the input; prints ``RESULT <json>``
with every batch (the format of :mod:`bench.windows_ss`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

from bench.batch_size_search import BatchSizeSearch
from bench.realistic_data import SPARK_FORMATS, SPARK_SCHEMA
from bench.ss_results import TUNED_PREFIX, Tuning, TuningPoint
from bench.ss_results import dump as dump_tuning
from bench.windows_ss import (
    FIRST_SIZE_WARMUP_BATCHES,
    MEASURED_BATCHES,
    TRIGGER_SECONDS,
    Batch,
    QueryRun,
    batch_of,
    data_batches,
    dump,
    files_for,
)

OPEN_COST_BYTES = 1 << 20


def session(*, parallelism: int) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.appName("bench-realistic-structured-streaming")
             .master(f"local[{parallelism}]")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "2g")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.sql.shuffle.partitions", str(parallelism))
             .config("spark.sql.files.openCostInBytes", str(OPEN_COST_BYTES))
             .config("spark.sql.streaming.stateStore.providerClass",
                     "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
             .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
                     "true")
             .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class BatchFiles:
    """``foreachBatch`` target: each batch's rows to its own folder, rewritten on replay."""

    def __init__(self, output: str) -> None:
        self.output = output

    def __call__(self, frame: Any, batch_id: int) -> None:
        frame.write.mode("overwrite").parquet(os.path.join(self.output, f"batch={batch_id}"))


def start(spark: Any, *, source: str, fmt: str, output: str, checkpoint: str,
          max_files: int) -> Any:
    from pyspark.sql import functions as F

    events = (spark.readStream.schema(SPARK_SCHEMA)
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


def measure_size(spark: Any, *, ns: argparse.Namespace, work: str, max_files: int,
                 warmup: int, deadline: float) -> TuningPoint:
    checkpoint = tempfile.mkdtemp(prefix="checkpoint-", dir=work)
    output = tempfile.mkdtemp(prefix="out-", dir=work)
    query = start(spark, source=ns.input, fmt=ns.format, output=output, checkpoint=checkpoint,
                  max_files=max_files)
    try:
        batches = data_batches(query, wanted=warmup + MEASURED_BATCHES, deadline=deadline)
    finally:
        query.stop()
        shutil.rmtree(checkpoint, ignore_errors=True)
        shutil.rmtree(output, ignore_errors=True)
    measured = batches[warmup:]
    rows = sum(b.rows for b in measured)
    seconds = sum(b.duration_ms for b in measured) / 1000.0
    return TuningPoint(rows_per_batch=max_files * ns.file_records,
                       batch_ms_median=statistics.median(b.duration_ms for b in measured),
                       records_per_second=rows / seconds)


def tune(spark: Any, ns: argparse.Namespace, work: str) -> Tuning:
    """The search over ``maxFilesPerTrigger``, as :func:`bench.windows_ss.tune`: sizes in
    whole files, the largest leaving room for its warm-up and measured batches in the
    input, the smallest one file."""
    deadline = time.monotonic() + ns.timeout
    files = -(-ns.records // ns.file_records)
    limit = max(1, files // (1 + MEASURED_BATCHES)) * ns.file_records
    search = BatchSizeSearch(start=min(ns.start, limit), limit=limit,
                             budget_ms=TRIGGER_SECONDS * 1000.0, floor=ns.file_records)
    points: list[TuningPoint] = []
    for pass_ in ("warm-up", "measured"):
        points = []
        while (size := search.next_size(points)) is not None:
            max_files = files_for(size, ns.file_records)
            if max_files * ns.file_records in {p.rows_per_batch for p in points}:
                break  # whole files: the size the search asks for was measured already
            wanted = FIRST_SIZE_WARMUP_BATCHES if pass_ == "warm-up" and not points else 1
            warmup = max(1, min(wanted, files // max_files - MEASURED_BATCHES))
            point = measure_size(spark, ns=ns, work=work, max_files=max_files, warmup=warmup,
                                 deadline=deadline)
            points.append(point)
            print(f"[tune] {ns.format}, {pass_} pass, maxFilesPerTrigger {max_files} "
                  f"({point.rows_per_batch:,} records): batch {point.batch_ms_median:,.0f} ms, "
                  f"{point.records_per_second:,.0f} records/s"
                  f"{'' if search.fits(point) else ' (overruns the trigger)'}",
                  file=sys.stderr, flush=True)
    return Tuning(points=tuple(points), chosen=search.chosen(points))


def run(spark: Any, ns: argparse.Namespace, work: str, *, spark_ready_at: float) -> QueryRun:
    deadline = time.monotonic() + ns.timeout
    # The JVM warmed as in the tuning process (code generation, the reader, RocksDB's
    # native library): up to eight batches at the measured size, into a folder nobody
    # reads.
    query = start(spark, source=ns.input, fmt=ns.format,
                  output=tempfile.mkdtemp(prefix="warmup-", dir=work),
                  checkpoint=tempfile.mkdtemp(prefix="checkpoint-", dir=work),
                  max_files=ns.max_files)
    files = -(-ns.records // ns.file_records)
    try:
        data_batches(query, wanted=max(1, min(FIRST_SIZE_WARMUP_BATCHES,
                                              files // ns.max_files)), deadline=deadline)
    finally:
        query.stop()
    query = start(spark, source=ns.input, fmt=ns.format, output=ns.output,
                  checkpoint=ns.checkpoint, max_files=ns.max_files)
    try:
        batches = until_read(query, records=ns.records, deadline=deadline)
    finally:
        query.stop()
    return QueryRun(max_files=ns.max_files, file_records=ns.file_records,
                    batches=tuple(batches), spark_ready_at=spark_ready_at,
                    launched_at=ns.launched_at)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("mode", choices=("tune", "run"))
    parser.add_argument("--input", required=True, help="the folder of input files")
    parser.add_argument("--format", choices=sorted(SPARK_FORMATS), required=True)
    parser.add_argument("--records", type=int, required=True, help="records of the input")
    parser.add_argument("--file-records", type=int, required=True)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--work", required=True)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--start", type=int, default=500_000,
                        help="tune: the first batch size tried, in records")
    parser.add_argument("--max-files", type=int, default=0, help="run: maxFilesPerTrigger")
    parser.add_argument("--output", default="", help="run: the foreachBatch output folder")
    parser.add_argument("--checkpoint", default="", help="run: the checkpoint folder")
    parser.add_argument("--launched-at", type=float, default=0.0,
                        help="run: when the benchmark launched this process (epoch s)")
    ns = parser.parse_args()
    work = tempfile.mkdtemp(prefix="ss-", dir=ns.work)
    spark = session(parallelism=ns.parallelism)
    spark_ready_at = time.time()
    try:
        if ns.mode == "tune":
            print(dump_tuning(TUNED_PREFIX, tune(spark, ns, work)), flush=True)
        else:
            print(dump(run(spark, ns, work, spark_ready_at=spark_ready_at)), flush=True)
    except (TimeoutError, RuntimeError) as exc:
        print(f"structured streaming: {exc}", file=sys.stderr, flush=True)
        return 3
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
