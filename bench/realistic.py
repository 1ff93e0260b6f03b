"""A realistic keyed aggregation: count, sum and mean per string user over Zipf-skewed
Parquet and JSON-lines files, exactly-once to Parquet; ours against Structured
Streaming, and against the in-process limit.

The input (:mod:`bench.realistic_data`), generated once per run from a fixed seed: N
records (default 20,000,000), the same records written as Parquet and as JSON lines,
of one of two datasets (``--dataset``). ``clicks``: files of 200,000 records in row
groups of 65,536, each record a ``user`` string (``"u-3f9a1c27d1"``) drawn from K users
(default 1,000,000) by a truncated Zipf law of exponent 1.1 (the popular users spread
over the ids by a fixed permutation), an integer ``amount`` (1..1000), an increasing
``ts`` (epoch ms) and a ``page`` string of 50 values. ``orders``: heavier skew (Zipf
1.4), float amounts (prices in cents), files of 1,000,000 records in one row group.
Both sides compute ``count``, ``sum(amount)`` and ``mean(amount)`` per user, emit the
updated aggregates of the keys each step changed, and write them to exactly-once
Parquet files; every format is measured on its own.

* **ours** (``bench.realistic_job:per_user_totals``): ``sources.files(format="parquet"
  | "jsonl")`` (its batch size the pipeline's own), ``key_by("user").aggregate(
  n="count", total=("sum", "amount"), avg=("mean", "amount"))``,
  ``sinks.files(format="parquet")``; parallelism 2, checkpoints every 1 s, run by
  ``python -m job_runtime run``. Nothing is tuned.
* **Structured Streaming** (:mod:`bench.realistic_ss`): ``readStream.format("parquet"
  | "json")`` with the input's schema and ``maxFilesPerTrigger``, ``groupBy("user")
  .agg(count, sum, avg)``, update mode, ``foreachBatch`` writing each batch's rows as
  Parquet to ``batch=<id>`` with mode overwrite (the documented way to make an
  update-mode query's file output exactly-once: a replayed batch rewrites its own
  folder), the RocksDB state store with changelog checkpointing, ``local[2]``, 2 shuffle
  partitions, files split across both cores (``spark.sql.files.openCostInBytes`` 1
  MiB), batches back to back. Two baselines per format, each with its own
  ``maxFilesPerTrigger``: **at its fastest** (the headline;
  :class:`bench.batch_size_search.ThroughputSearch`: doubled until the rate rises by
  less than 5%, up to a quarter of the input), and **at an equal checkpoint interval**
  (the ``throughput`` benchmark's search: the fastest size whose batches, its
  checkpoints, fit 1 s, our checkpoint interval), a second, labelled row.
  ``--max-files`` skips both searches and measures that size once, for both rows.
  And at matched freshness (``--freshness``): ours with checkpoints every 5 and 10 s
  against Structured Streaming's rate at batches of 5 and 10 s, read off the curve of
  every size its searches measured (:mod:`bench.freshness`).
* **the in-process limit**: in the benchmark's own process, on one thread (Arrow's
  pools held to one thread), every file read with Arrow and grouped by ``user``
  (``Table.group_by``), the per-file partials merged by one more group-by: the whole
  computation with reading included but no exchange, no state store, no checkpoint
  and no output. Its rate on one core, doubled, is the two-core limit ours is held to.

Every output is checked against a reference computed with Arrow from the files (every
user of the input, no other, each user's last row with the exact count and sum and
the mean within 1e-9); so is the in-process limit's result, per format (the JSON files
hold the Parquet files' records). A mismatch fails the run.

Rates, records per second. Steady: ours, the input's records over the time from the
first subtask being ready to the last record the keyed stage processed; Structured
Streaming, ``numInputRows / triggerExecution`` summed over the measured query's
batches after two warm-up batches, a last partial batch left out. Whole input: the
input's records over, ours, the first subtask being ready to the job's end (the final
checkpoint committed the output); Structured Streaming, the measured query's first
batch start to its last batch end (its JVM started and warmed by an earlier query in
the same process, the first batch of a fresh checkpoint included). Repetitions
alternate ours and Structured Streaming (its fastest, then at the interval); ratios
are per repetition, reported as medians.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench.baselines import (
    BASELINE_KEYS,
    BASELINES,
    SUFFIXES,
    add_ratios,
    measure,
    run_median,
    search_sizes,
)
from bench.common import (
    BenchmarkError,
    DriverRun,
    env_int,
    fresh_dir,
    median,
    plot_path,
    print_table,
    pyplot,
    remove_dir,
    run_driver,
    run_ss_step,
    target_entry,
    update_summary,
    write_result,
)
from bench.freshness import INTERVALS, CurvePoint, RateAt, curve, rate_at
from bench.realistic_data import (
    FORMATS,
    Dataset,
    DataSpec,
    Generated,
    Limit,
    check_totals,
    dataset_spec,
    generate,
    in_process_limit,
    link_input,
    ours_output,
    read_output,
    reference,
    spark_output,
)
from bench.ss_results import (
    TUNED_PREFIX,
    ResultFormatError,
    Tuning,
    parse_tuning,
    tuning_record,
)
from bench.windows import steady
from bench.windows_ss import RESULT_PREFIX, parse

NAME = "realistic"
ENTRYPOINT = "bench.realistic_job:per_user_totals"
TARGET_STEADY = 5.0
"""Ours >= 5x Structured Streaming's steady records/s."""
TARGET_WHOLE = 3.0
"""Ours >= 3x Structured Streaming's records/s over the whole input."""
TARGET_LIMIT = 0.5
"""Ours >= half the two-core in-process limit."""
CHECKPOINT_INTERVAL = 1.0
SS_WARMUP_BATCHES = 2
TUNE_START = 500_000
"""The first batch size (records) both searches try, as ``throughput``'s."""
QUICK = (400_000, 20_000, 20_000)
"""``--quick``: records, keys and file records."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Scale:
    spec: DataSpec
    dataset: Dataset = Dataset.CLICKS
    formats: tuple[str, ...]
    parallelism: int
    repeat: int
    max_files: int | None
    timeout: float
    freshness: tuple[float, ...] = ()
    """Our checkpoint intervals (seconds) besides the 1 s one, each measured against
    Structured Streaming's batches of that length (:mod:`bench.freshness`)."""

    @property
    def result_name(self) -> str:
        """Its result file's and pictures' name: one per dataset."""
        return NAME if self.dataset is Dataset.CLICKS else f"{NAME}-{self.dataset}"

    @property
    def summary_prefix(self) -> str:
        return NAME if self.dataset is Dataset.CLICKS else f"{NAME}_{self.dataset}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--records", type=int,
                        default=env_int("BENCH_REALISTIC_RECORDS", 20_000_000),
                        help="records of the input (default 20,000,000)")
    parser.add_argument("--dataset", default=str(Dataset.CLICKS),
                        help="the input's shape: clicks (Zipf 1.1 over 1M users, integer "
                             "amounts, files of 200,000 records in row groups of 65,536; the "
                             "default) or orders (Zipf 1.4, float amounts, files of 1,000,000 "
                             "records, each one row group)")
    parser.add_argument("--keys", type=int, default=None,
                        help="distinct users, Zipf-distributed (default 1,000,000)")
    parser.add_argument("--file-records", type=int, default=None,
                        help="records per input file: Structured Streaming's batch size is "
                             "a number of files (default: the dataset's)")
    parser.add_argument("--formats", default=",".join(FORMATS),
                        help=f"input formats measured, comma-separated (default "
                             f"{','.join(FORMATS)})")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=env_int("BENCH_REPEAT", 3))
    parser.add_argument("--max-files", type=int, default=None,
                        help="Structured Streaming maxFilesPerTrigger for both baselines, "
                             "instead of their searches")
    parser.add_argument("--freshness", default=",".join(f"{t:g}" for t in INTERVALS),
                        help="checkpoint intervals (seconds, comma-separated) at which ours is "
                             "held against Structured Streaming's batches of the same length, "
                             "read off its search's rate-versus-batch-time curve (default "
                             f"{','.join(f'{t:g}' for t in INTERVALS)}; not with --max-files, "
                             "which measures no curve)")
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds allowed to each run (default 1800)")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke scale: {QUICK[0]:,} records of {QUICK[1]:,} users in "
                             f"files of {QUICK[2]:,}, one repetition")


