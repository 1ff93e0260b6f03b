"""The windows benchmark's Structured Streaming side, one process (its own JVM) per step.

The query, as its best users would write and tune it:

* ``spark.readStream.format("parquet")`` with the input's schema on the folder of
  Parquet files (hard links to the files ours reads, plus one end-of-input record:
  :func:`bench.windows_data.write_end_marker`), ``maxFilesPerTrigger`` as the batch
  size;
* ``ts`` (epoch ms) as a timestamp (``timestamp_millis``), ``withWatermark`` on it
  with the same delay as ours, ``groupBy(window(ts, "1 minute"), "user")
  .agg(count(*) as n, sum(amount) as total)``, output mode ``append`` (each window's
  row once, when the watermark passes its end);
* the built-in Parquet file sink (exactly-once: a batch's files are committed by its
  entry in ``_spark_metadata``), ``fired_at`` = ``current_timestamp()`` (the batch's
  timestamp, taken when the batch is planned with the watermark its predecessor moved);
* the RocksDB state store with changelog checkpointing, ``spark.sql.shuffle.partitions``
  equal to the parallelism, ``local[<parallelism>]``, checkpoint on local disk.

``tune``: a batch-size search over ``maxFilesPerTrigger`` (``--search``: the
``throughput`` benchmark's, :class:`bench.batch_size_search.BatchSizeSearch`, by
default, or :class:`bench.batch_size_search.ThroughputSearch`; two passes in one JVM,
the second decides); prints ``TUNED <json>``.
``run``: a warm-up query (eight batches, its own checkpoint and output), then the
measured query over the whole input until the end record's watermark has emitted the
last windows; prints ``RESULT <json>`` with every batch.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from typing import Any

from bench.batch_size_search import BatchSizeSearch, SizeSearch, ThroughputSearch
from bench.ss_results import TUNED_PREFIX, Tuning, TuningPoint
from bench.ss_results import dump as dump_tuning

RESULT_PREFIX = "RESULT "
VERSION = 1
TRIGGER_SECONDS = 1.0
"""The interval a tuned batch must fit: ours checkpoints every second."""
FIRST_SIZE_WARMUP_BATCHES = 8
"""As in :mod:`bench.spark_ss`: the first size of the first pass also warms the JVM."""
MEASURED_BATCHES = 3


@dataclasses.dataclass(frozen=True, kw_only=True)
class Batch:
    batch_id: int
    rows: int
    started_at: float
    duration_ms: float
    watermark_ms: int | None
    dropped_late: int = 0
    """Rows the state operator dropped as older than the watermark."""
    state_rows: int | None = None
    phases: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def ended_at(self) -> float:
        return self.started_at + self.duration_ms / 1000.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class QueryRun:
    """The measured query: every batch, data and no-data, in order."""

    max_files: int
    file_records: int
    batches: tuple[Batch, ...]
    spark_ready_at: float
    launched_at: float

    @property
    def records(self) -> int:
        return sum(b.rows for b in self.batches)


def dump(run: QueryRun) -> str:
    return RESULT_PREFIX + json.dumps({"version": VERSION, **dataclasses.asdict(run)})


def parse(line: str) -> QueryRun:
    data = json.loads(line[len(RESULT_PREFIX):])
    if data.get("version") != VERSION:
        raise ValueError(f"result version {data.get('version')!r}, expected {VERSION}")
    return QueryRun(
        max_files=int(data["max_files"]), file_records=int(data["file_records"]),
        spark_ready_at=float(data["spark_ready_at"]), launched_at=float(data["launched_at"]),
        batches=tuple(Batch(batch_id=int(b["batch_id"]), rows=int(b["rows"]),
                            started_at=float(b["started_at"]),
                            duration_ms=float(b["duration_ms"]),
                            watermark_ms=None if b["watermark_ms"] is None
                            else int(b["watermark_ms"]),
                            dropped_late=int(b.get("dropped_late", 0)),
                            state_rows=None if b.get("state_rows") is None
                            else int(b["state_rows"]),
                            phases={str(k): float(v) for k, v in b.get("phases", {}).items()})
                      for b in data["batches"]))


def files_for(rows: int, file_records: int) -> int:
    """``maxFilesPerTrigger`` for a batch of about ``rows`` records."""
    return max(1, round(rows / file_records))


# ---------------------------------------------------------------------- Spark


def session(*, parallelism: int, app: str = "bench-windows-structured-streaming",
            conf: Mapping[str, str] | None = None, rocksdb: bool = True) -> Any:
    """A ``local[parallelism]`` session with the RocksDB state store and changelog
    checkpointing (``rocksdb``; else Spark's default, HDFS-backed store, which keeps
    the state in memory), one shuffle partition per core, and ``conf`` (default: times
    in UTC) on top."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (SparkSession.builder.appName(app)
               .master(f"local[{parallelism}]")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", "2g")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", str(parallelism))
               .config("spark.sql.streaming.numRecentProgressUpdates", "100000"))
    if rocksdb:
        builder = (builder
                   .config("spark.sql.streaming.stateStore.providerClass",
                           "org.apache.spark.sql.execution.streaming.state."
                           "RocksDBStateStoreProvider")
                   .config("spark.sql.streaming.stateStore.rocksdb."
                           "changelogCheckpointing.enabled", "true"))
    for key, value in ({"spark.sql.session.timeZone": "UTC"} if conf is None
                       else conf).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def watermarked_events(spark: Any, *, source: str, max_files: int,
                       delay_seconds: float) -> Any:
    """The input stream of ``user, amount, ts, event_time`` with its watermark on
    ``event_time`` (the aggregation prunes what it does not read)."""
    from pyspark.sql import functions as F

    events = (spark.readStream.schema("user STRING, amount LONG, ts LONG")
              .format("parquet")
              .option("maxFilesPerTrigger", str(max_files))
              .load(source))
    return (events.select("user", "amount", "ts", F.timestamp_millis("ts").alias("event_time"))
            .withWatermark("event_time", f"{delay_seconds:g} seconds"))


