"""The cost of ``BarrierTaskContext.barrier()``: a tiny barrier stage calling it N times.

This is what a checkpoint would cost if every checkpoint synchronised the
subtasks through Spark's own barrier instead of our barriers in the data
channels. Runs in its own process (its own JVM) and prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Any


def _call_barrier(calls: int, _: Iterator[Any]) -> Iterator[list[float]]:
    from pyspark import BarrierTaskContext

    context = BarrierTaskContext.get()
    context.barrier()  # warm-up: every task is running and connected
    durations = []
    for _i in range(calls):
        started = time.perf_counter()
        context.barrier()
        durations.append((time.perf_counter() - started) * 1000.0)
    yield durations


def run(*, calls: int, parallelism: int) -> dict[str, Any]:
    import functools

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.appName("bench-barrier").master(f"local[{parallelism}]")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        rdd = spark.sparkContext.parallelize(range(parallelism), parallelism)
        per_task = (rdd.barrier().mapPartitions(functools.partial(_call_barrier, calls))
                    .collect())
    finally:
        spark.stop()
    # A barrier() call ends for every task at about the same time; the slowest
    # task's view is what a checkpoint would wait for.
    slowest = [max(values) for values in zip(*per_task, strict=True)]
    return {"calls": calls, "parallelism": parallelism, "ms": slowest}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--parallelism", type=int, default=2)
    ns = parser.parse_args()
    print("RESULT " + json.dumps(run(calls=ns.calls, parallelism=ns.parallelism)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
