"""The jobs the benchmarks run, as ``bench.jobs:<function>`` entrypoints.

Every job reads the deterministic ``sequence`` source and keeps per-key state;
``p.args`` carries the scale (``count``, ``keys``) so that one module serves
every benchmark.
"""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from job_runtime import Pipeline, sinks, sources


def _with_key(keys: int) -> Any:
    """A batch function that adds ``key = seq % keys`` and ``value = seq``."""

    def add_key(batch: pa.RecordBatch) -> pa.RecordBatch:
        seq = batch.column(0)
        key = pc.remainder(seq, keys)
        return pa.RecordBatch.from_arrays([key, seq], names=["key", "value"])

    return add_key


def _sink(p: Pipeline) -> sinks.Sink:
    """``sinks.discard()``, or with ``output`` in the args the exactly-once Parquet files sink."""
    output = p.args.get("output")
    return sinks.files(str(output), format="parquet") if output else sinks.discard()


def keyed_aggregate(p: Pipeline) -> None:
    """count and sum per key with the vectorised ``aggregate``."""
    count = int(p.args.get("count", 2_000_000))
    keys = int(p.args.get("keys", 100_000))
    rate = p.args.get("rate")
    batch = p.args.get("batch_size")
    source = sources.sequence(count=count, rate=float(rate) if rate else None,
                              **({"batch_size": int(batch)} if batch else {}))
    (p.source(source)
      .map_batches(_with_key(keys))
      .key_by("key")
      .aggregate(n="count", total=("sum", "value"))
      .sink(_sink(p)))


def _count_sum(record: dict[str, Any], ctx: Any) -> None:
    """A running count and sum per key in a ValueState, one record at a time; emits nothing.

    The same per-key logic as the ``applyInPandasWithState`` and
    ``transformWithStateInPandas`` baselines in ``bench.spark_ss``.
    """
    acc = ctx.value_state("acc")
    n, total = acc.value((0, 0))
    acc.update((n + 1, total + record["value"]))


def keyed_process(p: Pipeline) -> None:
    """count and sum per key with a Python ``process`` function and ``ValueState``."""
    count = int(p.args.get("count", 2_000_000))
    keys = int(p.args.get("keys", 100_000))
    (p.source(sources.sequence(count=count))
      .map_batches(_with_key(keys))
      .key_by("key")
      .process(_count_sum)
      .sink(_sink(p)))


def slow_keyed(p: Pipeline) -> None:
    """A keyed ``process`` that pauses every ``batch`` records: the keyed stage is the
    bottleneck.

    The source produces faster than the keyed stage consumes, so credits run out and
    the source blocks: this is the backpressure case of the barrier benchmark, with
    every channel full when a barrier enters it. The keyed stage must see every
    record: ``aggregate`` would combine them before the exchange (one row per key and
    flush), and a pause per batch there throttles nothing. ``sleep_ms`` is the pause.
    """
    count = int(p.args.get("count", 400_000))
    keys = int(p.args.get("keys", 100_000))
    sleep_s = float(p.args.get("sleep_ms", 20)) / 1000.0
    every = int(p.args.get("batch_size", 1024))
    seen = [0]

    def slow_count_sum(record: dict[str, Any], ctx: Any) -> None:
        seen[0] += 1
        if seen[0] % every == 0:
            time.sleep(sleep_s)
        _count_sum(record, ctx)

    (p.source(sources.sequence(count=count, batch_size=every))
      .map_batches(_with_key(keys))
      .key_by("key")
      .process(slow_count_sum)
      .sink(sinks.discard()))
