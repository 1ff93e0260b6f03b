"""The Spark Structured Streaming baselines, one run per process.

Every query reads the ``rate-micro-batch`` source (a fixed number of rows per
micro-batch, so the amount of work does not depend on the clock), keys
``value % keys`` and keeps count and sum of ``value`` per key, with ``local[P]`` and
``spark.sql.shuffle.partitions = P`` (one shuffle partition per core). The trigger
follows the search (``--search``): ``throughput`` runs batches back to back (no
trigger interval: a user tuning for throughput waits for nothing) and searches the
batch size up to its rate's plateau; ``interval`` holds a 1 s processing-time
trigger and the largest batch that fits it, our checkpoint interval:

* ``aggregate``: ``groupBy(key).agg(count, sum)``, the engine's own aggregation;
* ``pandas-state``: ``applyInPandasWithState`` with a Python function per key;
* ``transform-with-state``: ``transformWithStateInPandas`` with a
  ``StatefulProcessor`` holding a ``ValueState`` (needs the RocksDB provider).

State store: ``rocksdb`` (RocksDB with changelog checkpointing) or ``hdfs``
(the default, HDFS-backed in-memory map). Sink: ``noop`` (discards, update
mode) or ``files`` (``foreachBatch`` writing each micro-batch's output as
Parquet to a directory named by the batch id with mode ``overwrite``: a
replayed batch rewrites the same directory, the documented way to make an
update-mode query's file output exactly-once, since the built-in file sink
takes append mode only).

``--tune`` searches the batch size instead of running once: see :func:`tune`.
The process prints one ``RESULT``/``TUNED`` line (:mod:`bench.ss_results`).
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from bench.batch_size_search import SEARCHES, BatchSizeSearch, SizeSearch, ThroughputSearch
from bench.ss_results import (
    RESULT_PREFIX,
    TUNED_PREFIX,
    BaselineRun,
    BatchTiming,
    Tuning,
    TuningPoint,
    dump,
)

QUERIES = ("aggregate", "pandas-state", "transform-with-state")
PROVIDERS = ("rocksdb", "hdfs")
SINKS = ("noop", "files")
TRIGGER_SECONDS = 1.0
"""The ``interval`` search's trigger: our checkpoint interval."""
DRIVER_MEMORY = "4g"
"""The driver's heap, where ``local[P]`` runs the executors too: the 4 GiB the realistic
baseline has, so the largest batches a throughput search tries are not squeezed."""
FIRST_SIZE_WARMUP_BATCHES = 8
"""Warm-up batches of the search's first size: they also warm the JVM. With 2, the
first size's batches ran 50 % slower than in a warm run, and the search, taking that
for an overrun of the trigger, settled on a size a quarter of what a warm JVM fits."""


class TimedOut(Exception):
    """The query did not complete its batches before the deadline."""