def resolve_scale(ns: argparse.Namespace) -> Scale:
    if ns.quick:
        (ns.records, ns.keys, ns.file_records), ns.repeat = QUICK, 1
    formats = tuple(f.strip() for f in str(ns.formats).split(",") if f.strip())
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats or len(set(formats)) != len(formats):
        raise BenchmarkError(benchmark=NAME, problem=f"--formats takes some of "
                                                     f"{', '.join(FORMATS)}, each once; got "
                                                     f"{ns.formats!r}")
    try:
        dataset = Dataset(ns.dataset)
    except ValueError:
        raise BenchmarkError(benchmark=NAME, problem=f"--dataset takes one of "
                                                     f"{', '.join(Dataset)}; got "
                                                     f"{ns.dataset!r}") from None
    try:
        spec = dataset_spec(dataset, records=ns.records, keys=ns.keys,
                            file_records=ns.file_records)
    except ValueError as exc:
        raise BenchmarkError(benchmark=NAME, problem=str(exc)) from None
    if spec.files < 2 * (1 + 3) or ns.repeat < 1 or ns.parallelism < 1:
        raise BenchmarkError(benchmark=NAME, problem="the input needs at least 8 files "
                                                     "(--records / --file-records), and "
                                                     "--repeat and --parallelism >= 1")
    if ns.max_files is not None and ns.max_files < 1:
        raise BenchmarkError(benchmark=NAME, problem="--max-files must be at least 1")
    refused = BenchmarkError(benchmark=NAME, problem=f"--freshness takes positive seconds, "
                                                     f"comma-separated; got {ns.freshness!r}")
    try:
        freshness = tuple(sorted({float(t) for t in str(ns.freshness).split(",") if t.strip()}))
    except ValueError:
        raise refused from None
    if any(t <= 0 for t in freshness):
        raise refused
    extra = () if ns.max_files is not None else tuple(
        t for t in freshness if t != CHECKPOINT_INTERVAL)
    return Scale(spec=spec, dataset=dataset, formats=formats, parallelism=ns.parallelism,
                 repeat=ns.repeat, max_files=ns.max_files, timeout=ns.timeout, freshness=extra)


