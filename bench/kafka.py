"""Kafka -> count per user -> Kafka: ours exactly-once against Structured Streaming.

One Kafka broker (the project's harness, ``e2e.kafka``) in a scratch folder; an input
topic of P partitions (default 4) filled once, before either system starts, with N
JSON click events (default 1,000,000) of Zipf-distributed users (default 10,000):
``{"user": "u<k>", "page": "/p<m>", "ts": <produce time, ms>}``, keyed by the user.
Both systems read that topic and write ``{"user", "n", "last_ts"}`` per updated user
to an output topic.

* **ours** (``bench.kafka_job:user_counts``): ``sources.kafka(bounded=True,
  value_format="json")``, ``key_by("user").aggregate(n="count", last_ts=("max",
  "ts"))``, exactly-once ``sinks.kafka(key="user")``; parallelism 2, checkpoints every
  1 s, run by ``python -m job_runtime run``;
* **Structured Streaming** (``bench.kafka_ss``): the Kafka source, ``from_json``,
  ``groupBy("user").agg(count, max(ts))``, update mode, the Kafka sink
  (at-least-once), RocksDB state store with changelog checkpointing, ``local[2]``,
  2 shuffle partitions; ``maxOffsetsPerTrigger`` searched for its fastest: one query
  per value over the whole topic, doubled from 1/40 of the topic until the rate rises
  by less than 5% or a quarter of the topic is reached
  (:class:`bench.batch_size_search.ThroughputSearch`), the fastest kept.

**Throughput phase.** Steady records/s: ours, the topic's records over the time from
the first subtask being ready to the last record the keyed stage processed (as the
``throughput`` benchmark); Structured Streaming, ``numInputRows / triggerExecution``
over its batches after two warm-up batches. Whole topic: ours to the end of the final
checkpoint and its Kafka transactions (every output committed); Structured Streaming,
from its first batch's start to its last batch's end. Our output is then read
``read_committed`` and checked: per user, counts strictly increasing and ending at the
user's number of records, ``last_ts`` its newest ``ts`` (a wrong output is no result).

**Latency phase.** A fresh topic per system; a producer writes R records a second
(default 2,000) for W + D seconds (default 5 + 30), each with its produce time as
``ts``, while an unbounded job (ours) or a query with a 1 s processing-time trigger
(Structured Streaming) runs; a ``read_committed`` consumer of the output notes when
each output record arrives. Latency of an input record = the arrival of the first
output of its user whose ``last_ts`` is at or after its ``ts``, minus that ``ts``
(all on one clock: producer and consumer are this process); records of the first W
seconds are left out. p50 and p99 over the rest.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.common import (
    REPO,
    BenchmarkError,
    DriverRun,
    env_int,
    fresh_dir,
    percentile,
    plot_path,
    print_table,
    pyplot,
    python_env,
    remove_dir,
    run_driver,
    target_entry,
    update_summary,
    write_result,
)
from bench.kafka_data import (
    Output,
    OutputWatcher,
    Produced,
    check_exactly_once,
    check_final_counts,
    covered,
    produce_all,
    produce_at_rate,
    read_outputs,
    record_latencies,
    summarize,
)
from bench.kafka_ss import QueryRun

NAME = "kafka"
ENTRYPOINT = "bench.kafka_job:user_counts"
TARGET_RATIO = 3.0
"""The issue's target: ours >= 3x Structured Streaming's records/s, while exactly-once."""
TARGET_P99_SECONDS = 3.0
"""The issue's target: our p99 end-to-end latency <= 3 s at a 1 s checkpoint interval."""
CHECKPOINT_INTERVAL = 1.0
SS_WARMUP_BATCHES = 2
DRAIN_SECONDS = 30.0
"""How long after the last input record the latency phase waits for its output."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Scale:
    records: int
    users: int
    partitions: int
    parallelism: int
    max_offsets: tuple[int, ...]
    """The values to run, or the search's first one."""
    search: bool
    """Whether Structured Streaming's fastest ``maxOffsetsPerTrigger`` is searched
    (``ThroughputSearch``: doubled until the rate rises by less than 5%, up to a quarter
    of the topic) rather than the values given."""
    rate: float
    seconds: float
    warmup: float
    timeout: float


