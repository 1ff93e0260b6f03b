"""The kafka benchmark's Structured Streaming side, one process (its own JVM) per phase.

The query, as its best users would write and tune it:

* ``spark.readStream.format("kafka")`` on the input topic from its earliest offset,
  ``maxOffsetsPerTrigger`` given (the throughput phase tries several);
* the JSON value parsed with ``from_json`` (the engine's own parser, no Python);
* ``groupBy("user").agg(count(*) as n, max(ts) as last_ts)``, output mode ``update``;
* ``writeStream.format("kafka")`` keyed by the user, the value the JSON of
  ``{"user", "n", "last_ts"}``. Spark's Kafka sink is **at-least-once**: a batch
  replayed after a failure writes its records again;
* the RocksDB state store with changelog checkpointing, ``spark.sql.shuffle.partitions``
  equal to the parallelism, ``local[<parallelism>]``, the checkpoint on local disk.

``throughput``: one warm-up query (its first batches only), then one query per
``maxOffsetsPerTrigger`` value over the whole topic, as fast as possible (the default
trigger: the next batch starts when the last one ends), each with a fresh checkpoint
and output topic; prints ``RESULT <json>`` with every batch of every query.
``latency``: a warm-up query (three batches of the pre-produced topic), then one
query with a 1 s processing-time trigger on the latency topic, until the stop file
appears; the ready file is written once that query's first batch has run.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import itertools
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.batch_size_search import ThroughputSearch
from bench.ss_results import TuningPoint

RESULT_PREFIX = "RESULT "
VERSION = 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class Batch:
    rows: int
    started_at: float
    duration_ms: float
    phases: dict[str, float] = dataclasses.field(default_factory=dict)
    """The batch's ``durationMs`` by phase (``addBatch``, ``walCommit``, ...)."""

    @property
    def ended_at(self) -> float:
        return self.started_at + self.duration_ms / 1000.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class QueryRun:
    """One query over the whole topic at one ``maxOffsetsPerTrigger``."""

    max_offsets: int
    output_topic: str
    batches: tuple[Batch, ...]

    @property
    def records(self) -> int:
        return sum(b.rows for b in self.batches)

    def steady(self, *, warmup: int) -> tuple[int, float]:
        """Records and seconds of the batches after ``warmup`` (each batch's own
        ``triggerExecution``; the time between batches not counted)."""
        kept = self.batches[warmup:]
        return sum(b.rows for b in kept), sum(b.duration_ms for b in kept) / 1000.0

    def steady_rate(self, *, warmup: int) -> float:
        records, seconds = self.steady(warmup=warmup)
        return records / seconds if seconds > 0 else float("nan")

    def whole_seconds(self) -> float:
        """From the first batch's start to the last batch's end (warm-up included)."""
        return self.batches[-1].ended_at - self.batches[0].started_at

    def whole_rate(self) -> float:
        return self.records / self.whole_seconds()

    def median_batch_ms(self, *, warmup: int) -> float:
        kept = sorted(b.duration_ms for b in self.batches[warmup:]) or [float("nan")]
        return kept[len(kept) // 2]


def dump(runs: list[QueryRun]) -> str:
    return RESULT_PREFIX + json.dumps({"version": VERSION,
                                       "runs": [dataclasses.asdict(r) for r in runs]})


def parse(line: str) -> list[QueryRun]:
    data = json.loads(line[len(RESULT_PREFIX):])
    if data.get("version") != VERSION:
        raise ValueError(f"result version {data.get('version')!r}, expected {VERSION}")
    return [QueryRun(max_offsets=int(r["max_offsets"]), output_topic=str(r["output_topic"]),
                     batches=tuple(Batch(rows=int(b["rows"]), started_at=float(b["started_at"]),
                                         duration_ms=float(b["duration_ms"]),
                                         phases={str(k): float(v)
                                                 for k, v in b.get("phases", {}).items()})
                                   for b in r["batches"]))
            for r in data["runs"]]


def session(*, parallelism: int, jars: str) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.appName("bench-kafka-structured-streaming")
             .master(f"local[{parallelism}]")
             .config("spark.jars", jars)
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "2g")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.sql.shuffle.partitions", str(parallelism))
             .config("spark.sql.streaming.stateStore.providerClass",
                     "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
             .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
                     "true")
             .config("spark.sql.streaming.numRecentProgressUpdates", "10000")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def start(spark: Any, *, bootstrap: str, input_topic: str, output_topic: str,
          max_offsets: int | None, checkpoint: str, trigger_seconds: float | None) -> Any:
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType([StructField("user", StringType()), StructField("page", StringType()),
                         StructField("ts", LongType())])
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", input_topic)
              .option("startingOffsets", "earliest")
              .option("failOnDataLoss", "true"))
    if max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    clicks = (reader.load()
              .select(F.from_json(F.col("value").cast("string"), schema).alias("click"))
              .select("click.user", "click.ts"))
    counts = clicks.groupBy("user").agg(F.count(F.lit(1)).alias("n"),
                                        F.max("ts").alias("last_ts"))
    writer = (counts.select(F.col("user").alias("key"),
                            F.to_json(F.struct("user", "n", "last_ts")).alias("value"))
              .writeStream.format("kafka")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("topic", output_topic)
              .option("checkpointLocation", checkpoint)
              .outputMode("update"))
    if trigger_seconds:
        writer = writer.trigger(processingTime=f"{trigger_seconds:g} seconds")
    return writer.start()