def _log(message: str) -> None:
    print(f"[{NAME}] {message}", file=sys.stderr, flush=True)


def _log_format(fmt: str, message: str) -> None:
    _log(f"{fmt}: {message}")


def _check(side: str, problems: list[str]) -> None:
    if problems:
        raise BenchmarkError(benchmark=NAME, problem=f"{side}: the output does not match the "
                                                     f"reference; " + "; ".join(problems))


# ---------------------------------------------------------------------- ours


def ours_run(*, generated: Generated, fmt: str, work: Path, scale: Scale, expected: pa.Table,
             repetition: int, interval: float = CHECKPOINT_INTERVAL) -> dict[str, Any]:
    output = work / f"ours-{fmt}-{repetition}-{interval:g}s"
    output.mkdir()
    run: DriverRun = run_driver(
        name=f"{NAME}-ours", entrypoint=ENTRYPOINT,
        args={"input": str(generated.directory(fmt)), "format": fmt, "output": str(output)},
        parallelism=scale.parallelism, checkpoint_interval=interval,
        timeout=scale.timeout)
    if run.records != scale.spec.records:
        raise BenchmarkError(benchmark=NAME, problem=f"ours ({fmt}) read {run.records:,} "
                                                     f"records of the input's "
                                                     f"{scale.spec.records:,}")
    checkpoints = run.status.get("checkpoints", {})
    completed = int(checkpoints.get("completed", 0))
    if completed < 1:
        raise BenchmarkError(benchmark=NAME, problem=f"ours ({fmt}) completed no checkpoint")
    files = ours_output(output)
    rows = read_output(files)
    remove_dir(output)
    _check(f"ours ({fmt})", check_totals(expected, rows,
                                         total_tolerance=scale.spec.total_tolerance))
    t = run.timeline
    start = float(t.get("firstReadyAt") or t["firstRecordAt"])
    whole_s = float(t["doneAt"]) - start
    end_to_end_s = float(t["doneAt"]) - run.launched_at
    return {"records": run.records, "checkpoint_interval_s": interval,
            "steady_seconds": run.processing_seconds(),
            "steady_records_per_second": run.records_per_second(),
            "whole_seconds": whole_s, "whole_records_per_second": run.records / whole_s,
            "end_to_end_seconds": end_to_end_s,
            "start_up_seconds": start - run.launched_at,
            "shut_down_seconds": run.wall_seconds - end_to_end_s,
            "output_rows": rows.num_rows, "output_files": len(files),
            "checkpoints_completed": completed,
            "checkpoint_duration_ms_p50": checkpoints.get("durationMsP50"),
            "checkpoint_duration_ms_p99": checkpoints.get("durationMsP99"),
            "wall_seconds": run.wall_seconds, "matches_reference": True}


# ---------------------------------------------------------------------- Structured Streaming


def _ss_command(mode: str, *, ss_input: Path, fmt: str, scale: Scale, work: Path,
                extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "bench.realistic_ss", mode, "--input", str(ss_input),
            "--format", fmt, "--records", str(scale.spec.records),
            "--file-records", str(scale.spec.file_records),
            "--parallelism", str(scale.parallelism), "--work", str(work),
            "--timeout", str(scale.timeout),
            *(["--float-amounts"] if scale.spec.float_amounts else []), *extra]


def _ss_process(command: list[str], *, log: Path, scale: Scale, prefix: str) -> str:
    return run_ss_step(command, benchmark=NAME, what=f"{command[3]}, {command[7]}", log=log, cwd=log.parent,
                       timeout=scale.timeout * 2, prefix=prefix)


def ss_tune(*, ss_input: Path, fmt: str, work: Path, scale: Scale, search: str) -> Tuning:
    line = _ss_process(_ss_command("tune", ss_input=ss_input, fmt=fmt, scale=scale, work=work,
                                   extra=["--start", str(TUNE_START), "--search", search]),
                       log=work / f"ss-tune-{fmt}-{search}.log", scale=scale,
                       prefix=TUNED_PREFIX)
    try:
        return parse_tuning(line)
    except ResultFormatError as exc:
        raise BenchmarkError(benchmark=NAME, problem=str(exc)) from None