def start(spark: Any, *, source: str, output: str, checkpoint: str, max_files: int,
          delay_seconds: float) -> Any:
    from pyspark.sql import functions as F

    events = watermarked_events(spark, source=source, max_files=max_files,
                                delay_seconds=delay_seconds)
    counts = (events.groupBy(F.window("event_time", "1 minute"), "user")
              .agg(F.count(F.lit(1)).alias("n"), F.sum("amount").alias("total")))
    rows = counts.select("user", F.unix_millis(F.col("window.start")).alias("window_start"),
                         F.unix_millis(F.col("window.end")).alias("window_end"), "n", "total",
                         F.unix_millis(F.current_timestamp()).alias("fired_at"))
    return (rows.writeStream.format("parquet")
            .option("path", output)
            .option("checkpointLocation", checkpoint)
            .outputMode("append")
            .start())


def _millis(text: Any) -> int | None:
    if not text:
        return None
    moment = datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    return round(moment.timestamp() * 1000)


def batch_of(progress: dict[str, Any]) -> Batch:
    durations = progress["durationMs"]
    operators = progress.get("stateOperators") or [{}]
    return Batch(batch_id=int(progress["batchId"]), rows=int(progress["numInputRows"]),
                 started_at=_millis(progress["timestamp"]) / 1000.0,  # type: ignore[operator]
                 duration_ms=float(durations["triggerExecution"]),
                 watermark_ms=_millis((progress.get("eventTime") or {}).get("watermark")),
                 dropped_late=int(operators[0].get("numRowsDroppedByWatermark", 0) or 0),
                 state_rows=operators[0].get("numRowsTotal"),
                 phases={str(k): float(v) for k, v in durations.items()
                         if k != "triggerExecution"})


def _progress(query: Any) -> list[Batch]:
    return [batch_of(p) for p in query.recentProgress]


def _check(query: Any, deadline: float, what: str) -> None:
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    if time.monotonic() > deadline:
        raise TimeoutError(f"{what} before the deadline")


def data_batches(query: Any, *, wanted: int, deadline: float) -> list[Batch]:
    """Wait until the query ran ``wanted`` batches with input; those batches."""
    while True:
        done = [b for b in _progress(query) if b.rows > 0]
        if len(done) >= wanted:
            return done[:wanted]
        _check(query, deadline, f"{len(done)} of {wanted} micro-batches")
        time.sleep(0.1)