def _batch(progress: dict[str, Any]) -> Batch:
    started = datetime.datetime.fromisoformat(str(progress["timestamp"]).replace("Z", "+00:00"))
    durations = progress["durationMs"]
    return Batch(rows=int(progress["numInputRows"]), started_at=started.timestamp(),
                 duration_ms=float(durations["triggerExecution"]),
                 phases={str(k): float(v) for k, v in durations.items()
                         if k != "triggerExecution"})


def _with_rows(query: Any) -> list[Batch]:
    return [_batch(p) for p in query.recentProgress if p.get("numInputRows", 0) > 0]


def run_until(query: Any, *, records: int | None, batches: int | None,
              deadline: float) -> list[Batch]:
    """Wait until the query's batches hold ``records`` rows (or ``batches`` batches)."""
    while True:
        done = _with_rows(query)
        if (records is not None and sum(b.rows for b in done) >= records) or \
                (batches is not None and len(done) >= batches):
            return done
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        if time.monotonic() > deadline:
            raise TimeoutError(f"{sum(b.rows for b in done)} records in {len(done)} "
                               f"micro-batches before the deadline")
        time.sleep(0.1)


def throughput(ns: argparse.Namespace, spark: Any, work: str) -> list[QueryRun]:
    from e2e.kafka.clients import create_topic

    deadline = time.monotonic() + ns.timeout
    runs: list[QueryRun] = []
    sizes = batch_sizes(ns, runs)
    first = next(sizes)
    # A warm-up query (JIT, the connector's consumers, RocksDB's native library): its
    # first three batches at the first size, then it is stopped and forgotten.
    for index, max_offsets in enumerate(itertools.chain((first, first), sizes)):
        warmup = index == 0
        output = create_topic(bootstrap=ns.bootstrap, partitions=ns.partitions,
                              name=f"{ns.output_prefix}-{'warmup' if warmup else index}")
        query = start(spark, bootstrap=ns.bootstrap, input_topic=ns.input, output_topic=output,
                      max_offsets=max_offsets,
                      checkpoint=tempfile.mkdtemp(prefix="checkpoint-", dir=work),
                      trigger_seconds=None)
        try:
            batches = run_until(query, records=None if warmup else ns.records,
                                batches=3 if warmup else None, deadline=deadline)
        finally:
            query.stop()
        if warmup:
            continue
        run = QueryRun(max_offsets=max_offsets, output_topic=output, batches=tuple(batches))
        runs.append(run)
        print(f"[ss] maxOffsetsPerTrigger {max_offsets:,}: {len(batches)} batches, "
              f"{run.steady_rate(warmup=ns.warmup_batches):,.0f} records/s after "
              f"{ns.warmup_batches} warm-up batches, {run.whole_rate():,.0f} over the whole "
              f"topic", file=sys.stderr, flush=True)
    return runs


