"""Views joined with buys of the same user within ten seconds of event time: ours'
vectorised ``interval_join`` against Structured Streaming's stream-stream join.

The input is the windows benchmark's (:mod:`bench.windows_data`), generated once per
run from a fixed seed: N records (default 4,000,000) in Parquet files of F records
(default 20,000) of a string ``user`` (default 100,000 users), an
integer ``amount`` and ``ts`` (epoch ms, 1,000 records per event-time second, out of
order by up to 3 s); here the users are uniform by default (:data:`SKEW`). A record
with an even ``amount`` is a view, one with an odd ``amount`` a buy; a pair is a view
at ``t`` and a buy of its user at ``s`` with ``t <= s <= t + 10 s``, one row ``user,
ts, view_amount, buy_ts, buy_amount``.

* **ours** (``bench.joins_job:views_and_buys``): two ``sources.files(format="parquet")``
  of the folder with ``watermarks.bounded_out_of_orderness("ts", max_delay="5s")``, each
  keeping its half with a ``map_batches``, ``key_by("user").connect(...)
  .interval_join(lower="0ms", upper="10000ms")`` (its default joined record, built as
  columns), ``sinks.files(format="parquet")``; parallelism 2, checkpoints every 1 s;
* **Structured Streaming** (:mod:`bench.joins_ss`): two file-stream readers of the
  folder, ``withWatermark`` on both, an inner stream-stream join on the user and the
  interval, the Parquet file sink, Spark's default (HDFS-backed) state store, the
  faster of the two here (:mod:`bench.joins_ss`), ``local[2]``, 2 shuffle partitions; ``maxFilesPerTrigger`` searched
  for its fastest (the headline: doubled until the rate rises by less than 5%, up to a
  quarter of the input) and for the fastest whose batches fit our 1 s checkpoint
  interval (a second row, equal freshness), as in the windows benchmark.

Both read every record twice (once per side) and both rates count both reads. Both
outputs are checked against a reference computed with numpy from the same files (every
pair once, with its amounts); a mismatch fails the run. Structured Streaming's input
ends with the windows benchmark's end-of-input record, which both of its readers read
and which pairs with itself: that row is left out of its check.

Steady records/s: ours, the records both sources read over the time from the first
subtask being ready to the last record the join processed; Structured Streaming,
``numInputRows / triggerExecution`` over its batches after two warm-up batches, the
last (partial) batch and the one after it left out (:func:`bench.windows.steady`).
Repetitions alternate ours and Structured Streaming; ratios are per repetition,
reported as medians.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
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
from bench.joins_job import OUTPUT_COLUMNS, UPPER_MS
from bench.ss_results import Tuning, tuning_record
from bench.windows import Scale, add_input_arguments, scale_of, steady
from bench.windows_data import (
    BASE_MS,
    END_USER,
    Generated,
    generate,
    link_input,
    ours_committed,
    spark_committed,
    user_ids,
)
from bench.windows_ss import RESULT_PREFIX, parse

NAME = "joins"
ENTRYPOINT = "bench.joins_job:views_and_buys"
TARGET_RATIO = 3.0
"""Ours >= 3x Structured Streaming's steady records/s, as for the other comparisons of
stateful operators."""
CHECKPOINT_INTERVAL = 1.0
SS_WARMUP_BATCHES = 2
TUNE_START = 100_000
"""The first batch size (records per reader) the search tries."""
READS = 2
"""Both sides read every record once per side of the join."""


SKEW = 0.0
"""The users' Zipf exponent: by default every user alike, so a record has a few
partners, as in a join on an id. With the windows benchmark's skew (1.0), the most
active user has a tenth of the records and thousands of partners each: Structured
Streaming's join state holds a key's rows in a list that each new row of the key
reads whole, which took 2.5 minutes per batch of 200,000 records here."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_input_arguments(parser, records_env="BENCH_JOINS_RECORDS", records=4_000_000,
                        file_records=20_000, timeout=1800.0,
                        quick_help="400,000 records of 10,000 users")
    parser.add_argument("--skew", type=float, default=SKEW,
                        help=f"the users' Zipf exponent (default {SKEW:g}: uniform)")


