"""Large keyed state in Structured Streaming's RocksDB store with changelog checkpointing.

The baseline for the large-state benchmark: N keys, each holding a value of V
bytes (about N*V bytes of state), first filled, then 1 % of the keys changed
per micro-batch. Per checkpoint it measures what the engine reports (the
state commit time, RocksDB's commit latencies and copy counters), the bytes
added to the checkpoint directory (walked before and after each batch, so the
number does not depend on the engine's own accounting) and the whole batch;
then the restore: the query stopped and started again on the same checkpoint
in the same session, and in a new process (new JVM, new SparkSession), timed
to the end of the first batch, state load included.

The query, ``local[P]`` with ``spark.sql.shuffle.partitions = P``:
``RocksDBStateStoreProvider`` with
``spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled=true``,
``groupBy(key).agg(last(payload))`` (the engine's own aggregation: its state
row is the key's latest V-byte value, no Python per key), ``outputMode
("update")`` into the ``noop`` sink, ``trigger(processingTime="1 second")``.

The source is a directory of tiny JSON control files read by the file source
with ``maxFilesPerTrigger=1``, written one at a time by the benchmark: each
names key ranges and a round; the query expands them with
``explode(sequence(start, end))`` and gives every key a fresh
``randstr(V)`` payload (random letters and digits: RocksDB's LZ4 cannot
shrink them, so the state on disk is as large as the state). Why not
``rate-micro-batch``: its batch size is fixed, so filling 100x the keys of an
update would take 100 batches. Why not ``availableNow``: it ends the query
after each batch, and every batch would then be a restore. Writing the next
file only after the previous batch completed keeps exactly one batch per
control file, and makes the checkpoint directory quiet between batches except
for RocksDB's background snapshot upload (the maintenance task), whose bytes
are counted separately.

One Spark run per process: ``python -m bench ss-rocksdb-state`` runs the
measured query in a child process (``python -m bench.ss_rocksdb_state``), then
a second child restores from the same checkpoint. Each prints one
``SSROCKS <json>`` line, a :class:`WorkerReport` of this module's version.
Baseline in the same run: the same bytes as one plain file write + fsync.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import (
    BenchmarkError,
    fresh_dir,
    median,
    percentile,
    plot_path,
    print_table,
    pyplot,
    python_env,
    remove_dir,
    require_free_space,
    write_result,
)

NAME = "ss-rocksdb-state"
VERSION = 1
RESULT_PREFIX = "SSROCKS "
PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
TRIGGER_SECONDS = 1.0
RANDSTR_SEED = 7
GIB = 1024 ** 3
MIB = 1024 ** 2
WANTED_METRICS = (
    "rocksdbCommitCheckpointLatency", "rocksdbCommitFileSyncLatencyMs",
    "rocksdbCommitFlushLatency", "rocksdbCommitCompactLatency",
    "rocksdbChangeLogWriterCommitLatencyMs", "rocksdbFilesCopied", "rocksdbBytesCopied",
    "rocksdbLoadLatencyMs", "rocksdbLoadFromSnapshotLatencyMs",
    "rocksdbReplayChangeLogLatencyMs", "rocksdbNumReplayChangelogFiles",
    "rocksdbNumLoadedFromDfs", "rocksdbSstFileSize",
)


class ReportFormatError(ValueError):
    """A worker printed a report this benchmark cannot read."""


# ---------------------------------------------------------------- wire format


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointBytes:
    """Bytes that appeared in the checkpoint directory, by what wrote them.

    ``changelog``: RocksDB changelog files (the per-batch checkpoint of
    changelog checkpointing); ``snapshot``: snapshot zips and SST files (the
    background upload); ``log``: the query's offset, commit and source logs
    and metadata; ``other``: anything else (temporary files caught mid-write).
    Hadoop's ``.crc`` side files count with the file they check.
    """

    changelog: int
    snapshot: int
    log: int
    other: int

    @property
    def total(self) -> int:
        return self.changelog + self.snapshot + self.log + self.other

    @property
    def per_batch(self) -> int:
        """What the batch itself wrote: everything but the background snapshot upload."""
        return self.changelog + self.log + self.other


@dataclasses.dataclass(frozen=True, kw_only=True)
class BatchReport:
    """One micro-batch: Spark's progress for it and the checkpoint bytes it added.

    Times and counters of the state operator are summed over the P state
    store instances (that is how Spark aggregates them); ``None`` where this
    Spark version does not report the metric.
    """

    batch_id: int
    phase: str
    """``fill``, ``update`` or ``restore``."""
    keys_written: int
    state_rows: int
    duration_ms: float
    """``durationMs.triggerExecution``: the whole batch."""
    add_batch_ms: float
    commit_ms: float
    """``stateOperators[0].commitTimeMs``: the state commit, on the batch's critical path."""
    changelog_commit_ms: float | None
    file_sync_ms: float | None
    checkpoint_ms: float | None
    flush_ms: float | None
    compact_ms: float | None
    files_copied: int | None
    """RocksDB's counters of its last snapshot upload: they repeat in every later batch."""
    bytes_copied: int | None
    load_ms: float | None
    load_from_snapshot_ms: float | None
    replay_changelog_ms: float | None
    replayed_changelog_files: int | None
    loaded_from_dfs: int | None
    sst_bytes: int | None
    memory_bytes: int
    ended_at: float
    """Epoch seconds: the batch's trigger timestamp plus its duration."""
    added: CheckpointBytes