def until_flushed(query: Any, *, records: int, deadline: float) -> list[Batch]:
    """Wait until the query read ``records`` rows (the input and the end record) and ran
    a batch after the one holding the end record: the batch whose watermark, moved by
    that record, emits the input's last windows. Every batch, in order."""
    while True:
        batches = _progress(query)
        read = 0
        last_data = None
        for batch in batches:
            read += batch.rows
            if read >= records and last_data is None:
                last_data = batch.batch_id
        if last_data is not None and any(b.batch_id > last_data for b in batches):
            return batches
        _check(query, deadline, f"{read:,} of {records:,} rows read")
        time.sleep(0.1)


QueryStart = Callable[..., Any]
"""Starts a step's query: ``start_query(output=..., checkpoint=..., max_files=...)``."""


def measure_size(*, start_query: QueryStart, ns: argparse.Namespace, work: str,
                 max_files: int, warmup: int, deadline: float) -> TuningPoint:
    checkpoint = tempfile.mkdtemp(prefix="checkpoint-", dir=work)
    output = tempfile.mkdtemp(prefix="out-", dir=work)
    query = start_query(output=output, checkpoint=checkpoint, max_files=max_files)
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


SEARCHES = ("throughput", "interval")
"""``--search``: Structured Streaming's fastest size, or the fastest whose batches fit 1 s."""


