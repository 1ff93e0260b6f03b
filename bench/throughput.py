"""Benchmark 1: keyed aggregation throughput, ours against Spark Structured Streaming.

Ours: ``bench.jobs:keyed_aggregate`` (count and sum per key of ``seq % keys``
with the vectorised ``aggregate``), parallelism 2, exactly-once aligned
checkpoints every second, hashmap state, file storage, a discarding sink.
Records per second are counted from the first record the keyed stage
processed to the last one (warm-up included, which only counts against us).

Baseline: the same aggregation in Structured Streaming (see
:mod:`bench.spark_ss`), over the same number of records, after warm-up
micro-batches. Repetitions alternate ours and the baseline; the reported
ratio is the median of the per-pair ratios.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

from bench.common import (
    BenchmarkError,
    env_int,
    median,
    plot_path,
    print_table,
    pyplot,
    python_env,
    run_driver,
    target_entry,
    update_summary,
    write_result,
)

TARGET_RATIO = 1.5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--records", type=int, default=env_int("BENCH_RECORDS", 1_000_000),
                        help="records per run, ours and baseline alike (default 1,000,000)")
    parser.add_argument("--keys", type=int, default=env_int("BENCH_KEYS", 100_000))
    parser.add_argument("--rows-per-batch", type=int,
                        default=env_int("BENCH_ROWS_PER_BATCH", 200_000),
                        help="Structured Streaming rowsPerBatch (default 200,000)")
    parser.add_argument("--warmup-batches", type=int, default=2,
                        help="Structured Streaming micro-batches left out as warm-up")
    parser.add_argument("--repeat", type=int, default=env_int("BENCH_REPEAT", 3))


def run_ours(*, records: int, keys: int, checkpoint_interval: float = 1.0,
             name: str = "bench-throughput") -> dict[str, Any]:
    result = run_driver(name=name, entrypoint="bench.jobs:keyed_aggregate",
                        args={"count": records, "keys": keys},
                        checkpoint_interval=checkpoint_interval)
    completed = [h for h in result.history if h["status"] == "COMPLETED"]
    periodic = [h for h in completed if not h["final"]]
    return {
        "records": result.records,
        "seconds": result.processing_seconds(),
        "records_per_second": result.records_per_second(),
        "checkpoints": len(completed),
        "wall_seconds": result.wall_seconds,
        "periodic_checkpoint_ms_median": {
            field: median(float(h[f"{field}_ms{suffix}"]) for h in periodic)
            for field, suffix in (("alignment", "_max"), ("sync", "_max"),
                                  ("async", "_max"), ("duration", ""))} if periodic else None,
    }


def run_structured_streaming(*, records: int, keys: int, rows_per_batch: int,
                             warmup_batches: int) -> dict[str, Any]:
    command = [sys.executable, "-m", "bench.spark_ss", "--records", str(records),
               "--keys", str(keys), "--rows-per-batch", str(rows_per_batch),
               "--warmup-batches", str(warmup_batches)]
    proc = subprocess.run(command, capture_output=True, text=True, env=python_env(),
                          timeout=1800, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT "):])
            return result
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
    raise BenchmarkError(benchmark="throughput",
                         problem=f"Structured Streaming run failed ({proc.returncode}):\n{tail}")


def run(ns: argparse.Namespace) -> dict[str, Any]:
    ours: list[dict[str, Any]] = []
    baseline: list[dict[str, Any]] = []
    for i in range(ns.repeat):
        print(f"[throughput] repetition {i + 1}/{ns.repeat}: ours", flush=True)
        ours.append(run_ours(records=ns.records, keys=ns.keys))
        print(f"[throughput]   ours {ours[-1]['records_per_second']:,.0f} records/s; "
              f"Structured Streaming", flush=True)
        baseline.append(run_structured_streaming(
            records=ns.records, keys=ns.keys, rows_per_batch=ns.rows_per_batch,
            warmup_batches=ns.warmup_batches))
        print(f"[throughput]   Structured Streaming "
              f"{baseline[-1]['records_per_second']:,.0f} records/s", flush=True)
    ratios = [o["records_per_second"] / b["records_per_second"]
              for o, b in zip(ours, baseline, strict=True)]
    ours_rate = median(o["records_per_second"] for o in ours)
    base_rate = median(b["records_per_second"] for b in baseline)
    ratio = median(ratios)
    rows = [[f"#{i + 1}", o["records_per_second"], b["records_per_second"], r,
             o["checkpoints"]] for i, (o, b, r) in enumerate(zip(ours, baseline, ratios,
                                                                 strict=True))]
    rows.append(["median", ours_rate, base_rate, ratio, None])
    print_table(f"throughput: {ns.records:,} records, {ns.keys:,} keys, parallelism 2",
                ["run", "ours rec/s", "SS rec/s", "ratio", "our checkpoints"], rows)
    met = ratio >= TARGET_RATIO
    _plot(ours, baseline)
    data = {
        "scale": {"records": ns.records, "keys": ns.keys, "parallelism": 2,
                  "rows_per_batch": ns.rows_per_batch, "warmup_batches": ns.warmup_batches,
                  "repeat": ns.repeat, "checkpoint_interval_s": 1.0},
        "ours": ours, "structured_streaming": baseline, "ratios": ratios,
        "median": {"ours_records_per_second": ours_rate, "ss_records_per_second": base_rate,
                   "ratio": ratio},
        "target": {"ratio": TARGET_RATIO, "met": met},
    }
    write_result("throughput", data)
    update_summary({
        "throughput_ratio_vs_structured_streaming": target_entry(
            value=ratio, target=TARGET_RATIO, unit="x (ours / Structured Streaming records/s)",
            met=met, baseline=base_rate,
            note=f"ours median {ours_rate:,.0f} records/s; {ns.records:,} records, "
                 f"{ns.keys:,} keys"),
    })
    return data


def _plot(ours: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    runs = range(1, len(ours) + 1)
    ax.plot(runs, [o["records_per_second"] for o in ours], "o-", label="ours (aggregate)")
    ax.plot(runs, [b["records_per_second"] for b in baseline], "s-",
            label="Structured Streaming (RocksDB)")
    ax.set_xlabel("repetition")
    ax.set_ylabel("records / s")
    ax.set_yscale("log")
    ax.set_title("Keyed aggregation throughput (parallelism 2)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(plot_path("throughput"))
    plt.close(fig)