@dataclasses.dataclass(frozen=True, kw_only=True)
class RestoreReport:
    """A query started again on an existing checkpoint, timed to its first completed batch."""

    kind: str
    """``same-session`` (query stopped and started) or ``new-process`` (new JVM and session)."""
    seconds_to_first_batch: float
    """From ``writeStream.start()`` to the end of the first batch (state load included)."""
    seconds_from_launch: float | None
    """New process only: from launching the process to the end of the first batch."""
    batch: BatchReport


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkerReport:
    """What one worker process measured."""

    spark_version: str
    keys: int
    value_bytes: int
    parallelism: int
    batches: tuple[BatchReport, ...]
    restores: tuple[RestoreReport, ...]
    checkpoint_bytes_after_fill: int
    checkpoint_bytes_at_end: int
    metrics_missing: tuple[str, ...]
    version: int = VERSION


def dump(report: WorkerReport) -> str:
    return RESULT_PREFIX + json.dumps(dataclasses.asdict(report))


def _optional(value: Any, kind: type) -> Any:
    return None if value is None else kind(value)


def _batch(data: dict[str, Any]) -> BatchReport:
    added = data["added"]
    return BatchReport(
        batch_id=int(data["batch_id"]), phase=str(data["phase"]),
        keys_written=int(data["keys_written"]), state_rows=int(data["state_rows"]),
        duration_ms=float(data["duration_ms"]), add_batch_ms=float(data["add_batch_ms"]),
        commit_ms=float(data["commit_ms"]),
        changelog_commit_ms=_optional(data["changelog_commit_ms"], float),
        file_sync_ms=_optional(data["file_sync_ms"], float),
        checkpoint_ms=_optional(data["checkpoint_ms"], float),
        flush_ms=_optional(data["flush_ms"], float),
        compact_ms=_optional(data["compact_ms"], float),
        files_copied=_optional(data["files_copied"], int),
        bytes_copied=_optional(data["bytes_copied"], int),
        load_ms=_optional(data["load_ms"], float),
        load_from_snapshot_ms=_optional(data["load_from_snapshot_ms"], float),
        replay_changelog_ms=_optional(data["replay_changelog_ms"], float),
        replayed_changelog_files=_optional(data["replayed_changelog_files"], int),
        loaded_from_dfs=_optional(data["loaded_from_dfs"], int),
        sst_bytes=_optional(data["sst_bytes"], int),
        memory_bytes=int(data["memory_bytes"]), ended_at=float(data["ended_at"]),
        added=CheckpointBytes(changelog=int(added["changelog"]),
                              snapshot=int(added["snapshot"]), log=int(added["log"]),
                              other=int(added["other"])))


def parse(line: str) -> WorkerReport:
    """A worker's ``SSROCKS`` line; a report of another version is a clear error."""
    try:
        data = json.loads(line[len(RESULT_PREFIX):])
        if data.get("version") != VERSION:
            raise ReportFormatError(f"worker report version {data.get('version')!r}, "
                                    f"this benchmark reads version {VERSION}")
        return WorkerReport(
            spark_version=str(data["spark_version"]), keys=int(data["keys"]),
            value_bytes=int(data["value_bytes"]), parallelism=int(data["parallelism"]),
            batches=tuple(_batch(b) for b in data["batches"]),
            restores=tuple(RestoreReport(
                kind=str(r["kind"]),
                seconds_to_first_batch=float(r["seconds_to_first_batch"]),
                seconds_from_launch=_optional(r["seconds_from_launch"], float),
                batch=_batch(r["batch"])) for r in data["restores"]),
            checkpoint_bytes_after_fill=int(data["checkpoint_bytes_after_fill"]),
            checkpoint_bytes_at_end=int(data["checkpoint_bytes_at_end"]),
            metrics_missing=tuple(str(m) for m in data["metrics_missing"]))
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, ReportFormatError):
            raise
        raise ReportFormatError(f"unreadable worker report: {exc}") from exc


