"""The Spark Structured Streaming baseline of the throughput benchmark.

The same keyed aggregation as ``bench.jobs:keyed_aggregate`` (count and sum of
``value`` per ``value % keys``), in Structured Streaming: the
``rate-micro-batch`` source (a fixed number of rows per micro-batch, so the
amount of work does not depend on the clock), RocksDB state store with
changelog checkpointing, a 1 s processing-time trigger, the ``noop`` sink in
update mode, ``local[2]`` and two shuffle partitions.

Throughput is taken from the query's progress: input rows over trigger
execution time of the micro-batches after the warm-up batches, i.e. what the
engine processes per second of work (the idle time a trigger waits for its
next interval is not counted against it). Runs in its own process and prints
one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Any


def run(*, records: int, keys: int, rows_per_batch: int, warmup_batches: int,
        parallelism: int, timeout: float) -> dict[str, Any]:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.appName("bench-structured-streaming")
             .master(f"local[{parallelism}]")
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
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    checkpoint = tempfile.mkdtemp(prefix="ss-checkpoint-")
    stream = (spark.readStream.format("rate-micro-batch")
              .option("rowsPerBatch", rows_per_batch)
              .option("numPartitions", parallelism)
              .load())
    aggregated = (stream.select((F.col("value") % keys).alias("key"), F.col("value"))
                  .groupBy("key")
                  .agg(F.count(F.lit(1)).alias("n"), F.sum("value").alias("total")))
    query = (aggregated.writeStream.format("noop").outputMode("update")
             .trigger(processingTime="1 second")
             .option("checkpointLocation", checkpoint)
             .start())
    wanted_batches = warmup_batches + -(-records // rows_per_batch)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            done = [p for p in query.recentProgress if p.get("numInputRows", 0) > 0]
            if len(done) >= wanted_batches:
                break
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
            time.sleep(0.5)
        progress = [p for p in query.recentProgress if p.get("numInputRows", 0) > 0]
    finally:
        query.stop()
        spark.stop()
    measured = progress[warmup_batches:wanted_batches]
    if not measured:
        raise RuntimeError(f"only {len(progress)} micro-batches completed before the timeout")
    rows = sum(int(p["numInputRows"]) for p in measured)
    seconds = sum(float(p["durationMs"]["triggerExecution"]) for p in measured) / 1000.0
    return {
        "records": rows,
        "seconds": seconds,
        "records_per_second": rows / seconds,
        "batches": len(measured),
        "batch_ms": [float(p["durationMs"]["triggerExecution"]) for p in measured],
        "warmup_batch_ms": [float(p["durationMs"]["triggerExecution"])
                            for p in progress[:warmup_batches]],
        "state_rows": [int(p["stateOperators"][0]["numRowsTotal"]) for p in measured
                       if p.get("stateOperators")],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--keys", type=int, required=True)
    parser.add_argument("--rows-per-batch", type=int, required=True)
    parser.add_argument("--warmup-batches", type=int, default=2)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900.0)
    ns = parser.parse_args()
    result = run(records=ns.records, keys=ns.keys, rows_per_batch=ns.rows_per_batch,
                 warmup_batches=ns.warmup_batches, parallelism=ns.parallelism,
                 timeout=ns.timeout)
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
