"""An inactivity alert per user from event-time timers: ``process()`` with ``on_timer``,
ours against Structured Streaming's ``transformWithStateInPandas``.

The input is the windows benchmark's (:mod:`bench.windows_data`), generated once per
run from a fixed seed: N records (default 2,000,000) in Parquet files of F records
(default 10,000) of a Zipf-distributed string ``user`` (default 100,000 users), an
integer ``amount`` and ``ts`` (epoch ms, 1,000 records per event-time second, out of
order by up to 3 s). Both sides raise an alert per user when 30 s of event time pass
without a record of theirs: one row ``user, alert_at, n, total`` (count and sum of
``amount`` since the user's last alert) when the watermark (5 s delay, so no record is
late) passes the user's newest event time plus 30 s, from a per-user event-time timer
that each record moves; see :mod:`bench.timers_job` for why a user's state is a list
of runs (an out-of-order stream can show a record of the user's next run before the
watermark has passed the current run's alert time).

* **ours** (``bench.timers_job:inactivity_alerts``): ``sources.files(format="parquet")``
  with ``watermarks.bounded_out_of_orderness("ts", max_delay="5s")``,
  ``key_by("user").process(on_record, on_timer=on_timer)`` with ``ctx.value_state``
  and ``ctx.timers.register_event_time``/``delete_event_time``,
  ``sinks.files(format="parquet")``; parallelism 2, checkpoints every 1 s, the
  ``hashmap`` state backend (the runtime's default);
* **Structured Streaming** (``bench.timers_ss``): ``readStream.format("parquet")``
  with ``maxFilesPerTrigger``, ``withWatermark``, ``groupBy("user")
  .transformWithStateInPandas(..., outputMode="Append", timeMode="EventTime")`` with a
  ``ListState`` and ``registerTimer``/``deleteTimer``, the Parquet file sink, the
  RocksDB state store with changelog checkpointing, ``local[2]``, 2 shuffle
  partitions; ``maxFilesPerTrigger`` searched twice, as in the windows benchmark: for
  its fastest (the headline, :class:`bench.batch_size_search.ThroughputSearch`: doubled
  until the rate rises by less than 5%, up to a quarter of the input; each batch pays a
  Python call per user in it, so larger batches amortise it) and for the fastest whose
  batches fit our 1 s checkpoint interval (a second row: equal freshness; when no batch
  fits, the fastest of those about as short as the shortest).

Ours ends with its bounded source's final watermark, which fires every timer left;
Structured Streaming's input ends with the windows benchmark's end-of-input record, an
hour of event time past the input, whose watermark fires the same timers (why not
``Trigger.AvailableNow``: :mod:`bench.timers_ss`). So both sides must emit every alert
of the input, and both outputs are checked against a reference computed with pandas
from the same files (every alert once, at its time, with its count and sum); a
mismatch fails the run.

Steady records/s: ours, the input's records over the time from the first subtask being
ready to the last record the keyed stage processed; Structured Streaming,
``numInputRows / triggerExecution`` over its batches after two warm-up batches, the
last (partial) batch and the batch that fires the last timers left out (the windows
benchmark's :func:`bench.windows.steady`). Both include the alerts that fire while
the input streams. Repetitions alternate ours and Structured Streaming; ratios are
per repetition, reported as medians.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from bench.baselines import (
    BASELINE_KEYS,
    BASELINES,
    add_ratios,
    measure,
    rate_bars,
    run_median,
    search_sizes,
    ss_step,
)
from bench.baselines import ss_tune as baseline_tune
from bench.common import (
    BenchmarkError,
    DriverRun,
    fresh_dir,
    median,
    print_table,
    remove_dir,
    run_driver,
    target_entry,
    update_summary,
    write_result,
)
from bench.ss_results import (
    Tuning,
    tuning_record,
)
from bench.timers_job import GAP_MS
from bench.windows import Scale, add_input_arguments, scale_of, steady
from bench.windows_data import (
    UNKNOWN_USER,
    Generated,
    generate,
    link_input,
    ours_committed,
    spark_committed,
    user_ids,
)
from bench.windows_ss import RESULT_PREFIX, parse

NAME = "timers"
ENTRYPOINT = "bench.timers_job:inactivity_alerts"
TARGET_RATIO = 3.0
"""The issue's target: ours >= 3x Structured Streaming's steady records/s."""
CHECKPOINT_INTERVAL = 1.0
SS_WARMUP_BATCHES = 2
TUNE_START = 50_000
"""The first batch size (records) the search tries: ``transformWithStateInPandas``
takes seconds per 10,000 records here, so the windows benchmark's 500,000 would spend
minutes on its first size alone."""
ALERT_COLUMNS = ("user", "alert_at", "n", "total")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_input_arguments(parser, records_env="BENCH_TIMERS_RECORDS", records=2_000_000,
                        file_records=10_000, timeout=1800.0,
                        quick_help="200,000 records of 10,000 users")


def resolve_scale(ns: argparse.Namespace) -> Scale:
    return scale_of(ns, name=NAME, quick=(200_000, 10_000, ns.file_records))


def _log(message: str) -> None:
    print(f"[timers] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- reference and check


def reference(paths: Iterable[Path], *, gap_ms: int = GAP_MS) -> pd.DataFrame:
    """Every alert of the input, computed with pandas: per user, the records in event-time
    order split where the next is ``gap_ms`` or more past the newest before it; per run,
    ``alert_at`` (its newest event time + ``gap_ms``), ``n`` and ``total`` (``user`` as
    its number)."""
    tables = [pq.read_table(p, columns=["user", "amount", "ts"]) for p in paths]
    if not tables:
        return pd.DataFrame({c: pd.Series(dtype=np.int64) for c in ALERT_COLUMNS})
    user = np.concatenate([user_ids(t["user"]) for t in tables])
    ts = np.concatenate([t["ts"].to_numpy() for t in tables]).astype(np.int64)
    amount = np.concatenate([t["amount"].to_numpy() for t in tables]).astype(np.int64)
    order = np.lexsort((ts, user))
    user, ts, amount = user[order], ts[order], amount[order]
    starts = np.ones(len(ts), dtype=bool)
    starts[1:] = (user[1:] != user[:-1]) | (ts[1:] - ts[:-1] >= gap_ms)
    at = np.flatnonzero(starts)
    return pd.DataFrame({"user": user[at],
                         "alert_at": np.maximum.reduceat(ts, at) + gap_ms,
                         "n": np.diff(np.append(at, len(ts))),
                         "total": np.add.reduceat(amount, at)}).astype(np.int64)


def read_alerts(paths: Iterable[Path]) -> pd.DataFrame:
    """The alert rows of output files, ``user`` as its number."""
    frames = []
    for path in paths:
        table = pq.read_table(path)
        missing = [c for c in ALERT_COLUMNS if c not in table.schema.names]
        if missing:
            raise ValueError(f"{path.name}: no column {', '.join(missing)}")
        frames.append(pd.DataFrame({"user": user_ids(table["user"]),
                                    **{c: table[c].to_numpy() for c in ALERT_COLUMNS[1:]}}))
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype=np.int64) for c in ALERT_COLUMNS})
    return pd.concat(frames, ignore_index=True)


def _which(frame: pd.DataFrame, limit: int = 3) -> str:
    return ", ".join(f"u{int(r.user)} at {int(r.alert_at)}"
                     for r in frame.head(limit).itertuples())


def check_alerts(expected: pd.DataFrame, output: pd.DataFrame) -> list[str]:
    """What is wrong with ``output`` against the reference: alerts of unknown users,
    alerts raised twice, missing, extra (at a time the input has no alert), or with a
    wrong count or sum. Empty when the output is exactly the reference."""
    problems = []
    strangers = int((output["user"] == UNKNOWN_USER).sum())
    if strangers:
        problems.append(f"{strangers:,} alerts of a user that is not in the input")
    output = output[output["user"] != UNKNOWN_USER]
    keys = ["user", "alert_at"]
    twice = output[output.duplicated(keys)]
    if len(twice):
        problems.append(f"{len(twice):,} alerts raised more than once ({_which(twice)})")
    joined = expected.merge(output.drop_duplicates(keys), on=keys, how="outer",
                            suffixes=("", "_out"), indicator=True)
    side = joined["_merge"]
    if (side == "left_only").any():
        problems.append(f"{int((side == 'left_only').sum()):,} of {len(expected):,} alerts "
                        f"missing ({_which(joined[side == 'left_only'])})")
    if (side == "right_only").any():
        problems.append(f"{int((side == 'right_only').sum()):,} alerts the input does not "
                        f"raise ({_which(joined[side == 'right_only'])})")
    both = joined[side == "both"]
    off = both[(both["n"] != both["n_out"]) | (both["total"] != both["total_out"])]
    if len(off):
        first = off.iloc[0]
        problems.append(f"{len(off):,} alerts with a wrong count or sum (u{int(first.user)} "
                        f"at {int(first.alert_at)}: {first.n_out} records summing "
                        f"{first.total_out}, expected {int(first.n)} and {int(first.total)})")
    return problems


def _check(side: str, problems: list[str]) -> None:
    if problems:
        raise BenchmarkError(benchmark=NAME, problem=f"{side}: the output does not match the "
                                                     f"reference; " + "; ".join(problems))


# ---------------------------------------------------------------------- ours


def ours_run(*, generated: Generated, work: Path, scale: Scale, expected: pd.DataFrame,
             repetition: int) -> dict[str, Any]:
    output = work / f"ours-out-{repetition}"
    output.mkdir()
    run: DriverRun = run_driver(
        name=f"{NAME}-ours", entrypoint=ENTRYPOINT,
        args={"input": str(generated.paths[0].parent), "output": str(output),
              "max_delay": f"{round(scale.watermark_delay_s * 1000)}ms", "gap_ms": GAP_MS,
              "batch_size": scale.batch_size},
        parallelism=scale.parallelism, checkpoint_interval=CHECKPOINT_INTERVAL,
        timeout=scale.timeout)
    if run.records != scale.spec.records:
        raise BenchmarkError(benchmark=NAME, problem=f"ours read {run.records:,} records of "
                                                     f"the input's {scale.spec.records:,}")
    alerts = read_alerts(ours_committed(output))
    remove_dir(output)
    _check("ours", check_alerts(expected, alerts))
    t = run.timeline
    whole_s = float(t["doneAt"]) - float(t.get("firstReadyAt") or t["firstRecordAt"])
    checkpoints = run.status.get("checkpoints", {})
    return {"records": run.records, "steady_seconds": run.processing_seconds(),
            "steady_records_per_second": run.records_per_second(),
            "whole_seconds": whole_s, "whole_records_per_second": run.records / whole_s,
            "alerts": len(alerts),
            "checkpoints_completed": int(checkpoints.get("completed", 0)),
            "checkpoint_duration_ms_p50": checkpoints.get("durationMsP50"),
            "checkpoint_duration_ms_p99": checkpoints.get("durationMsP99"),
            "late_records": run.status.get("lateRecords"),
            "wall_seconds": run.wall_seconds, "matches_reference": True}


# ---------------------------------------------------------------------- Structured Streaming


def ss_tune(*, ss_input: Path, work: Path, scale: Scale, search: str) -> Tuning:
    return baseline_tune("bench.timers_ss", benchmark=NAME, ss_input=ss_input, work=work,
                         scale=scale, search=search, start=TUNE_START)


def ss_run(*, ss_input: Path, work: Path, scale: Scale, max_files: int,
           expected: pd.DataFrame, repetition: int) -> dict[str, Any]:
    output = work / f"ss-out-{repetition}-{max_files}"
    checkpoint = work / f"ss-checkpoint-{repetition}-{max_files}"
    output.mkdir()
    line = ss_step("bench.timers_ss", "run", benchmark=NAME, ss_input=ss_input, work=work,
                   scale=scale, log=work / f"ss-run-{repetition}-{max_files}.log", prefix=RESULT_PREFIX,
               extra=["--max-files", str(max_files), "--output", str(output),
                      "--checkpoint", str(checkpoint), "--launched-at", f"{time.time():.3f}"])
    try:
        run = parse(line)
    except (ValueError, KeyError) as exc:
        raise BenchmarkError(benchmark=NAME, problem=f"unreadable Structured Streaming "
                                                     f"result: {exc}") from None
    alerts = read_alerts(spark_committed(output))
    remove_dir(output)
    remove_dir(checkpoint)
    _check("Structured Streaming", check_alerts(expected, alerts))
    records, seconds = steady(run, warmup=SS_WARMUP_BATCHES)
    batches = list(run.batches)
    whole_s = batches[-1].ended_at - batches[0].started_at
    data = [b for b in batches if b.rows > 0]
    kept = sorted(b.duration_ms for b in data[SS_WARMUP_BATCHES:]) or [float("nan")]
    return {"records": run.records - 1, "max_files_per_trigger": max_files,
            "records_per_batch": max_files * scale.spec.file_records,
            "batches": len(batches), "data_batches": len(data),
            "steady_records": records, "steady_seconds": seconds,
            "steady_records_per_second": records / seconds if seconds else float("nan"),
            "whole_seconds": whole_s,
            "whole_records_per_second": scale.spec.records / whole_s,
            "median_batch_ms": kept[len(kept) // 2],
            "dropped_late_rows": sum(b.dropped_late for b in batches),
            "state_rows_max": max((b.state_rows or 0 for b in batches), default=0),
            "alerts": len(alerts), "matches_reference": True,
            "batch_ms": [b.duration_ms for b in batches],
            "batch_rows": [b.rows for b in batches]}


# ---------------------------------------------------------------------- the benchmark


def run(ns: argparse.Namespace) -> dict[str, Any]:
    scale = resolve_scale(ns)
    spec = scale.spec
    work = fresh_dir(NAME)
    started = time.monotonic()
    runs: list[dict[str, Any]] = []
    try:
        _log(f"generating {spec.records:,} records of {spec.keys:,} users in {spec.files:,} "
             f"Parquet files")
        generated = generate(work / "input", spec)
        expected = reference(generated.paths)
        ss_input = link_input(work / "ss-input", generated)
        _log(f"generated {generated.bytes / 2**20:,.0f} MiB in {generated.seconds:.0f} s, "
             f"{len(expected):,} alerts in the reference")
        tunings, max_files = search_sizes(
            functools.partial(ss_tune, ss_input=ss_input, work=work, scale=scale),
            given=scale.max_files, file_records=spec.file_records, log=_log)
        for repetition in range(scale.repeat):
            _log(f"repetition {repetition + 1}/{scale.repeat}: ours")
            ours = ours_run(generated=generated, work=work, scale=scale, expected=expected,
                            repetition=repetition)
            _log(f"ours: {ours['steady_records_per_second']:,.0f} records/s, output checked")
            entry: dict[str, Any] = {"ours": ours, **measure(
                functools.partial(ss_run, ss_input=ss_input, work=work, scale=scale,
                                  expected=expected, repetition=repetition),
                max_files=max_files, log=_log)}
            add_ratios(entry, ours=ours)
            runs.append(entry)
    finally:
        remove_dir(work)
    return report(scale=scale, generated=generated, reference_alerts=len(expected),
                  tunings=tunings, max_files=max_files, runs=runs,
                  minutes=(time.monotonic() - started) / 60.0)


def report(*, scale: Scale, generated: Generated, reference_alerts: int,
           tunings: dict[str, Tuning | None], max_files: dict[str, int],
           runs: list[dict[str, Any]], minutes: float) -> dict[str, Any]:
    spec = scale.spec
    ratio = median(r["ratio_steady"] for r in runs)
    whole_ratio = median(r["ratio_whole"] for r in runs)
    interval_ratio = median(r["ratio_steady_at_interval"] for r in runs)
    met = ratio >= TARGET_RATIO
    ours_rate = run_median(runs, "ours", "steady_records_per_second")
    ss_rate = run_median(runs, "structured_streaming", "steady_records_per_second")
    fastest, at_interval = max_files["throughput"], max_files["interval"]
    title = (f"timers: {spec.records:,} records, {spec.keys:,} users, an event-time timer "
             f"per user ({GAP_MS / 1000:g} s inactivity, {reference_alerts:,} alerts), "
             f"disorder <= {spec.disorder_ms / 1000:g} s, watermark "
             f"{scale.watermark_delay_s:g} s, parallelism {scale.parallelism}, "
             f"{len(runs)} repetition(s); SS maxFilesPerTrigger {fastest} at its fastest "
             f"({fastest * spec.file_records:,} records), {at_interval} at 1 s batches "
             f"({at_interval * spec.file_records:,})")
    rows: list[list[Any]] = [
        ["records/s, steady", ours_rate, ss_rate, ratio, f">= {TARGET_RATIO:g}x", met],
        ["records/s, whole input to output", run_median(runs, "ours", "whole_records_per_second"),
         run_median(runs, "structured_streaming", "whole_records_per_second"), whole_ratio, "-",
         None],
        ["records/s, steady, SS at 1 s batches (equal freshness)", ours_rate,
         run_median(runs, BASELINE_KEYS["interval"], "steady_records_per_second"), interval_ratio,
         "-", None],
    ]
    table = print_table(title, ["metric", "ours", "SS", "ours/SS", "target", "met"], rows)
    _plot(runs)
    data = {
        "scale": {"records": spec.records, "keys": spec.keys,
                  "file_records": spec.file_records, "files": spec.files,
                  "events_per_second": spec.events_per_second,
                  "disorder_ms": spec.disorder_ms, "seed": spec.seed, "gap_ms": GAP_MS,
                  "watermark_delay_s": scale.watermark_delay_s,
                  "parallelism": scale.parallelism, "repeat": scale.repeat,
                  "ours_source_batch_size": scale.batch_size},
        "input": {"bytes": generated.bytes, "generate_seconds": generated.seconds,
                  "max_ts": generated.max_ts, "reference_alerts": reference_alerts},
        "checkpoint_interval_s": CHECKPOINT_INTERVAL,
        "structured_streaming": {
            "operator": "transformWithStateInPandas, timeMode EventTime, ListState",
            "sink": "parquet file sink (exactly-once), append mode",
            "state_store": "RocksDB, changelog checkpointing",
            "warmup_batches": SS_WARMUP_BATCHES,
            **{BASELINE_KEYS[search]: {
                "max_files_per_trigger": max_files[search],
                "tuning": tuning_record(tunings[search])} for search in BASELINES}},
        "runs": runs,
        "ratio_steady_median": ratio, "ratio_whole_median": whole_ratio,
        "ratio_steady_at_interval_median": interval_ratio,
        "minutes": minutes, "table": table,
    }
    write_result(NAME, data)
    update_summary({
        "timers_throughput_ratio_vs_structured_streaming": target_entry(
            value=ratio, target=TARGET_RATIO, met=met, baseline=ss_rate,
            unit="x (ours / SS transformWithStateInPandas, steady records/s, an event-time "
                 "timer per user over out-of-order event time, both exactly-once Parquet "
                 "files)",
            note=f"ours {ours_rate:,.0f} records/s; {spec.records:,} records, "
                 f"{spec.keys:,} users, {reference_alerts:,} alerts; SS at its fastest, "
                 f"maxFilesPerTrigger {fastest} ({fastest * spec.file_records:,} records); "
                 f"whole input {whole_ratio:.2f}x; at 1 s batches ({at_interval} files) "
                 f"{interval_ratio:.2f}x"),
    })
    return data


def _plot(runs: list[dict[str, Any]]) -> None:
    rate_bars(runs, name=NAME, title="inactivity alert per user, event-time timers",
              ours="ours, process() + on_timer", baseline="SS, transformWithStateInPandas")