def resolve_scale(ns: argparse.Namespace) -> Scale:
    scale = scale_of(ns, name=NAME, quick=(400_000, 10_000, 10_000))
    if ns.skew < 0:
        raise BenchmarkError(benchmark=NAME, problem=f"--skew must not be negative, got "
                                                     f"{ns.skew:g}")
    return dataclasses.replace(scale, spec=dataclasses.replace(scale.spec, skew=ns.skew))


def _log(message: str) -> None:
    print(f"[joins] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- reference and check


Pairs = np.ndarray
"""Rows of ``(user, ts, view_amount, buy_ts, buy_amount)`` as an int64 array, ``user``
as its number, sorted."""


def _sorted(rows: np.ndarray) -> Pairs:
    if not len(rows):
        return rows.reshape(0, len(OUTPUT_COLUMNS))
    order = np.lexsort(rows.T[::-1])
    sorted_rows: Pairs = rows[order]
    return sorted_rows


def reference(paths: Iterable[Path], *, upper_ms: int = UPPER_MS) -> Pairs:
    """Every pair of the input, computed with numpy: the buys sorted by user and time,
    each view's buys found by two binary searches."""
    tables = [pq.read_table(p, columns=["user", "amount", "ts"]) for p in paths]
    if not tables:
        return np.zeros((0, len(OUTPUT_COLUMNS)), dtype=np.int64)
    user = np.concatenate([user_ids(t["user"]) for t in tables]).astype(np.int64)
    ts = np.concatenate([t["ts"].to_numpy() for t in tables]).astype(np.int64)
    amount = np.concatenate([t["amount"].to_numpy() for t in tables]).astype(np.int64)
    view = amount % 2 == 0
    shift = np.int64(1) << np.int64(40)  # above any time offset of the input
    keys = user * shift + (ts - BASE_MS + shift // 2)
    buy_order = np.argsort(keys[~view], kind="stable")
    buy_keys = keys[~view][buy_order]
    buy_ts, buy_amount = ts[~view][buy_order], amount[~view][buy_order]
    view_keys = keys[view]
    low = np.searchsorted(buy_keys, view_keys, side="left")
    high = np.searchsorted(buy_keys, view_keys + upper_ms, side="right")
    counts = high - low
    which = np.repeat(np.arange(len(view_keys)), counts)
    starts = np.repeat(low - np.cumsum(counts) + counts, counts)
    matched = starts + np.arange(len(which))
    rows = np.column_stack([user[view][which], ts[view][which], amount[view][which],
                            buy_ts[matched], buy_amount[matched]])
    return _sorted(rows)


def read_pairs(paths: Iterable[Path]) -> tuple[Pairs, int]:
    """The pair rows of output files, and how many of them are the end record's (left out)."""
    parts: list[np.ndarray] = []
    ends = 0
    for path in paths:
        table = pq.read_table(path)
        missing = [c for c in OUTPUT_COLUMNS if c not in table.schema.names]
        if missing:
            raise ValueError(f"{path.name}: no column {', '.join(missing)}")
        users = table["user"]
        end = np.asarray(pa.compute.equal(users, END_USER).to_numpy(zero_copy_only=False),
                         dtype=bool)
        ends += int(end.sum())
        columns = [user_ids(users).astype(np.int64),
                   *(table[c].to_numpy().astype(np.int64) for c in OUTPUT_COLUMNS[1:])]
        parts.append(np.column_stack(columns)[~end])
    if not parts:
        return np.zeros((0, len(OUTPUT_COLUMNS)), dtype=np.int64), ends
    return _sorted(np.concatenate(parts)), ends


def check_pairs(expected: Pairs, output: Pairs) -> list[str]:
    """What is wrong with ``output`` against the reference (both sorted): pairs
    missing, extra or emitted twice. Empty when the output is exactly the reference."""
    if len(expected) == len(output) and np.array_equal(expected, output):
        return []
    problems: list[str] = []
    rows = [tuple(r) for r in output.tolist()]
    if len(set(rows)) < len(rows):
        problems.append(f"{len(rows) - len(set(rows)):,} pairs emitted more than once")
    want = {tuple(r) for r in expected.tolist()}
    missing = len(want - set(rows))
    extra = len(set(rows) - want)
    if missing:
        problems.append(f"{missing:,} of {len(expected):,} pairs missing")
    if extra:
        problems.append(f"{extra:,} pairs the input does not have")
    return problems or ["the pairs differ"]


def _check(side: str, problems: list[str]) -> None:
    if problems:
        raise BenchmarkError(benchmark=NAME, problem=f"{side}: the output does not match the "
                                                     f"reference; " + "; ".join(problems))


# ---------------------------------------------------------------------- ours


def ours_run(*, generated: Generated, work: Path, scale: Scale, expected: Pairs,
             repetition: int) -> dict[str, Any]:
    output = work / f"ours-out-{repetition}"
    output.mkdir()
    run: DriverRun = run_driver(
        name=f"{NAME}-ours", entrypoint=ENTRYPOINT,
        args={"input": str(generated.paths[0].parent), "output": str(output),
              "max_delay": f"{scale.watermark_delay_ms}ms", "upper_ms": UPPER_MS,
              "batch_size": scale.batch_size},
        parallelism=scale.parallelism, checkpoint_interval=CHECKPOINT_INTERVAL,
        timeout=scale.timeout)
    reads = READS * scale.spec.records
    if run.records != reads:
        raise BenchmarkError(benchmark=NAME, problem=f"ours read {run.records:,} records, "
                                                     f"not the input's twice ({reads:,})")
    pairs, _ = read_pairs(ours_committed(output))
    remove_dir(output)
    _check("ours", check_pairs(expected, pairs))
    t = run.timeline
    whole_s = float(t["doneAt"]) - float(t.get("firstReadyAt") or t["firstRecordAt"])
    checkpoints = run.status.get("checkpoints", {})
    return {"records": run.records, "steady_seconds": run.processing_seconds(),
            "steady_records_per_second": run.records_per_second(),
            "whole_seconds": whole_s, "whole_records_per_second": run.records / whole_s,
            "pairs": len(pairs),
            "checkpoints_completed": int(checkpoints.get("completed", 0)),
            "checkpoint_duration_ms_p50": checkpoints.get("durationMsP50"),
            "checkpoint_duration_ms_p99": checkpoints.get("durationMsP99"),
            "wall_seconds": run.wall_seconds, "matches_reference": True}


# ---------------------------------------------------------------------- Structured Streaming


def ss_tune(*, ss_input: Path, work: Path, scale: Scale, search: str) -> Tuning:
    return baseline_tune("bench.joins_ss", benchmark=NAME, ss_input=ss_input, work=work,
                         scale=scale, search=search, start=TUNE_START)


def ss_run(*, ss_input: Path, work: Path, scale: Scale, max_files: int, expected: Pairs,
           repetition: int) -> dict[str, Any]:
    output = work / f"ss-out-{repetition}-{max_files}"
    checkpoint = work / f"ss-checkpoint-{repetition}-{max_files}"
    output.mkdir()
    line = ss_step("bench.joins_ss", "run", benchmark=NAME, ss_input=ss_input, work=work,
                   scale=scale, log=work / f"ss-run-{repetition}-{max_files}.log", prefix=RESULT_PREFIX,
               extra=["--max-files", str(max_files), "--output", str(output),
                      "--checkpoint", str(checkpoint), "--launched-at", f"{time.time():.3f}"])
    try:
        run = parse(line)
    except (ValueError, KeyError) as exc:
        raise BenchmarkError(benchmark=NAME, problem=f"unreadable Structured Streaming "
                                                     f"result: {exc}") from None
    pairs, ends = read_pairs(spark_committed(output))
    remove_dir(output)
    remove_dir(checkpoint)
    _check("Structured Streaming", check_pairs(expected, pairs))
    records, seconds = steady(run, warmup=SS_WARMUP_BATCHES)
    batches = list(run.batches)
    whole_s = batches[-1].ended_at - batches[0].started_at
    data = [b for b in batches if b.rows > 0]
    kept = sorted(b.duration_ms for b in data[SS_WARMUP_BATCHES:]) or [float("nan")]
    return {"records": run.records - READS, "max_files_per_trigger": max_files,
            "records_per_batch": READS * max_files * scale.spec.file_records,
            "batches": len(batches), "data_batches": len(data),
            "steady_records": records, "steady_seconds": seconds,
            "steady_records_per_second": records / seconds if seconds else float("nan"),
            "whole_seconds": whole_s,
            "whole_records_per_second": READS * scale.spec.records / whole_s,
            "median_batch_ms": kept[len(kept) // 2],
            "state_rows_max": max((b.state_rows or 0 for b in batches), default=0),
            "pairs": len(pairs), "end_record_rows": ends, "matches_reference": True,
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
             f"{len(expected):,} pairs in the reference")
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
    return report(scale=scale, generated=generated, reference_pairs=len(expected),
                  tunings=tunings, max_files=max_files, runs=runs,
                  minutes=(time.monotonic() - started) / 60.0)


def report(*, scale: Scale, generated: Generated, reference_pairs: int,
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
    title = (f"joins: {spec.records:,} records read by each side, {spec.keys:,} users, "
             f"views and buys within {UPPER_MS} ms ({reference_pairs:,} pairs), disorder "
             f"<= {spec.disorder_ms / 1000:g} s, watermark {scale.watermark_delay_s:g} s, "
             f"parallelism {scale.parallelism}, {len(runs)} repetition(s); SS "
             f"maxFilesPerTrigger {fastest} at its fastest ({fastest * spec.file_records:,} "
             f"records per reader), {at_interval} at 1 s batches")
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
                  "disorder_ms": spec.disorder_ms, "seed": spec.seed, "upper_ms": UPPER_MS,
                  "watermark_delay_s": scale.watermark_delay_s,
                  "parallelism": scale.parallelism, "repeat": scale.repeat,
                  "ours_source_batch_size": scale.batch_size},
        "input": {"bytes": generated.bytes, "generate_seconds": generated.seconds,
                  "max_ts": generated.max_ts, "reference_pairs": reference_pairs},
        "checkpoint_interval_s": CHECKPOINT_INTERVAL,
        "structured_streaming": {
            "operator": "stream-stream inner join, event-time interval, both watermarked",
            "sink": "parquet file sink (exactly-once), append mode",
            "state_store": "HDFS-backed (Spark's default; 3.9x the RocksDB store here)",
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
        "joins_throughput_ratio_vs_structured_streaming": target_entry(
            value=ratio, target=TARGET_RATIO, met=met, baseline=ss_rate,
            unit="x (ours interval_join / SS stream-stream join, steady records/s read by "
                 "both sides, both exactly-once Parquet files)",
            note=f"ours {ours_rate:,.0f} records/s; {spec.records:,} records, "
                 f"{spec.keys:,} users, {reference_pairs:,} pairs; SS at its fastest, "
                 f"maxFilesPerTrigger {fastest}; whole input {whole_ratio:.2f}x; at 1 s "
                 f"batches ({at_interval} files) {interval_ratio:.2f}x"),
    })
    return data


def _plot(runs: list[dict[str, Any]]) -> None:
    rate_bars(runs, name=NAME, title=f"views joined with buys within {UPPER_MS} ms",
              ours="ours, interval_join (vectorised)", baseline="SS, stream-stream join")
