"""Benchmark 3: barrier alignment and synchronous snapshot times, p50/p99.

Four runs of our driver, parallelism 2, 100k keys, exactly-once:

* **no backpressure** - ``bench.jobs:keyed_aggregate`` with a rate-limited
  source well below what the job can do, so channels are nearly empty;
* **backpressure** - ``bench.jobs:slow_keyed``: a keyed ``process`` (count and
  sum in a ``ValueState``) that sleeps every 1,024 records, the source runs
  unthrottled and is stopped by exhausted credits, so every channel is full when a
  barrier enters it;

each with aligned and with unaligned checkpoints. The per-checkpoint numbers
come from the driver's status file (``checkpointHistory``, the coordinator's
last 100 checkpoints): alignment is the time from the first to the last
barrier at a keyed task (the largest over tasks; always 0 for unaligned
checkpoints, where barriers overtake data), the synchronous part is the time
the task stops processing to take the snapshot (largest over tasks), duration
is trigger to completed.

The baseline, measured in the same run, is ``BarrierTaskContext.barrier()``
(:mod:`bench.spark_barrier`): the price of synchronising the subtasks through
Spark once per checkpoint.
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
    percentile,
    plot_path,
    print_table,
    pyplot,
    python_env,
    require_checkpoints,
    run_driver,
    target_entry,
    update_summary,
    write_result,
)

ALIGNMENT_TARGET_MS = 20.0
SYNC_TARGET_MS = 10.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--keys", type=int, default=env_int("BENCH_KEYS", 100_000))
    parser.add_argument("--seconds", type=float, default=25.0,
                        help="approximate length of each run (default 25)")
    parser.add_argument("--interval", type=float, default=0.5,
                        help="checkpoint interval, seconds (default 0.5: ~50 checkpoints)")
    parser.add_argument("--rate", type=int, default=200_000,
                        help="source rate of the no-backpressure runs, records/s")
    parser.add_argument("--sleep-ms", type=float, default=20.0,
                        help="pause of the slow keyed stage per batch (backpressure runs)")
    parser.add_argument("--barrier-calls", type=int, default=20,
                        help="BarrierTaskContext.barrier() calls of the baseline")
    parser.add_argument("--repeat", type=int, default=2,
                        help="runs per configuration (default 2); percentiles pool the "
                             "checkpoints of all runs, so p99 is not just the maximum")


def check_scale(*, name: str, completed: int, runs: int, seconds: float,
                interval: float) -> None:
    """Fail if the runs held far fewer checkpoints than their length promised (as when
    the keyed stage stopped being the bottleneck and a run ended early)."""
    require_checkpoints(benchmark="barriers", run=f"{name}, {runs} run(s)", completed=completed,
                        expected=runs * seconds / interval,
                        advice="raise --seconds or lower the rate")


def _configurations(ns: argparse.Namespace) -> list[dict[str, Any]]:
    # The slow stage handles about 1,024 records per sleep per subtask.
    slow_rate = 2 * 1024 * 1000.0 / max(ns.sleep_ms, 1.0)
    configs = []
    for unaligned in (False, True):
        configs.append({
            "name": f"no backpressure, {'unaligned' if unaligned else 'aligned'}",
            "backpressure": False, "unaligned": unaligned,
            "entrypoint": "bench.jobs:keyed_aggregate",
            "args": {"count": int(ns.rate * ns.seconds), "keys": ns.keys, "rate": ns.rate},
        })
    for unaligned in (False, True):
        configs.append({
            "name": f"backpressure, {'unaligned' if unaligned else 'aligned'}",
            "backpressure": True, "unaligned": unaligned,
            "entrypoint": "bench.jobs:slow_keyed",
            "args": {"count": int(slow_rate * ns.seconds), "keys": ns.keys,
                     "sleep_ms": ns.sleep_ms},
        })
    return configs


def _run_config(config: dict[str, Any], ns: argparse.Namespace) -> dict[str, Any]:
    checkpoints: list[dict[str, Any]] = []
    failed = 0
    for _ in range(ns.repeat):
        result = run_driver(name="bench-barriers", entrypoint=config["entrypoint"],
                            args=config["args"], checkpoint_interval=ns.interval,
                            extra=["--unaligned"] if config["unaligned"] else [])
        history = result.history
        checkpoints += [h for h in history if h["status"] == "COMPLETED" and not h["final"]]
        failed += sum(1 for h in history if h["status"] == "FAILED")
    check_scale(name=config["name"], completed=len(checkpoints), runs=ns.repeat,
                seconds=ns.seconds, interval=ns.interval)
    alignment = [float(h["alignment_ms_max"]) for h in checkpoints]
    sync = [float(h["sync_ms_max"]) for h in checkpoints]
    duration = [float(h["duration_ms"]) for h in checkpoints]
    return {
        **{k: config[k] for k in ("name", "backpressure", "unaligned", "args")},
        "checkpoints": len(checkpoints), "failed": failed,
        "alignment_ms": {"p50": percentile(alignment, 0.5), "p99": percentile(alignment, 0.99),
                         "max": max(alignment)},
        "sync_ms": {"p50": percentile(sync, 0.5), "p99": percentile(sync, 0.99),
                    "max": max(sync)},
        "duration_ms": {"p50": percentile(duration, 0.5), "p99": percentile(duration, 0.99)},
        "size_bytes_median": median(float(h["size_bytes"]) for h in checkpoints),
        "samples": {"alignment_ms": alignment, "sync_ms": sync, "duration_ms": duration},
    }


def measure_spark_barrier(*, calls: int) -> dict[str, Any]:
    command = [sys.executable, "-m", "bench.spark_barrier", "--calls", str(calls)]
    proc = subprocess.run(command, capture_output=True, text=True, env=python_env(),
                          timeout=900, check=False)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            data: dict[str, Any] = json.loads(line[len("RESULT "):])
            values = data["ms"]
            data["p50"] = percentile(values, 0.5)
            data["p99"] = percentile(values, 0.99)
            return data
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
    raise BenchmarkError(benchmark="barriers", problem=f"barrier() job failed:\n{tail}")


def run(ns: argparse.Namespace) -> dict[str, Any]:
    results = []
    for config in _configurations(ns):
        print(f"[barriers] {config['name']}", flush=True)
        results.append(_run_config(config, ns))
    print("[barriers] BarrierTaskContext.barrier() baseline", flush=True)
    spark_barrier = measure_spark_barrier(calls=ns.barrier_calls)
    rows = [[r["name"], r["checkpoints"], r["alignment_ms"]["p50"], r["alignment_ms"]["p99"],
             r["sync_ms"]["p50"], r["sync_ms"]["p99"], r["duration_ms"]["p50"],
             r["duration_ms"]["p99"]] for r in results]
    rows.append(["Spark barrier() call", spark_barrier["calls"], spark_barrier["p50"],
                 spark_barrier["p99"], None, None, None, None])
    print_table(f"barriers: {ns.keys:,} keys, parallelism 2, checkpoint every {ns.interval:g}s "
                f"(times in ms)",
                ["configuration", "n", "align p50", "align p99", "sync p50", "sync p99",
                 "dur p50", "dur p99"], rows)
    calm_aligned = results[0]
    alignment_p99 = calm_aligned["alignment_ms"]["p99"]
    sync_p99 = max(r["sync_ms"]["p99"] for r in results if not r["backpressure"])
    alignment_met = alignment_p99 <= ALIGNMENT_TARGET_MS
    sync_met = sync_p99 <= SYNC_TARGET_MS
    _plot(results, spark_barrier)
    data = {
        "scale": {"keys": ns.keys, "seconds": ns.seconds, "interval_s": ns.interval,
                  "rate": ns.rate, "sleep_ms": ns.sleep_ms, "repeat": ns.repeat,
                  "parallelism": 2},
        "configurations": results,
        "spark_barrier": spark_barrier,
        "targets": {"alignment_p99_ms": ALIGNMENT_TARGET_MS, "alignment_met": alignment_met,
                    "sync_p99_ms": SYNC_TARGET_MS, "sync_met": sync_met},
    }
    write_result("barriers", data)
    update_summary({
        "barrier_alignment_p99_ms": target_entry(
            value=alignment_p99, target=ALIGNMENT_TARGET_MS,
            unit="ms, aligned exactly-once, no backpressure", met=alignment_met,
            baseline=spark_barrier["p50"],
            note="baseline: median cost of one BarrierTaskContext.barrier() call"),
        "snapshot_sync_p99_ms": target_entry(
            value=sync_p99, target=SYNC_TARGET_MS,
            unit=f"ms, synchronous snapshot part, {ns.keys:,} keys, no backpressure",
            met=sync_met, baseline=spark_barrier["p50"],
            note="worst of aligned and unaligned; baseline: one barrier() call"),
    })
    return data


def _plot(results: list[dict[str, Any]], spark_barrier: dict[str, Any]) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    labels = [r["name"] for r in results]
    for ax, metric, title in ((axes[0], "alignment_ms", "alignment"),
                              (axes[1], "duration_ms", "checkpoint duration")):
        data = [r["samples"][metric] or [0.0] for r in results]
        ax.boxplot(data, whis=(1, 99), showfliers=True)
        ax.set_xticks(range(1, len(labels) + 1), labels, rotation=20, ha="right", fontsize=8)
        ax.axhline(spark_barrier["p50"], color="red", linestyle="--",
                   label=f"Spark barrier() p50 {spark_barrier['p50']:.0f} ms")
        ax.set_yscale("symlog", linthresh=1.0)
        ax.set_ylabel("ms")
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(plot_path("barriers"))
    plt.close(fig)