# ---------------------------------------------------------------- the input


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plan:
    """Which keys each control file writes: the fill in chunks, then 1 % per update."""

    keys: int
    fill_keys_per_batch: int
    update_keys: int
    parallelism: int

    @property
    def fill_batches(self) -> int:
        return -(-self.keys // self.fill_keys_per_batch)

    def ranges(self, index: int) -> list[tuple[int, int]]:
        """``(start, count)`` key ranges of control file ``index`` (0-based).

        Files ``0 .. fill_batches-1`` fill the keys in order; file
        ``fill_batches + r`` is update ``r``, the next ``update_keys`` keys
        after update ``r - 1``'s, wrapping around, so every key is changed once
        before any key is changed twice.
        """
        if index < self.fill_batches:
            start = index * self.fill_keys_per_batch
            return [(start, min(self.fill_keys_per_batch, self.keys - start))]
        start = ((index - self.fill_batches) * self.update_keys) % self.keys
        first = min(self.update_keys, self.keys - start)
        ranges = [(start, first)]
        if first < self.update_keys:
            ranges.append((0, self.update_keys - first))
        return ranges

    def rows(self, index: int) -> list[dict[str, int]]:
        """The control rows: each range cut into P pieces, so P tasks expand and fill them."""
        rows = []
        for start, count in self.ranges(index):
            piece = -(-count // self.parallelism)
            for offset in range(0, count, piece):
                rows.append({"start": start + offset, "count": min(piece, count - offset),
                             "round": index})
        return rows


def write_control_file(*, inbox: Path, plan: Plan, index: int) -> int:
    """Write control file ``index`` atomically (rename); the number of keys it writes."""
    rows = plan.rows(index)
    staging = inbox.parent / f".control-{index:06d}.json"
    staging.write_text("".join(json.dumps(r) + "\n" for r in rows))
    staging.rename(inbox / f"control-{index:06d}.json")
    return sum(r["count"] for r in rows)


# ---------------------------------------------------------------- the query


def _session(*, parallelism: int, maintenance_seconds: float, local_dir: Path) -> Any:
    """Spark with the tuned RocksDB provider; its working copies of the state (``local_dir``)
    in the run's folder, so they go with it even when the worker is killed."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.appName("bench-ss-rocksdb-state")
             .master(f"local[{parallelism}]")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.local.dir", str(local_dir))
             .config("spark.driver.memory", "2g")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.sql.shuffle.partitions", str(parallelism))
             .config("spark.sql.streaming.stateStore.providerClass", PROVIDER)
             .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
                     "true")
             .config("spark.sql.streaming.stateStore.maintenanceInterval",
                     f"{int(maintenance_seconds * 1000)}ms")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _start(spark: Any, *, inbox: Path, checkpoint: Path, value_bytes: int,
           parallelism: int) -> Any:
    from pyspark.sql import functions as F

    control = (spark.readStream.schema("start long, count long, round long")
               .option("maxFilesPerTrigger", 1).json(str(inbox)))
    keys = (control.repartition(parallelism)
            .select(F.explode(F.sequence(F.col("start"), F.col("start") + F.col("count") - 1))
                    .alias("key")))
    values = keys.select("key", F.randstr(F.lit(value_bytes), F.lit(RANDSTR_SEED))
                         .alias("payload"))
    latest = values.groupBy("key").agg(F.last("payload").alias("payload"))
    return (latest.writeStream.outputMode("update").format("noop")
            .trigger(processingTime=f"{TRIGGER_SECONDS:g} seconds")
            .option("checkpointLocation", str(checkpoint)).start())


def _wait_for_batch(query: Any, *, batch_id: int, deadline: float) -> dict[str, Any]:
    """The progress of micro-batch ``batch_id`` once it has completed."""
    while True:
        for progress in reversed(query.recentProgress):
            if progress.get("batchId") == batch_id and progress.get("numInputRows", 0) > 0:
                found: dict[str, Any] = progress
                return found
        if query.exception() is not None:
            raise BenchmarkError(benchmark=NAME, problem=f"the query failed: {query.exception()}")
        if time.monotonic() > deadline:
            raise BenchmarkError(benchmark=NAME, problem=f"micro-batch {batch_id} did not "
                                 "complete before the deadline; use a smaller scale or a "
                                 "longer --timeout")
        time.sleep(0.1)


def _kind_of(relative: Path) -> str:
    name = relative.name
    if name.startswith(".") and name.endswith(".crc"):
        name = name[1:-4]
    parts = relative.parts
    if parts and parts[0] == "state":
        if name.endswith(".changelog"):
            return "changelog"
        if name.endswith((".zip", ".sst")):
            return "snapshot"
        if "_metadata" in parts:
            return "log"
        return "other"
    if parts and parts[0] in ("offsets", "commits", "sources", "metadata"):
        return "log"
    return "other"


def walk(checkpoint: Path) -> dict[str, tuple[str, int]]:
    """Every file under the checkpoint directory: its kind and size."""
    files: dict[str, tuple[str, int]] = {}
    for root, _, names in os.walk(checkpoint):
        for name in names:
            path = Path(root) / name
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue
            relative = path.relative_to(checkpoint)
            files[str(relative)] = (_kind_of(relative), size)
    return files


def added_bytes(before: dict[str, tuple[str, int]],
                after: dict[str, tuple[str, int]]) -> CheckpointBytes:
    """Bytes of files that are new or grew between two walks, by kind."""
    sums = {"changelog": 0, "snapshot": 0, "log": 0, "other": 0}
    for path, (kind, size) in after.items():
        grown = size - before.get(path, (kind, 0))[1]
        if grown > 0:
            sums[kind] += grown
    return CheckpointBytes(**sums)


def _metric(metrics: dict[str, Any], name: str, kind: type) -> Any:
    return kind(metrics[name]) if name in metrics else None


def batch_report(progress: dict[str, Any], *, phase: str, keys_written: int,
                 added: CheckpointBytes) -> BatchReport:
    state = progress["stateOperators"][0]
    metrics: dict[str, Any] = state.get("customMetrics", {})
    durations = progress["durationMs"]
    duration = float(durations["triggerExecution"])
    started = datetime.datetime.fromisoformat(str(progress["timestamp"]).replace("Z", "+00:00"))
    return BatchReport(
        batch_id=int(progress["batchId"]), phase=phase, keys_written=keys_written,
        state_rows=int(state["numRowsTotal"]), duration_ms=duration,
        add_batch_ms=float(durations.get("addBatch", 0.0)),
        commit_ms=float(state["commitTimeMs"]),
        changelog_commit_ms=_metric(metrics, "rocksdbChangeLogWriterCommitLatencyMs", float),
        file_sync_ms=_metric(metrics, "rocksdbCommitFileSyncLatencyMs", float),
        checkpoint_ms=_metric(metrics, "rocksdbCommitCheckpointLatency", float),
        flush_ms=_metric(metrics, "rocksdbCommitFlushLatency", float),
        compact_ms=_metric(metrics, "rocksdbCommitCompactLatency", float),
        files_copied=_metric(metrics, "rocksdbFilesCopied", int),
        bytes_copied=_metric(metrics, "rocksdbBytesCopied", int),
        load_ms=_metric(metrics, "rocksdbLoadLatencyMs", float),
        load_from_snapshot_ms=_metric(metrics, "rocksdbLoadFromSnapshotLatencyMs", float),
        replay_changelog_ms=_metric(metrics, "rocksdbReplayChangeLogLatencyMs", float),
        replayed_changelog_files=_metric(metrics, "rocksdbNumReplayChangelogFiles", int),
        loaded_from_dfs=_metric(metrics, "rocksdbNumLoadedFromDfs", int),
        sst_bytes=_metric(metrics, "rocksdbSstFileSize", int),
        memory_bytes=int(state.get("memoryUsedBytes", 0)),
        ended_at=started.timestamp() + duration / 1000.0, added=added)


@dataclasses.dataclass(kw_only=True)
class Run:
    """A query on the benchmark's input and checkpoint directories, fed one file at a time."""

    query: Any
    plan: Plan
    inbox: Path
    checkpoint: Path
    deadline: float
    next_file: int
    next_batch: int

    def one_batch(self, *, phase: str) -> BatchReport:
        """Write the next control file and wait for its micro-batch."""
        before = walk(self.checkpoint)
        keys = write_control_file(inbox=self.inbox, plan=self.plan, index=self.next_file)
        progress = _wait_for_batch(self.query, batch_id=self.next_batch,
                                   deadline=self.deadline)
        self.next_file += 1
        self.next_batch += 1
        return batch_report(progress, phase=phase, keys_written=keys,
                            added=added_bytes(before, walk(self.checkpoint)))


def _restore(spark: Any, run: Run, *, kind: str, value_bytes: int, parallelism: int,
             launched_at: float | None) -> RestoreReport:
    """Start the query on the existing checkpoint with the next file waiting; time its batch."""
    before = walk(run.checkpoint)
    keys = write_control_file(inbox=run.inbox, plan=run.plan, index=run.next_file)
    started = time.time()
    run.query = _start(spark, inbox=run.inbox, checkpoint=run.checkpoint,
                       value_bytes=value_bytes, parallelism=parallelism)
    progress = _wait_for_batch(run.query, batch_id=run.next_batch, deadline=run.deadline)
    run.next_file += 1
    run.next_batch += 1
    batch = batch_report(progress, phase="restore", keys_written=keys,
                         added=added_bytes(before, walk(run.checkpoint)))
    return RestoreReport(kind=kind, seconds_to_first_batch=batch.ended_at - started,
                         seconds_from_launch=None if launched_at is None
                         else batch.ended_at - launched_at, batch=batch)


def _missing_metrics(batches: Sequence[BatchReport]) -> tuple[str, ...]:
    names = {"rocksdbChangeLogWriterCommitLatencyMs": "changelog_commit_ms",
             "rocksdbCommitFileSyncLatencyMs": "file_sync_ms",
             "rocksdbCommitCheckpointLatency": "checkpoint_ms",
             "rocksdbCommitFlushLatency": "flush_ms", "rocksdbCommitCompactLatency": "compact_ms",
             "rocksdbFilesCopied": "files_copied", "rocksdbBytesCopied": "bytes_copied",
             "rocksdbLoadLatencyMs": "load_ms",
             "rocksdbLoadFromSnapshotLatencyMs": "load_from_snapshot_ms",
             "rocksdbReplayChangeLogLatencyMs": "replay_changelog_ms",
             "rocksdbNumReplayChangelogFiles": "replayed_changelog_files",
             "rocksdbNumLoadedFromDfs": "loaded_from_dfs", "rocksdbSstFileSize": "sst_bytes"}
    return tuple(metric for metric in WANTED_METRICS
                 if all(getattr(b, names[metric]) is None for b in batches))


def _directory_bytes(checkpoint: Path) -> int:
    return sum(size for _, size in walk(checkpoint).values())


def work_main(ns: argparse.Namespace) -> WorkerReport:
    """The worker: fill and update (``measure``), or restore in a fresh process (``restore``)."""
    import pyspark

    work = Path(ns.work)
    inbox, checkpoint = work / "input", work / "checkpoint"
    inbox.mkdir(parents=True, exist_ok=True)
    plan = Plan(keys=ns.keys, fill_keys_per_batch=ns.fill_keys_per_batch,
                update_keys=max(1, round(ns.keys * ns.update_fraction)),
                parallelism=ns.parallelism)
    deadline = time.monotonic() + ns.timeout
    spark = _session(parallelism=ns.parallelism, maintenance_seconds=ns.maintenance_seconds,
                     local_dir=work / f"spark-local-{ns.phase}")
    batches: list[BatchReport] = []
    restores: list[RestoreReport] = []
    after_fill = 0
    try:
        done = len(list(inbox.glob("control-*.json")))
        run = Run(query=None, plan=plan, inbox=inbox, checkpoint=checkpoint, deadline=deadline,
                  next_file=done, next_batch=done)
        if ns.phase == "restore":
            restores.append(_restore(spark, run, kind="new-process", value_bytes=ns.value_bytes,
                                     parallelism=ns.parallelism, launched_at=ns.launched_at))
        else:
            run.query = _start(spark, inbox=inbox, checkpoint=checkpoint,
                               value_bytes=ns.value_bytes, parallelism=ns.parallelism)
            for _ in range(plan.fill_batches):
                batches.append(run.one_batch(phase="fill"))
                print(f"[{NAME}] fill batch {batches[-1].batch_id}: "
                      f"{batches[-1].state_rows:,} keys", file=sys.stderr, flush=True)
            after_fill = _directory_bytes(checkpoint)
            for _ in range(ns.update_batches):
                batches.append(run.one_batch(phase="update"))
            print(f"[{NAME}] {ns.update_batches} updates done; restarting the query",
                  file=sys.stderr, flush=True)
            run.query.stop()
            restores.append(_restore(spark, run, kind="same-session",
                                     value_bytes=ns.value_bytes, parallelism=ns.parallelism,
                                     launched_at=None))
        run.query.stop()
        return WorkerReport(
            spark_version=pyspark.__version__, keys=ns.keys, value_bytes=ns.value_bytes,
            parallelism=ns.parallelism, batches=tuple(batches), restores=tuple(restores),
            checkpoint_bytes_after_fill=after_fill,
            checkpoint_bytes_at_end=_directory_bytes(checkpoint),
            metrics_missing=_missing_metrics([*batches, *(r.batch for r in restores)]))
    finally:
        spark.stop()


# ---------------------------------------------------------------- the benchmark


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--keys", type=int, default=200_000,
                        help="keys of state (default 200,000: about 200 MB at 1 KiB values)")
    parser.add_argument("--value-bytes", type=int, default=1024,
                        help="bytes of each key's value (default 1024)")
    parser.add_argument("--state-gb", type=float, default=None,
                        help="set --keys to hold this many GiB of values (the issue: 5)")
    parser.add_argument("--update-fraction", type=float, default=0.01,
                        help="share of the keys changed per micro-batch (default 0.01)")
    parser.add_argument("--update-batches", type=int, default=20,
                        help="micro-batches measured after the fill (default 20)")
    parser.add_argument("--fill-keys-per-batch", type=int, default=100_000,
                        help="keys written per fill micro-batch (default 100,000)")
    parser.add_argument("--parallelism", type=int, default=os.cpu_count() or 2,
                        help="local[P] and shuffle partitions (default: the cores)")
    parser.add_argument("--maintenance-seconds", type=float, default=60.0,
                        help="spark.sql.streaming.stateStore.maintenanceInterval, when "
                             "snapshots are uploaded (default Spark's 60)")
    parser.add_argument("--no-process-restart", action="store_true",
                        help="skip the restore in a new process")
    parser.add_argument("--floor-repeat", type=int, default=3,
                        help="repetitions of the plain write + fsync (default 3)")
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds each worker may take (default 1800)")


def _validate(ns: argparse.Namespace) -> int:
    """The number of keys, or a clear error for settings that cannot be measured."""
    if ns.value_bytes < 1:
        raise BenchmarkError(benchmark=NAME, problem="--value-bytes must be at least 1")
    keys = int(ns.state_gb * GIB // ns.value_bytes) if ns.state_gb is not None else ns.keys
    if keys < 1:
        raise BenchmarkError(benchmark=NAME, problem="the state must hold at least one key")
    if not 0 < ns.update_fraction <= 1:
        raise BenchmarkError(benchmark=NAME, problem="--update-fraction must be in (0, 1]")
    if ns.update_batches < 1 or ns.fill_keys_per_batch < 1 or ns.parallelism < 1:
        raise BenchmarkError(benchmark=NAME, problem="--update-batches, --fill-keys-per-batch "
                             "and --parallelism must be at least 1")
    return keys


def _worker(*, phase: str, work: Path, keys: int, ns: argparse.Namespace) -> WorkerReport:
    launched_at = time.time()
    command = [sys.executable, "-m", "bench.ss_rocksdb_state", "--phase", phase,
               "--work", str(work), "--keys", str(keys), "--value-bytes", str(ns.value_bytes),
               "--update-fraction", str(ns.update_fraction),
               "--update-batches", str(ns.update_batches),
               "--fill-keys-per-batch", str(ns.fill_keys_per_batch),
               "--parallelism", str(ns.parallelism),
               "--maintenance-seconds", str(ns.maintenance_seconds),
               "--timeout", str(ns.timeout), "--launched-at", repr(launched_at)]
    returncode, output = run_worker_process(command, timeout=ns.timeout + 120,
                                            env=python_env())
    if returncode is None:
        raise BenchmarkError(benchmark=NAME, problem=f"the {phase} worker did not finish "
                             f"within {ns.timeout + 120:.0f} s (stopped)")
    line = next((x for x in output.splitlines() if x.startswith(RESULT_PREFIX)), None)
    if returncode != 0 or line is None:
        tail = "\n".join(x for x in output.splitlines() if "WARN" not in x)[-3000:]
        raise BenchmarkError(benchmark=NAME, problem=f"the {phase} worker exited "
                             f"{returncode}:\n{tail}")
    try:
        return parse(line)
    except ReportFormatError as exc:
        raise BenchmarkError(benchmark=NAME, problem=str(exc)) from None


def run_worker_process(command: Sequence[str], *, timeout: float,
                       env: dict[str, str] | None = None) -> tuple[int | None, str]:
    """Run ``command`` in a session of its own; its exit code (None: stopped at
    ``timeout``) and its output.

    The worker is done when it exits: its output goes to a file, not a pipe, so a
    child still running (PySpark's JVM, shutting down after a large state) cannot
    hold the benchmark, and whatever is left of the session is then stopped.
    """
    with tempfile.TemporaryFile(mode="w+") as output:
        process = subprocess.Popen(list(command), stdout=output, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        try:
            returncode: int | None = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        output.seek(0)
        return returncode, output.read()


def plain_write_seconds(*, directory: Path, size: int, repeat: int) -> float:
    """The floor: ``size`` incompressible bytes as one plain file, written and fsynced."""
    data = os.urandom(min(size, 64 * MIB))
    times = []
    for _ in range(repeat):
        path = directory / "plain.bin"
        started = time.perf_counter()
        with open(path, "wb") as handle:
            left = size
            while left > 0:
                chunk = data[:min(left, len(data))]
                handle.write(chunk)
                left -= len(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        times.append(time.perf_counter() - started)
        path.unlink()
    return median(times)


def _stats(values: Sequence[float]) -> dict[str, float]:
    return {"median": median(values), "p90": percentile(values, 0.9),
            "max": max(values) if values else float("nan"),
            "mean": sum(values) / len(values) if values else float("nan")}


def summarise(report: WorkerReport) -> dict[str, Any]:
    """Medians over the update batches: what one checkpoint costs once the state is full."""
    updates = [b for b in report.batches if b.phase == "update"]
    fills = [b for b in report.batches if b.phase == "fill"]

    def metric(name: str) -> dict[str, float] | None:
        values = [getattr(b, name) for b in updates if getattr(b, name) is not None]
        return _stats([float(v) for v in values]) if values else None

    return {
        "update_batches": len(updates),
        "keys_per_update": updates[0].keys_written if updates else 0,
        "fill": {"batches": len(fills),
                 "seconds": sum(b.duration_ms for b in fills) / 1000.0,
                 "checkpoint_bytes": report.checkpoint_bytes_after_fill,
                 "state_rows": fills[-1].state_rows if fills else 0},
        "checkpoint_bytes_per_batch": _stats([float(b.added.per_batch) for b in updates]),
        "changelog_bytes_per_batch": _stats([float(b.added.changelog) for b in updates]),
        "snapshot_bytes_during_updates": sum(b.added.snapshot for b in updates),
        "intervals_with_snapshot_bytes": sum(1 for b in updates if b.added.snapshot > 0),
        "amortised_bytes_per_batch": (sum(b.added.total for b in updates) / len(updates)
                                      if updates else float("nan")),
        "batch_ms": _stats([b.duration_ms for b in updates]),
        "commit_ms": _stats([b.commit_ms for b in updates]),
        "changelog_commit_ms": metric("changelog_commit_ms"),
        "file_sync_ms": metric("file_sync_ms"),
        "checkpoint_ms": metric("checkpoint_ms"),
        "flush_ms": metric("flush_ms"),
        "compact_ms": metric("compact_ms"),
        "files_copied": metric("files_copied"),
        "bytes_copied": metric("bytes_copied"),
    }


def disk_needed(*, state_bytes: int) -> int:
    """Scratch bytes a run holds at its peak for ``state_bytes`` of logical state.

    Measured at 5 GiB: 45.5 GB at the peak, in the checkpoint directory (9-11 GB of
    changelogs and snapshots) and the two processes' working copies of the state,
    which RocksDB compacts in place; 9 times the state leaves a little room.
    """
    return 9 * state_bytes


def run(ns: argparse.Namespace) -> dict[str, Any]:
    keys = _validate(ns)
    work = fresh_dir(NAME)
    load_before = os.getloadavg()
    try:
        require_free_space(benchmark=NAME, directory=work,
                           needed=disk_needed(state_bytes=keys * ns.value_bytes),
                           what=f"{keys * ns.value_bytes / GIB:.1f} GiB of state")
        print(f"[{NAME}] {keys:,} keys x {ns.value_bytes} B, parallelism {ns.parallelism}",
              flush=True)
        measured = _worker(phase="measure", work=work, keys=keys, ns=ns)
        restores = list(measured.restores)
        if not ns.no_process_restart:
            print(f"[{NAME}] restoring in a new process", flush=True)
            restores += _worker(phase="restore", work=work, keys=keys, ns=ns).restores
        summary = summarise(measured)
        summary["restore_batch_ms_over_median_update"] = {
            r.kind: r.batch.duration_ms - summary["batch_ms"]["median"] for r in restores}
        per_batch = int(summary["checkpoint_bytes_per_batch"]["median"])
        floor = {
            "checkpoint_bytes": per_batch,
            "checkpoint_seconds": plain_write_seconds(directory=work, size=per_batch,
                                                      repeat=ns.floor_repeat),
            "state_bytes": measured.checkpoint_bytes_after_fill,
            "state_seconds": plain_write_seconds(
                directory=work, size=measured.checkpoint_bytes_after_fill,
                repeat=ns.floor_repeat),
        }
    finally:
        remove_dir(work)
    load_after = os.getloadavg()
    data = {
        "scale": {"keys": keys, "value_bytes": ns.value_bytes,
                  "state_bytes_logical": keys * ns.value_bytes,
                  "update_fraction": ns.update_fraction, "update_batches": ns.update_batches,
                  "fill_keys_per_batch": ns.fill_keys_per_batch,
                  "parallelism": ns.parallelism},
        "configuration": {
            "spark_version": measured.spark_version, "master": f"local[{ns.parallelism}]",
            "spark.sql.shuffle.partitions": ns.parallelism,
            "spark.sql.streaming.stateStore.providerClass": PROVIDER,
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": True,
            "spark.sql.streaming.stateStore.maintenanceInterval_seconds":
                ns.maintenance_seconds,
            "trigger": f"processingTime {TRIGGER_SECONDS:g} s, one control file per batch",
            "query": "groupBy(key).agg(last(payload)), update mode, noop sink",
            "payload": f"randstr({ns.value_bytes}, seed {RANDSTR_SEED})",
        },
        "summary": summary,
        "restores": [dataclasses.asdict(r) for r in restores],
        "floor": floor,
        "metrics_missing": list(measured.metrics_missing),
        "batches": [dataclasses.asdict(b) for b in measured.batches],
        "load_average": {"before": load_before, "after": load_after},
    }
    _print(data, restores)
    write_result(NAME, data)
    plot(data)
    return data


def plot(data: dict[str, Any]) -> None:
    """Per batch: the bytes it added to the checkpoint directory by kind, and its commit."""
    plt = pyplot()
    batches = data["batches"]
    ids = [b["batch_id"] for b in batches]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    changelog = [b["added"]["changelog"] / MIB for b in batches]
    snapshot = [b["added"]["snapshot"] / MIB for b in batches]
    top.bar(ids, changelog, label="changelog (the checkpoint)")
    top.bar(ids, snapshot, bottom=changelog, label="snapshot upload (background)")
    top.axhline(data["summary"]["fill"]["checkpoint_bytes"] / MIB, color="grey",
                linestyle=":", label="whole state")
    top.set_yscale("log")
    top.set_ylim(bottom=0.1)
    top.set_ylabel("MiB added")
    top.legend(fontsize=7)
    bottom.plot(ids, [b["duration_ms"] for b in batches], "o-", label="batch")
    bottom.plot(ids, [b["commit_ms"] for b in batches], "x-", label="state commit (sync)")
    bottom.set_yscale("log")
    bottom.set_ylabel("ms")
    bottom.set_xlabel("micro-batch (fill, then 1 % of keys per batch)")
    bottom.legend(fontsize=7)
    top.set_title("Structured Streaming RocksDB, changelog checkpointing")
    fig.tight_layout()
    fig.savefig(plot_path(NAME))
    plt.close(fig)


def _print(data: dict[str, Any], restores: Sequence[RestoreReport]) -> None:
    s = data["summary"]
    floor = data["floor"]
    rows: list[list[Any]] = [
        ["state (checkpoint dir after fill)", f"{s['fill']['checkpoint_bytes'] / MIB:,.1f} MiB",
         f"{s['fill']['batches']} fill batches, {s['fill']['seconds']:.1f} s"],
        ["keys changed per batch", f"{s['keys_per_update']:,}", ""],
        ["bytes per checkpoint (median)",
         f"{s['checkpoint_bytes_per_batch']['median'] / MIB:.2f} MiB",
         f"changelog {s['changelog_bytes_per_batch']['median'] / MIB:.2f} MiB"],
        ["snapshot bytes uploaded in background",
         f"{s['snapshot_bytes_during_updates'] / MIB:.1f} MiB",
         f"in {s['intervals_with_snapshot_bytes']} of {s['update_batches']} intervals"],
        ["amortised bytes per batch", f"{s['amortised_bytes_per_batch'] / MIB:.2f} MiB", ""],
        ["state commit (sync) ms, median", s["commit_ms"]["median"],
         f"p90 {s['commit_ms']['p90']:.0f}, max {s['commit_ms']['max']:.0f}"],
        ["batch ms, median", s["batch_ms"]["median"], f"p90 {s['batch_ms']['p90']:.0f}"],
        ["floor: plain write+fsync of one checkpoint", floor["checkpoint_seconds"] * 1000.0,
         "ms"],
        ["floor: plain write+fsync of the state", floor["state_seconds"], "s"],
    ]
    for restore in restores:
        rows.append([f"restore, {restore.kind}", restore.seconds_to_first_batch,
                     f"s from start(); its batch {restore.batch.duration_ms:,.0f} ms, "
                     f"RocksDB load {restore.batch.load_ms} ms"
                     + (f"; {restore.seconds_from_launch:.1f} s from launch"
                        if restore.seconds_from_launch is not None else "")])
    print_table(f"Structured Streaming RocksDB, changelog checkpointing (load "
                f"{data['load_average']['before'][0]:.1f})", ["measure", "value", "note"], rows)
    if data["metrics_missing"]:
        print(f"not reported by this Spark: {', '.join(data['metrics_missing'])}")


# ---------------------------------------------------------------- worker entry


def _worker_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="one Spark run of the ss-rocksdb-state "
                                                 "benchmark (started by python -m bench)")
    parser.add_argument("--phase", choices=("measure", "restore"), required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--keys", type=int, required=True)
    parser.add_argument("--value-bytes", type=int, required=True)
    parser.add_argument("--update-fraction", type=float, required=True)
    parser.add_argument("--update-batches", type=int, required=True)
    parser.add_argument("--fill-keys-per-batch", type=int, required=True)
    parser.add_argument("--parallelism", type=int, required=True)
    parser.add_argument("--maintenance-seconds", type=float, required=True)
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("--launched-at", type=float, default=None)
    return parser


def main(argv: list[str] | None = None) -> int:
    ns = _worker_parser().parse_args(argv)
    try:
        report = work_main(ns)
    except BenchmarkError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    print(dump(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