def search_start(records: int) -> int:
    """The first ``maxOffsetsPerTrigger`` the search tries: 1/40 of the topic."""
    return max(1000, round(records / 40 / 1000) * 1000)


def search_limit(records: int) -> int:
    """The largest ``maxOffsetsPerTrigger`` the search tries: a quarter of the topic, so
    that it still leaves batches to measure after the warm-up ones."""
    return max(1000, records // 4 // 1000 * 1000)


def parse_max_offsets(text: str) -> tuple[int, ...]:
    values = tuple(sorted({int(v) for v in text.split(",") if v.strip()}))
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"maxOffsetsPerTrigger values must be positive "
                                          f"numbers, got {text!r}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--records", type=int,
                        default=env_int("BENCH_KAFKA_RECORDS", 1_000_000),
                        help="records pre-produced to the input topic (default 1,000,000)")
    parser.add_argument("--users", type=int, default=10_000,
                        help="distinct users, Zipf-distributed (default 10,000)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--max-offsets", type=parse_max_offsets, default=None,
                        help="Structured Streaming maxOffsetsPerTrigger values to try, "
                             "comma-separated (default: searched for its fastest, doubling "
                             "from 1/40 of --records up to a quarter)")
    parser.add_argument("--rate", type=float, default=2000.0,
                        help="records/s produced in the latency phase (default 2,000)")
    parser.add_argument("--latency-seconds", type=float, default=30.0,
                        help="measured seconds of the latency phase (default 30)")
    parser.add_argument("--latency-warmup", type=float, default=5.0,
                        help="seconds produced first and left out of the latency (default 5)")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds allowed to each run (default 900)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke scale: 100,000 records of 1,000 users, latency 10 s "
                             "after 3 s of warm-up")


def resolve_scale(ns: argparse.Namespace) -> Scale:
    if ns.quick:
        ns.records, ns.users, ns.latency_seconds, ns.latency_warmup = 100_000, 1_000, 10.0, 3.0
    if ns.records < 1000 or ns.users < 1 or ns.partitions < 1 or ns.parallelism < 1:
        raise BenchmarkError(benchmark=NAME, problem="records (>= 1000), users, partitions and "
                                                     "parallelism must be positive")
    return Scale(records=ns.records, users=ns.users, partitions=ns.partitions,
                 parallelism=ns.parallelism,
                 max_offsets=ns.max_offsets or (search_start(ns.records),),
                 search=ns.max_offsets is None,
                 rate=ns.rate, seconds=ns.latency_seconds, warmup=ns.latency_warmup,
                 timeout=ns.timeout)