def ss_run(*, ss_input: Path, fmt: str, work: Path, scale: Scale, max_files: int,
           expected: pa.Table, repetition: int) -> dict[str, Any]:
    output = work / f"ss-out-{fmt}-{repetition}-{max_files}"
    checkpoint = work / f"ss-checkpoint-{fmt}-{repetition}-{max_files}"
    output.mkdir()
    command = _ss_command("run", ss_input=ss_input, fmt=fmt, scale=scale, work=work, extra=[
        "--max-files", str(max_files), "--output", str(output),
        "--checkpoint", str(checkpoint), "--launched-at", f"{time.time():.3f}"])
    line = _ss_process(command, log=work / f"ss-run-{fmt}-{repetition}-{max_files}.log",
                       scale=scale,
                       prefix=RESULT_PREFIX)
    try:
        run = parse(line)
    except (ValueError, KeyError) as exc:
        raise BenchmarkError(benchmark=NAME, problem=f"unreadable Structured Streaming "
                                                     f"result: {exc}") from None
    if run.records != scale.spec.records:
        raise BenchmarkError(benchmark=NAME, problem=f"Structured Streaming ({fmt}) read "
                                                     f"{run.records:,} records of the "
                                                     f"input's {scale.spec.records:,}")
    files = spark_output(output)
    rows = read_output(files)
    remove_dir(output)
    remove_dir(checkpoint)
    _check(f"Structured Streaming ({fmt})",
           check_totals(expected, rows, total_tolerance=scale.spec.total_tolerance))
    records, seconds = steady(run, warmup=SS_WARMUP_BATCHES)
    data = [b for b in run.batches if b.rows > 0]
    whole_s = data[-1].ended_at - data[0].started_at
    # Its session's start, then the measured query from its first batch to its last
    # (its JVM warmed by the warm-up query between them, which only favours it).
    start_up_s = run.spark_ready_at - run.launched_at
    kept = sorted(b.duration_ms for b in data[SS_WARMUP_BATCHES:]) or [float("nan")]
    return {"records": run.records, "max_files_per_trigger": max_files,
            "records_per_batch": max_files * scale.spec.file_records,
            "batches": len(run.batches), "data_batches": len(data),
            "steady_records": records, "steady_seconds": seconds,
            "steady_records_per_second": records / seconds if seconds else float("nan"),
            "whole_seconds": whole_s,
            "whole_records_per_second": scale.spec.records / whole_s,
            "start_up_seconds": start_up_s,
            "end_to_end_seconds": start_up_s + whole_s,
            "median_batch_ms": kept[len(kept) // 2],
            "state_rows_max": max((b.state_rows or 0 for b in run.batches), default=0),
            "output_rows": rows.num_rows, "output_files": len(files),
            "matches_reference": True,
            "batch_ms": [b.duration_ms for b in run.batches],
            "batch_rows": [b.rows for b in run.batches]}


# ---------------------------------------------------------------------- the benchmark


def _limit(generated: Generated, fmt: str, expected: pa.Table, spec: DataSpec) -> Limit:
    limit, totals = in_process_limit(generated.paths[fmt], fmt, schema=spec.schema)
    problems = check_totals(expected, totals, total_tolerance=spec.total_tolerance)
    if problems:
        raise BenchmarkError(benchmark=NAME, problem=f"the {fmt} files do not hold the "
                                                     f"reference's records: "
                                                     + "; ".join(problems))
    return limit


def run(ns: argparse.Namespace) -> dict[str, Any]:
    scale = resolve_scale(ns)
    spec = scale.spec
    work = fresh_dir(scale.result_name)
    started = time.monotonic()
    tunings: dict[str, dict[str, Tuning | None]] = {}
    max_files: dict[str, dict[str, int]] = {}
    limits: dict[str, Limit] = {}
    runs: dict[str, list[dict[str, Any]]] = {fmt: [] for fmt in scale.formats}
    try:
        _log(f"generating {spec.records:,} records of {spec.keys:,} users in {spec.files:,} "
             f"files per format ({', '.join(scale.formats)})")
        generated = generate(work / "input", spec, scale.formats)
        expected = reference(generated.paths[scale.formats[0]], scale.formats[0],
                             schema=spec.schema)
        sizes = ", ".join(f"{fmt} {generated.bytes[fmt] / 2**20:,.0f} MiB"
                          for fmt in scale.formats)
        _log(f"generated {sizes} in {generated.seconds:.0f} s; {expected.num_rows:,} users "
             f"in the reference")
        for fmt in scale.formats:
            limits[fmt] = _limit(generated, fmt, expected, spec)
            _log(f"in-process limit, {fmt}, one core: "
                 f"{limits[fmt].records_per_second:,.0f} records/s")
        for fmt in scale.formats:
            ss_input = link_input(work / "ss-input" / fmt, generated.paths[fmt])
            tunings[fmt], max_files[fmt] = search_sizes(
                functools.partial(ss_tune, ss_input=ss_input, fmt=fmt, work=work, scale=scale),
                given=scale.max_files, file_records=spec.file_records,
                log=functools.partial(_log_format, fmt))
            for repetition in range(scale.repeat):
                _log(f"{fmt}, repetition {repetition + 1}/{scale.repeat}: ours")
                ours = ours_run(generated=generated, fmt=fmt, work=work, scale=scale,
                                expected=expected, repetition=repetition)
                _log(f"ours: {ours['steady_records_per_second']:,.0f} records/s steady, "
                     f"{ours['whole_records_per_second']:,.0f} whole input; output checked")
                at_intervals: dict[str, dict[str, Any]] = {}
                for interval in scale.freshness:
                    _log(f"{fmt}: ours with checkpoints every {interval:g} s")
                    at_intervals[f"{interval:g}"] = ours_run(
                        generated=generated, fmt=fmt, work=work, scale=scale,
                        expected=expected, repetition=repetition, interval=interval)
                measured = measure(
                    functools.partial(ss_run, ss_input=ss_input, fmt=fmt, work=work,
                                      scale=scale, expected=expected, repetition=repetition),
                    max_files=max_files[fmt], log=functools.partial(_log_format, fmt))
                entry = repetition_entry(
                    ours=ours, fastest=measured[BASELINE_KEYS["throughput"]],
                    interval=measured[BASELINE_KEYS["interval"]],
                    two_cores=2 * limits[fmt].records_per_second)
                if at_intervals:
                    entry["ours_at_intervals"] = at_intervals
                runs[fmt].append(entry)
    finally:
        remove_dir(work)
    return report(scale=scale, generated=generated, reference_users=expected.num_rows,
                  limits=limits, tunings=tunings, max_files=max_files, runs=runs,
                  minutes=(time.monotonic() - started) / 60.0)


def repetition_entry(*, ours: dict[str, Any], fastest: dict[str, Any],
                     interval: dict[str, Any], two_cores: float) -> dict[str, Any]:
    """One repetition: both sides' runs and the ratios against each baseline."""
    entry: dict[str, Any] = {"ours": ours, BASELINE_KEYS["throughput"]: fastest,
                             BASELINE_KEYS["interval"]: interval}
    add_ratios(entry, ours=ours)
    for search in BASELINES:
        ss = entry[BASELINE_KEYS[search]]
        entry[f"ratio_end_to_end{SUFFIXES[search]}"] = (ss["end_to_end_seconds"]
                                                        / ours["end_to_end_seconds"])
    entry["fraction_of_limit"] = ours["steady_records_per_second"] / two_cores
    return entry


@dataclasses.dataclass(frozen=True, kw_only=True)
class FormatResult:
    """Medians of one format's repetitions; ``ss_*`` is Structured Streaming at its
    fastest (the headline), ``*_at_interval`` at the fastest size that fits 1 s."""

    ours_steady: float
    ss_steady: float
    ratio_steady: float
    ours_whole: float
    ss_whole: float
    ratio_whole: float
    ss_steady_at_interval: float
    ratio_steady_at_interval: float
    ss_whole_at_interval: float
    ratio_whole_at_interval: float
    ours_end_to_end_s: float
    ss_end_to_end_s: float
    ratio_end_to_end: float
    ours_start_up_s: float
    ours_shut_down_s: float
    ours_output_rows: float
    ss_output_rows: float
    ours_rows_per_checkpoint: float
    ss_rows_per_batch: float
    limit_one_core: float
    fraction_of_limit: float

    @property
    def limit_two_cores(self) -> float:
        return 2 * self.limit_one_core


def summarize(runs: list[dict[str, Any]], limit: Limit) -> FormatResult:
    return FormatResult(
        ours_steady=run_median(runs, "ours", "steady_records_per_second"),
        ss_steady=run_median(runs, "structured_streaming", "steady_records_per_second"),
        ratio_steady=median(r["ratio_steady"] for r in runs),
        ours_whole=run_median(runs, "ours", "whole_records_per_second"),
        ss_whole=run_median(runs, "structured_streaming", "whole_records_per_second"),
        ratio_whole=median(r["ratio_whole"] for r in runs),
        ss_steady_at_interval=run_median(runs, BASELINE_KEYS["interval"], "steady_records_per_second"),
        ratio_steady_at_interval=median(r["ratio_steady_at_interval"] for r in runs),
        ss_whole_at_interval=run_median(runs, BASELINE_KEYS["interval"], "whole_records_per_second"),
        ratio_whole_at_interval=median(r["ratio_whole_at_interval"] for r in runs),
        ours_end_to_end_s=run_median(runs, "ours", "end_to_end_seconds"),
        ss_end_to_end_s=run_median(runs, "structured_streaming", "end_to_end_seconds"),
        ratio_end_to_end=median(r["ratio_end_to_end"] for r in runs),
        ours_start_up_s=run_median(runs, "ours", "start_up_seconds"),
        ours_shut_down_s=run_median(runs, "ours", "shut_down_seconds"),
        ours_output_rows=run_median(runs, "ours", "output_rows"),
        ss_output_rows=run_median(runs, "structured_streaming", "output_rows"),
        ours_rows_per_checkpoint=median(
            r["ours"]["output_rows"] / max(1, r["ours"]["checkpoints_completed"])
            for r in runs),
        ss_rows_per_batch=median(
            r["structured_streaming"]["output_rows"]
            / max(1, r["structured_streaming"]["data_batches"]) for r in runs),
        limit_one_core=limit.records_per_second,
        fraction_of_limit=median(r["fraction_of_limit"] for r in runs))


@dataclasses.dataclass(frozen=True, kw_only=True)
class FreshnessRow:
    """Ours with checkpoints every ``interval`` seconds against Structured Streaming
    with batches of that length, read off its search's curve."""

    interval: float
    ours_steady: float
    ss: RateAt

    @property
    def ratio(self) -> float | None:
        rate = self.ss.records_per_second
        return None if rate is None else self.ours_steady / rate


def searches_curve(tunings: dict[str, Tuning | None]) -> tuple[CurvePoint, ...]:
    """Structured Streaming's rate against its batch time: every size both of its
    searches measured (none without a search)."""
    return curve(p for t in tunings.values() if t is not None for p in t.points)


def freshness_rows(runs: list[dict[str, Any]], ss_curve: tuple[CurvePoint, ...],
                   intervals: tuple[float, ...]) -> list[FreshnessRow]:
    """One row per extra interval of ours, against ``ss_curve`` at that batch time."""
    if not ss_curve or not intervals:
        return []
    return [FreshnessRow(interval=t,
                         ours_steady=median(r["ours_at_intervals"][f"{t:g}"]
                                            ["steady_records_per_second"] for r in runs),
                         ss=rate_at(ss_curve, t))
            for t in intervals]


def _baseline_text(fmt: str, search: str, tuning: Tuning | None, max_files: int,
                   file_records: int) -> str:
    goal = ("its fastest: doubled until the rate rises by less than 5%, up to a quarter "
            "of the input" if search == "throughput" else
            f"the fastest whose batches fit {CHECKPOINT_INTERVAL:g} s, our checkpoint "
            f"interval (the throughput benchmark's search)")
    how = ("given by --max-files" if tuning is None else
           f"searched for {goal} (two passes; {len(tuning.points)} size(s) measured in the "
           f"second, which decides)")
    return (f"Structured Streaming, {fmt}: maxFilesPerTrigger {max_files} "
            f"({max_files * file_records:,} records per batch), {how}; RocksDB state store "
            f"with changelog checkpointing, local[2], 2 shuffle partitions, update mode, "
            f"foreachBatch Parquet per batch id with mode overwrite")



def report(*, scale: Scale, generated: Generated, reference_users: int,
           limits: dict[str, Limit], tunings: dict[str, dict[str, Tuning | None]],
           max_files: dict[str, dict[str, int]], runs: dict[str, list[dict[str, Any]]],
           minutes: float) -> dict[str, Any]:
    spec = scale.spec
    results = {fmt: summarize(runs[fmt], limits[fmt]) for fmt in scale.formats}
    curves = {fmt: searches_curve(tunings[fmt]) for fmt in scale.formats}
    freshness = {fmt: freshness_rows(runs[fmt], curves[fmt], scale.freshness)
                 for fmt in scale.formats}
    rows: list[list[Any]] = []
    for fmt, res in results.items():
        rows += [
            [f"{fmt}: records/s, steady, SS at its fastest", res.ours_steady, res.ss_steady,
             res.ratio_steady, f">= {TARGET_STEADY:g}x", res.ratio_steady >= TARGET_STEADY],
            [f"{fmt}: records/s, whole input, SS at its fastest", res.ours_whole, res.ss_whole,
             res.ratio_whole, "-", None],
            [f"{fmt}: seconds end to end (command start to output committed), SS at its "
             f"fastest", res.ours_end_to_end_s, res.ss_end_to_end_s, res.ratio_end_to_end,
             f">= {TARGET_WHOLE:g}x", res.ratio_end_to_end >= TARGET_WHOLE],
            [f"{fmt}: ours' start-up (command to first subtask ready) and shutdown (output "
             f"committed to exit), seconds", res.ours_start_up_s, res.ours_shut_down_s, None,
             "-", None],
            [f"{fmt}: records/s, steady, SS at an equal checkpoint interval",
             res.ours_steady, res.ss_steady_at_interval, res.ratio_steady_at_interval, "-",
             None],
            [f"{fmt}: records/s, whole input, SS at an equal checkpoint interval",
             res.ours_whole, res.ss_whole_at_interval, res.ratio_whole_at_interval, "-",
             None],
            *([f"{fmt}: records/s, steady, ours checkpointing every {row.interval:g} s, SS "
               f"with batches of {row.interval:g} s ({row.ss.reading})", row.ours_steady,
               row.ss.records_per_second, row.ratio, "-", None]
              for row in freshness[fmt]),
            [f"{fmt}: output rows, every update (ours / SS at its fastest)",
             res.ours_output_rows, res.ss_output_rows, None, "-", None],
            [f"{fmt}: output rows per checkpoint (ours, 1 s) / per batch (SS at its "
             f"fastest): users updated per step", res.ours_rows_per_checkpoint,
             res.ss_rows_per_batch, None, "-", None],
            [f"{fmt}: in-process limit, 1 core", res.limit_one_core, None, None, "-", None],
            [f"{fmt}: steady vs in-process limit, 2 cores", res.ours_steady,
             res.limit_two_cores, res.fraction_of_limit, f">= {TARGET_LIMIT:g}",
             res.fraction_of_limit >= TARGET_LIMIT],
        ]
    repetitions = min(len(r) for r in runs.values())
    batches = ", ".join(f"{fmt} {m['throughput']} (fastest) and {m['interval']} (1 s)"
                        for fmt, m in max_files.items())
    amounts = "float" if spec.float_amounts else "integer"
    title = (f"realistic, {scale.dataset}: {spec.records:,} records, {spec.keys:,} users at "
             f"Zipf {spec.skew:g} ({reference_users:,} present), {amounts} amounts, row "
             f"groups of {spec.row_group_rows:,}, count+sum+mean per user, parallelism "
             f"{scale.parallelism}, {repetitions} repetition(s); SS maxFilesPerTrigger "
             f"{batches} (files of {spec.file_records:,})")
    table = print_table(title, ["metric", "ours", "SS / limit", "ratio", "target", "met"],
                        rows)
    _plot(results, name=scale.result_name, dataset=scale.dataset)
    if any(freshness.values()):
        _plot_freshness(results, curves, freshness, name=scale.result_name)
    data = {
        "scale": {**dataclasses.asdict(spec), "dataset": str(scale.dataset),
                  "files": spec.files,
                  "formats": list(scale.formats), "parallelism": scale.parallelism,
                  "repeat": scale.repeat},
        "input": {"bytes": generated.bytes, "generate_seconds": generated.seconds,
                  "reference_users": reference_users},
        "checkpoint_interval_s": CHECKPOINT_INTERVAL,
        "in_process_limit": {
            "how": "one thread in the benchmark process: every file read with Arrow "
                   "(use_threads=False, Arrow's pools set to one thread) and grouped by "
                   "user (sum and count of amount), the per-file partials merged by one "
                   "more group-by; reading included, no exchange, no state store, no "
                   "checkpoint, no output; the two-core limit is twice its rate",
            **{fmt: {**dataclasses.asdict(limit), "records_per_second":
                     limit.records_per_second} for fmt, limit in limits.items()}},
        "ours": {"entrypoint": ENTRYPOINT, "how": "untuned: the files source's default "
                                                  "batch size, parallelism "
                                                  f"{scale.parallelism}, checkpoints every "
                                                  f"{CHECKPOINT_INTERVAL:g} s"},
        **{BASELINE_KEYS[search]: {
            fmt: {"how": _baseline_text(fmt, search, tunings[fmt][search],
                                        max_files[fmt][search], spec.file_records),
                  "warmup_batches": SS_WARMUP_BATCHES,
                  "max_files_per_trigger": max_files[fmt][search],
                  "tuning": tuning_record(tunings[fmt][search])}
            for fmt in scale.formats} for search in BASELINES},
        "freshness": {fmt: [{"interval_s": row.interval, "ours_steady": row.ours_steady,
                             "ss_records_per_second": row.ss.records_per_second,
                             "ss_reading": str(row.ss.reading), "ratio": row.ratio}
                            for row in freshness[fmt]] for fmt in scale.formats},
        "runs": runs,
        "medians": {fmt: {**dataclasses.asdict(res), "limit_two_cores": res.limit_two_cores}
                    for fmt, res in results.items()},
        "minutes": minutes, "table": table,
    }
    write_result(scale.result_name, data)
    entries: dict[str, dict[str, Any]] = {}
    scale_note = (f"{scale.dataset}: {spec.records:,} records, {spec.keys:,} users at Zipf "
                  f"{spec.skew:g}, {amounts} amounts, files of {spec.file_records:,}")
    for fmt, res in results.items():
        entries[f"{scale.summary_prefix}_{fmt}_ratio_steady_vs_structured_streaming"] = target_entry(
            value=res.ratio_steady, target=TARGET_STEADY,
            met=res.ratio_steady >= TARGET_STEADY, baseline=res.ss_steady,
            unit=f"x (ours / SS, steady records/s, count+sum+mean per string user from "
                 f"{fmt} files, both exactly-once Parquet)",
            note=f"ours {res.ours_steady:,.0f} records/s; {scale_note}; SS at its fastest, "
                 f"maxFilesPerTrigger {max_files[fmt]['throughput']}")
        entries[f"{scale.summary_prefix}_{fmt}_ratio_end_to_end_vs_structured_streaming"] = target_entry(
            value=res.ratio_end_to_end, target=TARGET_WHOLE,
            met=res.ratio_end_to_end >= TARGET_WHOLE, baseline=res.ss_end_to_end_s,
            unit=f"x (SS's seconds / ours, command start to output committed, SS at its "
                 f"fastest, from {fmt} files; SS's session start plus its measured query, "
                 f"its JVM warmed by a query between them)",
            note=f"ours {res.ours_end_to_end_s:.1f} s (start-up {res.ours_start_up_s:.1f} s, "
                 f"shutdown after {res.ours_shut_down_s:.1f} s); {scale_note}")
        entries[f"{scale.summary_prefix}_{fmt}_ratio_steady_vs_structured_streaming_at_interval"] = \
            target_entry(
                value=res.ratio_steady_at_interval, target=None, met=None,
                baseline=res.ss_steady_at_interval,
                unit=f"x (ours / SS at the fastest size whose batches fit "
                     f"{CHECKPOINT_INTERVAL:g} s, steady records/s from {fmt} files)",
                note=f"SS maxFilesPerTrigger {max_files[fmt]['interval']}; {scale_note}")
        for row in freshness[fmt]:
            if row.ratio is None:
                continue
            entries[f"{scale.summary_prefix}_{fmt}_ratio_steady_at_{row.interval:g}s_freshness"] = \
                target_entry(
                    value=row.ratio, target=None, met=None,
                    baseline=row.ss.records_per_second,
                    unit=f"x (ours with checkpoints every {row.interval:g} s / SS with "
                         f"batches of {row.interval:g} s, steady records/s from {fmt} files)",
                    note=f"SS's rate {row.ss.reading} on its searches' curve; {scale_note}")
        entries[f"{scale.summary_prefix}_{fmt}_fraction_of_in_process_limit"] = target_entry(
            value=res.fraction_of_limit, target=TARGET_LIMIT,
            met=res.fraction_of_limit >= TARGET_LIMIT, baseline=res.limit_two_cores,
            unit=f"ours steady records/s / twice the one-core in-process Arrow read + "
                 f"group-by rate ({fmt})",
            note=f"one core {res.limit_one_core:,.0f} records/s; {scale_note}")
    update_summary(entries)
    return data


def _plot(results: dict[str, FormatResult], *, name: str, dataset: Dataset) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 4), squeeze=False)
    for ax, (fmt, res) in zip(axes[0], results.items(), strict=True):
        labels = ["ours\nsteady", "SS\nsteady", "ours\nwhole", "SS\nwhole", "limit\n2 cores"]
        values = [res.ours_steady, res.ss_steady, res.ours_whole, res.ss_whole,
                  res.limit_two_cores]
        colors = ["tab:blue", "tab:orange", "tab:blue", "tab:orange", "tab:grey"]
        ax.bar(labels, values, color=colors)
        ax.set_ylabel("records/s (medians)")
        ax.set_title(f"{fmt}: ours {res.ratio_steady:.1f}x SS at its fastest, steady, "
                     f"{res.fraction_of_limit:.2f} of the limit", fontsize=9)
    fig.suptitle(f"{dataset}: count + sum + mean per Zipf string user, exactly-once Parquet "
                 f"output")
    fig.tight_layout()
    fig.savefig(plot_path(name))
    plt.close(fig)


