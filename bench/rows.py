"""Rows of a comparison table: one configuration of ours or of a baseline, run alike.

Every row reports the same two numbers, measured the same way for both engines:

* **steady-state rate**: records per second while processing. Ours: records
  over the time from the first to the last record the keyed stage processed
  (the pipeline's own warm-up included). Structured Streaming: rows over
  trigger execution time of the micro-batches after the warm-up batches (the
  idle wait for the next trigger not counted).
* **end to end**: seconds from launching the process (Python, the JVM and
  Spark's start included) to the end of processing the run's last record
  (Structured Streaming: the end of the micro-batch holding it, counting
  warm-up batches as part of the run, its output written and the batch
  committed), and the records over that time.

Each engine runs in a process of its own, one run at a time.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from typing import Any

from bench.common import (
    WORK,
    BenchmarkError,
    fresh_dir,
    median,
    python_env,
    remove_dir,
    run_driver,
)
from bench.ss_results import (
    RESULT_PREFIX,
    TUNED_PREFIX,
    ResultFormatError,
    Tuning,
    parse_run,
    parse_tuning,
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Ours:
    """A configuration of our runtime: a job of ``bench.jobs``, parallelism 2."""

    label: str
    entrypoint: str
    files_sink: bool
    description: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class Baseline:
    """A configuration of Structured Streaming (``bench.spark_ss``)."""

    label: str
    query: str
    provider: str
    sink: str
    description: str
    tune_start: int
    search: str = "interval"
    """``throughput`` (batches back to back, the size searched to its rate's plateau) or
    ``interval`` (a 1 s trigger, the largest batch that fits it):
    :data:`bench.batch_size_search.SEARCHES`."""
    max_records: int | None = None
    """A baseline too slow for the run's records (one held to a 1 s trigger) runs at most
    this many: its steady rate is compared, its end-to-end time is not."""

    def records_of(self, records: int) -> int:
        return records if self.max_records is None else min(records, self.max_records)


Row = Ours | Baseline


@dataclasses.dataclass(frozen=True, kw_only=True)
class Measurement:
    """One run of one row."""

    label: str
    records: int
    steady_records_per_second: float
    seconds_to_last_record: float
    wall_seconds: float
    detail: dict[str, Any]

    @property
    def end_to_end_records_per_second(self) -> float:
        return self.records / self.seconds_to_last_record


def run_ours(row: Ours, *, records: int, keys: int, timeout: float) -> Measurement:
    args: dict[str, Any] = {"count": records, "keys": keys}
    output = fresh_dir("files-sink") if row.files_sink else None
    if output is not None:
        args["output"] = str(output)
    try:
        result = run_driver(name="bench-" + "".join(c if c.isalnum() else "-"
                                                    for c in row.label).replace("--", "-"),
                            entrypoint=row.entrypoint, args=args, checkpoint_interval=1.0,
                            timeout=timeout)
    finally:
        if output is not None:
            remove_dir(output)
    completed = [h for h in result.history if h["status"] == "COMPLETED"]
    if result.records != records:
        raise BenchmarkError(benchmark=row.label, problem=f"processed {result.records:,} "
                             f"records, expected {records:,}")
    return Measurement(
        label=row.label, records=result.records,
        steady_records_per_second=result.records_per_second(),
        seconds_to_last_record=result.seconds_to_last_record(),
        wall_seconds=result.wall_seconds,
        detail={"checkpoints": len(completed),
                "processing_seconds": result.processing_seconds(),
                "records_out": int(result.status.get("recordsOut", 0))})


def _baseline_process(row: Baseline, *, records: int, keys: int, rows_per_batch: int,
                      tune: bool, timeout: float) -> tuple[str, float, float]:
    """Run ``bench.spark_ss``; its output, launch time (epoch) and wall seconds."""
    command = [sys.executable, "-m", "bench.spark_ss", "--query", row.query,
               "--provider", row.provider, "--sink", row.sink, "--records", str(records),
               "--keys", str(keys), "--rows-per-batch", str(rows_per_batch),
               "--timeout", str(timeout), "--search", row.search]
    if tune:
        command.append("--tune")
    WORK.mkdir(parents=True, exist_ok=True)
    env = {**python_env(), "BENCH_WORK": str(WORK)}
    launched_at = time.time()
    started = time.monotonic()
    try:
        proc = subprocess.run(command, capture_output=True, text=True, env=env,
                              timeout=timeout + 120, check=False)
    except subprocess.TimeoutExpired:
        raise BenchmarkError(benchmark=row.label, problem=f"Structured Streaming did not "
                             f"finish within {timeout + 120:.0f} s (stopped)") from None
    wall = time.monotonic() - started
    if proc.returncode != 0:
        tail = "\n".join(line for line in (proc.stdout + proc.stderr).splitlines()
                         if "WARN" not in line)[-2000:]
        raise BenchmarkError(benchmark=row.label,
                             problem=f"Structured Streaming run failed ({proc.returncode}):"
                                     f"\n{tail}")
    return proc.stdout, launched_at, wall


def _line(output: str, prefix: str, label: str) -> str:
    for line in output.splitlines():
        if line.startswith(prefix):
            return line
    raise BenchmarkError(benchmark=label, problem="Structured Streaming printed no result")


def tune_baseline(row: Baseline, *, records: int, keys: int, timeout: float) -> Tuning:
    output, _, _ = _baseline_process(row, records=records, keys=keys,
                                     rows_per_batch=min(row.tune_start, records), tune=True,
                                     timeout=timeout)
    try:
        return parse_tuning(_line(output, TUNED_PREFIX, row.label))
    except ResultFormatError as exc:
        raise BenchmarkError(benchmark=row.label, problem=str(exc)) from None


def run_baseline(row: Baseline, *, records: int, keys: int, rows_per_batch: int,
                 timeout: float) -> Measurement:
    output, launched_at, wall = _baseline_process(row, records=records, keys=keys,
                                                  rows_per_batch=rows_per_batch, tune=False,
                                                  timeout=timeout)
    try:
        run = parse_run(_line(output, RESULT_PREFIX, row.label))
    except ResultFormatError as exc:
        raise BenchmarkError(benchmark=row.label, problem=str(exc)) from None
    return Measurement(
        label=row.label, records=records,
        steady_records_per_second=run.measured_records / run.measured_seconds,
        seconds_to_last_record=run.reached_at(records) - launched_at,
        wall_seconds=wall,
        detail={"rows_per_batch": rows_per_batch,
                "spark_ready_seconds": run.spark_ready_at - launched_at,
                "batch_ms": [b.duration_ms for b in run.measured],
                "warmup_batch_ms": [b.duration_ms for b in run.warmup],
                "state_rows": run.state_rows})


def run_row(row: Row, *, records: int, keys: int, rows_per_batch: dict[str, int],
            timeout: float) -> Measurement:
    if isinstance(row, Ours):
        return run_ours(row, records=records, keys=keys, timeout=timeout)
    return run_baseline(row, records=row.records_of(records), keys=keys,
                        rows_per_batch=rows_per_batch[row.label], timeout=timeout)


def load_average() -> tuple[float, float, float]:
    return os.getloadavg()


def summarise(rows: list[Row], runs: list[Measurement]) -> list[dict[str, Any]]:
    """Medians per row, in the order of ``rows``."""
    out = []
    for row in rows:
        mine = [m for m in runs if m.label == row.label]
        out.append({
            "label": row.label, "description": row.description, "runs": len(mine),
            "steady_records_per_second": median(m.steady_records_per_second for m in mine),
            "seconds_to_last_record": median(m.seconds_to_last_record for m in mine),
            "end_to_end_records_per_second": median(m.end_to_end_records_per_second
                                                    for m in mine),
            "wall_seconds": median(m.wall_seconds for m in mine),
        })
    return out