# ---------------------------------------------------------------------- processes


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (PySpark's worker daemon leaves the driver's process
    group, so killing the group alone can leave it behind)."""
    tree = _children()
    found: list[int] = []
    pending = list(tree.get(pid, []))
    while pending:
        child = pending.pop()
        found.append(child)
        pending.extend(tree.get(child, []))
    return found


def stop_tree(proc: subprocess.Popen[bytes], *, grace: float = 10.0) -> None:
    """SIGTERM the process group ``proc`` leads, SIGKILL it and every descendant after
    ``grace`` seconds."""
    below = descendants(proc.pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for pid in below:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)


def _wait(condition: Callable[[], bool], *, timeout: float, what: str,
          alive: Callable[[], bool], log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if not alive():
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            raise BenchmarkError(benchmark=NAME, problem=f"{what}: the process ended; log "
                                                         f"tail:\n{tail}")
        if time.monotonic() > deadline:
            raise BenchmarkError(benchmark=NAME, problem=f"{what}: not within {timeout:.0f} s")
        time.sleep(0.2)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        return data
    except (OSError, ValueError):
        return {}


def _create_topic(bootstrap: str, name: str, partitions: int) -> str:
    from e2e.kafka.clients import create_topic

    return create_topic(bootstrap=bootstrap, partitions=partitions, name=name)


def _load() -> float:
    return os.getloadavg()[0]


# ---------------------------------------------------------------------- ours


def ours_throughput(*, bootstrap: str, topic: str, scale: Scale, produced: Produced
                    ) -> dict[str, Any]:
    output = _create_topic(bootstrap, "ours-counts", scale.partitions)
    load_before = _load()
    run: DriverRun = run_driver(
        name=f"{NAME}-ours", entrypoint=ENTRYPOINT,
        args={"bootstrap": bootstrap, "input": topic, "output": output, "bounded": True},
        parallelism=scale.parallelism, checkpoint_interval=CHECKPOINT_INTERVAL,
        timeout=scale.timeout)
    t = run.timeline
    if run.records != produced.total:
        raise BenchmarkError(benchmark=NAME, problem=f"ours read {run.records:,} records of "
                                                     f"the topic's {produced.total:,}")
    start = float(t.get("firstReadyAt") or t["firstRecordAt"])
    steady_s = float(t["lastRecordAt"]) - start
    whole_s = float(t["doneAt"]) - start
    outputs, unreadable = read_outputs(bootstrap=bootstrap, topic=output,
                                       timeout=scale.timeout)
    problems = check_exactly_once(produced, outputs)
    sent = int(run.status.get("recordsOut", 0))
    if len(outputs) != sent:
        problems.append(f"{len(outputs):,} output records committed, the sink was handed "
                        f"{sent:,}")
    if unreadable:
        problems.append(f"{unreadable} output values are not output records")
    if problems:
        raise BenchmarkError(benchmark=NAME, problem="ours: the output is not exactly-once; "
                                                     + "; ".join(problems[:10]))
    completed = int(run.status.get("checkpoints", {}).get("completed", 0))
    return {"records": run.records, "steady_seconds": steady_s,
            "steady_records_per_second": run.records / steady_s,
            "whole_seconds": whole_s, "whole_records_per_second": run.records / whole_s,
            "checkpoints_completed": completed, "output_records": len(outputs),
            "exactly_once": True, "wall_seconds": run.wall_seconds,
            "load_before": load_before, "load_after": _load()}


def _driver_command(*, work: Path, args: dict[str, Any], parallelism: int) -> list[str]:
    return [sys.executable, "-m", "job_runtime", "run",
            "--job-name", f"{NAME}-latency", "--job-uid", uuid.uuid4().hex[:8],
            "--entrypoint", ENTRYPOINT, "--python-path", str(REPO),
            "--args-json", json.dumps(args), "--parallelism", str(parallelism),
            "--master", f"local[{parallelism}]",
            "--checkpoint-storage", (work / "checkpoints").as_uri(),
            "--checkpoint-interval", str(CHECKPOINT_INTERVAL),
            "--store", f"file:{work / 'store'}", "--status-file", str(work / "status.json"),
            "--spark-conf", "spark.driver.memory=2g"]


def _measure_latency(*, bootstrap: str, topic: str, output: str, scale: Scale,
                     seed: int) -> tuple[Produced, list[Output]]:
    """Produce at the phase's rate while watching the output, then wait for the drain."""
    watcher = OutputWatcher(bootstrap=bootstrap, topic=output)
    try:
        produced = produce_at_rate(bootstrap=bootstrap, topic=topic, rate=scale.rate,
                                   seconds=scale.seconds, warmup=scale.warmup,
                                   users=scale.users, seed=seed)
        deadline = time.monotonic() + DRAIN_SECONDS
        while not covered(produced.records, watcher.outputs) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        outputs = watcher.stop()
    return produced, outputs


def _latency_result(produced: Produced, outputs: Sequence[Output], *, scale: Scale,
                    load_before: float) -> dict[str, Any]:
    latencies, missing = record_latencies(produced.records, outputs)
    kept = {ts for _, ts in produced.records}
    per_output = [o.seen_at - o.last_ts / 1000.0 for o in outputs if o.last_ts in kept]
    return {"records": produced.total, "measured_records": len(produced.records),
            "produce_seconds": produced.seconds,
            "achieved_rate": produced.total / produced.seconds if produced.seconds else None,
            "output_records": len(outputs), "uncovered_records": missing,
            "p50_seconds": percentile(latencies, 0.50), "p90_seconds": percentile(latencies, 0.90),
            "p99_seconds": percentile(latencies, 0.99),
            "max_seconds": max(latencies, default=float("nan")),
            "per_output_p50_seconds": percentile(per_output, 0.50),
            "per_output_p99_seconds": percentile(per_output, 0.99),
            "rate": scale.rate, "load_before": load_before, "load_after": _load()}