def _plot_freshness(results: dict[str, FormatResult],
                    curves: dict[str, tuple[CurvePoint, ...]],
                    freshness: dict[str, list[FreshnessRow]], *, name: str) -> None:
    """Structured Streaming's rate against its batch time, and ours at each checkpoint
    interval: the comparison at matched freshness, as a picture."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 4), squeeze=False)
    for ax, (fmt, res) in zip(axes[0], results.items(), strict=True):
        ss_curve = curves[fmt]
        ax.plot([p.batch_seconds for p in ss_curve], [p.records_per_second for p in ss_curve],
                "o-", color="tab:orange", label="SS, by batch time (its searches)")
        ours = [(CHECKPOINT_INTERVAL, res.ours_steady),
                *((r.interval, r.ours_steady) for r in freshness[fmt])]
        ax.plot([t for t, _ in ours], [v for _, v in ours], "s", color="tab:blue",
                label="ours, by checkpoint interval")
        ax.set_xscale("log")
        ax.set_xlabel("seconds between checkpoints (SS: batch time)")
        ax.set_ylabel("records/s, steady")
        ax.set_ylim(bottom=0)
        ax.set_title(f"{fmt}", fontsize=10)
        ax.legend(fontsize=8)
    fig.suptitle("matched freshness: rate against the time between checkpoints")
    fig.tight_layout()
    fig.savefig(plot_path(f"{name}-freshness"))
    plt.close(fig)