def _session(*, parallelism: int, provider: str) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (SparkSession.builder.appName("bench-structured-streaming")
               .master(f"local[{parallelism}]")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", DRIVER_MEMORY)
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", str(parallelism)))
    if provider == "rocksdb":
        builder = (builder
                   .config("spark.sql.streaming.stateStore.providerClass",
                           "org.apache.spark.sql.execution.streaming.state."
                           "RocksDBStateStoreProvider")
                   .config("spark.sql.streaming.stateStore.rocksdb."
                           "changelogCheckpointing.enabled", "true"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _count_sum_in_pandas(key: Any, frames: Iterator[Any], state: Any) -> Iterator[Any]:
    """applyInPandasWithState: add the key's rows of this batch to its count and sum."""
    n, total = state.get if state.exists else (0, 0)
    for frame in frames:
        n += len(frame)
        total += int(frame["value"].sum())
    state.update((n, total))
    return iter(())


def _count_sum_processor() -> Any:
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor
    from pyspark.sql.types import LongType, StructField, StructType

    class CountSum(StatefulProcessor):
        """transformWithStateInPandas: the same count and sum in a ValueState."""

        def init(self, handle: Any) -> None:
            schema = StructType([StructField("n", LongType()), StructField("total", LongType())])
            self.acc = handle.getValueState("acc", schema)

        def handleInputRows(self, key: Any, rows: Iterator[Any],
                            timerValues: Any) -> Iterator[Any]:
            n, total = self.acc.get() if self.acc.exists() else (0, 0)
            for frame in rows:
                n += len(frame)
                total += int(frame["value"].sum())
            self.acc.update((n, total))
            return iter(())

        def close(self) -> None:
            pass

    return CountSum()


class _BatchFiles:
    """foreachBatch target: each micro-batch to its own directory, rewritten on replay."""

    def __init__(self, output: str) -> None:
        self.output = output

    def __call__(self, frame: Any, batch_id: int) -> None:
        frame.write.mode("overwrite").parquet(os.path.join(self.output, f"batch={batch_id}"))


def _trigger_seconds(search: str) -> float:
    """Back to back for the throughput search, our interval for the interval search."""
    return 0.0 if search == "throughput" else TRIGGER_SECONDS


def _start(spark: Any, *, query: str, keys: int, rows_per_batch: int, parallelism: int,
           sink: str, work: str, trigger_seconds: float) -> Any:
    from pyspark.sql import functions as F

    checkpoint = tempfile.mkdtemp(prefix="checkpoint-", dir=work)
    stream = (spark.readStream.format("rate-micro-batch")
              .option("rowsPerBatch", rows_per_batch)
              .option("numPartitions", parallelism)
              .load())
    keyed = stream.select((F.col("value") % keys).alias("key"), F.col("value"))
    if query == "aggregate":
        out = keyed.groupBy("key").agg(F.count(F.lit(1)).alias("n"),
                                        F.sum("value").alias("total"))
    elif query == "pandas-state":
        out = keyed.groupBy("key").applyInPandasWithState(
            _count_sum_in_pandas, outputStructType="key long, n long, total long",
            stateStructType="n long, total long", outputMode="update",
            timeoutConf="NoTimeout")
    else:
        out = keyed.groupBy("key").transformWithStateInPandas(
            statefulProcessor=_count_sum_processor(),
            outputStructType="key long, n long, total long", outputMode="Update",
            timeMode="None")
    writer = (out.writeStream.outputMode("update")
              .trigger(processingTime=f"{trigger_seconds:g} seconds")
              .option("checkpointLocation", checkpoint))
    if sink == "noop":
        writer = writer.format("noop")
    else:
        writer = writer.foreachBatch(_BatchFiles(tempfile.mkdtemp(prefix="out-", dir=work)))
    return writer.start()


def _timing(progress: dict[str, Any]) -> BatchTiming:
    duration = float(progress["durationMs"]["triggerExecution"])
    started = datetime.datetime.fromisoformat(str(progress["timestamp"]).replace("Z", "+00:00"))
    return BatchTiming(rows=int(progress["numInputRows"]), duration_ms=duration,
                       ended_at=started.timestamp() + duration / 1000.0)


def _batches(query: Any, *, wanted: int, deadline: float) -> list[dict[str, Any]]:
    """Wait for ``wanted`` micro-batches with input; the progress of each."""
    while True:
        done = [p for p in query.recentProgress if p.get("numInputRows", 0) > 0]
        if len(done) >= wanted:
            return done[:wanted]
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        if time.monotonic() > deadline:
            raise TimedOut(f"{len(done)} of {wanted} micro-batches completed")
        time.sleep(0.2)


def measure(*, spark: Any, query: str, records: int, keys: int, rows_per_batch: int,
            warmup_batches: int, parallelism: int, sink: str, work: str, spark_ready_at: float,
            deadline: float, trigger_seconds: float) -> BaselineRun:
    """Warm-up batches, then as many batches as carry ``records`` rows."""
    batches = -(-records // rows_per_batch)
    running = _start(spark, query=query, keys=keys, rows_per_batch=rows_per_batch,
                     parallelism=parallelism, sink=sink, work=work,
                     trigger_seconds=trigger_seconds)
    try:
        progress = _batches(running, wanted=warmup_batches + batches, deadline=deadline)
        state_rows = [int(p["stateOperators"][0]["numRowsTotal"]) for p in progress
                      if p.get("stateOperators")]
    finally:
        running.stop()
    timings = [_timing(p) for p in progress]
    return BaselineRun(rows_per_batch=rows_per_batch, warmup=tuple(timings[:warmup_batches]),
                       measured=tuple(timings[warmup_batches:]), spark_ready_at=spark_ready_at,
                       state_rows=state_rows[-1] if state_rows else None)


def search_of(search: str, *, start: int, limit: int) -> SizeSearch:
    """``throughput``: the fastest size, up to ``limit`` (a quarter of the run's records,
    so the chosen size still gives the measured run several batches); ``interval``: the
    fastest that fits the 1 s trigger."""
    if search == "throughput":
        return ThroughputSearch(start=min(start, limit), limit=limit)
    return BatchSizeSearch(start=start, limit=limit, budget_ms=TRIGGER_SECONDS * 1000.0)


def tune(*, spark: Any, query: str, keys: int, start: int, limit: int, parallelism: int,
         sink: str, work: str, deadline: float, search_kind: str = "interval") -> Tuning:
    """The batch size a user tuning this query would pick: for throughput, or holding it
    to a checkpoint per trigger interval (:mod:`bench.batch_size_search`).

    The search runs twice in the same JVM and the second pass decides: in the first,
    the per-batch costs of the early, small sizes ran up to twice as long as the same
    sizes measured later (JIT compilation, RocksDB and the file system warming), which
    read as overruns. At each size, one warm-up batch
    (:data:`FIRST_SIZE_WARMUP_BATCHES` for the first size of the first pass) and three
    measured batches.
    """
    search = search_of(search_kind, start=start, limit=limit)
    trigger_seconds = _trigger_seconds(search_kind)
    points: list[TuningPoint] = []
    for pass_ in ("warm-up", "measured"):
        points = []
        while (size := search.next_size(points)) is not None:
            warmup = FIRST_SIZE_WARMUP_BATCHES if pass_ == "warm-up" and not points else 1
            run = measure(spark=spark, query=query, records=3 * size, keys=keys,
                          rows_per_batch=size, warmup_batches=warmup,
                          parallelism=parallelism, sink=sink, work=work, spark_ready_at=0.0,
                          deadline=deadline, trigger_seconds=trigger_seconds)
            batch_ms = statistics.median(b.duration_ms for b in run.measured)
            point = TuningPoint(rows_per_batch=size, batch_ms_median=batch_ms,
                                records_per_second=run.measured_records / run.measured_seconds)
            points.append(point)
            print(f"[tune] {pass_} pass, rowsPerBatch {size:,}: batch {batch_ms:,.0f} ms, "
                  f"{point.records_per_second:,.0f} records/s"
                  f"{search.note(point)}",
                  file=sys.stderr, flush=True)
    return Tuning(points=tuple(points), chosen=search.chosen(points))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--query", choices=QUERIES, default="aggregate")
    parser.add_argument("--provider", choices=PROVIDERS, default="rocksdb")
    parser.add_argument("--sink", choices=SINKS, default="noop")
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--keys", type=int, required=True)
    parser.add_argument("--rows-per-batch", type=int, required=True,
                        help="the batch size of the run, or the first size tried by --tune")
    parser.add_argument("--tune", action="store_true")
    parser.add_argument("--search", choices=SEARCHES, default="interval",
                        help="throughput: batches back to back, the size searched to its "
                             "rate's plateau; interval: a 1 s trigger and the largest batch "
                             "that fits it")
    parser.add_argument("--warmup-batches", type=int, default=2)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900.0)
    ns = parser.parse_args()
    deadline = time.monotonic() + ns.timeout
    work = tempfile.mkdtemp(prefix="ss-", dir=os.environ.get("BENCH_WORK"))
    spark = _session(parallelism=ns.parallelism, provider=ns.provider)
    spark_ready_at = time.time()
    try:
        if ns.tune:
            limit = (max(1, ns.records // 4) if ns.search == "throughput"
                     else max(ns.rows_per_batch, ns.records))
            tuning = tune(spark=spark, query=ns.query, keys=ns.keys, start=ns.rows_per_batch,
                          limit=limit, parallelism=ns.parallelism, sink=ns.sink, work=work,
                          deadline=deadline, search_kind=ns.search)
            print(dump(TUNED_PREFIX, tuning), flush=True)
        else:
            run = measure(spark=spark, query=ns.query, records=ns.records, keys=ns.keys,
                          rows_per_batch=ns.rows_per_batch, warmup_batches=ns.warmup_batches,
                          parallelism=ns.parallelism, sink=ns.sink, work=work,
                          spark_ready_at=spark_ready_at, deadline=deadline,
                          trigger_seconds=_trigger_seconds(ns.search))
            print(dump(RESULT_PREFIX, run), flush=True)
    except TimedOut as exc:
        print(f"timed out after {ns.timeout:.0f} s: {exc}", file=sys.stderr, flush=True)
        return 3
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