def ours_latency(*, bootstrap: str, work: Path, scale: Scale) -> dict[str, Any]:
    topic = _create_topic(bootstrap, "ours-latency-in", scale.partitions)
    output = _create_topic(bootstrap, "ours-latency-out", scale.partitions)
    run_dir = work / "ours-latency"
    run_dir.mkdir()
    log = run_dir / "driver.log"
    status = run_dir / "status.json"
    command = _driver_command(work=run_dir, parallelism=scale.parallelism, args={
        "bootstrap": bootstrap, "input": topic, "output": output, "bounded": False})
    load_before = _load()
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=python_env(),
                                cwd=run_dir, start_new_session=True)
    try:
        # Running and checkpointing: the first periodic checkpoint completed.
        _wait(lambda: int(_read_json(status).get("checkpoints", {}).get("completed", 0)) >= 1,
              timeout=scale.timeout, what="ours, latency: the first checkpoint",
              alive=lambda: proc.poll() is None, log=log)
        produced, outputs = _measure_latency(bootstrap=bootstrap, topic=topic, output=output,
                                             scale=scale, seed=11)
        if proc.poll() is not None:
            raise BenchmarkError(benchmark=NAME, problem="ours, latency: the driver ended "
                                                         "while records were produced")
        final = _read_json(status)
    finally:
        stop_tree(proc)
    result = _latency_result(produced, outputs, scale=scale, load_before=load_before)
    problems = check_exactly_once(produced, outputs)
    result["exactly_once"] = not problems
    result["problems"] = problems[:10]
    history = final.get("checkpoints", {})
    result["checkpoint_duration_ms_p50"] = history.get("durationMsP50")
    result["checkpoint_duration_ms_p99"] = history.get("durationMsP99")
    return result


# ---------------------------------------------------------------------- Structured Streaming


def _ss_command(mode: str, *, bootstrap: str, topic: str, scale: Scale, jars: str, work: Path,
                extra: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "bench.kafka_ss", mode, "--bootstrap", bootstrap,
            "--input", topic, "--partitions", str(scale.partitions),
            "--parallelism", str(scale.parallelism), "--jars", jars, "--work", str(work),
            "--warmup-batches", str(SS_WARMUP_BATCHES), "--timeout", str(scale.timeout),
            *extra]