def size_search(ns: argparse.Namespace) -> SizeSearch:
    """The search ``ns.search`` names over whole files. Both stop at a quarter of the
    input, which leaves a size its warm-up and measured batches in the input."""
    files = -(-ns.records // ns.file_records)
    limit = max(1, files // (1 + MEASURED_BATCHES)) * ns.file_records
    if ns.search == "throughput":
        return ThroughputSearch(start=min(ns.start, limit), limit=limit, step=ns.file_records)
    return BatchSizeSearch(start=min(ns.start, limit), limit=limit,
                           budget_ms=TRIGGER_SECONDS * 1000.0, floor=ns.file_records)


def tune(*, start_query: QueryStart, ns: argparse.Namespace, work: str,
         label: str = "") -> Tuning:
    """:func:`bench.spark_ss.tune` over ``maxFilesPerTrigger`` with the search ``--search``
    names (:func:`size_search`): its fastest size, or the fastest whose batches fit the 1 s
    a checkpoint of ours takes at most to come. A size is rounded to whole files. For the
    interval, the smallest size is one file: when even its batches overrun 1 s, the
    search takes the fastest size whose batches are within the noise band of the
    shortest measured (:meth:`BatchSizeSearch.budget`)."""
    deadline = time.monotonic() + ns.timeout
    files = -(-ns.records // ns.file_records)
    search = size_search(ns)
    points: list[TuningPoint] = []
    for pass_ in ("warm-up", "measured"):
        points = []
        while (size := search.next_size(points)) is not None:
            max_files = files_for(size, ns.file_records)
            if max_files * ns.file_records in {p.rows_per_batch for p in points}:
                break  # whole files: the size the search asks for was measured already
            wanted = FIRST_SIZE_WARMUP_BATCHES if pass_ == "warm-up" and not points else 1
            warmup = max(1, min(wanted, files // max_files - MEASURED_BATCHES))
            point = measure_size(start_query=start_query, ns=ns, work=work,
                                 max_files=max_files, warmup=warmup, deadline=deadline)
            points.append(point)
            print(f"[tune] {label}{ns.search} search, {pass_} pass, maxFilesPerTrigger "
                  f"{max_files} ({point.rows_per_batch:,} records): batch "
                  f"{point.batch_ms_median:,.0f} ms, {point.records_per_second:,.0f} "
                  f"records/s{search.note(point)}", file=sys.stderr, flush=True)
    return Tuning(points=tuple(points), chosen=search.chosen(points))


def warm_up(*, start_query: QueryStart, ns: argparse.Namespace, work: str,
            deadline: float) -> None:
    """The JVM warmed as in the tuning process (code generation, the reader, RocksDB's
    native library): up to eight batches at the measured size, into a folder nobody
    reads. With three, the measured windows query's batches still shrank from 2.6 s to
    0.9 s over its first twenty at 100,000 records."""
    query = start_query(output=tempfile.mkdtemp(prefix="warmup-", dir=work),
                        checkpoint=tempfile.mkdtemp(prefix="checkpoint-", dir=work),
                        max_files=ns.max_files)
    files = -(-ns.records // ns.file_records)
    try:
        data_batches(query, wanted=max(1, min(FIRST_SIZE_WARMUP_BATCHES,
                                              files // ns.max_files)), deadline=deadline)
    finally:
        query.stop()


def run(*, start_query: QueryStart, ns: argparse.Namespace, work: str,
        spark_ready_at: float, reads: int = 1) -> QueryRun:
    """The measured query to its end; ``reads``: how many readers of the folder the
    query has (each reads every record and the end record)."""
    deadline = time.monotonic() + ns.timeout
    warm_up(start_query=start_query, ns=ns, work=work, deadline=deadline)
    query = start_query(output=ns.output, checkpoint=ns.checkpoint, max_files=ns.max_files)
    try:
        batches = until_flushed(query, records=reads * (ns.records + 1), deadline=deadline)
    finally:
        query.stop()
    return QueryRun(max_files=ns.max_files, file_records=ns.file_records,
                    batches=tuple(batches), spark_ready_at=spark_ready_at,
                    launched_at=ns.launched_at)


def process_arguments(*, description: str | None, input_help: str, records_help: str,
                      output_help: str, timeout: float) -> argparse.ArgumentParser:
    """The command line every Structured Streaming side of a files benchmark takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("mode", choices=("tune", "run"))
    parser.add_argument("--input", required=True, help=input_help)
    parser.add_argument("--records", type=int, required=True, help=records_help)
    parser.add_argument("--file-records", type=int, required=True)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--work", required=True)
    parser.add_argument("--timeout", type=float, default=timeout)
    parser.add_argument("--start", type=int, default=500_000,
                        help="tune: the first batch size tried, in records")
    parser.add_argument("--search", choices=SEARCHES, default="interval",
                        help="tune: Structured Streaming's fastest batch size (throughput), "
                             "or the fastest whose batches fit 1 s (interval)")
    parser.add_argument("--max-files", type=int, default=0, help="run: maxFilesPerTrigger")
    parser.add_argument("--output", default="", help=output_help)
    parser.add_argument("--checkpoint", default="", help="run: the checkpoint folder")
    parser.add_argument("--launched-at", type=float, default=0.0,
                        help="run: when the benchmark launched this process (epoch s)")
    return parser


def serve(ns: argparse.Namespace, *, spark: Any,
          tune_step: Callable[[str], Tuning],
          run_step: Callable[[str, float], QueryRun]) -> int:
    """One step (``ns.mode``) in this process, its line printed; the session stopped
    and the scratch folder removed whatever happens."""
    spark_ready_at = time.time()
    work = tempfile.mkdtemp(prefix="ss-", dir=ns.work)
    try:
        if ns.mode == "tune":
            print(dump_tuning(TUNED_PREFIX, tune_step(work)), flush=True)
        else:
            print(dump(run_step(work, spark_ready_at)), flush=True)
    except (TimeoutError, RuntimeError) as exc:
        print(f"structured streaming: {exc}", file=sys.stderr, flush=True)
        return 3
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


def main(start: Callable[..., Any] = start, *, reads: int = 1, rocksdb: bool = True) -> int:
    """The windows query's steps; ``start`` another query of the same signature (the
    timers benchmark's; the joins benchmark's, whose two readers make ``reads`` 2 and
    whose state is Spark's default store's: ``rocksdb`` false)."""
    parser = process_arguments(
        description=__doc__.splitlines()[0] if __doc__ else None,
        input_help="the folder of Parquet files",
        records_help="records of the input (the end record not counted)",
        output_help="run: the file sink's folder", timeout=900.0)
    parser.add_argument("--delay-seconds", type=float, required=True)
    ns = parser.parse_args()
    spark = session(parallelism=ns.parallelism, rocksdb=rocksdb)
    start_query = functools.partial(start, spark, source=ns.input,
                                    delay_seconds=ns.delay_seconds)
    return serve(ns, spark=spark,
                 tune_step=lambda work: tune(start_query=start_query, ns=ns, work=work),
                 run_step=lambda work, ready: run(start_query=start_query, ns=ns, work=work,
                                                  spark_ready_at=ready, reads=reads))


if __name__ == "__main__":
    sys.exit(main())
