"""Benchmark 1b: Python per-key state, our ``process()`` against Structured Streaming's.

The same per-key logic on both sides, written in Python as each API means it
to be written: a running count and sum of ``value`` per ``key = value % keys``
kept in keyed state, emitting nothing (state only, so neither side pays for
output the other does not produce).

* ours: ``key_by("key").process(fn)`` with a ``ValueState`` holding
  ``(count, sum)``, one call per record (``bench.jobs:keyed_process``),
  parallelism 2, exactly-once checkpoints every 1 s, ``sinks.discard()``;
* Structured Streaming ``applyInPandasWithState``: one call per key per
  micro-batch with the key's rows as pandas DataFrames (count by ``len``,
  sum by ``Series.sum``), default HDFS-backed state store;
* Structured Streaming ``transformWithStateInPandas``: a ``StatefulProcessor``
  with a ``ValueState``, same per-key body, RocksDB state store (required).

Both baselines: ``local[2]``, 2 shuffle partitions, ``noop`` sink, each in two rows
as benchmark 1's: batches back to back with ``rowsPerBatch`` searched to its rate's
plateau (the headline pair), and a 1 s trigger with the largest ``rowsPerBatch`` that
fits it (a second pair, equal freshness).
"""

from __future__ import annotations

import argparse
import importlib.util
from typing import Any

from bench.common import env_int
from bench.comparison import Pair, run_comparison
from bench.rows import Baseline, Ours, Row

TARGET_RATIO = 3.0
"""Record-at-a-time Python state at three times the rate of the fastest SS Python-state API."""

OURS = Ours(label="ours, process", entrypoint="bench.jobs:keyed_process", files_sink=False,
            description="process(fn) with ValueState, one Python call per record, "
                        "parallelism 2, checkpoints every 1 s, sinks.discard()")


_TUNED = {"throughput": "batches back to back, rowsPerBatch searched to its rate's plateau",
          "interval": "1 s trigger, the largest rowsPerBatch whose batches fit it"}


INTERVAL_RECORDS = 2_000_000
"""Records of a baseline held to a 1 s trigger: its small batches run tens of thousands of
records a second, so the run's tens of millions would take most of an hour; 2M give
it over ten batches."""


def _baseline(api: str, *, query: str, provider: str, body: str, search: str) -> Baseline:
    """One row of Structured Streaming's Python-state API ``api``, tuned by ``search``."""
    suffix = "" if search == "throughput" else " at 1 s"
    return Baseline(label=f"SS {api}{suffix}", query=query, provider=provider, sink="noop",
                    tune_start=100_000, search=search,
                    max_records=None if search == "throughput" else INTERVAL_RECORDS,
                    description=f"{body}, noop sink, local[2], 2 shuffle partitions, "
                                f"{_TUNED[search]}")


def _pandas(search: str) -> Baseline:
    return _baseline("applyInPandasWithState", query="pandas-state", provider="hdfs",
                     body="one Python call per key per micro-batch (pandas), default "
                          "HDFS-backed state store", search=search)


def _transform(search: str) -> Baseline:
    return _baseline("transformWithStateInPandas", query="transform-with-state",
                     provider="rocksdb", body="StatefulProcessor with ValueState, one call "
                     "per key per micro-batch (pandas), RocksDB state store", search=search)


PANDAS, PANDAS_AT_INTERVAL = _pandas("throughput"), _pandas("interval")
TRANSFORM, TRANSFORM_AT_INTERVAL = _transform("throughput"), _transform("interval")
NEEDS_PROTOBUF = ("transformWithStateInPandas needs the protobuf package (>= 6.33, as "
                  "PySpark's connect extra pulls in); row left out")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--records", type=int, default=env_int("BENCH_RECORDS", 2_000_000),
                        help="records per run, ours and baselines alike (default 2,000,000)")
    parser.add_argument("--keys", type=int, default=env_int("BENCH_KEYS", 10_000),
                        help="keys (default 10,000: the baselines call Python once per key "
                             "per micro-batch, about 0.6 ms each here, so 100,000 keys make "
                             "every micro-batch take a minute)")
    parser.add_argument("--rows-per-batch", type=int, default=None,
                        help="Structured Streaming rowsPerBatch for both baselines, "
                             "instead of tuning it")
    parser.add_argument("--repeat", type=int, default=env_int("BENCH_REPEAT", 3))
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds allowed to each run (default 900)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke scale: 300,000 records, 1,000 keys, one repetition")


def installed(module: str) -> bool:
    """Whether ``module`` can be imported; ``find_spec`` raises when its parent is missing."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def rows() -> tuple[list[Row], dict[str, str]]:
    """The rows this machine can run, and the reason for each left out."""
    if not installed("google.protobuf"):
        print(f"[python-state] {NEEDS_PROTOBUF}", flush=True)
        return [OURS, PANDAS, PANDAS_AT_INTERVAL], {
            TRANSFORM.label: NEEDS_PROTOBUF, TRANSFORM_AT_INTERVAL.label: NEEDS_PROTOBUF}
    return [OURS, PANDAS, PANDAS_AT_INTERVAL, TRANSFORM, TRANSFORM_AT_INTERVAL], {}


def run(ns: argparse.Namespace) -> dict[str, Any]:
    if ns.quick:
        ns.records, ns.keys, ns.repeat = 300_000, 1_000, 1
    present, left_out = rows()
    # The first pair is the headline (each API at its fastest batch size); the second
    # holds the batches to our 1 s checkpoint interval (equal freshness).
    pairs = [Pair(ours=OURS.label, baselines=tuple(
        r.label for r in present if isinstance(r, Baseline) and r.search == search))
        for search in ("throughput", "interval")]
    return run_comparison(
        name="python-state", title="per-key Python state (count+sum)", rows=present,
        pairs=pairs, ns=ns, left_out=left_out, target_ratio=TARGET_RATIO,
        summary_key="python_state_ratio_vs_structured_streaming",
        summary_unit="x (ours process / fastest SS Python-state API, steady records/s)")