def _ss_runs(stdout: str, *, log: Path) -> list[QueryRun]:
    from bench.kafka_ss import RESULT_PREFIX, parse

    lines = [line for line in stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if not lines:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise BenchmarkError(benchmark=NAME, problem=f"Structured Streaming printed no "
                                                     f"result; log tail:\n{tail}")
    return parse(lines[-1])


def steady(run: QueryRun) -> tuple[int, float]:
    """Records and seconds of a throughput query's batches after the warm-up ones, a last
    batch holding under half of ``maxOffsetsPerTrigger`` left out too (the topic's
    remainder: the fixed cost of a batch for a few rows)."""
    batches = list(run.batches[SS_WARMUP_BATCHES:])
    if len(batches) > 1 and batches[-1].rows < run.max_offsets / 2:
        batches.pop()
    return sum(b.rows for b in batches), sum(b.duration_ms for b in batches) / 1000.0


def _ss_rate(run: QueryRun) -> float:
    records, seconds = steady(run)
    return records / seconds if seconds > 0 else float("nan")


def ss_throughput(*, bootstrap: str, topic: str, scale: Scale, jars: str, work: Path,
                  produced: Produced) -> dict[str, Any]:
    run_dir = work / "ss-throughput"
    run_dir.mkdir()
    log = run_dir / "spark.log"
    command = _ss_command("throughput", bootstrap=bootstrap, topic=topic, scale=scale,
                          jars=jars, work=run_dir, extra=[
                              "--records", str(produced.total), "--output-prefix", "ss-counts",
                              "--max-offsets", ",".join(str(v) for v in scale.max_offsets),
                              *(["--search-limit", str(search_limit(produced.total))]
                                if scale.search else [])])
    load_before = _load()
    with open(log, "wb") as err:
        try:
            proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=err, env=python_env(),
                                  cwd=run_dir, timeout=scale.timeout * 2, check=False)
        except subprocess.TimeoutExpired:
            raise BenchmarkError(benchmark=NAME, problem="Structured Streaming's throughput "
                                                         "phase did not finish") from None
    runs = _ss_runs(proc.stdout.decode(errors="replace"), log=log)
    tried = []
    for run in runs:
        records, seconds = steady(run)
        tried.append({"max_offsets_per_trigger": run.max_offsets, "batches": len(run.batches),
                      "records": run.records, "steady_records": records,
                      "steady_seconds": seconds, "steady_records_per_second": _ss_rate(run),
                      "whole_seconds": run.whole_seconds(),
                      "whole_records_per_second": run.whole_rate(),
                      "median_batch_ms": run.median_batch_ms(warmup=SS_WARMUP_BATCHES),
                      "batch_ms": [b.duration_ms for b in run.batches],
                      "batch_rows": [b.rows for b in run.batches]})
    best = max(runs, key=_ss_rate)
    outputs, unreadable = read_outputs(bootstrap=bootstrap, topic=best.output_topic,
                                       timeout=scale.timeout)
    problems, duplicates = check_final_counts(produced, outputs)
    if best.records != produced.total or problems:
        raise BenchmarkError(benchmark=NAME, problem=f"Structured Streaming's output is wrong "
                                                     f"({best.records:,} records read): "
                                                     + "; ".join(problems[:10]))
    chosen = next(t for t in tried if t["max_offsets_per_trigger"] == best.max_offsets)
    return {**chosen, "tried": tried, "output_records": len(outputs),
            "duplicate_updates": duplicates, "unreadable": unreadable,
            "load_before": load_before, "load_after": _load()}