def batch_sizes(ns: argparse.Namespace, runs: list[QueryRun]) -> Iterator[int]:
    """The ``maxOffsetsPerTrigger`` values to run, one query each over the whole topic:
    the ``--max-offsets`` list as given, or, with ``--search-limit``, the sizes
    :class:`bench.batch_size_search.ThroughputSearch` asks for from the list's first,
    each decided by the runs so far (``runs`` grows as they are measured)."""
    candidates = [int(v) for v in ns.max_offsets.split(",")]
    if not ns.search_limit:
        yield from candidates
        return
    search = ThroughputSearch(start=candidates[0], limit=ns.search_limit, step=1000)
    while (size := search.next_size([_point(run, ns) for run in runs])) is not None:
        yield size


def _point(run: QueryRun, ns: argparse.Namespace) -> TuningPoint:
    return TuningPoint(rows_per_batch=run.max_offsets,
                       batch_ms_median=run.median_batch_ms(warmup=ns.warmup_batches),
                       records_per_second=run.steady_rate(warmup=ns.warmup_batches))


def latency(ns: argparse.Namespace, spark: Any, work: str) -> list[QueryRun]:
    from e2e.kafka.clients import create_topic

    max_offsets = int(ns.max_offsets.split(",")[0])
    if ns.warmup_topic:
        # The JVM warmed as in the throughput phase (code generation, the connector,
        # RocksDB's native library): three batches of the pre-produced topic, into a
        # topic nobody watches. Otherwise the measured query's first batches pay it.
        query = start(spark, bootstrap=ns.bootstrap, input_topic=ns.warmup_topic,
                      output_topic=create_topic(bootstrap=ns.bootstrap,
                                                partitions=ns.partitions,
                                                name=f"{ns.output}-warmup"),
                      max_offsets=max_offsets,
                      checkpoint=tempfile.mkdtemp(prefix="checkpoint-", dir=work),
                      trigger_seconds=None)
        try:
            run_until(query, records=None, batches=3,
                      deadline=time.monotonic() + ns.timeout)
        finally:
            query.stop()
    query = start(spark, bootstrap=ns.bootstrap, input_topic=ns.input, output_topic=ns.output,
                  max_offsets=max_offsets,
                  checkpoint=tempfile.mkdtemp(prefix="checkpoint-", dir=work),
                  trigger_seconds=ns.trigger_seconds)
    try:
        deadline = time.monotonic() + ns.timeout
        while not query.recentProgress:
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
            if time.monotonic() > deadline:
                raise TimeoutError("the query made no progress before the deadline")
            time.sleep(0.1)
        Path(ns.ready_file).write_text("ready\n")
        while not Path(ns.stop_file).exists():
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
            if time.monotonic() > deadline:
                raise TimeoutError("no stop file before the deadline")
            time.sleep(0.1)
        batches = _with_rows(query)
    finally:
        query.stop()
    return [QueryRun(max_offsets=max_offsets, output_topic=ns.output,
                     batches=tuple(batches))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("mode", choices=("throughput", "latency"))
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", default="", help="latency: the output topic")
    parser.add_argument("--output-prefix", default="ss-counts",
                        help="throughput: output topics <prefix>-<n> are created per query")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--records", type=int, default=0)
    parser.add_argument("--max-offsets", required=True,
                        help="maxOffsetsPerTrigger values, comma-separated (latency: one; "
                             "with --search-limit, the search's first size)")
    parser.add_argument("--search-limit", type=int, default=0,
                        help="throughput: search maxOffsetsPerTrigger for Structured "
                             "Streaming's fastest, doubling from --max-offsets up to this")
    parser.add_argument("--warmup-batches", type=int, default=2)
    parser.add_argument("--trigger-seconds", type=float, default=1.0)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--jars", required=True, help="spark.jars: the Kafka connector")
    parser.add_argument("--work", required=True)
    parser.add_argument("--warmup-topic", default="",
                        help="latency: a pre-produced topic to warm the JVM on first")
    parser.add_argument("--ready-file", default="")
    parser.add_argument("--stop-file", default="")
    parser.add_argument("--timeout", type=float, default=900.0)
    ns = parser.parse_args()
    spark = session(parallelism=ns.parallelism, jars=ns.jars)
    try:
        runs = throughput(ns, spark, ns.work) if ns.mode == "throughput" else \
            latency(ns, spark, ns.work)
    except (TimeoutError, RuntimeError) as exc:
        print(f"structured streaming: {exc}", file=sys.stderr, flush=True)
        return 3
    finally:
        spark.stop()
    print(dump(runs), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