def ss_latency(*, bootstrap: str, work: Path, scale: Scale, jars: str, max_offsets: int,
               warmup_topic: str) -> dict[str, Any]:
    topic = _create_topic(bootstrap, "ss-latency-in", scale.partitions)
    output = _create_topic(bootstrap, "ss-latency-out", scale.partitions)
    run_dir = work / "ss-latency"
    run_dir.mkdir()
    log = run_dir / "spark.log"
    ready, stop = run_dir / "ready", run_dir / "stop"
    command = _ss_command("latency", bootstrap=bootstrap, topic=topic, scale=scale, jars=jars,
                          work=run_dir, extra=[
                              "--output", output, "--max-offsets", str(max_offsets),
                              "--warmup-topic", warmup_topic,
                              "--trigger-seconds", str(CHECKPOINT_INTERVAL),
                              "--ready-file", str(ready), "--stop-file", str(stop)])
    load_before = _load()
    with open(log, "wb") as err, open(run_dir / "stdout", "wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=err, env=python_env(), cwd=run_dir,
                                start_new_session=True)
    try:
        _wait(ready.exists, timeout=scale.timeout, what="Structured Streaming, latency: the "
              "query's first batch", alive=lambda: proc.poll() is None, log=log)
        produced, outputs = _measure_latency(bootstrap=bootstrap, topic=topic, output=output,
                                             scale=scale, seed=11)
        stop.write_text("stop\n")
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=120)
    finally:
        stop_tree(proc)
    runs = _ss_runs((run_dir / "stdout").read_text(errors="replace"), log=log)
    result = _latency_result(produced, outputs, scale=scale, load_before=load_before)
    problems, duplicates = check_final_counts(produced, outputs)
    result["correct_final_counts"] = not problems
    result["duplicate_updates"] = duplicates
    batches = sorted(b.duration_ms for b in runs[0].batches)
    result["batches"] = len(batches)
    result["median_batch_ms"] = batches[len(batches) // 2] if batches else None
    result["batch_details"] = [{"rows": b.rows, "ms": b.duration_ms, "phases": b.phases}
                               for b in runs[0].batches]
    return result


# ---------------------------------------------------------------------- the benchmark


def run(ns: argparse.Namespace) -> dict[str, Any]:
    from bench import spark_kafka_jars
    from e2e.kafka import FetchFailedError, KafkaBroker, MissingToolError, ensure_jars

    scale = resolve_scale(ns)
    try:
        broker_jars = ensure_jars()
        connector = spark_kafka_jars.ensure_jars()
    except (MissingToolError, FetchFailedError, spark_kafka_jars.ConnectorFetchError) as exc:
        raise BenchmarkError(benchmark=NAME, problem=str(exc)) from None
    jars = ",".join(str(j) for j in connector)
    work = fresh_dir(NAME)
    broker = KafkaBroker(work_dir=work / "broker", jar_dir=broker_jars, heap_mb=1024,
                         die_with_parent=True)
    started = time.monotonic()
    try:
        broker.start()
        bootstrap = broker.bootstrap
        topic = _create_topic(bootstrap, "clicks", scale.partitions)
        print(f"[kafka] producing {scale.records:,} records of {scale.users:,} users to "
              f"{scale.partitions} partitions", file=sys.stderr, flush=True)
        produced = produce_all(bootstrap=bootstrap, topic=topic, count=scale.records,
                               users=scale.users)
        print(f"[kafka] produced in {produced.seconds:.1f} s; ours, throughput",
              file=sys.stderr, flush=True)
        ours = ours_throughput(bootstrap=bootstrap, topic=topic, scale=scale, produced=produced)
        print(f"[kafka] ours: {ours['steady_records_per_second']:,.0f} records/s, exactly-once "
              f"output checked; Structured Streaming, throughput", file=sys.stderr, flush=True)
        ss = ss_throughput(bootstrap=bootstrap, topic=topic, scale=scale, jars=jars, work=work,
                           produced=produced)
        print(f"[kafka] Structured Streaming: {ss['steady_records_per_second']:,.0f} records/s "
              f"(maxOffsetsPerTrigger {ss['max_offsets_per_trigger']:,}); ours, latency",
              file=sys.stderr, flush=True)
        ours_lat = ours_latency(bootstrap=bootstrap, work=work, scale=scale)
        print(f"[kafka] ours: p99 {ours_lat['p99_seconds']:.2f} s; Structured Streaming, "
              f"latency", file=sys.stderr, flush=True)
        ss_lat = ss_latency(bootstrap=bootstrap, work=work, scale=scale, jars=jars,
                            max_offsets=int(ss["max_offsets_per_trigger"]), warmup_topic=topic)
    finally:
        broker.stop()
        remove_dir(work)
    return report(scale=scale, produced=produced, ours=ours, ss=ss, ours_lat=ours_lat,
                  ss_lat=ss_lat, connector=[j.name for j in connector],
                  minutes=(time.monotonic() - started) / 60.0)


def report(*, scale: Scale, produced: Produced, ours: dict[str, Any], ss: dict[str, Any],
           ours_lat: dict[str, Any], ss_lat: dict[str, Any], connector: list[str],
           minutes: float) -> dict[str, Any]:
    ratio = ours["steady_records_per_second"] / ss["steady_records_per_second"]
    whole_ratio = ours["whole_records_per_second"] / ss["whole_records_per_second"]
    ratio_met = ratio >= TARGET_RATIO
    p99_met = ours_lat["p99_seconds"] <= TARGET_P99_SECONDS and not ours_lat["uncovered_records"]
    title = (f"kafka: {scale.records:,} records, {scale.users:,} users, {scale.partitions} "
             f"partitions, parallelism {scale.parallelism}; ours exactly-once, SS Kafka sink "
             f"at-least-once (maxOffsetsPerTrigger {ss['max_offsets_per_trigger']:,})")
    rows = [
        ["records/s, steady", ours["steady_records_per_second"],
         ss["steady_records_per_second"], ratio, f">= {TARGET_RATIO:g}x", ratio_met],
        ["records/s, whole topic to output", ours["whole_records_per_second"],
         ss["whole_records_per_second"], whole_ratio, "-", None],
        [f"latency p50 s ({scale.rate:,.0f} records/s)", ours_lat["p50_seconds"],
         ss_lat["p50_seconds"], ours_lat["p50_seconds"] / ss_lat["p50_seconds"], "-", None],
        ["latency p99 s", ours_lat["p99_seconds"], ss_lat["p99_seconds"],
         ours_lat["p99_seconds"] / ss_lat["p99_seconds"], f"<= {TARGET_P99_SECONDS:g} s",
         p99_met],
    ]
    table = print_table(title, ["metric", "ours", "SS", "ours/SS", "target", "met"], rows)
    _plot(ours=ours, ss=ss, ours_lat=ours_lat, ss_lat=ss_lat)
    data = {
        "scale": dataclasses.asdict(scale), "input": summarize(produced.counts),
        "produce_seconds": produced.seconds,
        "checkpoint_interval_s": CHECKPOINT_INTERVAL,
        "structured_streaming": {
            "connector_jars": connector, "sink": "kafka (at-least-once)",
            "state_store": "RocksDB, changelog checkpointing",
            "warmup_batches": SS_WARMUP_BATCHES},
        "throughput": {"ours": ours, "structured_streaming": ss, "ratio_steady": ratio,
                       "ratio_whole_topic": whole_ratio},
        "latency": {"ours": ours_lat, "structured_streaming": ss_lat},
        "minutes": minutes, "table": table,
    }
    write_result(NAME, data)
    update_summary({
        "kafka_throughput_ratio_vs_structured_streaming": target_entry(
            value=ratio, target=TARGET_RATIO, met=ratio_met, baseline=ss["steady_records_per_second"],
            unit="x (ours exactly-once / SS at-least-once Kafka sink, steady records/s, "
                 "Kafka -> count per user -> Kafka)",
            note=f"ours {ours['steady_records_per_second']:,.0f} records/s; "
                 f"{scale.records:,} records; SS maxOffsetsPerTrigger "
                 f"{ss['max_offsets_per_trigger']:,}; whole topic {whole_ratio:.2f}x"),
        "kafka_latency_p99_seconds": target_entry(
            value=ours_lat["p99_seconds"], target=TARGET_P99_SECONDS, met=p99_met,
            baseline=ss_lat["p99_seconds"],
            unit="s from produce to a read_committed consumer seeing the count, 1 s "
                 "checkpoints, exactly-once",
            note=f"{scale.rate:,.0f} records/s for {scale.seconds:g} s; p50 "
                 f"{ours_lat['p50_seconds']:.2f} s; baseline: SS 1 s trigger p99"),
    })
    return data


def _plot(*, ours: dict[str, Any], ss: dict[str, Any], ours_lat: dict[str, Any],
          ss_lat: dict[str, Any]) -> None:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    labels = ["steady", "whole topic"]
    width = 0.38
    xs = range(len(labels))
    left.bar([x - width / 2 for x in xs],
             [ours["steady_records_per_second"], ours["whole_records_per_second"]], width,
             label="ours (exactly-once)")
    left.bar([x + width / 2 for x in xs],
             [ss["steady_records_per_second"], ss["whole_records_per_second"]], width,
             label="SS (at-least-once sink)")
    left.set_xticks(list(xs), labels)
    left.set_ylabel("records/s")
    left.set_title("throughput")
    left.legend(fontsize=8)
    names = ["p50", "p90", "p99"]
    xs = range(len(names))
    right.bar([x - width / 2 for x in xs], [ours_lat[f"{n}_seconds"] for n in names], width,
              label="ours, 1 s checkpoints")
    right.bar([x + width / 2 for x in xs], [ss_lat[f"{n}_seconds"] for n in names], width,
              label="SS, 1 s trigger")
    right.axhline(TARGET_P99_SECONDS, color="red", linestyle="--", label="p99 target")
    right.set_xticks(list(xs), names)
    right.set_ylabel("seconds, produce -> output seen")
    right.set_title("end-to-end latency")
    right.legend(fontsize=8)
    fig.suptitle("Kafka -> count per user -> Kafka")
    fig.tight_layout()
    fig.savefig(plot_path(NAME))
    plt.close(fig)
